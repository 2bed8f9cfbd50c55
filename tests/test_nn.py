"""The LOCUS networks: shapes, masks, order and padding invariance, factorisations."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from locus_sklearn._nn import (
    CorrectnessPredictor,
    EvaluationTokenizer,
    LocusEncoder,
    LocusNetwork,
    MaskedBCEWithLogitsLoss,
    TBlock,
)
from locus_sklearn._readout import EvaluationSets

F, D = 12, 16


def _encoder(seed=0, **kwargs):
    torch.manual_seed(seed)
    params = dict(embedding_dim=D, n_latents=4, n_blocks=2, n_heads=2)
    params.update(kwargs)
    return LocusEncoder(F, **params).eval()


def test_tokenizer_matches_unfactorised_linear_layer():
    # h(φ, y) = W [φ, y, φ(2y-1)] + b, computed the slow way.
    torch.manual_seed(0)
    tok = EvaluationTokenizer(F, D)
    features = torch.randn(5, F)
    index = torch.tensor([[0, 3, 4]])
    score = torch.tensor([[1.0, 0.0, 0.25]])
    w = tok.query.weight  # (2d, F): base rows then signed rows
    b = tok.query.bias
    expected = []
    for q, y in zip(index[0], score[0], strict=True):
        phi = features[q]
        base = w[:D] @ phi + b[:D]
        signed = w[D:] @ phi + b[D:]
        expected.append(base + (2 * y - 1) * signed + y * tok.score)
    got = tok(features, index, score)[0]
    torch.testing.assert_close(got, torch.stack(expected))


def test_tblock_shapes_and_masked_keys_are_ignored():
    torch.manual_seed(0)
    block = TBlock(D, 2).eval()
    q = torch.randn(2, 3, D)
    kv = torch.randn(2, 5, D)
    mask = torch.tensor([[False] * 5, [False, False, True, True, True]])
    out = block(q, kv, mask)
    assert out.shape == (2, 3, D)
    # Changing padded keys does not change the result.
    kv2 = kv.clone()
    kv2[1, 2:] = 100.0
    torch.testing.assert_close(block(q, kv2, mask), out)


def test_encoder_output_shape():
    enc = _encoder()
    features = torch.randn(7, F)
    index = torch.randint(0, 7, (3, 6))
    z = enc(features, index, torch.rand(3, 6), torch.ones(3, 6, dtype=torch.bool))
    assert z.shape == (3, D)


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(1, 40),
    extra=st.integers(0, 30),
    seed=st.integers(0, 2**16),
)
def test_encoder_invariant_to_order_and_padding(n, extra, seed):
    enc = _encoder()
    gen = torch.Generator().manual_seed(seed)
    features = torch.randn(50, F, generator=gen)
    index = torch.randint(0, 50, (1, n), generator=gen)
    score = torch.rand(1, n, generator=gen)
    alone = enc(features, index, score, torch.ones(1, n, dtype=torch.bool))
    perm = torch.randperm(n, generator=gen)
    shuffled = enc(
        features, index[:, perm], score[:, perm], torch.ones(1, n, dtype=torch.bool)
    )
    assert (alone - shuffled).abs().max() < 1e-5
    # Padded inside a batch with another, longer set.
    width = n + extra
    other = torch.randint(0, 50, (1, width), generator=gen)
    batch_index = torch.cat([torch.nn.functional.pad(index, (0, extra)), other])
    batch_score = torch.cat(
        [torch.nn.functional.pad(score, (0, extra), value=0.7), torch.rand(1, width)]
    )
    mask = torch.zeros(2, width, dtype=torch.bool)
    mask[0, :n] = True
    mask[1] = True
    padded = enc(features, batch_index, batch_score, mask)[:1]
    assert (alone - padded).abs().max() < 1e-5


def test_predictor_is_the_mlp_of_z_u_and_their_product():
    """forward's per-model matrices (W_u + W_zu⊙z) give the paper's first
    layer W[z, u, z⊙u] + b, with the readout's extra inputs, and its
    gradients."""
    torch.manual_seed(0)
    pred = CorrectnessPredictor(F, D, hidden_dim=8, n_extra=2).double().eval()
    z = torch.randn(3, D, dtype=torch.float64, requires_grad=True)
    features = torch.randn(7, F, dtype=torch.float64)
    index = torch.randint(0, 7, (3, 5))
    extra = torch.randn(3, 5, 2, dtype=torch.float64)
    u = pred.project(features)[index]
    zb = z.unsqueeze(1).expand_as(u)
    hidden = pred.hidden(torch.cat([zb, u, zb * u], dim=-1)) + pred.extra(extra)
    expected = pred.output(torch.nn.functional.gelu(hidden)).squeeze(-1)
    got = pred(z, features, index, extra)
    torch.testing.assert_close(got, expected)
    inputs = (z, pred.hidden.weight, pred.project.weight)
    for grad, expected_grad in zip(
        torch.autograd.grad(got.sum(), inputs),
        torch.autograd.grad(expected.sum(), inputs),
        strict=True,
    ):
        torch.testing.assert_close(grad, expected_grad)


# pairwise_logits writes into reused buffers when autograd is off (prediction)
# and allocates per chunk when it is on: both are checked.
GRAD_MODES = [torch.enable_grad, torch.no_grad, torch.inference_mode]


@pytest.mark.parametrize("grad_mode", GRAD_MODES)
def test_pairwise_logits_match_per_pair_forward(grad_mode):
    torch.manual_seed(0)
    pred = CorrectnessPredictor(F, D, hidden_dim=8).eval()
    z = torch.randn(4, D)
    features = torch.randn(9, F)
    with grad_mode():  # chunks of 4, 4 and 1 queries
        pairwise = pred.pairwise_logits(z, features, query_chunk=4)
    per_pair = pred(z, features, torch.arange(9).expand(4, 9)).T
    assert pairwise.shape == (9, 4)
    torch.testing.assert_close(pairwise, per_pair, rtol=1e-4, atol=1e-5)


def test_pairwise_logits_without_autograd_equal_and_with_it_differentiate():
    torch.manual_seed(0)
    pred = CorrectnessPredictor(F, D, hidden_dim=8, n_extra=2)
    z = torch.randn(4, D, requires_grad=True)
    features, extra = torch.randn(9, F), torch.randn(9, 4, 2)
    with torch.no_grad():
        buffered = pred.pairwise_logits(z, features, extra, query_chunk=4)
    logits = pred.pairwise_logits(z, features, extra, query_chunk=4)
    assert torch.equal(buffered, logits.detach())
    # The autograd path still gives gradients, equal to one chunk's.
    (grad,) = torch.autograd.grad(logits.sum(), z)
    (one_chunk,) = torch.autograd.grad(
        pred.pairwise_logits(z, features, extra, query_chunk=9).sum(), z
    )
    torch.testing.assert_close(grad, one_chunk)
    assert grad.abs().sum() > 0


def test_forward_can_return_the_embeddings_of_embed():
    torch.manual_seed(0)
    net = LocusNetwork(F, embedding_dim=D, n_latents=4, n_blocks=1, n_heads=2).eval()
    bank = torch.randn(6, F)
    enc, score = torch.tensor([[0, 1, 2]]), torch.tensor([[1.0, 0.0, 1.0]])
    mask = torch.ones(1, 3, dtype=torch.bool)
    logits, z = net(bank, enc, score, mask, torch.tensor([[4, 5]]), True)
    assert torch.equal(z, net.embed(bank, enc, score, mask))
    assert torch.equal(logits, net(bank, enc, score, mask, torch.tensor([[4, 5]])))


def test_query_noise_only_in_training():
    torch.manual_seed(0)
    net = LocusNetwork(
        F, embedding_dim=D, n_latents=4, n_blocks=1, n_heads=2, query_noise=1.0
    )
    bank = torch.randn(10, F)
    args = (
        bank,
        torch.tensor([[1, 2]]),
        torch.ones(1, 2),
        torch.ones(1, 2, dtype=torch.bool),
        torch.tensor([[3]]),
    )
    net.eval()
    assert torch.equal(net(*args), net(*args))
    net.train()
    assert not torch.equal(net(*args), net(*args))


def test_query_noise_given_as_a_huge_int_trains_as_the_same_float():
    # torch took query_noise=10**30 as an int64 scalar: OverflowError ("int
    # too big to convert") in the training forward pass.
    args = (
        torch.randn(10, F),
        torch.tensor([[1, 2]]),
        torch.ones(1, 2),
        torch.ones(1, 2, dtype=torch.bool),
        torch.tensor([[3]]),
    )
    outputs = []
    for noise in (10**30, 1e30):
        torch.manual_seed(0)
        net = LocusNetwork(
            F, embedding_dim=D, n_latents=4, n_blocks=1, n_heads=2, query_noise=noise
        ).train()
        outputs.append(net(*args))
    torch.testing.assert_close(outputs[0], outputs[1], rtol=0, atol=0, equal_nan=True)


def test_masked_bce_ignores_nan_padding_and_takes_fractions():
    loss = MaskedBCEWithLogitsLoss()
    logits = torch.tensor([[0.0, 5.0], [0.0, -3.0]])
    target = torch.tensor([[0.5, float("nan")], [1.0, float("nan")]])
    expected = (np.log(2) + np.log(2)) / 2  # BCE(0, .5) = BCE(0, 1) = log 2
    assert loss(logits, target).item() == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("grad_mode", GRAD_MODES)
def test_pairwise_logits_with_readout_match_per_pair_forward(grad_mode):
    torch.manual_seed(0)
    net = LocusNetwork(
        F, embedding_dim=D, n_latents=4, n_blocks=1, n_heads=2, kernel_readout=True
    ).eval()
    bank = torch.nn.functional.normalize(torch.randn(12, F), dim=1)
    enc = torch.tensor([[0, 1, 2, 3], [4, 5, 6, 0]])
    mask = torch.tensor([[True] * 4, [True, True, True, False]])
    score = torch.tensor([[1.0, 0.0, 1.0, 1.0], [0.0, 0.0, 1.0, 0.0]])
    dec = torch.tensor([[7, 8, 9], [7, 8, 9]])
    per_pair = net(bank, enc, score, mask, dec)  # (2 models, 3 queries)
    z = net.embed(bank, enc, score, mask)
    evaluations = EvaluationSets(
        bank,
        torch.tensor([0, 1, 2, 3, 4, 5, 6]),
        torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0]),
        [0, 4, 7],
    )
    with grad_mode():
        pairwise = net.pairwise_logits(z, bank[7:10], evaluations)
    torch.testing.assert_close(pairwise, per_pair.T, rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="needs the models' evaluations"):
        net.pairwise_logits(z, bank[7:10])


def _ragged_batch(sizes, seed, n_queries=50):
    """Index, score and mask of sets of the given sizes, padded with junk."""
    gen = torch.Generator().manual_seed(seed)
    width = max(sizes)
    index = torch.randint(0, n_queries, (len(sizes), width), generator=gen)
    score = torch.rand(len(sizes), width, generator=gen)
    mask = torch.arange(width).unsqueeze(0) < torch.tensor(sizes).unsqueeze(1)
    return torch.randn(n_queries, F, generator=gen), index, score, mask


@settings(max_examples=30, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 40), min_size=1, max_size=5),
    chunk=st.integers(1, 90),
    n_blocks=st.integers(1, 2),
    binary=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_streamed_inference_path_equals_the_module_path(
    sizes, chunk, n_blocks, binary, seed
):
    # forward_inference rearranges the maths (per-query tables, chunks, folded
    # biases, pooling without token projections); only rounding may differ,
    # for binary or graded scores, any padding and any chunking of the
    # (models, tokens) grid.
    enc = _encoder(seed, n_blocks=n_blocks)
    features, index, score, mask = _ragged_batch(sizes, seed)
    if binary:  # its own path (one table row per token); padding keeps junk
        score = torch.where(mask, score.round(), score)
    with torch.inference_mode():
        plain = enc.forward_plain(features, index, score, mask)
        fast = enc.forward_inference(features, index, score, mask, chunk_tokens=chunk)
    torch.testing.assert_close(fast, plain, rtol=1e-5, atol=1e-5)


def test_forward_streams_only_without_autograd():
    enc = _encoder()
    features, index, score, mask = _ragged_batch([9, 4, 7], seed=1)
    before = {k: v.clone() for k, v in enc.state_dict().items()}
    with torch.no_grad():
        fast = enc(features, index, score, mask)
        assert torch.equal(fast, enc.forward_inference(features, index, score, mask))
    for key, value in enc.state_dict().items():  # the in-place steps use buffers
        assert torch.equal(value, before[key]), key
    # With gradients on (or in training mode) the module path runs, autograd works.
    z = enc(features, index, score, mask)
    assert torch.equal(z, enc.forward_plain(features, index, score, mask))
    z.sum().backward()
    assert enc.blocks[0].compress.attention.key_value.bias.grad.abs().sum() > 0
    with torch.no_grad():
        enc.train()
        assert torch.equal(
            enc(features, index, score, mask),
            enc.forward_plain(features, index, score, mask),
        )


@pytest.mark.parametrize("training", [True, False])
def test_training_pooling_is_the_pool_tblock_with_the_same_dropout(training):
    """forward_plain pools through the pooling TBlock's maths without
    projecting the tokens (``_pool_plain``): the same embeddings and
    gradients as the TBlock itself, with the same dropout masks in training
    and padding, and every parameter of the block still gets a gradient
    (data-parallel training needs one for each)."""
    from locus_sklearn._nn import _pool_plain

    enc = _encoder(3, dropout=0.3).train(training)
    gen = torch.Generator().manual_seed(3)
    tokens = torch.randn(3, 7, D, generator=gen, requires_grad=True)
    padding = torch.zeros(3, 7, dtype=torch.bool)
    padding[1, 4:] = True
    results = []
    for pool in (
        lambda: enc.pool(enc.seed.expand(3, -1, -1), tokens, padding).squeeze(1),
        lambda: _pool_plain(enc.pool, enc.seed, tokens, padding),
    ):
        enc.zero_grad()
        tokens.grad = None
        torch.manual_seed(0)
        z = pool()
        (z * torch.arange(D)).sum().backward()
        grads = {n: p.grad.clone() for n, p in enc.pool.named_parameters()}
        results.append((z, tokens.grad.clone(), enc.seed.grad.clone(), grads))
    (z_ref, tok_ref, seed_ref, ref), (z, tok, seed, got) = results
    torch.testing.assert_close(z, z_ref)
    torch.testing.assert_close(tok, tok_ref)
    torch.testing.assert_close(seed, seed_ref)
    assert torch.equal(tok[1, 4:], torch.zeros(3, D))  # padding is not read
    bias = "attention.key_value.bias"
    for name, grad in ref.items():
        if name == bias:
            # The key bias shifts every score of a head alike: softmax
            # ignores it, so its gradient is 0 (rounding, through the TBlock).
            torch.testing.assert_close(got[name][D:], grad[D:])
            assert torch.equal(got[name][:D], torch.zeros(D))
            torch.testing.assert_close(grad[:D], torch.zeros(D), atol=1e-6, rtol=0)
        else:
            torch.testing.assert_close(got[name], grad, msg=name)
    # and dropout did act in training: another seed, other embeddings.
    torch.manual_seed(1)
    other = _pool_plain(enc.pool, enc.seed, tokens, padding)
    assert torch.equal(other, z) != training


def test_given_tables_give_what_the_encoder_computes_itself():
    """``tables`` (the per-query tokens and first keys/values, computed once by
    a caller embedding many batches) give the same embeddings, and the
    features are then not read again."""
    enc = _encoder(2)
    features, index, score, mask = _ragged_batch([9, 4, 7], seed=2)
    with torch.inference_mode():
        tables = enc.inference_tables(features)
        fast = enc.forward_inference(features, index, score, mask)
        assert torch.equal(
            enc.forward_inference(features, index, score, mask, tables=tables), fast
        )
        # Not read again: garbage features with the right tables.
        assert torch.equal(
            enc(features.fill_(float("nan")), index, score, mask, tables), fast
        )


def test_tables_hold_the_tokenizers_tokens_at_both_scores():
    # Hand-checkable: h(φ, y) = W_φ φ + W_± φ (2y − 1) + w_y y at y = 0 and 1,
    # and any score's token is their interpolation (h is affine in y).
    tok = EvaluationTokenizer(F, D)
    features = torch.randn(5, F)
    with torch.no_grad():
        table = tok.tables(features)
        base, signed = tok.query(features).chunk(2, dim=-1)
        assert table.shape == (5, 2, D)
        assert torch.equal(table[:, 0], base - signed)
        torch.testing.assert_close(table[:, 1], base + signed + tok.score)
        index = torch.tensor([[4, 0, 2]])
        for y in (0.0, 0.3, 1.0):
            score = torch.full((1, 3), y)
            expected = torch.lerp(table[index, 0], table[index, 1], y)
            torch.testing.assert_close(tok(features, index, score), expected)


def test_transform_projects_the_features_once_for_all_batches():
    from locus_sklearn import LocusEmbedder, check_evals
    from locus_sklearn._training import embed_models
    from locus_sklearn.datasets import make_model_pool

    pool = make_model_pool(n_models=6, n_queries=80, evals_per_model=30, random_state=0)
    emb = LocusEmbedder(pool.encodings, embedding_dim=8, n_latents=2, n_blocks=1,
                        n_heads=2, max_epochs=1, random_state=0).fit(pool.evals)  # fmt: skip
    module = emb.net_.module_
    table = check_evals(pool.evals)
    X = emb._encode(table.queries)
    projections = []
    linear = module.encoder.tokenizer.query
    hook = linear.register_forward_hook(lambda m, i, o: projections.append(o.shape))
    try:
        one_batch = embed_models(module, table, X, batch_tokens=10_000)
        n_one = len(projections)
        per_model = embed_models(module, table, X, batch_tokens=30)  # 6 batches
    finally:
        hook.remove()
    assert n_one == 1 and len(projections) == 2
    assert projections[1] == (table.n_queries, 2 * 8)
    np.testing.assert_allclose(per_model, one_batch, rtol=1e-5, atol=1e-6)


def test_bfloat16_inference_path_is_close_to_float32():
    # bfloat16 keeps 8 significant bits: embeddings agree to about 1e-2.
    enc = _encoder(3)
    features, index, score, mask = _ragged_batch([30, 12, 25], seed=3)
    with torch.inference_mode():
        z32 = enc(features, index, score, mask)
        enc16 = enc.to(torch.bfloat16)
        z16 = enc16(features, index, score, mask)
    assert z16.dtype == torch.bfloat16
    rel = (z16.float() - z32).norm(dim=1) / z32.norm(dim=1)
    assert rel.max() < 0.03


def _sets(seed=0, n_models=5, n_rows=7):
    g = torch.Generator().manual_seed(seed)
    features = torch.randn(20, F, generator=g)
    index = torch.randint(0, 20, (n_models, n_rows), generator=g)
    score = torch.randint(0, 2, (n_models, n_rows), generator=g).float()
    return features, index, score, torch.ones(n_models, n_rows, dtype=torch.bool)


def test_standardized_embeddings_have_zero_mean_unit_variance_in_a_batch():
    enc = _encoder(standardize=True).train()
    raw = _encoder(standardize=False).train()
    features, index, score, mask = _sets()
    torch.manual_seed(1)
    z = enc(features, index, score, mask)
    # Every coordinate over the batch's five models: mean 0, variance 1 (the
    # biased variance, as BatchNorm normalises), up to BatchNorm's eps.
    torch.testing.assert_close(z.mean(0), torch.zeros(D), atol=1e-5, rtol=0)
    torch.testing.assert_close(
        z.var(0, unbiased=False), torch.ones(D), atol=1e-3, rtol=0
    )
    # Same weights otherwise: the standardisation is the only difference.
    raw.load_state_dict(
        {k: v for k, v in enc.state_dict().items() if not k.startswith("standardize")}
    )
    torch.manual_seed(1)
    r = raw(features, index, score, mask)
    expected = (r - r.mean(0)) / torch.sqrt(r.var(0, unbiased=False) + 1e-5)
    torch.testing.assert_close(z, expected, atol=1e-4, rtol=1e-4)


def test_standardized_embeddings_use_running_statistics_outside_a_batch():
    enc = _encoder(standardize=True).train()
    features, index, score, mask = _sets()
    for _ in range(3):  # move the running statistics off their start
        enc(features, index, score, mask)
    stats = enc.standardize
    assert int(stats.num_batches_tracked) == 3
    enc.eval()
    raw = enc.forward_plain(features, index, score, mask).detach()
    expected = (raw - stats.running_mean) / torch.sqrt(stats.running_var + stats.eps)
    with torch.no_grad():
        z = enc(features, index, score, mask)
        # One model at a time gives the same rows: no batch statistics.
        single = torch.cat(
            [enc(features, index[i : i + 1], score[i : i + 1], mask[i : i + 1])
             for i in range(len(index))]
        )  # fmt: skip
    torch.testing.assert_close(z, expected, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(single, z, atol=1e-5, rtol=1e-5)
    # A training batch of one model cannot have batch statistics: it reads the
    # running ones and leaves them as they are.
    enc.train()
    before = stats.running_mean.clone()
    one = enc(features, index[:1], score[:1], mask[:1])
    assert torch.isfinite(one).all()
    torch.testing.assert_close(stats.running_mean, before)
    assert int(stats.num_batches_tracked) == 3


def test_pairwise_logits_stay_bounded_at_a_vanishing_bandwidth():
    """Logits of queries equal to stored ones at τ = e^-100 (a denormal
    float32). The readout's inputs are bounded (readout in [-1, 1], evidence
    at most log(1 + 20) here), so an untrained predictor's logits stay small;
    a cosine rounded to 1 + 1e-7 once gave a weight of e^(1e-7/τ), evidence
    near 6e36 and logits near 6e35, which a fitted predictor turned into NaN
    (see test_readout.py)."""
    torch.manual_seed(0)
    net = LocusNetwork(
        F, embedding_dim=D, n_latents=4, n_blocks=1, n_heads=2, kernel_readout=True
    ).eval()
    with torch.no_grad():
        net.readout.log_bandwidth.fill_(-100.0)
    bank = torch.randn(40, F)
    evaluations = EvaluationSets(
        bank, torch.arange(40), (torch.arange(40) % 2).float(), [0, 20, 40]
    )
    z = torch.randn(2, D)
    for neighbors in (None, 3):
        with torch.inference_mode():
            logits = net.pairwise_logits(
                z, bank, evaluations, readout_neighbors=neighbors
            )
        assert torch.isfinite(logits).all(), neighbors
        assert logits.abs().max() < 100, (neighbors, logits.abs().max())


def test_float64_inference_path_keeps_float64_accuracy():
    # The streamed path runs in the parameters' dtype: a float64 network's
    # two paths are the same maths, so they agree to float64 rounding (its
    # pooling softmax once ran in float32: 4e-7 apart).
    enc = _encoder(4).double()
    features, index, score, mask = _ragged_batch([30, 9, 17], seed=4)
    features, score = features.double(), score.double()
    for scores in (score, score.round()):  # graded and binary token paths
        with torch.inference_mode():
            plain = enc.forward_plain(features, index, scores, mask)
            fast = enc.forward_inference(features, index, scores, mask)
        assert fast.dtype == torch.float64
        torch.testing.assert_close(fast, plain, rtol=0, atol=1e-12)


@pytest.mark.parametrize("path", ["inference", "plain", "training"])
def test_a_row_without_evaluations_is_refused(path):
    # Its masked softmax over only -inf would give a NaN embedding and NaN
    # gradients for every parameter, even with that row's targets masked.
    enc = _encoder(5)
    features, index, score, mask = _ragged_batch([6, 3, 4], seed=5)
    mask[1] = False
    mask[2] = False
    run = {
        "inference": lambda: enc.forward_inference(features, index, score, mask),
        "plain": lambda: enc.forward_plain(features, index, score, mask),
        "training": lambda: enc.train()(features, index, score, mask),
    }[path]
    with pytest.raises(ValueError, match=r"mask .* 2 of its 3 rows: \[1, 2\]"):
        run()
    with pytest.raises(ValueError, match="1 of its 1 rows"):  # no position at all
        enc(features, index[:1, :0], score[:1, :0], mask[:1, :0])


@pytest.mark.parametrize("binary", [True, False])
@pytest.mark.parametrize("junk", [float("nan"), float("inf"), 0.5, 7.0])
def test_scores_at_padding_are_never_read(binary, junk):
    # Padding never changes a result: whatever sits in ``score`` where
    # ``mask`` is False, both paths give the embedding of zeros there, and
    # training the same gradients (0 * NaN would be NaN).
    enc = _encoder(6)
    features, index, score, mask = _ragged_batch([8, 3, 5], seed=6)
    if binary:
        score = score.round()
    clean = torch.where(mask, score, 0.0)
    dirty = torch.where(mask, score, junk)
    with torch.inference_mode():
        for forward in (enc.forward_inference, enc.forward_plain):
            expected = forward(features, index, clean, mask)
            assert torch.isfinite(expected).all()
            assert torch.equal(forward(features, index, dirty, mask), expected)
    enc.train()
    grads = []
    for scores in (clean, dirty):
        enc.zero_grad()
        z = enc(features, index, scores, mask)
        z.square().sum().backward()
        grads.append([p.grad.clone() for p in enc.parameters()])
    for clean_grad, dirty_grad in zip(*grads, strict=True):
        assert torch.equal(clean_grad, dirty_grad)
