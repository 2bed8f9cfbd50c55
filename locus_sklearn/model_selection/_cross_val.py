"""Out-of-fold P(correct) on a router's own training queries."""

import inspect
import reprlib
import warnings
from collections.abc import Iterable
from numbers import Integral

import numpy as np
import pandas as pd
from sklearn.base import clone
from sklearn.frozen import FrozenEstimator
from sklearn.model_selection import (
    RepeatedStratifiedKFold,
    StratifiedGroupKFold,
    StratifiedKFold,
    StratifiedShuffleSplit,
)
from sklearn.utils.validation import check_is_fitted

from .._base import BaseRouter
from .._evals import _as_frame, _preview, _sorted_codes, check_evals
from .._router import LocusRouter
from .._shrinkage import cross_fitted_predictions, query_folds, shrink
from ._onboarding import ModelGroupSplit

__all__ = ["cross_val_predict_proba"]

_CV_KINDS = (
    "an int >= 2, None (5 folds), a splitter with a split method (such as "
    "sklearn.model_selection.KFold) or an iterable of (train, test) index pairs"
)
# sklearn's splitters that stratify by a target y (StratifiedGroupKFold takes
# y=None in its signature but needs it all the same).
_STRATIFIED = (
    StratifiedKFold,
    RepeatedStratifiedKFold,
    StratifiedShuffleSplit,
    StratifiedGroupKFold,
)


def _short(value):
    """A repr of ``value`` short enough for an error message."""
    shown = repr(value)
    return shown if len(shown) <= 80 else reprlib.repr(value)


def _needs_y(splitter):
    """Why ``splitter.split`` needs a target ``y``, which queries lack:
    "stratifies" (it splits by y), "requires" (its signature has a ``y``
    without a default, whether it reads it or not), or None."""
    if isinstance(splitter, _STRATIFIED):
        return "stratifies"
    try:
        parameter = inspect.signature(splitter.split).parameters.get("y")
    except (TypeError, ValueError):  # a builtin or C callable: cannot tell
        return None
    if parameter is not None and parameter.default is inspect.Parameter.empty:
        return "requires"
    return None


def _takes_groups(splitter):
    """Whether ``splitter.split`` accepts ``groups=`` (by name or ``**kwargs``);
    read from its signature, so that a TypeError raised inside a splitter is
    never mistaken for a missing parameter."""
    try:
        parameters = inspect.signature(splitter.split).parameters.values()
    except (TypeError, ValueError):  # a builtin or C callable: cannot tell
        return True
    return any(
        p.name == "groups" or p.kind is inspect.Parameter.VAR_KEYWORD
        for p in parameters
    )


def _check_cv(cv, n_queries, *, grouped=False):
    """``cv`` as a splitter of the queries, as sklearn's ``check_cv`` accepts
    it: KFold (shuffled, seed 0) for an int or None (5 folds), a splitter as
    is, an iterable of (train, test) pairs as the list of its pairs.
    ``grouped``: groups were given, which an int and an iterable cannot use."""
    folds = 5 if cv is None else cv
    if isinstance(folds, Integral) and not isinstance(folds, bool):
        shown = "None (5 folds)" if cv is None else repr(cv)
        if not 2 <= folds <= n_queries:
            raise ValueError(
                f"cv must be an int in [2, n_queries={n_queries}] or a splitter; "
                f"got {shown}."
            )
        if grouped:
            # sklearn only warned that KFold, a splitter the user never
            # named, ignores groups; the folds then mixed the groups.
            raise TypeError(
                f"groups was given with cv={shown}, which splits the queries "
                f"with a shuffled KFold({folds}) that ignores groups. To split "
                f"by group, pass cv=GroupKFold({folds}) (or another group "
                "splitter); otherwise drop groups."
            )
        return query_folds(folds)
    if isinstance(cv, type):
        raise TypeError(
            f"cv must be {_CV_KINDS}; got the class {cv.__name__}, not an "
            f"instance (e.g. {cv.__name__}())."
        )
    if isinstance(cv, (str, bytes)) or not (
        hasattr(cv, "split") or isinstance(cv, Iterable)
    ):
        raise TypeError(
            f"cv must be {_CV_KINDS}; got {_short(cv)} ({type(cv).__name__})."
        )
    if isinstance(cv, ModelGroupSplit):
        # Its split reads X as an evaluation table; given the queries, it
        # failed with "X must be a pandas DataFrame", a parameter never passed.
        raise TypeError(
            f"cv={_short(cv)} holds out whole models, for onboarding "
            "(GridSearchCV or cross_val_score with make_onboarding_scorer); "
            "cross_val_predict_proba splits queries. Use a splitter of queries, "
            "such as KFold, or GroupKFold with groups=."
        )
    if hasattr(cv, "split"):
        need = _needs_y(cv)
        if need == "stratifies":
            raise ValueError(
                f"cv={_short(cv)} stratifies by a target y, which "
                "cross_val_predict_proba does not have: it splits queries, each "
                "scored by several models. Use a splitter that needs no y, such as "
                "KFold, or GroupKFold with groups=."
            )
        if need == "requires":
            raise ValueError(
                f"cv={_short(cv)} has a split method that requires y (its "
                "signature gives y no default), which cross_val_predict_proba "
                "does not have: it splits queries, each scored by several "
                "models, and calls split(queries) or split(queries, groups=...). "
                "If the splitter does not use y, give it a default "
                "(split(self, X, y=None, groups=None)); otherwise use a splitter "
                "that needs no y, such as KFold, or GroupKFold with groups=."
            )
        return cv
    if grouped:
        # sklearn's check_cv ignores groups here without a word; the folds
        # are already fixed, so no grouping the user meant can apply.
        raise TypeError(
            f"groups was given with cv={_short(cv)}, an iterable of (train, "
            "test) pairs: its folds are already fixed, so groups would be "
            "ignored. Drop groups, or pass a group splitter (GroupKFold, "
            "LeaveOneGroupOut) as cv."
        )
    return _FoldList(list(cv))


