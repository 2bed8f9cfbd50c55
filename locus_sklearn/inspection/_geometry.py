"""Does the embedding geometry reflect behaviour? Correlations, agreement, families."""

from numbers import Integral

import numpy as np
import pandas as pd
from scipy import stats
from scipy.cluster.hierarchy import linkage
from scipy.spatial.distance import squareform
from sklearn.utils import Bunch

from .._evals import _object_frame
from .._shrinkage import mean_scores
from .._warnings import warn_external
from ._common import (
    as_pool,
    as_pool_for_evals,
    check_models_in_pool,
    disagreement,
    k_values,
    neighbor_order,
    pool_distances,
    pool_distances_for_evals,
)
from ._neighbors import _check_k

__all__ = [
    "distance_disagreement_correlation",
    "embedding_dimensionality",
    "model_linkage",
    "neighbor_agreement",
]

_LINKAGE_METHODS = ("single", "complete", "average", "weighted", "ward")


def distance_disagreement_correlation(
    embeddings, evals, *, names=None, metric="cosine", min_common=1
):
    """Correlation between embedding distance and correctness disagreement.

    For every pair of models, compares the distance between their embeddings
    with their disagreement rate, the fraction of their common queries on
    which their correctness differs (mean ``|score_a - score_b|``, which is the
    normalised Hamming distance for 0/1 scores). The paper (section 3.4,
    table 3) reports Pearson 0.85-0.89, Spearman 0.88 and Kendall 0.71.

    Parameters
    ----------
    embeddings : fitted router, array-like of shape (n_models, d) or (n_models, n_models)
        A router with ``model_embeddings_`` and ``classes_``, embeddings, or
        with ``metric="precomputed"`` distances between the models (a
        DataFrame such as :func:`score_disagreement`'s ``distance`` names
        them; e.g. on training queries, to check them against held-out ones).
    evals : DataFrame or mapping of columns
        Scored evaluations (``model``, ``query``, ``score``) of models of the
        pool, typically held-out queries.
    names : array-like of shape (n_models,), default=None
        Model names of an array's rows. None matches the rows to the models
        of ``evals`` in sorted order, the row order of
        ``LocusEmbedder.transform(evals)``. Must be None for a router or a
        DataFrame, whose index names the models.
    metric : {"cosine", "euclidean", "precomputed"}, default="cosine"
        Distance between embeddings, or "precomputed".
    min_common : int, default=1
        Pairs with fewer common queries are skipped (and counted).

    Returns
    -------
    result : :class:`~sklearn.utils.Bunch`
        ``pearson``, ``spearman``, ``kendall`` (floats; None when the
        distances or the disagreements do not vary over the pairs, e.g.
        identical embeddings, as :func:`embedding_dimensionality` leaves its
        ``strength_correlation``); ``n_pairs`` (pairs used); ``n_skipped``
        (pairs with fewer than ``min_common`` common queries); ``pairs``, a
        DataFrame with columns ``model_a``, ``model_b``, ``distance``,
        ``disagreement`` and ``n_common``.

    Examples
    --------
    >>> from locus_sklearn.inspection import distance_disagreement_correlation
    >>> evals = {"model": ["a"] * 4 + ["b"] * 4 + ["c"] * 4,
    ...          "query": ["q1", "q2", "q3", "q4"] * 3,
    ...          "score": [1, 1, 0, 0,  1, 1, 0, 1,  0, 0, 1, 1]}
    >>> Z = [[0.0, 0.0], [0.1, 0.0], [1.0, 0.0]]  # rows a, b, c
    >>> result = distance_disagreement_correlation(Z, evals, metric="euclidean")
    >>> result.pairs[["model_a", "model_b", "disagreement"]]
      model_a model_b  disagreement
    0       a       b          0.25
    1       a       c          1.00
    2       b       c          0.75
    >>> round(result.spearman, 3)
    1.0
    """
    if isinstance(min_common, bool) or not isinstance(min_common, Integral):
        raise TypeError(
            f"min_common must be an int >= 1, the fewest common queries of a pair "
            f"counted; got {min_common!r} ({type(min_common).__name__})."
        )
    if min_common < 1:
        raise ValueError(f"min_common={min_common} should be an int >= 1.")
    distance, names, table = pool_distances_for_evals(
        embeddings, evals, names, metric=metric
    )
    check_models_in_pool(table, names)
    rate, common = disagreement(table.to_dense(names))
    a, b = np.triu_indices(len(names), k=1)
    used = common[a, b] >= min_common
    # Names as objects, not pandas' inferred str dtype (lone surrogates).
    pairs = _object_frame(
        {
            "model_a": names[a[used]],
            "model_b": names[b[used]],
            "distance": distance[a, b][used],
            "disagreement": rate[a, b][used],
            "n_common": common[a, b][used],
        }
    )
    if len(pairs) < 2:
        raise ValueError(
            f"Only {len(pairs)} model pair(s) share at least min_common={min_common} "
            "quer(y/ies); a correlation needs at least 2 pairs. Pass evaluations "
            "where models are scored on common queries."
        )
    x, y = pairs["distance"].to_numpy(), pairs["disagreement"].to_numpy()
    # A constant has no correlation: scipy warns and returns NaN.
    varies = np.ptp(x) > 0 and np.ptp(y) > 0
    return Bunch(
        pearson=float(stats.pearsonr(x, y).statistic) if varies else None,
        spearman=float(stats.spearmanr(x, y).statistic) if varies else None,
        kendall=float(stats.kendalltau(x, y).statistic) if varies else None,
        n_pairs=len(pairs),
        n_skipped=int((~used).sum()),
        pairs=pairs,
    )


