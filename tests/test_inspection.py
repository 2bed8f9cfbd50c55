"""The inspection toolkit on synthetic pools with known families."""

import re
import sys
import warnings

import numpy as np
import pandas as pd
import pytest
from scipy.cluster.hierarchy import fcluster
from sklearn.base import BaseEstimator
from sklearn.exceptions import NotFittedError
from sklearn.metrics import adjusted_rand_score, pairwise_distances

from locus_sklearn import (
    BudgetGreedySelector,
    FewEvaluationsWarning,
    KCenterSelector,
    LocusEmbedder,
    LocusRouter,
)
from locus_sklearn.baselines import KNNRouter, SingleBestRouter
from locus_sklearn.datasets import make_model_pool
from locus_sklearn.inspection import (
    calibrate_cost_weight,
    calibrate_fingerprint_threshold,
    cost_quality_curve,
    distance_disagreement_correlation,
    embed_profile,
    embedding_dimensionality,
    fallback_order,
    fallback_routing_accuracy,
    match_models,
    model_linkage,
    nearest_models,
    neighbor_agreement,
    plot_model_dendrogram,
    plot_model_map,
    plot_portfolio_curve,
    portfolio_curve,
    profile_recall_at_k,
    score_disagreement,
    task_profiles,
)
from locus_sklearn.inspection._common import disagreement, match_threshold
from locus_sklearn.metrics import routing_accuracy

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    import matplotlib.pyplot as plt

    plt.close("all")


@pytest.fixture(scope="module")
def pool():
    return make_model_pool(
        n_models=16,
        n_queries=240,
        n_tasks=4,
        n_families=4,
        evals_per_model="all",
        random_state=0,
    )


@pytest.fixture(scope="module")
def family_embeddings(pool):
    """Embeddings = a random centre per family + small noise, in sorted-name order."""
    rng = np.random.default_rng(0)
    families = pool.models["family"].to_numpy()
    _, family = np.unique(families, return_inverse=True)
    centres = 3.0 * rng.standard_normal((family.max() + 1, 16))
    Z = centres[family] + 0.05 * rng.standard_normal((len(family), 16))
    return Z, pool.models["model"].to_numpy(dtype=object), family


@pytest.fixture(scope="module")
def router(pool, tiny_embedder):
    embedder = tiny_embedder(
        pool.encodings, max_epochs=1, episodes_per_epoch=16, validation_fraction=0
    )
    return LocusRouter(embedder).fit(pool.evals, model_costs=pool.n_params)


class TaskAccuracyEmbedder:
    """A stand-in embedder with known geometry: a model's per-task mean score."""

    def __init__(self, query_task):
        self.query_task = query_task
        self.tasks = sorted(set(query_task.values()))

    def transform(self, evals):
        frame = pd.DataFrame(evals)
        frame["task"] = frame["query"].map(self.query_task)
        means = frame.groupby(["model", "task"])["score"].mean().unstack()
        return means.reindex(columns=self.tasks).fillna(0.5).to_numpy()


@pytest.fixture(scope="module")
def task_embedder(pool):
    return TaskAccuracyEmbedder(
        dict(zip(pool.queries["query"], pool.queries["task"], strict=True))
    )


# ---------------------------------------------------------------- neighbors


def test_same_family_models_are_nearest(family_embeddings):
    Z, names, family = family_embeddings
    per_family = np.bincount(family).min()
    for metric in ("cosine", "euclidean"):
        for i, name in enumerate(names):
            neighbors = nearest_models(
                Z, name, k=per_family - 1, metric=metric, names=names
            )
            assert list(neighbors.index) == list(range(1, per_family))
            assert neighbors["distance"].is_monotonic_increasing
            assert set(family[np.searchsorted(names, neighbors["model"])]) == {
                family[i]
            }
        order = fallback_order(Z, metric=metric, names=names)
        assert order.shape == (len(Z), len(Z) - 1)
        first = nearest_models(Z, names[0], k=1, metric=metric, names=names)
        assert order.iloc[0, 0] == first["model"].iloc[0]


def test_nearest_models_of_a_point_and_errors(family_embeddings, router):
    Z, names, _ = family_embeddings
    result = nearest_models(Z, Z[3] + 1e-3, k=2, names=names)
    assert result["model"].iloc[0] == names[3]
    assert nearest_models(Z, 3, k=1)["model"].iloc[0] != 3  # row index, self left out
    with pytest.raises(ValueError, match="model='nope' is not a model of the pool"):
        nearest_models(Z, "nope", names=names)
    with pytest.raises(ValueError, match=r"k=16 should be in \[1, 15\]"):
        nearest_models(Z, names[0], k=16, names=names)
    with pytest.raises(ValueError, match="names must be None"):
        nearest_models(router, router.classes_[0], names=router.classes_)
    with pytest.raises(ValueError, match="metric must be one of"):
        nearest_models(Z, names[0], metric="manhattan", names=names)
    result = nearest_models(router, router.classes_[0], k=3)
    assert result.shape == (3, 2) and router.classes_[0] not in set(result["model"])


def test_neighbor_errors_name_the_parameter():
    Z = [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]
    with pytest.raises(
        TypeError, match=r"k must be an int, the number of neighbors; got 2.0"
    ):
        nearest_models(Z, 0, k=2.0)
    with pytest.raises(ValueError, match="k=1 cannot be met: the pool has a single"):
        nearest_models([[1.0, 0.0]], 0, k=1)
    valid = r"metric must be one of \['cosine', 'euclidean', 'precomputed'\]"
    with pytest.raises(ValueError, match=valid):
        nearest_models(Z, 0, k=1, metric="manhattan")
    with pytest.raises(ValueError, match=r"reference_names has duplicates: \['a'\]"):
        match_models([[1.0, 0]], Z[:2], threshold=0.1, reference_names=["a", "a"])
    with pytest.raises(ValueError, match=r"^names has duplicates: \['b'\]"):
        match_models(Z[:2], Z[:2], threshold=0.1, names=["b", "b"])


def test_nearest_models_takes_one_int_k_and_a_model_name_or_row():
    Z = np.array([[0.0], [1.0], [3.0], [6.0]])
    # A list of two failed to unpack, bare; a list of one passed unnoticed.
    for k in ([1, 2], [2], (2,), np.array([2])):
        with pytest.raises(TypeError, match=r"k must be an int, the number of neighb"):
            nearest_models(Z, 1, k=k, metric="euclidean")
    # True and 1.0 were read as row 1 of a pool named by row index.
    message = r"model must be a model name of the pool or.* an int row index; got "
    for model in (True, np.True_, 1.0, np.float64(1.0)):
        with pytest.raises(TypeError, match=message + re.escape(repr(model))):
            nearest_models(Z, model, k=1, metric="euclidean")
    with pytest.raises(TypeError, match=message):
        nearest_models(pairwise_distances(Z), True, k=1, metric="precomputed")
    # An int (NumPy's too) names a row; a float names a model of a pool of floats.
    assert nearest_models(Z, np.int64(1), k=2, metric="euclidean")[
        "model"
    ].tolist() == [0, 2]
    floats = pd.DataFrame(Z, index=[0.5, 1.5, 2.5, 3.5])
    assert nearest_models(floats, 1.5, k=1, metric="euclidean")["model"].tolist() == [
        0.5
    ]


def test_linkage_recovers_families(family_embeddings):
    Z, _, family = family_embeddings
    n_families = family.max() + 1
    for method, metric in [
        ("average", "euclidean"),
        ("complete", "cosine"),
        ("ward", "euclidean"),
        ("single", "cosine"),
    ]:
        tree = model_linkage(Z, method=method, metric=metric)
        assert tree.shape == (len(Z) - 1, 4)
        clusters = fcluster(tree, t=n_families, criterion="maxclust")
        assert adjusted_rand_score(family, clusters) == 1.0
    with pytest.raises(ValueError, match="ward"):
        model_linkage(Z, method="ward", metric="cosine")


# ---------------------------------------------------------------- geometry vs behaviour


@pytest.mark.parametrize("n_levels", [2, 11, 64, None])
def test_disagreement_matches_brute_force(n_levels):
    # 0/1 scores, a judge's tenths and 64 levels take the per-step matrix
    # products; continuous scores (some 250 distinct values) the pass over
    # the models. Both, and a second matrix, against the definition, on the
    # scores read on the 1e-7 grid (exact for the levels, within 5e-8 for
    # continuous float64 scores).
    rng = np.random.default_rng(n_levels or 0)
    if n_levels is None:
        Y = rng.random((70, 5))
    else:
        Y = rng.integers(0, n_levels, (70, 5)) / (n_levels - 1)
        Y[:n_levels, 0] = np.arange(n_levels) / (n_levels - 1)  # every level
    Y[rng.random(Y.shape) < 0.3] = np.nan
    Y[:, 4] = np.nan
    Y[0, 4] = 1.0  # model 4 has one query
    X = Y[:, ::-1][:, :3]
    for other in (None, X):
        rate, common = disagreement(Y, other)
        B = Y if other is None else other
        assert rate.shape == common.shape == (5, B.shape[1])
        for a in range(5):
            for b in range(B.shape[1]):
                both = ~np.isnan(Y[:, a]) & ~np.isnan(B[:, b])
                assert common[a, b] == both.sum()
                grid_a, grid_b = np.rint(Y[both, a] * 1e7), np.rint(B[both, b] * 1e7)
                expected = (
                    np.abs(grid_a - grid_b).sum() / (both.sum() * 1e7)
                    if both.any()
                    else np.nan
                )
                np.testing.assert_allclose(rate[a, b], expected, rtol=1e-12, atol=1e-15)


def test_distance_disagreement_correlation_counts_skipped_pairs():
    evals = {
        "model": ["a", "a", "b", "b", "c", "c"],
        "query": ["q1", "q2", "q1", "q2", "q3", "q4"],
        "score": [1, 0, 1, 1, 0, 1],
    }
    Z = np.array([[0.0], [1.0], [2.0]])
    with pytest.raises(ValueError, match="Only 1 model pair"):
        distance_disagreement_correlation(Z, evals, metric="euclidean")
    evals["model"] += ["d", "d"]
    evals["query"] += ["q1", "q2"]
    evals["score"] += [0, 0]
    Z = np.array([[0.0], [1.0], [2.0], [4.0]])
    result = distance_disagreement_correlation(Z, evals, metric="euclidean")
    # c shares no query with a, b or d.
    assert result.n_skipped == 3 and result.n_pairs == 3
    assert result.pairs["disagreement"].tolist() == [0.5, 0.5, 1.0]  # ab, ad, bd
    assert -1 <= result.kendall <= 1
    with pytest.raises(ValueError, match="embeddings has 2 rows but evals has 4"):
        distance_disagreement_correlation(Z[:2], evals)
    with pytest.raises(ValueError, match="not in the embeddings"):
        distance_disagreement_correlation(Z, evals, names=["a", "b", "c", "x"])


def test_distance_disagreement_correlation_validates_min_common():
    evals = {
        "model": ["a"] * 4 + ["b"] * 4 + ["c"] * 4,
        "query": ["q1", "q2", "q3", "q4"] * 3,
        "score": [1, 1, 0, 0, 1, 1, 0, 1, 0, 0, 1, 1],
    }
    Z = [[0.0, 0.0], [0.1, 0.0], [1.0, 0.0]]
    # 1.5 and True were taken (as 2 and 1), "2" failed in a comparison, NaN
    # skipped every pair.
    for bad in (1.5, True, "2", float("nan"), None):
        with pytest.raises(
            TypeError, match=r"min_common must be an int >= 1, .*; got " + repr(bad)
        ):
            distance_disagreement_correlation(Z, evals, min_common=bad)
    for bad in (0, -1):
        with pytest.raises(ValueError, match=f"min_common={bad} should be an int >= 1"):
            distance_disagreement_correlation(Z, evals, min_common=bad)
    result = distance_disagreement_correlation(
        Z, evals, metric="euclidean", min_common=np.int64(4)
    )
    assert result.n_pairs == 3


def test_models_of_evals_outside_the_pool_are_named_in_the_callers_words():
    # The message named a `models` parameter that none of these functions has.
    evals = {
        "model": ["a"] * 2 + ["b"] * 2 + ["c"] * 2 + ["d"] * 2,
        "query": ["q1", "q2"] * 4,
        "score": [1, 1, 1, 0, 0, 0, 0, 1],
    }
    Z = pd.DataFrame([[0.0, 1.0], [0.1, 1.0], [1.0, 0.0]], index=["a", "b", "c"])
    D = pd.DataFrame(
        pairwise_distances(Z), index=Z.index, columns=Z.index
    )  # precomputed, named the same way
    message = (
        r"evals has 1 model\(s\) that are not in the embeddings: \['d'\]; give "
        "each an embedding, or leave them out of evals"
    )
    for function in (distance_disagreement_correlation, neighbor_agreement):
        with pytest.raises(ValueError, match=message):
            function(Z, evals)
        with pytest.raises(ValueError, match=message):
            function(D, evals, metric="precomputed")
    with pytest.raises(ValueError, match=message):
        embedding_dimensionality(Z, evals)
    router = SingleBestRouter().fit({k: v[:6] for k, v in evals.items()})
    message = (
        r"evals has 1 model\(s\) that are not in the router's classes_: \['d'\]; "
        "the router cannot route to them"
    )
    with pytest.raises(ValueError, match=message):
        fallback_routing_accuracy(router, evals, embeddings=Z)
    with pytest.raises(ValueError, match=message):
        portfolio_curve(router, evals, [1], embeddings=Z)


