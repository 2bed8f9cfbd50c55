"""Helpers shared by the inspection functions (validated pools, distances, scores)."""

from collections.abc import Hashable, Iterable, Mapping
from numbers import Integral, Real

import numpy as np
import pandas as pd
from pandas.api.types import is_scalar
from scipy.spatial.distance import cdist
from sklearn.utils.validation import check_array, check_is_fitted

from .._base import _normal_form_hint, route_by_utility
from .._evals import _preview, _unordered, check_evals
from .._selectors import _check_precomputed, _distances
from .._tensors import untorched
from .._warnings import warn_external
from ..metrics import route

METRICS = ("cosine", "euclidean")


def k_values(ks):
    """The values of k a per-k warning names: one as itself, several as a
    list (``3``, ``[3, 4]``).

    >>> k_values([3]), k_values([3, 4])
    (3, '[3, 4]')
    """
    return ks[0] if len(ks) == 1 else _preview(ks)


def check_metric(metric, *, precomputed=False):
    """``metric``, one of ``METRICS`` (or "precomputed" where the caller
    takes distances)."""
    valid = METRICS + ("precomputed",) if precomputed else METRICS
    if metric not in valid:
        raise ValueError(f"metric must be one of {list(valid)}; got {metric!r}.")
    return metric


def as_distances(distances, names=None, *, name="embeddings"):
    """A precomputed distance matrix of shape (n_models, n_models) as float64,
    and the model names.

    A DataFrame names its models by its index, and its columns must be the
    same models in the same order (as :func:`score_disagreement`'s
    ``distance``); an array's models are named by ``names``, or by their row
    index. NaN (a pair that could not be compared) is refused, naming a pair.
    """
    if hasattr(distances, "fit"):
        raise TypeError(
            f"{name} is a {type(distances).__name__}, but metric='precomputed' takes "
            "a square matrix of distances between models, such as "
            "score_disagreement(evals).distance."
        )
    if isinstance(distances, pd.DataFrame):
        names = _frame_names(distances, names, name=name)
        if not distances.index.equals(distances.columns):
            raise ValueError(
                f"{name} must have the same models as index and columns, in the "
                f"same order; got index {_preview(distances.index)} and columns "
                f"{_preview(distances.columns)}."
            )
    D = check_array(
        untorched(distances),
        dtype=np.float64,
        ensure_all_finite="allow-nan",
        input_name=name,
    )
    names = (
        np.arange(len(D)) if names is None else check_names(names, len(D), name=name)
    )
    # check_array has refused infinities; NaN is named here, with its cause.
    missing = np.isnan(D)
    if missing.any():
        i, j = np.argwhere(missing)[0]
        raise ValueError(
            f"{name} has {int(missing.sum())} NaN distance(s), e.g. between "
            f"{names[i]!r} and {names[j]!r}: pairs that could not be compared "
            "(score_disagreement leaves pairs under min_shared common queries NaN). "
            "Score those models on common queries, lower min_shared, or leave them "
            "out."
        )
    _check_precomputed(D, name=name)
    return D, names


def pool_distances(embeddings, names=None, *, metric, name="embeddings"):
    """Distances of shape (n_models, n_models) between the models of a pool
    given as embeddings (with ``metric`` "cosine" or "euclidean") or as a
    precomputed matrix (``metric="precomputed"``), and the model names."""
    if check_metric(metric, precomputed=True) == "precomputed":
        return as_distances(embeddings, names, name=name)
    Z, names = as_pool(embeddings, names, name=name, metric=metric)
    return pairwise(Z, metric=metric), names


