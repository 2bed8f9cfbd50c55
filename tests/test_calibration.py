"""cost_quality_curve and calibrate_cost_weight: the exact λ sweep and its targets."""

import warnings

import numpy as np
import pandas as pd
import pytest
from conftest import TINY
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.frozen import FrozenEstimator
from sklearn.model_selection import KFold

from locus_sklearn import LocusEmbedder, LocusRouter
from locus_sklearn.baselines import KNNRouter, SingleBestRouter
from locus_sklearn.datasets import make_model_pool
from locus_sklearn.inspection import calibrate_cost_weight, cost_quality_curve
from locus_sklearn.inspection._cost import _aiq, _intervals, _pareto
from locus_sklearn.metrics import route


@pytest.fixture(scope="module")
def fitted():
    pool = make_model_pool(
        n_models=6, n_queries=200, evals_per_model="all", random_state=0
    )
    queries = np.sort(pool.evals["query"].unique())
    train = pool.evals[pool.evals["query"].isin(queries[:120])]
    test = pool.evals[~pool.evals["query"].isin(queries[:120])]
    # The plain router: the tests are about the calibration functions, and its
    # P(correct) is the network's own, whatever a shrinkage choice would be.
    router = LocusRouter(
        LocusEmbedder(pool.encodings, **{**TINY, "max_epochs": 2, "random_state": 0}),
        shrinkage=None,
    ).fit(train, model_costs=pool.n_params)
    return router, test


def _realised(router, evals, weight):
    """Mean cost and accuracy of router.predict at ``weight``, by brute force."""
    router.set_params(cost_weight=weight)
    try:
        queries = np.sort(evals["query"].unique())
        routed = router.predict(queries)
    finally:
        router.set_params(cost_weight=0.0)
    Y = evals.pivot(index="query", columns="model", values="score").loc[queries]
    idx = np.searchsorted(router.classes_, routed)
    accuracy = Y.to_numpy()[np.arange(len(Y)), idx].mean()
    return router.model_costs_[idx].mean(), accuracy, routed


def test_exact_curve_matches_predict_inside_every_interval(fitted):
    router, test = fitted
    curve = cost_quality_curve(router, test)
    points = curve.points
    assert points["cost_weight"].iloc[0] == 0.0
    assert np.all(np.diff(points["lower"]) >= 0)
    # Mean cost never rises with λ (each query's routed model only gets cheaper).
    assert np.all(np.diff(points["mean_cost"]) <= 1e-9)
    for _, row in points.iloc[:: max(1, len(points) // 15)].iterrows():
        cost, accuracy, _ = _realised(router, test, row["cost_weight"])
        assert cost == pytest.approx(row["mean_cost"])
        assert accuracy == pytest.approx(row["accuracy"])
    # The last point routes every query to its cheapest model.
    assert points["mean_cost"].iloc[-1] == pytest.approx(router.model_costs_.min())


def test_grid_curve_equals_router_score(fitted):
    router, test = fitted
    weights = [0.0, 1e-4, 1e-3, 1e-2]
    curve = cost_quality_curve(router, test, weights, models=[router.classes_[0]])
    for weight, row in zip(weights, curve.points.itertuples(), strict=True):
        router.set_params(cost_weight=weight)
        assert row.accuracy == pytest.approx(router.score(test))
        cost, _, routed = _realised(router, test, weight)
        assert row.mean_cost == pytest.approx(cost)
        assert row.share == pytest.approx(np.mean(routed == router.classes_[0]))
    router.set_params(cost_weight=0.0)
    assert curve.pareto["mean_cost"].is_monotonic_increasing


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 30),
    st.integers(1, 6),
    st.integers(0, 2**31 - 1),
    st.booleans(),
)
def test_intervals_match_brute_force(n_queries, n_models, seed, coarse):
    rng = np.random.default_rng(seed)
    # Coarse values make ties (equal P, equal costs) common.
    if coarse:
        proba = rng.integers(0, 4, (n_queries, n_models)) / 4
        costs = rng.integers(0, 3, n_models).astype(float)
    else:
        proba = rng.random((n_queries, n_models))
        costs = rng.random(n_models) * 10
    candidates = rng.random((n_queries, n_models)) < 0.7
    candidates[np.arange(n_queries), rng.integers(0, n_models, n_queries)] = True
    Y = np.where(candidates, rng.integers(0, 2, (n_queries, n_models)), np.nan)
    share = rng.random(n_models) < 0.5
    points = _intervals(proba, costs, candidates, Y, share)
    rows = np.arange(n_queries)
    for row in points.itertuples():
        routed = route(proba - row.cost_weight * costs, candidates)
        assert row.mean_cost == pytest.approx(costs[routed].mean())
        assert row.accuracy == pytest.approx(Y[rows, routed].mean())
        assert row.share == pytest.approx(share[routed].mean())
        assert row.lower <= row.cost_weight <= row.upper
    # Between two representatives nothing else happens: a random λ routes
    # like the representative of its interval.
    for lam in rng.random(10) * (points["lower"].max() * 2 + 1):
        i = np.searchsorted(points["lower"].to_numpy(), lam, side="right") - 1
        if lam in points["lower"].to_numpy():
            continue
        routed = route(proba - lam * costs, candidates)
        assert costs[routed].mean() == pytest.approx(points["mean_cost"].iloc[i])


