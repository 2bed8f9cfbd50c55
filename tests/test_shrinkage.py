"""LocusRouter's shrinkage safeguard: the blend, its cross-fitted choice,
onboarding, persistence and validation."""

import warnings

import numpy as np
import pandas as pd
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from sklearn.frozen import FrozenEstimator
from sklearn.model_selection import KFold

from locus_sklearn import LocusRouter, check_evals
from locus_sklearn._base import route_by_utility
from locus_sklearn._files import read_file, write_file
from locus_sklearn._shrinkage import (
    SHRINKAGE_GRID,
    choose_shrinkage,
    cross_fitted_predictions,
    mean_scores,
    shrink,
)

unit = st.floats(0, 1, allow_nan=False)


@settings(max_examples=50, deadline=None)
@given(
    proba=arrays(np.float32, (4, 3), elements=st.floats(0, 1, width=32)),
    means=arrays(np.float64, (3,), elements=unit),
    s=unit,
)
def test_shrink_stays_between_the_prediction_and_the_mean(proba, means, s):
    out = shrink(proba, means, s)
    assert out.dtype == proba.dtype
    low = np.minimum(proba, means[None, :]) - 1e-6
    high = np.maximum(proba, means[None, :]) + 1e-6
    assert ((out >= low) & (out <= high)).all()


def test_shrink_ends():
    proba = np.array([[0.9, 0.1], [0.2, 0.7]], dtype=np.float32)
    means = np.array([0.3, 0.6])
    assert shrink(proba, means, 0.0) is proba
    np.testing.assert_allclose(shrink(proba, means, 1.0), [[0.3, 0.6], [0.3, 0.6]])
    np.testing.assert_allclose(
        shrink(proba, means, 0.25), [[0.75, 0.225], [0.225, 0.675]]
    )


def test_mean_scores_by_hand():
    table = check_evals(
        {"model": ["b", "a", "a", "b", "b"], "query": ["q1", "q1", "q2", "q2", "q3"],
         "score": [1.0, 0.0, 1.0, 0.5, 0.0]}
    )  # fmt: skip
    np.testing.assert_allclose(mean_scores(table), [0.5, 0.5])


class _KnownProba:
    """An embedder whose P(correct) is a fixed matrix over (query id, model):
    the query encodings are one-hot query ids. Enough to check the choice."""

    def __init__(self, proba):
        self.proba = proba

    def _transform_encoded(self, table, X_query):
        return np.zeros((table.n_models, 1), dtype=np.float32)

    def _predict_proba_encoded(self, embeddings, X_query, evaluations=None):
        _, models_table = evaluations
        columns = [int(m[1:]) for m in models_table.models]
        return self.proba[X_query.argmax(1)][:, columns]


def _two_model_pool(n_queries=40):
    # m0 is right on 3 of 4 queries, m1 on the others: m0 is the better
    # model, m1 the better choice wherever m0 fails.
    rows = []
    for q in range(n_queries):
        rows.append(("m0", f"q{q:03d}", float(q % 4 != 0)))
        rows.append(("m1", f"q{q:03d}", float(q % 4 == 0)))
    table = check_evals(pd.DataFrame(rows, columns=["model", "query", "score"]))
    X = np.eye(n_queries, dtype=np.float32)
    truth = table.to_dense()
    return table, X, truth


def test_choose_shrinkage_keeps_an_informative_router():
    table, X, truth = _two_model_pool()
    # Probabilities that know each query (1 for the right model, 0 for the
    # other). With mean scores a (m0, about 0.75 in each fold) and 1 - a
    # (m1), m1 keeps the queries m0 fails while 1 - s + s(1 - a) > s·a, that
    # is s < 1 / (2a), about 0.67: 0, 0.25 and 0.5 route perfectly, 0.75 and
    # 1 send everything to m0 (0.75); ties go to the larger value.
    s, scores = choose_shrinkage(_KnownProba(truth), table, X)
    assert set(scores) == set(SHRINKAGE_GRID)
    assert [scores[v] for v in SHRINKAGE_GRID] == [1.0, 1.0, 1.0, 0.75, 0.75]
    assert s == 0.5


