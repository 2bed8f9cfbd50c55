"""Nearest models in embedding space: proxies, fallback orders, fallback routing."""

from numbers import Integral

import numpy as np
import pandas as pd
from sklearn.utils.validation import check_array, check_is_fitted

from .._evals import _object_frame, _preview, check_evals
from .._tensors import untorched
from .._warnings import warn_external
from ._common import (
    _has_label,
    as_distances,
    as_pool,
    check_metric,
    check_models_in_pool,
    k_values,
    lookup,
    neighbor_order,
    pairwise,
    pool_distances,
    router_embeddings,
    router_routing,
)

__all__ = ["fallback_order", "fallback_routing_accuracy", "nearest_models"]


def _check_k(k, n_max, *, what):
    """``k`` as a list of distinct ints in [1, n_max]; ``n_max=None`` sets no
    upper bound (``what`` then says what a large k means)."""
    if isinstance(k, Integral):
        ks = [k]
    elif isinstance(k, str) or not hasattr(k, "__iter__"):
        ks = None  # 2.0 or "2": not a count, and list() would not say so
    else:
        ks = list(k)
    if ks is None or not all(
        isinstance(v, Integral) and not isinstance(v, bool) for v in ks
    ):
        raise TypeError(f"k must be an int or a sequence of ints; got {k!r}.")
    if n_max == 0:  # only where a model is left out of a pool of one
        raise ValueError(
            f"k={ks[0] if ks else k!r} cannot be met: the pool has a single model, "
            "so there is no other model to return; pass a pool of at least 2 "
            "models."
        )
    # An empty sequence is a sequence of ints, but asks for no rank at all.
    if not ks:
        valid = ">= 1" if n_max is None else f"in [1, {n_max}], {what}"
        raise ValueError(f"k must hold at least one rank {valid}; got {k!r}.")
    for v in ks:
        if n_max is None and v < 1:
            raise ValueError(f"k={v} should be an int >= 1; {what}.")
        if n_max is not None and not 1 <= v <= n_max:
            raise ValueError(f"k={v} should be in [1, {n_max}], {what}.")
    ks = [int(v) for v in ks]
    # A repeated k would return the same row twice: refused, as
    # profile_recall_at_k refuses it (its recall is indexed by k).
    repeated = sorted({v for v in ks if ks.count(v) > 1})
    if repeated:
        raise ValueError(
            f"k repeats {repeated}; give each k once (the result has one row per k)."
        )
    return ks


