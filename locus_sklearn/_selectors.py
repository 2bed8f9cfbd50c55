"""Portfolio selection on model embeddings: k-center, k-medoids and budget greedy.

Every selector works on the kernel similarity between model embeddings (paper,
appendix E.4)::

    K(z_i, z_j) = exp(-d(z_i, z_j) ** 2 / sigma ** 2)

with ``d`` the cosine or Euclidean distance (or a precomputed distance matrix) and
``sigma`` the median pairwise distance by default. Identical embeddings are at
distance exactly 0 (under the cosine metric, so are embeddings pointing the same
way); a zero embedding, which has no direction, is at cosine distance 1 from
every other one. The objectives are

- k-center: maximise the worst coverage ``min_i max_{s in sel} K(z_i, z_s)``;
- k-medoids and the budget greedy: maximise the total coverage
  ``J(sel) = sum_i max_{s in sel} K(z_i, z_s)``.

Each estimator has a validated public function twin (``k_center_select`` beside
``KCenterSelector``), and both call a private function that assumes validated
input (``_k_center`` on the distance matrix), as scikit-learn pairs
``kmeans_plusplus`` with ``KMeans``.
"""

import math
from collections.abc import Mapping
from numbers import Integral, Real

import numpy as np
import pandas as pd
from sklearn.base import (
    BaseEstimator,
    ClassNamePrefixFeaturesOutMixin,
    ClusterMixin,
    TransformerMixin,
    _fit_context,
)
from sklearn.exceptions import ConvergenceWarning
from sklearn.metrics.pairwise import euclidean_distances
from sklearn.preprocessing import normalize
from sklearn.utils._param_validation import StrOptions, validate_params
from sklearn.utils.validation import check_array, check_is_fitted, validate_data

from ._evals import _preview, check_model_costs
from ._params import (
    NoBoolNumbersMixin,
    NumberInterval,
    check_representable_numbers,
)
from ._tensors import input_eps, untorched
from ._warnings import warn_external

__all__ = [
    "BudgetGreedySelector",
    "KCenterSelector",
    "KMedoidsSelector",
    "budget_greedy_select",
    "k_center_select",
    "k_medoids_select",
]


_METRICS = ("cosine", "euclidean", "precomputed")
# Rounding tolerance per term of a sum of values in [0, 1]; see _sum_slack.
_SUM_RTOL = 4 * np.finfo(np.float64).eps
# Magnitudes within 2 ** +-_SAFE_EXPONENT are computed on as given: their
# squares, and sums of many squares, stay far from float64's under- and
# overflow (2 ** +-1022). Beyond, embeddings and bandwidths are brought into
# range by a power of two, which scales exactly, so the result is what exact
# scaling would give, and ordinary inputs are computed as they always were.
_SAFE_EXPONENT = 256
# Smallest ratio of a positive cost to the largest one that the budget greedy
# ranks (see _check_costs): 2 ** -900, ~1.2e-271.
_COST_RANGE = 2.0**-900
_KERNEL_CONSTRAINTS = {
    "metric": [StrOptions(set(_METRICS))],
    "bandwidth": [
        StrOptions({"median"}),
        NumberInterval(Real, 0, None, closed="neither"),
    ],
}


# --------------------------------------------------------------------------------------
# Kernel helpers (validated input)


def _check_precomputed(D, *, name="X", n_columns=None):
    """Raise unless ``D`` is a valid matrix of distances: >= 0 and, between
    the models themselves (``n_columns`` None), square, symmetric and with a
    zero diagonal."""
    if n_columns is None and D.shape[0] != D.shape[1]:
        raise ValueError(
            f"{name} must be a square distance matrix of shape (n_models, n_models) "
            f"when metric='precomputed'; got shape {D.shape}."
        )
    if (D < 0).any():
        raise ValueError(
            f"Negative values in data passed to {name}: {int((D < 0).sum())} "
            "distance(s) < 0; distances must be >= 0 when metric='precomputed'."
        )
    # Relative to each pair alone (no atol): distances in small units (1e-9)
    # are as asymmetric as the same in large ones.
    if n_columns is None and not np.allclose(D, D.T, rtol=1e-5, atol=0):
        raise ValueError(
            f"{name} is not symmetric; a precomputed distance matrix must satisfy "
            f"{name}[i, j] == {name}[j, i]."
        )
    if n_columns is None and len(D):
        # A model is at distance 0 from itself. A similarity matrix (diagonal
        # 1, e.g. cosine similarities) passed by mistake would otherwise be
        # read as distances, its most alike models as the farthest apart.
        # Rounding is allowed for, as scikit-learn's silhouette_samples does,
        # relative to the matrix's scale.
        diagonal = np.abs(np.diagonal(D))
        tol = 100 * np.finfo(np.float64).eps * max(1.0, float(D.max()))
        bad = np.flatnonzero(diagonal > tol)
        if bad.size:
            i = int(bad[np.argmax(diagonal[bad])])
            raise ValueError(
                f"{name} has {bad.size} non-zero value(s) on its diagonal, e.g. "
                f"{name}[{i}, {i}] = {float(D[i, i])!r}; a precomputed distance matrix "
                "has a zero diagonal (each model is at distance 0 from itself). "
                "Pass distances, not similarities (e.g. 1 - cosine similarity), "
                f"or zero rounding error with np.fill_diagonal({name}, 0)."
            )