def test_pareto_and_aiq_by_hand():
    cost = np.array([1.0, 2.0, 3.0, 2.0])
    accuracy = np.array([0.5, 0.6, 0.9, 0.55])
    assert _pareto(cost, accuracy).tolist() == [True, True, True, False]
    # Hull of (1, .5), (3, .9): (2, .6) lies below the chord (.7), so it is
    # skipped; area (0.5 + 0.9) / 2 * 2 = 1.4 over a span of 2.
    assert _aiq(cost, accuracy) == pytest.approx(0.7)
    # A point beyond the best: the hull stays flat (non-decreasing).
    assert _aiq(np.array([1.0, 2.0, 3.0]), np.array([0.5, 1.0, 0.8])) == 0.875
    assert _aiq(np.array([2.0]), np.array([0.4])) == 0.4


def test_calibrate_target_cost_is_the_most_accurate_under_the_cap(fitted):
    router, test = fitted
    points = cost_quality_curve(router, test).points
    costs = points["mean_cost"].to_numpy()
    target = (costs[0] + costs[-1]) / 2
    result = calibrate_cost_weight(router, test, target_cost=target)
    assert result.mean_cost <= target
    i = int(np.flatnonzero(points["cost_weight"] == result.cost_weight)[0])
    assert i > 0 and costs[i - 1] > target  # one step less λ misses the cap
    cost, accuracy, _ = _realised(router, test, result.cost_weight)
    assert (cost, accuracy) == pytest.approx((result.mean_cost, result.accuracy))
    assert result.lower < result.cost_weight < result.upper
    assert result.n_queries == test["query"].nunique()
    assert router.cost_weight == 0.0  # not changed


def test_calibrate_target_share_and_queries_only(fitted):
    router, test = fitted
    strong = [router.classes_[np.argmax(router.model_costs_)]]
    queries = test["query"].unique()
    result = calibrate_cost_weight(router, queries, target_share=0.2, models=strong)
    assert result.share <= 0.2
    assert np.isnan(result.accuracy)
    _, _, routed = _realised(router, test, result.cost_weight)
    assert np.mean(routed == strong[0]) == pytest.approx(result.share)
    at_zero = np.mean(router.predict(queries) == strong[0])
    if at_zero <= 0.2:
        assert result.cost_weight == 0.0


def test_calibrate_min_accuracy_is_the_cheapest_above_the_floor(fitted):
    router, test = fitted
    points = cost_quality_curve(router, test).points
    floor = points["accuracy"].max() - 0.05
    result = calibrate_cost_weight(router, test, min_accuracy=floor)
    assert result.accuracy >= floor
    later = points[points["lower"] > result.lower]
    assert (later["accuracy"] < floor).all()


