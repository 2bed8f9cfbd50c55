"""Tests of the peer routers in locus_sklearn.baselines."""

import contextlib
import pickle
import warnings

import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.model_selection import GridSearchCV, GroupKFold, KFold, cross_val_score
from sklearn.utils._param_validation import InvalidParameterError

from locus_sklearn._evals import check_evals
from locus_sklearn.baselines import (
    IRTRouter,
    KMeansRouter,
    KNNRouter,
    MatrixFactorizationRouter,
    SingleBestRouter,
)
from locus_sklearn.metrics import correctness_accuracy
from locus_sklearn.parallel import predict_proba_chunked


def _unit(degrees):
    angle = np.deg2rad(degrees)
    return np.array([np.cos(angle), np.sin(angle)], dtype=np.float32)


def make_pool(
    n_models=4, n_queries=60, n_features=8, coverage=1.0, sharpness=3.0, seed=0
):
    """A tiny synthetic pool whose correctness depends on the query.

    P(correct | m, x) = sigmoid(sharpness * <w_m, x>) with random unit w_m and
    x, so the best model differs from query to query. Each model is scored on
    a random ``coverage`` fraction of the queries (at least 5).

    Returns (evals, encodings, probabilities of shape (n_queries, n_models)).
    """
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n_queries, n_features)).astype(np.float32)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    W = rng.standard_normal((n_models, n_features))
    W /= np.linalg.norm(W, axis=1, keepdims=True)
    proba = 1 / (1 + np.exp(-sharpness * X @ W.T))
    queries = np.array([f"q{i:04d}" for i in range(n_queries)], dtype=object)
    coverages = np.broadcast_to(coverage, (n_models,))
    frames = []
    for m in range(n_models):
        n = max(5, int(round(coverages[m] * n_queries)))
        rows = np.sort(rng.choice(n_queries, n, replace=False))
        frames.append(
            pd.DataFrame(
                {
                    "model": f"m{m}",
                    "query": queries[rows],
                    "score": (rng.random(n) < proba[rows, m]).astype(float),
                }
            )
        )
    return (
        pd.concat(frames, ignore_index=True),
        dict(zip(queries, X, strict=True)),
        proba,
    )


POOL, ENCODINGS, _ = make_pool()
# The test queries: unseen by the fits below (encodings added to the mapping).
_, _EXTRA, _ = make_pool(n_queries=20, seed=1)
ENCODINGS.update({f"new{q}": v for q, v in _EXTRA.items()})
NEW_QUERIES = [f"new{q}" for q in _EXTRA]


def _mf(**params):
    params = {
        "embedding_dim": 8,
        "max_epochs": 3,
        "batch_size": 64,
        "random_state": 0,
        **params,
    }
    return MatrixFactorizationRouter(encoder=ENCODINGS, **params)


def _irt(**params):
    params = {
        "n_dims": 4,
        "hidden_dim": 8,
        "max_epochs": 3,
        "batch_size": 64,
        "random_state": 0,
        **params,
    }
    return IRTRouter(encoder=ENCODINGS, **params)


# Each peer with small settings, and a grid for GridSearchCV.
ROUTERS = {
    "single_best": (lambda **p: SingleBestRouter(**p), {"cost_weight": [0.0, 0.1]}),
    "knn": (lambda **p: KNNRouter(5, encoder=ENCODINGS, **p), {"k": [3, 5]}),
    "kmeans": (
        lambda **p: KMeansRouter(3, encoder=ENCODINGS, random_state=0, **p),
        {"n_clusters": [2, 3]},
    ),
    "mf": (_mf, {"embedding_dim": [4, 8]}),
    "irt": (_irt, {"n_dims": [2, 4]}),
}
ALL = pytest.mark.parametrize("name", list(ROUTERS))


def make_router(name, **params):
    return ROUTERS[name][0](**params)


@pytest.fixture(scope="module")
def fitted():
    """Each peer fitted once on POOL (do not mutate)."""
    return {name: make_router(name).fit(POOL) for name in ROUTERS}


# --- hand-computed cases -----------------------------------------------------

# Six training queries on the unit circle, and two test queries.
HAND_ENCODER = {
    "q1": _unit(0),
    "q2": _unit(20),
    "q3": _unit(40),
    "q4": _unit(90),
    "q5": _unit(110),
    "q6": _unit(130),
    "t": _unit(5),
    "u": _unit(95),
}
HAND_EVALS = pd.DataFrame(
    [
        ("a", "q1", 1),
        ("a", "q2", 1),
        ("a", "q3", 0),
        ("a", "q4", 0),
        ("a", "q5", 0),
        ("a", "q6", 1),
        # b is evaluated on four of the six queries, c on two.
        ("b", "q1", 0),
        ("b", "q4", 1),
        ("b", "q5", 1),
        ("b", "q6", 0),
        ("c", "q2", 1),
        ("c", "q6", 0),
    ],
    columns=["model", "query", "score"],
)


def test_knn_hand_computed():
    # t (5 deg) by distance: q1 5, q2 15, q3 35, q4 85, q5 105, q6 125.
    # u (95 deg) by distance: q4 5, q5 15, q6 35, q3 55, q2 75, q1 95.
    router = KNNRouter(2, encoder=HAND_ENCODER).fit(HAND_EVALS)
    expected = [
        # a: q1, q2 -> 1;  b (q1, q4, q5, q6): q1, q4 -> 0.5;  c: all -> 0.5
        [1.0, 0.5, 0.5],
        # a: q4, q5 -> 0;  b: q4, q5 -> 1;  c: all -> 0.5
        [0.0, 1.0, 0.5],
    ]
    np.testing.assert_allclose(router.predict_proba(["t", "u"]), expected, atol=1e-6)
    assert router.predict(["t", "u"]).tolist() == ["a", "b"]

    router = KNNRouter(3, encoder=HAND_ENCODER).fit(HAND_EVALS)
    expected = [
        # a: q1, q2, q3 -> 2/3;  b: q1, q4, q5 -> 2/3;  c: 1/2
        [2 / 3, 2 / 3, 0.5],
        # a: q4, q5, q6 -> 1/3;  b: q4, q5, q6 -> 2/3;  c: 1/2
        [1 / 3, 2 / 3, 0.5],
    ]
    np.testing.assert_allclose(router.predict_proba(["t", "u"]), expected, atol=1e-6)