def as_pool(
    embeddings, names=None, *, name="embeddings", names_name="names", metric=None
):
    """Embeddings of shape (n_models, d) as float64 and the model names.

    ``embeddings`` is a fitted router (its ``model_embeddings_`` and
    ``classes_``), a DataFrame or an array. A DataFrame names its models by its
    index (as ``LocusEmbedder.set_output(transform="pandas").transform``
    returns them), and ``names`` must then be None, as for a router. An
    array's models are named by ``names``, or by their row index when
    ``names`` is None. ``names_name`` is how errors call ``names`` (e.g.
    "reference_names"). ``metric`` is the metric the caller compares the
    embeddings with, where it also takes ``metric="precomputed"``: a
    DataFrame that looks like a distance matrix then warns
    (:func:`warn_if_distances`); None checks nothing.
    """
    if hasattr(embeddings, "fit"):
        check_is_fitted(embeddings)
        if not hasattr(embeddings, "model_embeddings_"):
            raise TypeError(
                f"{type(embeddings).__name__} has no model_embeddings_; pass the "
                "model embeddings as an array (with names=, or embeddings= where "
                "the function takes a router)."
            )
        if names is not None:
            raise ValueError(
                f"{names_name} must be None when {name} is a fitted router; its "
                "classes_ name the models."
            )
        # Checked as an array is: a NaN would otherwise surface as a bare
        # LinAlgError (or a NaN result) far from its cause.
        Z = check_array(embeddings.model_embeddings_, dtype=np.float64, input_name=name)
        return Z, np.asarray(embeddings.classes_, dtype=object)
    if isinstance(embeddings, pd.DataFrame):
        names = _frame_names(embeddings, names, name=name, names_name=names_name)
    Z = check_array(untorched(embeddings), dtype=np.float64, input_name=name)
    if metric is not None and isinstance(embeddings, pd.DataFrame):
        warn_if_distances(embeddings, Z, metric, name=name)
    if names is None:
        return Z, np.arange(len(Z))
    return Z, check_names(names, len(Z), name=name, param=names_name)


def _frame_names(frame, names, *, name, names_name="names"):
    """The model names of a DataFrame: its index. Like a router's
    ``classes_``, it leaves no room for ``names``: rows are never paired by
    position with names from elsewhere."""
    if names is not None:
        raise ValueError(
            f"{names_name} must be None when {name} is a DataFrame; its index "
            f"{_preview(frame.index)} names the models."
        )
    return check_names(frame.index, len(frame), name=name, param=f"{name}.index")


def warn_if_distances(frame, Z, metric, *, name="embeddings"):
    """Warn when the DataFrame ``frame`` (its values ``Z`` as float64) looks
    like a precomputed distance matrix but is read as embeddings with
    ``metric``.

    A square DataFrame with the same models as index and columns and a zero
    distance from each model to itself (such as
    score_disagreement(evals).distance) is still a valid (n_models, n_models)
    embedding matrix, so forgetting metric="precomputed" gives other
    distances and another neighbor order without any error. Its columns may
    be in another order than its index, as :func:`router_embeddings` matches
    them.
    """
    if metric == "precomputed" or not len(frame) or len(frame) != frame.shape[1]:
        return
    rows, columns = frame.index.tolist(), frame.columns.tolist()
    if not _same_labels(rows, columns):
        return
    column = {m: j for j, m in enumerate(columns)}
    if np.all(Z[np.arange(len(Z)), [column[m] for m in rows]] == 0):
        # Most functions take distances with the columns in the index's
        # order: the advice says how to get there.
        order = "" if rows == columns else f", as {name}.loc[:, {name}.index]"
        warn_external(
            f"{name} is a square DataFrame with the same models as index and "
            "columns and a zero distance from each model to itself: it looks "
            "like a distance matrix (such as score_disagreement(evals).distance), "
            f"but it is read as embeddings with metric={metric!r}. Pass "
            f'metric="precomputed" if it holds distances{order}.',
            UserWarning,
        )


