"""Portfolio selection for routing: keep the pool's expected routing accuracy.

The kernel selectors (:mod:`._selectors`) cover the embedding space: a model
far from every other is worth a slot even if it never wins a query. This
selector reads what routing reads, each model's predicted P(correct) on a set
of queries, and maximises the expected accuracy of routing among the
selection::

    F(sel) = (1 / n_queries) * sum_q max_{s in sel} P[s, q]

the accuracy routing to the selected model with the highest P(correct) would
have if the predictions were calibrated. F is a facility-location function,
monotone and submodular, so for values >= 0 (probabilities) the greedy
selection is within a factor (1 - 1/e) of the best portfolio of its size
(Nemhauser, Wolsey and Fisher, 1978). For values of any sign the factor
holds on the gain over the baseline ``L = mean_q min_m P[m, q]`` (every
query routed to its worst model), ``F(sel) - L >= (1 - 1/e) (F(opt) - L)``:
shifting all of a query's values by one amount leaves the greedy selection
unchanged but not a ratio of F (F(opt) = 0 with F(sel) < 0 is possible).
No scores are needed: the queries can be any the portfolio should serve,
the training queries for instance.
"""

from numbers import Integral

import numpy as np
from sklearn.base import BaseEstimator, _fit_context
from sklearn.utils._param_validation import Interval
from sklearn.utils.validation import validate_data

from ._params import NoBoolNumbersMixin
from ._selectors import _check_n_select, _scaled, _sum_slack
from ._warnings import warn_external

__all__ = ["ExpectedAccuracySelector"]


def _greedy_expected_accuracy(P, n_select):
    """Greedy maximisation of mean_q max_{s in sel} P[s, q]; validated input.

    ``P`` is finite, of shape (n_models, n_queries), and its largest
    magnitude within 2 ** +-256 (see :func:`_scaled`), so that means of its
    values cannot overflow.

    Returns the selected rows (selection order), F after each addition and
    the mean magnitude of the terms averaged into each F (the scale of its
    rounding).
    """
    n_models, n_queries = P.shape
    slack = _sum_slack(n_queries)
    best = np.full(P.shape[1], -np.inf)
    selected, path, magnitude = [], [], []
    available = np.ones(n_models, dtype=bool)
    for _ in range(n_select):
        # F of each candidate added to the selection; ties go to the lower row.
        # F is a mean of n_queries terms: two candidates whose F is equal in
        # exact arithmetic (the same values in another query order) come out
        # a few ulps apart, so values within rounding of the largest tie.
        terms = np.maximum(P, best)
        value = terms.mean(axis=1)
        value[~available] = -np.inf
        mag = np.abs(terms).mean(axis=1)
        lead = int(np.argmax(value))
        # The rounding of a comparison is that of the two means compared: a
        # candidate of huge magnitude (a utility of -1e12) that is no tie
        # must not widen the tolerance between two others.
        tolerance = slack * np.maximum(mag, mag[lead])
        tied = available & (value >= value[lead] - tolerance)
        # A selected row is never taken again: were rounding ever to leave
        # no candidate within the tolerance, the best available one is.
        m = int(np.argmax(tied)) if tied.any() else lead
        selected.append(m)
        path.append(float(value[m]))
        magnitude.append(float(mag[m]))
        available[m] = False
        best = np.maximum(best, P[m])
    return (
        np.asarray(selected, dtype=np.int64),
        np.asarray(path),
        np.asarray(magnitude),
    )


def _format_f(value):
    """F for a message: four decimals, as an accuracy reads, unless too
    large for them to be readable (a utility of 1e308)."""
    return f"{value:.4f}" if abs(value) < 1e6 else f"{value:.4g}"


