"""LOCUS training (``_training``): episodes, collators, callbacks and
``fit_network``, through LocusEmbedder.fit and directly.

The tiny settings and the ``pool`` fixture are in conftest.py.
"""

import warnings
from types import SimpleNamespace

import numpy as np
import pytest

from locus_sklearn import CollapsedEmbeddingWarning, LocusRouter
from locus_sklearn.metrics import correctness_accuracy


def test_training_history_and_early_stopping(pool, tiny_embedder):
    emb = tiny_embedder(pool.encodings, max_epochs=30, patience=2, lr=0.05)
    emb.fit(pool.evals)
    history = emb.net_.history
    assert {"train_loss", "valid_loss", "valid_routing_accuracy"} <= set(history[-1])
    assert emb.n_epochs_ == len(history) <= 30
    no_valid = tiny_embedder(pool.encodings, max_epochs=2, validation_fraction=0.0)
    no_valid.fit(pool.evals)
    assert "valid_loss" not in no_valid.net_.history[-1]


def test_cpu_training_uses_the_fused_adamw_step(pool, tiny_embedder):
    """The optimiser a fit builds takes AdamW's fused kernel on the CPU (one
    pass over the parameters) where torch has it, with the estimator's lr and
    weight decay."""
    from locus_sklearn._training import _has_fused_adamw

    emb = tiny_embedder(pool.encodings, max_epochs=1, lr=0.003, weight_decay=0.02)
    emb.fit(pool.evals)
    defaults = emb.net_.optimizer_.defaults
    assert bool(defaults["fused"]) is _has_fused_adamw("cpu")
    assert (defaults["lr"], defaults["weight_decay"]) == (0.003, 0.02)


def test_fused_adamw_only_where_the_installed_torch_has_it(monkeypatch):
    import torch
    from torch.torch_version import TorchVersion

    from locus_sklearn._training import _has_fused_adamw

    monkeypatch.setattr(torch, "__version__", TorchVersion("2.3.1"))
    assert not _has_fused_adamw("cpu") and _has_fused_adamw("cuda")
    monkeypatch.setattr(torch, "__version__", TorchVersion("2.4.0+cpu"))
    assert _has_fused_adamw("cpu") and not _has_fused_adamw("mps")


def test_fit_learns_better_than_pool_average(pool, tiny_embedder):
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


def test_mixed_model_episodes_train_and_are_reproducible(
    pool, tiny_embedder, model_names, rows_of, assert_reproduced
):
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
    evals = rows_of(pool.evals, model_names[:6])
    a = tiny_embedder(pool.encodings, max_epochs=2, mix_prob=0.5, n_regions=4).fit(
        evals
    )
    b = tiny_embedder(pool.encodings, max_epochs=2, mix_prob=0.5, n_regions=4).fit(
        evals
    )
    assert_reproduced(a.transform(evals), b.transform(evals))


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


def test_divergence_is_a_clear_error(pool, tiny_embedder, model_names, rows_of):
    evals = rows_of(pool.evals, model_names[:4])
    with pytest.raises(FloatingPointError, match="training diverged.*lower lr"):
        # weight_decay=0: with it, an lr * weight_decay of 1 or more is
        # refused before training.
        tiny_embedder(
            pool.encodings, lr=1e30, weight_decay=0.0, gradient_clip=None, max_epochs=3
        ).fit(evals)


@pytest.mark.parametrize(
    "clip, advice",
    [(1.0, r"lower gradient_clip \(now 1\.0\)\.$"), (None, r"or set gradient_clip\.$")],
)
def test_divergence_advice_follows_gradient_clip(clip, advice):
    # Said "or set gradient_clip" with clipping on (the default 1.0).
    with pytest.raises(FloatingPointError, match=advice):
        _diverging_fit(
            lr=1000.0, gradient_clip=clip, max_epochs=2, episodes_per_epoch=12,
            batch_size=4,
        )  # fmt: skip


def _diverging_fit(**params):
    """A small fit that diverges (the settings of a probe's repros)."""
    from locus_sklearn import LocusEmbedder
    from locus_sklearn.datasets import make_model_pool

    small = make_model_pool(
        n_models=6, n_families=2, n_queries=40, evals_per_model=20, random_state=0
    )
    # weight_decay=0: lr alone diverges (an lr * weight_decay of 1 or more
    # is refused before training).
    settings = dict(
        embedding_dim=8, n_latents=2, n_blocks=1, n_heads=2, enc_size=(2, 16),
        random_state=0, weight_decay=0.0,
    ) | params  # fmt: skip
    return LocusEmbedder(small.encodings, **settings).fit(small.evals)