def router_embeddings(router, embeddings=None, *, metric=None):
    """The embeddings to judge a fitted router's pool by, and its model names.

    ``embeddings`` (array-like of shape (n_models, d), one row per model of
    ``router.classes_``) replaces the router's own ``model_embeddings_``; a
    DataFrame's rows are matched to ``classes_`` by its index (rows of other
    models are left out). A DataFrame whose columns are the same model
    names as its index, in any order, is a distance matrix (for a selector
    with ``metric="precomputed"``): its columns are matched to ``classes_``
    too, so it stays symmetric. One with some model names among its columns,
    but not those of its index, is refused: columns cannot be matched to
    models then. ``metric`` is the metric the caller compares the embeddings
    with, as in :func:`as_pool`: a DataFrame that looks like a distance
    matrix warns unless it is "precomputed"; None (a caller that passes the
    matrix on as it is, to a selector) checks nothing.

    Returns
    -------
    Z : ndarray of float64, shape (n_models, d)
    classes : ndarray of object, shape (n_models,)
    """
    check_is_fitted(router)
    classes = np.asarray(router.classes_, dtype=object)
    if embeddings is None:
        Z, _ = as_pool(router)
        return Z, classes
    if isinstance(embeddings, pd.DataFrame):
        Z, names = as_pool(embeddings, metric=metric)
        position = {m: i for i, m in enumerate(names.tolist())}
        absent = [m for m in classes.tolist() if m not in position]
        if absent:
            raise ValueError(
                f"embeddings has no row for {len(absent)} model(s) of the router: "
                f"{_preview(absent)}; its index names the models."
            )
        rows = [position[m] for m in classes.tolist()]
        columns = embeddings.columns.tolist()
        if _same_labels(columns, names.tolist()):
            # A distance matrix: reordering only its rows to classes_ would
            # leave it unsymmetric ("X is not symmetric") in any other order.
            column = {m: j for j, m in enumerate(columns)}
            return Z[np.ix_(rows, [column[m] for m in classes.tolist()])], classes
        named = [m for m in classes.tolist() if _has_label(columns, m)]
        if named:
            raise ValueError(
                f"embeddings has model names among its columns (e.g. {named[0]!r}) "
                "but not the same models as its index: a distance matrix needs "
                "the same models as index and columns (in any order, matched by "
                f"name); got index {_preview(embeddings.index)} and columns "
                f"{_preview(embeddings.columns)}."
            )
        return Z[rows], classes
    Z = check_array(untorched(embeddings), dtype=np.float64, input_name="embeddings")
    if len(Z) != len(classes):
        raise ValueError(
            f"embeddings has {len(Z)} rows but the router has {len(classes)} "
            "models; pass one row per model of router.classes_."
        )
    return Z, classes


def _has_label(labels, label):
    """Whether ``label`` is among ``labels``; False for an unhashable one."""
    try:
        return label in set(labels)
    except TypeError:
        return False


def _same_labels(a, b):
    """Whether the lists ``a`` and ``b`` hold the same distinct labels (in
    any order); False for unhashable ones."""
    try:
        return len(a) == len(b) == len(set(a)) and set(a) == set(b)
    except TypeError:
        return False