def test_calibrate_errors(fitted):
    router, test = fitted
    with pytest.raises(ValueError, match="exactly one of"):
        calibrate_cost_weight(router, test)
    with pytest.raises(ValueError, match="exactly one of"):
        calibrate_cost_weight(router, test, target_cost=1, min_accuracy=0.5)
    with pytest.raises(ValueError, match="needs models="):
        calibrate_cost_weight(router, test, target_share=0.2)
    with pytest.raises(ValueError, match="target_share must be in"):
        calibrate_cost_weight(router, test, target_share=1.5, models=["m00"])
    with pytest.raises(TypeError, match="target_cost must be a number"):
        calibrate_cost_weight(router, test, target_cost="10")
    with pytest.raises(ValueError, match="not in the pool"):
        calibrate_cost_weight(router, test, target_share=0.2, models=["nope"])
    with pytest.raises(ValueError, match=r"No cost weight meets .* ranges from"):
        calibrate_cost_weight(router, test, target_cost=0.0001)
    with pytest.raises(TypeError, match="min_accuracy needs scored"):
        calibrate_cost_weight(router, ["a"], min_accuracy=0.5)
    with pytest.raises(ValueError, match="cost_weights must be finite"):
        cost_quality_curve(router, test, [0.1, -1])
    evals = pd.DataFrame({"model": ["a", "b"], "query": ["q", "q"], "score": [1, 0]})
    no_costs = SingleBestRouter().fit(evals)
    with pytest.raises(ValueError, match="fitted without model costs"):
        calibrate_cost_weight(no_costs, evals, target_cost=1)


def test_a_router_shrunk_to_the_mean_scores_is_named(fitted):
    # At shrinkage 1 every query's P(correct) is its model's mean score: the
    # cost weight can only move the whole traffic, and the caller is told.
    router, test = fitted
    costs = dict(zip(router.classes_, router.model_costs_, strict=True))
    frozen = FrozenEstimator(router.embedder_)
    blind = LocusRouter(frozen, shrinkage=1.0).fit(test, model_costs=costs)
    target = float(max(costs.values()))
    with pytest.warns(
        UserWarning, match=r"shrinkage_ is 1: .* shrinkage='auto'"
    ) as record:
        result = calibrate_cost_weight(blind, test, target_cost=target)
    assert record[0].filename == __file__  # the caller's line
    assert result.mean_cost <= target
    with pytest.warns(UserWarning, match="shrinkage_ is 1"):
        curve = cost_quality_curve(blind, test)
    # One routing per model at most: whole traffic moves.
    assert len(curve.points) <= len(costs)
    plain = LocusRouter(frozen, shrinkage=None).fit(test, model_costs=costs)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        calibrate_cost_weight(plain, test, target_cost=target)


def test_sparse_evals_route_among_scored_models():
    encoder = {"q1": [1.0, 0.0], "q2": [0.0, 1.0]}
    evals = pd.DataFrame(
        {
            "model": ["big", "big", "small"],
            "query": ["q1", "q2", "q1"],
            "score": [1.0, 1.0, 0.0],
        }
    )
    router = KNNRouter(1, encoder=encoder).fit(
        evals, model_costs={"big": 4.0, "small": 1.0}
    )
    points = cost_quality_curve(router, evals).points
    # q2 has only "big": its cost stays 4 at every λ; q1 moves to "small" at λ = 1/3.
    assert points["mean_cost"].tolist() == [4.0, 2.5]
    assert points["accuracy"].tolist() == [1.0, 0.5]
    assert points["upper"].iloc[0] == pytest.approx(1 / 3)


def _served(router, queries, weight):
    """Mean cost and routed models of router.predict at ``weight``."""
    router.set_params(cost_weight=weight)
    try:
        routed = router.predict(queries)
    finally:
        router.set_params(cost_weight=0.0)
    costs = router.model_costs_[np.searchsorted(router.classes_, routed)]
    return costs.mean(), routed.tolist()