def _median_bandwidth(D):
    """Median distance over distinct pairs of models of a distance matrix.

    Falls back to the median of the non-zero distances when more than half the
    pairs are duplicates, and to 1.0 when every distance is zero (or n < 2),
    so that the kernel stays defined.
    """
    n = D.shape[0]
    if n < 2:
        return 1.0
    # Copy the strict upper triangle row by row: np.triu_indices would need
    # two index arrays as large as the triangle.
    pairs = np.empty(n * (n - 1) // 2)
    start = 0
    for i in range(n - 1):
        pairs[start : start + n - 1 - i] = D[i, i + 1 :]
        start += n - 1 - i
    sigma = _median(pairs)
    if sigma > 0:
        return sigma
    positive = pairs[pairs > 0]
    return _median(positive) if positive.size else 1.0


def _median(values):
    """``np.median`` of finite values >= 0, which may reorder ``values``.

    The mean of the two middle values overflows to inf when both exceed
    ~9e307 (distances of finite embeddings of ~1e308); halved first, it
    cannot.
    """
    median = float(np.median(values, overwrite_input=True))
    if np.isinf(median):
        median = 2.0 * float(np.median(values / 2.0))
    return median


def _distances(X, Y, metric, *, name="X"):
    """Distances of shape (n_X, n_Y) in float64; ``Y=None`` means ``Y = X``.

    Cosine distances are ``1 - cos`` clipped to [0, 2], as
    :func:`sklearn.metrics.pairwise.cosine_distances` computes them but without
    its temporary copies. Identical rows are at distance exactly 0 under both
    metrics, and so are rows pointing the same way under the cosine metric. A
    zero vector has no direction: it is at cosine distance 1 from every other
    vector and 0 from itself (and from other zero vectors), whether ``Y`` is
    None or holds its own row.

    Any finite embeddings work: beyond magnitudes of ``2 ** 256`` (or below
    ``2 ** -256``) the squares inside the computation would over- or
    underflow, so there the rows are scaled by a power of two first (each on
    its own for the cosine metric, which ignores length; all together for the
    Euclidean one, whose distances are scaled back). Euclidean distances
    that exceed the largest float64 (~1.8e308) raise a ValueError naming
    ``name``.
    """
    if metric == "euclidean":
        rows = X if Y is None else np.concatenate([X, Y])
        exponent = _rescale_exponent(rows)
        if exponent:
            # Every step of euclidean_distances (products, sums, sqrt) scales
            # exactly by a power of two: these are the distances exact
            # arithmetic would give, not 1e160 ** 2 = inf (NaN kernels) or
            # 1e-200 ** 2 = 0 (every model at distance 0).
            D = euclidean_distances(
                np.ldexp(X, -exponent), None if Y is None else np.ldexp(Y, -exponent)
            )
            with np.errstate(over="ignore"):
                np.ldexp(D, exponent, out=D)
            if not np.isfinite(D).all():
                largest = float(np.abs(rows).max())
                raise ValueError(
                    f"{name} has values up to {largest:.3g} in magnitude: the "
                    "Euclidean distances between these embeddings exceed the "
                    "largest float64 (~1.8e308). Divide the embeddings by a "
                    "constant (e.g. their largest absolute value) first; with "
                    "bandwidth='median' that leaves the selection unchanged."
                )
        else:
            D = euclidean_distances(X, Y)
    else:
        # Rows of 1e160 (or 1e-200) have a norm that over- (under-)flows, and
        # would be normalised to zero vectors, at distance 1 from everything.
        X_unit = normalize(_rescale_rows(X))
        D = X_unit @ (X_unit if Y is None else normalize(_rescale_rows(Y))).T
        np.subtract(1.0, D, out=D)
        # 1 - cos of unit vectors is off by up to about n_features / 2 ulps (the
        # dot product) plus a few (the normalisations): two copies of a row
        # come out ~1e-16 apart, and the median bandwidth would pick that noise
        # as sigma. A distance within the rounding error cannot be told from 0.
        D[D <= (X.shape[1] + 4) * np.finfo(np.float64).eps] = 0.0
        np.clip(D, 0.0, 2.0, out=D)
    # Copies of a row are exactly 0 apart; the expansion |x|^2 - 2 x.y + |y|^2
    # of euclidean_distances leaves up to ~1e-8 |x| between them, and a zero
    # vector is 1 - 0 from itself above.
    same = _same_rows(X, Y)
    if same is not None:
        D[same] = 0.0
    if Y is None:
        np.fill_diagonal(D, 0.0)
    return D


def _outside_safe_range(magnitude):
    """Whether a magnitude > 0 lies outside 2 ** +-_SAFE_EXPONENT."""
    return (magnitude < 2.0**-_SAFE_EXPONENT) | (magnitude > 2.0**_SAFE_EXPONENT)


def _rescale_exponent(A):
    """The exponent ``e`` with ``max|A| / 2 ** e`` in [0.5, 1) when ``max|A|``
    is outside 2 ** +-_SAFE_EXPONENT, else 0 (no rescaling)."""
    largest = float(np.abs(A).max()) if A.size else 0.0
    if largest == 0.0 or not _outside_safe_range(largest):
        return 0
    return math.frexp(largest)[1]


def _scaled(A):
    """``A`` and an exponent ``e`` with ``A = A_scaled * 2 ** e``: ``e`` is 0
    (``A`` itself) unless the largest magnitude of ``A`` lies outside
    2 ** +-_SAFE_EXPONENT; then ``A`` is scaled by a power of two into
    [0.5, 1), exactly, so that comparisons come out as on ``A`` itself."""
    exponent = _rescale_exponent(A)
    return (np.ldexp(A, -exponent) if exponent else A), exponent


def _rescale_rows(A):
    """``A`` with each row whose largest magnitude is outside
    2 ** +-_SAFE_EXPONENT scaled by a power of two into [0.5, 1) (exactly, so
    its direction is unchanged); ``A`` itself when no row is."""
    largest = np.abs(A).max(axis=1) if A.shape[1] else np.zeros(len(A))
    rows = np.flatnonzero((largest > 0) & _outside_safe_range(largest))
    if not rows.size:
        return A
    A = A.copy()
    A[rows] = np.ldexp(A[rows], -np.frexp(largest[rows])[1][:, None])
    return A


def _same_rows(X, Y):
    """Boolean mask of shape (n_X, n_Y) of the equal pairs of rows, or None
    when no two rows are equal (``Y=None`` means ``Y = X``)."""
    rows = X if Y is None else np.concatenate([X, Y])
    # + 0.0 turns -0.0 into 0.0: np.unique compares rows by their bytes.
    unique, code = np.unique(rows + 0.0, axis=0, return_inverse=True)
    if len(unique) == len(rows):
        return None
    code = code.ravel()
    code_X, code_Y = (code, code) if Y is None else (code[: len(X)], code[len(X) :])
    return code_X[:, None] == code_Y[None, :]


def _rbf(D, sigma, *, out=None):
    """``exp(-(D / sigma) ** 2)``, optionally in place.

    ``1 / sigma ** 2`` overflows to inf for a valid sigma below ~1e-154 (and
    0 * inf is NaN on the diagonal), ``sigma ** 2`` underflows to 0 below
    ~1e-162, and above ~1e154 it overflows to inf (and inf * 0 is NaN again;
    distances that large, from embeddings of 1e160, square to inf too).
    Outside 2 ** +-256 the distances are therefore scaled before squaring,
    which at worst overflows to inf, whose kernel is exactly 0. Within, the
    kernel is formed as it always was (one multiply), so selections on
    near-ties stay what they were: a distance whose square over- or
    underflows there is so far beyond (or within) sigma that its kernel is 0
    (or 1) either way.
    """
    if not _outside_safe_range(sigma):
        # Squares of distances far beyond sigma may overflow to inf: their
        # kernel is 0 either way, so the warning would only alarm.
        with np.errstate(over="ignore"):
            K = np.square(D, out=out)
            K *= np.float64(-1.0) / np.square(np.float64(sigma))
    else:
        with np.errstate(over="ignore"):
            K = np.divide(D, sigma, out=out)
            np.square(K, out=K)
        np.negative(K, out=K)
    return np.exp(K, out=K)


def _distance_matrix(X, metric, bandwidth):
    """Distances of shape (n_models, n_models) and the bandwidth sigma.

    ``X`` is validated float64: embeddings, or distances when
    ``metric="precomputed"`` (copied, so the result may be overwritten).
    """
    if metric == "precomputed":
        D = np.array(X, dtype=np.float64, copy=True)
    else:
        D = _distances(X, None, metric)
    sigma = _median_bandwidth(D) if bandwidth == "median" else float(bandwidth)
    return D, sigma


def _kernel_matrix(X, metric, bandwidth):
    """Kernel matrix of shape (n_models, n_models) and the bandwidth used.

    As :func:`_distance_matrix`, the kernel computed in place of the distances.
    """
    D, sigma = _distance_matrix(X, metric, bandwidth)
    return _rbf(D, sigma, out=D), sigma


def _kernel_row_sums(D, sigma, chunk_size=256):
    """``K.sum(axis=1)`` of ``K = _rbf(D, sigma)``, a chunk of rows at a time
    so that the distances and the kernel are never both held."""
    sums = np.empty(D.shape[0])
    for start in range(0, D.shape[0], chunk_size):
        sums[start : start + chunk_size] = _rbf(
            D[start : start + chunk_size], sigma
        ).sum(axis=1)
    return sums


def _distances_to(X, selected, metric, reference=None):
    """Distances of shape (n_X, n_selected) from each row of ``X`` to the
    selected models.

    ``reference`` holds the selected models' embeddings; with
    ``metric="precomputed"`` it is ignored and ``X`` holds distances to the
    fitted models, whose ``selected`` columns are used.
    """
    if metric == "precomputed":
        return np.array(X[:, selected], dtype=np.float64)
    return _distances(X, reference, metric)


def _assign(D, sigma):
    """Kernel similarity to the selected models and each row's most similar
    one, from the distances ``D`` of shape (n_rows, n_selected).

    Ties go to the earlier position, except where the kernel saturates: it
    underflows to exactly 0 beyond ~27 sigma and rounds to exactly 1 within
    ~1e-8 sigma, whatever the distance, so a row at similarity 0 to every
    selected model, or at 1 to several, goes to the nearest of them (as the
    kernel, which decreases with distance, would rank them), not to the
    earliest position: a selected model is then labelled with itself even
    under a bandwidth far larger than the distances.

    Returns
    -------
    similarity : ndarray of shape (n_rows, n_selected)
    labels : ndarray of int64, shape (n_rows,)
    """
    similarity = _rbf(D, sigma)
    labels = np.argmax(similarity, axis=1)
    best = similarity[np.arange(len(labels)), labels]
    saturated = np.flatnonzero((best == 0.0) | (best == 1.0))
    if saturated.size:
        tied = similarity[saturated] == best[saturated, None]
        labels[saturated] = np.argmin(np.where(tied, D[saturated], np.inf), axis=1)
    return similarity, labels


def _check_n_select(n_select, n_models):
    if n_select > n_models:
        plural = "" if n_models == 1 else "s"
        raise ValueError(
            f"n_select={n_select} should be <= n_models={n_models}; X has "
            f"{n_models} sample{plural} (one per model)."
        )


def _row_names(X):
    """The model names of the rows of ``X``, and why there are none.

    A DataFrame whose index holds unique str labels (``LocusEmbedder``'s
    output under ``set_output(transform="pandas")``, indexed by model name)
    names its rows; anything else does not.

    Returns
    -------
    names : ndarray of object, shape (n_models,), or None
    reason : str or None
        Why ``names`` is None, as an error message says it; None with names.
    """
    if not isinstance(X, pd.DataFrame):
        return None, f"X is a {type(X).__name__}, whose rows have no names"
    index = X.index
    not_names = [label for label in index if not isinstance(label, str)]
    if not_names:
        return None, (
            f"X's index does not hold model names: {len(not_names)} label(s) are "
            f"not str, e.g. {_preview(not_names)}"
        )
    repeated = index[index.duplicated()].unique().tolist()
    if repeated:
        return None, (
            f"X's index repeats {len(repeated)} model name(s), "
            f"{_preview(repeated)}, so a name does not tell one row"
        )
    return np.asarray(index, dtype=object), None


def _check_costs(costs, n_models, budget, row_names=(None, None)):
    """Per-model costs as float64 of shape (n_models,), unit costs when None,
    and the :func:`~locus_sklearn._tensors.input_eps` of the costs as given,
    for :func:`_within_budget`.

    Costs follow the rows of ``X`` (like ``sample_weight``): an array is read
    by position. A Series (by its index) or a mapping is read by model name,
    which needs ``X`` to name its rows (``row_names``, from
    :func:`_row_names`: a DataFrame indexed by unique model names), and must
    name exactly those models. :func:`check_model_costs` does the shared
    validation (finite and >= 0: a free model, such as one run locally,
    costs 0, as in :class:`~locus_sklearn.LocusRouter`), the budget rule
    (some model fits) is the selector's own.
    """
    names, reason = row_names
    # Read before check_model_costs casts the costs (a tensor too) to float64.
    costs_eps = input_eps(costs)
    # Messages name a model as the user gave its cost: by name or by position.
    by_name = isinstance(costs, pd.Series | Mapping)
    if by_name:
        if names is None:
            # By position, a Series ordered otherwise than X gives wrong costs.
            raise TypeError(
                f"costs is a {type(costs).__name__}, which names its models, but "
                f"a selector's models are the rows of X, and {reason}; pass an "
                "array of shape (n_models,) in the row order of X, or X as a "
                "DataFrame indexed by unique model names (as LocusEmbedder "
                "gives under set_output(transform='pandas'))."
            )
        if isinstance(costs, pd.Series):
            not_names = [m for m in costs.index if not isinstance(m, str)]
            if not_names:
                raise ValueError(
                    "costs is a pandas Series, which is read by its index of model "
                    f"names, but {len(not_names)} index label(s) are not model "
                    f"names: {_preview(not_names)}. Index it by the model names of "
                    "X's index, or pass costs.to_numpy() for costs in the row "
                    "order of X."
                )
    if names is None:
        names = np.arange(n_models)
    if costs is None:
        if not _within_budget([1.0], budget):
            raise ValueError(
                f"budget={budget} selects no model: without costs every model "
                "costs 1, so the budget counts models; pass budget >= 1, or the "
                "models' costs (costs=...)."
            )
        return np.ones(n_models, dtype=np.float64), costs_eps
    costs = check_model_costs(costs, names, name="costs", models="X's index")

    def cost_of(i):
        label = repr(str(names[i])) if by_name else i
        return f"costs[{label}]={float(costs[i])!r}"

    cheapest = int(np.argmin(costs))
    # The same test as the greedy's: a budget within rounding of a cost fits.
    if not _within_budget([costs[cheapest]], budget, costs_eps):
        raise ValueError(
            f"budget={budget} should be >= the cheapest model's cost, "
            f"{cost_of(cheapest)}; no model fits."
        )
    positive = costs[costs > 0]
    if positive.size and positive.min() < positive.max() * _COST_RANGE:
        # The greedy ranks gain / cost: with the largest cost brought to ~1,
        # a gain of up to n_models per cost below ~1e-308 overflows to inf,
        # and ties can no longer be told. Costs that far apart are a units
        # mistake, or the small ones are free in effect.
        i = int(np.flatnonzero(costs == positive.min())[0])
        raise ValueError(
            f"costs span too wide a range: {cost_of(i)} is below "
            f"{_COST_RANGE:.3g} times the largest cost, {float(positive.max())!r}, "
            "so gain per unit cost cannot be computed in float64. Give costs in "
            "units where they are within a factor 1e270 of each other, or set "
            "costs that are negligible to 0 (a free model)."
        )
    return costs, costs_eps


def _check_pool(X, metric, *, name="X"):
    X = check_array(untorched(X), dtype=np.float64, input_name=name)
    if metric == "precomputed":
        _check_precomputed(X, name=name)
    return X


# --------------------------------------------------------------------------------------
# Algorithms on validated input: the distance matrix D and bandwidth (k-center)
# or the kernel matrix K (the rest). ``K[s]`` (a row) holds the similarity of
# every model to model ``s``; D and K are symmetric for every metric.


def _k_center(D, sigma, n_select):
    """Farthest-first selection in similarity space, from the kernel medoid.

    It starts from the model with the largest kernel row sum (sums equal up
    to rounding are ties, which go to the lowest row). Each step adds the
    least-covered model, the one whose largest similarity to the selection
    is smallest, the lowest index on ties. The kernel underflows to exactly 0
    for every model beyond ~27 sigma of the selection, and rounds to exactly
    1 for every model within ~1e-8 sigma of it (a bandwidth far larger than
    the distances), whatever its distance; those ties go to the model
    farthest from the selection, as the kernel, which decreases with
    distance, would rank them without rounding (by row order a far outlier
    would be left uncovered for a nearer model of lower row, breaking the
    factor 2 of farthest-first, Gonzalez, 1985). The kernel is computed from
    ``D`` where needed, its row sums a chunk at a time, so the distances and
    the kernel are never both held.

    Parameters
    ----------
    D : ndarray of shape (n_models, n_models)
        Distances between the models.
    sigma : float
        The kernel's bandwidth.
    n_select : int, 1 <= n_select <= n_models

    Returns
    -------
    selected : ndarray of int64, shape (n_select,), in selection order
    """
    n_models = D.shape[0]
    # The kernel medoid. Row sums equal in exact arithmetic (mirror-image
    # models, at the same distances from the rest in another order) come out
    # an ulp or so apart: sums within rounding of the largest tie, and the
    # lowest row among them is taken, as the budget greedy does.
    sums = _kernel_row_sums(D, sigma)
    top = float(sums.max())
    first = int(np.argmax(sums >= top - _sum_slack(n_models) * max(1.0, top)))
    selected = [first]
    coverage = _rbf(D[first], sigma)
    # Distance of each model to the nearest selected one, for the ties at 0.
    gap = D[first].copy()
    chosen = np.zeros(n_models, dtype=bool)
    chosen[first] = True
    for _ in range(1, n_select):
        open_coverage = np.where(chosen, np.inf, coverage)
        # argmin and argmax return the lowest index on ties.
        m = int(np.argmin(open_coverage))
        if open_coverage[m] in (0.0, 1.0):
            # The kernel saturates: exactly 0 beyond ~27 sigma, exactly 1
            # within ~1e-8 sigma (a bandwidth far above the distances), at
            # any distance. There the distances rank the models, as the
            # kernel would without rounding: the farthest is least covered.
            tied = open_coverage == open_coverage[m]
            m = int(np.argmax(np.where(tied, gap, -np.inf)))
        selected.append(m)
        chosen[m] = True
        np.maximum(coverage, _rbf(D[m], sigma), out=coverage)
        np.minimum(gap, D[m], out=gap)
    return np.asarray(selected, dtype=np.int64)


def _sum_slack(n_terms):
    """Relative rounding tolerance of a sum of ``n_terms`` values in [0, 1].

    Two such sums that are equal in exact arithmetic (a coverage or a gain
    reached by different models, or in different orders) come out up to a
    few ulps per term apart; they count as different only beyond this share
    of ``max(1, sum)``.
    """
    return _SUM_RTOL * n_terms


def _within_budget(costs, budget, costs_eps=0.0):
    """Whether ``costs`` (floats >= 0) add up to at most ``budget``, to rounding.

    Costs and budgets are usually written in decimal and stored rounded to
    binary: 0.1 + 0.2 is exactly 0.3000000000000000166 in float64, the budget
    0.3 is 0.2999999999999999889, so costs that fit the budget as written
    would come out over it. A total within ``_sum_slack(len(costs))`` of the
    budget, relative (a few ulps per cost, the tolerance of the ties), fits;
    beyond it, it does not. ``math.fsum`` is exactly rounded, so the
    summation order adds no error of its own.

    Costs that came in a float type narrower than float64 were rounded to it
    first (float32 0.1 + 0.2 is 0.3000000045): ``costs_eps``, that type's
    machine epsilon (:func:`~locus_sklearn._tensors.input_eps`), widens the
    slack by one epsilon, relative. Each cost is within half an epsilon of its value as written, so
    their sum (of values >= 0) is too, however many there are.
    """
    try:
        total = math.fsum(costs)
    except OverflowError:  # beyond the largest float64: over any finite budget
        return False
    return total <= budget * (1.0 + _sum_slack(len(costs)) + costs_eps)


def _pam(K, selected, max_iter, method):
    """PAM swap search from ``selected`` that maximises J; consumes ``K``.

    Runs the ``kmedoids`` package on the dissimilarity ``1 - K``, whose
    k-medoids loss is ``n_models - J``. "fasterpam" performs every improving
    swap as soon as it finds one (Schubert & Rousseeuw, 2021), visiting
    candidates in index order on one thread so the result is deterministic
    (:func:`_k_medoids` puts ``K`` in an order that does not depend on the
    rows); "pam" applies the best swap of each pass (FastPAM1, the classic
    PAM result). Both stop at a local optimum: no swap of one medoid for one
    other model improves J beyond rounding.

    ``kmedoids`` also stops after a pass whose swaps left its loss unchanged,
    which happens on exact ties (two models that are each other's mirror):
    it may then end on a tied set from which a swap still improves J (seen:
    J 8.534 where a swap gave 8.589). So each search is followed by one
    best-swap pass (FastPAM1, one iteration) from its result: a tie-only
    search keeps the set it started from, an improving swap resumes the
    search, and only a set that pass confirms is returned.

    Returns
    -------
    selected : ndarray of int64, shape (n_select,)
        A swapped-in model takes the position of the model it replaced.
    n_iter : int
        Passes run, the confirming passes included.
    converged : bool
        False when ``max_iter`` passes ran out before a pass confirmed the set.
    """
    try:
        import kmedoids
    except ImportError as exc:  # pragma: no cover - a declared dependency
        raise ImportError(
            "KMedoidsSelector needs the kmedoids package for its swap search; "
            "install it with `pip install kmedoids`."
        ) from exc
    # 1 - K in place: the kernel matrix is not needed afterwards.
    diss = np.subtract(1.0, K, out=K)
    medoids = np.array(selected, dtype=np.int64)
    loss = diss[:, medoids].min(axis=1).sum()
    # Summation orders differ between numpy and kmedoids: a loss counts as
    # lower only beyond the rounding of a sum of n_models terms.
    slack = _sum_slack(len(diss))
    n_iter, search = 0, True
    while n_iter < max_iter:
        if search:
            if method == "fasterpam":
                run = kmedoids.fasterpam(
                    diss, medoids, max_iter=max_iter - n_iter, n_cpu=1
                )
            else:
                run = kmedoids.fastpam1(diss, medoids, max_iter=max_iter - n_iter)
        else:  # the confirming pass: the best single swap from the result
            run = kmedoids.fastpam1(diss, medoids, max_iter=1)
        n_iter += int(run.n_iter)
        if run.n_swap == 0:  # a whole pass found no improving swap
            return medoids, n_iter, True
        improved = run.loss < loss - slack * max(1.0, loss)
        if improved:
            medoids, loss = np.asarray(run.medoids, dtype=np.int64), run.loss
        elif not search:  # the best swap only ties: confirmed
            return medoids, n_iter, True
        # After a search, confirm; after an improving confirming pass, search on.
        search = not search
    return medoids, n_iter, False


def _swap_order(D):
    """The order in which the swap search visits the models, from the
    distances ``D`` of shape (n_models, n_models).

    FasterPAM applies each improving swap as soon as it finds one, visiting
    the models in index order, so run on the rows as given it can end on
    another local optimum when the same models come in another row order (30
    orders of 30 random models gave 8 portfolios). The models are therefore
    ordered by their sorted distances to the pool, compared lexicographically
    (the nearest neighbour's distance first): a key that does not depend on
    the row order, nor on anything but the distances, so embeddings and their
    distances passed with ``metric="precomputed"`` give the same order.
    Models with the same sorted distances, exact duplicates among them, keep
    their row order (the sort is stable).

    Returns
    -------
    order : ndarray of int64, shape (n_models,)
        ``order[i]`` is the row of the model visited ``i``-th.
    """
    profiles = np.sort(D, axis=1)
    # lexsort's last key is its primary one: reversed, the columns are
    # compared from the first (0, each model's distance to itself) on.
    return np.lexsort(profiles.T[::-1])


def _first_copies(D):
    """The lowest row of each model's exact copies, from the distances ``D``.

    Copies are models whose rows of ``D`` are identical (so they are at
    distance 0 and have the same distances to every other model); a model
    without copies is its own first copy. Only models at distance 0 from
    another one can have copies, so only their rows are compared.

    Returns
    -------
    first : ndarray of int64, shape (n_models,)
    """
    first = np.arange(len(D))
    zero = D == 0.0
    np.fill_diagonal(zero, False)
    rows = {}
    for i in np.flatnonzero(zero.any(axis=1)):
        # + 0.0 turns -0.0 into 0.0: the rows are compared by their bytes.
        first[i] = rows.setdefault((D[i] + 0.0).tobytes(), i)
    return first


def _k_medoids(D, sigma, start, max_iter, method):
    """The swap search of :func:`_pam` from the k-center ``start``, on the
    models in :func:`_swap_order`; consumes ``D``.

    Exact copies of a model leave J unchanged whichever of them is selected,
    but ``kmedoids``' running loss can come out a rounding step lower for
    another copy and swap it in (the last copy was seen selected); as every
    tie, they go to the lowest rows.

    The search runs on a reordered copy of the kernel (``D`` holds the
    kernel meanwhile), so it needs twice the memory of ``D``.

    Returns ``_pam``'s ``(selected, n_iter, converged)``, ``selected`` as rows
    of ``D``, each swapped-in model at the position of the model it replaced.
    """
    order = _swap_order(D)
    first = _first_copies(D)
    position = np.empty_like(order)
    position[order] = np.arange(len(order))
    K = _rbf(D, sigma, out=D)
    selected, n_iter, converged = _pam(
        K[np.ix_(order, order)], position[start], max_iter, method
    )
    selected = order[selected]
    # The positions holding copies of one model get its lowest copies, in
    # position order.
    for model in np.unique(first[selected]):
        at = np.flatnonzero(first[selected] == model)
        selected[at] = np.flatnonzero(first == model)[: len(at)]
    return selected, n_iter, converged


def _budget_greedy(K, costs, budget, costs_eps=0.0):
    """Largest marginal gain of J per unit cost among models that still fit.

    A model fits when the selected costs and its own add up to at most
    ``budget``, to rounding (:func:`_within_budget`, with the costs'
    ``costs_eps``).

    A free model (cost 0) ranks before every costly one, the larger gain
    first: it always fits, and what it adds costs nothing (a free model that
    adds nothing is still taken, as J never decreases). Values equal to
    rounding are ties, which go to the lowest index: the gains are sums of
    n_models terms, and two models whose gains are equal in exact arithmetic
    can come out an ulp apart (the tolerance of :func:`_pam`'s swaps).

    J is monotone submodular, so a value computed at an earlier step bounds
    the current one from above; this lazy evaluation (Minoux, 1978) selects
    exactly what the plain greedy selects.

    Returns
    -------
    selected : ndarray of int64, shape (n_selected,), in selection order
    """
    n_models = K.shape[0]
    slack = _sum_slack(n_models)
    free = costs == 0.0
    n_free = int(free.sum())  # free models not yet selected
    coverage = np.zeros(n_models)
    spent = []
    selected = []
    # Gains are ranked per unit of ``unit``: the costs scaled by the power of
    # two that brings the largest into [0.5, 1). The scaling is exact, so
    # every comparison (the tie floor included) comes out as on the costs
    # themselves, and, as _check_costs has refused costs more than 2 ** 900
    # apart, every positive unit is a normal number: a gain of 1 per cost of
    # 1e-320 cannot overflow to inf (nor the floor to NaN), whatever the
    # largest cost (scaling only a largest outside 2 ** +-256 left 1e-320
    # beside 1e-77 unscaled). Budgets and what is spent stay in the costs'
    # own units.
    largest = costs.max(initial=0.0)
    unit = np.ldexp(costs, -math.frexp(largest)[1]) if largest > 0 else costs
    # value[m]: gain (free m) or gain per unit cost, computed at step
    # computed_at[m], an upper bound of the current value at later steps;
    # -inf once m is selected or no longer fits.
    value = K.sum(axis=1)
    np.divide(value, unit, out=value, where=~free)
    computed_at = np.zeros(n_models, dtype=np.int64)

    def fits(m):
        return _within_budget([*spent, costs[m]], budget, costs_eps)

    def refresh(m, step):
        gain = np.maximum(K[m] - coverage, 0.0).sum()
        value[m] = gain if free[m] else gain / unit[m]
        computed_at[m] = step

    step = 0
    while True:
        # Free models first (they always fit); argmax takes the lowest index
        # on ties.
        ranked = np.where(free, value, -np.inf) if n_free else value
        m = int(np.argmax(ranked))
        if ranked[m] == -np.inf:
            break
        if not fits(m):
            value[m] = -np.inf  # the remaining budget only shrinks
            continue
        if computed_at[m] != step:
            refresh(m, step)
            continue
        # value[m] is current and every other bound is no larger: m has the
        # largest value. Models within rounding of it tie; the lowest index
        # among them is found by refreshing, in index order, the models
        # below m whose bound is within rounding too.
        best = value[m]
        floor = best - slack * max(best, 1.0 if free[m] else 1.0 / unit[m])
        for c in np.flatnonzero(ranked[:m] >= floor).tolist():
            if not fits(c):
                value[c] = -np.inf
                continue
            if computed_at[c] != step:
                refresh(c, step)
            if value[c] >= floor:
                m = c
                break
        selected.append(m)
        spent.append(costs[m])
        n_free -= bool(free[m])
        value[m] = -np.inf
        np.maximum(coverage, K[m], out=coverage)
        step += 1
    return np.asarray(selected, dtype=np.int64)


# --------------------------------------------------------------------------------------
# Public functions


def _select_outputs(X, selected, metric, sigma, objective):
    similarity, labels = _assign(_distances_to(X, selected, metric, X[selected]), sigma)
    coverage = similarity.max(axis=1)
    value = coverage.min() if objective == "min" else coverage.sum()
    return selected, labels, float(value)


@validate_params(
    {
        "X": ["array-like"],
        "n_select": [NumberInterval(Integral, 1, None, closed="left")],
        **_KERNEL_CONSTRAINTS,
    },
    prefer_skip_nested_validation=True,
)
def k_center_select(X, n_select, *, metric="cosine", bandwidth="median"):
    """Select models by farthest-first traversal in kernel similarity space.

    Starts from the kernel medoid (the model with the largest mean similarity to
    the pool), then repeatedly adds the least-covered model: the one whose best
    similarity to the selection is smallest (paper, eq. 9). It approximates the
    k-center objective ``max min_i max_{s in sel} K(z_i, z_s)``; with the
    Euclidean metric the worst covering distance is at most twice the optimal
    one (Gonzalez, 1985). Where the kernel saturates, models so far from the
    selection that their similarity underflows to 0 (beyond ~27 bandwidths),
    or so near it that their similarity rounds to 1 (a bandwidth far larger
    than the distances), are ranked by distance, the farthest first, and
    labelled with their nearest selected model.

    Read more in :class:`KCenterSelector`.

    Parameters
    ----------
    X : array-like of shape (n_models, n_features) or (n_models, n_models)
        Model embeddings, or a symmetric distance matrix when
        ``metric="precomputed"``.
    n_select : int
        Number of models to select, at most ``n_models``.
    metric : {"cosine", "euclidean", "precomputed"}, default="cosine"
        Distance between embeddings.
    bandwidth : "median" or float, default="median"
        Kernel bandwidth sigma; "median" uses the median distance between
        distinct models.

    Returns
    -------
    selected_indices : ndarray of int64, shape (n_select,)
        Rows of the selected models, in selection order.
    labels : ndarray of int64, shape (n_models,)
        Position in ``selected_indices`` of each model's most similar
        selected model.
    objective : float
        Worst coverage ``min_i max_{s in sel} K(z_i, z_s)``, in [0, 1].

    Examples
    --------
    >>> import numpy as np
    >>> from locus_sklearn import k_center_select
    >>> X = np.array([[0.0], [0.1], [5.0], [5.1], [10.0]])
    >>> selected, labels, objective = k_center_select(X, 2, metric="euclidean")
    >>> selected.tolist(), labels.tolist()
    ([2, 0], [1, 1, 0, 0, 0])
    """
    # The estimator's check of ints no int64 or float holds (validate_params
    # names the function in its message); unchecked, they failed in numpy.
    check_representable_numbers(KCenterSelector(n_select, bandwidth=bandwidth))
    X = _check_pool(X, metric)
    _check_n_select(n_select, X.shape[0])
    D, sigma = _distance_matrix(X, metric, bandwidth)
    selected = _k_center(D, sigma, n_select)
    del D
    return _select_outputs(X, selected, metric, sigma, "min")


@validate_params(
    {
        "X": ["array-like"],
        "n_select": [NumberInterval(Integral, 1, None, closed="left")],
        **_KERNEL_CONSTRAINTS,
        "method": [StrOptions({"fasterpam", "pam"})],
        "max_iter": [NumberInterval(Integral, 1, None, closed="left")],
        "return_n_iter": ["boolean"],
    },
    prefer_skip_nested_validation=True,
)
def k_medoids_select(
    X,
    n_select,
    *,
    metric="cosine",
    bandwidth="median",
    method="fasterpam",
    max_iter=300,
    return_n_iter=False,
):
    """Select models that maximise total kernel coverage with PAM swaps.

    Starts from the :func:`k_center_select` solution and swaps a selected
    model for another while a swap improves
    ``J = sum_i max_{s in sel} K(z_i, z_s)`` (paper, eq. 10), so the result is a
    local optimum of J at least as good as its k-center start.

    Read more in :class:`KMedoidsSelector`.

    Parameters
    ----------
    X : array-like of shape (n_models, n_features) or (n_models, n_models)
        Model embeddings, or a symmetric distance matrix when
        ``metric="precomputed"``.
    n_select : int
        Number of models to select, at most ``n_models``.
    metric : {"cosine", "euclidean", "precomputed"}, default="cosine"
        Distance between embeddings.
    bandwidth : "median" or float, default="median"
        Kernel bandwidth sigma; "median" uses the median distance between
        distinct models.
    method : {"fasterpam", "pam"}, default="fasterpam"
        Swap search: "fasterpam" applies each improving swap as soon as it is
        found (fast, the usual choice); "pam" applies the best swap of each
        pass (the classic PAM result, slower). Both run in the ``kmedoids``
        package, visiting the models in an order of their distances, not of
        their rows (see :class:`KMedoidsSelector`); a final best-swap pass
        confirms the local optimum.
    max_iter : int, default=300
        Maximum number of passes over the candidate swaps.
    return_n_iter : bool, default=False
        Whether to return the number of passes.

    Returns
    -------
    selected_indices : ndarray of int64, shape (n_select,)
        Rows of the selected models; a swapped-in model takes the position of
        the model it replaced in the k-center order.
    labels : ndarray of int64, shape (n_models,)
        Position in ``selected_indices`` of each model's most similar
        selected model.
    objective : float
        Total coverage J, in [0, n_models].
    n_iter : int
        Number of passes; returned only when ``return_n_iter`` is True.

    Examples
    --------
    >>> import numpy as np
    >>> from locus_sklearn import k_medoids_select
    >>> X = np.array([[0.0], [0.1], [0.2], [3.0], [3.1], [10.0]])
    >>> selected, labels, objective = k_medoids_select(X, 2, metric="euclidean")
    >>> selected.tolist(), labels.tolist()
    ([1, 4], [0, 0, 0, 1, 1, 1])
    """
    # The estimator's check of ints no int64 or float holds (validate_params
    # names the function in its message); unchecked, max_iter=10**30 failed
    # in the kmedoids package, naming no parameter.
    check_representable_numbers(
        KMedoidsSelector(n_select, bandwidth=bandwidth, max_iter=max_iter)
    )
    X = _check_pool(X, metric)
    _check_n_select(n_select, X.shape[0])
    D, sigma = _distance_matrix(X, metric, bandwidth)
    start = _k_center(D, sigma, n_select)
    selected, n_iter, converged = _k_medoids(D, sigma, start, max_iter, method)
    if not converged:
        _warn_max_iter(max_iter)
    outputs = _select_outputs(X, selected, metric, sigma, "sum")
    return (*outputs, n_iter) if return_n_iter else outputs


@validate_params(
    {
        "X": ["array-like"],
        "budget": [NumberInterval(Real, 0, None, closed="left")],
        "costs": ["array-like", Mapping, None],
        **_KERNEL_CONSTRAINTS,
    },
    prefer_skip_nested_validation=True,
)
def budget_greedy_select(X, budget, *, costs=None, metric="cosine", bandwidth="median"):
    """Select models by largest coverage gain per unit cost within a budget.

    Repeatedly adds the model with the largest marginal gain of
    ``J = sum_i max_{s in sel} K(z_i, z_s)`` per unit cost among the models
    that still fit the remaining budget, until none fits (paper, eq. 13). The
    total cost of the selection exceeds ``budget`` by rounding at most, so
    that decimal costs adding up to the budget as written fit, in the
    precision the costs came in (float32 costs, a torch tensor's default, are
    allowed float32 rounding). Free models
    (cost 0) are taken first, the larger gain first; gains equal to rounding
    are ties, which go to the lower row.

    Read more in :class:`BudgetGreedySelector`.

    Parameters
    ----------
    X : array-like of shape (n_models, n_features) or (n_models, n_models)
        Model embeddings, or a symmetric distance matrix when
        ``metric="precomputed"``.
    budget : float
        Largest total cost of the selection, >= 0 and at least the cheapest
        model's cost (0 selects the free models only).
    costs : array-like of shape (n_models,), pandas Series, mapping of str to float, default=None
        Cost of each model (parameters, price), finite and >= 0; free models
        are taken first. Positive costs within a factor ~1e270 of each other
        (any units: costs of 1e-320 work). None gives every model a cost of
        1, so ``budget`` counts models. An array is read in the row order of
        ``X``; a Series (by its index) or a mapping is read by model name,
        when ``X`` is a DataFrame indexed by unique model names (as
        :class:`~locus_sklearn.LocusEmbedder` gives under
        ``set_output(transform="pandas")``), and must name exactly its
        models.
    metric : {"cosine", "euclidean", "precomputed"}, default="cosine"
        Distance between embeddings.
    bandwidth : "median" or float, default="median"
        Kernel bandwidth sigma; "median" uses the median distance between
        distinct models.

    Returns
    -------
    selected_indices : ndarray of int64, shape (n_selected,)
        Rows of the selected models, in selection order.
    labels : ndarray of int64, shape (n_models,)
        Position in ``selected_indices`` of each model's most similar
        selected model.
    objective : float
        Total coverage J, in [0, n_models].

    Examples
    --------
    >>> import numpy as np
    >>> from locus_sklearn import budget_greedy_select
    >>> X = np.array([[0.0], [0.1], [5.0], [5.1], [10.0]])
    >>> costs = [1.0, 3.0, 1.0, 3.0, 1.0]
    >>> selected, _, _ = budget_greedy_select(X, 2.0, costs=costs, metric="euclidean")
    >>> selected.tolist()
    [2, 0]
    """
    # The estimator's check of ints no int64 or float holds (validate_params
    # names the function in its message); unchecked, they failed in numpy.
    check_representable_numbers(BudgetGreedySelector(budget, bandwidth=bandwidth))
    row_names = _row_names(X)
    X = _check_pool(X, metric)
    costs, costs_eps = _check_costs(costs, X.shape[0], budget, row_names)
    K, sigma = _kernel_matrix(X, metric, bandwidth)
    selected = _budget_greedy(K, costs, budget, costs_eps)
    return _select_outputs(X, selected, metric, sigma, "sum")


def _warn_max_iter(max_iter):
    warn_external(
        f"The swap search stopped at max_iter={max_iter} passes; the selection "
        "may not be a local optimum of J. Increase max_iter.",
        ConvergenceWarning,
    )


# --------------------------------------------------------------------------------------
# Estimators


class _BaseSelector(
    ClassNamePrefixFeaturesOutMixin,
    TransformerMixin,
    ClusterMixin,
    NoBoolNumbersMixin,
    BaseEstimator,
):
    """Shared fit/transform/predict of the kernel selectors.

    Subclasses implement ``_select(D, sigma, costs)`` returning the selected
    rows from the distance matrix and the bandwidth (and set any extra fitted
    attribute; ``D`` may be consumed, e.g. turned into the kernel in place),
    and set ``_objective`` to "min" or "sum". ``fit`` selects ``n_select``
    models; a selector with fit parameters (``costs``) overrides it.
    """

    _parameter_constraints = dict(_KERNEL_CONSTRAINTS)
    _objective = "sum"

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.pairwise = self.metric == "precomputed"
        # Precomputed distances are >= 0; embeddings may take any sign.
        tags.input_tags.positive_only = self.metric == "precomputed"
        return tags

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None):
        """Select ``n_select`` models.

        Parameters
        ----------
        X : array-like of shape (n_models, n_features) or (n_models, n_models)
            Model embeddings, or distances when ``metric="precomputed"``.
        y : None
            Ignored.

        Returns
        -------
        self : object
            The fitted selector.
        """
        return self._fit(X)

    def _fit(self, X, costs=None):
        row_names = _row_names(X)  # before validate_data drops the index
        X = validate_data(self, untorched(X), dtype=np.float64)
        if self.metric == "precomputed":
            _check_precomputed(X)
        costs = self._check_fit_params(X.shape[0], costs, row_names)
        D, self.bandwidth_ = _distance_matrix(X, self.metric, self.bandwidth)
        selected = self._select(D, self.bandwidth_, costs)
        del D
        self.selected_indices_ = selected
        self.selected_embeddings_ = (
            None if self.metric == "precomputed" else X[selected].copy()
        )
        self._n_features_out = len(selected)
        # labels_ and coverage_ come from the same path as predict/transform,
        # so predict(X) == labels_ on the training data.
        similarity, self.labels_ = _assign(
            self._distances_to_selected(X), self.bandwidth_
        )
        self.coverage_ = similarity.max(axis=1)
        coverage = self.coverage_
        self.objective_ = float(
            coverage.min() if self._objective == "min" else coverage.sum()
        )
        return self

    def _check_fit_params(self, n_models, costs, row_names):
        _check_n_select(self.n_select, n_models)
        return None

    def _distances_to_selected(self, X):
        return _distances_to(
            X, self.selected_indices_, self.metric, self.selected_embeddings_
        )

    def _validate_new(self, X):
        check_is_fitted(self)
        X = validate_data(self, untorched(X), dtype=np.float64, reset=False)
        if self.metric == "precomputed":
            _check_precomputed(X, n_columns=self.n_features_in_)
        return X

    def transform(self, X):
        """Kernel similarity of each row to the selected models.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features) or (n_samples, n_models_fit)
            Embeddings, or, when ``metric="precomputed"``, distances from each
            row to every model the selector was fitted on (columns in fit
            order).

        Returns
        -------
        similarity : ndarray of shape (n_samples, n_selected)
            ``K(x, z_s)`` for each selected model ``s``, columns in the order
            of ``selected_indices_``.
        """
        D = self._distances_to_selected(self._validate_new(X))
        return _rbf(D, self.bandwidth_, out=D)

    def predict(self, X):
        """Most similar selected model of each row.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features) or (n_samples, n_models_fit)
            As in :meth:`transform`.

        Returns
        -------
        labels : ndarray of int64, shape (n_samples,)
            Position in ``selected_indices_``; ties go to the earlier position,
            except that a row at similarity 0 to every selected model (the
            kernel underflows beyond ~27 bandwidths), or at similarity 1 to
            several (it rounds to 1 within ~1e-8 bandwidths), goes to the
            nearest of them. On the training data this equals ``labels_``.
        """
        D = self._distances_to_selected(self._validate_new(X))
        return _assign(D, self.bandwidth_)[1]