class _FoldList:
    """The (train, test) pairs of an iterable ``cv``, read once (a generator
    can be iterated only once), as sklearn's ``check_cv`` keeps them."""

    def __init__(self, folds):
        self.folds = folds

    def split(self, X, y=None, groups=None):
        yield from self.folds


def _ignores_groups(splitter):
    """Whether ``splitter`` is one of scikit-learn's own splitters that ignore
    groups (KFold, LeaveOneOut, PredefinedSplit, ...). Their ``split`` takes
    ``groups=`` and only warns that it ignores them, so the signature cannot
    tell; sklearn marks the splitters that use groups with
    ``GroupsConsumerMixin``, which requests ``groups`` for ``split``. Any
    other class (a user's splitter, or a subclass of sklearn's) is judged by
    its signature and by that warning, caught while splitting."""
    if not type(splitter).__module__.startswith("sklearn."):
        return False
    try:
        requests = splitter.get_metadata_routing().split.requests
    except AttributeError:  # no metadata request: cannot tell
        return False
    # GroupsConsumerMixin's request (True by default, or as the user set
    # it); the others declare groups unused, which leaves no entry.
    return "groups" not in requests


def _ignored_groups(splitter):
    """The TypeError for ``groups`` given with a splitter that ignores them."""
    return TypeError(
        f"groups was given with cv={_short(splitter)}, whose split ignores "
        "groups (scikit-learn only warns so): its folds would mix the groups. "
        "To split by group, pass a group splitter such as GroupKFold or "
        "LeaveOneGroupOut as cv; otherwise drop groups."
    )


def _checked_folds(splitter, queries, groups):
    """The test folds of ``splitter`` over the sorted distinct ``queries``,
    with their groups, as a list of (fold number, query positions), all
    checked before any copy is fitted on one (the folds are small index
    arrays; a cv that is no partition wasted every fold's fit): integer
    positions in [0, n_queries), no query in two test folds, none in no test
    fold, no test fold of every query. Empty test folds are dropped."""
    if groups is not None:
        if _ignores_groups(splitter):
            raise _ignored_groups(splitter)
        if not _takes_groups(splitter):
            raise TypeError(
                f"cv={_short(splitter)} has a split method without a groups "
                "parameter, but groups was given. Pass groups only with a "
                "splitter whose split takes groups= (GroupKFold, "
                "LeaveOneGroupOut), or drop groups."
            )
    with warnings.catch_warnings():
        # A splitter that ignores groups, other than sklearn's own classes
        # (a subclass of KFold, say), says so only in this warning.
        warnings.filterwarnings(
            "error", message="The groups parameter is ignored", category=UserWarning
        )
        try:
            return _read_folds(splitter, queries, groups)
        except UserWarning as err:
            raise _ignored_groups(splitter) from err