def test_dataframe_embeddings_are_matched_by_index():
    # LocusEmbedder.set_output(transform="pandas") indexes rows by model name;
    # here out of sorted order: c, a, b.
    evals = {
        "model": ["a"] * 4 + ["b"] * 4 + ["c"] * 4,
        "query": ["q1", "q2", "q3", "q4"] * 3,
        "score": [1, 1, 0, 0] + [1, 1, 0, 1] + [0, 0, 1, 1],
    }
    rows = [[1.0, 0.0], [0.0, 0.0], [0.1, 0.0]]
    Z = pd.DataFrame(rows, index=pd.Index(["c", "a", "b"], name="model"))
    # a-b 0.1 apart disagree on 1/4, a-c 1.0 on 4/4, b-c 0.9 on 3/4.
    result = distance_disagreement_correlation(Z, evals, metric="euclidean")
    pairs = result.pairs.set_index(["model_a", "model_b"])
    assert pairs.loc[("a", "b"), "disagreement"] == 0.25
    assert pairs.loc[("a", "b"), "distance"] == pytest.approx(0.1)
    assert result.spearman == pytest.approx(1.0)
    order = fallback_order(Z, metric="euclidean")
    assert order.index.tolist() == ["c", "a", "b"]
    assert order.to_numpy().tolist() == [["b", "a"], ["b", "c"], ["a", "c"]]
    nearest = nearest_models(Z, "a", k=1, metric="euclidean")
    assert nearest["model"].tolist() == ["b"]
    with pytest.raises(ValueError, match=r"names must be None when embeddings is a "):
        nearest_models(Z, "a", k=1, names=["a", "b", "c"])
    duplicated = Z.set_axis(["a", "a", "b"])
    with pytest.raises(ValueError, match=r"embeddings.index has duplicates: \['a'\]"):
        fallback_order(duplicated)
    # A router's replacement embeddings: rows taken in classes_ order by name.
    encoder = {"q1": [1.0, 0.0], "q2": [0.0, 1.0], "q3": [1.0, 1.0], "q4": [2.0, 1.0]}
    router = KNNRouter(1, encoder=encoder).fit(evals)
    by_name = fallback_routing_accuracy(router, evals, embeddings=Z, metric="euclidean")
    by_row = fallback_routing_accuracy(
        router, evals, embeddings=Z.loc[["a", "b", "c"]].to_numpy(), metric="euclidean"
    )
    pd.testing.assert_frame_equal(by_name, by_row)
    with pytest.raises(ValueError, match=r"embeddings has no row for 1 model\(s\)"):
        fallback_routing_accuracy(router, evals, embeddings=Z.drop("b"))


def test_profile_recall_reference_dataframe_is_matched_by_index():
    # Math and code accuracies 0.9 and 0.1 for a, 0.1 and 0.9 for b, 0.5 and
    # 0.5 for c; the reference lists them c, b, a.
    tasks = {
        "model": np.repeat(["a", "b", "c"], 20),
        "query": [f"q{i}" for i in range(20)] * 3,
    }
    tasks["task"] = (["math"] * 10 + ["code"] * 10) * 3
    tasks["score"] = np.concatenate(
        [np.r_[np.ones(9), np.zeros(10), 1.0], np.r_[1.0, np.zeros(9), np.ones(9), 0.0]]
        + [np.r_[np.ones(5), np.zeros(10), np.ones(5)]]
    )
    embedder = TaskAccuracyEmbedder(
        dict(zip(tasks["query"], tasks["task"], strict=True))
    )
    real = pd.DataFrame(embedder.transform(tasks), index=["a", "b", "c"]).iloc[::-1]
    result = profile_recall_at_k(
        embedder, tasks, k=1, n_evals=20, scores="exact", reference=real
    )
    assert result.ranks.tolist() == [1, 1, 1]


def test_correlation_of_a_pool_at_one_point_is_none_as_its_dimensionality():
    evals = {
        "model": ["a"] * 4 + ["b"] * 4 + ["c"] * 4,
        "query": ["q1", "q2", "q3", "q4"] * 3,
        "score": [1, 1, 0, 0] + [1, 1, 0, 1] + [0, 0, 1, 1],
    }
    # Identical embeddings: every distance 0 (cosine too, not ~1e-16 of
    # rounding), nothing to correlate (scipy warned and gave NaN).
    for metric in ("euclidean", "cosine"):
        result = distance_disagreement_correlation(
            np.tile([0.3, 0.7, 0.1], (3, 1)), evals, metric=metric
        )
        assert (result.pairs["distance"] == 0).all()
        assert (result.pearson, result.spearman, result.kendall) == (None,) * 3
        assert result.n_pairs == 3
    flat = embedding_dimensionality(np.tile([0.3, 0.7, 0.1], (3, 1)), evals)
    assert flat.strength_correlation is None
    # A model of evals without an embedding is refused by both, in one wording.
    Z, names = [[0.0, 0.0], [0.1, 0.0]], ["a", "b"]
    message = r"evals has 1 model\(s\) that are not in the embeddings: \['c'\]"
    with pytest.raises(ValueError, match=message):
        distance_disagreement_correlation(Z, evals, names=names)
    with pytest.raises(ValueError, match=message):
        embedding_dimensionality(Z, evals, names=names)


def test_distance_tracks_disagreement_on_a_pool(pool):
    # Embeddings that encode behaviour: each model's true success probabilities.
    Z = pool.probabilities.to_numpy().T
    result = distance_disagreement_correlation(Z, pool.evals, metric="euclidean")
    assert result.n_pairs == 16 * 15 // 2 and result.n_skipped == 0
    assert result.pearson > 0.5 and result.spearman > 0.5 and result.kendall > 0.3
    agreement = neighbor_agreement(Z, pool.evals, k=[1, 2, 15], metric="euclidean")
    assert agreement["k"].tolist() == [1, 2, 15]
    assert agreement["agreement"].iloc[0] > agreement["random_agreement"].iloc[0]
    assert agreement["agreement"].iloc[0] > agreement["agreement"].iloc[-1]
    assert (agreement["n_models"] == 16).all()


# ---------------------------------------------------------------- fallback routing


def test_fallback_skips_models_without_a_score():
    evals = {
        "model": ["a", "a", "b", "c", "c"],
        "query": ["q1", "q2", "q1", "q1", "q2"],
        "score": [1, 1, 0, 1, 0],
    }
    encoder = {"q1": [1.0, 0.0], "q2": [0.0, 1.0]}
    router = KNNRouter(1, encoder=encoder).fit(evals)  # routes both queries to a
    Z = [[0.0, 0.0], [0.1, 0.0], [1.0, 0.0]]  # b nearest to a, then c
    result = fallback_routing_accuracy(
        router, evals, k=[1, 2], embeddings=Z, metric="euclidean"
    )
    # k=1: q1 falls back to b (0); q2 has no score for b, so c (0) answers.
    # k=2: q1 goes to c (1); q2 has no second scored model and is not counted.
    assert result["accuracy"].tolist() == [0.0, 1.0]
    assert result["n_queries"].tolist() == [2, 1]
    assert result["no_outage_accuracy"].tolist() == [1.0, 1.0]
    with pytest.raises(ValueError, match=r"k=3 should be in \[1, 2\]"):
        fallback_routing_accuracy(router, evals, k=3, embeddings=Z)
    with pytest.raises(ValueError, match="embeddings has 2 rows"):
        fallback_routing_accuracy(router, evals, embeddings=Z[:2])


def test_fallback_warns_when_no_query_has_a_fallback():
    # Each query scored for one model only: no fallback to score anywhere,
    # and the NaN row came back without a word.
    train = {
        "model": ["a", "a", "b", "b", "c", "c"],
        "query": ["q1", "q2"] * 3,
        "score": [1, 1, 1, 0, 0, 0],
    }
    router = KNNRouter(1, encoder={"q1": [1.0, 0.0], "q2": [0.0, 1.0]}).fit(train)
    Z = [[0.0, 0.0], [0.1, 0.0], [1.0, 0.0]]
    alone = {"model": ["a", "b"], "query": ["q1", "q2"], "score": [1, 0]}
    with pytest.warns(UserWarning, match=r"For k=1, no query of evals has that many"):
        result = fallback_routing_accuracy(router, alone, embeddings=Z)
    assert result["n_queries"].tolist() == [0]
    assert (
        result[["accuracy", "no_outage_accuracy", "retained"]].isna().to_numpy().all()
    )
    # Two scored models per query: k=1 is measured, k=2 is NaN and named.
    pairs = {k: v[:4] for k, v in train.items()}
    with pytest.warns(UserWarning, match=r"k=2.*\(at most 1 on any query\)"):
        result = fallback_routing_accuracy(router, pairs, k=[1, 2], embeddings=Z)
    assert result["n_queries"].tolist() == [2, 0]
    assert result["accuracy"].notna().tolist() == [True, False]


def test_fallback_routing_accuracy_with_a_router(router, pool):
    evals = pool.evals
    result = fallback_routing_accuracy(router, evals, k=[1, 3])
    assert list(result.columns) == [
        "k",
        "accuracy",
        "no_outage_accuracy",
        "retained",
        "n_queries",
    ]
    assert (result["n_queries"] == pool.queries.shape[0]).all()
    y_true = pd.pivot_table(evals, index="query", columns="model", values="score")
    proba = router.predict_proba(y_true.index.to_numpy())
    assert result["no_outage_accuracy"].iloc[0] == pytest.approx(
        routing_accuracy(y_true[router.classes_].to_numpy(), proba)
    )
    assert ((0 <= result["accuracy"]) & (result["accuracy"] <= 1)).all()


class _ProbaOnlyRouter(BaseEstimator):
    """A black-box router: classes_ and predict_proba, no decision_function."""

    def __init__(self, cost_weight=0.0):
        self.cost_weight = cost_weight

    def fit(self, evals):
        self.classes_ = np.array(["a", "b", "c"], dtype=object)
        return self

    def predict_proba(self, queries):
        return np.tile([0.9, 0.5, 0.1], (len(queries), 1))


class _DecidingRouter(_ProbaOnlyRouter):
    """The same router, with the decision_function of a cost-free router."""

    def decision_function(self, queries):
        return self.predict_proba(queries)


def test_a_router_without_decision_function_is_routed_by_predict_proba():
    # Documented for any router with classes_ and predict_proba, both called
    # decision_function and failed with an AttributeError.
    evals = {
        "model": ["a", "a", "b", "b", "c", "c"],
        "query": ["q1", "q2"] * 3,
        "score": [1, 1, 1, 0, 0, 0],
    }
    Z = [[1.0, 0.0], [0.9, 0.2], [0.0, 1.0]]
    black_box = _ProbaOnlyRouter().fit(evals)
    deciding = _DecidingRouter().fit(evals)
    result = fallback_routing_accuracy(black_box, evals, k=[1, 2], embeddings=Z)
    assert result["accuracy"].tolist() == [0.5, 0.0]  # routed to a, then b, c
    pd.testing.assert_frame_equal(
        result, fallback_routing_accuracy(deciding, evals, k=[1, 2], embeddings=Z)
    )
    curve = portfolio_curve(black_box, evals, [1, 2], embeddings=Z, random_state=0)
    pd.testing.assert_frame_equal(
        curve,
        portfolio_curve(deciding, evals, [1, 2], embeddings=Z, random_state=0),
    )
    assert curve["full_pool_accuracy"].iloc[0] == 1.0
    # A cost weight applies through the decision function alone: without
    # one, routing by P(correct) would quietly ignore it.
    costly = _ProbaOnlyRouter(cost_weight=0.5).fit(evals)
    message = r"has cost_weight=0.5 and no decision_function to apply it with"
    with pytest.raises(TypeError, match="fallback_routing_accuracy .*" + message):
        fallback_routing_accuracy(costly, evals, embeddings=Z)
    with pytest.raises(TypeError, match="portfolio_curve .*" + message):
        portfolio_curve(costly, evals, [1], embeddings=Z)
    assert_frame = fallback_routing_accuracy(
        _DecidingRouter(cost_weight=0.5).fit(evals), evals, embeddings=Z
    )
    assert assert_frame["accuracy"].tolist() == [0.5]

    class Opaque(BaseEstimator):
        def fit(self, evals):
            self.classes_ = np.array(["a", "b", "c"], dtype=object)
            return self

    with pytest.raises(TypeError, match="needs a router with predict_proba"):
        fallback_routing_accuracy(Opaque().fit(evals), evals, embeddings=Z)


# ------------------------------------------------------- precomputed distances


def test_precomputed_distances_give_what_the_embeddings_give(family_embeddings):
    Z, names, _ = family_embeddings
    for metric in ("cosine", "euclidean"):
        D = pairwise_distances(Z, metric=metric)
        frame = pd.DataFrame(D, index=names, columns=names)
        for given in (frame, D):
            kwargs = {} if given is frame else {"names": names}
            pd.testing.assert_frame_equal(
                nearest_models(given, names[3], k=4, metric="precomputed", **kwargs),
                nearest_models(Z, names[3], k=4, metric=metric, names=names),
                atol=1e-12,
            )
            pd.testing.assert_frame_equal(
                fallback_order(given, metric="precomputed", **kwargs),
                fallback_order(Z, metric=metric, names=names),
            )
        np.testing.assert_allclose(
            model_linkage(frame, metric="precomputed"),
            model_linkage(Z, metric=metric),
            atol=1e-12,
        )
    fig = plot_model_dendrogram(frame, metric="precomputed")
    assert len(fig.axes) == 3
    assert fig.axes[1].get_xticklabels()[0].get_text() in set(names)


