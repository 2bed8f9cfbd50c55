"""Fast text and HTML reprs of estimators holding large precomputed encodings.

scikit-learn's repr compares every parameter with its default by ``repr``
and its pretty printer formats each value several times before cutting the
text to about 700 characters: an estimator built with ``encoder=`` a mapping
of 3,000 vectors of 384 floats took about four minutes to print (and its
Jupyter display longer). The estimators of this package print a shallow copy
in which such a mapping is replaced by a one-line summary; the estimator
itself is never changed, since another thread may be using it.

Inside a scikit-learn meta-estimator (a Pipeline, GridSearchCV or
FrozenEstimator), whose repr is scikit-learn's own, the same copy is printed
through two hooks of scikit-learn's pretty printer (see the end of this
module).
"""

import math
from collections.abc import Mapping

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils import _pprint, estimator_html_repr
from sklearn.utils._pprint import _EstimatorPrettyPrinter

__all__ = ["QueryEncodings", "SummaryReprMixin", "summarize_mapping"]

# scikit-learn's printer shows at most 30 entries of a mapping (then "..."),
# so past that the text was never the whole mapping; up to it, a mapping is
# printed as before.
_MAX_MAPPING_ENTRIES = 30
# A mapping of fewer entries is summarised too when one of its values holds
# more numbers than this: an encoding (tens to thousands of them) says
# nothing printed in full, and 30 vectors of 384 floats took seconds to
# print. Short vectors (a worked example's 2 or 3) still print as before.
_MAX_VALUE_ELEMENTS = 10


def summarize_mapping(mapping):
    """One line naming a mapping of vectors by its size, for reprs.

    Examples
    --------
    >>> summarize_mapping({"q1": [3.0, 4.0], "q2": [0.0, 2.0]})
    '2 queries x 2'
    """
    try:
        shape = np.shape(next(iter(mapping.values()))) if mapping else ()
    except (TypeError, ValueError):
        # A ragged or odd first value: the repr still prints (an invalid
        # mapping is refused at fit, with a message a failing repr would hide).
        shape = ()
    return f"{len(mapping)} queries x {' x '.join(map(str, shape)) or '?'}"


class _MappingSummary:
    """Stands for a large mapping parameter in the printed copy."""

    def __init__(self, mapping):
        self._text = f"<{type(mapping).__name__} of {summarize_mapping(mapping)}>"

    def __repr__(self):
        return self._text


class QueryEncodings(dict):
    """A dict of query id -> encoding whose repr is a one-line summary.

    What the dataset loaders return as ``encodings``: it is a plain ``dict``
    in every other respect (``==``, pickling, hashing by joblib, ``encoder=``),
    but it prints as its size, so that scikit-learn's repr of a
    :class:`~sklearn.pipeline.Pipeline` holding it, which this package cannot
    shorten, stays fast.

    Examples
    --------
    >>> enc = QueryEncodings({"q1": [3.0, 4.0], "q2": [0.0, 2.0]})
    >>> enc
    QueryEncodings(2 queries x 2)
    >>> enc == {"q1": [3.0, 4.0], "q2": [0.0, 2.0]}
    True
    """

    __slots__ = ()

    def __repr__(self):
        return f"{type(self).__name__}({summarize_mapping(self)})"


def _n_elements(value):
    """How many numbers ``value`` (a mapping's value) holds: its size for an
    array or tensor, 1 for a scalar or a string, 0 when unknown."""
    if isinstance(value, (str, bytes)):
        return 1
    shape = getattr(value, "shape", None)  # ndarray, tensor, Series
    if shape is None:
        try:
            shape = np.shape(value)
        except (TypeError, ValueError):  # ragged; invalid, refused at fit
            return 0
    try:
        return math.prod(int(n) for n in shape)
    except (TypeError, ValueError):  # an odd object's "shape"
        return 0


def _is_large_mapping(value):
    """Whether ``value`` is a mapping too large to print in full: more
    entries than scikit-learn shows, or a value of many numbers."""
    if len(value) > _MAX_MAPPING_ENTRIES:
        return True
    return any(_n_elements(v) > _MAX_VALUE_ELEMENTS for v in value.values())


def _display_value(value):
    """``value`` as printed: a large mapping summarised, estimators recursed.

    Returns ``value`` itself when nothing in it needs summarising, so that
    ordinary estimators print exactly as scikit-learn prints them.
    """
    if isinstance(value, QueryEncodings):
        return value  # already prints as a summary
    if isinstance(value, Mapping) and _is_large_mapping(value):
        return _MappingSummary(value)
    if isinstance(value, BaseEstimator):
        # Any estimator parameter (LocusRouter's embedder, a FrozenEstimator
        # wrapping one), whether or not of this package.
        return _display_copy(value)
    return value