def nearest_models(embeddings, model, *, k=5, metric="cosine", names=None):
    """The ``k`` models nearest to a model (or to any point) in embedding space.

    Near models behave alike (paper, section 3.5): they are proxies when a
    model is unavailable, and the nearest real models to a hypothetical
    embedding (:func:`embed_profile`) are the best matches for a capability
    profile.

    Parameters
    ----------
    embeddings : fitted router, array-like of shape (n_models, d) or (n_models, n_models)
        A router with ``model_embeddings_`` and ``classes_`` (e.g. a fitted
        :class:`~locus_sklearn.LocusRouter`), model embeddings, or with
        ``metric="precomputed"`` distances between the models (a DataFrame
        such as :func:`score_disagreement`'s ``distance`` names them).
    model : str, int, tuple or array-like of shape (d,)
        A model of the pool (its name, a tuple for a MultiIndex's rows; its
        row index when ``names`` is None), which is left out of its own
        neighbors, or an embedding (not with precomputed distances).
    k : int, default=5
        Number of neighbors.
    metric : {"cosine", "euclidean", "precomputed"}, default="cosine"
        Distance between embeddings, or "precomputed".
    names : array-like of shape (n_models,), default=None
        Model names of an array's rows; must be None for a router or a
        DataFrame.

    Returns
    -------
    neighbors : DataFrame of shape (k, 2)
        Columns ``model`` and ``distance``, nearest first, indexed by rank
        (1 to k). Ties go to the lowest row.

    Examples
    --------
    >>> from locus_sklearn.inspection import nearest_models
    >>> Z = [[1.0, 0.0], [0.9, 0.2], [0.0, 1.0]]
    >>> nearest_models(Z, "a", k=2, names=["a", "b", "c"])["model"].tolist()
    ['b', 'c']
    >>> nearest_models(Z, [0.1, 1.0], k=1, names=["a", "b", "c"])
         model  distance
    rank
    1        c  0.004963
    """
    precomputed = check_metric(metric, precomputed=True) == "precomputed"
    if precomputed:
        D, names = as_distances(embeddings, names)
    else:
        Z, names = as_pool(embeddings, names, metric=metric)
    model = untorched(model)  # a point as a tensor: bfloat16, or with grad
    # A tuple that names a model of the pool (as a MultiIndex names its rows)
    # is that model, not an embedding point.
    is_point = np.ndim(model) == 1 and not (
        isinstance(model, tuple) and _has_label(names.tolist(), model)
    )
    if is_point or np.ndim(model) > 1:
        _check_model_not_names(model)
    if precomputed:
        if is_point:
            raise ValueError(
                "model must be a model of the pool when metric='precomputed' (the "
                "distances say nothing about other points); got an array."
            )
        i = lookup(names, model)
        distances = D[i]
        candidates = np.delete(np.arange(len(D)), i)
        return _nearest(names, distances, candidates, k)
    if is_point:
        point = check_array([model], dtype=np.float64, input_name="model")
        if point.shape[1] != Z.shape[1]:
            raise ValueError(
                f"model has {point.shape[1]} dimensions but the embeddings have "
                f"{Z.shape[1]}."
            )
        distances = pairwise(point, Z, metric=metric)[0]
        candidates = np.arange(len(Z))
    else:
        i = lookup(names, model)
        distances = pairwise(Z[[i]], Z, metric=metric)[0]
        candidates = np.delete(np.arange(len(Z)), i)
    return _nearest(names, distances, candidates, k)


def _check_model_not_names(model):
    """Refuse a sequence of model names as ``model``.

    A 1-d ``model`` is read as an embedding point, so ``["a"]`` or
    ``["a", "b"]`` would otherwise fail deep in scikit-learn's check_array
    with "could not convert string to float", which does not say that one
    name is expected.
    """
    if isinstance(model, str) or np.ndim(model) == 0:
        return
    values = np.asarray(model, dtype=object).ravel()
    if any(isinstance(v, str | np.str_) for v in values):
        raise TypeError(
            "model must be one model name (str), a row index (int), or an "
            "embedding of d floats; got a sequence of names "
            f"{_preview(values, limit=5)}. Pass one name at a time."
        )


def _nearest(names, distances, candidates, k):
    """The k ``candidates`` with the smallest ``distances``, as nearest_models
    returns them (ties to the lowest row)."""
    # One count: a sequence, which the functions taking several k accept,
    # would otherwise fail to unpack or, of one int, pass unnoticed.
    if isinstance(k, bool) or not isinstance(k, Integral):
        raise TypeError(f"k must be an int, the number of neighbors; got {k!r}.")
    (k,) = _check_k(k, len(candidates), what="the number of candidate models")
    order = candidates[np.argsort(distances[candidates], kind="stable")[:k]]
    # Names as objects, not pandas' inferred str dtype (lone surrogates).
    return _object_frame(
        {"model": names[order], "distance": distances[order]},
        index=pd.RangeIndex(1, k + 1, name="rank"),
    )