def _read_folds(splitter, queries, groups):
    """:func:`_checked_folds` without the check of ``groups``."""
    n_queries = len(queries)
    if groups is None:  # custom splitters may take X alone
        folds = splitter.split(queries)
    else:
        folds = splitter.split(queries, groups=groups)
    checked = []
    covered = np.zeros(n_queries, dtype=bool)
    for i, fold in enumerate(folds):
        try:
            train, test = fold
        except (TypeError, ValueError):
            raise TypeError(
                f"cv must give (train, test) pairs of index arrays; fold {i} "
                f"is {_short(fold)}."
            ) from None
        held = np.asarray(test)
        if held.size == 0:  # nothing to predict (np.array([]) is float)
            continue
        if held.ndim != 1 or held.dtype.kind not in "iu":
            raise TypeError(
                f"cv gave test fold {i} as {_short(test)}; a test fold must be "
                "a 1-D array of integer positions in the sorted distinct queries."
            )
        outside = (held < 0) | (held >= n_queries)
        if outside.any():
            raise ValueError(
                f"cv gave test fold {i} position(s) outside [0, n_queries="
                f"{n_queries}): {_preview(held[outside])}. Positions index "
                "the sorted distinct queries of evals."
            )
        held = held.astype(np.intp, copy=False)
        again = held[covered[held]]
        if len(again):
            raise ValueError(
                f"cv gave a query to more than one test fold: test fold {i} "
                f"holds {len(again)} query(ies) of an earlier one, e.g. "
                f"{_preview(np.asarray(queries, dtype=object)[again])}. Each query "
                "must be in exactly one test fold (ShuffleSplit's are not)."
            )
        if np.unique(held).size == n_queries:
            # Checked here for every router: the refitted path reported
            # each model as "every evaluation in one fold ... use fewer
            # folds", which cannot help a fold of every query.
            raise ValueError(
                f"A test fold holds all {n_queries} queries: no "
                "evaluation is left outside it to predict the fold from. "
                "Every fold of the splitter (cv) must leave queries outside "
                "it."
            )
        covered[held] = True
        checked.append((i, held))
    if not covered.all():
        raise ValueError(
            f"cv left {int((~covered).sum())} query(ies) in no test fold: "
            f"{_preview(np.asarray(queries, dtype=object)[~covered])}."
        )
    return checked


def _query_groups(groups, evals, table):
    """The group of each query of ``table`` (in ``table.queries`` order), from
    ``groups``, one per row of ``evals``; every row of a query in one group."""
    if isinstance(groups, (str, bytes)) or np.ndim(groups) != 1:
        shape = np.shape(groups)
        if len(shape) >= 2:
            # The repr of a DataFrame (its rows, cut short) named nothing.
            column = "'task'"
            if isinstance(groups, pd.DataFrame) and len(groups.columns):
                column = repr(groups.columns[0])
            got = (
                f"type {type(groups).__name__}, shape {shape}; pass one column, "
                f"such as evals[{column}]"
            )
        else:
            got = _short(groups)
        raise ValueError(
            f"groups must be a 1-D array-like with one group per row of evals; "
            f"got {got}."
        )
    groups = np.asarray(groups)
    n_rows = table.n_input_rows
    if len(groups) != n_rows:
        raise ValueError(
            f"groups must have one group per row of evals ({n_rows} rows); got "
            f"{len(groups)} groups."
        )
    codes, values = pd.factorize(groups)
    if (codes < 0).any():
        raise ValueError(
            f"groups has {int((codes < 0).sum())} missing value(s) (None or NaN); "
            "every row of evals needs a group."
        )
    # The same query positions as check_evals gives its rows.
    query = _as_frame(evals, "evals")["query"].to_numpy(dtype=object)
    _, query_index = _sorted_codes(query)
    _, first_row = np.unique(query_index, return_index=True)
    first = codes[first_row]  # the group of each query's first row
    mixed = np.unique(query_index[codes != first[query_index]])
    if len(mixed):
        q = mixed[0]
        found = np.asarray(values)[np.unique(codes[query_index == q])]
        raise ValueError(
            f"groups must give every row of a query the same group (folds hold "
            f"whole queries); {len(mixed)} quer(y/ies) have more than one, e.g. "
            f"query {table.queries[q]!r} in groups {_preview(found)}."
        )
    return np.asarray(values)[first]