class KCenterSelector(_BaseSelector):
    """Select models by farthest-first traversal in kernel similarity space.

    Starts from the kernel medoid, the model with the largest mean similarity
    ``(1/n) sum_i K(z_i, z_m)``, then repeatedly adds the least-covered model,
    the one whose best similarity to the selection is smallest (paper,
    appendix E.4.2). It approximates the k-center objective
    ``max min_i max_{s in sel} K(z_i, z_s)``: every model of the pool gets a
    similar representative. Selections are nested: the first k models chosen
    for ``n_select=k+1`` are those chosen for ``n_select=k``. Ties (kernel
    row sums equal up to rounding included) go to the lowest row, except
    between models whose similarity to the selection underflows to exactly
    0 (beyond ~27 bandwidths, e.g. a tight family of fine-tunes sets a small
    median bandwidth) or rounds to exactly 1 (within ~1e-8 bandwidths, e.g. a
    numeric bandwidth far larger than the distances): the kernel decreases
    with distance, so the farthest of them is taken, and in ``labels_`` and
    :meth:`predict` such a model goes to its nearest selected model.

    Parameters
    ----------
    n_select : int, default=8
        Number of models to select, at most ``n_models``.
    metric : {"cosine", "euclidean", "precomputed"}, default="cosine"
        Distance between embeddings; identical embeddings are at distance 0, and
        a zero embedding at cosine distance 1 from every other one. With
        "precomputed", X is a symmetric distance matrix in :meth:`fit`, and the
        distances from each row to the fitted models, shape
        (n_samples, n_models_fit), in :meth:`transform` and :meth:`predict`.
    bandwidth : "median" or float, default="median"
        Kernel bandwidth sigma of ``K = exp(-d ** 2 / sigma ** 2)``; "median"
        uses the median distance between distinct models.

    Attributes
    ----------
    objective_ : float
        Worst coverage ``min_i max_{s in sel} K(z_i, z_s)``, in [0, 1].
    selected_indices_ : ndarray of int64, shape (n_selected,)
        Rows of the selected models, in selection order.
    selected_embeddings_ : ndarray of shape (n_selected, n_features) or None
        Embeddings of the selected models (None with ``metric="precomputed"``).
    labels_ : ndarray of int64, shape (n_models,)
        Position in ``selected_indices_`` of each model's most similar
        selected model, as :meth:`predict` gives on the training data.
    coverage_ : ndarray of float64, shape (n_models,)
        Similarity of each model to its most similar selected model.
    bandwidth_ : float
        Kernel bandwidth sigma used (the median distance between distinct
        models when ``bandwidth="median"``; when more than half the pairs are
        duplicates, the median of the non-zero distances; 1.0 when all
        distances are zero).
    n_features_in_ : int
        Number of features seen during fit (``n_models`` when precomputed).
    feature_names_in_ : ndarray of str, shape (n_features_in_,)
        Names of features seen during fit, when X has string column names.

    See Also
    --------
    KMedoidsSelector : Refines this selection with PAM swaps on total coverage.
    BudgetGreedySelector : Selects under a cost budget.
    k_center_select : Function twin.

    Examples
    --------
    >>> import numpy as np
    >>> from locus_sklearn import KCenterSelector
    >>> X = np.array([[0.0], [0.1], [5.0], [5.1], [10.0]])
    >>> selector = KCenterSelector(n_select=2, metric="euclidean").fit(X)
    >>> selector.selected_indices_.tolist(), selector.labels_.tolist()
    ([2, 0], [1, 1, 0, 0, 0])
    >>> selector.transform([[0.05]]).shape
    (1, 2)
    """

    _parameter_constraints = {
        **_BaseSelector._parameter_constraints,
        "n_select": [NumberInterval(Integral, 1, None, closed="left")],
    }
    _objective = "min"

    def __init__(self, n_select=8, *, metric="cosine", bandwidth="median"):
        self.n_select = n_select
        self.metric = metric
        self.bandwidth = bandwidth

    def _select(self, D, sigma, costs):
        return _k_center(D, sigma, self.n_select)


