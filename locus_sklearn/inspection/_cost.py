"""The cost knob: accuracy and cost over the cost weight, and λ tuned to a target.

A cost-aware router sends query x to ``argmax_m P_m(x) - λ·c_m``. As λ grows,
each query's routed model can only get cheaper (if a beats b at λ1 and b beats
a at λ2 > λ1, adding the two inequalities gives c_a >= c_b), so mean cost is a
non-increasing step function of λ. Its steps are where two models' utility
lines cross on some query; :func:`_breakpoints` finds them all exactly (the
upper envelope of the lines ``P_m - λ·c_m`` per query), so the curve and the
calibration need no grid and miss no step.
"""

import reprlib
from collections.abc import Iterable, Mapping
from numbers import Integral, Real

import numpy as np
import pandas as pd
from sklearn.utils import Bunch
from sklearn.utils.validation import check_is_fitted

from .._base import check_model_subset, route_by_utility, routing_utility
from .._evals import _preview, check_evals, check_queries
from .._warnings import warn_external
from ..metrics import route
from ..model_selection._cross_val import check_refit, out_of_fold_proba

__all__ = ["calibrate_cost_weight", "cost_quality_curve"]


def _float_array(values, name, what):
    """``values`` as a float64 array, or a TypeError saying what ``name``
    must ``what`` (a custom router's own outputs: no traceback from numpy)."""
    try:
        return np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must {what}; got {reprlib.repr(values)}.") from None


def _utility(proba, costs, cost_weight):
    """:func:`~locus_sklearn._base.routing_utility` in float64."""
    return routing_utility(np.asarray(proba, dtype=np.float64), costs, cost_weight)


def _router_costs(router):
    if not hasattr(router, "fit"):
        # check_is_fitted's "None is not an estimator instance." names no
        # parameter.
        raise TypeError(
            "router must be a fitted router with classes_, predict_proba and "
            f"model_costs_; got {reprlib.repr(router)} ({type(router).__name__})."
        )
    check_is_fitted(router)
    costs = getattr(router, "model_costs_", None)
    if costs is None:
        raise ValueError(
            f"{type(router).__name__} was fitted without model costs; the cost "
            "weight only matters with costs: fit it with model_costs=."
        )
    # A custom router's costs are its own: a NaN, inf or negative cost would
    # come out as a NaN, inf or negative mean cost, and the wrong shape as an
    # IndexError.
    n_models = len(router.classes_)
    name = f"{type(router).__name__}.model_costs_"
    costs = _float_array(costs, name, "be numbers, one cost per model of classes_")
    if costs.shape != (n_models,):
        raise ValueError(
            f"{name} must have shape (n_models,) = ({n_models},), one cost per "
            f"model of classes_; got shape {costs.shape}."
        )
    bad = ~np.isfinite(costs) | (costs < 0)
    if bad.any():
        raise ValueError(
            f"{name} must be finite and >= 0; got "
            f"{_preview(costs[bad].tolist())} for "
            f"{_preview(np.asarray(router.classes_, dtype=object)[bad])}."
        )
    if getattr(router, "shrinkage_", 0.0) == 1.0:
        # LocusRouter's safeguard at its end point: no per-query signal left.
        warn_external(
            f"{type(router).__name__}.shrinkage_ is 1: every query's P(correct) "
            "is its model's mean score, so the cost weight can only move the "
            "whole traffic from one model to another. For cost-aware routing, "
            "fit with shrinkage='auto' (with costs it stays below 1), "
            "shrinkage=None or a fixed shrinkage below 1.",
            UserWarning,
        )
    return costs


def _read_queries_or_evals(router, evals):
    """Queries, their dense scores (or None), the candidate mask and the
    validated table (None for queries only)."""
    classes = np.asarray(router.classes_, dtype=object)
    # A DataFrame of queries has a query column only: one with a model column
    # too is evaluations (check_evals names a missing score column), never
    # plain queries with their scores dropped. A mapping of columns is read
    # as the DataFrame it stands for, so that the two forms agree.
    name = "evals"
    if (
        isinstance(evals, Mapping)
        and "query" in evals
        and {"model", "score"}.isdisjoint(evals)
    ):
        evals, name = evals["query"], "evals['query']"
    elif isinstance(evals, Mapping) or (
        isinstance(evals, pd.DataFrame)
        and not {"model", "score"}.isdisjoint(evals.columns)
    ):
        table = check_evals(evals)
        pool = set(classes)
        unknown = [m for m in table.models if m not in pool]
        if unknown:
            raise ValueError(
                f"evals has {len(unknown)} model(s) that are not in the router's "
                f"pool: {_preview(unknown)}."
            )
        Y = table.to_dense(classes)
        return table.queries, Y, ~np.isnan(Y), table
    queries = check_queries(evals, name=name)
    if len(queries) == 0:
        raise ValueError("evals holds no queries; give at least one.")
    return queries, None, np.ones((len(queries), len(classes)), dtype=bool), None


