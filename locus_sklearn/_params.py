"""Hyper-parameter checks beyond scikit-learn's constraints: a bool is no number.

``bool`` subclasses ``int``, so scikit-learn's ``Interval(Integral, ...)``
accepts ``True`` as 1: ``LocusEmbedder(max_epochs=True)`` would train one
epoch, and ``KMeansRouter(n_clusters=True)`` would fail deep inside
scikit-learn with a message that names no parameter. A flag passed where a
count or a rate belongs is a mistake, so it is refused by name.
"""

import numpy as np
from sklearn.utils._param_validation import (
    Interval,
    InvalidParameterError,
    _Booleans,
    _VerboseHelper,
    make_constraint,
)

__all__ = ["NoBoolNumbersMixin", "NumberInterval", "check_no_bool_numbers"]


class NumberInterval(Interval):
    """An ``Interval`` constraint that refuses bools.

    For ``validate_params`` of public functions, which have no
    ``_validate_params`` for :class:`NoBoolNumbersMixin` to extend.

    Examples
    --------
    >>> from numbers import Integral
    >>> n = NumberInterval(Integral, 1, None, closed="left")
    >>> n.is_satisfied_by(3), n.is_satisfied_by(True)
    (True, False)
    >>> str(n)
    'an int in the range [1, inf) (not a bool)'
    """

    def is_satisfied_by(self, val):
        return not isinstance(val, bool | np.bool_) and super().is_satisfied_by(val)

    def __str__(self):
        # In brackets: scikit-learn lists a parameter's constraints with
        # commas and "or", in which ", not a bool or None" read as if None
        # were refused too.
        return f"{super().__str__()} (not a bool)"


def check_no_bool_numbers(estimator):
    """Raise if a parameter that takes a number (not a flag) is True or False.

    A parameter may be a bool only where its constraints say so
    (``"boolean"``, ``"verbose"``); everywhere else a bool is refused with
    scikit-learn's :class:`~sklearn.utils._param_validation.InvalidParameterError`
    (a ``ValueError`` and a ``TypeError``), in scikit-learn's wording.

    Examples
    --------
    >>> from locus_sklearn.baselines import KNNRouter
    >>> check_no_bool_numbers(KNNRouter(k=5))
    >>> check_no_bool_numbers(KNNRouter(k=True))
    Traceback (most recent call last):
    ...
    sklearn.utils._param_validation.InvalidParameterError: The 'k' parameter of KNNRouter must be an int in the range [1, inf). Got True, a bool, instead.
    """  # noqa: E501
    params = estimator.get_params(deep=False)
    for name, constraints in estimator._parameter_constraints.items():
        value = params.get(name)
        if constraints == "no_validation" or not isinstance(value, bool | np.bool_):
            continue
        constraints = [make_constraint(c) for c in constraints]
        if any(isinstance(c, _Booleans | _VerboseHelper) for c in constraints):
            continue
        described = " or ".join(
            [", ".join(map(str, constraints[:-1])), str(constraints[-1])]
            if len(constraints) > 1
            else [str(constraints[0])]
        )
        raise InvalidParameterError(
            f"The {name!r} parameter of {type(estimator).__name__} must be "
            f"{described}. Got {value!r}, a bool, instead."
        )


class NoBoolNumbersMixin:
    """Adds :func:`check_no_bool_numbers` to ``_validate_params``, which
    scikit-learn's ``_fit_context`` calls at ``fit``.

    Examples
    --------
    >>> from locus_sklearn import LocusEmbedder
    >>> LocusEmbedder(max_epochs=True)._validate_params()
    Traceback (most recent call last):
    ...
    sklearn.utils._param_validation.InvalidParameterError: The 'max_epochs' parameter of LocusEmbedder must be an int in the range [1, inf). Got True, a bool, instead.
    """  # noqa: E501

    def _validate_params(self):
        super()._validate_params()
        check_no_bool_numbers(self)
