"""LocusEmbedder and LocusRouter: training, embedding, routing, onboarding, sklearn
integration and persistence, on small synthetic pools."""

import pickle

import joblib
import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.frozen import FrozenEstimator
from sklearn.model_selection import GridSearchCV, GroupKFold
from sklearn.pipeline import Pipeline
from sklearn.utils._param_validation import InvalidParameterError

from locus_sklearn import KCenterSelector, LocusEmbedder, LocusRouter
from locus_sklearn.datasets import make_model_pool
from locus_sklearn.metrics import correctness_accuracy

TINY = dict(
    embedding_dim=16,
    n_latents=4,
    n_blocks=1,
    n_heads=2,
    hidden_dim=16,
    enc_size=(16, 128),
    dec_size=64,
    episodes_per_epoch=32,
    batch_size=8,
    lr=3e-3,
)


def tiny_embedder(encoder, **kwargs):
    params = dict(TINY, max_epochs=3, random_state=0)
    params.update(kwargs)
    return LocusEmbedder(encoder, **params)


@pytest.fixture(scope="module")
def pool():
    return make_model_pool(
        n_models=12,
        n_queries=400,
        n_tasks=4,
        n_families=3,
        evals_per_model=200,
        random_state=0,
    )


@pytest.fixture(scope="module")
def router(pool):
    return LocusRouter(tiny_embedder(pool.encodings, max_epochs=4)).fit(pool.evals)


def MODELS(pool):
    return pool.models["model"].tolist()


def QUERIES(pool):
    return pool.queries["query"].to_numpy()


def _rows_of(evals, models):
    return evals[evals["model"].isin(models)]


# ------------------------------------------------------------------ embedder
def test_embedder_transform_shape_order_and_determinism(router, pool):
    embedder = router.embedder_
    z = embedder.transform(pool.evals)
    assert z.shape == (12, 16) and z.dtype == np.float32
    assert np.isfinite(z).all()
    shuffled = pool.evals.sample(frac=1.0, random_state=3)
    np.testing.assert_array_equal(embedder.transform(shuffled), z)
    # One row per model, in sorted model-name order, whatever the input order.
    sub = _rows_of(pool.evals, ["fam2-m11", "fam0-m00"])
    z_sub = embedder.transform(sub)
    np.testing.assert_allclose(z_sub, z[[0, 11]], atol=1e-5)


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_embedding_invariant_to_row_order_hypothesis(router, pool, seed):
    rows = _rows_of(pool.evals, ["fam1-m05"])
    z = router.embedder_.transform(rows)
    perm = rows.sample(frac=1.0, random_state=seed)
    assert np.abs(router.embedder_.transform(perm) - z).max() < 1e-5


def test_batching_does_not_change_embeddings(router, pool):
    # Tiny token budget -> one model per forward pass; must equal the batched run.
    embedder = clone(router.embedder_)
    embedder.__dict__.update(
        {k: v for k, v in router.embedder_.__dict__.items() if k.endswith("_")}
    )
    embedder.transform_batch_tokens = 1
    np.testing.assert_allclose(
        embedder.transform(pool.evals),
        router.embedder_.transform(pool.evals),
        atol=1e-5,
    )


def test_same_random_state_gives_identical_fit(pool):
    evals = _rows_of(pool.evals, MODELS(pool)[:6])
    a = tiny_embedder(pool.encodings, max_epochs=2).fit(evals).transform(evals)
    b = tiny_embedder(pool.encodings, max_epochs=2).fit(evals).transform(evals)
    np.testing.assert_array_equal(a, b)
    c = tiny_embedder(pool.encodings, max_epochs=2, random_state=1).fit(evals)
    assert not np.array_equal(a, c.transform(evals))


def test_fit_leaves_global_torch_rng_alone(pool):
    import torch

    evals = _rows_of(pool.evals, MODELS(pool)[:4])
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    tiny_embedder(pool.encodings, max_epochs=1).fit(evals)
    assert torch.equal(torch.rand(3), expected)


def test_training_history_and_early_stopping(pool):
    emb = tiny_embedder(pool.encodings, max_epochs=30, patience=2, lr=0.05)
    emb.fit(pool.evals)
    history = emb.net_.history
    assert {"train_loss", "valid_loss", "valid_routing_accuracy"} <= set(history[-1])
    assert emb.n_epochs_ == len(history) <= 30
    no_valid = tiny_embedder(pool.encodings, max_epochs=2, validation_fraction=0.0)
    no_valid.fit(pool.evals)
    assert "valid_loss" not in no_valid.net_.history[-1]


