"""Warnings that point at the user's line.

A warning is only useful where the user's code called the library. Counting
frames by hand at each ``warnings.warn`` breaks whenever a wrapper is added
(scikit-learn wraps ``fit`` in ``_fit_context`` and ``transform`` and
``fit_transform`` in ``set_output``'s wrapper, one frame each), and under a
``Pipeline`` or ``cross_validate`` the user's line is several scikit-learn
and joblib frames further out. :func:`warn_external` points the warning at
the first frame outside this package and the libraries it is called through:
what Python 3.12's ``warnings.warn(..., skip_file_prefixes=...)`` does, for
every supported Python.

:func:`ignoring` quiets other packages' warnings where the library may run
in threads (predictions, the ONNX export): narrow filters, under one
process-wide lock.
"""

import contextlib
import functools
import os
import sys
import threading
import warnings

import joblib
import sklearn


def _package_dir(module_file):
    return os.path.dirname(os.path.realpath(module_file)) + os.sep


# The packages whose frames a warning skips: this one, and scikit-learn and
# joblib, through which meta-estimators and model selection call it.
SKIPPED_PREFIXES = tuple(
    _package_dir(f) for f in (__file__, sklearn.__file__, joblib.__file__)
)


@functools.lru_cache(maxsize=1024)
def _real_path(filename):
    # A module imported through a path with ".." or a symbolic link keeps
    # that path in its code objects' file names.
    return os.path.realpath(filename)


def external_stacklevel(prefixes=SKIPPED_PREFIXES):
    """The ``stacklevel`` that makes :func:`warnings.warn`, called by the
    caller of this function, point at the first frame whose file (its real
    path) lies under none of ``prefixes``: 1 is that caller itself. When
    every frame lies under them (the library running itself), the outermost
    frame."""
    frame = sys._getframe(1)  # the caller: warnings.warn's stacklevel 1
    level = 1
    while frame.f_back is not None and _real_path(frame.f_code.co_filename).startswith(
        prefixes
    ):
        frame = frame.f_back
        level += 1
    return level


def warn_external(message, category):
    """:func:`warnings.warn` pointed at the user's code.

    Parameters
    ----------
    message : str
    category : type of Warning

    Examples
    --------
    >>> import warnings
    >>> from locus_sklearn._warnings import SKIPPED_PREFIXES, warn_external
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     warn_external("look here", UserWarning)
    >>> caught[0].filename.startswith(SKIPPED_PREFIXES)  # the caller's file
    False
    """
    warnings.warn(message, category, stacklevel=external_stacklevel())


# Held by every block of this library that changes the process-wide warning
# filters. ``warnings.catch_warnings`` swaps the module-global filter list on
# entry and puts its saved copy back on exit, so two such blocks overlapping
# in two threads can restore each other's filters and leave them in place for
# good. Re-entrant: such a block may run inside another in the same thread.
FILTERS_LOCK = threading.RLock()


@contextlib.contextmanager
def ignoring(*filters):
    """Ignore the warnings that match ``filters`` inside the block.

    The filters are process-wide while the block runs (so keep them narrow:
    a category with a message or a module, never everything), and the
    block holds :data:`FILTERS_LOCK`, so that no two of the library's
    blocks interleave their saving and restoring of the filter list.

    Parameters
    ----------
    *filters : dict
        Keyword arguments of :func:`warnings.filterwarnings` (``message``,
        ``category``, ``module``), one dict per filter.

    Examples
    --------
    >>> import warnings
    >>> from locus_sklearn._warnings import ignoring
    >>> before = list(warnings.filters)
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     with ignoring({"message": "noise", "category": UserWarning}):
    ...         warnings.warn("noise from a dependency", UserWarning)
    ...         warnings.warn("something the user should see", UserWarning)
    >>> [str(w.message) for w in caught]
    ['something the user should see']
    >>> warnings.filters == before
    True
    """
    with FILTERS_LOCK, warnings.catch_warnings():
        for kwargs in filters:
            warnings.filterwarnings("ignore", **kwargs)
        yield