def neighbor_agreement(embeddings, evals, *, k=1, names=None, metric="cosine"):
    """Agreement of each model with its k-th nearest neighbor vs a random model.

    The agreement of two models is the fraction of their common queries on
    which their correctness agrees (``1 - mean |score_a - score_b|``). For each
    neighbor rank k, the agreement of every model with its k-th nearest
    model in embedding space is averaged over models, next to the average
    agreement with a uniformly random other model (its exact expectation: the
    mean over the other models it shares a query with, those it has an
    agreement with). The paper (section 3.5, figure 8) reports 79%
    for the nearest neighbor, falling with k.

    Parameters
    ----------
    embeddings : fitted router, array-like of shape (n_models, d) or (n_models, n_models)
        A router with ``model_embeddings_`` and ``classes_``, embeddings, or
        with ``metric="precomputed"`` distances between the models (a
        DataFrame such as :func:`score_disagreement`'s ``distance`` names
        them).
    evals : DataFrame or mapping of columns
        Scored evaluations (``model``, ``query``, ``score``) of the pool.
    k : int or sequence of int, default=1
        Neighbor rank(s), each given once, 1 being the nearest; at most
        ``n_models - 1``.
    names : array-like of shape (n_models,), default=None
        Model names of an array's rows. None matches the rows to the models
        of ``evals`` in sorted order. Must be None for a router or a
        DataFrame, whose index names the models.
    metric : {"cosine", "euclidean", "precomputed"}, default="cosine"
        Distance between embeddings, or "precomputed".

    Returns
    -------
    result : DataFrame with one row per k
        Columns ``k``, ``agreement`` (mean over models of the agreement with
        the k-th neighbor), ``random_agreement`` (mean over models of the
        mean agreement with the other models it shares a query with, over
        the models sharing a query with some other) and ``n_models`` (models whose k-th neighbor
        shares a query with them, the ones averaged). A k for which no model
        shares a query with its k-th neighbor has ``n_models`` 0 and NaN
        ``agreement``.

    Raises
    ------
    ValueError
        If no two models of ``evals`` share a query.

    Warns
    -----
    UserWarning
        If no model shares a query with its k-th neighbor for some k: those
        rows are NaN.

    Examples
    --------
    >>> from locus_sklearn.inspection import neighbor_agreement
    >>> evals = {"model": ["a"] * 4 + ["b"] * 4 + ["c"] * 4,
    ...          "query": ["q1", "q2", "q3", "q4"] * 3,
    ...          "score": [1, 1, 0, 0,  1, 1, 0, 1,  0, 0, 1, 1]}
    >>> Z = [[0.0, 0.0], [0.1, 0.0], [1.0, 0.0]]
    >>> neighbor_agreement(Z, evals, k=[1, 2], metric="euclidean")
       k  agreement  random_agreement  n_models
    0  1   0.583333          0.333333         3
    1  2   0.083333          0.333333         3
    """
    distance, names, table = pool_distances_for_evals(
        embeddings, evals, names, metric=metric
    )
    ks = _check_k(k, len(names) - 1, what="the number of other models")
    check_models_in_pool(table, names)
    rate, _ = disagreement(table.to_dense(names))
    agreement = 1.0 - rate
    np.fill_diagonal(agreement, np.nan)
    # A model sharing no query with any other has no random agreement.
    n_defined = (~np.isnan(agreement)).sum(axis=1)
    if not n_defined.any():
        # No agreement at all to average, as distance_disagreement_correlation
        # has no pair to correlate: an error, not a table of NaN.
        raise ValueError(
            f"No two of the {len(names)} models share a query in evals; an "
            "agreement needs 2 models scored on a common query. Pass "
            "evaluations where models are scored on common queries."
        )
    per_model = np.nansum(agreement, axis=1)[n_defined > 0] / n_defined[n_defined > 0]
    random_agreement = per_model.mean()
    order = neighbor_order(distance)
    rows = np.arange(len(names))
    records = []
    for kk in ks:
        values = agreement[rows, order[:, kk - 1]]
        defined = ~np.isnan(values)
        records.append(
            {
                "k": kk,
                "agreement": float(values[defined].mean()) if defined.any() else np.nan,
                "random_agreement": float(random_agreement),
                "n_models": int(defined.sum()),
            }
        )
    result = pd.DataFrame.from_records(records)
    unmet = result.loc[result["n_models"] == 0, "k"].tolist()
    if unmet:
        shown = k_values(unmet)
        warn_external(
            f"For k={shown}, no model shares a query with its k-th nearest "
            "neighbor: there is no agreement to average, so those rows are NaN "
            "with n_models 0. Score the models on more common queries.",
            UserWarning,
        )
    return result