def fallback_order(embeddings, *, metric="cosine", names=None):
    """For each model, the other models from nearest to farthest.

    Parameters
    ----------
    embeddings : fitted router, array-like of shape (n_models, d) or (n_models, n_models)
        A router with ``model_embeddings_`` and ``classes_``, embeddings, or
        with ``metric="precomputed"`` distances between the models (a
        DataFrame such as :func:`score_disagreement`'s ``distance`` names
        them).
    metric : {"cosine", "euclidean", "precomputed"}, default="cosine"
        Distance between embeddings, or "precomputed".
    names : array-like of shape (n_models,), default=None
        Model names of an array's rows; must be None for a router or a
        DataFrame.

    Returns
    -------
    order : DataFrame of shape (n_models, n_models - 1)
        Row ``m`` lists the other models, nearest first; columns are the
        neighbor ranks 1 to n_models - 1. Ties go to the lowest row.

    Examples
    --------
    >>> from locus_sklearn.inspection import fallback_order
    >>> Z = [[1.0, 0.0], [0.9, 0.2], [0.0, 1.0]]
    >>> fallback_order(Z, names=["a", "b", "c"])
    rank  1  2
    a     b  c
    b     a  c
    c     b  a
    """
    D, names = pool_distances(embeddings, names, metric=metric)
    order = neighbor_order(D)
    # Column by column, str names as objects: pandas would infer its str
    # dtype, which refuses a lone surrogate (model names may hold one).
    frame = _object_frame(
        {rank: names[order[:, rank - 1]] for rank in range(1, len(D))}, index=names
    )
    frame.columns = pd.RangeIndex(1, len(D), name="rank")
    return frame