def test_choose_shrinkage_falls_back_on_the_best_model():
    table, X, truth = _two_model_pool()
    # Probabilities that are wrong on every query: only s = 1 routes well.
    s, scores = choose_shrinkage(_KnownProba(1 - truth), table, X)
    assert scores[0.0] == 0.0 and scores[1.0] == 0.75
    assert s == 1.0


def test_choose_shrinkage_judges_the_routing_among_all_models():
    # Sparse: m0 answered q0-q5 (all right), m1 q2-q7 (right on q6, q7 only).
    # Probabilities that always prefer m1 route every query to it, so at
    # s = 0 the routing is judged on m1's six answers: 2 / 6. (Routing only
    # among the models that answered would judge a different policy: m0 on
    # q0, q1, m1 elsewhere, 4 / 8.) From s = 0.75 every query goes to m0,
    # the better model on average (m1's mean outside any fold is <= 0.5):
    # 6 / 6.
    rows = [("m0", f"q{q}", 1.0) for q in range(6)]
    rows += [("m1", f"q{q}", float(q >= 6)) for q in range(2, 8)]
    table = check_evals(pd.DataFrame(rows, columns=["model", "query", "score"]))
    proba = np.tile([0.0, 1.0], (8, 1))
    s, scores = choose_shrinkage(_KnownProba(proba), table, np.eye(8))
    expected = [2 / 6, 2 / 6, 2 / 6, 1.0, 1.0]
    np.testing.assert_allclose([scores[v] for v in SHRINKAGE_GRID], expected)
    assert s == 1.0


def test_choose_shrinkage_judges_the_cost_aware_routing():
    table, X, truth = _two_model_pool()
    # m0 costs 0.6, m1 nothing; at cost weight 0.5 m0 pays 0.3. Knowing
    # probabilities route m0's right queries to m0 (1 - 0.3 each) and m1's
    # to m1 (1 each) for every s < 1: (30 * 0.7 + 10 * 1) / 40 = 0.775. At
    # s = 0.75 that holds only with the cost in the routing (m0 0.75a - 0.3
    # against m1 0.25 + 0.75(1 - a) on m1's queries; without the cost m0
    # wins them: accuracy 0.75 above). At s = 1 every query goes to m0:
    # (30 * 0.7 - 10 * 0.3) / 40 = 0.45.
    s, scores = choose_shrinkage(
        _KnownProba(truth), table, X, model_costs=np.array([0.6, 0.0]),
        cost_weight=0.5,
    )  # fmt: skip
    expected = [0.775, 0.775, 0.775, 0.775, 0.45]
    np.testing.assert_allclose([scores[v] for v in SHRINKAGE_GRID], expected)
    assert s == 0.75
    # At cost weight 0 the costs change nothing: plain accuracy.
    at_zero = choose_shrinkage(
        _KnownProba(truth), table, X, model_costs=np.array([0.6, 0.0])
    )
    assert at_zero == choose_shrinkage(_KnownProba(truth), table, X)


def test_choose_shrinkage_without_shared_queries():
    # Each query has one answer: held out, its model has no other row to be
    # embedded from, so nothing can be judged and nothing is shrunk.
    table = check_evals(
        {"model": ["m0", "m1"], "query": ["q1", "q2"], "score": [1.0, 0.0]}
    )
    assert choose_shrinkage(_KnownProba(np.eye(2)), table, np.eye(2)) == (0.0, {})