def check_names(names, n_models, *, name="embeddings", param="names"):
    """Model names as an object array of shape (n_models,), one per row of
    ``name``; ``param`` is how errors call them (e.g. "reference_names")."""
    if isinstance(names, str | bytes):
        raise TypeError(
            f"{param} must be a sequence of model names, not the string {names!r}."
        )
    if isinstance(names, Mapping) or _unordered(names):
        # Names are paired with rows by position: a set iterates in hash order
        # (for str, one that changes with PYTHONHASHSEED), and a mapping would
        # give its keys where its values may be meant.
        raise TypeError(
            f"{param} must be a sequence of model names in the order of the rows "
            f"of {name}; got a {type(names).__name__}, which has no such order. "
            "Pass a list: sorted() of a set, or list() of a mapping's keys or "
            "values."
        )
    if not isinstance(names, Iterable) or (
        isinstance(names, np.ndarray) and names.ndim == 0
    ):
        raise TypeError(
            f"{param} must be a sequence of model names, one per row of {name}; "
            f"got {names!r} ({type(names).__name__})."
        )
    listed = list(names)
    # One name per element, built element by element: np.asarray would read
    # tuple names (a MultiIndex's, such as ("f1", "a")) as a second axis.
    shape = np.shape(names) if isinstance(names, np.ndarray) else (len(listed),)
    if shape != (n_models,):
        raise ValueError(
            f"{param} must have one name per row of {name}, shape ({n_models},); "
            f"got shape {shape}."
        )
    names = np.empty(n_models, dtype=object)
    for i, m in enumerate(listed):
        names[i] = m
    missing = [
        i for i, m in enumerate(listed) if m is None or (is_scalar(m) and pd.isna(m))
    ]
    if missing:
        raise ValueError(
            f"{param} has {len(missing)} missing name(s) (None or NaN), e.g. at "
            f"position {missing[0]}; each model needs a name."
        )
    unhashable = [m for m in listed if not isinstance(m, Hashable)]
    if unhashable:
        raise TypeError(
            f"{param} must hold hashable model names, such as str; got "
            f"{_preview(unhashable)}."
        )
    # Names that are one dictionary key (1, 1.0 and True) would be looked up as
    # one model, and names printed alike (1 and "1") would be read as one.
    seen_key, seen_text, duplicates = set(), set(), {}
    for m in listed:
        if m in seen_key or str(m) in seen_text:
            duplicates.setdefault(m, None)
        seen_key.add(m)
        seen_text.add(str(m))
    if duplicates:
        raise ValueError(
            f"{param} has duplicates: {_preview(duplicates)}; each model needs its "
            "own name (names equal as dictionary keys, such as 1 and 1.0, or "
            "printed alike, such as 1 and '1', are one name)."
        )
    return names


def as_pool_for_evals(embeddings, evals, names=None, *, metric=None):
    """Like :func:`as_pool` (``metric`` as there), plus the validated
    ``evals`` table.

    An array without ``names`` is matched to the models of ``evals`` in sorted
    order (the row order of ``LocusEmbedder.transform(evals)``); a DataFrame by
    its index.
    """
    table = check_evals(evals)
    named = hasattr(embeddings, "model_embeddings_") or isinstance(
        embeddings, pd.DataFrame
    )
    if names is None and not named:
        Z = check_array(
            untorched(embeddings), dtype=np.float64, input_name="embeddings"
        )
        return Z, _models_by_row(len(Z), table), table
    Z, names = as_pool(embeddings, names, metric=metric)
    return Z, names, table


def pool_distances_for_evals(embeddings, evals, names=None, *, metric):
    """Like :func:`pool_distances`, plus the validated ``evals`` table.

    Rows of an array without ``names`` (embeddings, or a precomputed
    distance matrix) are matched to the models of ``evals`` in sorted order,
    as in :func:`as_pool_for_evals`.

    Returns
    -------
    D : ndarray of float64, shape (n_models, n_models)
    names : ndarray of shape (n_models,)
    table : EvalTable
    """
    if check_metric(metric, precomputed=True) != "precomputed":
        Z, names, table = as_pool_for_evals(embeddings, evals, names, metric=metric)
        return pairwise(Z, metric=metric), names, table
    table = check_evals(evals)
    by_row = names is None and not isinstance(embeddings, pd.DataFrame)
    D, names = as_distances(embeddings, names)
    if by_row:
        names = _models_by_row(len(D), table)
    return D, names, table


def check_models_in_pool(
    table,
    names,
    *,
    pool="the embeddings",
    remedy="give each an embedding, or leave them out of evals",
):
    """Refuse models of ``table`` missing from ``names``, the pool: a naming
    mistake, not one to drop quietly. ``pool`` says what the names are
    ("the router's classes_") and ``remedy`` what to do about it."""
    known = set(names.tolist())
    absent = [m for m in table.models if m not in known]
    if absent:
        raise ValueError(
            f"evals has {len(absent)} model(s) that are not in {pool}: "
            f"{_preview(absent)}; {remedy}."
        )


