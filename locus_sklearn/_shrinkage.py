"""LocusRouter's safeguard: P(correct) shrunk toward each model's mean score.

Routing takes, per query, the largest of many estimated probabilities, so it
favours whichever model's probability is overestimated at that query. Where
the pool has one clearly stronger model and the per-query estimates are
noisy, that costs accuracy against always calling the strongest model. The
blend ``(1 - s) · P(correct) + s · mean score`` moves the router toward that
choice by ``s``; ``choose_shrinkage`` picks ``s`` by the cross-fitted
accuracy of that routing on the training evaluations
(benchmarks/results/TUNING.md, sessions 7 and 9).
"""

from numbers import Integral

import numpy as np
from sklearn.model_selection import KFold

from ._evals import check_evals

__all__ = [
    "SHRINKAGE_GRID",
    "best_shrinkage",
    "choose_shrinkage",
    "cross_fitted_predictions",
    "mean_scores",
    "shrink",
]

# The values "auto" chooses from, ties to the larger (toward the best model).
SHRINKAGE_GRID = (0.0, 0.25, 0.5, 0.75, 1.0)


def mean_scores(table):
    """Each model's mean score over its rows of ``table``, shape (n_models,).

    Examples
    --------
    >>> from locus_sklearn import check_evals
    >>> table = check_evals({"model": ["a", "a", "b"], "query": ["q1", "q2", "q1"],
    ...                      "score": [1.0, 0.0, 1.0]})
    >>> mean_scores(table)
    array([0.5, 1. ])
    """
    total = np.bincount(
        table.model_index, weights=table.score, minlength=table.n_models
    )
    return total / np.bincount(table.model_index, minlength=table.n_models)


def shrink(proba, model_mean_scores, shrinkage):
    """``(1 - shrinkage) · proba + shrinkage · model_mean_scores``, per column.

    Parameters
    ----------
    proba : ndarray of shape (n_queries, n_models)
    model_mean_scores : ndarray of shape (n_models,)
    shrinkage : float in [0, 1]
        0 returns ``proba`` itself.

    Returns
    -------
    proba : ndarray of shape (n_queries, n_models), dtype of ``proba``

    Examples
    --------
    >>> import numpy as np
    >>> shrink(np.array([[0.9, 0.2]]), np.array([0.5, 0.6]), 0.5)
    array([[0.7, 0.4]])
    """
    if shrinkage == 0:
        return proba
    blended = (1 - shrinkage) * proba + shrinkage * model_mean_scores[None, :]
    return blended.astype(proba.dtype, copy=False)


def choose_shrinkage(
    embedder, table, X_query, *, n_folds=5, grid=SHRINKAGE_GRID,
    model_costs=None, cost_weight=0.0, n_repeats=1,
):  # fmt: skip
    """The shrinkage with the best cross-fitted routing utility.

    The training queries are split into ``n_folds`` folds. For each fold,
    every model is embedded from its rows outside the fold and the fold's
    queries are predicted (the kernel readout reading those rows only); each
    fold query is then routed, for every value of ``grid``, among *all* the
    models, as at prediction, and the policy is scored on the queries whose
    routed model answered. When each model's evaluations are a sample of
    the queries that does not depend on the query, that mean is an unbiased
    estimate of the policy's accuracy; where every model answered every
    query it is plain routing accuracy. (Routing only among the models that
    answered, as :meth:`BaseRouter.score` does, judges a different policy
    where evaluations are sparse: a choice between the two or three models
    that happen to have answered, which the mean score wins.) The embedder's
    weights did see the fold's rows in training, which favours small values;
    what the folds buy is every training query as held-out evidence (on the
    two fits where it was checked, refitting the embedder without each fold
    chose the same value once and a smaller one once:
    benchmarks/results/TUNING.md, session 10). Ties go to the larger value.

    With ``n_repeats`` > 1 the folds are drawn that many times (``KFold``
    shuffled with seeds 0, 1, ...; seed 0 is the single draw's) and each
    value is judged on the fold queries of every draw together: which
    queries share a fold then weighs less in the choice (at 256 evaluations
    per model the single draw's choice changed with the shuffle on 7 of 12
    fits of four real pools; benchmarks/results/TUNING.md, session 39). It
    costs ``n_repeats`` times the embeddings and predictions.

    With ``model_costs`` the fold queries are routed as ``predict`` routes
    them, by ``shrunk P(correct) - cost_weight · cost``, and each value is
    judged by the mean of ``score - cost_weight · cost`` of the routed model
    (at ``cost_weight`` 0: accuracy, as without costs). A query whose every
    utility a huge ``cost_weight`` overflows to -inf is left out for every
    value alike: whichever model it goes to (``predict`` sends it to the
    cheapest), its judged utility is -inf, which tells no value apart.

    Parameters
    ----------
    embedder : LocusEmbedder
        Fitted.
    table : EvalTable
        The training evaluations.
    X_query : ndarray of shape (table.n_queries, n_features)
        Encodings of ``table.queries``.
    n_folds : int, default=5
    grid : sequence of float in [0, 1], default=SHRINKAGE_GRID
    model_costs : ndarray of shape (table.n_models,), default=None
        Each model's cost, in ``table.models`` order.
    cost_weight : float, default=0.0
        λ of the routing judged; ignored without ``model_costs``.
    n_repeats : int, default=1
        How many shuffles of the folds the values are judged on.

    Returns
    -------
    shrinkage : float
    scores : dict of float to float
        Cross-fitted utility (accuracy at ``cost_weight`` 0) of each value
        judged on at least one fold query, in ``grid`` order. A value whose
        routed models answered none of the fold queries (thin models that
        take every query at a large value, say) has no estimate and is left
        out, and the choice is made among the values judged; empty, with
        shrinkage 0, when no value could be judged.
    """
    n_folds = min(n_folds, table.n_queries)
    if n_folds < 2:
        return 0.0, {}
    if model_costs is None:
        model_costs, cost_weight = np.zeros(table.n_models), 0.0
    # A huge cost weight overflows to inf, as in routing_utility: no warning.
    with np.errstate(over="ignore"):
        penalty_of = cost_weight * np.asarray(model_costs, dtype=np.float64)
    hits = {s: [] for s in grid}
    folds = (
        fold
        for repeat in range(n_repeats)
        for fold in cross_fitted_predictions(
            embedder, table, X_query, query_folds(n_folds, random_state=repeat)
        )
    )
    for y, proba, means, columns, _ in folds:
        rows = np.arange(len(y))
        penalty = penalty_of[columns]
        for s in grid:
            choice = (shrink(proba, means, s) - penalty).argmax(axis=1)
            routed = y[rows, choice] - penalty[choice]
            hits[s].append(routed[np.isfinite(routed)])
    hits = {float(s): np.concatenate(h) if h else np.empty(0) for s, h in hits.items()}
    # Left out, not NaN: a NaN would read as a score to whoever takes the
    # max or compares values, and the values judged still tell apart.
    scores = {s: float(h.mean()) for s, h in hits.items() if len(h)}
    if not scores:
        return 0.0, {}
    return best_shrinkage(scores), scores