def test_choose_shrinkage_leaves_out_only_the_values_never_judged():
    # m0 answered all 10 queries (8 right); m1 and m2 one each (right):
    # q000 and q001. Leave-one-out folds: m0's mean outside a fold is 7/9 or
    # 8/9, a thin model's 1. At s = 1 every fold goes to a thin model that
    # did not answer the fold's query (m1 first on ties), so s = 1 is never
    # judged. Below it m0 wins everywhere (P 0.9 against 0; at s = 0.75,
    # 0.225 + 0.75 · 7/9 = 0.808 > 0.75) and scores 8/10 at every value:
    # the tie goes to the largest value judged.
    q = [f"q{i:03d}" for i in range(10)]
    table = check_evals(
        {"model": ["m0"] * 10 + ["m1", "m2"], "query": q + q[:2],
         "score": [0.0, 1, 0, 1, 1, 1, 1, 1, 1, 1] + [1.0, 1.0]}
    )  # fmt: skip
    proba = np.zeros((10, 3), dtype=np.float32)
    proba[:, 0] = 0.9
    s, scores = choose_shrinkage(_KnownProba(proba), table, np.eye(10), n_folds=10)
    assert scores == pytest.approx({0.0: 0.8, 0.25: 0.8, 0.5: 0.8, 0.75: 0.8})
    assert 1.0 not in scores
    assert s == 0.75


def test_cross_fitted_predictions_hold_each_query_out_once():
    table, X, truth = _two_model_pool()
    inside = []

    def fit_fold(evals):  # what the refitted check trains each fold on
        inside.append(set(evals["query"]))
        return _KnownProba(truth)

    folds = list(cross_fitted_predictions(None, table, X, 5, fit_fold=fit_fold))
    assert len(folds) == len(inside) == 5
    held = [set(table.queries) - q for q in inside]
    assert sum(map(len, held)) == table.n_queries  # the folds partition the queries
    assert set().union(*held) == set(table.queries)
    for (y, proba, means, columns, rows), queries in zip(folds, held, strict=True):
        np.testing.assert_array_equal(columns, [0, 1])  # both models, in order
        np.testing.assert_array_equal(
            rows, np.searchsorted(table.queries, sorted(queries))
        )
        np.testing.assert_array_equal(y, truth[rows])  # the fold's own scores
        np.testing.assert_array_equal(proba, truth[rows])  # from the fold's embedder
        outside = np.setdiff1d(np.arange(table.n_queries), rows)
        np.testing.assert_allclose(means, truth[outside].mean(axis=0))


@pytest.fixture(scope="module")
def frozen(pool, tiny_embedder):
    return FrozenEstimator(tiny_embedder(pool.encodings).fit(pool.evals))


def test_router_predict_proba_is_the_blend(frozen, pool, query_texts, monkeypatch):
    plain = LocusRouter(frozen, shrinkage=None).fit(pool.evals)
    assert plain.shrinkage_ == 0.0 and plain.shrinkage_scores_ == {}
    means = pool.evals.groupby("model")["score"].mean().to_numpy()
    np.testing.assert_allclose(plain.model_mean_scores_, means)
    half = LocusRouter(frozen, shrinkage=0.5).fit(pool.evals)
    expected = 0.5 * plain.predict_proba(query_texts[:9]) + 0.5 * means
    np.testing.assert_allclose(half.predict_proba(query_texts[:9]), expected, rtol=1e-6)
    full = LocusRouter(frozen, shrinkage=1.0).fit(pool.evals)
    # At 1 the blend is the mean scores alone (the network is not called).
    dtype = plain.predict_proba(query_texts[:1]).dtype
    monkeypatch.setattr(full._fitted_locus(), "_predict_proba_encoded", None)
    proba = full.predict_proba(query_texts[:9])
    assert proba.dtype == dtype == np.float32
    np.testing.assert_array_equal(proba, np.tile(means.astype(np.float32), (9, 1)))
    best = plain.classes_[means.argmax()]
    assert set(full.predict(query_texts[:30])) == {best}


def test_router_auto_records_its_choice(frozen, pool):
    router = LocusRouter(frozen).fit(pool.evals)  # "auto" is the default
    assert router.shrinkage == "auto"
    assert set(router.shrinkage_scores_) == set(SHRINKAGE_GRID)
    best = max(router.shrinkage_scores_.values())
    assert router.shrinkage_ == max(
        s for s, v in router.shrinkage_scores_.items() if v >= best - 1e-12
    )