def test_fit_learns_better_than_pool_average(pool):
    """Trained predictions beat a per-model-mean predictor on held-out queries."""
    queries = np.array(sorted(pool.evals["query"].unique()))
    rng = np.random.default_rng(0)
    test_q = set(rng.choice(queries, size=80, replace=False))
    is_test = pool.evals["query"].isin(test_q)
    train, test = pool.evals[~is_test], pool.evals[is_test]
    router = LocusRouter(
        tiny_embedder(pool.encodings, max_epochs=25, patience=5, episodes_per_epoch=64)
    ).fit(train)
    from locus_sklearn._evals import check_evals

    table = check_evals(test)
    y_true = table.to_dense(router.classes_)
    proba = router.predict_proba(table.queries)
    means = train.groupby("model")["score"].mean().reindex(router.classes_).to_numpy()
    baseline = correctness_accuracy(y_true, np.broadcast_to(means, y_true.shape))
    assert correctness_accuracy(y_true, proba) > baseline


def test_fit_rejects_models_with_one_evaluation(pool):
    evals = pd.concat([pool.evals, pool.evals.iloc[:1].assign(model="lonely")])
    with pytest.raises(ValueError, match="at least 2 evaluations per model.*'lonely'"):
        tiny_embedder(pool.encodings).fit(evals)


@pytest.mark.parametrize(
    "params, match",
    [
        ({"embedding_dim": 0}, "embedding_dim"),
        ({"n_heads": 3}, "n_heads=3 must divide embedding_dim=16"),
        ({"enc_size": (10, 5)}, "enc_size"),
        ({"early_stopping": "valid_acc"}, "early_stopping"),
        ({"inference_dtype": "float16"}, "inference_dtype"),
    ],
)
def test_invalid_hyper_parameters(pool, params, match):
    with pytest.raises((ValueError, InvalidParameterError), match=match):
        tiny_embedder(pool.encodings, **params).fit(pool.evals)


def test_unfitted_use_raises(pool):
    with pytest.raises(NotFittedError):
        tiny_embedder(pool.encodings).transform(pool.evals)
    with pytest.raises(NotFittedError):
        LocusRouter().predict(["2+2?"])


def test_wrong_encoder_dimension(router, pool):
    from locus_sklearn import QueryEncoder

    other = {q: np.ones(5, dtype=np.float32) for q in pool.encodings}
    broken = pickle.loads(pickle.dumps(router))
    broken.embedder_.encoder_ = QueryEncoder(other).fit()
    with pytest.raises(
        ValueError, match="5-dimensional query encodings.*32-dimensional"
    ):
        broken.embedder_.transform(pool.evals)


def test_bfloat16_inference_close_to_float32(router, pool):
    z32 = router.embedder_.transform(pool.evals)
    emb = pickle.loads(pickle.dumps(router.embedder_))
    emb.inference_dtype = "bfloat16"
    z16 = emb.transform(pool.evals)
    rel = np.linalg.norm(z16 - z32, axis=1) / np.linalg.norm(z32, axis=1)
    assert rel.max() < 0.05


# -------------------------------------------------------------------- router
def test_router_shapes_and_probabilities(router, pool):
    queries = QUERIES(pool)[:7]
    proba = router.predict_proba(queries)
    assert proba.shape == (7, 12)
    assert np.isfinite(proba).all() and (proba >= 0).all() and (proba <= 1).all()
    assert router.classes_.tolist() == sorted(MODELS(pool))
    routed = router.predict(queries)
    np.testing.assert_array_equal(routed, router.classes_[proba.argmax(axis=1)])
    frame = pd.DataFrame({"query": queries})
    np.testing.assert_array_equal(router.predict(frame), routed)


def test_predict_restricted_to_subset(router, pool):
    subset = ["fam0-m01", "fam2-m10"]
    routed = router.predict(QUERIES(pool)[:50], models=subset)
    assert set(routed) <= set(subset)
    with pytest.raises(ValueError, match="not in the pool: \\['nope'\\]"):
        router.predict(QUERIES(pool)[:2], models=["nope"])


def test_cost_aware_routing(pool):
    costs = {m: 0.0 for m in MODELS(pool)}
    r = LocusRouter(tiny_embedder(pool.encodings, max_epochs=1)).fit(
        pool.evals, model_costs=costs
    )
    queries = QUERIES(pool)[:40]
    favourite = pd.Series(r.predict(queries)).mode()[0]
    costs[favourite] = 10.0
    r = LocusRouter(tiny_embedder(pool.encodings, max_epochs=1), cost_weight=1.0).fit(
        pool.evals, model_costs=costs
    )
    assert favourite not in set(r.predict(queries))
    with pytest.raises(ValueError, match="needs model costs"):
        LocusRouter(tiny_embedder(pool.encodings, max_epochs=1), cost_weight=1.0).fit(
            pool.evals
        ).predict(queries)