def _models_by_row(n_rows, table):
    """The models of ``table`` in sorted order, one per row of an array
    given without names (the row order of ``LocusEmbedder.transform``)."""
    if n_rows != table.n_models:
        raise ValueError(
            f"embeddings has {n_rows} rows but evals has {table.n_models} models; "
            "pass names= (one model name per row) to match them."
        )
    return table.models.copy()


def pairwise(Z, Y=None, *, metric="cosine"):
    """Distances of shape (n_Z, n_Y) in float64 (``Y=None`` means ``Y = Z``):
    identical embeddings at exactly 0 (not the ~1e-16 of rounding, which a
    degenerate pool would otherwise be judged by), a zero vector at cosine
    distance 1 from every other one. Cosine distances are the portfolio
    selectors'; Euclidean ones are computed from the differences of the
    embeddings (:func:`_euclidean`)."""
    Z = np.asarray(Z, dtype=np.float64)
    Y = None if Y is None else np.asarray(Y, dtype=np.float64)
    if check_metric(metric) == "euclidean":
        return _euclidean(Z, Z if Y is None else Y)
    return _distances(Z, Y, metric, name="embeddings")


def _euclidean(Z, Y):
    """Euclidean distances of shape (n_Z, n_Y) between the rows of ``Z``
    and ``Y`` (float64), to a few ulps.

    The expansion |x|^2 - 2 x.y + |y|^2 of the selectors' (scikit-learn's
    euclidean_distances) cancels for close embeddings: 1e-7 apart on rows of
    norm about 3 it was off by 3%, enough to rank the wrong neighbour first,
    and not in the same way for one row as for the whole matrix.
    cdist sums the squared differences, exact for close rows; |x - y| equals
    |y - x|, so the matrix is exactly symmetric, a row of it equals the
    distances from that row alone, and identical rows are exactly 0 apart.
    The rows are first brought to a largest magnitude in [0.5, 1) by a power
    of two, exact both ways (for any entry over 2**-1000 times the
    largest), so that no square over- or underflows at 1e160 or 1e-200.
    """
    largest = float(max(np.abs(Z).max(), np.abs(Y).max()))
    exponent = np.frexp(largest)[1] if largest > 0 else 0
    D = cdist(np.ldexp(Z, -exponent), np.ldexp(Y, -exponent))
    with np.errstate(over="ignore"):
        np.ldexp(D, exponent, out=D)
    if not np.isfinite(D).all():
        raise ValueError(
            f"embeddings has values up to {largest:.3g} in magnitude: the "
            "Euclidean distances between these embeddings exceed the largest "
            "float64 (~1.8e308). Divide the embeddings by a constant (e.g. "
            "their largest absolute value) first."
        )
    return D


