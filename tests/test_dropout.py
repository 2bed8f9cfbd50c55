"""Dropout with bulk CPU masks (locus_sklearn._dropout) and its use in attention."""

import sys

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from locus_sklearn._dropout import Dropout, dropout
from locus_sklearn._nn import MultiHeadAttention


def test_not_training_or_zero_p_returns_the_input():
    x = torch.randn(5, 3)
    assert dropout(x, 0.3, training=False) is x
    assert dropout(x, 0.0) is x
    assert torch.equal(Dropout(0.5).eval()(x), x)


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_drop_rate_and_scale(p):
    torch.manual_seed(0)
    n = 200_000
    y = dropout(torch.ones(n), p)
    dropped = float((y == 0).float().mean())
    # Binomial: five standard deviations.
    assert abs(dropped - p) < 5 * np.sqrt(p * (1 - p) / n)
    cut = round(p * 2**16)
    kept = y[y != 0]
    assert torch.all(kept == torch.tensor(2**16 / (2**16 - cut)))
    # Unbiased: the kept scale is the inverse of the rounded keep probability.
    assert abs(float(y.mean()) - 1) < 5 * np.sqrt(p / (1 - p) / n)


def test_torch_seed_fixes_the_mask():
    x = torch.randn(64, 32)
    torch.manual_seed(3)
    a = dropout(x, 0.5)
    torch.manual_seed(3)
    b = dropout(x, 0.5)
    c = dropout(x, 0.5)  # the generator moved on
    assert torch.equal(a, b)
    assert not torch.equal(b, c)


@pytest.mark.skipif(sys.byteorder != "little", reason="lane order of a 64-bit word")
def test_mask_is_generator_integers_of_the_drawn_seed():
    """The mask is what ``Generator(PCG64(seed)).integers`` draws (the law
    and the stream fits were recorded with), read as four 16-bit lanes of
    each raw 64-bit output; odd sizes end inside a word."""
    for n in (1, 5, 4097):
        x = torch.randn(n, dtype=torch.float64)
        torch.manual_seed(11)
        seed = int(torch.randint(2**62, (), dtype=torch.int64))
        bits = np.random.Generator(np.random.PCG64(seed)).integers(
            0, 2**16, size=n, dtype=np.uint16
        )
        cut = round(0.3 * 2**16)
        expected = x * torch.from_numpy(bits >= cut) * (2**16 / (2**16 - cut))
        torch.manual_seed(11)
        torch.testing.assert_close(dropout(x, 0.3), expected, rtol=0, atol=0)


def test_gradient_is_the_mask_times_the_scale():
    torch.manual_seed(0)
    x = torch.randn(40, 7, requires_grad=True)
    y = dropout(x, 0.25)
    y.sum().backward()
    scale = 2**16 / (2**16 - round(0.25 * 2**16))
    expected = (y.detach() != 0).float() * scale
    torch.testing.assert_close(x.grad, expected)


def test_p_one_and_p_below_the_grid_fall_back_to_torch():
    x = torch.ones(1000)
    assert torch.equal(dropout(x, 1.0), torch.zeros(1000))
    torch.manual_seed(0)
    y = dropout(x, 1e-7)  # rounds to 0 on the grid: torch's own dropout
    torch.manual_seed(0)
    assert torch.equal(y, torch.nn.functional.dropout(x, 1e-7))


@settings(max_examples=30, deadline=None)
@given(
    p=st.floats(0.0, 1.0),
    shape=st.lists(st.integers(1, 6), min_size=1, max_size=3),
    seed=st.integers(0, 2**31),
)
def test_every_element_is_dropped_or_scaled(p, shape, seed):
    torch.manual_seed(seed)
    x = torch.randn(*shape)
    y = dropout(x, p)
    assert y.shape == x.shape
    dropped = y == 0
    ratio = y[~dropped] / x[~dropped]
    if ratio.numel():
        assert torch.allclose(ratio, ratio[0].expand_as(ratio))
        assert float(ratio[0]) >= 1


def test_training_attention_never_attends_to_padding():
    """The training path (manual attention with bulk dropout masks) ignores
    padded keys: changing them leaves the output unchanged."""
    torch.manual_seed(0)
    attention = MultiHeadAttention(8, 2, dropout=0.3).train()
    query = torch.randn(3, 4, 8)
    keys = torch.randn(3, 6, 8)
    padding = torch.zeros(3, 6, dtype=torch.bool)
    padding[:, 4:] = True
    torch.manual_seed(1)
    out = attention(query, keys, padding)
    changed = keys.clone()
    changed[:, 4:] = 100.0
    torch.manual_seed(1)
    torch.testing.assert_close(attention(query, changed, padding), out)


def test_training_attention_without_dropout_is_scaled_dot_product_attention():
    torch.manual_seed(0)
    query, keys = torch.randn(2, 3, 8), torch.randn(2, 5, 8)
    padding = torch.tensor([[False] * 5, [False, False, False, True, True]])
    attention = MultiHeadAttention(8, 2, dropout=0.3)
    eval_out = attention.eval()(query, keys, padding)
    # In training, p -> 0 on the grid means the manual path keeps every weight.
    attention.dropout = 1e-9
    torch.manual_seed(0)
    torch.testing.assert_close(attention.train()(query, keys, padding), eval_out)