def embedding_dimensionality(embeddings, evals=None, *, names=None):
    """How many directions the models' embeddings use, and whether the first
    is overall strength.

    The *participation ratio* of the centred embeddings, (Σλ)² / Σλ² over
    the variances λ of their principal components, counts the directions
    the pool spreads along: 1 when every model lies on one line, d when the
    spread is even in d directions. An embedding that carries only how good
    each model is has a ratio near 1, a first component with nearly all the
    variance, and that component tracks each model's mean score; neighbours,
    families and portfolios read from such an embedding see strength alone.
    (Where the models were scored on common queries,
    :func:`score_disagreement` compares what they answered instead.)

    Parameters
    ----------
    embeddings : fitted router or array-like of shape (n_models, d)
        A router with ``model_embeddings_`` and ``classes_``, or embeddings
        of at least two models.
    evals : DataFrame or mapping of columns, default=None
        Scored evaluations (``model``, ``query``, ``score``) of the pool's
        models, for ``strength_correlation``; None leaves it out. Every
        model of the embeddings needs a score, and every model of ``evals``
        an embedding.
    names : array-like of shape (n_models,), default=None
        Model names of an array's rows. None matches the rows to the models
        of ``evals`` in sorted order (the row order of
        ``LocusEmbedder.transform(evals)``). Must be None for a router or a
        DataFrame, whose index names the models.

    Returns
    -------
    result : :class:`~sklearn.utils.Bunch`
        ``participation_ratio`` (float in [1, min(n_models - 1, d)], 0.0 when
        the embeddings do not vary); ``explained_variance_ratio`` (ndarray of
        shape (min(n_models - 1, d),), each principal component's share of
        the variance, largest first: the quantity of
        :class:`~sklearn.decomposition.PCA`'s ``explained_variance_ratio_``);
        ``relative_spread`` (mean distance of a model from the mean
        embedding over the mean embedding's norm: how far apart the models
        are against what they share; ``inf`` when the mean is 0 and the
        models are not);
        ``strength_correlation`` (absolute Pearson correlation of the first
        component with each model's mean score in ``evals``; None without
        ``evals``, or when either does not vary).

    Examples
    --------
    >>> from locus_sklearn.inspection import embedding_dimensionality
    >>> Z = [[1.0, 0.0], [2.0, 0.0], [3.0, 0.0]]  # three models on a line
    >>> result = embedding_dimensionality(Z)
    >>> result.participation_ratio, result.explained_variance_ratio.tolist()
    (1.0, [1.0, 0.0])
    >>> evals = {"model": ["a", "a", "b", "b", "c", "c"],
    ...          "query": ["q1", "q2"] * 3, "score": [0, 0, 1, 0, 1, 1]}
    >>> round(embedding_dimensionality(Z, evals).strength_correlation, 6)
    1.0
    """
    if evals is None:
        Z, names = as_pool(embeddings, names)
        table = None
    else:
        Z, names, table = as_pool_for_evals(embeddings, evals, names)
    if len(Z) < 2:
        raise ValueError(
            f"embeddings has {len(Z)} model; the spread of a pool needs at least 2."
        )
    strength = None
    if table is not None:
        check_models_in_pool(table, names)
        # Object indexes: pandas' inferred str dtype refuses a lone surrogate.
        strength = pd.Series(
            mean_scores(table), index=pd.Index(table.models, dtype=object)
        ).reindex(pd.Index(names, dtype=object))
        if strength.isna().any():
            raise ValueError(
                f"evals has no score for model {strength.index[strength.isna()][0]!r} "
                "of the embeddings; strength_correlation needs every model's mean "
                "score."
            )
        strength = strength.to_numpy()
    return spread_of(Z, strength)