def _check_cv_kind(cv):
    """Refuse a ``cv`` of no kind these functions take, saying what None
    means here: no cross-validation (cross_val_predict_proba's message says
    5 folds, its default). Values of the right kind are checked there."""
    if cv is None or (isinstance(cv, Integral) and not isinstance(cv, bool)):
        return
    kinds = (
        "None (no cross-validation: route by router.predict_proba), an int >= 2 "
        "(folds), a splitter with a split method (such as "
        "sklearn.model_selection.KFold) or an iterable of (train, test) index pairs"
    )
    if isinstance(cv, type):
        raise TypeError(
            f"cv must be {kinds}; got the class {cv.__name__}, not an instance "
            f"(e.g. {cv.__name__}())."
        )
    if isinstance(cv, str | bytes) or not (
        hasattr(cv, "split") or isinstance(cv, Iterable)
    ):
        raise TypeError(
            f"cv must be {kinds}; got {reprlib.repr(cv)} ({type(cv).__name__})."
        )


def _queries_and_proba(router, evals, cv, *, refit=False, scores_needed=None):
    """Queries, dense scores (or None), candidates and P(correct): the
    router's predictions, or with ``cv`` its out-of-fold ones (``refit``:
    a LocusRouter's network too is refitted per fold). Raises TypeError
    with the message ``scores_needed`` if given and ``evals`` holds queries
    only."""
    _check_cv_kind(cv)
    if check_refit(refit) and cv is None:
        # Nothing is refitted without folds: the router's own predict_proba
        # would be used, as if refit had not been asked for.
        raise ValueError(
            "refit=True refits a copy of the router per fold of cv, but cv=None "
            "routes by router.predict_proba, without folds. Pass cv (e.g. cv=5) "
            "with refit=True, or drop refit."
        )
    queries, Y, candidates, table = _read_queries_or_evals(router, evals)
    if Y is None and scores_needed is not None:
        raise TypeError(scores_needed)
    if cv is None:
        proba = router.predict_proba(queries)
    elif Y is None:
        raise TypeError(
            f"cv={cv!r} refits copies of the router on the rows of evals, so evals "
            "must be scored evaluations (model, query, score); got queries only."
        )
    else:
        proba = out_of_fold_proba(router, table, cv, refit=refit)
    return queries, Y, candidates, _check_proba(router, proba, queries, cv)


def _check_proba(router, proba, queries, cv):
    """``proba`` as float64, refused unless it is finite and of shape
    (n_queries, n_models). A custom router's P(correct) is its own: the
    wrong shape was a bare IndexError, and a NaN froze its query at the
    dearest model in the exact curve (the crossings were lost) while
    ``predict`` skipped the NaN. P(correct) is finite throughout the
    package (:func:`~locus_sklearn._base.route_by_utility`, the scorers of
    :mod:`locus_sklearn.metrics`), so a non-finite one is refused rather
    than given a meaning here."""
    name = f"{type(router).__name__}.predict_proba"
    if cv is not None:
        name = f"the out-of-fold {name} (cv={cv!r})"
    proba = _float_array(proba, name, "return numbers, P(correct) per query and model")
    classes = np.asarray(router.classes_, dtype=object)
    expected = (len(queries), len(classes))
    if proba.shape != expected:
        raise ValueError(
            f"{name} must return shape (n_queries, n_models) = {expected}, one "
            "row per query of evals and one column per model of classes_; got "
            f"shape {proba.shape}."
        )
    bad = ~np.isfinite(proba)
    if bad.any():
        rows, columns = np.nonzero(bad)
        # _preview shows numpy scalars as the Python values they hold.
        query = _preview(queries[rows[:1]])[1:-1]
        model = _preview(classes[columns[:1]])[1:-1]
        raise ValueError(
            f"{name} must return finite P(correct); got {int(bad.sum())} "
            f"non-finite value(s), the first {float(proba[rows[0], columns[0]])!r} "
            f"for query {query} and model {model}."
        )
    return proba


def _breakpoints(proba, costs, candidates):
    """Every λ > 0 where some query's routed model changes, and the change.

    Parameters
    ----------
    proba : ndarray of shape (n_queries, n_models)
    costs : ndarray of shape (n_models,)
    candidates : ndarray of bool, shape (n_queries, n_models)
        Models a query may go to; at least one per query.

    Returns
    -------
    start : ndarray of int64, shape (n_queries,)
        Routed model at λ = 0 (ties to the lowest index, as ``route``).
    events : tuple of ndarrays (lam, query, old, new), each of shape (n_events,)
        Sorted by ``lam``: just above ``lam``, ``query`` moves from model
        ``old`` to the cheaper model ``new``.
    """
    n = len(proba)
    rows = np.arange(n)
    current = route(proba, candidates)
    start = current.copy()
    lam = np.zeros(n)
    events = []
    active = rows
    # Each step moves a query to a strictly cheaper model, so at most n_models
    # steps; the loop runs over the queries still moving.
    while len(active):
        cur = current[active]
        c_cur = costs[cur]
        cheaper = candidates[active] & (costs[None, :] < c_cur[:, None])
        with np.errstate(divide="ignore", invalid="ignore"):
            cross = (proba[active, cur][:, None] - proba[active]) / (
                c_cur[:, None] - costs[None, :]
            )
        cross = np.where(cheaper, np.maximum(cross, lam[active][:, None]), np.inf)
        t = cross.min(axis=1)
        moving = np.isfinite(t)
        active, cur, cross, t = active[moving], cur[moving], cross[moving], t[moving]
        if not len(active):
            break
        # Among models crossing at the same λ, the cheapest wins just above it
        # (lowest index on equal cost).
        tied = cross <= t[:, None]
        new = np.argmin(np.where(tied, costs[None, :], np.inf), axis=1)
        events.append((t, active, cur, new))
        current[active] = new
        lam[active] = t
    if not events:
        empty = np.zeros(0)
        return start, (
            empty,
            empty.astype(np.int64),
            empty.astype(np.int64),
            empty.astype(np.int64),
        )
    lam_e, query, old, new = (
        np.concatenate(parts) for parts in zip(*events, strict=True)
    )
    order = np.argsort(lam_e, kind="stable")
    return start, (lam_e[order], query[order], old[order], new[order])


