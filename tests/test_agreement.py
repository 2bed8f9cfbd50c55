"""The agreement term of training (locus_sklearn/_agreement.py): hand-computed
disagreements, the stress's invariances, and its place in the training loss."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from locus_sklearn._agreement import (
    MIN_SHARED,
    agreement_stress,
    episode_scores,
    rms_disagreement,
    stress,
)

NAN = float("nan")


def test_episode_scores_lays_out_encoder_and_decoder_rows():
    # Episode 0 holds queries 0, 1 (encoder) and 2 (decoder); episode 1 holds
    # query 3 (encoder) and 0 (decoder). Padding points at query 0 (index 0,
    # mask False or NaN target) and must not write there.
    X = {
        "enc_index": torch.tensor([[0, 1], [3, 0]]),
        "enc_score": torch.tensor([[1.0, 0.0], [1.0, 0.0]]),
        "enc_mask": torch.tensor([[True, True], [True, False]]),
        "dec_index": torch.tensor([[2, 0], [0, 0]]),
    }
    y_true = torch.tensor([[0.5, NAN], [0.25, NAN]])
    held, scores = episode_scores(X, y_true, 5)
    assert held.tolist() == [[1, 1, 1, 0, 0], [1, 0, 0, 1, 0]]
    assert scores.tolist() == [[1, 0, 0.5, 0, 0], [0.25, 0, 0, 1, 0]]


def test_a_query_in_both_sets_counts_once_with_its_mean_score():
    # disjoint=False: a query can be an encoder and a decoder row of one
    # episode. Episodes 0 and 1 answer identically (query 1 in both of their
    # sets, score 1); episode 2 differs from them on query 0 only.
    X = {
        "enc_index": torch.tensor([[0, 1], [0, 1], [0, 1]]),
        "enc_score": torch.tensor([[1.0, 1.0], [1.0, 1.0], [0.0, 1.0]]),
        "enc_mask": torch.ones(3, 2, dtype=torch.bool),
        "dec_index": torch.tensor([[1, 2], [1, 2], [1, 2]]),
    }
    y_true = torch.tensor([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0]])
    held, scores = episode_scores(X, y_true, 4)
    assert held.tolist() == [[1, 1, 1, 0]] * 3
    assert scores.tolist() == [[1, 1, 0, 0], [1, 1, 0, 0], [0, 1, 0, 0]]
    rms, shared = rms_disagreement(held, scores)
    # Three shared queries per pair; 0-1 agree on all, 0-2 and 1-2 on two.
    assert shared.tolist() == [[3, 3, 3]] * 3
    assert float(rms[0, 1]) == 0
    assert float(rms[0, 2]) == pytest.approx(np.sqrt(1 / 3))
    assert float(rms[1, 2]) == pytest.approx(np.sqrt(1 / 3))


@pytest.mark.parametrize("disjoint", [True, False])
def test_identical_models_have_no_disagreement_in_collated_episodes(disjoint):
    from locus_sklearn._training import EpisodeCollator

    gen = torch.Generator().manual_seed(0)
    queries = torch.arange(40)
    y = torch.randint(0, 2, (40,), generator=gen).float()
    other = 1 - y
    batch = [((queries, y), 0), ((queries, y.clone()), 1), ((queries, other), 2)]
    X, y_true = EpisodeCollator((16, 16), 30, disjoint)(batch)
    held, scores = episode_scores(X, y_true, 40)
    assert held.max() == 1 and scores.max() <= 1
    rms, shared = rms_disagreement(held, scores)
    assert float(rms[0, 1]) == 0  # the same answers: no disagreement
    # Opposite answers on every shared query: disagreement 1 (t <= 1 on 0/1).
    assert float(rms[0, 2]) == pytest.approx(1.0)
    assert shared.max() <= 40


def test_disagreement_is_the_rms_score_difference_on_shared_queries():
    held = torch.tensor([[1.0, 1, 1, 0], [1, 1, 0, 1], [0, 1, 1, 1]])
    scores = torch.tensor([[1.0, 0, 1, 0], [0, 0, 0, 1], [0, 1, 1, 0]])
    rms, shared = rms_disagreement(held, scores)
    # 0-1 share q0, q1: differences 1, 0; 0-2 share q1, q2: 1, 0;
    # 1-2 share q1, q3: 1, 1.
    expected = torch.tensor(
        [[0, np.sqrt(0.5), np.sqrt(0.5)], [np.sqrt(0.5), 0, 1], [np.sqrt(0.5), 1, 0]],
        dtype=torch.float32,
    )
    torch.testing.assert_close(rms, expected)
    assert shared.tolist() == [[3, 2, 2], [2, 3, 2], [2, 2, 3]]
    # Graded scores: the root of the mean squared difference.
    rms, _ = rms_disagreement(torch.ones(2, 2), torch.tensor([[0.2, 0.9], [0.6, 0.6]]))
    assert float(rms[0, 1]) == pytest.approx(np.sqrt((0.4**2 + 0.3**2) / 2))


def test_disagreement_of_rows_sharing_nothing_is_zero():
    rms, shared = rms_disagreement(torch.tensor([[1.0, 0], [0, 1]]), torch.ones(2, 2))
    assert float(rms[0, 1]) == 0 and float(shared[0, 1]) == 0


def test_targets_are_float32_under_a_callers_autocast():
    # The targets are data: a caller's bfloat16 autocast must not round them.
    # Episodes 0 and 1 hold the same 1,200 queries (0/1 scores) and disagree
    # on 12 of them: t^2 = 12 / 1,200 = 0.01 (bfloat16 read 0.0067). Episode
    # 2 holds 1,001 of them, all 0 (bfloat16 read the count as 1,000).
    n = 1200
    a = torch.randint(0, 2, (n,), generator=torch.Generator().manual_seed(0))
    b = a.clone()
    b[:12] = 1 - b[:12]
    mask = torch.ones(3, n, dtype=torch.bool)
    mask[2, 1001:] = False
    X = {
        "enc_index": torch.arange(n).repeat(3, 1),
        "enc_score": torch.stack([a, b, torch.zeros(n, dtype=a.dtype)]).float(),
        "enc_mask": mask,
        "dec_index": torch.zeros(3, 1, dtype=torch.long),
    }
    y_true = torch.full((3, 1), NAN)
    z = torch.randn(3, 2, generator=torch.Generator().manual_seed(1))
    held, scores = episode_scores(X, y_true, n)
    rms32, shared32 = rms_disagreement(held, scores)
    term32 = agreement_stress(z, X, y_true, n)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        held, scores = episode_scores(X, y_true, n)
        rms, shared = rms_disagreement(held, scores)
        term = agreement_stress(z, X, y_true, n)
    assert rms.dtype == shared.dtype == torch.float32
    assert float(rms[0, 1]) ** 2 == pytest.approx(0.01, rel=1e-6)
    assert float(shared[0, 2]) == 1001
    assert torch.equal(rms, rms32) and torch.equal(shared, shared32)
    assert float(term) == float(term32)


def test_stress_by_hand():
    z = torch.tensor([[0.0], [1.0], [3.0]])  # distances 1, 3, 2 (pairs 01, 02, 12)
    target = torch.tensor([[0.0, 1, 1], [1, 0, 1], [1, 1, 0]])
    # d / mean d = 0.5, 1.5, 1; t / mean t = 1, 1, 1.
    value = stress(z, target, torch.ones(3, 3))
    assert float(value) == pytest.approx((0.25 + 0.25 + 0) / 3)
    # Weights: only pair 0-2 counts (the lower triangle is never read).
    weight = torch.tensor([[0.0, 0, 1], [0, 0, 0], [5, 5, 0]])
    assert float(stress(z, target, weight)) == pytest.approx(0.0)


@pytest.mark.parametrize(
    "weight, target", [(torch.zeros(3, 3), torch.ones(3, 3)), (None, torch.zeros(3, 3))]
)
def test_stress_without_a_target_is_zero_with_a_zero_gradient(weight, target):
    z = torch.randn(3, 4, requires_grad=True)
    value = stress(z, target, torch.ones(3, 3) if weight is None else weight)
    value.backward()
    assert float(value.detach()) == 0 and torch.equal(z.grad, torch.zeros(3, 4))


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    scale=st.floats(0.01, 100),
    target_scale=st.floats(0.01, 100),
    shift=st.floats(-10, 10),
)
def test_stress_reads_the_shape_only(seed, scale, target_scale, shift):
    gen = torch.Generator().manual_seed(seed)
    z = torch.randn(6, 3, generator=gen, dtype=torch.float64)
    target = torch.rand(6, 6, generator=gen, dtype=torch.float64)
    target = target + target.T
    weight = torch.rand(6, 6, generator=gen, dtype=torch.float64) + 0.1
    base = stress(z, target, weight)
    assert float(base) >= 0
    moved = stress(scale * z + shift, target_scale * target, weight)
    assert float(moved) == pytest.approx(float(base), rel=1e-6, abs=1e-9)
    # Distances proportional to the target: no stress.
    assert float(stress(z, torch.cdist(z, z) * target_scale, weight)) < 1e-10


def test_stress_gradient_moves_embeddings_toward_the_target_shape():
    # Four models: 0 and 1 answer alike, 2 and 3 alike, the pairs apart;
    # the embeddings start on a line in the wrong order.
    target = torch.tensor(
        [[0.0, 0.1, 1, 1], [0.1, 0, 1, 1], [1, 1, 0, 0.1], [1, 1, 0.1, 0]]
    )
    z = torch.tensor([[0.0, 0], [2, 0], [1, 0.1], [3, 0.1]], requires_grad=True)
    opt = torch.optim.SGD([z], lr=0.1)
    with torch.no_grad():
        first = float(stress(z, target, torch.ones(4, 4)))
    for _ in range(200):
        opt.zero_grad()
        stress(z, target, torch.ones(4, 4)).backward()
        opt.step()
    with torch.no_grad():
        assert float(stress(z, target, torch.ones(4, 4))) < 0.05 * first
        nearest = torch.cdist(z, z).fill_diagonal_(np.inf).argmin(1)
    assert nearest.tolist() == [1, 0, 3, 2]


def test_agreement_stress_counts_pairs_sharing_min_shared_queries():
    # Episodes 0 and 1 share MIN_SHARED queries, episode 2 shares one less
    # with each: only the pair 0-1 counts, whose stress alone is 0.
    n = MIN_SHARED
    index = torch.stack([torch.arange(n), torch.arange(n), torch.arange(1, n + 1) + n])
    index[2, 1:] = torch.arange(n - 1)
    X = {
        "enc_index": index,
        "enc_score": torch.randint(0, 2, (3, n)).float(),
        "enc_mask": torch.ones(3, n, dtype=torch.bool),
        "dec_index": torch.zeros(3, 1, dtype=torch.long),
    }
    y_true = torch.full((3, 1), NAN)
    z = torch.randn(3, 2)
    assert float(agreement_stress(z, X, y_true, 3 * n)) == 0.0
    # Sharing MIN_SHARED - 1 is enough when asked for: three pairs now count.
    value = agreement_stress(z, X, y_true, 3 * n, min_shared=n - 1)
    held, scores = episode_scores(X, y_true, 3 * n)
    rms, shared = rms_disagreement(held, scores)
    expected = stress(z, rms, torch.where(shared >= n - 1, shared, 0))
    assert float(value) == pytest.approx(float(expected))


def test_training_loss_adds_the_weighted_term_in_training_steps_only(
    pool, tiny_embedder
):
    embedder = tiny_embedder(pool.encodings, max_epochs=1, agreement_weight=0.5)
    embedder.fit(pool.evals)
    net = embedder.net_
    n_queries = 30
    net.query_bank_ = torch.zeros(n_queries, 1)
    gen = torch.Generator().manual_seed(0)
    X = {
        "enc_index": torch.randint(0, n_queries, (4, 12), generator=gen),
        "enc_score": torch.randint(0, 2, (4, 12), generator=gen).float(),
        "enc_mask": torch.ones(4, 12, dtype=torch.bool),
        "dec_index": torch.randint(0, n_queries, (4, 6), generator=gen),
    }
    y_true = torch.randint(0, 2, (4, 6), generator=gen).float()
    logits = torch.randn(4, 6, generator=gen)
    z = torch.randn(4, 8, generator=gen)
    bce = torch.nn.functional.binary_cross_entropy_with_logits(logits, y_true)
    # 18 rows of 30 queries each: pairs share about 11 (MIN_SHARED is 8).
    term = agreement_stress(z, X, y_true, n_queries)
    assert float(term) > 0
    valid = net.get_loss((logits, z), y_true, X=X, training=False)
    train = net.get_loss((logits, z), y_true, X=X, training=True)
    assert float(valid) == pytest.approx(float(bce))
    assert float(train) == pytest.approx(float(bce + 0.5 * term))


def test_agreement_weight_zero_trains_as_before_and_is_validated(pool, tiny_embedder):
    rows = pool.evals.groupby("model").head(60)
    plain = tiny_embedder(pool.encodings, max_epochs=2).fit_transform(rows)
    zero = tiny_embedder(pool.encodings, max_epochs=2, agreement_weight=0.0)
    np.testing.assert_array_equal(zero.fit_transform(rows), plain)
    weighted = tiny_embedder(pool.encodings, max_epochs=2, agreement_weight=1.0)
    assert not np.array_equal(weighted.fit_transform(rows), plain)
    with pytest.raises(ValueError, match="agreement_weight"):
        tiny_embedder(pool.encodings, agreement_weight=-1.0).fit(rows)