def test_a_collapsed_readout_bandwidth_is_a_clear_divergence_error():
    """lr=1000 drives the readout's log-bandwidth to about -980, τ to 0.0:
    the next batch raised ZeroDivisionError (2 / τ) before any loss showed
    the divergence."""
    with pytest.raises(
        FloatingPointError,
        match=r"training diverged: the kernel readout's bandwidth became 0\.0 "
        r".*epoch 1; lower lr \(now 1000\.0\)",
    ):
        _diverging_fit(lr=1000.0, max_epochs=2, episodes_per_epoch=12, batch_size=4)


def test_divergence_on_an_epochs_last_step_is_named_before_validation():
    """Weights grown large but finite by an epoch's last step overflow the
    validation pass to NaN first: the routing metric then raised "y_score
    must hold finite numbers", naming nothing the user set. The validation
    loss is checked before it. (The probe's repros grew the weights tenfold
    an epoch with an lr * weight_decay of 10, now refused before training:
    test_lr_times_weight_decay_of_one_is_refused_at_fit.)"""
    with pytest.raises(
        FloatingPointError,
        match=r"training diverged: the validation loss became .* lower lr "
        r"\(now 1e\+30\)",
    ):
        _diverging_fit(
            lr=1e30, kernel_readout=False, max_epochs=10, episodes_per_epoch=6,
            batch_size=6,
        )  # fmt: skip


@pytest.mark.parametrize("lr, weight_decay", [(0.01, 150.0), (1e-3, 1e4), (0.5, 2.0)])
def test_lr_times_weight_decay_of_one_is_refused_at_fit(
    pool, tiny_embedder, lr, weight_decay
):
    """AdamW scales every weight by 1 - lr * weight_decay each step: between
    1 and 2 that zeroes or flips them without a non-finite value, and fit
    returned a router trained to nothing, without an error or a warning (the
    training guide said it stopped with a FloatingPointError)."""
    embedder = tiny_embedder(pool.encodings, lr=lr, weight_decay=weight_decay)
    match = (
        f"lr={lr!r} and weight_decay={weight_decay!r} give lr \\* weight_decay = "
        ".* which must be below 1"
    )
    with pytest.raises(ValueError, match=match):
        embedder.fit(pool.evals)
    assert not hasattr(embedder, "net_")
    with pytest.raises(ValueError, match=match):
        LocusRouter(embedder).fit(pool.evals)
    # Just below 1 trains (to a collapse, which is warned of, not refused).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CollapsedEmbeddingWarning)
        fitted = tiny_embedder(
            pool.encodings, lr=lr, weight_decay=0.99 / lr, max_epochs=1
        ).fit(pool.evals)
    assert fitted.n_epochs_ == 1


def test_divergence_check_finds_non_finite_weights_at_epoch_end():
    """No training loss follows the last step of the last epoch: the epoch's
    end checks the weights themselves, then the validation loss."""
    from types import SimpleNamespace

    import torch
    from skorch.history import History

    from locus_sklearn._training import DivergenceCheck

    module = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.Linear(3, 1))
    net = SimpleNamespace(module_=module, lr=0.5, history=History())
    net.history.new_epoch()
    net.history.record("valid_loss", 0.7)
    check = DivergenceCheck("Router", remedy=None)
    check.on_epoch_end(net)  # finite: nothing to say
    with torch.no_grad():
        module[1].weight[0, 2] = float("inf")
    with pytest.raises(
        FloatingPointError,
        match=r"^Router training diverged: weights became non-finite \(1 tensors: "
        r"1\.weight\) in epoch 1; lower lr \(now 0\.5\)\.$",
    ):
        check.on_epoch_end(net)
    with torch.no_grad():
        module[1].weight[0, 2] = 0.0
    net.history.record("valid_loss", float("nan"))
    with pytest.raises(FloatingPointError, match="the validation loss became nan"):
        check.on_epoch_end(net)


def test_non_finite_validation_logits_are_a_divergence_error(
    pool, tiny_embedder, model_names, rows_of, monkeypatch
):
    """NaN routing logits with finite weights and loss (an overflow in the
    pairwise pass) stop the fit with the divergence message, not the routing
    metric's error about its y_score."""
    import torch

    from locus_sklearn._nn import LocusNetwork

    def nan_logits(self, z, queries, *args, **kwargs):
        return torch.full((len(queries), len(z)), float("nan"))

    monkeypatch.setattr(LocusNetwork, "pairwise_logits", nan_logits)
    embedder = tiny_embedder(
        pool.encodings, max_epochs=1, early_stopping=None, validation_fraction=0.3
    )
    with pytest.raises(
        FloatingPointError,
        match=r"the validation logits became NaN or \+inf in epoch 1; lower lr",
    ):
        embedder.fit(rows_of(pool.evals, model_names[:4]))


def test_valid_routing_accuracy_reuses_the_validation_pass(
    pool, tiny_embedder, model_names, rows_of
):
    """The callback takes its embeddings from skorch's validation pass; they
    must give the same number as embedding the validation episodes anew."""
    import torch

    from locus_sklearn._evals import check_evals

    evals = rows_of(pool.evals, model_names[:8])
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