def _crossing_windows(proba, costs, lam, query, old, new):
    """Where float arithmetic may route each event's query either way.

    ``route`` compares utilities ``P - λ·c`` computed in float64, each off
    by at most ``eps/2·(|P| + 2λc)``; near the crossing of two lines the
    computed order of the two utilities can therefore go either way, and
    the crossing itself is computed with a few ulps of error. The window
    around each crossing bounds both, with a factor 2 to spare.

    Returns the window's ends, each of shape (n_events,).
    """
    eps = np.finfo(np.float64).eps
    p_sum = np.abs(proba[query, old]) + np.abs(proba[query, new])
    c_sum = costs[old] + costs[new]
    gap = costs[old] - costs[new]  # > 0: each event moves to a cheaper model
    with np.errstate(over="ignore"):
        width = eps * (p_sum + 2 * lam * c_sum) / gap + 4 * eps * lam
    return lam - width, lam + width


def _merge_crossings(proba, costs, lam, query, old, new, *, first_inside=False):
    """Group the crossings that no float λ separates, and a λ between groups.

    Two crossings a few ulps apart (equal in exact arithmetic, e.g. three
    utility lines through one point) leave between them an interval that no
    λ routes as it says: its midpoint rounds onto a crossing. Crossings whose
    windows (:func:`_crossing_windows`) overlap are one step of the curve.

    Returns
    -------
    group : ndarray of int64, shape (n_events,)
        The step of each event (non-decreasing, as ``lam`` is sorted).
    lower, upper : ndarray of shape (n_steps + 1,)
        Each interval of λ between two steps (``upper`` inf for the last).
    inside : ndarray of shape (n_steps + 1,)
        A λ in each interval out of every window, so that ``route`` at it
        routes every query as the interval says: the interval's midpoint
        (twice its lower end for the last, 1 if that is 0), or if that
        falls in a window the midpoint of the gap between the windows (twice
        the last window's end for the last). The first interval's λ is 0,
        the default, or with ``first_inside`` a λ inside it chosen as for
        the others (λ = 0 has no window: routing by P alone is exact), and 0
        only where no float λ clears the first window.
    """
    low, high = _crossing_windows(proba, costs, lam, query, old, new)
    # Sweep the windows by their lower end: a window that starts after every
    # earlier one has ended opens a new step.
    order = np.argsort(low, kind="stable")
    reach = np.maximum.accumulate(high[order])
    opens = np.r_[True, low[order][1:] > reach[:-1]]
    group = np.empty(len(lam), dtype=np.int64)
    group[order] = np.cumsum(opens) - 1
    n_steps = int(group.max()) + 1 if len(group) else 0
    first = np.full(n_steps, np.inf)
    last = np.full(n_steps, -np.inf)
    window_low = np.full(n_steps, np.inf)
    window_high = np.full(n_steps, -np.inf)
    np.minimum.at(first, group, lam)
    np.maximum.at(last, group, lam)
    np.minimum.at(window_low, group, low)
    np.maximum.at(window_high, group, high)
    lower = np.concatenate([[0.0], last])
    upper = np.concatenate([first, [np.inf]])
    # λ = 0 itself (the default) is always a point, even when ties at 0 make
    # its interval empty: just above 0 ties break towards the cheaper model.
    inside = np.zeros(n_steps + 1)
    if n_steps:
        mid = (last[:-1] + first[1:]) / 2
        clear = (mid > window_high[:-1]) & (mid < window_low[1:])
        inside[1:-1] = np.where(clear, mid, (window_high[:-1] + window_low[1:]) / 2)
        end = last[-1] * 2 if last[-1] > 0 else 1.0  # 1 if every crossing is at 0
        inside[-1] = end if end > window_high[-1] else window_high[-1] * 2
        if first_inside and first[0] > 0:
            # The largest λ of [0, first): λ = 0 routes alike on these
            # queries but puts no pressure on cost for new ones.
            mid = first[0] / 2
            gap = window_low[0] / 2 if window_low[0] > 0 else 0.0
            inside[0] = mid if mid < window_low[0] else gap
    return group, lower, upper, inside