def fallback_routing_accuracy(router, evals, *, k=1, embeddings=None, metric="cosine"):
    """Routing accuracy when the routed model is down and its neighbor answers.

    Each query of ``evals`` is routed as ``router.predict`` would (the
    largest ``P(correct) - cost_weight * cost``; the cheapest model where a
    huge ``cost_weight`` overflows every utility to -inf) among the models
    with a score for it; the routed model is then made unavailable and the query goes to
    its ``k``-th nearest neighbor in embedding space among the remaining
    models with a score (paper, appendix E.2). On a complete score matrix this
    is exactly the paper's protocol; on a sparse one, a query's pool is the
    models scored on it, as in :func:`~locus_sklearn.metrics.routing_accuracy`.

    Parameters
    ----------
    router : fitted router
        Any router with ``classes_`` and ``predict_proba`` (for example
        :class:`~locus_sklearn.LocusRouter`). Queries are routed by its
        ``decision_function`` (P(correct) less the cost term), or by
        ``predict_proba`` for a router without one, which then cannot have a
        positive ``cost_weight``.
    evals : DataFrame or mapping of columns
        Scored evaluations of models of the pool (``model``, ``query``,
        ``score``), typically held-out queries; a model not in
        ``router.classes_`` is refused.
    k : int or sequence of int, default=1
        Neighbor rank(s) of the fallback model, each given once: 1 is the
        nearest.
    embeddings : array-like of shape (n_models, d) or (n_models, n_models), default=None
        Embeddings of ``router.classes_`` (in that order, or a DataFrame
        indexed by model name); defaults to ``router.model_embeddings_``. Pass
        them to study a router that has no embeddings of its own (a black-box
        router). With ``metric="precomputed"``, distances between the models
        instead: a DataFrame indexed by the models (any order, e.g.
        :func:`score_disagreement`'s ``distance``) or an array in the order of
        ``router.classes_``.
    metric : {"cosine", "euclidean", "precomputed"}, default="cosine"
        Distance between embeddings, or "precomputed".

    Returns
    -------
    result : DataFrame with one row per k
        Columns ``k``; ``accuracy`` (mean score of the fallback model);
        ``no_outage_accuracy`` (mean score of the routed model on the same
        queries); ``retained`` (their ratio, NaN where
        ``no_outage_accuracy`` is 0); ``n_queries`` (queries with at least
        ``k`` scored models besides the routed one, the ones counted).
        A k that no query of ``evals`` reaches has ``n_queries`` 0 and NaN
        ``accuracy``, ``no_outage_accuracy`` and ``retained``.

    Warns
    -----
    UserWarning
        If no query has ``k`` scored models besides the routed one for some
        k (e.g. each query scored for one model only): those rows are NaN.
        If the routed models score 0 on every counted query for some k:
        ``retained`` is NaN there.

    Examples
    --------
    >>> from locus_sklearn.baselines import SingleBestRouter
    >>> from locus_sklearn.inspection import fallback_routing_accuracy
    >>> evals = {"model": ["a", "a", "b", "b", "c", "c"],
    ...          "query": ["q1", "q2"] * 3, "score": [1, 1, 1, 0, 0, 0]}
    >>> router = SingleBestRouter().fit(evals)  # always routes to "a"
    >>> Z = [[1.0, 0.0], [0.9, 0.2], [0.0, 1.0]]  # "b" is nearest to "a"
    >>> fallback_routing_accuracy(router, evals, k=[1, 2], embeddings=Z)
       k  accuracy  no_outage_accuracy  retained  n_queries
    0  1       0.5                 1.0       0.5          2
    1  2       0.0                 1.0       0.0          2
    """
    D, classes = _router_distances(router, embeddings, metric)
    ks = _check_k(k, len(classes) - 1, what="the number of other models")
    table = check_evals(evals)
    check_models_in_pool(
        table,
        classes,
        pool="the router's classes_",
        remedy="the router cannot route to them, so leave them out of evals",
    )
    Y = table.to_dense(classes)
    observed = ~np.isnan(Y)
    routed = router_routing(
        router, table.queries, function="fallback_routing_accuracy"
    )(observed)
    rows = np.arange(len(Y))
    routed_score = Y[rows, routed]
    order = neighbor_order(D)[routed]  # (n_queries, n - 1)
    n_available = np.cumsum(observed[rows[:, None], order], axis=1)
    records = []
    for kk in ks:
        counted = n_available[:, -1] >= kk
        position = np.argmax(n_available >= kk, axis=1)
        fallback = order[rows, position]
        accuracy = float(Y[rows, fallback][counted].mean()) if counted.any() else np.nan
        no_outage = float(routed_score[counted].mean()) if counted.any() else np.nan
        records.append(
            {
                "k": kk,
                "accuracy": accuracy,
                "no_outage_accuracy": no_outage,
                "retained": accuracy / no_outage if no_outage > 0 else np.nan,
                "n_queries": int(counted.sum()),
            }
        )
    result = pd.DataFrame.from_records(records)
    unmet = result.loc[result["n_queries"] == 0, "k"].tolist()
    if unmet:
        most = int(n_available[:, -1].max()) if len(n_available) else 0
        shown = k_values(unmet)
        warn_external(
            f"For k={shown}, no query of evals has that many scored models besides "
            f"the one it is routed to (at most {most} on any query): there is no "
            "fallback to score, so those rows are NaN with n_queries 0. Score more "
            "models on the same queries"
            + (f", or ask for k <= {most}." if most else "."),
            UserWarning,
        )
    # Nothing to retain a share of: accuracy / 0 is no ratio.
    zero = result.loc[
        (result["n_queries"] > 0) & (result["no_outage_accuracy"] == 0), "k"
    ].tolist()
    if zero:
        shown = k_values(zero)
        warn_external(
            f"For k={shown}, the routed models score 0 on every counted query "
            "(no_outage_accuracy 0): retained, accuracy / no_outage_accuracy, "
            "has no value there and is NaN.",
            UserWarning,
        )
    return result


def _router_distances(router, embeddings, metric):
    """Distances between a fitted router's models, in ``classes_`` order."""
    if check_metric(metric, precomputed=True) != "precomputed":
        Z, classes = router_embeddings(router, embeddings, metric=metric)
        return pairwise(Z, metric=metric), classes
    check_is_fitted(router)
    classes = np.asarray(router.classes_, dtype=object)
    if embeddings is None:
        raise ValueError(
            "metric='precomputed' needs embeddings= a matrix of distances between "
            "the router's models (such as score_disagreement(evals).distance)."
        )
    if isinstance(embeddings, pd.DataFrame):
        D, names = as_distances(embeddings)
        position = {m: i for i, m in enumerate(names.tolist())}
        absent = [m for m in classes if m not in position]
        if absent:
            raise ValueError(
                f"embeddings has no distances for {len(absent)} model(s) of the "
                f"router: {_preview(absent)}."
            )
        take = np.array([position[m] for m in classes])
        return D[np.ix_(take, take)], classes
    D, _ = as_distances(embeddings)
    if len(D) != len(classes):
        raise ValueError(
            f"embeddings has {len(D)} rows but the router has {len(classes)} "
            "models; pass one row and column per model of router.classes_."
        )
    return D, classes
