"""Hyper-parameter checks beyond scikit-learn's constraints: a bool is no number.

``bool`` subclasses ``int``, so scikit-learn's ``Interval(Integral, ...)``
accepts ``True`` as 1: ``LocusEmbedder(max_epochs=True)`` would train one
epoch, and ``KMeansRouter(n_clusters=True)`` would fail deep inside
scikit-learn with a message that names no parameter. A flag passed where a
count or a rate belongs is a mistake, so it is refused by name.

A Python int has no size limit, and scikit-learn's ``Interval`` compares it
without converting it: ``lr=10**400`` or ``batch_size=2**63`` passed, and
failed inside torch or numpy with an error that names no parameter. An int
that no float (for a real-valued parameter) or no int64 (for a count) holds
is refused by name too.
"""

import math
import sys
from numbers import Integral

import numpy as np
from sklearn.utils._param_validation import (
    Interval,
    InvalidParameterError,
    _Booleans,
    _VerboseHelper,
    make_constraint,
)

__all__ = [
    "NoBoolNumbersMixin",
    "NumberInterval",
    "check_no_bool_numbers",
    "check_representable_numbers",
    "short_int",
    "subclass_param_names",
    "unrepresentable_int",
    "validate_random_state",
]

_INT64 = np.iinfo(np.int64)


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
        raise InvalidParameterError(
            f"The {name!r} parameter of {type(estimator).__name__} must be "
            f"{_described(constraints)}. Got {value!r}, a bool, instead."
        )


def _described(constraints):
    """The constraints listed as scikit-learn lists them."""
    return " or ".join(
        [", ".join(map(str, constraints[:-1])), str(constraints[-1])]
        if len(constraints) > 1
        else [str(constraints[0])]
    )


def short_int(value):
    """``value`` for an error message, a huge int as its magnitude.

    The digits of ``10**400`` help no one, and ``str()`` of an int of more
    than 4300 digits raises.

    Examples
    --------
    >>> short_int(2**63), short_int(-(10**400))
    ('9223372036854775808', '-1.000e+400 (an int of about 401 digits)')
    >>> short_int(99996 * 10**36)
    '1.000e+41 (an int of about 42 digits)'
    """
    value = int(value)
    if abs(value) < 10**30:
        return str(value)
    # math.log10 takes an int of any size; a float would overflow.
    digits = math.log10(abs(value))
    exponent = math.floor(digits)
    mantissa = round(10 ** (digits - exponent), 3)
    if mantissa >= 10:  # 9.9996 rounds up: 1.000e+(exponent + 1)
        mantissa, exponent = mantissa / 10, exponent + 1
    sign = "-" if value < 0 else ""
    return f"{sign}{mantissa:.3f}e+{exponent} (an int of about {exponent + 1} digits)"


def unrepresentable_int(value, *, integral):
    """Why no int64 (``integral``) or no float holds the int ``value``, or
    None where one does.

    Examples
    --------
    >>> unrepresentable_int(2**62, integral=True) is None
    True
    >>> unrepresentable_int(2**63, integral=True)
    'an int beyond int64 (at most 9223372036854775807)'
    >>> unrepresentable_int(10**400, integral=False)
    'an int too large for a float (at most 1.8e+308)'
    """
    if integral:
        if _INT64.min <= value <= _INT64.max:
            return None
        return f"an int beyond int64 (at most {_INT64.max})"
    try:
        float(value)
    except OverflowError:
        return f"an int too large for a float (at most {sys.float_info.max:.2g})"
    return None


