"""Where the library's warnings point: the first frame outside locus_sklearn,
scikit-learn and joblib (``_warnings.external_stacklevel``)."""

import inspect
import os
import sys
import textwrap
import warnings

import pytest

from locus_sklearn._warnings import SKIPPED_PREFIXES, external_stacklevel

# A small "library" on disk: a public function that warns two frames down.
LIBRARY = """
import warnings

from locus_sklearn._warnings import external_stacklevel


def _warn(prefixes):
    warnings.warn("look", UserWarning, stacklevel=external_stacklevel(prefixes))


def _inner(prefixes):
    _warn(prefixes)


def public(prefixes):
    _inner(prefixes)
"""


@pytest.fixture
def library(tmp_path, monkeypatch):
    package = tmp_path / "fakelib"
    package.mkdir()
    (package / "__init__.py").write_text(textwrap.dedent(LIBRARY))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "fakelib", raising=False)
    import fakelib

    return fakelib, str(package) + os.sep


def _caught(function, *args):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        line = inspect.currentframe().f_lineno + 1
        function(*args)
    assert len(caught) == 1
    return caught[0], line


def test_the_warning_points_past_the_skipped_files(library):
    fakelib, prefix = library
    warning, line = _caught(fakelib.public, (prefix,))
    # Three frames of the library skipped: the line of this file that called it.
    assert (warning.filename, warning.lineno) == (__file__, line)


def test_without_prefixes_the_warning_points_at_its_caller(library):
    fakelib, prefix = library
    warning, _ = _caught(fakelib.public, ())
    assert warning.filename == os.path.join(prefix, "__init__.py")
    assert warning.lineno == 8  # the warnings.warn line of _warn


def test_a_library_imported_through_an_unnormalised_path_is_skipped(library):
    fakelib, prefix = library
    # The same file loaded as <tmp>/other/../fakelib/__init__.py (as sys.path
    # entries with ".." import): its code objects carry that path, which does
    # not start with the real prefix <tmp>/fakelib/.
    parent = os.path.dirname(prefix.rstrip(os.sep))
    os.mkdir(os.path.join(parent, "other"))
    roundabout = os.path.join(parent, "other", "..", "fakelib", "__init__.py")
    assert not roundabout.startswith(prefix)
    namespace = {}
    exec(compile(open(roundabout).read(), roundabout, "exec"), namespace)
    warning, line = _caught(namespace["public"], (prefix,))
    assert (warning.filename, warning.lineno) == (__file__, line)


def test_when_every_frame_is_skipped_the_outermost_is_named():
    # Every file name starts with "": nothing is outside; no error, the
    # outermost frame (this process's entry point).
    assert external_stacklevel(("",)) == len(inspect.stack())


def test_the_skipped_packages_are_directories():
    import joblib
    import sklearn

    import locus_sklearn

    for module in (locus_sklearn, sklearn, joblib):
        real = os.path.dirname(os.path.realpath(module.__file__))
        assert real + os.sep in SKIPPED_PREFIXES
    # A sibling whose name only starts with a skipped one is not skipped.
    assert all(prefix.endswith(os.sep) for prefix in SKIPPED_PREFIXES)
    assert not (os.path.dirname(sklearn.__file__) + "_extra" + os.sep).startswith(
        SKIPPED_PREFIXES
    )