def test_sparse_evals_calibrate_the_routing_that_is_served():
    # "big" has no score on q2. KNNRouter(1) judges each model on its own
    # nearest scored query: P(big) = 1 on q1 and q2 (its q1 score), P(small)
    # = 0 on q1 and 0.5 on q2. Served (router.predict, the whole pool): q2
    # moves big -> small at λ = (1 - 0.5) / (4 - 1) = 1/6, q1 at (1 - 0) / 3
    # = 1/3, so the mean costs are 4, 2.5 and 1. Routed among the scored
    # models only, q2 stayed on "small" and λ = 0 seemed to cost 2.5, but
    # served at λ = 0 both queries go to "big": 4, over the target.
    encoder = {"q1": [1.0, 0.0], "q2": [0.0, 1.0]}
    evals = pd.DataFrame(
        {
            "model": ["big", "small", "small"],
            "query": ["q1", "q1", "q2"],
            "score": [1.0, 0.0, 0.5],
        }
    )
    router = KNNRouter(1, encoder=encoder).fit(
        evals, model_costs={"big": 4.0, "small": 1.0}
    )
    queries = ["q1", "q2"]
    result = calibrate_cost_weight(router, evals, target_cost=2.5)
    assert (result.lower, result.upper) == pytest.approx((1 / 6, 1 / 3))
    assert result.cost_weight == pytest.approx(0.25)
    cost, routed = _served(router, queries, result.cost_weight)
    assert routed == ["big", "small"]
    assert cost == result.mean_cost == 2.5
    # Both routed models have a score: (1 + 0.5) / 2.
    assert (result.accuracy, result.n_scored, result.n_queries) == (0.75, 2, 2)

    # A share cap holds when served too: at most half the calls to "big".
    result = calibrate_cost_weight(router, evals, target_share=0.5, models=["big"])
    assert result.cost_weight == pytest.approx(0.25)
    _, routed = _served(router, queries, result.cost_weight)
    assert routed.count("big") / 2 == result.share == 0.5

    # At λ = 0 q2 goes to "big", which has no score for it: accuracy is over
    # q1 alone, and says so.
    result = calibrate_cost_weight(router, evals, target_cost=4)
    assert result.cost_weight == 0.0
    assert _served(router, queries, 0.0) == (4.0, ["big", "big"])
    assert (result.mean_cost, result.accuracy, result.n_scored) == (4.0, 1.0, 1)
    # The accuracy floor reads the same accuracies (1, 0.75, 0.25 in λ):
    # the cheapest routing keeping 0.7 is the middle one.
    result = calibrate_cost_weight(router, evals, min_accuracy=0.7)
    assert (result.lower, result.upper) == pytest.approx((1 / 6, 1 / 3))
    assert (result.accuracy, result.n_scored) == (0.75, 2)

    # Plain queries give the same routing, without scores.
    result = calibrate_cost_weight(router, queries, target_cost=2.5)
    assert result.cost_weight == pytest.approx(0.25)
    assert np.isnan(result.accuracy) and result.n_scored == 0


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 20), st.integers(1, 5), st.integers(0, 2**31 - 1))
def test_intervals_over_the_whole_pool_score_the_scored_queries(
    n_queries, n_models, seed
):
    # Routed among every model with a sparse Y, as calibrate_cost_weight
    # routes: accuracy is the mean over the queries whose routed model has a
    # score, n_scored their number.
    rng = np.random.default_rng(seed)
    proba = rng.random((n_queries, n_models))
    costs = rng.random(n_models) * 10
    scored = rng.random((n_queries, n_models)) < 0.6
    Y = np.where(scored, rng.integers(0, 2, (n_queries, n_models)), np.nan)
    everyone = np.ones((n_queries, n_models), dtype=bool)
    points = _intervals(proba, costs, everyone, Y, None)
    rows = np.arange(n_queries)
    for row in points.itertuples():
        routed = route(proba - row.cost_weight * costs, everyone)
        assert row.mean_cost == pytest.approx(costs[routed].mean())
        values = Y[rows, routed]
        assert row.n_scored == np.count_nonzero(~np.isnan(values))
        if row.n_scored:
            assert row.accuracy == pytest.approx(np.nanmean(values))
        else:
            assert np.isnan(row.accuracy)