def test_knn_distance_weights_hand_computed():
    router = KNNRouter(2, encoder=HAND_ENCODER, weights="distance").fit(HAND_EVALS)
    proba = router.predict_proba(["t"])[0]
    # b's two nearest from t: q1 (score 0, 5 deg) and q4 (score 1, 85 deg),
    # weighted by 1 / (1 - cos).
    w1, w4 = 1 / (1 - np.cos(np.deg2rad(5))), 1 / (1 - np.cos(np.deg2rad(85)))
    assert proba[1] == pytest.approx(w4 / (w1 + w4), rel=1e-3)
    # a's two nearest both scored 1; c: q2 (1, 15 deg) and q6 (0, 125 deg).
    w2, w6 = 1 / (1 - np.cos(np.deg2rad(15))), 1 / (1 - np.cos(np.deg2rad(125)))
    assert proba[0] == pytest.approx(1.0)
    assert proba[2] == pytest.approx(w2 / (w2 + w6), rel=1e-3)
    # An exact match dominates.
    assert router.predict_proba(["q4"])[0, 1] == pytest.approx(1.0, abs=1e-4)


# q1's twin shares its encoding on purpose.
@pytest.mark.filterwarnings("ignore::locus_sklearn.SharedEncodingsWarning")
def test_knn_distance_exact_matches_take_all_the_weight():
    # An exact match weighed 1 / 1e-12 against the other neighbors' 1 / (1 -
    # cos): nearly all the weight, but how nearly depended on the float32
    # rounding of cos. Exact matches now take all of it, as in scikit-learn.
    encoder = {**HAND_ENCODER, "close": _unit(0.05), "far": _unit(0.2)}
    router = KNNRouter(2, encoder=encoder, weights="distance").fit(HAND_EVALS)
    proba = router.predict_proba(["q1", "close", "far"])
    # From q1 (0 deg), c's nearest: q2 (score 1, 20 deg), q6 (0, 130 deg).
    w2, w6 = 1 / (1 - np.cos(np.deg2rad(20))), 1 / (1 - np.cos(np.deg2rad(130)))
    # a: q1 and q2 both scored 1; b: its exact match q1 scored 0, q4 is not
    # counted.
    assert proba[0, :2].tolist() == [1.0, 0.0]
    assert proba[0, 2] == pytest.approx(w2 / (w2 + w6), rel=1e-6)
    # 0.05 deg from q1 is cosine distance 3.8e-7, within 1e-6: an exact match.
    assert proba[1, :2].tolist() == [1.0, 0.0]
    # 0.2 deg is 6.1e-6: b's weights 1 / (1 - cos) on q1 (0) and q4 (1, 89.8
    # deg); float32 encodings round that distance by 2%.
    w1, w4 = 1 / (1 - np.cos(np.deg2rad(0.2))), 1 / (1 - np.cos(np.deg2rad(89.8)))
    assert proba[2, 1] == pytest.approx(w4 / (w1 + w4), rel=0.05)
    # Two exact matches share the weight equally, the third neighbor none.
    twin = pd.DataFrame({"model": ["b"], "query": ["q1twin"], "score": [1.0]})
    encoder["q1twin"] = encoder["q1"]
    evals = pd.concat([HAND_EVALS, twin])
    router = KNNRouter(3, encoder=encoder, weights="distance").fit(evals)
    assert router.predict_proba(["q1"])[0, 1] == 0.5


def test_knn_distance_weights_do_not_depend_on_the_batch():
    # A float32 product rounded a training query's cosine to itself to 1 alone
    # and to 1 - 6e-8 in a batch: weights 1e12 against 1.7e7, so models that
    # scored alike on that query stopped tying and the route followed the
    # batch.
    rng = np.random.default_rng(0)
    X = rng.standard_normal((80, 384)).astype(np.float32)
    queries = [f"q{i:03d}" for i in range(80)]
    encoder = dict(zip(queries, X, strict=True))
    train = queries[:60]
    scores = (rng.random((4, 60)) < 0.5).astype(float)
    evals = pd.DataFrame(
        {
            "model": np.repeat(["m0", "m1", "m2", "m3"], 60),
            "query": train * 4,
            "score": scores.ravel(),
        }
    )
    router = KNNRouter(3, encoder=encoder, weights="distance").fit(evals)
    batch = router.predict_proba(queries)
    alone = np.vstack([router.predict_proba([q]) for q in queries])
    np.testing.assert_allclose(alone, batch, rtol=1e-12)
    # A training query is its own exact match: its own scores, exactly.
    np.testing.assert_array_equal(batch[:60], scores.T)
    routes = np.concatenate([router.predict([q]) for q in queries])
    np.testing.assert_array_equal(routes, router.predict(queries))


@pytest.mark.parametrize("weights", ["uniform", "distance"])
@pytest.mark.parametrize("k", [1, 7, 40])
def test_knn_matches_brute_force(k, weights):
    # Mixed coverage, so that both the shared neighbor list and the per-model
    # top-k (and the shared list's misses) are exercised.
    coverage = [1.0, 0.9, 0.5, 0.2, 0.05, 0.03]
    evals, encoder, _ = make_pool(n_models=6, n_queries=300, coverage=coverage, seed=3)
    _, extra, _ = make_pool(n_queries=50, seed=4)
    encoder = {**encoder, **{f"new{q}": v for q, v in extra.items()}}
    router = KNNRouter(k, encoder=encoder, weights=weights).fit(evals)
    if k == 7:
        assert 0 < len(router._shared_models) < 6
    queries = [f"new{q}" for q in extra]
    table = check_evals(evals)
    X_train = np.stack([encoder[q] for q in table.queries])
    X_test = np.stack([encoder[q] for q in queries])
    similarity = X_test @ X_train.T
    expected = np.empty((len(queries), table.n_models))
    for m in range(table.n_models):
        rows = table.model_index == m
        order = np.argsort(-similarity[:, table.query_index[rows]], axis=1)[:, :k]
        nearest = np.take_along_axis(similarity[:, table.query_index[rows]], order, 1)
        w = np.ones_like(nearest) if weights == "uniform" else 1 / (1 - nearest)
        expected[:, m] = (w * table.score[rows][order]).sum(1) / w.sum(1)
    np.testing.assert_allclose(router.predict_proba(queries), expected, rtol=1e-4)


@pytest.mark.parametrize("prior_strength", [0.0, 1.0])
def test_kmeans_hand_computed(prior_strength):
    # Two clusters: q1-q3 near 0 deg (A) and q4-q6 near 90-130 deg (B).
    router = KMeansRouter(
        2, encoder=HAND_ENCODER, prior_strength=prior_strength, random_state=0
    ).fit(HAND_EVALS)
    if prior_strength == 0:
        expected = [
            # A: a (1, 1, 0) -> 2/3;  b (q1: 0) -> 0;  c (q2: 1) -> 1
            [2 / 3, 0.0, 1.0],
            # B: a (0, 0, 1) -> 1/3;  b (1, 1, 0) -> 2/3;  c (q6: 0) -> 0
            [1 / 3, 2 / 3, 0.0],
        ]
    else:
        # Overall means: a 1/2, b 2/4 = 1/2, c 1/2; one pseudo-count of each.
        expected = [
            [(2 + 0.5) / 4, (0 + 0.5) / 2, (1 + 0.5) / 2],
            [(1 + 0.5) / 4, (2 + 0.5) / 4, (0 + 0.5) / 2],
        ]
    np.testing.assert_allclose(router.predict_proba(["t", "u"]), expected, atol=1e-6)