def test_router_with_costs_never_chooses_one(frozen, pool):
    # Each model's scores shuffled over its queries: its mean is kept, what
    # it answers where is noise, and the accuracy criterion chooses 1 (every
    # query to the best model). With costs the cost weight needs per-query
    # P(correct), so "auto" chooses among the values below 1, judged as
    # without costs at cost weight 0.
    evals = pool.evals.copy()
    rng = np.random.default_rng(0)
    evals["score"] = evals.groupby("model")["score"].transform(
        lambda score: rng.permutation(score.to_numpy())
    )
    without = LocusRouter(frozen).fit(evals)
    assert without.shrinkage_ == 1.0
    costs = dict.fromkeys(without.classes_, 1.0)
    router = LocusRouter(frozen).fit(evals, model_costs=costs)
    below_one = {s: v for s, v in without.shrinkage_scores_.items() if s < 1}
    assert router.shrinkage_scores_ == below_one
    best = max(below_one.values())
    assert router.shrinkage_ == max(s for s, v in below_one.items() if v >= best)
    # The cost weight of fit is the one the choice is judged at.
    weighted = LocusRouter(frozen, cost_weight=0.5).fit(evals, model_costs=costs)
    assert set(weighted.shrinkage_scores_) == set(below_one)
    assert np.allclose(  # equal costs: every score moves by 0.5
        [weighted.shrinkage_scores_[s] + 0.5 for s in below_one],
        list(below_one.values()),
    )


def test_onboarding_keeps_mean_scores_aligned(frozen, pool, rows_of):
    names = sorted(pool.evals["model"].unique())
    router = LocusRouter(frozen, shrinkage=0.5).fit(rows_of(pool.evals, names[1:]))
    router.add_models(rows_of(pool.evals, names[:1]))
    means = pool.evals.groupby("model")["score"].mean()
    np.testing.assert_allclose(router.model_mean_scores_, means[router.classes_])
    router.remove_models(names[2:4])
    np.testing.assert_allclose(router.model_mean_scores_, means[router.classes_])


def test_save_load_keeps_the_shrinkage(frozen, pool, query_texts, tmp_path):
    router = LocusRouter(frozen, shrinkage=0.25).fit(pool.evals)
    path = tmp_path / "router.locus"
    router.save(path)
    loaded = LocusRouter.load(path, encoder=pool.encodings)
    assert loaded.shrinkage == 0.25 and loaded.shrinkage_ == 0.25
    np.testing.assert_array_equal(loaded.model_mean_scores_, router.model_mean_scores_)
    np.testing.assert_allclose(
        loaded.predict_proba(query_texts[:5]), router.predict_proba(query_texts[:5])
    )
    # A file of an earlier version (no shrinkage fields) loads unshrunk, its
    # mean scores read from the stored evaluations.
    metadata, tensors, _ = read_file(path, "LocusRouter")
    for key in ("shrinkage", "shrinkage_fitted"):
        metadata.pop(key)
    tensors.pop("pool.mean_scores")
    old = tmp_path / "old.locus"
    write_file(old, metadata, tensors)
    loaded = LocusRouter.load(old, encoder=pool.encodings)
    assert loaded.shrinkage is None and loaded.shrinkage_ == 0.0
    np.testing.assert_allclose(loaded.model_mean_scores_, router.model_mean_scores_)
    # A damaged value is refused by name.
    metadata["shrinkage_fitted"] = 1.5
    tensors["pool.mean_scores"] = torch.from_numpy(router.model_mean_scores_)
    write_file(old, metadata, tensors)
    with pytest.raises(ValueError, match="'shrinkage_fitted' is outside"):
        LocusRouter.load(old, encoder=pool.encodings)


@pytest.mark.parametrize("bad", [1.5, -0.1, "always", True])
def test_bad_shrinkage_is_named(frozen, pool, bad):
    with pytest.raises((ValueError, TypeError), match="shrinkage"):
        LocusRouter(frozen, shrinkage=bad).fit(pool.evals)