def spread_of(Z, strength=None):
    """:func:`embedding_dimensionality` of embeddings ``Z`` (n_models, d) as
    float64, with each model's mean score ``strength`` (n_models,) or None."""
    # Every quantity returned is free of the embeddings' scale; at 1e-160 or
    # 1e160 the norms and squared singular values below would under- or
    # overflow. A power of 2, brought to the largest entry, rescales exactly.
    largest = np.abs(Z).max()
    if largest > 0:
        Z = np.ldexp(Z, -np.frexp(largest)[1])
    centred = Z - Z.mean(axis=0)
    if coincide(Z):
        centred = np.zeros_like(centred)
    # The centred rows' squared singular values are the principal
    # components' variances up to a common factor, which the ratios drop.
    _, singular, components = np.linalg.svd(centred, full_matrices=False)
    variance = np.square(singular)[: min(len(Z) - 1, Z.shape[1])]
    total = float(variance.sum())
    shares = variance / total if total > 0 else np.zeros_like(variance)
    if total > 0:
        # (sum v)^2 / sum v^2 lies in [1, len(v)], but rounding can put it an
        # ulp outside: one component gave 0.9999999999999998 (total**2 goes
        # through C pow, which rounds otherwise than the products squared in
        # the denominator). total * total matches them; the clip keeps the
        # documented bounds whatever the remaining rounding.
        ratio = total * total / float(np.square(variance).sum())
        ratio = float(np.clip(ratio, 1.0, len(variance)))
    else:
        ratio = 0.0
    mean_norm = float(np.linalg.norm(Z.mean(axis=0)))
    spread = float(np.linalg.norm(centred, axis=1).mean())
    if spread == 0:
        relative = 0.0
    else:
        relative = spread / mean_norm if mean_norm > 0 else float("inf")
    correlation = None
    if strength is not None and total > 0:
        first = centred @ components[0]
        if np.ptp(first) > 0 and np.ptp(strength) > 0:
            correlation = float(abs(stats.pearsonr(first, strength).statistic))
    return Bunch(
        participation_ratio=ratio,
        explained_variance_ratio=shares,
        relative_spread=relative,
        strength_correlation=correlation,
    )