def best_shrinkage(scores):
    """The value ``choose_shrinkage`` takes from its ``scores`` (float to
    float): the best, ties (within 1e-12) going to the larger value.

    Examples
    --------
    >>> best_shrinkage({0.0: 0.7, 0.5: 0.8, 1.0: 0.8})
    1.0
    """
    best = max(scores.values())
    return max(s for s, v in scores.items() if v >= best - 1e-12)


def query_folds(n_folds, random_state=0):
    """The folds of the training queries for an int: sklearn's ``KFold``,
    shuffled with seed ``random_state`` (query ids often sort by source, all
    of one benchmark together, and a fold of one source would have no near
    neighbours). Shared by the shrinkage choice and
    :func:`~locus_sklearn.model_selection.cross_val_predict_proba` (seed 0)."""
    return KFold(int(n_folds), shuffle=True, random_state=random_state)


def cross_fitted_predictions(embedder, table, X_query, n_folds, fit_fold=None):
    """Per query fold, predictions by models embedded without the fold's rows.

    The training queries are split by sklearn's ``KFold`` (shuffled, seed 0)
    or by the splitter given; a fold holding every query raises a
    ``ValueError`` (no rows are left to embed the models from).

    Parameters
    ----------
    embedder : LocusEmbedder
        Fitted.
    table : EvalTable
    X_query : ndarray of shape (table.n_queries, n_features)
    n_folds : int or cross-validation splitter
        An int (at least 2, at most ``table.n_queries``) is the number of
        folds; a splitter's ``split`` is called on ``table.queries``.
    fit_fold : callable, optional
        ``fit_fold(evals) -> LocusEmbedder`` fitted on the rows outside the
        fold (a DataFrame), used instead of ``embedder`` for that fold (the
        refitted check of ``benchmarks/shrinkage_cv.py``).

    Yields
    ------
    y : ndarray of shape (n_fold_queries, n_embedded)
        The fold's scores, NaN where a model did not answer; columns are the
        models with rows outside the fold, in ``table.models`` order.
    proba : ndarray of shape (n_fold_queries, n_embedded)
        Their P(correct) (the kernel readout reading rows outside the fold).
    means : ndarray of shape (n_embedded,)
        Their mean scores over the rows outside the fold.
    columns : ndarray of int, shape (n_embedded,)
        Their positions in ``table.models``.
    rows : ndarray of int, shape (n_fold_queries,)
        The fold's queries: their positions in ``table.queries``, in the
        order of the rows above.
    """
    frame = table.to_frame()[["model", "query", "score"]]
    splitter = query_folds(n_folds) if isinstance(n_folds, Integral) else n_folds
    for _, held in splitter.split(table.queries):
        is_held = np.isin(table.query_index, held)
        if is_held.all():
            raise ValueError(
                f"A test fold holds all {table.n_queries} queries: no evaluation "
                "is left outside it to embed the models from. Every fold of the "
                "splitter (cv) must leave queries outside it."
            )
        inside = check_evals(frame[~is_held])
        outside = check_evals(frame[is_held])
        X_inside = X_query[np.searchsorted(table.queries, inside.queries)]
        rows = np.searchsorted(table.queries, outside.queries)
        X_held = X_query[rows]
        fold_embedder = embedder if fit_fold is None else fit_fold(frame[~is_held])
        # Scores of the fold's queries by the models embedded without them
        # (a model with every row in the fold has no embedding here).
        either = np.union1d(inside.models, outside.models)
        y = outside.to_dense(either)[:, np.isin(either, inside.models)]
        proba = fold_embedder._predict_proba_encoded(
            fold_embedder._transform_encoded(inside, X_inside),
            X_held,
            (X_inside, inside),
        )
        positions = np.searchsorted(table.models, inside.models)
        yield y, proba, mean_scores(inside), positions, rows