class KMedoidsSelector(_BaseSelector):
    """Select models that maximise total kernel coverage with PAM swaps.

    Initialises from the :class:`KCenterSelector` solution, then swaps a
    selected model for another while a swap improves
    ``J = sum_i max_{s in sel} K(z_i, z_s)`` (paper, appendix E.4.2), until
    none does. The swap search is the ``kmedoids`` package's FasterPAM (or
    classic PAM) on the dissimilarity ``1 - K``, whose k-medoids loss is
    ``n_models - J``. The result is deterministic, a local optimum of J under
    single swaps (a final best-swap pass confirms it: the package's search
    also stops after a pass whose swaps only tie), and at least as good as
    the k-center start.

    Parameters
    ----------
    n_select : int, default=8
        Number of models to select, at most ``n_models``.
    metric : {"cosine", "euclidean", "precomputed"}, default="cosine"
        Distance between embeddings; identical embeddings are at distance 0, and
        a zero embedding at cosine distance 1 from every other one. With
        "precomputed", X is a symmetric distance matrix in :meth:`fit`, and the
        distances from each row to the fitted models, shape
        (n_samples, n_models_fit), in :meth:`transform` and :meth:`predict`.
    bandwidth : "median" or float, default="median"
        Kernel bandwidth sigma of ``K = exp(-d ** 2 / sigma ** 2)``; "median"
        uses the median distance between distinct models.
    method : {"fasterpam", "pam"}, default="fasterpam"
        Swap search: "fasterpam" applies each improving swap as soon as it is
        found (fast, the usual choice); "pam" applies the best swap of each
        pass (the classic PAM result; each pass costs O(n_models ** 2) and
        makes one swap, so it is much slower on large pools). Both visit the
        models in the order of their sorted distances to the pool, compared
        lexicographically, not in row order: reordering the rows reorders
        the result with them, except where the k-center start has ties
        (equal up to rounding, which go to the lower row). Ties between swaps
        go to the model earlier in that order; between exact copies of a
        model, to the lower row.
    max_iter : int, default=300
        Maximum number of passes over the candidate swaps; a
        :class:`~sklearn.exceptions.ConvergenceWarning` is raised when reached.

    Attributes
    ----------
    objective_ : float
        Total coverage J, in [0, n_models].
    initial_indices_ : ndarray of int64, shape (n_select,)
        The k-center start.
    n_iter_ : int
        Number of passes over the candidate swaps, the confirming one that
        found no improving swap included.
    selected_indices_ : ndarray of int64, shape (n_selected,)
        Rows of the selected models, in the order of ``initial_indices_``,
        each swapped-in model at the position of the model it replaced. They
        are not nested: unlike :class:`KCenterSelector`'s, a prefix is not
        a smaller k-medoids portfolio (fit with a smaller ``n_select``).
    selected_embeddings_ : ndarray of shape (n_selected, n_features) or None
        Embeddings of the selected models (None with ``metric="precomputed"``).
    labels_ : ndarray of int64, shape (n_models,)
        Position in ``selected_indices_`` of each model's most similar
        selected model, as :meth:`predict` gives on the training data.
    coverage_ : ndarray of float64, shape (n_models,)
        Similarity of each model to its most similar selected model.
    bandwidth_ : float
        Kernel bandwidth sigma used (the median distance between distinct
        models when ``bandwidth="median"``; when more than half the pairs are
        duplicates, the median of the non-zero distances; 1.0 when all
        distances are zero).
    n_features_in_ : int
        Number of features seen during fit (``n_models`` when precomputed).
    feature_names_in_ : ndarray of str, shape (n_features_in_,)
        Names of features seen during fit, when X has string column names.

    See Also
    --------
    KCenterSelector : The start of the swaps.
    k_medoids_select : Function twin.

    Examples
    --------
    >>> import numpy as np
    >>> from locus_sklearn import KMedoidsSelector
    >>> X = np.array([[0.0], [0.1], [0.2], [3.0], [3.1], [10.0]])
    >>> selector = KMedoidsSelector(n_select=2, metric="euclidean").fit(X)
    >>> selector.initial_indices_.tolist()  # k-center covers the outlier 10.0
    [2, 5]
    >>> selector.selected_indices_.tolist()  # swaps trade it for the pair at 3
    [1, 4]
    >>> selector.predict([[0.3], [9.0]]).tolist()
    [0, 1]
    """

    _parameter_constraints = {
        **_BaseSelector._parameter_constraints,
        "n_select": [NumberInterval(Integral, 1, None, closed="left")],
        "method": [StrOptions({"fasterpam", "pam"})],
        "max_iter": [NumberInterval(Integral, 1, None, closed="left")],
    }

    def __init__(
        self,
        n_select=8,
        *,
        metric="cosine",
        bandwidth="median",
        method="fasterpam",
        max_iter=300,
    ):
        self.n_select = n_select
        self.metric = metric
        self.bandwidth = bandwidth
        self.method = method
        self.max_iter = max_iter

    def _select(self, D, sigma, costs):
        self.initial_indices_ = _k_center(D, sigma, self.n_select)
        selected, self.n_iter_, converged = _k_medoids(
            D, sigma, self.initial_indices_, self.max_iter, self.method
        )
        if not converged:
            _warn_max_iter(self.max_iter)
        return selected