def test_kmeans_empty_cluster_falls_back_to_model_mean():
    evals = HAND_EVALS[HAND_EVALS["model"] != "c"].copy()
    evals = pd.concat(
        [
            evals,
            pd.DataFrame(
                {"model": ["c", "c"], "query": ["q1", "q2"], "score": [1.0, 0.0]}
            ),
        ]
    )
    router = KMeansRouter(
        2, encoder=HAND_ENCODER, prior_strength=0, random_state=0
    ).fit(evals)
    # c has no evaluation in cluster B: its overall mean, 0.5.
    assert router.predict_proba(["u"])[0, 2] == pytest.approx(0.5)
    assert router.predict_proba(["t"])[0, 2] == pytest.approx(0.5)


def test_single_best_hand_computed():
    router = SingleBestRouter().fit(HAND_EVALS)
    np.testing.assert_allclose(router.mean_scores_, [0.5, 0.5, 0.5])
    evals = HAND_EVALS.assign(score=[1, 1, 1, 0, 0, 1, 0, 1, 1, 0, 1, 0])
    router = SingleBestRouter().fit(evals)
    np.testing.assert_allclose(router.predict_proba(["anything"]), [[4 / 6, 0.5, 0.5]])
    assert router.predict(["x", "y"]).tolist() == ["a", "a"]
    assert not hasattr(router, "encoder_")


# --- the router API, for every peer ------------------------------------------


@ALL
def test_predict_proba_and_predict(name, fitted):
    router = fitted[name]
    assert router.classes_.tolist() == ["m0", "m1", "m2", "m3"]
    proba = router.predict_proba(NEW_QUERIES)
    assert proba.shape == (len(NEW_QUERIES), 4)
    assert np.isfinite(proba).all() and (proba >= 0).all() and (proba <= 1).all()
    routed = router.predict(NEW_QUERIES)
    assert routed.shape == (len(NEW_QUERIES),)
    assert set(routed) <= set(router.classes_)
    np.testing.assert_array_equal(routed, router.classes_[proba.argmax(1)])
    # A DataFrame with a query column works too.
    frame = pd.DataFrame({"query": NEW_QUERIES})
    np.testing.assert_allclose(router.predict_proba(frame), proba)


@ALL
def test_models_subset(name, fitted):
    router = fitted[name]
    assert set(router.predict(NEW_QUERIES, models=["m2"])) == {"m2"}
    routed = router.predict(NEW_QUERIES, models=["m1", "m3"])
    assert set(routed) <= {"m1", "m3"}
    proba = router.predict_proba(NEW_QUERIES)[:, [1, 3]]
    np.testing.assert_array_equal(routed, np.array(["m1", "m3"])[proba.argmax(1)])


@ALL
def test_cost_aware_routing(name, fitted):
    router = fitted[name]
    favourite = pd.Series(router.predict(NEW_QUERIES)).mode()[0]
    costs = {m: (100.0 if m == favourite else 0.0) for m in router.classes_}
    costly = clone(router).set_params(cost_weight=1.0).fit(POOL, model_costs=costs)
    assert favourite not in set(costly.predict(NEW_QUERIES))
    # cost_weight=0 ignores the costs.
    free = clone(router).fit(POOL, model_costs=costs)
    np.testing.assert_array_equal(
        free.predict(NEW_QUERIES), router.predict(NEW_QUERIES)
    )


@ALL
def test_score(name, fitted):
    score = fitted[name].score(POOL)
    assert isinstance(score, float) and 0 <= score <= 1


@ALL
def test_clone_get_set_params(name):
    router = make_router(name)
    params = router.get_params()
    assert "cost_weight" in params
    cloned = clone(router)
    assert cloned.get_params().keys() == params.keys()
    cloned.set_params(cost_weight=0.5)
    assert cloned.cost_weight == 0.5 and router.cost_weight == 0.0


@ALL
def test_grid_search(name):
    router, grid = ROUTERS[name]
    search = GridSearchCV(router(), grid, cv=GroupKFold(2))
    # Fit parameters reach the router's fit.
    costs = {"m0": 0.0, "m1": 0.1, "m2": 0.2, "m3": 0.3}
    search.fit(POOL, groups=POOL["query"], model_costs=costs)
    assert set(search.best_params_) == set(grid)
    assert 0 <= search.best_score_ <= 1
    assert search.predict(NEW_QUERIES).shape == (len(NEW_QUERIES),)


@ALL
def test_pickle_round_trip(name, fitted):
    router = fitted[name]
    loaded = pickle.loads(pickle.dumps(router))
    np.testing.assert_array_equal(
        loaded.predict_proba(NEW_QUERIES), router.predict_proba(NEW_QUERIES)
    )


@ALL
def test_errors(name, fitted):
    with pytest.raises(NotFittedError):
        make_router(name).predict_proba(NEW_QUERIES)
    router = fitted[name]
    with pytest.raises(ValueError, match="not in the pool"):
        router.predict(NEW_QUERIES, models=["m0", "nope"])
    with pytest.raises(ValueError, match="empty"):
        router.predict_proba([])
    with pytest.raises(ValueError, match="model_costs"):
        clone(router).fit(POOL, model_costs=[1.0, np.nan, 1.0, 1.0])
    # A positive cost weight without costs fails at fit, before any training.
    costless = clone(router).set_params(cost_weight=1.0)
    with pytest.raises(ValueError, match=r"cost_weight=1.0 needs model costs"):
        costless.fit(POOL)
    assert not hasattr(costless, "classes_")
    # Set after fit, it fails where it is used.
    with pytest.raises(ValueError, match="needs model costs"):
        clone(router).fit(POOL).set_params(cost_weight=1.0).predict(NEW_QUERIES)
    with pytest.raises(InvalidParameterError, match="cost_weight"):
        make_router(name, cost_weight=-1.0).fit(POOL)