def _free_model_router():
    """Three models, one free: at a large λ every query goes to it."""
    rng = np.random.default_rng(0)
    n = 30
    queries = [f"q{i}" for i in range(n)]
    encoder = {q: rng.standard_normal(4) for q in queries}
    evals = pd.DataFrame(
        {
            "model": ["api"] * n + ["local"] * n + ["mid"] * n,
            "query": queries * 3,
            "score": np.r_[np.ones(n), rng.integers(0, 2, n), rng.integers(0, 2, n)],
        }
    )
    costs = {"api": 0.1, "local": 0.0, "mid": 0.03}
    return KNNRouter(3, encoder=encoder).fit(evals, model_costs=costs), evals


def test_a_reachable_zero_mean_cost_is_met_and_reported_as_zero():
    # Running sums of cost changes left 2.96e-17 on the last interval, and a
    # relative tolerance is 0 at a target of 0: the free routing was missed.
    router, evals = _free_model_router()
    curve = cost_quality_curve(router, evals)
    assert curve.points["mean_cost"].iloc[-1] == 0.0
    assert cost_quality_curve(router, evals, [1e3]).points["mean_cost"].iloc[0] == 0.0
    result = calibrate_cost_weight(router, evals, target_cost=0)
    assert result.mean_cost == 0.0
    assert result.cost_weight == curve.points["cost_weight"].iloc[-1]
    # Each interval's mean cost is that of its own routing.
    for row in curve.points.itertuples():
        router.set_params(cost_weight=row.cost_weight)
        routed = router.predict(np.sort(evals["query"].unique()))
        costs = router.model_costs_[np.searchsorted(router.classes_, routed)]
        assert row.mean_cost == pytest.approx(costs.mean(), abs=1e-15)
    router.set_params(cost_weight=0.0)


@pytest.mark.parametrize(
    "bad", [[True, False], np.array([True]), ["0.5"], "0.5", [0.1, "0.2"]]
)
def test_cost_weights_must_be_real_numbers(bad):
    router, evals = _free_model_router()
    with pytest.raises(TypeError, match="cost_weights must be real numbers >= 0"):
        cost_quality_curve(router, evals, bad)


def test_cost_weights_are_sorted_and_given_once():
    router, evals = _free_model_router()
    with pytest.raises(ValueError, match=r"cost_weights repeats \[0.2\]"):
        cost_quality_curve(router, evals, [0.2, 0.0, 0.2])
    curve = cost_quality_curve(router, evals, pd.Series([0.2, 0.0], index=[5, 6]))
    assert curve.points["cost_weight"].tolist() == [0.0, 0.2]
    assert cost_quality_curve(router, evals, np.int64(1)).points.shape[0] == 1