def test_gather_queries_gives_the_same_logits_as_the_whole_bank():
    import torch

    from locus_sklearn._nn import LocusNetwork
    from locus_sklearn._training import gather_queries

    torch.manual_seed(0)
    net = LocusNetwork(12, embedding_dim=16, n_latents=4, n_blocks=1, n_heads=2).eval()
    bank = torch.randn(30, 12)
    X = {
        "enc_index": torch.tensor([[3, 7, 9], [20, 3, 0]]),
        "enc_score": torch.tensor([[1.0, 0.0, 1.0], [0.0, 1.0, 0.0]]),
        "enc_mask": torch.tensor([[True, True, True], [True, True, False]]),
        "dec_index": torch.tensor([[1, 2], [29, 3]]),
    }
    whole = net(bank, **X)
    inputs = gather_queries(bank, X)
    assert len(inputs["features"]) == 8  # unique queries: 0-3, 7, 9, 20, 29
    torch.testing.assert_close(net(**inputs), whole)


# ------------------------------------------------------------ profile objective
def test_collate_episodes_gives_each_episodes_mean_score_per_region():
    import torch

    from locus_sklearn._training import collate_episodes

    region = torch.tensor([0, 0, 1, 2, 2, 1])
    episodes = [
        ((torch.tensor([0]), torch.tensor([1.0]),
          torch.tensor([1, 2, 3, 4]), torch.tensor([1.0, 0.0, 1.0, 0.0])), 0),
        ((torch.tensor([5]), torch.tensor([0.0]),
          torch.tensor([0, 1]), torch.tensor([0.0, 1.0])), 1),
    ]  # fmt: skip
    X, _ = collate_episodes(episodes, (region, 4))
    # Episode 0: region 0 has query 1 (1.0), region 1 query 2 (0.0), region 2
    # queries 3 and 4 (mean 0.5); episode 1: region 0, queries 0 and 1 (0.5).
    expected = torch.tensor([[1.0, 0.0, 0.5, 0.0], [0.5, 0.0, 0.0, 0.0]])
    torch.testing.assert_close(X["profile"], expected)
    torch.testing.assert_close(
        X["profile_count"], torch.tensor([[1.0, 1.0, 2.0, 0.0], [2.0, 0, 0, 0]])
    )
    assert "profile" not in collate_episodes(episodes)[0]


def test_regions_are_capped_at_the_distinct_encodings(pool, tiny_embedder):
    """k-means asked for more regions than distinct encodings warned sklearn's
    ConvergenceWarning about an n_clusters the user never set; queries that
    share an encoding now get one region per distinct encoding."""
    from sklearn.cluster import KMeans
    from sklearn.exceptions import ConvergenceWarning

    from locus_sklearn import SharedEncodingsWarning
    from locus_sklearn._training import _regions

    distinct = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]], dtype=np.float32)
    X = distinct[[0, 1, 2, 0, 1, 2, 2]]
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        labels = _regions(X, 16, seed=0).numpy()
    # Three regions, one per distinct encoding.
    assert sorted(set(labels[:3].tolist())) == [0, 1, 2]
    np.testing.assert_array_equal(labels[3:6], labels[:3])
    assert labels[6] == labels[2]
    # Distinct encodings: n_regions as before.
    X = np.random.RandomState(0).randn(20, 3)
    np.testing.assert_array_equal(
        _regions(X, 4, seed=0).numpy(),
        KMeans(4, n_init=1, random_state=0).fit_predict(X),
    )
    # In a fit, with queries sharing 4 encodings.
    queries = sorted(pool.encodings)
    shared = {q: pool.encodings[queries[i % 4]] for i, q in enumerate(queries)}
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        warnings.simplefilter("ignore", SharedEncodingsWarning)
        tiny_embedder(
            shared, max_epochs=1, mix_prob=0.5, n_regions=16, n_profile_regions=16
        ).fit(pool.evals)


def test_profile_objective_trains_a_head_and_changes_the_embeddings(
    pool, tiny_embedder
):
    plain = tiny_embedder(pool.encodings, max_epochs=2).fit(pool.evals)
    profiled = tiny_embedder(
        pool.encodings, max_epochs=2, n_profile_regions=4, profile_weight=1.0
    ).fit(pool.evals)
    assert profiled.net_.module_.profile.out_features == 4
    assert plain.net_.module_.profile is None
    assert not np.allclose(plain.transform(pool.evals), profiled.transform(pool.evals))