def test_nan_costs_rejected(pool):
    costs = {m: 1.0 for m in MODELS(pool)}
    costs[MODELS(pool)[0]] = float("nan")
    with pytest.raises(ValueError, match="model_costs must be finite"):
        LocusRouter(tiny_embedder(pool.encodings)).fit(pool.evals, model_costs=costs)


def test_score_is_routing_accuracy(router, pool):
    accuracy = router.score(pool.evals)
    assert 0.0 <= accuracy <= 1.0
    with pytest.raises(ValueError, match="not in the pool"):
        router.score(pool.evals.assign(model="stranger"))


def test_empty_queries_rejected(router):
    with pytest.raises(ValueError, match="queries is empty"):
        router.predict_proba([])


def test_add_models_leaves_other_rows_unchanged(pool):
    held_out = ["fam1-m04", "fam2-m09"]
    train = pool.evals[~pool.evals["model"].isin(held_out)]
    r = LocusRouter(tiny_embedder(pool.encodings, max_epochs=2)).fit(train)
    before = dict(zip(r.classes_, r.model_embeddings_.copy(), strict=True))
    r.add_models(_rows_of(pool.evals, held_out))
    assert r.classes_.tolist() == sorted(MODELS(pool))
    for name, z in before.items():
        np.testing.assert_array_equal(
            r.model_embeddings_[r.classes_.tolist().index(name)], z
        )
    # Refreshing an existing model from fewer evaluations changes only its row.
    rows = _rows_of(pool.evals, ["fam0-m00"]).iloc[:50]
    snapshot = r.model_embeddings_.copy()
    r.add_models(rows)
    changed = np.any(r.model_embeddings_ != snapshot, axis=1)
    assert changed.tolist() == [name == "fam0-m00" for name in r.classes_]
    r.remove_models(held_out)
    assert set(held_out).isdisjoint(r.classes_)
    assert r.model_embeddings_.shape[0] == 10
    with pytest.raises(ValueError, match="every model"):
        r.remove_models(list(r.classes_))


def test_onboarded_model_from_128_evaluations_is_usable():
    pool = make_model_pool(
        n_models=16,
        n_queries=600,
        n_tasks=4,
        n_families=4,
        evals_per_model=300,
        random_state=1,
    )
    new = "fam3-m15"
    train = pool.evals[pool.evals["model"] != new]
    queries = np.array(sorted(pool.evals["query"].unique()))
    rng = np.random.default_rng(0)
    new_rows = _rows_of(pool.evals, [new])
    onboard = new_rows.sample(128, random_state=0)
    test = new_rows.drop(onboard.index)
    r = LocusRouter(
        tiny_embedder(pool.encodings, max_epochs=30, patience=5, episodes_per_epoch=64)
    ).fit(train)
    r.add_models(onboard)
    from locus_sklearn._evals import check_evals

    table = check_evals(test)
    y_true = table.to_dense([new])
    proba = r.predict_proba(table.queries)[:, [r.classes_.tolist().index(new)]]
    # Pool-average predictor: the mean score of the training pool.
    pool_mean = np.full_like(y_true, train["score"].mean())
    assert correctness_accuracy(y_true, proba) > correctness_accuracy(y_true, pool_mean)
    del queries, rng


# ----------------------------------------------------- sklearn integration
def test_clone_and_params(pool):
    router = LocusRouter(tiny_embedder(pool.encodings), cost_weight=0.5)
    params = router.get_params()
    assert params["embedder__embedding_dim"] == 16 and params["cost_weight"] == 0.5
    cloned = clone(router)
    assert cloned.get_params()["embedder__embedding_dim"] == 16
    cloned.set_params(embedder__embedding_dim=8)
    assert router.embedder.embedding_dim == 16


def test_grid_search_with_group_kfold_on_queries(pool):
    search = GridSearchCV(
        LocusRouter(tiny_embedder(pool.encodings, max_epochs=1)),
        {"embedder__embedding_dim": [8, 16]},
        cv=GroupKFold(2),
    )
    search.fit(pool.evals, groups=pool.evals["query"])
    assert search.best_params_["embedder__embedding_dim"] in (8, 16)
    assert np.isfinite(search.cv_results_["mean_test_score"]).all()