def _display_copy(estimator):
    """A shallow copy of ``estimator`` with large mapping parameters summarised.

    ``estimator`` itself when there is none.
    """
    if not hasattr(estimator, "__dict__"):
        return estimator  # no attributes to copy (a __slots__ estimator)
    replaced = {}
    for name, value in estimator.get_params(deep=False).items():
        shown = _display_value(value)
        if shown is not value:
            replaced[name] = shown
    if not replaced:
        return estimator
    # Not copy.copy: that goes through __getstate__, which may drop what is
    # printed (LocusEmbedder's drops its accelerator).
    shown = object.__new__(type(estimator))
    vars(shown).update(vars(estimator))
    # scikit-learn estimators store each parameter under its name, which is
    # where get_params() reads it.
    vars(shown).update(replaced)
    return shown


class SummaryReprMixin:
    """Print large mapping parameters (precomputed encodings) as a summary.

    Overrides ``__repr__`` and the HTML repr hooks of scikit-learn's
    ``BaseEstimator`` (``_html_repr``, which ``_repr_html_`` and
    ``_repr_mimebundle_`` call, and ``_get_params_html``) to print a shallow
    copy of the estimator in which every mapping of more than 30 entries or
    with a value of more than 10 numbers (an encoding), here or in a nested
    estimator, is replaced by its size; the estimator is not changed. Inside
    a scikit-learn meta-estimator (a Pipeline step, GridSearchCV's
    estimator), the same copy is printed.
    An estimator without one prints exactly as scikit-learn prints it.

    Examples
    --------
    >>> from locus_sklearn import QueryEncoder
    >>> QueryEncoder({f"q{i}": [1.0, 0.0] for i in range(1000)})
    QueryEncoder(encoder=<dict of 1000 queries x 2>)
    """

    def __repr__(self, N_CHAR_MAX=700):
        return BaseEstimator.__repr__(_display_copy(self), N_CHAR_MAX=N_CHAR_MAX)

    def _html_repr(self):
        return estimator_html_repr(_display_copy(self))

    def _get_params_html(self, deep=True, doc_link=""):
        # The parameter table of the HTML repr, also where scikit-learn draws
        # this estimator as a step of its own (a Pipeline's HTML repr).
        return BaseEstimator._get_params_html(_display_copy(self), deep, doc_link)


def _pprint_summarised(printer, obj, *args):
    """scikit-learn's multi-line layout of a nested estimator, of the copy
    that summarises its large mappings."""
    return _EstimatorPrettyPrinter._pprint_estimator(printer, _display_copy(obj), *args)


# scikit-learn's pretty printer lays out a nested estimator over several lines
# only if it recognises its class's __repr__ (it looks the layout up by the
# __repr__ function in this table): registered so that overriding __repr__
# leaves the text of an estimator inside another (a Pipeline step) as it
# was, printing the summarised copy.
_EstimatorPrettyPrinter._dispatch[SummaryReprMixin.__repr__] = _pprint_summarised


def _summarising_safe_repr(safe_repr):
    """``safe_repr`` (scikit-learn's ``_safe_repr``) printing the summarised
    copy of this package's estimators."""

    def _safe_repr(object, *args, **kwargs):
        if isinstance(object, SummaryReprMixin):
            object = _display_copy(object)
        return safe_repr(object, *args, **kwargs)

    _safe_repr._locus_original = safe_repr
    return _safe_repr


# Besides the table entry above, the one change to scikit-learn. A
# meta-estimator's repr (Pipeline, GridSearchCV, FrozenEstimator:
# scikit-learn's own) first renders the whole tree in one line with the
# module function _safe_repr, which reads each nested estimator's
# get_params() directly and calls itself by its module name, so neither the
# table above nor any method of this package is asked: a mapping of 3,000
# vectors of 384 floats held by a Pipeline step took five minutes to print,
# and its HTML repr (whose text fallback is that repr) four. scikit-learn
# has no hook for it, so the function is wrapped: only this package's
# estimators are replaced (every other object is passed on as it came); a
# reload of this module wraps the original again rather than its wrapper;
# and a scikit-learn without the function is left alone (the table above
# still applies).
if callable(getattr(_pprint, "_safe_repr", None)):
    _pprint._safe_repr = _summarising_safe_repr(
        getattr(_pprint._safe_repr, "_locus_original", _pprint._safe_repr)
    )