@pytest.mark.parametrize(
    "router, parameter",
    [
        (KNNRouter(0), "k"),
        (KNNRouter(weights="gaussian"), "weights"),
        (KMeansRouter(0), "n_clusters"),
        (KMeansRouter(prior_strength=-1), "prior_strength"),
        (MatrixFactorizationRouter(embedding_dim=0), "embedding_dim"),
        (MatrixFactorizationRouter(lr=0.0), "lr"),
        (MatrixFactorizationRouter(noise_std=-0.1), "noise_std"),
        (MatrixFactorizationRouter(validation_fraction=1.0), "validation_fraction"),
        (IRTRouter(n_dims=0), "n_dims"),
        (IRTRouter(batch_size=0), "batch_size"),
        (IRTRouter(max_epochs=1.5), "max_epochs"),
        # A bool is an int to Python: refused by name, not used as 1.
        (KNNRouter(k=True), "'k' parameter .* Got True, a bool"),
        (KMeansRouter(n_clusters=True), "'n_clusters' parameter .* Got True, a bool"),
        (MatrixFactorizationRouter(embedding_dim=True), "'embedding_dim' .* a bool"),
        (IRTRouter(n_dims=True), "'n_dims' parameter .* Got True, a bool"),
        (SingleBestRouter(cost_weight=True), "'cost_weight' .* Got True, a bool"),
        # An int past int64 or the float range passed the Interval and failed
        # in torch or numpy, naming no parameter.
        (KNNRouter(k=2**63), "'k' parameter .* Got 9223372036854775808, an int "
         r"beyond int64 \(at most 9223372036854775807\)"),
        (KMeansRouter(prior_strength=10**400), "'prior_strength' parameter .* Got "
         r"1\.000e\+400 \(an int of about 401 digits\), an int too large for a float"),
        (IRTRouter(batch_size=2**64), "'batch_size' .* an int beyond int64"),
        (MatrixFactorizationRouter(lr=10**400), "'lr' .* too large for a float"),
        (SingleBestRouter(cost_weight=10**400), "'cost_weight' .* too large for a"),
    ],
)  # fmt: skip
def test_invalid_parameters(router, parameter):
    with pytest.raises(InvalidParameterError, match=parameter):
        router.fit(POOL)


def test_data_dependent_errors():
    with pytest.raises(ValueError, match="n_queries=6 should be >= n_clusters=20"):
        KMeansRouter(20, encoder=HAND_ENCODER).fit(HAND_EVALS.iloc[:8])
    one_query = {"model": ["a", "b"], "query": ["q1", "q1"], "score": [1.0, 0.0]}
    with pytest.raises(ValueError, match="validation_fraction"):
        MatrixFactorizationRouter(encoder=HAND_ENCODER).fit(one_query)
    router = MatrixFactorizationRouter(
        encoder=HAND_ENCODER, validation_fraction=None, max_epochs=2
    ).fit(one_query)
    assert router.predict_proba(["t"]).shape == (1, 2)


@pytest.mark.parametrize("name", ["kmeans", "mf", "irt"])
def test_random_state_reproducible(name, fitted):
    refit = make_router(name).fit(POOL)
    np.testing.assert_array_equal(
        refit.predict_proba(NEW_QUERIES), fitted[name].predict_proba(NEW_QUERIES)
    )


def test_fit_leaves_global_torch_rng_alone():
    import torch

    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    make_router("mf").fit(POOL)
    torch.testing.assert_close(torch.rand(3), expected)


@contextlib.contextmanager
def _callers_torch(context):
    """A caller's torch setting that a fit must not depend on."""
    import torch

    if context == "float64_default":
        torch.set_default_dtype(torch.float64)
        try:
            yield
        finally:
            torch.set_default_dtype(torch.float32)
    elif context == "inference_mode":
        with torch.inference_mode():
            yield
    else:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            yield


@pytest.mark.parametrize("context", ["float64_default", "inference_mode", "autocast"])
@pytest.mark.parametrize("name", ["mf", "irt"])
def test_net_router_fit_does_not_depend_on_the_callers_torch_context(
    name, context, fitted
):
    # Under a float64 default the module was built in float64 against the
    # float32 encodings ("mat1 and mat2 must have the same dtype"); inside
    # inference mode backward failed ("element 0 of tensors does not require
    # grad"); under autocast it trained in bfloat16. Training is float32 with
    # gradients, as LocusEmbedder's, and the caller's setting is kept.
    import torch

    with _callers_torch(context):
        router = make_router(name).fit(POOL)
        assert torch.get_default_dtype() == (
            torch.float64 if context == "float64_default" else torch.float32
        )
        assert torch.is_inference_mode_enabled() == (context == "inference_mode")
    assert {p.dtype for p in router.net_.module_.parameters()} == {torch.float32}
    np.testing.assert_array_equal(
        router.predict_proba(NEW_QUERIES), fitted[name].predict_proba(NEW_QUERIES)
    )


@pytest.mark.parametrize("name", ["mf", "irt"])
def test_net_router_predicts_in_full_precision_under_a_callers_autocast(name, fitted):
    # The logits were bfloat16 there: IRT's failed to convert to NumPy ("Got
    # unsupported ScalarType BFloat16"), MF's moved the probabilities ~1e-4.
    import torch

    expected = fitted[name].predict_proba(NEW_QUERIES)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        proba = fitted[name].predict_proba(NEW_QUERIES)
    assert proba.dtype == np.float64
    np.testing.assert_array_equal(proba, expected)


@pytest.mark.parametrize("factory", [MatrixFactorizationRouter, IRTRouter])
def test_nets_learn_query_dependent_structure(factory):
    evals, encoder, _ = make_pool(n_models=5, n_queries=300, sharpness=4.0, seed=5)
    queries = np.array(sorted(encoder))
    test_queries = set(queries[::4])
    is_test = evals["query"].isin(test_queries)
    train, test = evals[~is_test], check_evals(evals[is_test])
    router = factory(encoder=encoder, batch_size=256, lr=1e-2, random_state=0)
    router.fit(train)
    y_true = test.to_dense(router.classes_)
    learned = correctness_accuracy(y_true, router.predict_proba(test.queries))
    means = SingleBestRouter().fit(train).predict_proba(test.queries)
    baseline = correctness_accuracy(y_true, means)
    assert learned > baseline + 0.1, (learned, baseline)
    assert router.n_epochs_ < 100  # early stopping ended the fit


# --- settings changed after fit, training guards ----------------------------


@pytest.mark.parametrize(
    "params, match",
    [
        ({"weights": "distanse"}, "'weights' parameter"),
        ({"weights": None}, "'weights' parameter"),
        ({"k": True}, "'k' parameter .* Got True, a bool"),
        ({"k": 0}, "'k' parameter"),
        ({"k": 2.5}, "'k' parameter"),
    ],
)
def test_knn_checks_settings_set_after_fit(params, match):
    # k and weights are read at prediction: a bad value set after fit is
    # refused by name there (a misspelt weights was read as "distance").
    router = KNNRouter(2, encoder=HAND_ENCODER).fit(HAND_EVALS)
    router.set_params(**params)
    with pytest.raises(InvalidParameterError, match=match):
        router.predict_proba(["t"])


def test_knn_k_raised_after_fit_past_the_planned_list():
    # fit plans the shared neighbour list for its k; a k raised past it (and
    # past the int16 ranks of that list) reads every evaluation, as a fresh
    # fit does: each model's mean score with uniform weights.
    evals, encodings, _ = make_pool(n_models=3, n_queries=40)
    router = KNNRouter(3, encoder=encodings).fit(evals)
    assert len(router._shared_models) > 0  # the path under test
    router.set_params(k=40_000)
    proba = router.predict_proba(list(encodings)[:5])
    means = evals.groupby("model")["score"].mean().to_numpy()
    np.testing.assert_allclose(proba, np.tile(means, (5, 1)), rtol=1e-6)