def match_threshold(cross_distances, false_match_rate):
    """Distance under which at most a share ``false_match_rate`` of the cross
    pairs (different models) falls: midway between the largest distance that
    many pairs reach, ties counted, and the next distance (half the smallest
    when even the pairs at the smallest are too many), so that no pair sits on
    the threshold itself. Where the two distances are adjacent floats, with
    no float between them, it is the largest distance let through.

    Rates over n queries take the values k / n, so many pairs tie: a
    threshold on a tied value would let all of them through, more than the
    share asked for.

    Raises ValueError when more than that share of the pairs are at distance
    0: every threshold >= 0 (the matching functions' ``distance <= threshold``)
    lets them through. Where every pair is at 0, no rate in (0, 1) can be
    met, and the message says so: an explicit ``threshold=`` to the matching
    function, or removing the duplicates, is the way out.

    Examples
    --------
    >>> d = [0.1] * 3 + [0.2] * 7  # three pairs tie at the smallest distance
    >>> match_threshold(d, 0.3), match_threshold(d, 0.2)  # 3 of 10, then none
    (0.15000000000000002, 0.05)
    >>> import numpy as np
    >>> d = [0.6, np.nextafter(0.6, 1)] + [0.9] * 8  # one ulp apart
    >>> match_threshold(d, 0.1)  # not the midpoint, which rounds onto the next
    0.6
    """
    values, counts = np.unique(np.asarray(cross_distances), return_counts=True)
    share = np.cumsum(counts) / counts.sum()
    k = int(np.sum(share <= false_match_rate))  # distinct distances let through
    if k == 0 and values[0] == 0:
        n_zero, total = int(counts[0]), int(counts.sum())
        # Both calibrations share this function: the message names both
        # matching functions (scores, embeddings), which take threshold=.
        explicit = (
            "pass an explicit threshold= to the matching function "
            "(match_models_by_scores, or match_models for embeddings)"
        )
        if n_zero == total:
            # The rate that would let them through is 1, which false_match_rate
            # cannot be, and more queries do not separate identical answers.
            raise ValueError(
                f"false_match_rate={false_match_rate!r} cannot be met: all {total} "
                "compared pairs of different models are at distance 0, as alike "
                "as a model is to itself: the models of evals cannot be told "
                "apart (they may be duplicates, one model under several names), "
                "and no false_match_rate below 1 keeps such pairs out. Remove the "
                f"duplicates from evals, or {explicit}."
            )
        raise ValueError(
            f"false_match_rate={false_match_rate!r} cannot be met: {n_zero} of "
            f"the {total} pairs of different models are at distance 0, as "
            "alike as a model is to itself, and every threshold >= 0 matches "
            "them. Ask for a false_match_rate of at least "
            f"{n_zero} / {total}, or tell the models apart on more "
            "queries (a larger n_evals). Models that agree on every query "
            f"(duplicates) stay at 0 whatever the queries: remove them, or {explicit}."
        )
    if k == 0:
        return float(values[0] / 2)
    middle = (values[k - 1] + values[k]) / 2
    # Between adjacent floats the midpoint rounds onto one of them: onto the
    # next distance, it would let that distance's pairs through too.
    return float(middle if middle < values[k] else values[k - 1])


def neighbor_order(D):
    """Other models sorted by distance, shape (n_models, n_models - 1).

    Ties go to the lowest index (a stable sort).
    """
    n = D.shape[0]
    D = D.copy()
    D[np.arange(n), np.arange(n)] = -np.inf  # self first, then dropped
    return np.argsort(D, axis=1, kind="stable")[:, 1:]


def lookup(names, model, *, name="model"):
    """Row of ``model`` (a name, or an int row index of an unnamed pool) in
    ``names``."""
    listed = names.tolist()
    # True and 1.0 equal 1 as dictionary keys: they would be read as row 1 of
    # a pool named by row index. A float is a name only in a pool of floats.
    if isinstance(model, bool | np.bool_) or (
        isinstance(model, Real)
        and not isinstance(model, Integral)
        and not any(isinstance(m, float) for m in listed)
    ):
        raise TypeError(
            f"{name} must be a model name of the pool or, for embeddings without "
            f"names, an int row index; got {model!r} ({type(model).__name__})."
        )
    position = {m: i for i, m in enumerate(listed)}
    try:
        return position[model]
    except (KeyError, TypeError):
        # A name read as a number (a csv's model ids '0', '1', ...): the
        # pool holds it as a str.
        as_name = (
            f" Model names are strings: pass {str(model)!r}."
            if isinstance(model, Real) and str(model) in position
            else ""
        )
        raise ValueError(
            f"{name}={model!r} is not a model of the pool; the pool is "
            f"{_preview(names, limit=10)}.{as_name}"
            + _normal_form_hint([model], listed)
        ) from None


# Up to this many distinct score values, disagreement() sums exact per-step
# matrix products (2 per step) rather than looping over the models: cheaper
# while the steps are fewer than about a hundred.
_MAX_LEVELS = 64