def test_choose_shrinkage_judges_every_shuffle_of_the_folds():
    # The two-model pool with knowing probabilities, judged at s = 0.66 only.
    # In a fold holding k of m0's 30 right queries (of 8), m0's mean outside
    # is a = (30 - k) / 32, and m1 keeps m0's failures while 0.34 + 0.66(1 -
    # a) > 0.66 a, i.e. a < 1 / 1.32, k >= 6: the fold routes perfectly (8
    # right), otherwise everything goes to m0 (k right). Every query is
    # judged, so each shuffle's accuracy is over 40 queries and n shuffles
    # average them.
    table, X, truth = _two_model_pool()
    m0_right = np.array([int(q[1:]) % 4 != 0 for q in table.queries])

    def by_hand(seed):
        folds = KFold(5, shuffle=True, random_state=seed).split(table.queries)
        right = 0
        for _, held in folds:
            k = int(m0_right[held].sum())
            right += len(held) if k >= 6 else k
        return right / table.n_queries

    per_shuffle = [by_hand(seed) for seed in range(4)]
    assert len(set(per_shuffle)) > 1  # the shuffles disagree here
    for n_repeats in (1, 2, 4):
        s, scores = choose_shrinkage(
            _KnownProba(truth), table, X, grid=(0.66,), n_repeats=n_repeats
        )
        assert s == 0.66
        assert scores[0.66] == pytest.approx(np.mean(per_shuffle[:n_repeats]))
    # One shuffle is the estimator's single draw.
    assert choose_shrinkage(_KnownProba(truth), table, X, n_repeats=1) == (
        choose_shrinkage(_KnownProba(truth), table, X)
    )


def test_router_passes_its_repeats_to_the_choice(frozen, pool):
    router = LocusRouter(frozen, shrinkage_repeats=2).fit(pool.evals)
    table = check_evals(pool.evals)
    X = router._encode(table.queries)
    expected = choose_shrinkage(router._fitted_locus(), table, X, n_repeats=2)
    assert (router.shrinkage_, router.shrinkage_scores_) == expected
    single = LocusRouter(frozen).fit(pool.evals)
    assert single.shrinkage_scores_ != router.shrinkage_scores_


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2", True])
def test_bad_shrinkage_repeats_is_named(frozen, pool, bad):
    with pytest.raises((ValueError, TypeError), match="shrinkage_repeats"):
        LocusRouter(frozen, shrinkage_repeats=bad).fit(pool.evals)


def test_save_load_keeps_the_repeats(frozen, pool, tmp_path):
    router = LocusRouter(frozen, shrinkage=0.25, shrinkage_repeats=3).fit(pool.evals)
    path = tmp_path / "router.locus"
    router.save(path)
    assert LocusRouter.load(path, encoder=pool.encodings).shrinkage_repeats == 3
    metadata, tensors, _ = read_file(path, "LocusRouter")
    metadata.pop("shrinkage_repeats")  # a file of an earlier version
    write_file(path, metadata, tensors)
    assert LocusRouter.load(path, encoder=pool.encodings).shrinkage_repeats == 1
    for damaged in (0, 2.0, True, "3"):
        metadata["shrinkage_repeats"] = damaged
        write_file(path, metadata, tensors)
        with pytest.raises(
            ValueError,
            match="header field 'shrinkage_repeats' (must be of type int|is under 1)",
        ):
            LocusRouter.load(path, encoder=pool.encodings)


def test_choose_shrinkage_at_a_cost_weight_that_overflows():
    # 1e308 * cost overflows to inf for both models: every utility is -inf,
    # so whichever model a query goes to (predict: the cheapest, m0) its
    # judged utility is -inf for every value, and nothing can be judged. The
    # overflow, which routing_utility allows, raised a RuntimeWarning.
    table, X, truth = _two_model_pool()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        choice = choose_shrinkage(
            _KnownProba(truth), table, X, model_costs=np.array([2.0, 3.0]),
            cost_weight=1e308,
        )  # fmt: skip
    assert choice == (0.0, {})
    routed = route_by_utility(truth, np.array([2.0, 3.0]), 1e308)
    assert (routed == 0).all()
    # With one model whose penalty stays finite, every query goes to it.
    s, scores = choose_shrinkage(
        _KnownProba(truth), table, X, model_costs=np.array([0.0, 3.0]),
        cost_weight=1e308,
    )  # fmt: skip
    assert set(scores.values()) == {0.75} and s == 1.0