def _intervals(proba, costs, candidates, Y, share_mask, *, first_inside=False):
    """Metrics on every interval of λ where no routing decision changes.

    Returns a DataFrame with columns ``lower``, ``upper`` (the interval, upper
    inf for the last), ``cost_weight`` (a λ inside it; 0 for the first
    unless ``first_inside``, see :func:`_merge_crossings`), ``mean_cost``,
    ``share`` (or NaN), ``accuracy`` (the mean score of the routed models
    over the queries whose routed model has a score in ``Y``; NaN without
    ``Y`` or where none has) and ``n_scored`` (the number of those queries;
    0 without ``Y``), in increasing λ.
    """
    n = len(proba)
    start, (lam, query, old, new) = _breakpoints(proba, costs, candidates)
    group, lower, upper, inside = _merge_crossings(
        proba, costs, lam, query, old, new, first_inside=first_inside
    )
    n_steps = len(lower) - 1

    def walk(value_start, delta):
        # Sum of a per-query value over the routing, on each step: the
        # changes of every event, summed per step.
        total = np.bincount(group, weights=delta, minlength=n_steps)
        return np.concatenate([[value_start], value_start + np.cumsum(total)])

    mean_cost = _interval_mean_costs(start, group, old, new, costs, n_steps)
    share = np.full(n_steps + 1, np.nan)
    if share_mask is not None:
        s = share_mask.astype(np.float64)
        share = walk(s[start].sum(), s[new] - s[old]) / n
    accuracy = np.full(n_steps + 1, np.nan)
    n_scored = np.zeros(n_steps + 1, dtype=np.int64)
    if Y is not None:
        # Candidates without a score (the whole pool, as predict routes, on a
        # sparse table) leave their queries out of the accuracy; where every
        # candidate is scored this is the mean over all n queries.
        has = ~np.isnan(Y)
        y, h = np.where(has, Y, 0.0), has.astype(np.float64)
        rows = np.arange(n)
        total = walk(y[rows, start].sum(), y[query, new] - y[query, old])
        # Sums of 0s and 1s: exact integers in float64.
        count = np.rint(walk(h[rows, start].sum(), h[query, new] - h[query, old]))
        n_scored = count.astype(np.int64)
        with np.errstate(invalid="ignore", divide="ignore"):
            accuracy = np.where(count > 0, total / count, np.nan)
    return pd.DataFrame(
        {
            "lower": lower,
            "upper": upper,
            "cost_weight": inside,
            "mean_cost": mean_cost,
            "share": share,
            "accuracy": accuracy,
            "n_scored": n_scored,
        }
    )


def _mean_cost(counts, costs, n):
    """Mean cost of a routing from its calls per model (``counts``, integers,
    the last axis over the models): exact 0 where every call is free, and the
    same value for the same routing however it was reached."""
    return (counts * costs).sum(axis=-1) / n