def check_representable_numbers(estimator):
    """Raise if an int parameter passes its ``Interval`` but no float (for a
    real-valued interval) or no int64 (for an integer one) holds it.

    scikit-learn's :class:`~sklearn.utils._param_validation.Interval`
    compares a Python int without converting it, so ``10**400`` is in
    ``[0, inf)``; torch and numpy, which the value reaches, fail on it
    without naming the parameter. Refused with scikit-learn's
    :class:`~sklearn.utils._param_validation.InvalidParameterError`, in its
    wording. A value another constraint takes as it is is left alone.

    Examples
    --------
    >>> from locus_sklearn import LocusEmbedder
    >>> check_representable_numbers(LocusEmbedder(lr=10**300, batch_size=2**62))
    >>> check_representable_numbers(LocusEmbedder(lr=10**400))
    Traceback (most recent call last):
    ...
    sklearn.utils._param_validation.InvalidParameterError: The 'lr' parameter of LocusEmbedder must be a float in the range (0.0, inf). Got 1.000e+400 (an int of about 401 digits), an int too large for a float (at most 1.8e+308), instead.
    """  # noqa: E501
    params = estimator.get_params(deep=False)
    for name, constraints in estimator._parameter_constraints.items():
        value = params.get(name)
        if (
            constraints == "no_validation"
            or not isinstance(value, Integral)
            or isinstance(value, bool | np.bool_)
        ):
            continue
        constraints = [make_constraint(c) for c in constraints]
        satisfied = [c for c in constraints if c.is_satisfied_by(value)]
        if not all(isinstance(c, Interval) for c in satisfied):
            continue
        for constraint in satisfied:
            why = unrepresentable_int(value, integral=constraint.type is Integral)
            if why is not None:
                raise InvalidParameterError(
                    f"The {name!r} parameter of {type(estimator).__name__} must "
                    f"be {_described(constraints)}. Got {short_int(value)}, "
                    f"{why}, instead."
                )


def validate_random_state(random_state, *, caller):
    """``random_state`` of the public function ``caller``, refused by name
    unless the estimators' ``random_state`` parameter would take it.

    An int in [0, 2**32 - 1], a :class:`numpy.random.RandomState` or None,
    and not a bool (``True`` would seed with 1; the estimators refuse it, see
    :func:`check_no_bool_numbers`). Functions that pass ``random_state`` to
    :func:`~sklearn.utils.check_random_state` otherwise fail inside NumPy or
    scikit-learn, naming no parameter, and take ``True``. Raises
    scikit-learn's :class:`~sklearn.utils._param_validation.InvalidParameterError`
    in the wording of its ``validate_params``.

    Parameters
    ----------
    random_state : object
        The value given.
    caller : str
        Name of the function, for the message.

    Returns
    -------
    random_state : int, RandomState or None
        ``random_state``, unchanged.

    Examples
    --------
    >>> validate_random_state(7, caller="make_model_pool")
    7
    >>> validate_random_state(True, caller="make_model_pool")
    Traceback (most recent call last):
    ...
    sklearn.utils._param_validation.InvalidParameterError: The 'random_state' parameter of make_model_pool must be an int in the range [0, 4294967295], an instance of 'numpy.random.mtrand.RandomState' or None. Got True, a bool, instead.
    """  # noqa: E501
    constraint = make_constraint("random_state")
    if isinstance(random_state, bool | np.bool_):
        got = f"{random_state!r}, a bool,"
    elif constraint.is_satisfied_by(random_state):
        return random_state
    elif isinstance(random_state, Integral):
        got = short_int(random_state)  # 10**5000 has no repr
    else:
        got = repr(random_state)
    raise InvalidParameterError(
        f"The 'random_state' parameter of {caller} must be {constraint}. "
        f"Got {got} instead."
    )


class NoBoolNumbersMixin:
    """Adds :func:`check_no_bool_numbers` and
    :func:`check_representable_numbers` to ``_validate_params``, which
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
        check_representable_numbers(self)


def subclass_param_names(cls, base, *, exclude=()):
    """The parameters of ``cls``'s signature that ``base`` (a class ``cls``
    derives from) lacks, but those in ``exclude``, sorted: a subclass's own,
    which save stores and that subclass's load restores.

    Examples
    --------
    >>> from sklearn.base import BaseEstimator
    >>> class Base(BaseEstimator):
    ...     def __init__(self, a=1):
    ...         self.a = a
    >>> class Wide(Base):
    ...     def __init__(self, a=1, *, b=2, c=3):
    ...         super().__init__(a)
    ...         self.b, self.c = b, c
    >>> subclass_param_names(Wide, Base), subclass_param_names(Wide, Base, exclude=("c",))
    (['b', 'c'], ['b'])
    """
    known = set(base._get_param_names())
    return sorted(
        name
        for name in cls._get_param_names()
        if name not in known and name not in exclude
    )