def test_embedding_dimensionality_by_hand(router, pool):
    # Four models spread evenly along two axes: two directions, half each;
    # their mean is the origin, so the spread is infinite relative to it.
    cross = embedding_dimensionality([[1.0, 0], [-1, 0], [0, 1], [0, -1]])
    assert cross.participation_ratio == pytest.approx(2.0)
    np.testing.assert_allclose(cross.explained_variance_ratio, [0.5, 0.5])
    assert cross.relative_spread == np.inf and cross.strength_correlation is None
    # Two models 1 from their mean (11, 0): spread 1 / 11 of what they share.
    pair = embedding_dimensionality([[10.0, 0], [12, 0]])
    assert pair.relative_spread == pytest.approx(1 / 11)
    assert pair.explained_variance_ratio.shape == (1,)
    # The first component along x, strength 0, 1, 1, 0 along it: uncorrelated.
    evals = {
        "model": np.repeat(["a", "b", "c", "d"], 2),
        "query": ["q1", "q2"] * 4,
        "score": [0, 0, 1, 1, 1, 1, 0, 0],
    }
    Z = [[-2.0, 0.1], [-1, -0.1], [1, 0.1], [2, -0.1]]
    assert embedding_dimensionality(Z, evals).strength_correlation == pytest.approx(
        0.0, abs=1e-12
    )
    # The same ratio as from PCA's variances, on random embeddings.
    from sklearn.decomposition import PCA

    X = np.random.default_rng(0).normal(size=(9, 4)) * [3, 2, 1, 0.5]
    variance = PCA().fit(X).explained_variance_
    got = embedding_dimensionality(X)
    assert got.participation_ratio == pytest.approx(
        variance.sum() ** 2 / (variance**2).sum()
    )
    np.testing.assert_allclose(
        got.explained_variance_ratio, variance / variance.sum(), atol=1e-12
    )
    # Every model at one point: nothing spreads, and nothing is NaN.
    flat = embedding_dimensionality([[1.0, 2.0]] * 3)
    assert flat.participation_ratio == 0.0 and flat.strength_correlation is None
    assert not np.isnan(flat.explained_variance_ratio).any()
    assert flat.relative_spread == 0.0
    assert embedding_dimensionality([[0.0, 0.0]] * 2).relative_spread == 0.0
    # A router and its evaluations.
    fitted = embedding_dimensionality(router, pool.evals)
    assert 1.0 <= fitted.participation_ratio <= router.model_embeddings_.shape[1]
    assert 0.0 <= fitted.strength_correlation <= 1.0
    with pytest.raises(ValueError, match="at least 2"):
        embedding_dimensionality([[1.0, 2.0]])
    with pytest.raises(ValueError, match="no score for model 'e'"):
        without_d = {k: v[:6] for k, v in evals.items()}  # a, b and c only
        embedding_dimensionality(Z, without_d, names=["a", "b", "c", "e"])


@pytest.mark.parametrize(
    "Z", [[[0.1, 0.2, 0.3]] * 3, [[0.1, 0.7, 0.3]] * 7, [[1e8 + 0.1, -3.3]] * 5]
)
def test_identical_embeddings_have_no_dimension(Z):
    # The mean of identical rows is off by an ulp: the ~1e-17 left after
    # centring read as one direction (participation ratio 1.0).
    result = embedding_dimensionality(Z)
    assert result.participation_ratio == 0.0
    assert (result.explained_variance_ratio == 0.0).all()
    assert result.relative_spread == 0.0


def test_embedding_dimensionality_does_not_depend_on_the_scale():
    # The norms and squared singular values under- and overflowed: NaN at
    # 1e-100, "does not vary" (0.0) at 1e-200 and 1e160.
    X = np.random.default_rng(0).normal(size=(6, 3))
    evals = {
        "model": np.repeat(list("abcdef"), 2),
        "query": ["q1", "q2"] * 6,
        "score": [0, 0, 1, 0, 1, 1, 0, 1, 1, 1, 0, 0],
    }
    expected = embedding_dimensionality(X, evals)
    for scale in (1e-100, 1e-200, 1e160, 1e300):
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            got = embedding_dimensionality(X * scale, evals)
        assert got.participation_ratio == pytest.approx(
            expected.participation_ratio, rel=1e-12
        )
        np.testing.assert_allclose(
            got.explained_variance_ratio,
            expected.explained_variance_ratio,
            rtol=1e-12,
        )
        assert got.relative_spread == pytest.approx(expected.relative_spread, 1e-12)
        assert got.strength_correlation == pytest.approx(
            expected.strength_correlation, rel=1e-12
        )
    # A power of 2 rescales exactly: nothing changes at all.
    exact = embedding_dimensionality(X * 2.0**-40, evals)
    np.testing.assert_array_equal(
        exact.explained_variance_ratio, expected.explained_variance_ratio
    )
    for key in ("participation_ratio", "relative_spread", "strength_correlation"):
        assert exact[key] == expected[key]


def test_router_embeddings_with_nan_are_refused_as_an_array_is():
    class Router(BaseEstimator):
        def fit(self, Z):
            self.classes_ = np.array(["a", "b", "c"], dtype=object)
            self.model_embeddings_ = np.asarray(Z)
            return self

    Z = np.array([[0.0, 1.0], [np.nan, 1.0], [1.0, 0.0]])
    router = Router().fit(Z)
    with pytest.raises(ValueError) as from_array:
        embedding_dimensionality(Z)
    # A LinAlgError from the SVD, or NaN distances, before.
    for function in (embedding_dimensionality, fallback_order, model_linkage):
        with pytest.raises(ValueError, match="^" + re.escape(str(from_array.value))):
            function(router)
    with pytest.raises(ValueError, match=re.escape(str(from_array.value))):
        nearest_models(router, "a", k=1)


def test_agreement_and_correlation_take_precomputed_distances(pool, family_embeddings):
    Z, names, _ = family_embeddings
    evals = pool.evals
    for metric in ("cosine", "euclidean"):
        D = pairwise_distances(Z, metric=metric)
        frame = pd.DataFrame(D, index=names, columns=names)
        expected = neighbor_agreement(Z, evals, k=[1, 3], names=names, metric=metric)
        correlation = distance_disagreement_correlation(
            Z, evals, names=names, metric=metric
        )
        # Names from the DataFrame's index, from names=, or (an array
        # without names) the sorted models of evals, as for embeddings.
        for given, kwargs in ((frame, {}), (D, {"names": names}), (D, {})):
            got = neighbor_agreement(
                given, evals, k=[1, 3], metric="precomputed", **kwargs
            )
            pd.testing.assert_frame_equal(got, expected)
            r = distance_disagreement_correlation(
                given, evals, metric="precomputed", **kwargs
            )
            assert r.spearman == pytest.approx(correlation.spearman, abs=1e-12)
            pd.testing.assert_frame_equal(r.pairs, correlation.pairs, atol=1e-12)
    # A DataFrame's own order is followed, whatever the order of evals.
    order = names[::-1]
    flipped = pd.DataFrame(
        pairwise_distances(Z[::-1], metric="cosine"), index=order, columns=order
    )
    pd.testing.assert_frame_equal(
        neighbor_agreement(flipped, evals, k=1, metric="precomputed"),
        neighbor_agreement(Z, evals, k=1, names=names),
    )
    with pytest.raises(ValueError, match="has 3 rows but evals has"):
        neighbor_agreement(D[:3, :3], evals, metric="precomputed")
    with pytest.raises(ValueError, match="metric must be one of"):
        neighbor_agreement(Z, evals, names=names, metric="manhattan")


def test_neighbor_agreement_of_score_disagreement_by_hand():
    # a and b agree on 3 of 4 shared queries, a and c on 1, b and c on 2:
    # with distances = the disagreements themselves, each model's nearest is
    # its most agreeing model.
    evals = {
        "model": ["a"] * 4 + ["b"] * 4 + ["c"] * 4,
        "query": ["q1", "q2", "q3", "q4"] * 3,
        "score": [1, 1, 0, 0, 1, 1, 0, 1, 0, 1, 1, 1],
    }
    D = score_disagreement(evals, min_shared=1).distance
    result = neighbor_agreement(D, evals, k=[1, 2], metric="precomputed")
    # nearest: a->b (0.75), b->a (0.75), c->b (0.5); second: a->c (0.25),
    # b->c (0.5), c->a (0.25).
    assert result["agreement"].tolist() == pytest.approx([2.0 / 3.0, 1.0 / 3.0])
    assert result["random_agreement"].iloc[0] == pytest.approx(0.5)
    r = distance_disagreement_correlation(D, evals, metric="precomputed")
    assert r.pearson == pytest.approx(1.0)  # the distance is the disagreement


def test_fallback_accuracy_from_precomputed_distances(router, pool):
    classes = router.classes_
    Z = router.model_embeddings_
    D = pairwise_distances(Z, metric="cosine")
    expected = fallback_routing_accuracy(router, pool.evals, k=[1, 2])
    by_array = fallback_routing_accuracy(
        router, pool.evals, k=[1, 2], embeddings=D, metric="precomputed"
    )
    # A DataFrame may list the models in any order: it is matched by name.
    shuffled = np.random.default_rng(0).permutation(len(classes))
    frame = pd.DataFrame(D, index=classes, columns=classes).iloc[shuffled, shuffled]
    by_frame = fallback_routing_accuracy(
        router, pool.evals, k=[1, 2], embeddings=frame, metric="precomputed"
    )
    pd.testing.assert_frame_equal(by_array, expected)
    pd.testing.assert_frame_equal(by_frame, expected)
    with pytest.raises(ValueError, match="needs embeddings= a matrix of distances"):
        fallback_routing_accuracy(router, pool.evals, metric="precomputed")
    with pytest.raises(ValueError, match="no distances for 1 model"):
        fallback_routing_accuracy(
            router, pool.evals, embeddings=frame.iloc[1:, 1:], metric="precomputed"
        )
    with pytest.raises(ValueError, match="has 15 rows but the router has 16"):
        fallback_routing_accuracy(
            router, pool.evals, embeddings=D[1:, 1:], metric="precomputed"
        )


def test_score_disagreement_drives_neighbors_and_families():
    # m1 is a copy of m0 with one answer in 20 changed; m2, m3 two other models.
    rng = np.random.default_rng(0)
    base = rng.random((3, 40)) < 0.6
    copy = base[0].copy()
    copy[:2] = ~copy[:2]
    answers = {"m0": base[0], "m1": copy, "m2": base[1], "m3": base[2]}
    evals = pd.DataFrame(
        {
            "model": np.repeat(list(answers), 40),
            "query": [f"q{i}" for i in range(40)] * 4,
            "score": np.concatenate(list(answers.values())) * 1.0,
        }
    )
    D = score_disagreement(evals).distance
    assert nearest_models(D, "m0", k=1, metric="precomputed")["model"].tolist() == [
        "m1"
    ]
    assert fallback_order(D, metric="precomputed").loc["m1", 1] == "m0"
    tree = model_linkage(D, metric="precomputed")
    assert fcluster(tree, t=3, criterion="maxclust")[:2].tolist() == [1, 1]


def test_precomputed_distances_are_validated(router):
    names = ["a", "b", "c"]
    D = np.array([[0.0, 0.2, 0.5], [0.2, 0.0, 0.4], [0.5, 0.4, 0.0]])
    frame = pd.DataFrame(D, index=names, columns=names)
    with_nan = frame.copy()
    with_nan.loc["a", "c"] = with_nan.loc["c", "a"] = np.nan
    with pytest.raises(ValueError, match="2 NaN distance.*'a' and 'c'.*min_shared"):
        fallback_order(with_nan, metric="precomputed")
    with pytest.raises(ValueError, match="not symmetric"):
        fallback_order(D + np.triu(np.ones((3, 3)), 1), metric="precomputed")
    with pytest.raises(ValueError, match="Negative values"):
        model_linkage(-D, metric="precomputed")
    with pytest.raises(ValueError, match="square distance matrix"):
        fallback_order(D[:2], metric="precomputed")
    with pytest.raises(ValueError, match="same models as index and columns"):
        nearest_models(frame[["b", "a", "c"]], "a", k=1, metric="precomputed")
    with pytest.raises(ValueError, match="names must be None when embeddings is a"):
        fallback_order(frame, metric="precomputed", names=names)
    with pytest.raises(TypeError, match="metric='precomputed' takes a square"):
        fallback_order(router, metric="precomputed")
    with pytest.raises(ValueError, match="must be a model of the pool"):
        nearest_models(frame, [0.1, 0.2, 0.3], metric="precomputed")
    with pytest.raises(ValueError, match="method='ward' needs metric='euclidean'"):
        model_linkage(frame, method="ward", metric="precomputed")
    with pytest.raises(ValueError, match="metric must be one of"):
        fallback_order(frame, metric="manhattan")