def coincide(Z):
    """Whether the rows of ``Z`` (n, d) are one point up to rounding.

    Identical rows, or rows that are equal but for rounding (e.g. parallel
    rows L2-normalised), centre to rounding noise (~1e-17), whose spread would
    read as a direction: a variation within the rounding of the mean, relative
    to the rows' own size, is none.
    """
    # Brought to the largest entry by a power of 2 (exact), so that the norms
    # neither under- nor overflow at 1e-160 or 1e160.
    largest = np.abs(Z).max()
    if largest > 0:
        Z = np.ldexp(Z, -np.frexp(largest)[1])
    centred = Z - Z.mean(axis=0)
    noise = max(Z.shape) * np.finfo(np.float64).eps * np.linalg.norm(Z)
    return bool(np.linalg.norm(centred) <= noise)


def model_linkage(embeddings, *, method="average", metric="euclidean"):
    """Hierarchical clustering of the models from their embedding distances.

    The paper (section 3.4, figure 7) clusters models with Euclidean distances;
    the tree recovers model families (e.g. math- and code-tuned ones). Cut it
    with :func:`scipy.cluster.hierarchy.fcluster`, draw it with
    :func:`plot_model_dendrogram`.

    Parameters
    ----------
    embeddings : fitted router, array-like of shape (n_models, d) or (n_models, n_models)
        A router with ``model_embeddings_`` and ``classes_``, embeddings, or
        with ``metric="precomputed"`` distances between the models (such as
        :func:`score_disagreement`'s ``distance``).
    method : {"average", "complete", "single", "weighted", "ward"}, default="average"
        Linkage criterion (see :func:`scipy.cluster.hierarchy.linkage`);
        "ward" needs ``metric="euclidean"``.
    metric : {"cosine", "euclidean", "precomputed"}, default="euclidean"
        Distance between embeddings, or "precomputed".

    Returns
    -------
    Z : ndarray of shape (n_models - 1, 4)
        The linkage matrix, leaves numbered as the rows of ``embeddings``.

    Examples
    --------
    >>> from scipy.cluster.hierarchy import fcluster
    >>> from locus_sklearn.inspection import model_linkage
    >>> X = [[0.0, 0.0], [0.1, 0.0], [5.0, 5.0], [5.1, 5.0]]
    >>> fcluster(model_linkage(X), t=2, criterion="maxclust").tolist()
    [2, 2, 1, 1]
    """
    check_linkage(method, metric)
    distance, _ = pool_distances(embeddings, metric=metric)
    return linkage_of(distance, method)


def check_linkage(method, metric):
    if method not in _LINKAGE_METHODS:
        raise ValueError(
            f"method must be one of {list(_LINKAGE_METHODS)}; got {method!r}."
        )
    if method == "ward" and metric != "euclidean":
        raise ValueError(f"method='ward' needs metric='euclidean'; got {metric!r}.")


def linkage_of(distance, method):
    """scipy's linkage matrix of a square distance matrix."""
    if len(distance) < 2:
        raise ValueError(f"Clustering needs at least 2 models; got {len(distance)}.")
    # Exact symmetry for squareform, which reads the upper triangle only: the
    # diagonal was checked to be zero (as_distances), never overwritten here.
    distance = (distance + distance.T) / 2
    return linkage(squareform(distance, checks=False), method=method)