def _lost_models(lost, table):
    """The ValueError for models that have no rows outside a test fold."""
    # A row of the table is one distinct (model, query) pair: a model's rows
    # count its distinct queries (no groupby on names, which pandas would
    # infer as its str dtype, refusing a lone surrogate).
    distinct = dict(zip(table.models.tolist(), np.diff(table.indptr), strict=True))
    # A model scored on one query loses it with any split of the queries:
    # fewer folds, the advice for the others, cannot help it.
    single = [m for m in lost if distinct.get(m, 0) <= 1]
    spread = [m for m in lost if distinct.get(m, 0) > 1]
    parts = []
    if single:
        parts.append(
            f"{len(single)} model(s) have evaluations on a single query, so the "
            f"copy fitted without that query's fold cannot predict them: "
            f"{_preview(single)}. A model needs evaluations on at least two "
            "queries to be predicted out of fold, whatever cv is; give these "
            "models more evaluations, or remove them (from evals and the router)."
        )
    if spread:
        parts.append(
            f"{len(spread)} model(s) have every evaluation in one fold, so a copy "
            f"fitted without it cannot predict them: {_preview(spread)}. Use "
            "fewer folds (cv), or give these models more evaluations."
        )
    return ValueError(" ".join(parts))


def _fold_error(err, router, fold, n_queries, n_rows, n_folds):
    """``err``, raised fitting the copy of ``router`` for test ``fold`` (of
    ``n_folds``) on ``n_queries`` queries (``n_rows`` rows), as an exception
    of its type that says so: its message spoke of evals, the user's table,
    which fitted. None where that type cannot be built from a message
    alone."""
    cause = str(err).rstrip()
    if not cause.endswith((".", "!", "?")):
        cause += "."
    message = (
        f"Fitting the copy of {type(router).__name__} for test fold {fold} on "
        f"the {n_queries} queries ({n_rows} rows) of evals outside it failed: "
        f"{cause} If the copy needs more queries than the folds leave it, use "
        f"fewer folds (cv gave {n_folds}), or a router that needs fewer queries."
    )
    try:
        return type(err)(message)
    except Exception:  # a constructor that takes other arguments
        return None


def _refitted_folds(router, table, folds):
    """(fold's query positions, its P(correct)) from clones of ``router``
    refitted, with its costs, on the rows outside each of ``folds`` (the
    (fold number, query positions) of :func:`_checked_folds`)."""
    classes = np.asarray(router.classes_, dtype=object)
    costs = router.model_costs_
    fold_costs = None if costs is None else dict(zip(classes, costs, strict=True))
    frame = table.to_frame()[["model", "query", "score"]]
    for i, held in folds:
        inside = frame[~np.isin(table.query_index, held)]
        lost = np.setdiff1d(classes, inside["model"].unique())
        if len(lost):
            raise _lost_models(lost, table)
        try:
            copy = clone(router).fit(inside, model_costs=fold_costs)
        except Exception as err:
            n_queries = table.n_queries - len(held)
            error = _fold_error(err, router, i, n_queries, len(inside), len(folds))
            if error is None:
                raise
            raise error from err
        yield held, copy.predict_proba(table.queries[held])


def _locus_folds(router, table, folds):
    """The same for a LocusRouter without refitting anything: its trained
    network embeds the pool from the rows outside each fold and predicts the
    fold (the kernel readout reading those rows), blended by its fitted
    shrinkage toward those rows' mean scores, as a LocusRouter fitted on them
    with a frozen embedder would; every query is encoded once."""
    X = router._encode(table.queries)
    splitter = _FoldList([(None, held) for _, held in folds])
    folds = cross_fitted_predictions(router._fitted_locus(), table, X, splitter)
    for _, proba, means, columns, rows in folds:
        if len(columns) < table.n_models:
            raise _lost_models(np.delete(table.models, columns), table)
        yield rows, shrink(proba, means, router.shrinkage_)


def check_refit(refit):
    """``refit`` as a bool, refused unless it is one (a truthy string such
    as "False" must not refit every fold's network)."""
    if not isinstance(refit, bool | np.bool_):
        raise TypeError(
            f"refit must be a bool (True or False); got {_short(refit)} "
            f"({type(refit).__name__})."
        )
    return bool(refit)