class BudgetGreedySelector(_BaseSelector):
    """Select models by largest coverage gain per unit cost within a budget.

    Repeatedly adds the model with the largest marginal gain of
    ``J = sum_i max_{s in sel} K(z_i, z_s)`` per unit cost among the models
    that still fit the remaining budget, until none fits (paper, appendix
    E.4.3). A model fits while the exactly rounded sum of the selected costs
    and its own is at most ``budget``, up to rounding: a relative
    ``4 * n_terms`` float64 machine epsilons, with ``n_terms`` the number of
    costs summed, plus, for costs given in a narrower float type (a float32
    array, Series or torch tensor), one machine epsilon of that type (float32
    ``0.1 + 0.2`` is ``0.3000000045``). Costs and budgets written in decimal
    are stored rounded to binary (``0.1 + 0.2`` is ``0.30000000000000004``
    in float64, over the float ``0.3``), and a model whose cost completes the
    budget as written fits; ``total_cost_`` may therefore exceed ``budget``
    by that rounding, never by more. The costs' values are used as given.

    A model may cost 0 (one run locally, as ``LocusRouter``'s
    ``model_costs`` allow). A free model always fits and its gain costs
    nothing, so free models are taken first, the larger gain first; then the
    costly ones by gain per unit cost. A free model that adds no coverage is
    still taken (J never decreases), so every free model is selected. Values
    equal up to rounding (a relative ``4 * n_models`` machine epsilons, the
    tolerance of :class:`KMedoidsSelector`'s swaps) are ties, which go to the
    lower row.

    Parameters
    ----------
    budget : float, default=8.0
        Largest total cost of the selection, >= 0 and at least the cheapest
        model's cost (0 selects the free models only). With unit costs
        (``costs=None`` in :meth:`fit`) it is a model count.
    metric : {"cosine", "euclidean", "precomputed"}, default="cosine"
        Distance between embeddings; identical embeddings are at distance 0, and
        a zero embedding at cosine distance 1 from every other one. With
        "precomputed", X is a symmetric distance matrix in :meth:`fit`, and the
        distances from each row to the fitted models, shape
        (n_samples, n_models_fit), in :meth:`transform` and :meth:`predict`.
    bandwidth : "median" or float, default="median"
        Kernel bandwidth sigma of ``K = exp(-d ** 2 / sigma ** 2)``; "median"
        uses the median distance between distinct models.

    Attributes
    ----------
    objective_ : float
        Total coverage J, in [0, n_models].
    total_cost_ : float
        Total cost of the selected models (exactly rounded), <= ``budget``
        up to rounding (see above).
    selected_indices_ : ndarray of int64, shape (n_selected,)
        Rows of the selected models, in selection order.
    selected_embeddings_ : ndarray of shape (n_selected, n_features) or None
        Embeddings of the selected models (None with ``metric="precomputed"``).
    labels_ : ndarray of int64, shape (n_models,)
        Position in ``selected_indices_`` of each model's most similar
        selected model, as :meth:`predict` gives on the training data.
    coverage_ : ndarray of float64, shape (n_models,)
        Similarity of each model to its most similar selected model.
    bandwidth_ : float
        Kernel bandwidth sigma used (the median distance between distinct
        models when ``bandwidth="median"``; when more than half the pairs are
        duplicates, the median of the non-zero distances; 1.0 when all
        distances are zero).
    n_features_in_ : int
        Number of features seen during fit (``n_models`` when precomputed).
    feature_names_in_ : ndarray of str, shape (n_features_in_,)
        Names of features seen during fit, when X has string column names.

    See Also
    --------
    KMedoidsSelector : Selects a fixed number of models.
    budget_greedy_select : Function twin.

    Examples
    --------
    >>> import numpy as np
    >>> from locus_sklearn import BudgetGreedySelector
    >>> X = np.array([[0.0], [0.1], [5.0], [5.1], [10.0]])
    >>> costs = [1.0, 3.0, 1.0, 3.0, 1.0]
    >>> selector = BudgetGreedySelector(budget=2.0, metric="euclidean")
    >>> selector.fit(X, costs=costs).selected_indices_.tolist()
    [2, 0]
    >>> selector.total_cost_
    2.0
    """

    _parameter_constraints = {
        **_BaseSelector._parameter_constraints,
        "budget": [NumberInterval(Real, 0, None, closed="left")],
    }

    def __init__(self, budget=8.0, *, metric="cosine", bandwidth="median"):
        self.budget = budget
        self.metric = metric
        self.bandwidth = bandwidth

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None, *, costs=None):
        """Select models within ``budget``.

        Parameters
        ----------
        X : array-like of shape (n_models, n_features) or (n_models, n_models)
            Model embeddings, or distances when ``metric="precomputed"``.
        y : None
            Ignored.
        costs : array-like of shape (n_models,), pandas Series, mapping of str to float, default=None
            Cost of each model (parameters, price), finite and >= 0 (a free
            model is taken before any costly one); positive costs within a
            factor ~1e270 of each other (any units: costs of 1e-320 work).
            None gives every model a cost of 1. An array is read in the row
            order of ``X``; a Series (by its index) or a mapping is read by
            model name, when ``X`` is a DataFrame indexed by unique model
            names (as :class:`~locus_sklearn.LocusEmbedder` gives under
            ``set_output(transform="pandas")``), and must name exactly its
            models.

        Returns
        -------
        self : object
            The fitted selector.
        """
        return self._fit(X, costs)

    def _check_fit_params(self, n_models, costs, row_names):
        return _check_costs(costs, n_models, self.budget, row_names)

    def _select(self, D, sigma, costs):
        costs, costs_eps = costs  # as _check_fit_params returned them
        selected = _budget_greedy(_rbf(D, sigma, out=D), costs, self.budget, costs_eps)
        self.total_cost_ = math.fsum(costs[selected])
        return selected