def test_pipeline_with_selector(pool):
    pipe = Pipeline(
        [
            ("embed", tiny_embedder(pool.encodings, max_epochs=1)),
            ("select", KCenterSelector(3)),
        ]
    )
    pipe.fit(pool.evals)
    assert len(pipe[-1].selected_indices_) == 3
    assert pipe.transform(pool.evals).shape == (12, 3)


def test_frozen_embedder_is_reused_without_training(router, pool):
    frozen = FrozenEstimator(router.embedder_)
    reused = LocusRouter(frozen).fit(pool.evals)
    np.testing.assert_array_equal(reused.model_embeddings_, router.model_embeddings_)
    np.testing.assert_array_equal(
        reused.predict_proba(QUERIES(pool)[:5]), router.predict_proba(QUERIES(pool)[:5])
    )


def test_pickle_and_joblib_round_trip(router, pool, tmp_path):
    queries = QUERIES(pool)[:20]
    expected = router.predict_proba(queries)
    np.testing.assert_array_equal(
        pickle.loads(pickle.dumps(router)).predict_proba(queries), expected
    )
    joblib.dump(router, tmp_path / "router.joblib")
    np.testing.assert_array_equal(
        joblib.load(tmp_path / "router.joblib").predict_proba(queries), expected
    )


# -------------------------------------------------------------- persistence
def test_safe_save_load_round_trip(router, pool, tmp_path):
    path = tmp_path / "router.safetensors"
    router.save(path)
    loaded = LocusRouter.load(path)
    queries = QUERIES(pool)[:30]
    np.testing.assert_array_equal(
        loaded.predict_proba(queries), router.predict_proba(queries)
    )
    np.testing.assert_array_equal(loaded.classes_, router.classes_)
    np.testing.assert_array_equal(loaded.model_embeddings_, router.model_embeddings_)
    np.testing.assert_array_equal(
        loaded.embedder_.transform(pool.evals), router.embedder_.transform(pool.evals)
    )
    router.embedder_.save(tmp_path / "embedder.safetensors")
    emb = LocusEmbedder.load(tmp_path / "embedder.safetensors")
    np.testing.assert_array_equal(
        emb.transform(pool.evals), router.embedder_.transform(pool.evals)
    )
    with pytest.raises(ValueError, match="holds a LocusEmbedder, not a LocusRouter"):
        LocusRouter.load(tmp_path / "embedder.safetensors")


def test_save_load_keeps_costs(pool, tmp_path):
    costs = {m: float(i) for i, m in enumerate(MODELS(pool))}
    r = LocusRouter(tiny_embedder(pool.encodings, max_epochs=1), cost_weight=0.1).fit(
        pool.evals, model_costs=costs
    )
    r.save(tmp_path / "r.safetensors")
    loaded = LocusRouter.load(tmp_path / "r.safetensors")
    np.testing.assert_array_equal(loaded.model_costs_, r.model_costs_)
    assert loaded.cost_weight == 0.1


def test_load_rejects_corrupt_and_foreign_files(tmp_path):
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x00\x01not a safetensors file")
    with pytest.raises(ValueError, match="not a readable locus_sklearn file"):
        LocusRouter.load(bad)
    with pytest.raises(FileNotFoundError):
        LocusRouter.load(tmp_path / "missing.safetensors")
    import torch
    from safetensors.torch import save_file

    save_file({"x": torch.zeros(2)}, str(tmp_path / "other.safetensors"))
    with pytest.raises(ValueError, match="not a locus_sklearn one"):
        LocusRouter.load(tmp_path / "other.safetensors")


def test_kernel_readout_router_keeps_evaluations(pool, tmp_path):
    r = LocusRouter(tiny_embedder(pool.encodings, max_epochs=1, kernel_readout=True))
    r.fit(pool.evals)
    queries = QUERIES(pool)[:15]
    before = r.predict_proba(queries)
    assert r.pool_evals_[1].n_models == 12 and np.isfinite(before).all()
    names = MODELS(pool)
    r.remove_models(names[:2])
    assert r.pool_evals_[1].models.tolist() == names[2:]
    r.add_models(_rows_of(pool.evals, names[:2]))
    np.testing.assert_allclose(r.predict_proba(queries), before, atol=1e-6)
    r.save(tmp_path / "kr.safetensors")
    loaded = LocusRouter.load(tmp_path / "kr.safetensors")
    np.testing.assert_array_equal(
        loaded.predict_proba(queries), r.predict_proba(queries)
    )
    with pytest.raises(ValueError, match="pass evals="):
        r.embedder_.predict_proba(r.model_embeddings_, queries)
    z = r.embedder_.transform(pool.evals)
    np.testing.assert_allclose(
        r.embedder_.predict_proba(z, queries, evals=pool.evals), before, atol=1e-6
    )