def _check_router(router):
    """Refuse what is not a locus_sklearn router before any attribute of one
    (``classes_``, ``model_costs_``) is read."""
    if isinstance(router, FrozenEstimator):
        # Its fit does nothing: every copy would predict with the router
        # fitted on all of evals, so each "out-of-fold" prediction would be
        # in-sample.
        raise TypeError(
            f"router must be a fitted locus_sklearn router, not a FrozenEstimator "
            f"(wrapping {type(router.estimator).__name__}): a frozen copy cannot "
            "be refitted without a fold, so it cannot hold the fold out. Pass "
            "the router itself (router.estimator); it is not changed."
        )
    if not isinstance(router, BaseRouter):
        raise TypeError(
            f"router must be a fitted locus_sklearn router (a BaseRouter, such as "
            f"LocusRouter or KNNRouter); got {type(router).__name__}. For a "
            "search such as GridSearchCV, pass its best_estimator_."
        )


def cross_val_predict_proba(router, evals, *, cv=5, groups=None, refit=False):
    """Out-of-fold P(correct); a LocusRouter's network saw all folds unless refit.

    A router fitted on ``evals`` has read every answer there (the kernel
    readout of a :class:`~locus_sklearn.LocusRouter` finds a training
    query's own answers), so its predictions on those queries are surer than
    on new traffic. Here the queries of ``evals`` are split into folds; for
    each fold a copy of ``router`` is fitted, with the router's costs, on
    the rows of the other folds and predicts the fold's queries, as
    scikit-learn's :func:`~sklearn.model_selection.cross_val_predict` does.

    A :class:`~locus_sklearn.LocusRouter` is not retrained by default
    (``refit=False``): its trained network embeds the pool from the rows
    outside each fold and predicts the fold (its kernel readout reading
    those rows), with its fitted ``shrinkage_`` toward those rows' mean
    scores, which is what ``LocusRouter(FrozenEstimator(router.embedder_),
    shrinkage=router.shrinkage_)`` fitted on them predicts; the queries are
    encoded once. That removes the readout's leak (a query's own answers),
    but the network was trained on every fold's answers, so its predictions
    of a fold still lean toward that fold's answers: optimistic, the more so
    the longer the network trained. ``refit=True`` clones and refits it,
    embedder included, on each fold's rows, as any other router is: out of
    fold, for the price of training one network per fold.

    Parameters
    ----------
    router : fitted router
        A :class:`~locus_sklearn.LocusRouter` or another router of
        locus_sklearn (a subclass of ``BaseRouter``, such as the peers of
        :mod:`locus_sklearn.baselines`). A ``FrozenEstimator`` is refused:
        its copies could not be refitted without their fold.
    evals : DataFrame or mapping of columns
        Scored evaluations (``model``, ``query``, ``score``) of every model of
        the pool, typically the router's training evaluations.
    cv : int, cross-validation splitter, iterable or None, default=5
        How the queries are split, as scikit-learn's
        :func:`~sklearn.model_selection.check_cv` accepts it. The folds split
        the sorted distinct queries (``check_evals(evals).queries``), so every
        index is a position in that array, never a row of ``evals``:

        - an int: the number of folds of sklearn's ``KFold``, shuffled with
          ``random_state=0`` (query ids often sort by source); it ignores
          groups, so ``groups`` is refused with it;
        - None: the default, 5 such folds;
        - a splitter: its ``split(queries)`` is called, with
          ``groups=`` when ``groups`` is given (``GroupKFold``,
          ``LeaveOneGroupOut``; a splitter that ignores groups, such as
          ``KFold``, ``LeaveOneOut`` or ``PredefinedSplit``, is refused
          with them: its folds would mix the groups); a splitter that
          needs a target ``y`` (``StratifiedKFold``, or a ``split`` whose
          ``y`` has no default) is refused, queries have none, and so is
          ``ModelGroupSplit``, which holds out models, not queries;
        - an iterable of ``(train, test)`` pairs of index arrays (a list, a
          tuple, a generator); its folds are fixed, so ``groups`` is
          refused with it.

        Each query must be in exactly one test fold, and no test fold may
        hold every query; every fold is checked before any copy is fitted.
        Only the test folds are read: each copy is fitted on every query
        outside its test fold.
    groups : array-like of shape (n_rows,), default=None
        Group of each row of ``evals`` (e.g. ``evals["task"]``), for a
        splitter that splits by group (given as ``cv``: an int, None, an
        iterable of folds or a splitter that ignores groups cannot use
        them); every row of a query must have the same group. The splitter
        receives one group per query, in the order of the sorted distinct
        queries.
    refit : bool, default=False
        For a :class:`~locus_sklearn.LocusRouter` only (any other router is
        refitted per fold either way). False reuses its trained network,
        which saw every fold (see above): one encoding of the queries and
        no training, but optimistic P(correct). True fits a clone of the
        router, embedder included, on the rows outside each fold, with the
        router's parameters (``shrinkage="auto"`` is chosen again per fold);
        an embedder given as a ``FrozenEstimator`` stays frozen, so only
        its readout and shrinkage are refitted.

    Returns
    -------
    proba : ndarray of shape (n_queries, n_models)
        Rows in sorted query order (``check_evals(evals).queries``), columns
        in ``router.classes_`` order; the dtype of the router's own
        ``predict_proba`` (float32 for a LocusRouter). Each row is predicted
        without its fold's answers, except that a LocusRouter's network,
        with ``refit=False``, was trained on every fold's: those are out of
        fold for the readout only, and optimistic.

    Raises
    ------
    ValueError
        If ``evals`` holds other models than the router's, ``cv`` gives a
        query to two test folds or to none, a test fold holds every query,
        a model has every evaluation in one fold, ``cv`` needs a target
        ``y``, or ``groups`` does not give one group per row with one group
        per query.
    TypeError
        If ``router`` is not a router of locus_sklearn (or is a
        ``FrozenEstimator``), ``cv`` is none of the kinds above or is a
        ``ModelGroupSplit``, ``groups`` is given with a ``cv`` that
        cannot use them (an int, None, an iterable of folds, or a splitter
        whose ``split`` takes no groups or ignores them), or ``refit`` is
        not a bool.
    Exception
        Whatever a copy's ``fit`` raises on the rows outside a fold, as an
        exception of the same type (the original chained as its cause)
        whose message names the test fold and the numbers of queries and
        rows the copy was fitted on.

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

    Folds by group, one group per row (here q1 and q2 in one, q3 and q4 in
    the other):

    >>> from sklearn.model_selection import LeaveOneGroupOut
    >>> groups = ["x", "x", "y", "y"] * 2
    >>> cross_val_predict_proba(router, evals, cv=LeaveOneGroupOut(),
    ...                         groups=groups)[:, 1].tolist()
    [0.0, 1.0, 1.0, 0.0]
    """
    _check_router(router)
    refit = check_refit(refit)
    check_is_fitted(router)
    table = check_evals(evals)
    query_groups = None if groups is None else _query_groups(groups, evals, table)
    return out_of_fold_proba(router, table, cv, query_groups=query_groups, refit=refit)