# Scores given in float32 (as parquet files often hold them) carry its
# rounding into a disagreement computed on them: |0.3 - 0.1| read 0.2000000104, over a
# threshold of 0.2, and two disagreements of 0.1 by hand read 0.1000000040
# and 0.1000000015, which ranked one before the other. Rounding the rates
# (to 6 decimals) did not mend it: a rate halfway between two rounded values
# (0.2 / 128 = 0.0015625) rounded either way by that noise. So each score is
# read back as the decimal it was written as, an integer count of 1e-7 units:
# float64(score) * 1e7 is exact (a float32 significand times 1e7 fits in 53
# bits), and rounding it to an integer gives back any score written with at
# most 7 decimals (float32 is within 3e-8 of it in [0, 1]); any other score
# moves by at most 5e-8, less than float32's own spacing just below 1
# (6e-8). A pair's disagreement is then the exact integer sum of |a - b| in
# units over the exact integer n_shared * 1e7, divided once in float64: a
# correctly rounded quotient, so disagreements equal by hand are the same
# float and 2e6 / 1e7 is float64 0.2 itself, which a threshold of 0.2 meets.
_UNITS = 10**7

# The sums and n_shared * 1e7 are exact in float64 (and the division
# correctly rounded) below 2**53; scores in [0, 1] differ by at most 1e7
# units, so that holds for up to this many shared queries.
_MAX_SHARED = (2**53 - 1) // _UNITS  # 900,719,925


def _score_units(Y):
    """Scores as int32 counts of 1e-7 units (0 where missing; see ``_UNITS``),
    and where they are observed. At most 1e7, so any difference fits int32."""
    observed = ~np.isnan(Y)
    scaled = np.where(observed, Y, 0).astype(np.float64) * _UNITS  # exact
    return np.rint(scaled).astype(np.int32), observed


def disagreement(Y, X=None):
    """Disagreement rate and common-query count for every pair of models,
    from the scores read exactly on the 1e-7 grid (see ``_UNITS``).

    Parameters
    ----------
    Y : ndarray of shape (n_queries, n_models)
        Scores with NaN where missing.
    X : ndarray of shape (n_queries, n_other), default=None
        Scores of other models on the same queries (rows), NaN where missing;
        None compares the models of ``Y`` with each other.

    Returns
    -------
    rate : ndarray of shape (n_models, n_other)
        Mean ``|y_a - x_b|`` over the queries both models have a score for
        (the fraction of queries where binary correctness differs), the
        float64 nearest the exact rate of the scores on the 1e-7 grid; NaN
        where they share no query.
    common : ndarray of int64, shape (n_models, n_other)

    Raises
    ------
    ValueError
        If there are more than ``_MAX_SHARED`` queries (rows).

    Notes
    -----
    With scores on levels v_0 < ... < v_K, ``|a - b|`` is the sum over steps
    k of (v_k - v_{k-1}) times whether a and b fall on different sides of
    v_k; for two 0/1 indicators ``|a - b| = a (1 - b) + (1 - a) b``: two
    matrix products per step (one step for 0/1 scores, ten for a judge's
    0.0-1.0 in tenths) instead of a pass over every pair of models; past
    ``_MAX_LEVELS`` levels, one pass per model. The sums are exact integers:
    a product of 0/1 indicators over fewer than 2**53 queries is an exact
    integer count in float64, and a level gap times a count, or a per-query
    gap, is summed in int64.
    """
    X = Y if X is None else X
    if len(Y) > _MAX_SHARED:
        raise ValueError(
            f"score disagreement is exact for at most {_MAX_SHARED:,} shared "
            f"queries (sums of score differences in units of 1e-7 must stay "
            f"below 2**53); got {len(Y):,}. Compare the models on a sample of "
            "their common queries."
        )
    units_y, observed_y = _score_units(Y)
    units_x, observed_x = _score_units(X)
    OY = observed_y.astype(np.float64)
    OX = observed_x.astype(np.float64)
    common = np.rint(OY.T @ OX).astype(np.int64)
    total = np.zeros(common.shape, dtype=np.int64)
    levels = np.unique(np.concatenate([units_y[observed_y], units_x[observed_x]]))
    if len(levels) <= _MAX_LEVELS:
        # |a - b| is the sum over steps v_{k-1} < v_k of (v_k - v_{k-1}) times
        # whether a and b fall on different sides of v_k (see disagreement).
        for low, high in zip(levels[:-1], levels[1:], strict=True):
            above_y = np.where(observed_y & (units_y >= high), 1.0, 0.0)
            above_x = np.where(observed_x & (units_x >= high), 1.0, 0.0)
            apart = above_y.T @ (OX - above_x) + (OY - above_y).T @ above_x
            total += (int(high) - int(low)) * np.rint(apart).astype(np.int64)
    else:
        for a in range(Y.shape[1]):
            both = observed_y[:, [a]] & observed_x
            gap = np.abs(units_y[:, [a]] - units_x)
            total[a] = np.where(both, gap, 0).sum(axis=0, dtype=np.int64)
    with np.errstate(invalid="ignore", divide="ignore"):
        # int64 / int64 divides the two exact float64 integers: one rounding.
        rate = np.where(common > 0, total / (np.maximum(common, 1) * _UNITS), np.nan)
    return rate, common