def _dense_and_sparse_pool(n_queries, n_sparse, seed=0):
    """Encodings and binary evals of model "a" on ``n_sparse`` queries and of
    "b" on all ``n_queries``."""
    rng = np.random.default_rng(seed)
    queries = [f"q{i:04d}" for i in range(n_queries)]
    encodings = {q: rng.normal(size=4).astype(np.float32) for q in queries}
    sparse = np.sort(rng.choice(queries, n_sparse, replace=False))
    a = pd.DataFrame(
        {"model": "a", "query": sparse, "score": rng.integers(0, 2, n_sparse)}
    )
    b = pd.DataFrame(
        {"model": "b", "query": queries, "score": rng.integers(0, 2, n_queries)}
    )
    return queries, encodings, a, b


@pytest.mark.parametrize("k", [np.int8(50), np.uint8(50)])
def test_knn_takes_a_small_numpy_integer_k(k):
    # n_columns - k was computed in k's dtype (NEP 50): with a model of 300
    # evaluations searched on its own, both raised OverflowError.
    queries, encodings, a, b = _dense_and_sparse_pool(1000, 300)
    evals = pd.concat([a, b])
    expected = KNNRouter(50, encoder=encodings).fit(evals)
    router = KNNRouter(k, encoder=encodings).fit(evals)
    assert 0 not in router._shared_models  # "a" takes its own top-k
    np.testing.assert_array_equal(
        router.predict_proba(queries[:5]), expected.predict_proba(queries[:5])
    )


def test_knn_uniform_mean_is_exact_whatever_the_pool():
    # The shared search summed float32 scores in float32: a mean of 1 of k=3
    # binary scores came out float32(1/3) there and 1/3 on a model's own
    # search, so "a" alone and "a" beside "b" differed, and exact ties
    # between a and b went to b when b's mean was the float32 one.
    queries, encodings, a, b = _dense_and_sparse_pool(2000, 200)
    test = queries[:400]
    alone = KNNRouter(3, encoder=encodings).fit(a)
    pool = KNNRouter(3, encoder=encodings).fit(pd.concat([a, b]))
    assert set(pool._shared_models) == {0, 1}  # both take the shared search
    proba = pool.predict_proba(test)
    # Means of 3 binary scores are exactly 0, 1/3, 2/3 or 1 in float64.
    np.testing.assert_array_equal(proba, np.round(proba * 3) / 3)
    np.testing.assert_array_equal(alone.predict_proba(test)[:, 0], proba[:, 0])
    tie = proba[:, 0] == proba[:, 1]
    assert tie.sum() > 50
    assert set(pool.predict(test)[tie]) == {"a"}  # ties to the lowest column


def test_net_router_split_keeps_a_training_row_per_model():
    # Model "c" answered one query: where the split holds that query out, its
    # row stays in training (a model with no training row keeps its random
    # initial embedding). Every seed leaves each model a training row.
    from locus_sklearn.baselines._net_router import _split_by_query

    evals = pd.DataFrame(
        [("a", f"q{i}", i % 2) for i in range(4)]
        + [("b", f"q{i}", 1 - i % 2) for i in range(4)]
        + [("c", "q0", 1)],
        columns=["model", "query", "score"],
    )
    table = check_evals(evals)
    q0, c_row = 0, np.flatnonzero(table.model_index == 2)[0]
    kept_back = 0
    for seed in range(40):
        is_valid = _split_by_query(table, 0.25, seed)  # one query of four
        trained = np.bincount(table.model_index[~is_valid], minlength=3)
        assert (trained >= 1).all()
        held = np.unique(table.query_index[is_valid])
        assert len(held) == 1 and is_valid.sum() == 2  # a's and b's rows
        if held[0] == q0:
            assert not is_valid[c_row]
            kept_back += 1
    assert kept_back > 0  # the case under test happened


def test_net_router_validation_fraction_holding_every_query():
    evals = HAND_EVALS[HAND_EVALS["model"] != "c"]  # six queries
    with pytest.raises(ValueError, match="holds out 6 of the 6 queries, leaving"):
        MatrixFactorizationRouter(encoder=HAND_ENCODER, validation_fraction=0.95).fit(
            evals
        )


def test_net_router_warns_when_no_row_is_held_out():
    # Each model answered one query: the held-out query's rows go back to
    # training, and training runs without early stopping, said so.
    evals = {"model": ["a", "b"], "query": ["q1", "q2"], "score": [1.0, 0.0]}
    with pytest.warns(UserWarning, match="holds out no evaluations"):
        router = MatrixFactorizationRouter(
            encoder=HAND_ENCODER, validation_fraction=0.5, max_epochs=3
        ).fit(evals)
    assert router.n_epochs_ == 3


@pytest.mark.parametrize(
    "name, dims",
    [("mf", {"embedding_dim": 8}), ("irt", {"n_dims": 4, "hidden_dim": 8})],
)
def test_net_router_takes_numpy_integer_parameters(name, dims, fitted):
    # GridSearchCV yields NumPy integers from a grid given as np.arange: they
    # passed validation, then torch's DataLoader refused batch_size=np.int64(64)
    # as "should be a positive integer value".
    params = {**dims, "max_epochs": 3, "batch_size": 64, "patience": 5}
    router = make_router(name, **{key: np.int64(v) for key, v in params.items()})
    router.fit(POOL)
    np.testing.assert_array_equal(
        router.predict_proba(NEW_QUERIES), fitted[name].predict_proba(NEW_QUERIES)
    )


@pytest.mark.parametrize("name", ["mf", "irt"])
def test_net_router_divergence_is_an_error(name):
    # A diverged fit predicted NaN and routed everything to the first model.
    with pytest.raises(FloatingPointError, match=r"Router training diverged.*lr"):
        make_router(name, lr=1e30).fit(POOL)


def test_kmeans_prior_given_as_a_huge_int_is_read_as_a_float():
    # numpy took prior_strength=10**30 into the int64 counts: OverflowError.
    router = KMeansRouter(
        2, encoder=HAND_ENCODER, prior_strength=10**30, random_state=0
    ).fit(HAND_EVALS)
    # A prior this strong leaves each model its overall mean: a 3/6, b 2/4,
    # c 1/2 (see test_kmeans_hand_computed).
    np.testing.assert_allclose(router.predict_proba(["t", "u"]), 0.5, rtol=1e-12)
    assert type(router.get_params()["prior_strength"]) is int  # as set


@pytest.mark.parametrize(
    "name, param",
    [("mf", "noise_std"), ("mf", "weight_decay"), ("irt", "weight_decay")],
)
def test_net_router_real_settings_given_as_huge_ints_fit_as_the_same_floats(
    name, param
):
    # torch took the int as an int64 scalar: OverflowError, naming nothing.
    as_int = make_router(name, **{param: 10**30}).fit(POOL)
    as_float = make_router(name, **{param: 1e30}).fit(POOL)
    np.testing.assert_array_equal(
        as_int.predict_proba(NEW_QUERIES), as_float.predict_proba(NEW_QUERIES)
    )
    assert type(as_int.get_params()[param]) is int  # as set