def out_of_fold_proba(router, table, cv, *, query_groups=None, refit=False):
    """:func:`cross_val_predict_proba` of a fitted router on an already
    validated :class:`~locus_sklearn.EvalTable` (callers that checked the
    evaluations themselves do not check them again); ``query_groups`` holds
    one group per query of ``table.queries``, or is None."""
    _check_router(router)  # cost_quality_curve(cv=...) calls this directly
    refit = check_refit(refit)
    classes = np.asarray(router.classes_, dtype=object)
    unknown = np.setdiff1d(table.models, classes)
    absent = np.setdiff1d(classes, table.models)
    if len(unknown) or len(absent):
        raise ValueError(
            "evals must hold evaluations of exactly the router's pool; "
            + (f"unknown model(s): {_preview(unknown)}. " if len(unknown) else "")
            + (f"no rows for: {_preview(absent)}." if len(absent) else "")
        )
    splitter = _check_cv(cv, table.n_queries, grouped=query_groups is not None)
    folds = _checked_folds(splitter, table.queries, query_groups)
    reuse = isinstance(router, LocusRouter) and not refit
    predict = _locus_folds if reuse else _refitted_folds
    proba = None
    for held, fold_proba in predict(router, table, folds):
        fold_proba = np.asarray(fold_proba)
        if proba is None:  # the router's own dtype (float32 for a LocusRouter)
            proba = np.empty((table.n_queries, len(classes)), dtype=fold_proba.dtype)
        elif not np.can_cast(fold_proba.dtype, proba.dtype, casting="safe"):
            proba = proba.astype(np.result_type(proba, fold_proba))
        proba[held] = fold_proba
    return proba