def _interval_mean_costs(start, group, old, new, costs, n_steps):
    """Mean cost on each interval of λ, shape (n_steps + 1,).

    Each interval's mean cost is computed from its own calls per model (exact
    integers), not from a running sum of cost changes, whose round-off left
    ~1e-17 where every query had reached a free model and would make a
    reachable mean cost of 0 look unreachable. The counts are built in blocks
    of intervals so that memory stays bounded.
    """
    n, n_models = len(start), len(costs)
    counts = np.bincount(start, minlength=n_models)
    mean_cost = np.empty(n_steps + 1)
    mean_cost[0] = _mean_cost(counts, costs, n)
    block = max(1, 2**20 // n_models)
    for low in range(0, n_steps, block):
        high = min(low + block, n_steps)
        a, b = np.searchsorted(group, [low, high])  # events sorted by λ
        cell = (group[a:b] - low) * n_models
        size = (high - low) * n_models
        delta = np.bincount(cell + new[a:b], minlength=size) - np.bincount(
            cell + old[a:b], minlength=size
        )
        running = counts + np.cumsum(delta.reshape(high - low, n_models), axis=0)
        mean_cost[low + 1 : high + 1] = _mean_cost(running, costs, n)
        counts = running[-1]
    return mean_cost


# Scores often come in float32 (parquet files and judges' outputs hold them
# so): a score of 0.7 then reads 0.699999988, within half a float32 ulp (at most 2**-25 below 1) of what was
# given, and so is a mean of such scores; two such means differ by at most
# 2**-24 more or less than by hand. Accuracies closer than float32's eps
# (2**-23: twice that, leaving room for the float64 running sums) are one:
# a floor met by hand is met, and a routing that costs more for an accuracy
# higher only by this rounding is dominated. Means of 0/1 scores over fewer
# than 2**23 queries differ by 1/n at least, far more.
_ACCURACY_ROUNDING = float(np.finfo(np.float32).eps)


def _pareto(cost, accuracy, tol=_ACCURACY_ROUNDING):
    """The Pareto frontier: points that no other point dominates, i.e. no
    other point has cost <= and accuracy >= with one of them strict.

    Accuracies within ``tol`` of each other count as equal (see
    ``_ACCURACY_ROUNDING``). Identical points do not dominate each other:
    all their copies are kept, and so are the points of one cost whose
    accuracy is within ``tol`` of that cost's best.
    """
    order = np.lexsort((-accuracy, cost))
    best = -np.inf  # the best accuracy at a smaller cost
    keep = np.zeros(len(cost), dtype=bool)
    start = 0
    while start < len(order):
        # The points of one cost, most accurate first.
        stop = start + 1
        while stop < len(order) and cost[order[stop]] == cost[order[start]]:
            stop += 1
        group = order[start:stop]
        top = accuracy[group[0]]
        if top > best + tol:
            keep[group] = accuracy[group] >= top - tol
        best = max(best, top)
        start = stop
    return keep


def _aiq(cost, accuracy):
    """Area under the non-decreasing upper convex hull over the cost span,
    divided by the span (RouterBench's AIQ): the mean accuracy reachable by
    mixing two routing points, over the costs the curve covers."""
    points = sorted(set(zip(cost.tolist(), accuracy.tolist(), strict=True)))
    if len(points) == 1 or points[0][0] == points[-1][0]:
        return float(max(a for _, a in points))
    hull = []
    for p in points:
        while len(hull) >= 2:
            (x1, y1), (x2, y2) = hull[-2], hull[-1]
            if (x2 - x1) * (p[1] - y1) - (y2 - y1) * (p[0] - x1) >= 0:
                hull.pop()
            else:
                break
        hull.append(p)
    x = np.array([h[0] for h in hull])
    y = np.maximum.accumulate(np.array([h[1] for h in hull]))
    # The trapezoid rule written out: np.trapezoid is numpy >= 2.0 only (and
    # np.trapz deprecated there), while numpy 1.24 is supported.
    area = (np.diff(x) * (y[1:] + y[:-1]) / 2.0).sum()
    return float(area / (x[-1] - x[0]))


def cost_quality_curve(
    router, evals, cost_weights=None, *, models=None, cv=None, refit=False
):
    """Accuracy and mean cost of a router's routing as the cost weight varies.

    Each query of ``evals`` is routed as :meth:`~locus_sklearn.LocusRouter.score`
    routes it (among the pool's models with a score for it), to the model
    with the largest ``P(correct) - λ·cost``, for each λ (where a huge λ
    overflows every utility of a query to -inf, to the cheapest model). With
    ``cost_weights=None`` the curve is exact: one point per interval of λ in
    which no routing decision changes, found from the crossings of the
    models' utility lines (no grid, no missed step). The router is not
    changed.

    Parameters
    ----------
    router : fitted router
        Any router with ``classes_``, ``predict_proba`` and ``model_costs_``
        (for example :class:`~locus_sklearn.LocusRouter` fitted with
        ``model_costs=``); ``predict_proba`` must return finite P(correct) of
        shape (n_queries, n_models).
    evals : DataFrame or mapping of columns
        Scored evaluations of models of the pool (``model``, ``query``,
        ``score``), typically held-out queries.
    cost_weights : array-like of float >= 0, default=None
        The λ values to evaluate, real numbers (not bools or strings), each
        once; the points come out sorted by λ. None gives the exact curve.
    models : sequence of str, default=None
        Also report the share of queries routed to these models (e.g. the
        most expensive ones).
    cv : int, cross-validation splitter or None, default=None
        None routes by ``router.predict_proba``. Given, ``evals`` are the
        router's training evaluations and each query is routed by the
        P(correct) of a copy fitted without it
        (:func:`~locus_sklearn.model_selection.cross_val_predict_proba`), as
        for :func:`calibrate_cost_weight`.
    refit : bool, default=False
        With ``cv``, for a :class:`~locus_sklearn.LocusRouter`: False reuses
        its trained network, which saw every fold, so the curve is
        optimistic; True refits a clone, embedder included, per fold (one
        network trained per fold). Other routers are refitted either way.
        True needs ``cv``. See
        :func:`~locus_sklearn.model_selection.cross_val_predict_proba`.

    Returns
    -------
    curve : Bunch
        ``points``: DataFrame with one row per λ, columns ``cost_weight``,
        ``mean_cost`` (mean cost of the routed models, from
        ``router.model_costs_``), ``accuracy`` (mean score of the routed
        models), ``share`` (of calls to ``models``; NaN without them) and
        ``pareto`` (True on the Pareto frontier: where no other point is at
        most as costly and at least as accurate, and strictly better on one
        of the two; a point that only costs more for the same accuracy is
        off it, and identical points are on it together; accuracies within
        float32's eps, 2**-23, count as the same, as scores often come in
        float32), in increasing λ.
        With the exact curve, also ``lower`` and ``upper``, the interval of
        λ each point stands for.
        ``pareto``: the Pareto points only, cheapest first.
        ``auc``: area under the curve, as RouterBench's AIQ: the area under
        the non-decreasing upper convex hull of the points divided by the
        cost span, i.e. the mean accuracy reachable over the costs covered.

    Warns
    -----
    UserWarning
        If ``router.shrinkage_`` is 1, as :func:`calibrate_cost_weight`.

    Examples
    --------
    >>> from locus_sklearn.baselines import KNNRouter
    >>> from locus_sklearn.inspection import cost_quality_curve
    >>> encoder = {"q1": [1.0, 0.0], "q2": [0.0, 1.0]}
    >>> evals = {"model": ["big", "big", "small", "small"],
    ...          "query": ["q1", "q2", "q1", "q2"], "score": [1, 1, 1, 0]}
    >>> router = KNNRouter(1, encoder=encoder).fit(
    ...     evals, model_costs={"big": 11.0, "small": 1.0})
    >>> curve = cost_quality_curve(router, evals)
    >>> curve.points[["lower", "upper", "mean_cost", "accuracy"]]
       lower  upper  mean_cost  accuracy
    0    0.0    0.0       11.0       1.0
    1    0.0    0.1        6.0       1.0
    2    0.1    inf        1.0       0.5
    >>> curve.points["pareto"].tolist()  # 11.0 buys no accuracy over 6.0
    [False, True, True]
    >>> round(curve.auc, 3)
    0.875
    """
    costs = _router_costs(router)
    share_mask = None
    if models is not None:
        share_mask = check_model_subset(models, router.classes_)
    if cost_weights is not None:
        weights = _check_cost_weights(cost_weights)
    queries, Y, candidates, proba = _queries_and_proba(
        router,
        evals,
        cv,
        refit=refit,
        scores_needed="evals must be a table of scored evaluations (model, query, "
        "score) to measure accuracy; got queries only.",
    )
    if cost_weights is None:
        # Every query is routed among scored models here, so all are scored.
        points = _intervals(proba, costs, candidates, Y, share_mask).drop(
            columns="n_scored"
        )
    else:
        rows = np.arange(len(queries))
        records = []
        for weight in weights:
            # As predict routes: by cost where a huge weight overflowed every
            # utility of a query to -inf.
            routed = route_by_utility(proba, costs, weight, candidates)
            counts = np.bincount(routed, minlength=len(costs))
            records.append(
                {
                    "cost_weight": weight,
                    "mean_cost": _mean_cost(counts, costs, len(routed)),
                    "share": share_mask[routed].mean()
                    if share_mask is not None
                    else np.nan,
                    "accuracy": Y[rows, routed].mean(),
                }
            )
        points = pd.DataFrame.from_records(records)
    cost = points["mean_cost"].to_numpy()
    accuracy = points["accuracy"].to_numpy()
    points["pareto"] = _pareto(cost, accuracy)
    pareto = points[points["pareto"]].sort_values("mean_cost").reset_index(drop=True)
    return Bunch(points=points, pareto=pareto, auc=_aiq(cost, accuracy))


def _check_cost_weights(cost_weights):
    if isinstance(cost_weights, str):
        raise TypeError(
            f"cost_weights must be real numbers >= 0; got the string {cost_weights!r}."
        )
    weights = np.atleast_1d(np.asarray(cost_weights, dtype=object))
    if weights.ndim != 1 or not len(weights):
        raise ValueError("cost_weights must be a non-empty 1-d sequence of numbers.")
    # True and "0.5" convert to floats, but a bool or a string is no weight.
    not_real = [
        v
        for v in weights.tolist()
        if isinstance(v, bool | np.bool_) or not isinstance(v, Real)
    ]
    if not_real:
        raise TypeError(
            f"cost_weights must be real numbers >= 0, not bools or strings; got "
            f"{_preview(not_real)}."
        )
    weights = weights.astype(np.float64)
    bad = ~np.isfinite(weights) | (weights < 0)
    if bad.any():
        raise ValueError(
            f"cost_weights must be finite and >= 0; got {weights[bad].tolist()}."
        )
    values, counts = np.unique(weights, return_counts=True)
    if (counts > 1).any():
        raise ValueError(
            f"cost_weights repeats {_preview(values[counts > 1].tolist())}; give "
            "each cost weight once (each is one point of the curve)."
        )
    return values


def _check_target(value, name, *, upper=None):
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{name} must be a number; got {value!r}.")
    value = float(value)
    if not np.isfinite(value) or value < 0 or (upper is not None and value > upper):
        valid = f"in [0, {upper}]" if upper is not None else "finite and >= 0"
        raise ValueError(f"{name} must be {valid}; got {value!r}.")
    return value


def calibrate_cost_weight(
    router,
    evals,
    *,
    target_cost=None,
    target_share=None,
    models=None,
    min_accuracy=None,
    cv=None,
    refit=False,
):
    """The cost weight λ that meets a target on a set of calibration queries.

    Give exactly one target:

    - ``target_cost``: the smallest λ (the least pressure on cost) whose
      mean cost per query is at most ``target_cost``; accuracy need not fall
      as λ grows, so a larger λ that also meets the target may route more
      accurately (:func:`cost_quality_curve` shows every λ);
    - ``target_share`` with ``models``: the smallest λ that sends at most
      that fraction of queries to ``models`` (RouteLLM's "at most 20 % of
      calls to the strong model");
    - ``min_accuracy``: the largest λ (the cheapest routing) whose accuracy
      is at least ``min_accuracy``; needs scored ``evals`` (where some
      models lack a score for a query, see ``evals`` for what accuracy
      measures).

    The search is exact: routing changes only where two models' utility lines
    ``P(correct) - λ·cost`` cross on some query, so every λ between two
    crossings routes the calibration queries alike; the λ returned lies
    inside its interval (its midpoint; twice the last crossing for the last
    interval), never on a crossing, and far enough from every crossing that
    the router's float arithmetic routes as reported (crossings it cannot
    tell apart, such as three utility lines through one point, are one
    step). In the first interval, [0, first crossing), the cost and share
    targets return λ = 0, the smallest; ``min_accuracy`` returns its
    midpoint as well. The router is not changed: set the result with
    ``router.set_params(cost_weight=result.cost_weight)``.

    Cost and share targets need only the queries, so unlabelled traffic (a
    log of real queries) calibrates them. Calibrate on queries the router
    did not read at fit (its kernel readout has their answers, so it is
    surer of them than of new traffic), or on its training evaluations with
    ``cv``: each query is then routed by a copy of the router fitted
    without it, and no query has to be held out of the fit. A
    :class:`~locus_sklearn.LocusRouter`'s copies re-embed the pool but keep
    the network trained on every query (unless ``refit=True``, which trains
    one network per fold): over 30 re-splits of RouterBench
    (``benchmarks/calibration_resplits.py``) its cost and accuracy targets
    transferred to new queries as well as from held-out queries, but a share
    cap landed 6.5 % under its target; calibrate share caps on queries the
    router was not fitted on.

    Parameters
    ----------
    router : fitted router
        Any router with ``classes_``, ``predict_proba`` and ``model_costs_``;
        ``predict_proba`` must return finite P(correct) of shape (n_queries,
        n_models).
    evals : DataFrame, mapping of columns, or sequence of str
        Scored evaluations (``model``, ``query``, ``score``), or plain
        queries (texts or ids, or a DataFrame or mapping of columns with a
        ``query`` column but no ``model`` or ``score`` column). Either way
        each query is routed among the whole pool, as
        :meth:`~locus_sklearn.LocusRouter.predict` (and ``locus serve``)
        routes it, so that the cost and share targets hold for the routing
        that is served, also where the evaluations leave some models
        unscored on some queries. Accuracy is then the mean score of the
        routed models over the queries whose routed model has a score
        (``n_scored`` of them; all of them on a complete table). On such a
        sparse table this is not :meth:`~locus_sklearn.LocusRouter.score`
        nor :func:`cost_quality_curve`, which route each query among the
        models with a score for it.
    target_cost : float >= 0, default=None
        Largest acceptable mean cost per query, in the units of
        ``router.model_costs_``.
    target_share : float in [0, 1], default=None
        Largest acceptable fraction of queries routed to ``models``.
    models : sequence of str, default=None
        The models ``target_share`` caps (e.g. ``["gpt-4"]``); also reported
        in the result's ``share`` for the other targets.
    min_accuracy : float in [0, 1], default=None
        Smallest acceptable routing accuracy. An accuracy within float32's
        eps (2**-23) below it meets it: scores often come in float32 (parquet
        files hold them so), where a mean of scores of 0.7 reads 0.699999988.
    cv : int, cross-validation splitter or None, default=None
        None routes by ``router.predict_proba``. Given, ``evals`` are the
        router's training evaluations (scored, every model of the pool) and
        each query is routed by the out-of-fold P(correct) of
        :func:`~locus_sklearn.model_selection.cross_val_predict_proba`
        (``cv`` folds of the queries; a LocusRouter re-embeds its pool per
        fold with its trained network unless ``refit``, other routers are
        refitted).
    refit : bool, default=False
        With ``cv``, for a :class:`~locus_sklearn.LocusRouter`: False reuses
        its trained network, which saw every fold (its P(correct) is then
        optimistic); True refits a clone, embedder included, per fold (one
        network trained per fold). Other routers are refitted either way.
        True needs ``cv``. See
        :func:`~locus_sklearn.model_selection.cross_val_predict_proba`.

    Returns
    -------
    result : Bunch
        ``cost_weight`` (λ), and at that λ on the calibration queries,
        each routed among the whole pool: ``mean_cost``, ``share`` (NaN
        without ``models``), ``accuracy`` (mean score of the routed models
        over the ``n_scored`` queries whose routed model has a score; NaN
        without scores or where no routed model has one), ``n_queries``,
        ``n_scored`` (0 without scores); ``lower`` and ``upper``, the
        interval of λ that routes the calibration queries identically.

    Raises
    ------
    ValueError
        If no λ meets the target (the message gives the reachable range),
        if ``router.predict_proba`` returns a non-finite value or the wrong
        shape, or if ``refit=True`` is given without ``cv``.
    TypeError
        If ``refit`` is not a bool.

    Warns
    -----
    UserWarning
        If ``router.shrinkage_`` is 1 (a :class:`~locus_sklearn.LocusRouter`
        fitted with ``shrinkage=1``, whose P(correct) is each model's mean
        score for every query; ``"auto"`` stays below 1 with costs): λ can
        then only move the whole traffic from one model to another.

    Examples
    --------
    >>> from locus_sklearn.baselines import KNNRouter
    >>> from locus_sklearn.inspection import calibrate_cost_weight
    >>> encoder = {"q1": [1.0, 0.0], "q2": [0.0, 1.0]}
    >>> evals = {"model": ["big", "big", "small", "small"],
    ...          "query": ["q1", "q2", "q1", "q2"], "score": [1, 1, 1, 0]}
    >>> router = KNNRouter(1, encoder=encoder).fit(
    ...     evals, model_costs={"big": 11.0, "small": 1.0})
    >>> result = calibrate_cost_weight(router, evals, target_cost=6)
    >>> result.cost_weight, result.mean_cost, result.accuracy
    (0.05, 6.0, 1.0)
    >>> calibrate_cost_weight(router, evals, target_share=0.0,
    ...                       models=["big"]).cost_weight
    0.2
    """
    target_cost = _check_target(target_cost, "target_cost")
    target_share = _check_target(target_share, "target_share", upper=1)
    min_accuracy = _check_target(min_accuracy, "min_accuracy", upper=1)
    given = [
        name
        for name, value in [
            ("target_cost", target_cost),
            ("target_share", target_share),
            ("min_accuracy", min_accuracy),
        ]
        if value is not None
    ]
    if len(given) != 1:
        raise ValueError(
            "Give exactly one of target_cost, target_share and min_accuracy; got "
            f"{given or 'none'}."
        )
    if target_share is not None and models is None:
        raise ValueError(
            "target_share needs models=, the models whose share of calls it caps."
        )
    costs = _router_costs(router)
    share_mask = None
    if models is not None:
        share_mask = check_model_subset(models, router.classes_)
    queries, Y, _, proba = _queries_and_proba(
        router,
        evals,
        cv,
        refit=refit,
        scores_needed=None
        if min_accuracy is None
        else "min_accuracy needs scored evaluations (model, query, score); got "
        "queries only.",
    )
    # Every query is routed among the whole pool, as router.predict and
    # locus serve route it, also where evals leave some models unscored: the
    # targets must hold for the routing that is served, not for one among
    # the scored models only (router.score's).
    candidates = np.ones(proba.shape, dtype=bool)
    # min_accuracy takes the largest λ of its interval's routing: in the
    # first interval, [0, first crossing), not λ = 0 (see the docstring).
    points = _intervals(
        proba, costs, candidates, Y, share_mask, first_inside=min_accuracy is not None
    )
    # Round-off must not turn an exact hit into a miss: in a target computed
    # elsewhere (relative), in each interval's mean cost, and in the scores
    # (often given in float32, see _ACCURACY_ROUNDING) and their running sums. A
    # mean cost is a sum of nonnegative calls x cost terms (exact integer
    # counts) over the models, divided once: within (n_models + 2) ulps of
    # itself, whatever models it does not call cost (a model priced at 1e12
    # to keep it out let a mean cost 0.05 % over the target pass as a hit
    # when the slack was scaled by the largest cost).
    tol = 1e-9
    if target_cost is not None:
        rounding = (len(costs) + 2) * np.finfo(np.float64).eps * points["mean_cost"]
        slack = target_cost * tol + rounding
        value, ok = points["mean_cost"], points["mean_cost"] <= target_cost + slack
        what, target = "mean cost", target_cost
    elif target_share is not None:
        value, ok = points["share"], points["share"] <= target_share + tol
        # From the mask: models may have been a generator, read by the check.
        capped = np.asarray(router.classes_, dtype=object)[share_mask].tolist()
        what, target = f"share of calls to {capped}", target_share
    else:
        ok = points["accuracy"] >= min_accuracy - _ACCURACY_ROUNDING
        value = points["accuracy"]
        what, target = "accuracy", min_accuracy
    if not ok.any():
        raise ValueError(
            f"No cost weight meets the target {what} {target:g} on these "
            f"{len(queries)} queries; over all cost weights it ranges from "
            f"{value.min():.6g} to {value.max():.6g}."
        )
    # Cost and share: the smallest λ that meets the cap (the least pressure on
    # cost, not always the most accurate); accuracy floor: the cheapest λ that
    # keeps it.
    i = int(np.flatnonzero(ok)[-1 if min_accuracy is not None else 0])
    row = points.iloc[i]
    return Bunch(
        cost_weight=float(row["cost_weight"]),
        mean_cost=float(row["mean_cost"]),
        share=float(row["share"]),
        accuracy=float(row["accuracy"]),
        n_queries=len(queries),
        n_scored=int(row["n_scored"]),
        lower=float(row["lower"]),
        upper=float(row["upper"]),
    )