@pytest.mark.parametrize("name", ["mf", "irt"])
@pytest.mark.parametrize(
    "params, match",
    [
        # Adam's first step is lr / (1 - 0.9) = 1e39 > 3.4e38: float32 overflow.
        ({"lr": 1e38}, r"^lr=1e\+38 is too large: .* = 1e\+39 .*at most 3\.4e\+37\.$"),
        ({"lr": 10**39}, r"^lr=1e\+39 is too large"),
        ({"weight_decay": 1e39}, r"^weight_decay=1e\+39 is too large: .*at most "
         r"3\.4e\+38\.$"),
    ],
)  # fmt: skip
def test_net_router_refuses_lr_and_weight_decay_past_float32(name, params, match):
    # torch.optim.Adam raised "value cannot be converted to type float
    # without overflow", naming neither parameter.
    router = make_router(name, **params)
    with pytest.raises(ValueError, match=match):
        router.fit(POOL)
    assert not hasattr(router, "net_")


@pytest.mark.parametrize("name", ["mf", "irt"])
def test_net_router_largest_lr_accepted_diverges_with_a_named_error(name):
    # float32's largest value times 1 - beta1: Adam's first step fits float32.
    lr = float(np.finfo(np.float32).max) * (1 - 0.9)
    with pytest.raises(FloatingPointError, match=r"lower lr \(now 3\.40282"):
        make_router(name, lr=lr).fit(POOL)


def test_net_router_divergence_names_a_raised_weight_decay():
    # It blamed lr alone, which was at its default.
    with pytest.raises(
        FloatingPointError,
        match=r"lower lr \(now 0\.001\) or lower weight_decay \(now 3\.40282e\+38, "
        r"default 0\)\.$",
    ):
        _mf(weight_decay=float(np.finfo(np.float32).max)).fit(POOL)


@pytest.mark.parametrize("make", [_mf, _irt])
def test_net_router_verbose_output_goes_to_stderr_only(make, capfd):
    # skorch's EarlyStopping printed "Stopping since ..." and "Restoring best
    # model ..." to standard output, while the epoch table went to stderr.
    router = make(max_epochs=50, patience=1, lr=0.05, verbose=1).fit(POOL)
    out, err = capfd.readouterr()
    assert router.n_epochs_ < 50  # stopped early
    assert out == ""
    assert "Stopping since valid_loss has not improved in the last 1 epochs." in err
    # The row of the epoch that stopped training comes before the message.
    lines = err.splitlines()
    stop = next(i for i, line in enumerate(lines) if line.startswith("Stopping"))
    assert lines[stop - 1].split()[0] == str(router.n_epochs_)
    # Quiet without verbose.
    make(max_epochs=50, patience=1, lr=0.05).fit(POOL)
    assert capfd.readouterr() == ("", "")


def test_encodings_passed_where_a_number_belongs_are_named_briefly():
    # KNNRouter(encodings) (LocusEmbedder takes them first) printed every
    # vector of the mapping in scikit-learn's message (2.3 MB on a real pool).
    encodings = {f"q{i}": [float(i), 1.0] for i in range(500)}
    for router, name in (
        (KNNRouter(encodings), "k"),
        (KMeansRouter(encodings), "n_clusters"),
    ):
        with pytest.raises(InvalidParameterError) as error:
            router.fit(HAND_EVALS)
        message = str(error.value)
        assert f"'{name}' parameter" in message and "mapping of 500 entries" in message
        assert "pass them as encoder=" in message and len(message) < 300


def _twin_pool():
    """Twins x000/y000, ..., x099/y099 share an encoding; b scores 1 on x, 0 on y.

    a is evaluated on every query, so that b can share a's neighbour list.
    """
    X = np.random.default_rng(0).standard_normal((100, 4)).astype(np.float32)
    queries = [f"{twin}{i:03d}" for i in range(100) for twin in "xy"]
    encoder = {q: X[int(q[1:])] for q in queries}
    b = pd.DataFrame({"model": "b", "query": queries, "score": [1.0, 0.0] * 100})
    a = b.assign(model="a", score=0.5)
    return encoder, b, a


# Twins share their encodings on purpose.
@pytest.mark.filterwarnings("ignore::locus_sklearn.SharedEncodingsWarning")
@pytest.mark.parametrize(
    # k=1: the query's twins tie; x (sorted first) is nearer: b -> 1.
    # k=3: its twins, then the nearest other pair, x first: b -> (1 + 0 + 1) / 3.
    "k, expected",
    [(1, 1.0), (3, 2 / 3)],
)
def test_knn_tied_neighbors_rank_by_query_id(k, expected):
    # Equal similarities were ranked arbitrarily, differently by the shared
    # list (torch.topk) and the per-model top-k (argpartition): b's prediction
    # changed with the other models of the pool and with k set after fit.
    encoder, b, a = _twin_pool()
    queries = [f"{twin}{i:03d}" for i in range(0, 100, 10) for twin in "xy"]
    alone = KNNRouter(k, encoder=encoder).fit(b)
    pooled = KNNRouter(k, encoder=encoder).fit(pd.concat([a, b]))
    own = KNNRouter(10**6, encoder=encoder).fit(b).set_params(k=k)
    # The paths under test: b shares a neighbour list in the first two, takes
    # its own top-k in the last.
    assert 0 in alone._shared_models and 1 in pooled._shared_models
    assert len(own._shared_models) == 0
    for router in (alone, pooled, own):
        b_column = router.classes_.tolist().index("b")
        np.testing.assert_allclose(
            router.predict_proba(queries)[:, b_column], expected, rtol=1e-6
        )