def router_utility(router, queries, *, function):
    """What ``router.predict`` maximises, as float64: its ``decision_function``,
    or ``predict_proba`` for a router without one (which then cannot have a
    cost weight: the cost term is the decision function's). ``function``
    names the caller in errors."""
    if hasattr(router, "decision_function"):
        return np.asarray(router.decision_function(queries), dtype=np.float64)
    if not hasattr(router, "predict_proba"):
        raise TypeError(
            f"{function} needs a router with predict_proba (or decision_function) "
            f"to route by; {type(router).__name__} has neither."
        )
    cost_weight = getattr(router, "cost_weight", 0)
    if cost_weight:
        # predict routes by P(correct) - cost_weight * cost, which only the
        # router's decision_function computes; P(correct) alone would route
        # as if the costs were 0.
        raise TypeError(
            f"{function} routes as router.predict does, but "
            f"{type(router).__name__} has cost_weight={cost_weight!r} and no "
            "decision_function to apply it with; give the router a "
            "decision_function returning its routing utility, or set "
            "cost_weight=0."
        )
    return np.asarray(router.predict_proba(queries), dtype=np.float64)


def router_routing(router, queries, *, function):
    """``routed(available, rows=None)``: the column ``router.predict`` routes
    each query of ``queries`` (or of its positions ``rows``) to among the
    ``available`` models, a bool mask of shape (n_rows, n_models) with one
    model per row at least.

    The utilities are :func:`router_utility`'s, computed once for every mask.
    Where a huge ``cost_weight`` overflowed every available utility of a
    row to -inf, the utilities cannot tell the models apart, and the row is
    routed as ``predict`` routes it, by cost
    (:func:`~locus_sklearn._base.route_by_utility`); ``route`` alone would
    pick the first available model.
    """
    utility = router_utility(router, queries, function=function)
    costs = getattr(router, "model_costs_", None)
    cost_weight = getattr(router, "cost_weight", 0)
    proba = []  # P(correct), read once and only if some row overflowed

    def routed(available, rows=None):
        rows = np.arange(len(utility)) if rows is None else np.asarray(rows)
        chosen = route(utility[rows], available)
        stuck = np.flatnonzero(utility[rows, chosen] == -np.inf)
        if len(stuck) and costs is not None and cost_weight:
            if not proba:
                proba.append(np.asarray(router.predict_proba(queries), np.float64))
            chosen[stuck] = route_by_utility(
                proba[0][rows[stuck]],
                np.asarray(costs, dtype=np.float64),
                cost_weight,
                available[stuck],
            )
        return chosen

    return routed


def import_pyplot():
    try:
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ImportError(
            "Plotting needs matplotlib; install it with `pip install matplotlib` "
            "(or `pip install locus_sklearn[plot]`)."
        ) from exc
    return plt