def test_pareto_is_the_standard_frontier():
    # Off the frontier: a point another one matches on one axis and beats on
    # the other (cost <= and accuracy >=, one strict); identical points do
    # not dominate each other.
    cost = np.array([11.0, 6.0, 1.0, 6.0, 3.0])
    accuracy = np.array([1.0, 1.0, 0.5, 1.0, 0.5])
    assert _pareto(cost, accuracy).tolist() == [False, True, True, True, False]
    encoder = {"q1": [1.0, 0.0], "q2": [0.0, 1.0]}
    evals = {
        "model": ["big", "big", "small", "small"],
        "query": ["q1", "q2", "q1", "q2"],
        "score": [1, 1, 1, 0],
    }
    router = KNNRouter(1, encoder=encoder).fit(
        evals, model_costs={"big": 11.0, "small": 1.0}
    )
    # The docstring's example: 11.0 buys no accuracy over 6.0.
    points = cost_quality_curve(router, evals).points
    assert points["pareto"].tolist() == [False, True, True]
    # Two weights that route alike give the same point, on the frontier twice.
    points = cost_quality_curve(router, evals, [0.01, 0.02, 1.0]).points
    assert points["mean_cost"].tolist() == [6.0, 6.0, 1.0]
    assert points["pareto"].tolist() == [True, True, True]


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 30),
    st.integers(1, 6),
    st.integers(0, 2**31 - 1),
    st.sampled_from(["decimal", "float32"]),
)
def test_every_point_routes_as_reported_at_its_cost_weight(
    n_queries, n_models, seed, kind
):
    # Decimal scores and costs (0.1 steps, or P(correct) from a float32
    # network) put crossings that are equal on paper a few ulps apart: the
    # interval between them routed at no λ, and its cost_weight, rounded onto
    # a crossing, routed otherwise than reported.
    rng = np.random.default_rng(seed)
    if kind == "decimal":
        proba = rng.choice(np.arange(11) / 10, (n_queries, n_models))
    else:
        proba = rng.random((n_queries, n_models)).astype(np.float32)
        proba = proba.astype(np.float64)
    costs = rng.choice([0.0, 0.1, 0.3, 0.7, 1.3], n_models)
    candidates = rng.random((n_queries, n_models)) < 0.8
    candidates[np.arange(n_queries), rng.integers(0, n_models, n_queries)] = True
    Y = np.where(candidates, rng.integers(0, 2, (n_queries, n_models)), np.nan)
    points = _intervals(proba, costs, candidates, Y, None)
    rows = np.arange(n_queries)
    for row in points.itertuples():
        routed = route(proba - row.cost_weight * costs, candidates)
        assert row.mean_cost == pytest.approx(costs[routed].mean())
        assert row.accuracy == pytest.approx(Y[rows, routed].mean())
        if row.Index:  # past λ = 0, strictly inside its interval
            assert row.lower < row.cost_weight < row.upper


def test_crossings_equal_on_paper_are_one_step():
    # q0's lines for m0, m2 and m1 all cross at λ = 5/6 on paper; in floats
    # the crossings came out 1 ulp apart, and calibrate_cost_weight returned
    # λ = 0.8333333333333333 (on a crossing) for a mean cost of 0.4 that the
    # router, routing at it, does not reach (0.7).
    encoder = {"q0": [1.0, 0.0], "q1": [0.0, 1.0]}
    scores = {"q0": [1.0, 0.0, 0.5], "q1": [0.0, 0.1, 0.5]}
    costs = {"m0": 1.3, "m1": 0.1, "m2": 0.7}
    evals = pd.DataFrame(
        [(m, q, scores[q][j]) for q in scores for j, m in enumerate(costs)],
        columns=["model", "query", "score"],
    )
    router = KNNRouter(1, encoder=encoder).fit(evals, model_costs=costs)
    points = cost_quality_curve(router, evals).points
    assert points["mean_cost"].tolist() == pytest.approx([1.0, 0.7, 0.1])
    result = calibrate_cost_weight(router, evals, target_cost=0.4)
    assert result.lower < result.cost_weight < result.upper
    router.set_params(cost_weight=result.cost_weight)
    routed = router.predict(["q0", "q1"])
    assert np.mean([costs[m] for m in routed]) == pytest.approx(result.mean_cost)
    assert result.mean_cost <= 0.4


def _three_cost_router():
    encoder = {"q1": [1.0, 0.0], "q2": [0.0, 1.0]}
    evals = {
        "model": ["big"] * 2 + ["mid"] * 2 + ["small"] * 2,
        "query": ["q1", "q2"] * 3,
        "score": [1, 1, 0, 0, 1, 0],
    }
    costs = {"big": 11.0, "mid": 5.0, "small": 2.0}
    return KNNRouter(1, encoder=encoder).fit(evals, model_costs=costs), evals