# Twins share their encodings on purpose.
@pytest.mark.filterwarnings("ignore::locus_sklearn.SharedEncodingsWarning")
@pytest.mark.parametrize("weights", ["uniform", "distance"])
@pytest.mark.parametrize("k", [1, 2, 5, 9, 40])
def test_knn_with_tied_neighbors_matches_brute_force(k, weights):
    # Every training query has two twins of the same encoding (ties at every
    # rank, at the end of the shared list too); brute force ranks equal
    # similarities by training query index, as the router documents.
    coverage = [1.0, 0.9, 0.5, 0.2, 0.05]
    evals, encoder, _ = make_pool(n_models=5, n_queries=90, coverage=coverage, seed=6)
    evals = pd.concat(
        [evals.assign(query=evals["query"] + twin) for twin in ("", "b", "c")]
    ).sample(frac=1.0, random_state=0)
    rng = np.random.default_rng(6)
    evals["score"] = (rng.random(len(evals)) < 0.5).astype(float)
    encoder = {q + twin: v for q, v in encoder.items() for twin in ("", "b", "c")}
    _, extra, _ = make_pool(n_queries=30, seed=7)
    queries = [f"new{q}" for q in extra]
    # Exact matches take all the weight (test_knn_distance_exact_matches_...),
    # which the brute force below does not model.
    if weights == "uniform":
        queries += list(encoder)[::7]
    encoder.update({f"new{q}": v for q, v in extra.items()})
    router = KNNRouter(k, encoder=encoder, weights=weights).fit(evals)
    if k == 9:
        assert 0 < len(router._shared_models) < 5
    table = check_evals(evals)
    X_train = np.stack([encoder[q] for q in table.queries]).astype(np.float64)
    similarity = np.stack([encoder[q] for q in queries]) @ X_train.T
    expected = np.empty((len(queries), table.n_models))
    for m in range(table.n_models):
        rows = table.model_index == m
        own = similarity[:, table.query_index[rows]]
        # A stable sort: equal similarities keep increasing query index.
        order = np.argsort(-own, axis=1, kind="stable")[:, :k]
        nearest = np.take_along_axis(own, order, 1)
        w = np.ones_like(nearest) if weights == "uniform" else 1 / (1 - nearest)
        expected[:, m] = (w * table.score[rows][order]).sum(1) / w.sum(1)
    np.testing.assert_allclose(router.predict_proba(queries), expected, rtol=1e-4)


# Training queries share their encodings on purpose.
@pytest.mark.filterwarnings("ignore::locus_sklearn.SharedEncodingsWarning")
@pytest.mark.parametrize("weights", ["uniform", "distance"])
def test_knn_duplicated_encodings_tie_whatever_the_batch(weights):
    # A single query's product took another BLAS path than a batch's and
    # rounded identical training encodings' similarities differently: the
    # tie broke otherwise, and a's prediction changed with the batch size and
    # with a model b evaluated on one more training query.
    rng = np.random.default_rng(1)
    distinct = rng.normal(size=(40, 384)).astype(np.float32)
    train = [f"q{i:03d}" for i in range(200)]
    encoder = dict(zip(train, distinct[rng.integers(0, 40, 200)], strict=True))
    queries = [f"t{i:03d}" for i in range(60)]
    encoder.update({q: rng.normal(size=384).astype(np.float32) for q in queries})
    a = pd.DataFrame(
        {"model": "a", "query": train[:-1], "score": rng.integers(0, 2, 199) * 1.0}
    )
    ab = pd.concat([a, pd.DataFrame({"model": ["b"], "query": train[-1:]})])
    ab["score"] = ab["score"].fillna(1.0)
    alone = KNNRouter(3, encoder=encoder, weights=weights).fit(a)
    pooled = KNNRouter(3, encoder=encoder, weights=weights).fit(ab)
    own = KNNRouter(10**6, encoder=encoder, weights=weights).fit(a).set_params(k=3)
    # Both searches: a shares a neighbor list, then takes its own top-k.
    assert len(alone._shared_models) == 1 and len(own._shared_models) == 0
    batch = alone.predict_proba(queries)
    # A query's similarities may still round by the batch: a tie broken
    # otherwise changes a neighbor (0.33 here), rounding a last digit.
    for router in (alone, pooled, own):
        one_by_one = np.vstack([router.predict_proba([q])[:, :1] for q in queries])
        np.testing.assert_allclose(one_by_one, batch, rtol=1e-6)
        chunked = predict_proba_chunked(router, queries, chunk_queries=1)
        np.testing.assert_allclose(chunked[:, :1], batch, rtol=1e-6)
    np.testing.assert_allclose(pooled.predict_proba(queries)[:, :1], batch, rtol=1e-6)


# --- arguments of the shared router API --------------------------------------

_TWO = pd.DataFrame(
    {"model": ["a", "a", "b", "b"], "query": ["q1", "q2", "q1", "q2"],
     "score": [1.0, 1.0, 0.0, 1.0]}
)  # fmt: skip


@pytest.mark.parametrize(
    "models, match",
    [
        ([["a", "b"]], r"models must be a one-dimensional list .* 1 of 1 entries"),
        (np.array([["a", "b"]]), r"models must be a one-dimensional list"),
        ([0, "b"], r"1 of 2 entries are not: \[0\]"),
        ({"a": False, "b": True}, r"got a dict .*list\(d\).*if ok\]"),
        (5, r"models must be a list of model names; got 5 of type int"),
    ],
)
def test_predict_models_must_be_a_flat_list_of_names(models, match):
    # A nested list or 2-D array failed with a bare "unhashable type"; a
    # mapping was read as its keys ({"a": False, "b": True} allowed a).
    router = SingleBestRouter().fit(_TWO)
    with pytest.raises(TypeError, match=match):
        router.predict(["q"], models=models)
    # Still accepted: any 1-D collection of names.
    assert router.predict(["q"], models=np.array(["b"])).tolist() == ["b"]
    assert router.predict(["q"], models=iter(["b"])).tolist() == ["b"]
    assert router.predict(["q"], models={"b": 0}.keys()).tolist() == ["b"]
    assert router.predict(["q"], models={"b"}).tolist() == ["b"]


@pytest.mark.parametrize("y", [{"a": 10.0, "b": 0.0}, pd.Series({"a": 10.0, "b": 0.0})])
def test_fit_refuses_costs_passed_as_y(y):
    # fit(evals, costs) ignored the costs as y and fitted without them.
    with pytest.raises(
        TypeError, match="routers take no y; pass costs as model_costs="
    ):
        SingleBestRouter().fit(_TWO, y)
    # y is otherwise ignored, as scikit-learn's meta-estimators expect.
    for y in (None, np.zeros(4), [0, 1, 0, 1]):
        router = SingleBestRouter().fit(_TWO, y)
        assert router.predict(["q"]).tolist() == ["a"]


def test_fit_ignores_a_y_series_with_one_entry_per_row(pool):
    # A y Series was refused whatever its length, so cross_val_score(router,
    # df, df["score"]) (and GridSearchCV with a pandas y) failed at every fit.
    router = SingleBestRouter().fit(_TWO, _TWO["score"])
    assert router.predict(["q1"]).tolist() == ["a"]  # mean 1.0 against 0.5
    # The same length, other rows: refused, as a costs Series by model name is.
    for y in (_TWO["score"].iloc[::-1], pd.Series([1.0] * 4, index=list("abcd"))):
        with pytest.raises(TypeError, match="whose index is not evals' index"):
            SingleBestRouter().fit(_TWO, y)
    evals = pool.evals
    cv = KFold(3, shuffle=True, random_state=0)
    kwargs = dict(cv=cv, error_score="raise")
    scores = cross_val_score(SingleBestRouter(), evals, evals["score"], **kwargs)
    expected = [
        SingleBestRouter().fit(evals.iloc[train]).score(evals.iloc[test])
        for train, test in cv.split(evals)
    ]
    np.testing.assert_array_equal(scores, expected)
    as_array = evals["score"].to_numpy()
    np.testing.assert_array_equal(
        scores, cross_val_score(SingleBestRouter(), evals, as_array, **kwargs)
    )


