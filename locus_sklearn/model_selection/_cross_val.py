"""Out-of-fold P(correct) on a router's own training queries."""

from numbers import Integral

import numpy as np
from sklearn.base import clone
from sklearn.utils.validation import check_is_fitted

from .._evals import _preview, check_evals
from .._router import LocusRouter
from .._shrinkage import cross_fitted_predictions, query_folds, shrink

__all__ = ["cross_val_predict_proba"]


def _check_cv(cv, n_queries):
    """A splitter of the queries: KFold (shuffled, seed 0) for an int."""
    if isinstance(cv, Integral) and not isinstance(cv, bool):
        if not 2 <= cv <= n_queries:
            raise ValueError(
                f"cv must be an int in [2, n_queries={n_queries}] or a splitter; "
                f"got {cv}."
            )
        return query_folds(cv)
    if hasattr(cv, "split") and not isinstance(cv, (str, type)):
        return cv
    raise TypeError(
        f"cv must be an int >= 2 or a splitter with a split method (such as "
        f"sklearn.model_selection.KFold); got {cv!r}."
    )


def _lost_models(lost):
    return ValueError(
        f"{len(lost)} model(s) have every evaluation in one fold, so a copy "
        f"fitted without it cannot predict them: {_preview(lost)}. Use fewer "
        "folds (cv), or give these models more evaluations."
    )


def _refitted_folds(router, table, splitter):
    """(fold's query positions, its P(correct)) from clones of ``router``
    refitted, with its costs, on the rows outside each fold."""
    classes = np.asarray(router.classes_, dtype=object)
    costs = router.model_costs_
    fold_costs = None if costs is None else dict(zip(classes, costs, strict=True))
    frame = table.to_frame()[["model", "query", "score"]]
    for _, held in splitter.split(table.queries):
        held = np.asarray(held)
        inside = frame[~np.isin(table.query_index, held)]
        lost = np.setdiff1d(classes, inside["model"].unique())
        if len(lost):
            raise _lost_models(lost)
        copy = clone(router).fit(inside, model_costs=fold_costs)
        yield held, copy.predict_proba(table.queries[held])


def _locus_folds(router, table, splitter):
    """The same for a LocusRouter without refitting anything: its trained
    network embeds the pool from the rows outside each fold and predicts the
    fold (the kernel readout reading those rows), blended by its fitted
    shrinkage toward those rows' mean scores, as a LocusRouter fitted on them
    with a frozen embedder would; every query is encoded once."""
    X = router._encode(table.queries)
    folds = cross_fitted_predictions(router._locus, table, X, splitter)
    for _, proba, means, columns, rows in folds:
        if len(columns) < table.n_models:
            raise _lost_models(np.delete(table.models, columns))
        yield rows, shrink(proba, means, router.shrinkage_)


def cross_val_predict_proba(router, evals, *, cv=5):
    """Each query's P(correct) from a copy of the router fitted without it.

    A router fitted on ``evals`` has read every answer there (the kernel
    readout of a :class:`~locus_sklearn.LocusRouter` finds a training
    query's own answers), so its predictions on those queries are surer than
    on new traffic. Here the queries of ``evals`` are split into folds; for
    each fold a copy of ``router`` is fitted on the rows of the other folds
    and predicts the fold's queries, as scikit-learn's
    :func:`~sklearn.model_selection.cross_val_predict` does. A
    :class:`~locus_sklearn.LocusRouter` is not retrained: its trained network
    embeds the pool from the rows outside each fold and predicts the fold
    (its kernel readout reading those rows), with its fitted ``shrinkage_``
    toward those rows' mean scores, which is what ``LocusRouter(
    FrozenEstimator(router.embedder_), shrinkage=router.shrinkage_)`` fitted
    on them predicts; the queries are encoded once. Any other router is
    cloned and refitted on each fold's rows, with the router's costs.

    Parameters
    ----------
    router : fitted router
    evals : DataFrame or mapping of columns
        Scored evaluations (``model``, ``query``, ``score``) of every model of
        the pool, typically the router's training evaluations.
    cv : int or cross-validation splitter, default=5
        An int is the number of folds of sklearn's ``KFold`` (shuffled,
        ``random_state=0``) over the queries; a splitter's ``split`` is called
        on the sorted unique queries and must give each query to exactly one
        test fold.

    Returns
    -------
    proba : ndarray of shape (n_queries, n_models)
        Rows in sorted query order (``check_evals(evals).queries``), columns
        in ``router.classes_`` order.

    Examples
    --------
    >>> from locus_sklearn.baselines import KNNRouter
    >>> from locus_sklearn.model_selection import cross_val_predict_proba
    >>> encoder = {"q1": [1.0, 0.0], "q2": [0.0, 1.0], "q3": [1.0, 0.1],
    ...            "q4": [0.1, 1.0]}
    >>> evals = {"model": ["a"] * 4 + ["b"] * 4, "query": ["q1", "q2", "q3", "q4"] * 2,
    ...          "score": [1, 1, 1, 1, 1, 0, 0, 1]}
    >>> router = KNNRouter(1, encoder=encoder).fit(evals)
    >>> router.predict_proba(["q1", "q2", "q3", "q4"])[:, 1].tolist()  # own answers
    [1.0, 0.0, 0.0, 1.0]
    >>> from sklearn.model_selection import KFold
    >>> cross_val_predict_proba(router, evals, cv=KFold(2))[:, 1].tolist()
    [0.0, 1.0, 1.0, 0.0]
    """
    check_is_fitted(router)
    return out_of_fold_proba(router, check_evals(evals), cv)


def out_of_fold_proba(router, table, cv):
    """:func:`cross_val_predict_proba` of a fitted router on an already
    validated :class:`~locus_sklearn.EvalTable` (callers that checked the
    evaluations themselves do not check them again)."""
    classes = np.asarray(router.classes_, dtype=object)
    unknown = np.setdiff1d(table.models, classes)
    absent = np.setdiff1d(classes, table.models)
    if len(unknown) or len(absent):
        raise ValueError(
            "evals must hold evaluations of exactly the router's pool; "
            + (f"unknown model(s): {_preview(unknown)}. " if len(unknown) else "")
            + (f"no rows for: {_preview(absent)}." if len(absent) else "")
        )
    splitter = _check_cv(cv, table.n_queries)
    folds = _locus_folds if isinstance(router, LocusRouter) else _refitted_folds
    proba = np.empty((table.n_queries, len(classes)))
    covered = np.zeros(table.n_queries, dtype=bool)
    for held, fold_proba in folds(router, table, splitter):
        if covered[held].any():
            raise ValueError("cv gave a query to more than one test fold.")
        covered[held] = True
        proba[held] = fold_proba
    if not covered.all():
        raise ValueError(
            f"cv left {int((~covered).sum())} query(ies) in no test fold: "
            f"{_preview(table.queries[~covered])}."
        )
    return proba