def test_standardized_embedding_fits_saves_and_loads(pool, tiny_embedder, tmp_path):
    from locus_sklearn import LocusEmbedder

    embedder = tiny_embedder(
        pool.encodings, max_epochs=2, standardize_embedding=True
    ).fit(pool.evals)
    module = embedder.net_.module_
    assert module.encoder.standardize is not None
    assert int(module.encoder.standardize.num_batches_tracked) > 0
    # Training moved the running statistics off their start (0 and 1), and
    # transform reads them: the models' embeddings are centred by them.
    stats = module.encoder.standardize
    assert stats.running_mean.abs().max() > 0 and (stats.running_var != 1).any()
    Z = embedder.transform(pool.evals)
    assert np.isfinite(Z).all()
    path = tmp_path / "embedder.locus"
    embedder.save(path)
    loaded = LocusEmbedder.load(path, encoder=pool.encodings)
    assert loaded.standardize_embedding is True
    np.testing.assert_allclose(loaded.transform(pool.evals), Z, atol=1e-6)


def test_standardize_embedding_is_validated(pool, tiny_embedder):
    with pytest.raises(ValueError, match="standardize_embedding"):
        tiny_embedder(pool.encodings, standardize_embedding="yes").fit(pool.evals)


def test_prediction_switches_a_submodule_left_in_training_mode(pool, tiny_embedder):
    """A network left partly in training mode (one submodule's dropout on) is
    switched to eval mode by predict_proba and transform before anything is
    computed: the same outputs as from a network in eval mode."""
    emb = tiny_embedder(pool.encodings, dropout=0.5, max_epochs=1).fit(pool.evals)
    module = emb.net_.module_
    queries = pool.evals["query"].unique()[:20]
    Z = emb.transform(pool.evals)
    P = emb.predict_proba(Z, queries, evals=pool.evals)
    submodules = [m for m in module.modules() if m is not module]
    for call, expected in (
        (lambda: emb.predict_proba(Z, queries, evals=pool.evals), P),
        (lambda: emb.transform(pool.evals), Z),
    ):
        submodules[len(submodules) // 2].train()
        assert module.training is False
        out = call()
        assert not any(m.training for m in module.modules())
        np.testing.assert_array_equal(out, expected)


def _disjoint_evals(n_models=2, n_rows=20):
    """Models that share no query: no held-out query has two models' rows."""
    import pandas as pd

    rng = np.random.RandomState(0)
    n = n_models * n_rows
    evals = pd.DataFrame(
        {
            "model": np.repeat([f"m{i}" for i in range(n_models)], n_rows),
            "query": [f"q{i}" for i in range(n)],
            "score": (rng.rand(n) > 0.5).astype(float),
        }
    )
    encoder = {q: rng.randn(8).astype(np.float32) for q in evals["query"]}
    return evals, encoder


def test_valid_routing_accuracy_stopping_needs_queries_two_models_answered(
    tiny_embedder, monkeypatch
):
    """It crashed the fit after the first epoch with skorch's bare KeyError
    (the callback records nothing without such queries)."""
    from locus_sklearn._training import LocusNet

    evals, encoder = _disjoint_evals()

    def never(*args, **kwargs):
        raise AssertionError("training started")

    monkeypatch.setattr(LocusNet, "partial_fit", never)
    params = dict(validation_fraction=0.5, early_stopping="valid_routing_accuracy")
    match = (
        r"early_stopping='valid_routing_accuracy' ranks the models .* each of the "
        r"20 queries with held-out rows \(validation_fraction=0.5\) has rows of one "
        r"model only.*use early_stopping='valid_loss'"
    )
    for estimator in (
        tiny_embedder(encoder, **params),
        LocusRouter(tiny_embedder(encoder, **params), shrinkage=None),
    ):
        with pytest.raises(ValueError, match=match):
            estimator.fit(evals)
        assert not hasattr(estimator, "embedder_") and not hasattr(estimator, "net_")


def test_valid_loss_stopping_still_trains_where_no_query_is_shared(tiny_embedder):
    evals, encoder = _disjoint_evals()
    embedder = tiny_embedder(encoder, validation_fraction=0.5, max_epochs=2)
    embedder.fit(evals)
    assert "valid_loss" in embedder.net_.history[-1]


@pytest.mark.parametrize(
    "fraction, n_queries, n_models, why",
    [
        (0.1, 4, 2, "0.1 of the 4 queries rounds to 0 queries"),
        (
            0.999,
            40,
            4,
            "it held out 40 of the 40 queries, but that left each model with "
            "held-out rows fewer than 2 training rows, so their rows went back "
            "to training",
        ),
    ],
)
def test_validation_that_holds_out_nothing_warns(
    tiny_embedder, fraction, n_queries, n_models, why
):
    """validation_fraction > 0 that held out no row silently trained without
    validation and early stopping."""
    import warnings

    import pandas as pd

    rng = np.random.RandomState(0)
    queries = [f"q{i}" for i in range(n_queries)]
    evals = pd.DataFrame(
        {
            "model": np.repeat([f"m{i}" for i in range(n_models)], n_queries),
            "query": queries * n_models,
            "score": (rng.rand(n_queries * n_models) > 0.5).astype(float),
        }
    )
    encoder = {q: rng.randn(8).astype(np.float32) for q in queries}
    embedder = tiny_embedder(encoder, validation_fraction=fraction, max_epochs=2)
    with pytest.warns(UserWarning, match=f"validation_fraction={fraction}") as record:
        embedder.fit(evals)
    (warning,) = [w for w in record if "validation_fraction" in str(w.message)]
    assert warning.filename == __file__  # the caller's line
    message = str(warning.message)
    assert why in message
    assert "without validation and early stopping, for max_epochs=2" in message
    assert "validation_fraction=0 to train without validation knowingly" in message
    assert "valid_loss" not in embedder.net_.history[-1]
    # Turned off knowingly, no warning.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tiny_embedder(encoder, validation_fraction=0, max_epochs=1).fit(evals)


def test_fit_seeds_no_cuda_generator_for_a_cpu_fit(pool, tiny_embedder, monkeypatch):
    # torch.manual_seed seeds every GPU's generator too (queued until CUDA
    # starts): a CPU fit reset the caller's CUDA random state.
    import torch

    from locus_sklearn.baselines import MatrixFactorizationRouter

    def refuse(*args, **kwargs):
        raise AssertionError("a CPU fit seeded a CUDA generator")

    monkeypatch.setattr(torch.cuda, "manual_seed_all", refuse)
    monkeypatch.setattr(torch.cuda, "manual_seed", refuse)
    first = tiny_embedder(pool.encodings, max_epochs=1).fit(pool.evals)
    again = tiny_embedder(pool.encodings, max_epochs=1).fit(pool.evals)
    np.testing.assert_array_equal(
        first.transform(pool.evals), again.transform(pool.evals)
    )
    MatrixFactorizationRouter(encoder=pool.encodings, max_epochs=1, random_state=0).fit(
        pool.evals
    )


@pytest.mark.parametrize("kernel_readout", [True, False])
def test_predictions_under_a_callers_autocast(pool, tiny_embedder, kernel_readout):
    # The predictor's buffers are float32; under autocast its products were
    # bfloat16 and predict_proba failed. Predictions stay float32 there.
    import torch

    emb = tiny_embedder(pool.encodings, max_epochs=1, kernel_readout=kernel_readout)
    emb.fit(pool.evals)
    Z = emb.transform(pool.evals)
    queries = pool.queries["query"][:5].tolist()
    expected = emb.predict_proba(Z, queries, evals=pool.evals)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        proba = emb.predict_proba(Z, queries, evals=pool.evals)
    assert proba.dtype == np.float32
    np.testing.assert_array_equal(proba, expected)
    if not kernel_readout:
        # The predictor's own pairwise path runs under autocast, in its dtype.
        features = torch.as_tensor(np.stack([pool.encodings[q] for q in queries]))
        with torch.autocast("cpu", dtype=torch.bfloat16), torch.no_grad():
            logits = emb.net_.module_.predictor.pairwise_logits(
                torch.as_tensor(Z), features
            )
        np.testing.assert_allclose(
            torch.sigmoid(logits.float()).numpy(), expected, atol=0.02
        )


def test_encoder_runs_on_torch_before_2_4(pool, tiny_embedder, monkeypatch):
    # torch.is_autocast_enabled takes a device type from torch 2.4; before it
    # takes no argument (pyproject allows torch 2.2): transform failed there.
    import torch

    emb = tiny_embedder(pool.encodings, max_epochs=1).fit(pool.evals)
    expected = emb.transform(pool.evals)
    monkeypatch.setattr(torch, "is_autocast_enabled", lambda: False)
    monkeypatch.setattr(torch, "is_autocast_cpu_enabled", lambda: False, raising=False)
    np.testing.assert_array_equal(emb.transform(pool.evals), expected)


def test_fit_trains_in_float32_under_a_float64_default_dtype(pool, tiny_embedder):
    # Scientific code often sets a float64 default (BoTorch, GPyTorch): the
    # network was then built in float64 against float32 encodings and the
    # first step failed inside torch ("mat1 and mat2 must have the same dtype").
    import torch

    expected = tiny_embedder(pool.encodings, max_epochs=1).fit(pool.evals)
    torch.set_default_dtype(torch.float64)
    try:
        emb = tiny_embedder(pool.encodings, max_epochs=1).fit(pool.evals)
        assert torch.get_default_dtype() == torch.float64  # the caller's, kept
    finally:
        torch.set_default_dtype(torch.float32)
    dtypes = {p.dtype for p in emb.net_.module_.parameters()}
    assert dtypes == {torch.float32}
    np.testing.assert_array_equal(
        emb.transform(pool.evals), expected.transform(pool.evals)
    )


@pytest.mark.parametrize("context", ["inference_mode", "no_grad"])
def test_fit_trains_inside_a_callers_inference_mode(pool, tiny_embedder, context):
    # skorch turns gradients back on under no_grad but cannot leave inference
    # mode: backward failed there with a raw autograd error.
    import torch

    expected = tiny_embedder(pool.encodings, max_epochs=1).fit(pool.evals)
    with getattr(torch, context)():
        emb = tiny_embedder(pool.encodings, max_epochs=1).fit(pool.evals)
        assert not torch.is_grad_enabled()  # the caller's mode, kept
    np.testing.assert_array_equal(
        emb.transform(pool.evals), expected.transform(pool.evals)
    )


def test_fit_trains_in_float32_under_a_callers_autocast(pool, tiny_embedder):
    # Training runs in float32 whatever the caller's torch settings: under a
    # caller's autocast it trained in bfloat16 (embeddings ~1e-3 off).
    import torch

    from locus_sklearn._nn import autocast_enabled

    expected = tiny_embedder(pool.encodings, max_epochs=1).fit(pool.evals)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        emb = tiny_embedder(pool.encodings, max_epochs=1).fit(pool.evals)
        assert autocast_enabled("cpu")  # the caller's, kept
    np.testing.assert_array_equal(
        emb.transform(pool.evals), expected.transform(pool.evals)
    )


def test_tensor_embeddings_in_bfloat16_or_with_grad(pool, tiny_embedder):
    # NumPy converts neither a bfloat16 tensor nor one that requires grad:
    # predict_proba and the selectors failed with torch's own messages
    # ("Got unsupported ScalarType BFloat16", "Can't call numpy() on Tensor
    # that requires grad"). They read them as the float32 values they hold.
    import torch

    from locus_sklearn import KCenterSelector, k_center_select

    emb = tiny_embedder(pool.encodings, max_epochs=1).fit(pool.evals)
    Z = torch.as_tensor(emb.transform(pool.evals))
    rounded = Z.bfloat16().float().numpy()  # bfloat16 values, exact in float32
    queries = pool.queries["query"][:5].tolist()
    np.testing.assert_array_equal(
        emb.predict_proba(Z.bfloat16(), queries, evals=pool.evals),
        emb.predict_proba(rounded, queries, evals=pool.evals),
    )
    np.testing.assert_array_equal(
        emb.predict_proba(Z.clone().requires_grad_(), queries, evals=pool.evals),
        emb.predict_proba(Z.numpy(), queries, evals=pool.evals),
    )
    selector = KCenterSelector(n_select=3).fit(Z.bfloat16())
    expected = KCenterSelector(n_select=3).fit(rounded)
    np.testing.assert_array_equal(
        selector.selected_indices_, expected.selected_indices_
    )
    np.testing.assert_array_equal(
        selector.transform(Z.clone().requires_grad_()), expected.transform(Z.numpy())
    )
    np.testing.assert_array_equal(
        k_center_select(Z.bfloat16(), 3)[0], k_center_select(rounded, 3)[0]
    )


def test_early_stopping_history_marks_the_restored_epoch(pool, tiny_embedder):
    """An epoch improves only by more than 1e-4 of the best loss so far: with a
    tiny lr the loss falls by less each epoch, so training stops after
    ``patience`` epochs, keeping epoch 1's weights; ``valid_loss_best`` marks
    just that epoch (skorch's mark, with no threshold, marked every epoch)."""
    from locus_sklearn._training import EARLY_STOPPING_THRESHOLD

    params = dict(lr=5e-7, dropout=0.0, query_noise=0.0, max_epochs=8, patience=2)
    emb = tiny_embedder(pool.encodings, **params).fit(pool.evals)
    stopping = dict(emb.net_.callbacks_)["early_stopping"]
    # No spare copy of the best weights is kept after fit (it doubled the
    # network's memory; they were restored already).
    assert stopping.best_model_weights_ is None
    history = emb.net_.history
    losses = history[:, "valid_loss"]
    assert (np.diff(losses) < 0).all()  # still falling (about 3e-5 an epoch)
    # Hand-replayed rule: a new best beats the last best by the threshold.
    best, marks = np.inf, []
    for loss in losses:
        marks.append(bool(loss < best * (1 - EARLY_STOPPING_THRESHOLD)))
        best = loss if marks[-1] else best
    assert marks == [True, False, False]
    assert history[:, "valid_loss_best"] == marks
    assert emb.n_epochs_ == 3
    assert stopping.best_epoch_ == 1
    # The restored weights are epoch 1's: those of a fit stopped there.
    params.update(max_epochs=1, early_stopping=None)
    first = tiny_embedder(pool.encodings, **params)
    np.testing.assert_array_equal(
        emb.transform(pool.evals), first.fit(pool.evals).transform(pool.evals)
    )


def test_n_epochs_counts_finished_epochs_after_an_interrupt(
    pool, tiny_embedder, monkeypatch
):
    """Ctrl-C in the middle of epoch 3 leaves a history row with no
    train_loss: n_epochs_ counted it (3) while only 2 epochs were done, and
    the training guide tells users to check n_epochs_ before saving."""
    from locus_sklearn._training import LocusNet

    train_step = LocusNet.train_step

    def interrupted(self, *args, **kwargs):
        # The second step of epoch 3 (its row has one batch recorded).
        if len(self.history) == 3 and len(self.history[-1]["batches"]) == 1:
            raise KeyboardInterrupt
        return train_step(self, *args, **kwargs)

    monkeypatch.setattr(LocusNet, "train_step", interrupted)
    emb = tiny_embedder(pool.encodings, max_epochs=10).fit(pool.evals)
    history = emb.net_.history
    assert len(history) == 3 and "train_loss" not in history[-1]
    assert emb.n_epochs_ == 2
    # A fit stopped by max_epochs counts them all.
    monkeypatch.setattr(LocusNet, "train_step", train_step)
    emb = tiny_embedder(pool.encodings, max_epochs=2, early_stopping=None)
    assert emb.fit(pool.evals).n_epochs_ == 2


def test_the_epoch_table_shows_the_epoch_that_stopped_training(
    pool, tiny_embedder, capsys
):
    """skorch prints an epoch's row after every other callback, and early
    stopping's KeyboardInterrupt skipped it: the table ended one epoch short
    of n_epochs_, and the stop and restore messages went to standard output
    while the table went to standard error."""
    params = dict(lr=5e-7, dropout=0.0, query_noise=0.0, max_epochs=8, patience=2)
    emb = tiny_embedder(pool.encodings, verbose=1, **params).fit(pool.evals)
    out, err = capsys.readouterr()
    assert out == ""
    lines = err.splitlines()
    rows = [
        line.split()[0] for line in lines if line.split()[:1] in (["1"], ["2"], ["3"])
    ]
    assert emb.n_epochs_ == 3 and rows == ["1", "2", "3"]
    stop = next(i for i, line in enumerate(lines) if line.startswith("Stopping"))
    assert lines[stop - 1].split()[0] == "3"  # the row comes before the message
    assert lines[stop + 1 :] == ["Restoring best model from epoch 1."]
    # Quiet without verbose.
    tiny_embedder(pool.encodings, **params).fit(pool.evals)
    assert capsys.readouterr() == ("", "")


def test_marked_early_stopping_marks_improvements_of_a_higher_is_better_score():
    import torch
    from skorch.history import History

    from locus_sklearn._training import MarkedEarlyStopping

    stopping = MarkedEarlyStopping(
        monitor="valid_routing_accuracy", lower_is_better=False, patience=5
    ).initialize()
    net = SimpleNamespace(history=History(), module_=torch.nn.Linear(1, 1), verbose=0)
    stopping.on_train_begin(net)
    # 0.50002 is below 0.5 * (1 + 1e-4): no improvement.
    for epoch, score in enumerate([0.5, 0.50002, 0.6, 0.6], start=1):
        net.history.new_epoch()
        net.history.record("epoch", epoch)
        net.history.record("valid_routing_accuracy", score)
        stopping.on_epoch_end(net)
    assert net.history[:, "valid_routing_accuracy_best"] == [True, False, True, False]
    assert stopping.best_epoch_ == 3


@pytest.mark.parametrize("refine_steps", [0, 3])
def test_embeddings_under_a_callers_autocast(pool, tiny_embedder, refine_steps):
    # inference_dtype is the precision switch: a caller's autocast made
    # transform (and the refinement) run in bfloat16, about 5e-3 off.
    import torch

    emb = tiny_embedder(pool.encodings, max_epochs=1, refine_steps=refine_steps)
    emb.fit(pool.evals)
    expected = emb.transform(pool.evals)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        Z = emb.transform(pool.evals)
    assert Z.dtype == np.float32
    np.testing.assert_allclose(Z, expected, rtol=1e-6, atol=1e-7)


def test_read_only_arrays_reach_torch_writable(pool, tiny_embedder, request):
    """Read-only inputs (joblib's memmaps in a worker) are copied before torch
    sees them, which warned that writing to them is undefined behaviour (once
    per process, hence the check on every call here); writable ones are not
    copied."""

    from locus_sklearn._evals import check_evals
    from locus_sklearn._training import embed_models, predict_proba

    emb = tiny_embedder(pool.encodings, max_epochs=1).fit(pool.evals)
    module = emb.net_.module_
    table = check_evals(pool.evals)
    X_table = np.stack([pool.encodings[q] for q in table.queries]).astype(np.float32)
    queries = X_table[:7].copy()
    Z = embed_models(module, table, X_table, batch_tokens=4096)
    expected = predict_proba(module, Z, queries, (X_table, table))

    request.getfixturevalue("torch_refuses_read_only")
    for array in (X_table, queries, Z, table.query_index, table.score):
        array.flags.writeable = False
    np.testing.assert_array_equal(
        embed_models(module, table, X_table, batch_tokens=4096), Z
    )
    np.testing.assert_array_equal(
        predict_proba(module, Z, queries, (X_table, table)), expected
    )
    from locus_sklearn._training import writable

    writable_array = np.ones(3)
    assert writable(writable_array) is writable_array
    assert writable(Z) is not Z and writable(Z).flags.writeable


def test_divergence_advice_names_the_raised_setting_that_scales_the_loss():
    """query_noise=1e20 makes the loss NaN at once, and the advice named only
    lr and gradient_clip, which were at their defaults."""
    with pytest.raises(
        FloatingPointError,
        match=r"training diverged: .*; lower lr \(now 0\.001\) or lower query_noise "
        r"\(now 1e\+20, default 0\.05\) or lower gradient_clip \(now 1\.0\)\.$",
    ):
        _diverging_fit(
            query_noise=1e20, max_epochs=1, episodes_per_epoch=6, batch_size=6
        )


def test_raised_settings_lists_only_settings_above_their_defaults():
    from locus_sklearn import LocusEmbedder
    from locus_sklearn._training import raised_settings

    names = ["query_noise", "agreement_weight", "profile_weight"]
    # Defaults 0.05, 0.0 and 1.0: lower, equal and higher.
    params = dict(query_noise=0.01, agreement_weight=0.0, profile_weight=10**30)
    assert raised_settings(LocusEmbedder, params, names) == [
        "lower profile_weight (now 1e+30, default 1)"
    ]


def test_real_settings_given_as_huge_ints_train_as_the_same_floats(
    pool, tiny_embedder, model_names, rows_of
):
    """A Python int passes the Real constraints, but went to torch as an
    int64: OverflowError ("int too big to convert") mid-fit, naming nothing.
    The int trains as the float it equals; get_params keeps the int."""
    evals = rows_of(pool.evals, model_names[:4])
    params = dict(max_epochs=1, episodes_per_epoch=8)
    as_int = tiny_embedder(pool.encodings, agreement_weight=10**30, **params)
    as_float = tiny_embedder(pool.encodings, agreement_weight=1e30, **params)
    np.testing.assert_array_equal(
        as_int.fit_transform(evals), as_float.fit_transform(evals)
    )
    assert type(as_int.get_params()["agreement_weight"]) is int
    # query_noise this large diverges: named, as the float is.
    with pytest.raises(FloatingPointError, match=r"lower query_noise \(now 1e\+30"):
        tiny_embedder(pool.encodings, query_noise=10**30, **params).fit(evals)


class _WriteOnly:
    """A stream with write() only, as the "stderr to logging" idiom builds."""

    def __init__(self):
        self.written = []

    def write(self, text):
        self.written.append(text)

    def flush(self):
        pass


class _BrokenTTY(_WriteOnly):
    def isatty(self):
        raise ValueError("I/O operation on closed file")


def test_progress_sink_drops_output_without_stderr(monkeypatch, capfd):
    """sys.stderr is None under pythonw or with descriptor 2 closed: the sink
    raised AttributeError ('NoneType' object has no attribute 'isatty')."""
    import sys

    from locus_sklearn._training import progress_sink

    monkeypatch.setattr(sys, "stderr", None)
    progress_sink("\x1b[32mrow\x1b[0m")
    assert capfd.readouterr() == ("", "")


@pytest.mark.parametrize("stream", [_WriteOnly, _BrokenTTY])
def test_progress_sink_writes_to_a_stream_without_a_working_isatty(monkeypatch, stream):
    """Such a stream is no terminal: the text goes to it, colour codes removed."""
    import sys

    from locus_sklearn._training import progress_sink

    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setattr(sys, "stderr", stream())
    progress_sink("\x1b[32mrow\x1b[0m")
    assert "".join(sys.stderr.written) == "row\n"


@pytest.mark.parametrize("stderr", [None, _WriteOnly])
def test_verbose_fit_survives_a_missing_or_write_only_stderr(
    pool, tiny_embedder, model_names, rows_of, monkeypatch, stderr
):
    """The sink failed at the end of the first epoch, killing the fit."""
    import sys

    from locus_sklearn.baselines import MatrixFactorizationRouter

    evals = rows_of(pool.evals, model_names[:4])
    monkeypatch.setattr(sys, "stderr", stderr and stderr())
    router = MatrixFactorizationRouter(
        encoder=pool.encodings, embedding_dim=8, max_epochs=2, verbose=1
    ).fit(evals)
    embedder = tiny_embedder(pool.encodings, max_epochs=1, verbose=1).fit(evals)
    assert router.n_epochs_ == 2 and embedder.n_epochs_ == 1
    if stderr is not None:
        # Both epoch tables: header and rows, MF's two and the embedder's one.
        lines = "".join(sys.stderr.written).splitlines()
        epochs = [
            line.split()[0] for line in lines if line.split()[:1] in (["1"], ["2"])
        ]
        assert epochs == ["1", "2", "1"]