class ExpectedAccuracySelector(NoBoolNumbersMixin, BaseEstimator):
    """Select the models that keep the most expected routing accuracy.

    Greedily adds the model that most raises the expected accuracy of routing
    among the selection, ``F(sel) = mean_q max_{s in sel} P[s, q]``, where
    ``P`` holds each model's predicted P(correct) on a set of queries (for
    example ``router.predict_proba(queries).T``). F is monotone submodular,
    so for values >= 0 (probabilities) the selection is within (1 - 1/e) of
    the best portfolio of its size; for values of any sign the factor holds
    on the gain over ``L = mean_q min_m P[m, q]``,
    ``F(sel) - L >= (1 - 1/e) (F(opt) - L)``. Selections are nested (the
    first k models of ``n_select=k+1`` are those of ``n_select=k``). Unlike
    the kernel selectors, which cover the embedding space, it ignores a
    model that is distinct but never the best choice, and it needs no
    scores: only the router's predictions.

    Any finite values work (a utility ``P - cost_weight * cost`` selects for
    expected utility, with the bound on the gain over ``L``; values as large
    as 1e308 are computed on without overflow); F reads as an accuracy when
    they are probabilities.

    Parameters
    ----------
    n_select : int, default=8
        Number of models to select, at most ``n_models``.

    Attributes
    ----------
    selected_indices_ : ndarray of int64, shape (n_select,)
        Rows of the selected models, in selection order.
    objective_ : float
        F of the selection: the mean over queries of the best selected value.
    objective_path_ : ndarray of shape (n_select,)
        F after each addition (the portfolio of the first k models has
        ``objective_path_[k - 1]``).
    full_objective_ : float
        F of the whole pool, the most any portfolio can reach.
    n_features_in_ : int
        Number of queries (columns of ``X``).

    Warns
    -----
    UserWarning
        From ``fit``, where adding a model raised F by nothing (every later
        addition then gains nothing either): the message names the first
        such model, ``"Selecting model <k> of n_select=<n>"``, and that it
        "raised the expected accuracy by nothing"; the rest were ties taken
        in row order, and a smaller ``n_select`` keeps the same F.

    See Also
    --------
    KMedoidsSelector : covers the embedding space (no predictions needed).
    locus_sklearn.inspection.portfolio_curve : routing accuracy of the
        portfolios against random ones, on scored queries.

    Examples
    --------
    >>> import numpy as np
    >>> from locus_sklearn import ExpectedAccuracySelector
    >>> P = np.array([[0.9, 0.9, 0.1, 0.1],   # strong on the first two queries
    ...               [0.8, 0.8, 0.2, 0.2],   # a weaker copy of model 0
    ...               [0.3, 0.3, 0.9, 0.9]])  # the specialist of the others
    >>> selector = ExpectedAccuracySelector(n_select=2).fit(P)
    >>> selector.selected_indices_, selector.objective_
    (array([2, 0]), 0.9)
    """

    _parameter_constraints = {"n_select": [Interval(Integral, 1, None, closed="left")]}

    def __init__(self, n_select=8):
        self.n_select = n_select

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None):
        """Select ``n_select`` models.

        Parameters
        ----------
        X : array-like of shape (n_models, n_queries)
            Each model's predicted P(correct) (or utility) on each query.
        y : None
            Ignored.

        Returns
        -------
        self : object
            The fitted selector.
        """
        X = validate_data(self, X, dtype=np.float64)
        _check_n_select(self.n_select, X.shape[0])
        # Computed on X scaled into range when its magnitudes are extreme (a
        # mean of values of 1e308 overflows to inf, and F's tie tolerance to
        # NaN; the greedy's choices do not depend on X's scale); F, a mean of
        # X's values, is scaled back to X's units.
        X, exponent = _scaled(X)
        self.selected_indices_, path, magnitude = _greedy_expected_accuracy(
            X, self.n_select
        )
        full = float(X.max(axis=0).mean())
        # A step that raises F by no more than rounding picked a tie, in row
        # order: P with one value per model (a router at shrinkage 1 predicts
        # each model's mean score) leaves every step after the first so. The
        # rounding is that of the two F compared, on the selected rows alone:
        # a row never selected does not make a real gain look like none.
        tolerance = _sum_slack(X.shape[1]) * np.maximum(magnitude[1:], magnitude[:-1])
        idle = np.flatnonzero(np.diff(path) <= tolerance)
        if exponent:
            # A mean lies between the smallest and largest value averaged;
            # clipping to them undoes the last ulp of rounding, which at
            # values near 1.8e308 would scale back to inf.
            low, high = np.ldexp(X.min(), exponent), np.ldexp(X.max(), exponent)
            path = np.clip(np.ldexp(path, exponent), low, high)
            full = float(np.clip(np.ldexp(full, exponent), low, high))
        self.objective_path_ = path
        self.objective_ = float(path[-1])
        self.full_objective_ = full
        if len(idle):
            first = int(idle[0]) + 2
            # By submodularity, once a step gains nothing no later one does.
            # The message starts "Selecting model <first> of n_select=" and
            # holds "raised the expected accuracy by nothing": portfolio_curve
            # and the CLI filter or rephrase it by that text.
            later = "" if first == self.n_select else ", and every model after it,"
            warn_external(
                f"Selecting model {first} of n_select={self.n_select}{later} "
                "raised the expected accuracy by nothing (F stays "
                f"{_format_f(self.objective_path_[first - 2])}): the remaining "
                "models all tied, and were taken in row order. If X holds one "
                "value per model on every query (a "
                "LocusRouter at shrinkage_ 1 predicts each model's mean score), "
                "take X from a router with shrinkage=None; else a smaller "
                "n_select keeps the same F.",
                UserWarning,
            )
        return self