def test_a_similarity_matrix_is_not_taken_for_distances():
    # Cosine similarities (diagonal 1) were accepted as distances and
    # clustered backwards: the most alike models in different clusters.
    X = np.array([[1.0, 0.0], [0.99, 0.1], [0.0, 1.0], [0.1, 0.99]])
    unit = X / np.linalg.norm(X, axis=1, keepdims=True)
    similarity = unit @ unit.T
    message = r"embeddings has 4 non-zero value\(s\) on its diagonal.*zero diagonal"
    with pytest.raises(ValueError, match=message):
        model_linkage(similarity, metric="precomputed")
    with pytest.raises(ValueError, match=message):
        fallback_order(similarity, metric="precomputed", names=list("abcd"))
    with pytest.raises(ValueError, match=message):
        plot_model_map(similarity, method="mds", metric="precomputed")
    # Rounding on the diagonal is allowed; the distances give the families.
    distance = np.clip(1.0 - similarity, 0.0, None)
    np.fill_diagonal(distance, 1e-17)
    tree = model_linkage(distance, metric="precomputed")
    assert fcluster(tree, 2, "maxclust").tolist() in ([1, 1, 2, 2], [2, 2, 1, 1])


# ---------------------------------------------------------------- fingerprints


def test_fingerprint_calibration_and_matching(pool, task_embedder):
    # 200 of each model's 240 evaluations: any two subsets share 160.
    with pytest.warns(UserWarning, match=r"^16 of the 16 models .* \[240, 240"):
        result = calibrate_fingerprint_threshold(
            task_embedder,
            pool.evals,
            n_resamples=4,
            n_evals=200,
            false_match_rate=0.05,
            metric="euclidean",
            random_state=0,
        )
    n = len(result.models)
    assert n == 16 and result.n_skipped == 0
    assert result.self_distances.shape == (n * 4 * 3 // 2,)
    assert result.cross_distances.shape == (n * (n - 1) // 2 * 16,)
    assert result.false_match_rate <= 0.05
    assert result.false_match_rate == np.mean(
        result.cross_distances <= result.threshold
    )
    # Embeddings from 200 of 240 queries move much less than models differ.
    assert result.true_match_rate > 0.8

    reference = task_embedder.transform(pool.evals)
    probe = pool.evals.groupby("model").sample(n=200, random_state=1)
    matches = match_models(
        task_embedder.transform(probe),
        reference,
        threshold=result.threshold,
        metric="euclidean",
        names=pool.models["model"],
        reference_names=pool.models["model"],
    )
    assert list(matches.columns) == ["nearest", "distance", "is_match"]
    assert (matches["nearest"] == matches.index).mean() > 0.8
    assert matches["is_match"].mean() > 0.8
    far = match_models(
        reference + 10.0, reference, threshold=result.threshold, metric="euclidean"
    )
    assert not far["is_match"].any()
    with pytest.raises(ValueError, match="dimensions"):
        match_models(reference[:, :2], reference, threshold=0.1)
    with pytest.raises(ValueError, match="Only 0 model"):
        calibrate_fingerprint_threshold(task_embedder, pool.evals, n_evals=1000)


def test_fingerprint_calibration_with_the_real_embedder(router, pool):
    result = calibrate_fingerprint_threshold(
        router, pool.evals, n_resamples=2, n_evals=64, random_state=0
    )
    assert result.threshold >= 0
    assert 0 <= result.true_match_rate <= 1 and 0 <= result.false_match_rate <= 1
    with pytest.raises(TypeError, match="transform"):
        calibrate_fingerprint_threshold(object(), pool.evals)


# a and a2 score 1 on every query, c 0: by mean score, a and a2 are at
# distance 0 (their 2 x 2 cross pairs), and 4 of the 12 cross pairs are.
_TWINS_AND_ONE_OTHER = {
    "model": np.repeat(["a", "a2", "c"], 4),
    "query": ["q1", "q2", "q3", "q4"] * 3,
    "score": [1.0] * 8 + [0.0] * 4,
}


@pytest.mark.filterwarnings("ignore:.*fewer than 2 \\* n_evals")  # 4 of 4
def test_fingerprint_calibration_refuses_a_rate_that_zero_distances_exceed():
    class MeanScore:
        def transform(self, evals):
            return pd.DataFrame(evals).groupby("model")["score"].mean().to_frame()

    # a and a2 score 1 everywhere: their 2 x 2 cross pairs are at distance 0,
    # 4 of the 12 cross pairs (the others, to c, at 1).
    evals = _TWINS_AND_ONE_OTHER
    kwargs = {"n_resamples": 2, "n_evals": 4, "metric": "euclidean"}
    with pytest.raises(ValueError, match=r"4 of the 12 pairs .* at least 4 / 12"):
        calibrate_fingerprint_threshold(
            MeanScore(), evals, false_match_rate=0.2, **kwargs
        )
    result = calibrate_fingerprint_threshold(
        MeanScore(), evals, false_match_rate=0.4, **kwargs
    )
    assert result.threshold == 0.5
    assert result.false_match_rate == pytest.approx(1 / 3)


class _FixedEmbedder:
    """transform(evals) -> the same embeddings, whatever the evaluations."""

    def __init__(self, embeddings):
        self.embeddings = embeddings

    def transform(self, evals):
        return self.embeddings


@pytest.mark.filterwarnings("ignore:.*fewer than 2 \\* n_evals")
def test_fingerprint_threshold_never_exceeds_the_rate_between_adjacent_floats():
    # The midpoint of two distances one ulp apart rounds onto the upper one,
    # which then let its pairs through too: 2 of 10 for a rate of 0.1.
    distances = np.array([0.6, np.nextafter(0.6, 1)] + [0.9] * 8)
    threshold = match_threshold(distances, 0.1)
    assert threshold == 0.6 and np.mean(distances <= threshold) == 0.1
    # Through the calibration: 3 models x 2 resamples on the unit circle,
    # whose cross distances 1 - cos hold 0.9999999999999999 and 1.0.
    angles = np.deg2rad([10, 70, 100, 160, 40, 130])
    embedder = _FixedEmbedder(np.c_[np.cos(angles), np.sin(angles)])
    evals = pd.DataFrame(
        {
            "model": np.repeat(["a", "b", "c"], 2),
            "query": ["q1", "q2"] * 3,
            "score": [1, 0, 0, 1, 1, 1.0],
        }
    )
    asked = 8 / 12
    result = calibrate_fingerprint_threshold(
        embedder, evals, n_resamples=2, n_evals=2, false_match_rate=asked
    )
    assert result.false_match_rate <= asked
    assert result.threshold == np.nextafter(1.0, 0)


def test_fingerprint_calibration_warns_when_a_models_subsets_must_overlap():
    class Embedder:
        def transform(self, evals):
            n = pd.DataFrame(evals)["model"].nunique()
            return np.random.default_rng(0).normal(size=(n, 3))

    evals = {
        "model": ["a"] * 4 + ["b"] * 4 + ["c"] * 6,
        "query": [f"q{i}" for i in range(4)] * 2 + [f"q{i}" for i in range(6)],
        "score": [1, 0] * 7,
    }
    kwargs = {"n_resamples": 2, "false_match_rate": 0.1, "random_state": 0}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # 4 and 6 evaluations hold 2 disjoint pairs
        calibrate_fingerprint_threshold(Embedder(), evals, n_evals=2, **kwargs)
    # Subsets of 3 of 4 evaluations share at least 2: the self-distances
    # (0 for subsets of all of them) reported a true-match rate unwarned.
    message = (
        r"^2 of the 3 models calibrated on have fewer than 2 \* n_evals = 6 "
        r"evaluations: \['a', 'b'\] with \[4, 4\]\. Any two of such a model's "
        r"subsets of n_evals=3 share evaluations"
    )
    with pytest.warns(UserWarning, match=message):
        result = calibrate_fingerprint_threshold(Embedder(), evals, n_evals=3, **kwargs)
    assert result.n_skipped == 0
    with pytest.warns(UserWarning, match=r"^3 of the 3 models .* with \[4, 4, 6\]"):
        calibrate_fingerprint_threshold(Embedder(), evals, n_evals=4, **kwargs)


def test_fingerprint_calibration_checks_the_metric_before_embedding():
    class Embedder:
        def transform(self, evals):
            raise AssertionError("embedded before the metric was checked")

    evals = {"model": ["a", "a", "b", "b"], "query": ["q1", "q2"] * 2}
    evals["score"] = [1, 0, 0, 1]
    with pytest.raises(ValueError, match="metric must be one of .*'euclidian'"):
        calibrate_fingerprint_threshold(
            Embedder(), evals, n_resamples=2, n_evals=1, metric="euclidian"
        )


@pytest.mark.parametrize("bad", [-0.1, float("nan")])
def test_match_models_refuses_a_threshold_out_of_range(bad):
    with pytest.raises(ValueError, match=f"threshold={re.escape(repr(bad))} should"):
        match_models([[0.0, 1.0]], [[1.0, 0.0]], threshold=bad)


@pytest.mark.parametrize("bad", [True, False, "0.1"])
def test_match_models_refuses_a_threshold_that_is_not_a_number(bad):
    # True was taken as the threshold 1.0. A value of the wrong kind is a
    # TypeError (docs/user_guide/errors.rst).
    with pytest.raises(
        TypeError, match=rf"threshold must be a number.*got {re.escape(repr(bad))}"
    ):
        match_models([[0.0, 1.0]], [[1.0, 0.0]], threshold=bad)


# ---------------------------------------------------------------- capability profiles


def test_embed_profile_reproduces_task_accuracies(pool, task_embedder):
    queries = pool.queries[["query", "task"]]
    tasks = list(pool.tasks)
    wanted = dict(zip(tasks, [0.1, 0.5, 0.9, 1.0], strict=True))
    exact = embed_profile(task_embedder, wanted, queries, n_evals=1000, scores="exact")
    np.testing.assert_allclose(exact, [[0.1, 0.5, 0.9, 1.0]])
    drawn = embed_profile(task_embedder, wanted, queries, n_evals=240, random_state=0)
    np.testing.assert_allclose(drawn, exact, atol=0.2)
    profiles = task_profiles(pool.evals)
    assert profiles.shape == (16, 4) and list(profiles.columns) == tasks
    embedded = embed_profile(
        task_embedder, profiles, pool.evals, n_evals=240, scores="exact"
    )
    np.testing.assert_allclose(embedded, profiles.to_numpy(), atol=1 / 60)
    with pytest.raises(ValueError, match="no queries in queries_by_task"):
        embed_profile(task_embedder, {"unknown": 0.5}, queries)
    with pytest.raises(ValueError, match=r"must lie in \[0, 1\]"):
        embed_profile(task_embedder, {tasks[0]: 1.5}, queries)
    with pytest.raises(ValueError, match="needs a 'task' column"):
        task_profiles(pool.evals.drop(columns="task"))


def test_profile_recall_at_k(pool, task_embedder, router):
    result = profile_recall_at_k(
        task_embedder,
        pool.evals,
        k=[1, 3, 100],
        scores="exact",
        n_evals=240,
        metric="euclidean",
    )
    # Indexed by the k asked for; 100 > 16 models counts every model.
    assert result.recall.index.tolist() == [1, 3, 100]
    assert result.recall.iloc[0] == 1.0 and result.recall[100] == 1.0
    assert (result.ranks == 1).all()
    # The real embedder, compared against the router's embeddings of the pool.
    result = profile_recall_at_k(
        router, pool.evals, k=5, n_evals=64, reference=router, random_state=0
    )
    assert 0 <= result.recall.loc[5] <= 1
    assert result.ranks.between(1, 16).all()


class _SpyEmbedder:
    """Records the evaluation sets it embeds; one 0 per model."""

    def __init__(self):
        self.calls = []

    def transform(self, evals):
        self.calls.append(pd.DataFrame(evals))
        return np.zeros((evals["model"].nunique(), 1))


def test_embed_profile_refuses_malformed_inputs(pool, task_embedder):
    spy = _SpyEmbedder()
    # One string was split into its characters: queries '1', '2' and 'q'.
    with pytest.raises(TypeError, match=r"queries_by_task\['math'\] must be a seq"):
        embed_profile(spy, {"math": 1.0}, {"math": "q12"})
    # A query under two tasks was drawn twice for one model.
    two_tasks = {"math": ["q1", "q2"], "code": ["q1", "q3"]}
    with pytest.raises(ValueError, match=r"'q1' under tasks \['math', 'code'\]"):
        embed_profile(spy, {"math": 1.0, "code": 0.0}, two_tasks)
    table = pd.DataFrame({"query": ["q1", "q1", "q2"], "task": ["a", "b", "a"]})
    with pytest.raises(ValueError, match=r"'q1' under tasks \['a', 'b'\]"):
        embed_profile(spy, {"a": 1.0}, table)
    with pytest.raises(ValueError, match="n_evals=True should be an int >= 1"):
        embed_profile(spy, {"math": 1.0}, {"math": ["q1", "q2"]}, n_evals=True)
    with pytest.raises(ValueError, match="n_evals=True should be an int >= 1"):
        calibrate_fingerprint_threshold(spy, pool.evals, n_evals=True)
    with pytest.raises(ValueError, match=r"got 1.5 for task 'math' \(1 value"):
        embed_profile(spy, {"math": 1.5}, {"math": ["q1"]})
    profiles = pd.DataFrame({"math": [0.5, -0.1]}, index=["x", "y"])
    with pytest.raises(ValueError, match="got -0.1 for task 'math' of profile 'y'"):
        embed_profile(spy, profiles, {"math": ["q1"]})
    empty = pd.DataFrame(columns=["math"], dtype=float)
    with pytest.raises(ValueError, match="task_accuracies is a DataFrame with no row"):
        embed_profile(spy, empty, {"math": ["q1"]})
    assert not spy.calls  # each refused before anything was embedded
    # A single query in a list is fine.
    embed_profile(spy, {"math": 1.0}, {"math": ["q12"]})
    assert spy.calls[-1]["query"].tolist() == ["q12"]


class _TaskMeans:
    """The docstring's stand-in embedder: each model's mean score per task."""

    def transform(self, evals):
        return evals.groupby(["model", "task"])["score"].mean().unstack().to_numpy()


def test_embed_profile_refuses_a_task_without_queries():
    # Profile "p" draws only from math, which has no query: it reached the
    # embedder with no rows, and the 3 profiles came back as 2 rows, "q"'s
    # embedding in "p"'s place.
    profiles = pd.DataFrame(
        {"math": [0.9, np.nan, np.nan], "code": [np.nan, 0.2, 0.8]},
        index=["p", "q", "r"],
    )
    queries = {"math": [], "code": [f"c{i}" for i in range(10)]}
    spy = _SpyEmbedder()
    message = r"no queries for task 'math'.* accuracy in profile\(s\) \['p'\]"
    with pytest.raises(ValueError, match=message):
        embed_profile(spy, profiles, queries, scores="exact")
    with pytest.raises(ValueError, match="no queries for task 'math'"):
        embed_profile(spy, {"math": 0.9}, queries)
    assert not spy.calls
    # A task without queries that no profile uses is harmless: one row per
    # profile, in order (exact scores: 2 and 8 of the 10 code queries).
    out = embed_profile(_TaskMeans(), profiles.iloc[1:], queries, scores="exact")
    np.testing.assert_allclose(out, [[0.2], [0.8]])


def test_embed_profile_checks_the_embedder_returns_one_row_per_profile():
    class OneRow:
        def transform(self, evals):
            return np.zeros((1, 2))

    profiles = pd.DataFrame({"math": [0.1, 0.5, 0.9]})
    with pytest.raises(ValueError, match=r"shape \(1, 2\) for the evaluations of 3"):
        embed_profile(OneRow(), profiles, {"math": ["q1", "q2"]})


def test_embed_profile_refuses_missing_or_non_string_queries_and_tasks():
    spy = _SpyEmbedder()
    # A query without a task was dropped by the groupby, without a word.
    table = pd.DataFrame({"query": ["y1", "y2", "y3"], "task": ["y", "y", None]})
    with pytest.raises(TypeError, match=r"queries_by_task\['task'\] must hold str"):
        embed_profile(spy, {"y": 1.0}, table)
    # A missing query failed in np.unique, naming no parameter.
    table = pd.DataFrame({"query": ["y1", "y2", None], "task": ["y", "y", "y"]})
    with pytest.raises(TypeError, match=r"queries_by_task\['query'\] must hold str"):
        embed_profile(spy, {"y": 1.0}, table)
    with pytest.raises(TypeError, match=r"queries_by_task\['y'\] must hold strings"):
        embed_profile(spy, {"y": 1.0}, {"y": ["y1", 2]})
    with pytest.raises(TypeError, match=r"queries_by_task\['y'\] must hold strings"):
        embed_profile(spy, {"y": 1.0}, {"y": ["y1", None]})
    with pytest.raises(TypeError, match=r"keyed by task names .* got the key 1 \(int"):
        embed_profile(spy, {"1": 1.0}, {1: ["y1"]})
    with pytest.raises(TypeError, match=r"queries_by_task\['y'\] must be a sequence"):
        embed_profile(spy, {"y": 1.0}, {"y": 5})
    assert not spy.calls


@pytest.mark.parametrize(
    ("accuracies", "error", "message"),
    [
        ({"x": True, "y": 0.5}, TypeError, r"got True \(bool\) for task 'x'"),
        ({"x": "0.5", "y": 0.5}, TypeError, r"got '0.5' \(str\) for task 'x'"),
        ({"x": None, "y": 0.5}, ValueError, "task 'x' the missing value None"),
        ({"x": np.nan, "y": 0.5}, ValueError, "task 'x' the missing value nan"),
        (pd.Series({"x": 0.5, "y": np.nan}), ValueError, "task 'y' the missing"),
        (
            pd.DataFrame({"x": [0.5, True]}),
            TypeError,
            r"got True \(bool\) for task 'x' of profile 1",
        ),
        ([0.5, 0.5], TypeError, "must be one profile .* got list"),
        (0.5, TypeError, "must be one profile .* got float 0.5"),
        ({1: 0.5}, TypeError, r"name tasks by non-empty str \(its keys\).*\[1\]"),
    ],
)
def test_embed_profile_accepts_only_numbers_as_accuracies(accuracies, error, message):
    # True was read as 1.0, "0.5" as 0.5, None dropped the task, and a list
    # was read as tasks '0' and '1' with an error blaming queries_by_task.
    queries = {"x": [f"x{i}" for i in range(10)], "y": [f"y{i}" for i in range(10)]}
    spy = _SpyEmbedder()
    with pytest.raises(error, match=message):
        embed_profile(spy, accuracies, queries)
    assert not spy.calls


def test_embed_profile_refuses_a_task_given_twice():
    # Two 'x' columns pooled x's queries twice and the last accuracy won.
    queries = {"x": [f"x{i}" for i in range(10)]}
    spy = _SpyEmbedder()
    twice = pd.DataFrame([[0.0, 1.0]], columns=["x", "x"])
    with pytest.raises(ValueError, match=r"task\(s\) \['x'\] more than once \(its col"):
        embed_profile(spy, twice, queries)
    series = pd.Series([0.0, 1.0], index=["x", "x"])
    with pytest.raises(ValueError, match=r"\['x'\] more than once \(its index"):
        embed_profile(spy, series, queries)
    assert not spy.calls
    # Each task once is fine, numpy numbers included; in a DataFrame NaN
    # leaves a task out of that profile (as documented).
    queries["y"] = [f"y{i}" for i in range(10)]
    wanted = {"x": np.float32(0.5), "y": np.int64(1)}
    out = embed_profile(_TaskMeans(), wanted, queries, n_evals=20, scores="exact")
    np.testing.assert_allclose(out, [[0.5, 1.0]])  # 5 of 10 x, all 10 y correct
    profiles = pd.DataFrame({"x": [0.3, np.nan], "y": [0.6, 0.2]})
    out = embed_profile(_TaskMeans(), profiles, queries, n_evals=20, scores="exact")
    np.testing.assert_allclose(out, [[0.3, 0.6], [np.nan, 0.2]])


def test_embed_profile_names_the_columns_a_query_table_lacks():
    # A DataFrame without 'query' or 'task' failed with pandas' bare KeyError.
    spy = _SpyEmbedder()
    evals = pd.DataFrame(
        {"model": ["a"], "query": ["q1"], "score": [1.0], "category": ["math"]}
    )
    message = (
        r"queries_by_task is a DataFrame without the column\(s\) \['task'\] \(its "
        r"columns: \['model', 'query', 'score', 'category'\]\).*'query' and 'task' "
        r"columns .* or a mapping task -> sequence of queries"
    )
    with pytest.raises(ValueError, match=message):
        embed_profile(spy, {"math": 0.5}, evals)
    wide = pd.DataFrame({"math": ["q1"], "code": ["q2"]})
    with pytest.raises(ValueError, match=r"column\(s\) \['query', 'task'\]"):
        embed_profile(spy, {"math": 0.5}, wide)
    assert not spy.calls


def test_embed_profile_messages_for_profiles_naming_no_task():
    # An empty mapping was called "Profile 0 ... (all NaN)", and a DataFrame
    # profile was named by its numpy repr, "np.int64(0)".
    spy = _SpyEmbedder()
    queries = {"t": ["q1"]}
    with pytest.raises(ValueError, match="task_accuracies is an empty mapping: it"):
        embed_profile(spy, {}, queries)
    with pytest.raises(ValueError, match="task_accuracies is an empty Series: it"):
        embed_profile(spy, pd.Series(dtype=float), queries)
    with pytest.raises(ValueError, match=r"DataFrame with 1 row\(s\) but no columns"):
        embed_profile(spy, pd.DataFrame(index=[0]), queries)
    labelled = pd.Index(np.array([7]))  # int64 labels: np.int64(7)
    all_nan = pd.DataFrame({"t": [np.nan]}, index=labelled)
    with pytest.raises(ValueError, match=r"^Profile 7 of task_accuracies \(a DataF"):
        embed_profile(spy, all_nan, queries)
    with pytest.raises(ValueError, match=r"for task 't' of profile 7 \(1 value"):
        embed_profile(spy, pd.DataFrame({"t": [1.5]}, index=labelled), queries)
    with pytest.raises(TypeError, match=r"for task 't' of profile 7 \(1 value"):
        embed_profile(spy, pd.DataFrame({"t": [True]}, index=labelled), queries)
    assert not spy.calls


def test_task_profiles_are_means_of_the_scores_and_exact_counts_halves():
    evals = pd.DataFrame(
        {
            "model": ["a", "a", "a"],
            "query": ["q1", "q2", "q3"],
            "score": [0.1, 0.2, 0.35],
            "task": ["x", "x", "y"],
        }
    )
    # Means of the scores as given, in float64 (documented).
    profile = task_profiles(evals)
    assert profile.loc["a", "x"] == (0.1 + 0.2) / 2
    assert profile.loc["a", "y"] == 0.35
    # Scores given in float32 (as parquet files often hold them) are their
    # float32 values: 0.35 reads 0.3499999940.
    profile = task_profiles(evals.astype({"score": np.float32}))
    assert profile.loc["a", "y"] == float(np.float32(0.35)) == 0.3499999940395355
    # scores="exact" read 0.3499999940 * 10 as 3.4999999 and scored 3 of the
    # 10 queries; 0.35 by hand is 3.5, which rounds (to even) to 4.
    queries = {"y": [f"y{i}" for i in range(10)]}
    out = embed_profile(_TaskMeans(), profile[["y"]], queries, scores="exact")
    np.testing.assert_array_equal(out, [[0.4]])
    # A half given in float64 rounds to even, as before; a non-half to nearest.
    for accuracy, correct in [(0.35, 0.4), (0.25, 0.2), (0.26, 0.3), (0.34, 0.3)]:
        out = embed_profile(_TaskMeans(), {"y": accuracy}, queries, scores="exact")
        np.testing.assert_array_equal(out, [[correct]])


def test_embed_profile_draws_alike_whatever_the_order_of_the_tasks():
    # The query pool was concatenated in the order of the mapping's keys (or
    # the DataFrame's columns): the same profile in another order drew other
    # queries and scores for one random_state (0.34 apart once embedded).
    queries = {
        "code": [f"c{i}" for i in range(15)],
        "math": [f"m{i}" for i in range(15)],
        "prose": [f"p{i}" for i in range(15)],
    }
    profile = {"code": 0.8, "math": 0.3, "prose": 0.5}
    orders = [
        profile,
        dict(reversed(profile.items())),
        pd.Series(profile)[["math", "prose", "code"]],
        pd.DataFrame([profile])[["prose", "code", "math"]],
    ]
    for scores in ("bernoulli", "exact"):
        drawn = []
        for given in orders:
            spy = _SpyEmbedder()
            embed_profile(
                spy, given, queries, n_evals=20, scores=scores, random_state=0
            )
            drawn.append(spy.calls[0])
        for other in drawn[1:]:
            pd.testing.assert_frame_equal(other, drawn[0])
        # The order of task_profiles' columns (sorted), as given.
        spy = _SpyEmbedder()
        embed_profile(spy, profile, queries, n_evals=20, scores=scores, random_state=0)
        pd.testing.assert_frame_equal(spy.calls[0], drawn[0])


def test_min_accuracy_met_exactly_by_graded_scores_is_met():
    # Both models score 0.7 on average by hand (0.7, 0.7 and 0.9, 0.5); the
    # cheaper one is routed at every cost weight. Stored in float32 the mean
    # read 0.699999988, under the target 0.7 by more than the 1e-9 allowed:
    # "No cost weight meets the target ... ranges from 0.7 to 0.7".
    evals = pd.DataFrame(
        {
            "model": ["a", "a", "b", "b"],
            "query": ["q1", "q2", "q1", "q2"],
            "score": [0.7, 0.7, 0.9, 0.5],
        }
    )
    router = SingleBestRouter().fit(evals, model_costs={"a": 1.0, "b": 2.0})
    result = calibrate_cost_weight(router, evals, min_accuracy=0.7)
    assert result.mean_cost == 1.0 and result.n_scored == 2
    assert result.accuracy == pytest.approx(0.7, abs=1e-7)
    # A target above what any routing reaches (by more than float32 rounding)
    # is still refused.
    with pytest.raises(ValueError, match="No cost weight meets the target accuracy"):
        calibrate_cost_weight(router, evals, min_accuracy=0.7000003)


def test_pareto_front_ignores_an_accuracy_gain_of_float32_rounding():
    # Routed to b (cost 2) the test queries score 0.3 + 0.4, to a (cost 1)
    # 0.7 + 0.0: both routings reach 0.35 by hand, so the costlier one is
    # dominated. The float32 scores summed to 0.3500000089 > 0.3499999940,
    # and both points were on the front.
    encoder = {"q1": [1.0, 0.0], "q2": [0.0, 1.0]}
    train = pd.DataFrame(
        {
            "model": ["a", "a", "b", "b"],
            "query": ["q1", "q2", "q1", "q2"],
            "score": [0.1, 0.1, 0.9, 0.9],
        }
    )
    test = train.assign(score=[0.7, 0.0, 0.3, 0.4])
    router = KNNRouter(k=1, encoder=encoder).fit(
        train, model_costs={"a": 1.0, "b": 2.0}
    )
    points = cost_quality_curve(router, test).points
    assert points["mean_cost"].tolist() == [2.0, 1.0]
    np.testing.assert_allclose(points["accuracy"], [0.35, 0.35], atol=1e-7)
    assert points["pareto"].tolist() == [False, True]
    # The same on a grid of cost weights.
    grid = cost_quality_curve(router, test, [0.0, 1.0]).points
    assert grid["pareto"].tolist() == [False, True]
    # A gain of a score's worth (0.3 + 0.5 = 0.8 by hand) keeps both.
    gain = cost_quality_curve(router, test.assign(score=[0.7, 0.0, 0.3, 0.5]))
    assert gain.points["pareto"].tolist() == [True, True]


def _three_model_profiles():
    def scores(math, code):
        return [1] * math + [0] * (20 - math) + [1] * code + [0] * (20 - code)

    return {
        "model": np.repeat(["a", "b", "c"], 40),
        "query": np.tile([f"q{i}" for i in range(40)], 3),
        "task": np.tile(["math"] * 20 + ["code"] * 20, 3),
        "score": scores(18, 4) + scores(4, 18) + scores(10, 10),
    }


def test_profile_recall_is_indexed_by_the_k_asked_for():
    evals = _three_model_profiles()
    embedder = TaskAccuracyEmbedder(
        dict(zip(evals["query"], evals["task"], strict=True))
    )
    # With 3 models the default (1, 5, 10) was indexed [1, 3, 3].
    result = profile_recall_at_k(embedder, evals, n_evals=40, scores="exact")
    assert result.recall.index.tolist() == [1, 5, 10]
    assert result.recall.index.is_unique and result.recall.index.name == "k"
    assert result.recall[5] == result.recall[10] == 1.0
    with pytest.raises(ValueError, match=r"k repeats \[2\]"):
        profile_recall_at_k(embedder, evals, k=[2, 2], n_evals=40)
    with pytest.raises(ValueError, match="k=0 should be an int >= 1"):
        profile_recall_at_k(embedder, evals, k=0, n_evals=40)
    with pytest.raises(TypeError, match="k must be an int or a sequence"):
        profile_recall_at_k(embedder, evals, k=True, n_evals=40)


def test_profile_recall_validates_before_embedding():
    evals = _three_model_profiles()
    spy = _SpyEmbedder()
    with pytest.raises(ValueError, match=r"metric must be one of \['cosine'"):
        profile_recall_at_k(spy, evals, metric="l2")
    with pytest.raises(ValueError, match="reference has 4 rows"):
        profile_recall_at_k(spy, evals, reference=np.zeros((4, 2)))
    assert not spy.calls
    # A reference from another space: a matmul error deep in the distances.
    embedder = TaskAccuracyEmbedder(
        dict(zip(evals["query"], evals["task"], strict=True))
    )
    message = r"reference has embeddings of dimension 5, but the embedder embeds"
    with pytest.raises(ValueError, match=message):
        profile_recall_at_k(embedder, evals, n_evals=40, reference=np.zeros((3, 5)))


# ---------------------------------------------------------------- portfolios


def test_portfolio_curve(router, pool):
    n = len(router.classes_)
    curve = portfolio_curve(router, pool.evals, [1, 4, n], n_random=5, random_state=0)
    assert curve["value"].tolist() == [1, 4, n]
    assert curve["n_models"].tolist() == [1, 4, n]
    assert curve["accuracy"].iloc[-1] == pytest.approx(
        curve["full_pool_accuracy"].iloc[0]
    )
    assert curve["random_std"].iloc[-1] == pytest.approx(0.0, abs=1e-12)
    assert all(
        len(models) == k for models, k in zip(curve["models"], [1, 4, n], strict=True)
    )

    costs = np.array([pool.n_params[m] for m in router.classes_])
    budgets = [float(costs.min()), 200.0, 800.0]
    curve = portfolio_curve(
        router,
        pool.evals,
        budgets,
        selector=BudgetGreedySelector(),
        n_random=3,
        random_state=0,
    )
    assert (curve["cost"] <= budgets).all()
    assert "cost" in curve.columns
    curve = portfolio_curve(
        router, pool.evals, [2], selector=KCenterSelector(), n_random=0
    )
    assert np.isnan(curve["random_mean"]).all()
    ax = plot_portfolio_curve(curve)
    assert ax.get_ylabel() == "routing accuracy"
    with pytest.raises(TypeError, match="n_select or a budget"):
        portfolio_curve(router, pool.evals, [2], selector=LocusEmbedder())


def test_portfolio_baseline_skips_draws_without_a_score(three_model_knn):
    router, _ = three_model_knn
    # c has no held-out score: a draw of c alone has no accuracy (was NaN,
    # which made the baseline NaN); a or b alone, or any pair, scores 1.
    held = {"model": ["a", "b"], "query": ["q1", "q1"], "score": [1, 1]}
    Z = [[1.0, 0.0], [1.0, 0.01], [0.0, 1.0]]
    curve = portfolio_curve(
        router, held, [1, 2], embeddings=Z, n_random=20, random_state=0
    )
    assert curve["random_mean"].tolist() == [1.0, 1.0]
    assert curve["random_std"].tolist() == [0.0, 0.0]
    assert 0 < curve["n_random"].iloc[0] < 20  # the draws of c left out
    assert curve["n_random"].iloc[1] == 20  # every pair holds a or b
    curve = portfolio_curve(router, held, [1], embeddings=Z, n_random=0)
    assert curve["n_random"].tolist() == [0] and curve["random_mean"].isna().all()
    for bad in (2.5, True):
        with pytest.raises(TypeError, match=r"n_random must be an int >= 0"):
            portfolio_curve(router, held, [1], embeddings=Z, n_random=bad)


def test_budget_portfolio_needs_costs(pool):
    router = KNNRouter(5, encoder=pool.encodings).fit(pool.evals)
    Z = np.random.default_rng(0).standard_normal((16, 3))
    with pytest.raises(ValueError, match="needs model costs"):
        portfolio_curve(
            router, pool.evals, [3.0], selector=BudgetGreedySelector(), embeddings=Z
        )
    curve = portfolio_curve(
        router,
        pool.evals,
        [3.0],
        selector=BudgetGreedySelector(),
        embeddings=Z,
        costs=np.ones(16),
        random_state=0,
    )
    assert curve["n_models"].tolist() == [3]


def test_portfolio_curve_validates_values(three_model_knn):
    router, evals = three_model_knn
    Z = [[0.9, 0.1], [1.0, 0.0], [0.0, 1.0]]
    # 2 was "not iterable", "12" was read as sizes "1" and "2", [] gave an
    # empty frame.
    message = r"values must be a sequence of portfolio sizes \(n_select\)"
    with pytest.raises(TypeError, match=message + r"; got 2 \(int\)\. Pass \[2\]"):
        portfolio_curve(router, evals, 2, embeddings=Z)
    with pytest.raises(TypeError, match=message + ", not the string '12'"):
        portfolio_curve(router, evals, "12", embeddings=Z)
    with pytest.raises(ValueError, match="values must hold at least one of the"):
        portfolio_curve(router, evals, [], embeddings=Z)
    for bad in ([1.5], [True], [[1, 2]], [1, "2"]):
        with pytest.raises(TypeError, match=message + ", each an int; got"):
            portfolio_curve(router, evals, bad, embeddings=Z)
    budgeted = {"selector": BudgetGreedySelector(), "costs": [1.0, 1.0, 0.5]}
    with pytest.raises(TypeError, match=r"budgets \(budget\), each a number; got "):
        portfolio_curve(router, evals, [True], embeddings=Z, **budgeted)
    # Any sequence of them: a range of sizes, an array of budgets.
    curve = portfolio_curve(router, evals, range(1, 3), embeddings=Z, random_state=0)
    assert curve["value"].tolist() == [1, 2]
    curve = portfolio_curve(
        router, evals, np.array([1.5]), embeddings=Z, n_random=2, **budgeted
    )
    assert curve["value"].tolist() == [1.5]


# ---------------------------------------------------------------- the cost knob


def test_cost_knob_refuses_evaluations_without_a_score_column():
    # A misspelt score column was read as plain queries and scored as NaN.
    evals = {
        "model": ["big", "big", "small", "small"],
        "query": ["q1", "q2", "q1", "q2"],
        "score": [1, 1, 1, 0],
    }
    router = KNNRouter(1, encoder={"q1": [1.0, 0.0], "q2": [0.0, 1.0]})
    router.fit(evals, model_costs={"big": 11.0, "small": 1.0})
    misspelt = pd.DataFrame(evals).rename(columns={"score": "scores"})
    message = r"evals is missing required column\(s\) \['score'\]"
    with pytest.raises(ValueError, match=message):
        calibrate_cost_weight(router, misspelt, target_cost=6)
    # A DataFrame of queries alone is still routed among the whole pool.
    queries = pd.DataFrame({"query": ["q1", "q2"]})
    assert calibrate_cost_weight(router, queries, target_cost=6).n_queries == 2


# ---------------------------------------------------------------- plots


def test_plots_return_figures(family_embeddings, router):
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    Z, names, family = family_embeddings
    fig = plot_model_dendrogram(Z, names=names)
    assert isinstance(fig, Figure) and len(fig.axes) == 3
    heatmap = fig.axes[1]
    assert {t.get_text() for t in heatmap.get_xticklabels()} == set(names)
    fig = plot_model_dendrogram(router, heatmap=False, metric="cosine")
    assert isinstance(fig, Figure) and len(fig.axes) == 1
    ax = plot_model_map(Z, names=names, groups=family)
    assert isinstance(ax, Axes) and len(ax.texts) == len(Z)
    assert len(ax.get_legend().get_texts()) == family.max() + 1
    ax = plot_model_map(router, method="tsne", annotate=False, random_state=0)
    assert isinstance(ax, Axes) and not ax.texts
    with pytest.raises(ValueError, match="method must be 'pca', 'mds' or 'tsne'"):
        plot_model_map(Z, method="umap")


def test_principal_coordinates_keep_euclidean_distances_and_are_pca():
    from scipy.spatial.distance import pdist, squareform

    from locus_sklearn.inspection._plotting import principal_coordinates

    rng = np.random.default_rng(0)
    Z = rng.normal(size=(6, 2)) * [3.0, 1.0]
    D = squareform(pdist(Z))
    P = principal_coordinates(D)
    # Points in the plane: their distances are drawn exactly ...
    np.testing.assert_allclose(squareform(pdist(P)), D, atol=1e-10)
    # ... and the coordinates are the PCA scores, up to each axis's sign.
    from sklearn.decomposition import PCA

    scores = PCA(n_components=2).fit_transform(Z)
    np.testing.assert_allclose(np.abs(P), np.abs(scores), atol=1e-10)
    # Distances no Euclidean space holds (1 + 1 < 5; score disagreements
    # often are such): the negative eigenvalue is left out, no NaN.
    bent = np.array([[0.0, 1.0, 5.0], [1.0, 0.0, 1.0], [5.0, 1.0, 0.0]])
    P = principal_coordinates(bent)
    assert np.isfinite(P).all()
    np.testing.assert_allclose(np.abs(P[:, 0]), [2.5, 0.0, 2.5], atol=1e-12)
    np.testing.assert_allclose(P[:, 1], 0.0, atol=1e-12)


def test_model_map_of_precomputed_distances(family_embeddings):
    from scipy.spatial.distance import pdist, squareform

    Z, names, family = family_embeddings
    D = pd.DataFrame(squareform(pdist(Z)), index=names, columns=names)
    ax = plot_model_map(D, method="mds", metric="precomputed", groups=family)
    assert [t.get_text() for t in ax.texts] == [str(n) for n in names]
    assert ax.get_xlabel() == "MDS 1"
    # Classical MDS of the embeddings' own Euclidean distances is their PCA.
    drawn = np.vstack([c.get_offsets() for c in ax.collections])
    pca = plot_model_map(Z, names=names, groups=family, metric="euclidean")
    expected = np.vstack([c.get_offsets() for c in pca.collections])
    np.testing.assert_allclose(np.abs(drawn), np.abs(expected), atol=1e-8)
    # The same map from embeddings with method="mds".
    mds = plot_model_map(
        Z, names=names, groups=family, method="mds", metric="euclidean"
    )
    again = np.vstack([c.get_offsets() for c in mds.collections])
    np.testing.assert_allclose(again, drawn, atol=1e-8)
    ax = plot_model_map(D, method="tsne", metric="precomputed", random_state=0)
    assert len(ax.texts) == len(names)
    with pytest.raises(ValueError, match="method='pca' needs embeddings"):
        plot_model_map(D, metric="precomputed")
    bad = D.copy()
    bad.iloc[0, 1] = bad.iloc[1, 0] = np.nan
    with pytest.raises(ValueError, match="NaN distance"):
        plot_model_map(bad, method="mds", metric="precomputed")
    with pytest.raises(ValueError, match="names must be None"):
        plot_model_map(D, names=names, method="mds", metric="precomputed")


def _labels_by_group(ax):
    """Each legend group's point labels, read off the drawn points."""
    at = {tuple(np.round(t.xy, 9)): t.get_text() for t in ax.texts}
    return {
        c.get_label(): sorted(at[tuple(np.round(p, 9))] for p in c.get_offsets())
        for c in ax.collections
    }


def test_model_map_reads_groups_by_model_name():
    X = pd.DataFrame(
        [[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]],
        index=["b2", "b1", "a2", "a1"],
    )
    by_name = pd.Series({"a1": "A", "a2": "A", "b1": "B", "b2": "B", "x": "X"})
    expected = {"A": ["a1", "a2"], "B": ["b1", "b2"]}
    # A Series sorted by name was paired with the rows by position.
    assert _labels_by_group(plot_model_map(X, groups=by_name)) == expected
    assert _labels_by_group(plot_model_map(X, groups=dict(by_name))) == expected
    # A list is in the models' order.
    listed = plot_model_map(X, groups=["B", "B", "A", "A"])
    assert _labels_by_group(listed) == expected
    with pytest.raises(ValueError, match=r"groups is a Series.*no group for 1 model"):
        plot_model_map(X, groups=by_name.drop("a1"))
    with pytest.raises(ValueError, match=r"groups is a mapping.*\['b2', 'b1', 'a2'\]"):
        plot_model_map(X, groups={"a1": "A"})
    with pytest.raises(TypeError, match="got the string 'A'"):
        plot_model_map(X, groups="A")


@pytest.mark.parametrize("missing", [np.nan, None])
def test_model_map_refuses_missing_groups(missing):
    # A NaN group was drawn as an empty legend entry: its models vanished.
    X = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
    message = r"groups has 2 missing value\(s\).*\['b1', 'a2'\]"
    with pytest.raises(ValueError, match=message):
        plot_model_map(
            X, names=["b2", "b1", "a2", "a1"], groups=["b", missing, missing, "a"]
        )
    by_name = pd.Series({"a1": "a", "a2": missing, "b1": "b", "b2": "b"})
    with pytest.raises(ValueError, match=r"1 missing value\(s\).*\['a2'\]"):
        plot_model_map(X, names=["b2", "b1", "a2", "a1"], groups=by_name)


def test_model_map_pca_is_deterministic_for_wide_embeddings():
    # d > 500 made PCA use its randomized solver, unseeded: a new map per call.
    from sklearn.decomposition import PCA
    from sklearn.preprocessing import normalize

    Z = np.random.default_rng(0).standard_normal((30, 600))

    def drawn(ax):
        return np.vstack([c.get_offsets() for c in ax.collections])

    first = drawn(plot_model_map(Z, random_state=0))
    np.testing.assert_array_equal(first, drawn(plot_model_map(Z, random_state=0)))
    exact = PCA(2, svd_solver="full").fit_transform(normalize(Z))
    np.testing.assert_allclose(first, exact, atol=1e-12)


def test_model_map_mds_is_deterministic_and_leaves_the_global_rng():
    # Over 200 models KernelPCA used ARPACK, started from np.random's state.
    from scipy.spatial.distance import pdist, squareform

    Z = np.random.default_rng(0).normal(size=(250, 8))

    def drawn(ax):
        return np.vstack([c.get_offsets() for c in ax.collections])

    # The global RNG is what is checked, so its legacy API is used on purpose.
    _, key, pos, *_ = np.random.get_state()  # noqa: NPY002
    first = drawn(plot_model_map(Z, method="mds", metric="euclidean", annotate=False))
    _, key_after, pos_after, *_ = np.random.get_state()  # noqa: NPY002
    assert pos_after == pos  # not drawn from
    np.testing.assert_array_equal(key_after, key)
    again = drawn(plot_model_map(Z, method="mds", metric="euclidean", annotate=False))
    np.testing.assert_array_equal(first, again)
    # Still the exact classical MDS: the distances of the 2-D PCA scores.
    from sklearn.decomposition import PCA

    scores = PCA(2, svd_solver="full").fit_transform(Z)
    np.testing.assert_allclose(
        squareform(pdist(first)), squareform(pdist(scores)), atol=1e-8
    )


def test_model_map_tsne_of_one_dimensional_embeddings():
    # metric="euclidean" started t-SNE from a 2-component PCA of 1-D data
    # and failed with scikit-learn's PCA error.
    X = np.random.default_rng(0).normal(size=(6, 1))

    def drawn(ax):
        return np.vstack([c.get_offsets() for c in ax.collections])

    first = plot_model_map(X, method="tsne", metric="euclidean", random_state=0)
    points = drawn(first)
    assert points.shape == (6, 2) and np.isfinite(points).all()
    assert len(first.texts) == 6
    again = plot_model_map(X, method="tsne", metric="euclidean", random_state=0)
    np.testing.assert_array_equal(points, drawn(again))


def test_dendrogram_figure_is_capped_and_unlabelled_for_large_pools():
    # The figure grew 0.3 inch per model without bound: 602 x 603 inches at
    # 2,000 models, and savefig ran out of memory at 3,000.
    Z = np.random.default_rng(0).normal(size=(2000, 3))
    fig = plot_model_dendrogram(Z)
    np.testing.assert_array_equal(fig.get_size_inches(), [33.0, 34.0])
    # 2,000 names would overlap: none is written, under the tree or the heatmap.
    tree, heatmap = fig.axes[:2]
    assert not tree.get_xticklabels()
    assert not heatmap.get_xticklabels() and not heatmap.get_yticklabels()
    fig = plot_model_dendrogram(Z, heatmap=False)
    np.testing.assert_array_equal(fig.get_size_inches(), [32.0, 4.0])
    assert not fig.axes[0].get_xticklabels()
    # Up to 100 models nothing changed: 0.3 inch per model (at least 4), names.
    for n, size in [(4, 4.0), (20, 8.0), (100, 32.0)]:
        names = [f"m{i}" for i in range(n)]
        Z = np.random.default_rng(n).normal(size=(n, 3))
        fig = plot_model_dendrogram(Z, names=names)
        np.testing.assert_array_equal(fig.get_size_inches(), [size + 1, size + 2])
        heatmap = fig.axes[1]
        assert sorted(t.get_text() for t in heatmap.get_xticklabels()) == sorted(names)
        fig = plot_model_dendrogram(Z, names=names, heatmap=False)
        np.testing.assert_array_equal(fig.get_size_inches(), [size, 4.0])
        assert len(fig.axes[0].get_xticklabels()) == n


def test_plots_of_coinciding_models_raise_no_third_party_warning():
    # All pointing one way: cosine distances all 0. PCA divided 0 by 0
    # (numpy RuntimeWarning) and the dendrogram's y-limits were (0, 0)
    # (matplotlib UserWarning).
    Z = [[1.0, 2.0], [2.0, 4.0], [3.0, 6.0]]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ax = plot_model_map(Z)
        np.testing.assert_array_equal(ax.collections[0].get_offsets(), np.zeros((3, 2)))
        ax = plot_model_map([[1.0, 2.0]] * 3, metric="euclidean")
        np.testing.assert_array_equal(ax.collections[0].get_offsets(), np.zeros((3, 2)))
        for heatmap in (True, False):
            fig = plot_model_dendrogram(Z, metric="cosine", heatmap=heatmap)
            assert fig.axes[0].get_ylim() == (0.0, 1.0)


def test_model_map_tsne_of_identical_embeddings():
    # metric="euclidean" started t-SNE from a PCA of identical points, which
    # scikit-learn scales by the first component's spread (0): the NaN start
    # crashed the Python process (segmentation fault).
    ax = plot_model_map([[1.0, 2.0]] * 3, method="tsne", metric="euclidean")
    points = ax.collections[0].get_offsets()
    assert points.shape == (3, 2) and np.isfinite(points).all()


def test_model_map_refuses_ambiguous_groups():
    X = np.random.default_rng(0).normal(size=(4, 3))
    names = ["a", "b", "c", "d"]
    # A repeated name in a Series' index: the last group given for it won.
    repeated = pd.Series(["A", "B", "C", "D", "E"], index=["a", "a", "b", "c", "d"])
    with pytest.raises(ValueError, match=r"index repeats 1 name\(s\): \['a'\]"):
        plot_model_map(X, names=names, groups=repeated)
    # 1, True and 1.0 compare equal (one group); 1 and "1" both read "1".
    with pytest.raises(TypeError, match=r"mixes value types: int \(e.g. 1\), bool"):
        plot_model_map(X, names=names, groups=[1, True, 1.0, "1"])
    with pytest.raises(TypeError, match=r"int \(e.g. 1\), str \(e.g. '1'\)"):
        plot_model_map(X, names=names, groups=[1, "1", 1, "1"])
    # Groups of one type are fine, read as given.
    ax = plot_model_map(X, names=names, groups=np.array([2, 1, 2, 1]))
    assert _labels_by_group(ax) == {"2": ["a", "c"], "1": ["b", "d"]}


def test_portfolio_curve_plot_validates_values_and_lines():
    curve = pd.DataFrame(
        {
            "value": [3, 1, 2],
            "accuracy": [0.8, 0.5, np.nan],
            "random_mean": [0.7, 0.4, 0.6],
            "random_std": [0.1] * 3,
            "full_pool_accuracy": [0.85] * 3,
        }
    )
    # Strings were sorted as text: "10" before "2".
    as_text = curve.assign(value=["10", "2", "3"])
    with pytest.raises(TypeError, match=r"curve column\(s\) 'value' \(.*\) must"):
        plot_portfolio_curve(as_text)
    with pytest.raises(ValueError, match=r"'value'\] has 1 value\(s\) that are not"):
        plot_portfolio_curve(curve.assign(value=[3, np.nan, 2]))
    # All-NaN accuracy drew an empty axes without a word.
    with pytest.raises(ValueError, match=r"'accuracy'\] has no finite value in its 3"):
        plot_portfolio_curve(curve.assign(accuracy=np.nan))
    # The first row's full-pool accuracy was drawn for all.
    varying = curve.assign(full_pool_accuracy=[0.85, 0.9, 0.85])
    with pytest.raises(ValueError, match=r"one finite value on every row.*0\.9"):
        plot_portfolio_curve(varying)
    assert plot_portfolio_curve(varying, full_pool=False)
    # A NaN point is a gap; label=0 was replaced by "selected".
    ax = plot_portfolio_curve(curve, label=0)
    assert ax.lines[0].get_xdata().tolist() == [1, 2, 3]
    np.testing.assert_array_equal(ax.lines[0].get_ydata(), [0.5, np.nan, 0.8])
    assert ax.lines[-1].get_ydata()[0] == 0.85
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == ["0", "random", "full pool"]
    ax = plot_portfolio_curve(curve)
    assert ax.get_legend().get_texts()[0].get_text() == "selected"


def test_failed_plots_leave_no_figure():
    import matplotlib.pyplot as plt

    curve = pd.DataFrame(
        {
            "value": [5, 1, 3],
            "accuracy": [0.8, 0.5, 0.7],
            "random_mean": [0.7, 0.4, 0.6],
            "random_std": [0.1] * 3,
            "full_pool_accuracy": [0.85] * 3,
        }
    )
    failing = [
        (lambda: plot_model_map(np.eye(3), groups=["a", "b"]), "one entry per model"),
        (lambda: plot_model_map([[1.0, 2.0]]), "embeddings has 1 model; a map"),
        (
            lambda: plot_model_map([[1.0, 2.0]], method="mds"),
            "embeddings has 1 model; a map",
        ),
        (
            lambda: plot_model_map([[1.0], [2.0], [3.0]], metric="euclidean"),
            "method='pca' draws 2 principal components, but embeddings has 1 dim",
        ),
        (lambda: plot_portfolio_curve(curve.iloc[:0]), r"curve is empty \(0 rows\)"),
        (lambda: plot_portfolio_curve({"value": [1]}), "curve must be a DataFrame"),
        (
            lambda: plot_portfolio_curve(curve.drop(columns="random_mean")),
            r"missing column\(s\) \['random_mean'\]",
        ),
    ]
    for call, message in failing:
        before = len(plt.get_fignums())
        with pytest.raises((ValueError, TypeError), match=message):
            call()
        assert len(plt.get_fignums()) == before, message
    # A 1-d pool still maps with MDS; a curve's points are joined by value.
    plot_model_map([[1.0], [2.0], [3.0]], metric="euclidean", method="mds")
    ax = plot_portfolio_curve(curve)
    assert ax.lines[0].get_xdata().tolist() == [1, 3, 5]
    assert ax.lines[0].get_ydata().tolist() == [0.5, 0.7, 0.8]
    assert plot_portfolio_curve(curve.drop(columns="random_mean"), random=False)


def test_plots_without_matplotlib(monkeypatch, family_embeddings):
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    Z, _, _ = family_embeddings
    with pytest.raises(ImportError, match="pip install matplotlib"):
        plot_model_map(Z)


# ------------------------------------------------- fixes of the inspection probes


def test_fallback_and_portfolio_route_overflowed_utilities_by_cost():
    # At cost_weight 1e308 every utility overflows to -inf: predict and score
    # route to the cheapest model ("c"), these routed to the first ("a").
    evals = {
        "model": ["a", "a", "b", "b", "c", "c"],
        "query": ["q1", "q2"] * 3,
        "score": [1, 1, 1, 0, 0, 1],
    }
    costs = {"a": 5.0, "b": 3.0, "c": 2.0}
    router = SingleBestRouter(cost_weight=1e308).fit(evals, model_costs=costs)
    assert router.predict(["q1", "q2"]).tolist() == ["c", "c"]
    Z = [[1.0, 0.0], [0.9, 0.2], [0.0, 1.0]]
    fallback = fallback_routing_accuracy(router, evals, k=[1], embeddings=Z)
    assert fallback["no_outage_accuracy"].tolist() == [router.score(evals)] == [0.5]
    curve = portfolio_curve(router, evals, [2, 3], embeddings=Z, n_random=3)
    assert curve["full_pool_accuracy"].tolist() == [0.5, 0.5]
    assert curve["accuracy"].iloc[1] == 0.5
    # A portfolio's queries go to its own cheapest model, as predict(models=).
    score = {("a", "q1"): 1, ("a", "q2"): 1, ("b", "q1"): 1, ("b", "q2"): 0}
    score.update({("c", "q1"): 0, ("c", "q2"): 1})
    Z = [[1.0, 0.0], [0.0, 1.0], [0.1, 0.9]]  # selects a and c
    curve = portfolio_curve(router, evals, [2], embeddings=Z, n_random=0)
    portfolio = list(curve["models"].iloc[0])
    routed = router.predict(["q1", "q2"], models=portfolio)
    assert sorted(portfolio) == ["a", "c"] and routed.tolist() == ["c", "c"]
    expected = np.mean([score[m, q] for m, q in zip(routed, ["q1", "q2"], strict=True)])
    assert curve["accuracy"].iloc[0] == expected == 0.5


@pytest.mark.parametrize(
    ("names", "error", "message"),
    [
        ({"a", "b", "c"}, TypeError, r"^names must be a sequence .* got a set"),
        (frozenset("abc"), TypeError, r"^names must be a sequence .* got a frozenset"),
        ({"a": 0, "b": 1, "c": 2}, TypeError, r"^names must .* got a dict"),
        (5, TypeError, r"^names must be a sequence of model names, .* got 5 \(int\)"),
        (["a", None, "c"], ValueError, r"^names has 1 missing name\(s\) \(None or"),
        (["a", np.nan, "c"], ValueError, r"^names has 1 missing name\(s\) \(None or"),
        ([1, 1.0, 2], ValueError, r"^names has duplicates: \[1.0\]"),
        ([True, 1, 2], ValueError, r"^names has duplicates: \[1\]"),
        ([1, "1", 2], ValueError, r"^names has duplicates: \['1'\]"),
    ],
)
def test_names_are_an_ordered_sequence_of_distinct_names(names, error, message):
    # A set was paired with the rows in hash order (PYTHONHASHSEED), 5 gave a
    # bare "not iterable", None became a NaN label, and 1 and 1.0 (one
    # dictionary key) passed the duplicate check.
    Z = [[1.0, 0.0], [0.9, 0.2], [0.0, 1.0]]
    with pytest.raises(error, match=message):
        fallback_order(Z, names=names)
    with pytest.raises(error, match="^reference_" + message[1:]):
        match_models(Z, Z, threshold=0.1, reference_names=names)


def test_portfolio_curve_names_a_selector_that_is_not_an_estimator(three_model_knn):
    router, evals = three_model_knn
    Z = [[0.9, 0.1], [1.0, 0.0], [0.0, 1.0]]
    # Was AttributeError: 'str' object has no attribute 'get_params'.
    with pytest.raises(TypeError, match=r"^selector must be an unfitted selector .*"):
        portfolio_curve(router, evals, [1], embeddings=Z, selector="kmedoids")
    # Was "... got None (NoneType). Pass [None] for one."
    with pytest.raises(TypeError, match=r"got None \(NoneType\)\.$"):
        portfolio_curve(router, evals, None, embeddings=Z)


def test_fingerprint_calibration_of_an_unfitted_router_is_not_fitted(pool):
    # Was a TypeError saying the router has no transform.
    with pytest.raises(NotFittedError, match="LocusRouter instance is not fitted"):
        calibrate_fingerprint_threshold(LocusRouter(), pool.evals, n_evals=30)


def test_fingerprint_calibration_warns_of_few_evaluations_by_n_evals(router, pool):
    # The embedder's warning named the internal per-subset models
    # ('m0000000r0000') and asked for more scored queries per model.
    kwargs = {"n_resamples": 2, "n_evals": 8, "random_state": 0}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        calibrate_fingerprint_threshold(router, pool.evals, **kwargs)
    few = [w for w in caught if issubclass(w.category, FewEvaluationsWarning)]
    assert len(few) == 1
    assert str(few[0].message).startswith(
        "n_evals=8 is fewer evaluations than the embedder's enc_size[0]=16"
    )
    assert few[0].filename == __file__
    with warnings.catch_warnings():
        warnings.simplefilter("error", FewEvaluationsWarning)
        with pytest.raises(FewEvaluationsWarning, match=r"^n_evals=8 is fewer"):
            calibrate_fingerprint_threshold(router, pool.evals, **kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # 240 evaluations: no warning at all
        calibrate_fingerprint_threshold(router, pool.evals, n_resamples=2, n_evals=16)


def test_portfolio_curve_random_budget_portfolios_use_the_selectors_rounding():
    # 0.1 + 0.2 is over the float 0.3; BudgetGreedySelector takes a total
    # within rounding of the budget, and the random baselines of
    # portfolio_curve must be held to the same budget: every maximal random
    # portfolio under 0.3 holds both cheap models.
    from locus_sklearn.inspection._portfolio import _random_feasible

    rng = np.random.RandomState(0)
    costs = np.array([0.1, 0.2, 5.0])
    draws = [sorted(_random_feasible(costs, 0.3, rng).tolist()) for _ in range(20)]
    assert draws == [[0, 1]] * 20


def test_portfolio_curve_names_the_cheapest_model_of_costs_by_name():
    # The selector is fitted on the embeddings in classes_ order, so its
    # error named the cheapest model by that position, "costs[0]=1.0"
    # (alpha sorts first), an order the user never wrote.
    enc = {"q1": [1.0, 0.0], "q2": [0.0, 1.0]}
    evals = {
        "model": ["zeta", "zeta", "alpha", "alpha"],
        "query": ["q1", "q2"] * 2,
        "score": [1, 1, 1, 0],
    }
    router = KNNRouter(1, encoder=enc).fit(
        evals, model_costs={"zeta": 5.0, "alpha": 1.0}
    )
    message = (
        r"values holds budget=0.5, which should be >= the cheapest model's "
        r"cost, costs\['alpha'\]=1.0; no model fits"
    )
    selector = BudgetGreedySelector(metric="euclidean")
    Z = [[0.0, 1.0], [1.0, 0.0]]
    for costs in (None, {"zeta": 5.0, "alpha": 1.0}, [1.0, 5.0]):
        with pytest.raises(ValueError, match=message):
            portfolio_curve(
                router, evals, [2.0, 0.5], selector=selector, costs=costs, embeddings=Z
            )
    # A budget within rounding of the cheapest cost still fits, as in the
    # selector: 0.1 + 0.2 is over the float 0.3.
    curve = portfolio_curve(
        router, evals, [0.3], selector=selector, costs=[0.1 + 0.2, 5.0],
        embeddings=Z, n_random=0,
    )  # fmt: skip
    assert curve["models"].tolist() == [("alpha",)]


class _FixedProbaRouter(BaseEstimator):
    """A custom cost-aware router: fixed P(correct) rows for q0, q1, ..."""

    def __init__(self, proba=None, costs=None):
        self.proba = proba
        self.costs = costs

    def fit(self, evals=None):
        self.classes_ = np.array(["a", "b", "c"], dtype=object)
        self.model_costs_ = np.asarray(self.costs, dtype=np.float64)
        return self

    def predict_proba(self, queries):
        rows = [int(q[1:]) for q in queries]
        return np.asarray(self.proba, dtype=np.float64)[rows]


def test_cost_knob_refuses_non_finite_or_misshapen_predict_proba():
    from locus_sklearn.inspection import cost_quality_curve

    evals = {"model": ["a", "b", "c"], "query": ["q0"] * 3, "score": [1, 1, 0.0]}
    costs = [10.0, 5.0, 1.0]
    # By hand with P = [0.9, 0.6, 0.2]: a -> b where 0.9 - 10λ = 0.6 - 5λ
    # (λ = 0.06), b -> c where 0.6 - 5λ = 0.2 - λ (λ = 0.1).
    finite = _FixedProbaRouter([[0.9, 0.6, 0.2]], costs).fit()
    points = cost_quality_curve(finite, evals).points
    assert points["mean_cost"].tolist() == [10.0, 5.0, 1.0]
    assert points["accuracy"].tolist() == [1.0, 1.0, 0.0]
    assert points["upper"].tolist() == pytest.approx([0.06, 0.1, np.inf])
    # With P(b) NaN the exact curve kept q0 at a for every λ (mean cost 10)
    # and calibrate_cost_weight(target_cost=1) said 1 was out of reach, while
    # the grid and predict moved it to c: np.min carried the NaN crossing and
    # the query was dropped. P(correct) is finite throughout the package
    # (route_by_utility, the metrics' scorers): refused, in every mode.
    nan = _FixedProbaRouter([[0.9, np.nan, 0.2]], costs).fit()
    message = (
        r"^_FixedProbaRouter\.predict_proba must return finite P\(correct\); got "
        r"1 non-finite value\(s\), the first nan for query 'q0' and model 'b'\.$"
    )
    with pytest.raises(ValueError, match=message):
        cost_quality_curve(nan, evals)
    with pytest.raises(ValueError, match=message):
        cost_quality_curve(nan, evals, [0.0, 0.1, 1.0])
    with pytest.raises(ValueError, match=message):
        calibrate_cost_weight(nan, evals, target_cost=1)
    with pytest.raises(ValueError, match=message):
        calibrate_cost_weight(nan, ["q0"], target_cost=1)  # queries only
    inf = _FixedProbaRouter([[0.9, np.inf, 0.2]], costs).fit()
    with pytest.raises(ValueError, match=r"the first inf for query 'q0' and model"):
        cost_quality_curve(inf, evals)
    # Two columns for three models was a bare IndexError.
    narrow = _FixedProbaRouter([[0.9, 0.2]], costs).fit()
    with pytest.raises(
        ValueError,
        match=r"^_FixedProbaRouter\.predict_proba must return shape \(n_queries, "
        r"n_models\) = \(1, 3\), .* got shape \(1, 2\)\.$",
    ):
        cost_quality_curve(narrow, evals)


def test_cost_quality_area_by_hand_without_numpy_2s_trapezoid(monkeypatch):
    from locus_sklearn.inspection import cost_quality_curve
    from locus_sklearn.inspection._cost import _aiq

    # numpy 1.24-1.26 (supported) have no np.trapezoid: the area was an
    # AttributeError there.
    monkeypatch.delattr(np, "trapezoid", raising=False)
    cost = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    accuracy = np.array([0.2, 0.3, 0.8, 0.6, 0.9, 0.5])
    # Upper convex hull: (1, .2), (3, .8), (5, .9), (6, .5); (2, .3) and
    # (4, .6) lie under it. Non-decreasing, (6, .5) counts as .9 (the point
    # at cost 5 is within that budget). Trapezoids: 2 * (.2 + .8) / 2
    # + 2 * (.8 + .9) / 2 + 1 * .9 = 3.6, over the span 5.
    assert _aiq(cost, accuracy) == pytest.approx(3.6 / 5)
    # The three points of the curve below, (10, 1), (5, 1) and (1, 0):
    # (4 * .5 + 5 * 1) / 9.
    evals = {"model": ["a", "b", "c"], "query": ["q0"] * 3, "score": [1, 1, 0.0]}
    router = _FixedProbaRouter([[0.9, 0.6, 0.2]], [10.0, 5.0, 1.0]).fit()
    assert cost_quality_curve(router, evals).auc == pytest.approx(7 / 9)


@pytest.mark.filterwarnings("ignore:.*fewer than 2 \\* n_evals")
def test_fingerprint_calibration_takes_a_duck_typed_embedder_with_fit():
    # Documented for anything with transform(evals); one with fit too (not a
    # scikit-learn estimator) got scikit-learn's AttributeError about
    # __sklearn_tags__ from check_is_fitted.
    class MeanScore:
        def fit(self, evals):
            return self

        def transform(self, evals):
            return pd.DataFrame(evals).groupby("model")["score"].mean().to_frame()

    # As in the zero-distance test: a and a2 at 1, c at 0, so 4 of the 12
    # cross pairs are at distance 0 and the others at 1.
    evals = _TWINS_AND_ONE_OTHER
    kwargs = {"n_resamples": 2, "n_evals": 4, "metric": "euclidean"}
    result = calibrate_fingerprint_threshold(
        MeanScore(), evals, false_match_rate=0.4, **kwargs
    )
    assert result.threshold == 0.5
    assert result.false_match_rate == pytest.approx(1 / 3)

    # An unready duck-typed embedder speaks for itself through transform.
    class Unfitted(MeanScore):
        def transform(self, evals):
            raise RuntimeError("Unfitted: call fit first")

    with pytest.raises(RuntimeError, match="^Unfitted: call fit first$"):
        calibrate_fingerprint_threshold(
            Unfitted(), evals, false_match_rate=0.4, **kwargs
        )