def test_mixed_model_episodes_train_and_are_reproducible(pool):
    import torch

    from locus_sklearn._training import RandomEpisodes

    queries = [torch.arange(0, 10), torch.arange(5, 15)]
    scores = [torch.ones(10), torch.zeros(10)]
    region = torch.tensor([0] * 8 + [1] * 8)
    episodes = RandomEpisodes(
        queries, scores, np.array([0]), mix_prob=1.0, query_region=region
    )
    torch.manual_seed(0)
    for _ in range(20):
        (rows, labels), _ = episodes[0]
        # Model 0 (score 1) keeps its rows in the regions not taken from model 1.
        for q, y in zip(rows.tolist(), labels.tolist(), strict=True):
            assert y == 1.0 and q < 10 or y == 0.0 and q >= 5
    evals = _rows_of(pool.evals, MODELS(pool)[:6])
    a = tiny_embedder(pool.encodings, max_epochs=2, mix_prob=0.5, n_regions=4).fit(
        evals
    )
    b = tiny_embedder(pool.encodings, max_epochs=2, mix_prob=0.5, n_regions=4).fit(
        evals
    )
    np.testing.assert_array_equal(a.transform(evals), b.transform(evals))


def test_episode_collator_draws_one_encoder_size_per_batch():
    import torch

    from locus_sklearn._training import EpisodeCollator, RandomEpisodes

    sizes = [100, 90, 8]
    queries = [torch.arange(n) + 1000 * m for m, n in enumerate(sizes)]
    scores = [torch.full((n,), float(m % 2)) for m, n in enumerate(sizes)]
    episodes = RandomEpisodes(queries, scores, np.arange(3))
    collate = EpisodeCollator((10, 50), dec_size=20, disjoint=True)
    torch.manual_seed(0)
    drawn = []
    for _ in range(50):
        X, y = collate([episodes[i] for i in range(3)])
        n_enc = X["enc_mask"].sum(1).tolist()
        # One size for the batch; the 8-row model is capped at 8 - 8 // 4 = 6.
        assert n_enc[0] == n_enc[1] and 10 <= n_enc[0] <= 50
        assert n_enc[2] == 6
        drawn.append(n_enc[0])
        for b, n in enumerate(sizes):
            enc = set(X["enc_index"][b, : n_enc[b]].tolist())
            n_dec = int((~torch.isnan(y[b])).sum())
            dec = set(X["dec_index"][b, :n_dec].tolist())
            assert not enc & dec  # disjoint
            assert n_dec == min(20, n - n_enc[b])
            assert enc | dec <= set(queries[b].tolist())
            # Scores travel with their queries.
            assert torch.all(X["enc_score"][b, : n_enc[b]] == float(b % 2))
    assert len(set(drawn)) > 10  # sizes do vary from batch to batch


def test_divergence_is_a_clear_error(pool):
    evals = _rows_of(pool.evals, MODELS(pool)[:4])
    with pytest.raises(FloatingPointError, match="training diverged.*lower lr"):
        tiny_embedder(pool.encodings, lr=1e30, gradient_clip=None, max_epochs=3).fit(
            evals
        )


def test_valid_routing_accuracy_reuses_the_validation_pass(pool):
    """The callback takes its embeddings from skorch's validation pass; they
    must give the same number as embedding the validation episodes anew."""
    import torch

    from locus_sklearn._evals import check_evals

    evals = _rows_of(pool.evals, MODELS(pool)[:8])
    embedder = tiny_embedder(
        pool.encodings, max_epochs=2, early_stopping=None, validation_fraction=0.3
    ).fit(evals)
    net = embedder.net_
    recorded = net.history[-1, "valid_routing_accuracy"]
    callback = dict(net.callbacks_)["valid_routing"]
    assert callback.bank is None and net.query_bank_ is None  # released after fit
    table = check_evals(evals)
    bank = embedder.encoder_.transform(table.queries)
    callback.bank = torch.as_tensor(bank, dtype=torch.float32)
    callback.on_epoch_end(net)  # no validation pass: embeds the episodes itself
    assert net.history[-1, "valid_routing_accuracy"] == pytest.approx(
        recorded, abs=1e-12
    )