@pytest.mark.parametrize("y", [[10.0, 0.0], np.array([10.0, 0.0]), ("a", "b"), 1.0])
def test_fit_refuses_costs_passed_as_y_array(y):
    # A list, array or tuple of costs was ignored as y (model_costs_ None):
    # only None or one entry per row of evals, as a meta-estimator passes y,
    # is ignored.
    with pytest.raises(
        TypeError, match=r"pass costs as model_costs=.*row of evals \(4\)"
    ):
        SingleBestRouter().fit(_TWO, y)


# --- remove_models -----------------------------------------------------------

_COSTS = {"m0": 3.0, "m1": 1.0, "m2": 2.0, "m3": 0.5}


@ALL
def test_remove_models_keeps_the_remaining_models_predictions(name):
    # Each peer predicts a model's P(correct) independently of the others:
    # removing m1 is the full router without its column, and routing among
    # the rest, with no refit.
    full = make_router(name, cost_weight=0.3).fit(POOL, model_costs=_COSTS)
    router = pickle.loads(pickle.dumps(full))
    assert router.remove_models(["m1"]) is router
    rest = ["m0", "m2", "m3"]
    assert router.classes_.tolist() == rest
    assert router.model_costs_.tolist() == [3.0, 2.0, 0.5]  # by label
    proba = full.predict_proba(NEW_QUERIES)
    np.testing.assert_array_equal(
        router.predict_proba(NEW_QUERIES), proba[:, [0, 2, 3]]
    )
    np.testing.assert_array_equal(
        router.decision_function(NEW_QUERIES),
        full.decision_function(NEW_QUERIES)[:, [0, 2, 3]],
    )
    np.testing.assert_array_equal(
        router.predict(NEW_QUERIES), full.predict(NEW_QUERIES, models=rest)
    )
    np.testing.assert_array_equal(
        router.predict(NEW_QUERIES, models=["m0", "m3"]),
        full.predict(NEW_QUERIES, models=["m0", "m3"]),
    )
    # The same chunks for both: a torch batch of 7 may round apart from 20.
    np.testing.assert_array_equal(
        predict_proba_chunked(router, NEW_QUERIES, chunk_queries=7),
        predict_proba_chunked(full, NEW_QUERIES, chunk_queries=7)[:, [0, 2, 3]],
    )
    remaining = POOL[POOL["model"] != "m1"]
    assert router.score(remaining) == full.score(remaining)
    # The removed model is no longer in the pool.
    with pytest.raises(ValueError, match="not in the pool"):
        router.predict(NEW_QUERIES, models=["m1"])
    with pytest.raises(ValueError, match="not in the pool"):
        router.score(POOL)
    # A pickled copy keeps the removal; a clone is unfitted.
    copy = pickle.loads(pickle.dumps(router))
    np.testing.assert_array_equal(copy.predict_proba(NEW_QUERIES), proba[:, [0, 2, 3]])
    assert not hasattr(clone(router), "classes_")


@ALL
def test_remove_models_composes_refuses_and_refit_resets(name):
    full = make_router(name).fit(POOL, model_costs=_COSTS)
    proba = full.predict_proba(NEW_QUERIES)
    router = pickle.loads(pickle.dumps(full))
    router.remove_models(["m3"]).remove_models({"m0"})
    assert router.classes_.tolist() == ["m1", "m2"]
    assert router.model_costs_.tolist() == [1.0, 2.0]
    np.testing.assert_array_equal(router.predict_proba(NEW_QUERIES), proba[:, [1, 2]])
    with pytest.raises(ValueError, match="would remove every model"):
        router.remove_models(["m2", "m1"])
    with pytest.raises(ValueError, match=r"models has 1 model\(s\) that are not in"):
        router.remove_models(["m0"])  # already removed
    with pytest.raises(TypeError, match="got the string 'm1'"):
        router.remove_models("m1")
    # A refused removal changes nothing.
    assert router.classes_.tolist() == ["m1", "m2"]
    np.testing.assert_array_equal(router.predict_proba(NEW_QUERIES), proba[:, [1, 2]])
    # A refit predicts its whole new pool.
    router.fit(POOL, model_costs=_COSTS)
    assert router.classes_.tolist() == ["m0", "m1", "m2", "m3"]
    assert router.model_costs_.tolist() == [3.0, 1.0, 2.0, 0.5]
    np.testing.assert_array_equal(router.predict_proba(NEW_QUERIES), proba)


@ALL
def test_remove_models_needs_a_fitted_router(name):
    with pytest.raises(NotFittedError):
        make_router(name).remove_models(["m0"])


def test_remove_models_without_costs():
    router = SingleBestRouter().fit(POOL)
    means = router.mean_scores_.copy()
    router.remove_models(np.array(["m2"]))
    assert router.model_costs_ is None
    np.testing.assert_array_equal(
        router.predict_proba(["any"]), means[[0, 1, 3]][None, :]
    )
    assert router.predict(["any"]).tolist() == [
        ["m0", "m1", "m3"][int(np.argmax(means[[0, 1, 3]]))]
    ]


@pytest.mark.parametrize("make", [_mf, _irt])
def test_n_epochs_counts_finished_epochs_after_an_interrupt(make, monkeypatch):
    # Ctrl-C in the middle of epoch 3 leaves a history row with no
    # train_loss: n_epochs_ counted it (3) while only 2 epochs were done.
    from skorch import NeuralNet

    train_step = NeuralNet.train_step

    def interrupted(self, *args, **kwargs):
        if len(self.history) == 3 and len(self.history[-1]["batches"]) == 1:
            raise KeyboardInterrupt
        return train_step(self, *args, **kwargs)

    monkeypatch.setattr(NeuralNet, "train_step", interrupted)
    router = make(max_epochs=10, batch_size=16, validation_fraction=None).fit(POOL)
    assert len(router.net_.history) == 3
    assert "train_loss" not in router.net_.history[-1]
    assert router.n_epochs_ == 2


@pytest.mark.parametrize("name", ["knn", "kmeans", "mf", "irt"])
def test_memory_takes_a_path_and_refuses_a_file(name, tmp_path):
    # memory=Path(...) was an InvalidParameterError ("str, None or an object
    # with cache"), though every other path parameter takes os.PathLike.
    folder = tmp_path / "cache"
    router = make_router(name, memory=folder)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a mapping encoder needs no cache
        router.fit(POOL)
    assert router.get_params()["memory"] is folder
    afile = tmp_path / "afile"
    afile.write_text("")
    with pytest.raises(ValueError, match=r"memory=.*afile.* is a file"):
        make_router(name, memory=afile).fit(POOL)