def test_curve_at_an_overflowing_cost_weight_routes_as_score():
    # At λ = 1e308 every λ·cost overflows to -inf: score() routes each query
    # to the cheapest model, the curve routed both to the first ("big").
    router, evals = _three_cost_router()
    point = cost_quality_curve(router, evals, [1e308]).points.iloc[0]
    router.set_params(cost_weight=1e308)
    assert router.predict(["q1", "q2"]).tolist() == ["small", "small"]
    assert point["accuracy"] == router.score(evals) == 0.5
    assert point["mean_cost"] == 2.0


class _CostsAsGiven(SingleBestRouter):
    """A router whose model_costs_ are whatever it was given, unchecked."""

    def __init__(self, costs=None):
        super().__init__()
        self.costs = costs

    def fit(self, evals, model_costs=None):
        super().fit(evals)
        self.model_costs_ = np.asarray(self.costs, dtype=object)
        return self


@pytest.mark.parametrize(
    ("costs", "message"),
    [
        ([np.nan, 1.0], r"must be finite and >= 0; got \[nan\] for \['big'\]"),
        ([np.inf, 1.0], r"must be finite and >= 0; got \[inf\] for \['big'\]"),
        ([5.0, -1.0], r"must be finite and >= 0; got \[-1.0\] for \['small'\]"),
        ([5.0], r"must have shape \(n_models,\) = \(2,\), .* got shape \(1,\)"),
    ],
)
def test_a_routers_model_costs_are_checked(costs, message):
    # NaN, inf and negative costs came out as NaN, inf and negative mean costs.
    evals = {"model": ["big"] * 2 + ["small"] * 2, "query": ["q1", "q2"] * 2}
    evals["score"] = [1, 1, 1, 0]
    router = _CostsAsGiven(costs).fit(evals)
    with pytest.raises(ValueError, match=r"^_CostsAsGiven\.model_costs_ " + message):
        cost_quality_curve(router, evals)
    with pytest.raises(ValueError, match=r"^_CostsAsGiven\.model_costs_ " + message):
        calibrate_cost_weight(router, evals, target_cost=1)


def test_cost_cv_errors_say_none_means_no_cross_validation():
    router, evals = _three_cost_router()
    message = r"^cv must be None \(no cross-validation: route by router.predict_p"
    for function, kwargs in [
        (calibrate_cost_weight, {"target_cost": 6}),
        (cost_quality_curve, {}),
    ]:
        for bad in ("x", 2.5, True):
            with pytest.raises(TypeError, match=message + r".*; got "):
                function(router, evals, cv=bad, **kwargs)
        with pytest.raises(TypeError, match=message + r".*; got the class KFold"):
            function(router, evals, cv=KFold, **kwargs)


def test_calibrate_names_the_router_and_reads_models_once():
    router, evals = _three_cost_router()
    with pytest.raises(TypeError, match=r"^router must be a fitted router .* None"):
        calibrate_cost_weight(None, evals, target_cost=6)
    # A generator was read by the check and shown as [] in the message.
    models = (m for m in ["big", "mid", "small"])
    calls = r"share of calls to \['big', 'mid', 'small'\] 0.5 on"
    with pytest.raises(ValueError, match=calls):
        calibrate_cost_weight(router, evals, target_share=0.5, models=models)


def _two_cost_router(small_scores):
    """KNNRouter(1) on two queries: "big" (cost 11) scores 1 on both and
    "small" (cost 1) ``small_scores``; its P(correct) are these scores."""
    encoder = {"q1": [1.0, 0.0], "q2": [0.0, 1.0]}
    evals = {
        "model": ["big", "big", "small", "small"],
        "query": ["q1", "q2", "q1", "q2"],
        "score": [1, 1, *small_scores],
    }
    router = KNNRouter(1, encoder=encoder).fit(
        evals, model_costs={"big": 11.0, "small": 1.0}
    )
    return router, evals


def test_target_cost_slack_ignores_models_never_called():
    """The round-off allowed on a mean cost is that of the mean itself: a
    model priced at 1e12 (to keep it out) and never routed to once widened
    it to 1e-3, so a mean cost of 1.0005 passed a target of 1.0."""
    encoder = {"q1": [1.0, 0.0], "q2": [0.0, 1.0]}
    scores = {"mid": [1, 1], "cheap": [0, 0], "big": [0, 0]}
    costs = {"mid": 1.0005, "cheap": 0.0, "big": 1e12}
    evals = pd.DataFrame(
        [
            (m, q, s)
            for m, row in scores.items()
            for q, s in zip(("q1", "q2"), row, strict=True)
        ],
        columns=["model", "query", "score"],
    )
    router = KNNRouter(1, encoder=encoder).fit(evals, model_costs=costs)
    result = calibrate_cost_weight(router, evals, target_cost=1.0)
    # mid (P 1, cost 1.0005) against cheap (P 0, cost 0): they cross at
    # lambda = 1 / 1.0005; under it every query goes to mid, over the target.
    assert result.mean_cost == 0.0
    assert result.lower == pytest.approx(1 / 1.0005)
    small = evals[evals["model"] != "big"]
    alone = calibrate_cost_weight(
        KNNRouter(1, encoder=encoder).fit(
            small, model_costs={m: c for m, c in costs.items() if m != "big"}
        ),
        small,
        target_cost=1.0,
    )
    assert (result.cost_weight, result.mean_cost) == (
        alone.cost_weight,
        alone.mean_cost,
    )


def test_min_accuracy_in_the_first_interval_is_its_midpoint():
    # small scores 0 on both queries: big's line 1 - 11λ crosses small's
    # 0 - λ at λ = 1/10 on both, so accuracy 1 holds on [0, 0.1). The
    # cheapest λ keeping it was reported as λ = 0, the end with no pressure
    # on cost, not the interval's midpoint 0.05 as for the other intervals.
    router, evals = _two_cost_router([0, 0])
    result = calibrate_cost_weight(router, evals, min_accuracy=1.0)
    assert (result.lower, result.upper) == (0.0, pytest.approx(0.1))
    assert result.cost_weight == pytest.approx(0.05)
    assert (result.mean_cost, result.accuracy) == (11.0, 1.0)
    # The λ returned routes the queries as reported.
    router.set_params(cost_weight=result.cost_weight)
    assert router.predict(["q1", "q2"]).tolist() == ["big", "big"]
    assert router.score(pd.DataFrame(evals)) == result.accuracy
    # Cost and share targets keep λ = 0, the smallest λ that meets them, and
    # the curve's first point stays at the default λ = 0.
    assert calibrate_cost_weight(router, evals, target_cost=11).cost_weight == 0.0
    share = calibrate_cost_weight(router, evals, target_share=1, models=["big"])
    assert share.cost_weight == 0.0
    assert cost_quality_curve(router, evals).points["cost_weight"].iloc[0] == 0.0


def test_queries_as_a_mapping_agree_with_a_dataframe():
    # A mapping with only a query column was read as evaluations and refused
    # as missing 'model' and 'score', while the same DataFrame was queries.
    router, _ = _two_cost_router([1, 0])
    queries = ["q1", "q2"]
    for target in ({"target_cost": 6}, {"target_share": 0.5, "models": ["big"]}):
        as_frame = calibrate_cost_weight(
            router, pd.DataFrame({"query": queries}), **target
        )
        as_mapping = calibrate_cost_weight(router, {"query": queries}, **target)
        # q1 ties at λ = 0 (both score 1) and goes to small just above it;
        # q2 crosses at 1/10: cost 6 and share 0.5 hold on (0, 0.1), whose
        # midpoint is 0.05 (the docstring's example).
        assert pd.Series(as_mapping).equals(pd.Series(as_frame))
        assert as_mapping.cost_weight == pytest.approx(0.05)
        assert (as_mapping.mean_cost, as_mapping.n_queries) == (6.0, 2)
        assert np.isnan(as_mapping.accuracy)
    # The queries are checked as a DataFrame's query column is.
    with pytest.raises(TypeError, match=r"evals\['query'\] must be a sequence"):
        calibrate_cost_weight(router, {"query": "q1"}, target_cost=6)
