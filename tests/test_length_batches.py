"""Tests of locus_sklearn/_length_batches.py: batches of similar token length."""

import itertools
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from locus_sklearn import _encoders
from locus_sklearn._encoders import QueryEncoder
from locus_sklearn._length_batches import (
    OVERHEAD_TOKENS,
    encode_in_length_batches,
    length_batches,
    token_lengths,
)


def _cost(lengths, batches, overhead=OVERHEAD_TOKENS):
    """Padded work of ``batches``: a call's overhead plus size x longest."""
    lengths = np.asarray(lengths)
    return sum(overhead + len(b) * lengths[b].max() for b in batches)


def _brute_force(lengths, max_size, overhead):
    """The least cost over every cut of the texts sorted longest first."""
    order = np.argsort(-np.asarray(lengths), kind="stable")
    n, best = len(order), np.inf
    for cuts in itertools.product([False, True], repeat=max(n - 1, 0)):
        bounds = [0, *[i + 1 for i, cut in enumerate(cuts) if cut], n]
        batches = [order[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]
        if all(len(b) <= max_size for b in batches):
            best = min(best, _cost(lengths, batches, overhead))
    return best


def test_hand_computed_batches():
    # Sorted: 100, 98 | 12, 11, 10. Cost 16 + 2*100 + 16 + 3*12 = 268; one
    # batch costs 16 + 5*100 = 516, one call per text 5*16 + 231 = 311.
    batches = length_batches([10, 100, 12, 98, 11], max_size=64)
    assert [b.tolist() for b in batches] == [[1, 3], [2, 4, 0]]
    assert _cost([10, 100, 12, 98, 11], batches) == 268
    # At most two per batch: the short three split 12 | 11, 10.
    batches = length_batches([10, 100, 12, 98, 11], max_size=2)
    assert [b.tolist() for b in batches] == [[1, 3], [2], [4, 0]]
    # Equal lengths pad nothing: as few batches as max_size allows (which one
    # is short is the tie-break).
    assert [len(b) for b in length_batches([7] * 10, max_size=4)] == [2, 4, 4]
    assert length_batches([], max_size=3) == []


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 256), min_size=1, max_size=9),
    max_size=st.integers(1, 10),
    overhead=st.sampled_from([0, 16, 200]),
)
def test_batches_partition_and_are_optimal(lengths, max_size, overhead):
    batches = length_batches(lengths, max_size, overhead)
    flat = np.concatenate(batches)
    assert sorted(flat.tolist()) == list(range(len(lengths)))
    assert all(1 <= len(b) <= max_size for b in batches)
    cost = _cost(lengths, batches, overhead)
    assert cost == pytest.approx(_brute_force(lengths, max_size, overhead))
    # Never worse than sentence-transformers' fixed cuts of the sorted texts.
    order = np.argsort(-np.asarray(lengths), kind="stable")
    fixed = [order[i : i + max_size] for i in range(0, len(order), max_size)]
    assert cost <= _cost(lengths, fixed, overhead)


class _WordModel:
    """A stand-in model whose tokenizer counts words."""

    max_seq_length = 50

    def tokenizer(self, texts, truncation, max_length):
        ids = [t.split()[:max_length] if truncation else t.split() for t in texts]
        return {"input_ids": ids}


def test_encode_in_length_batches_keeps_input_order():
    texts = ["w " * 70, "a", "w " * 50, "a b", "a"]
    calls = []

    def encode(batch):
        calls.append(list(batch))
        return np.array([[len(t), i] for i, t in enumerate(batch)], dtype=float)

    X = encode_in_length_batches(_WordModel(), texts, encode, max_size=64)
    # Rows come back in input order, whatever the calls were.
    assert X[:, 0].tolist() == [len(t) for t in texts]
    assert token_lengths(_WordModel(), texts).tolist() == [50, 1, 50, 2, 1]
    # Truncated at 50 tokens the two long ones pad nothing together; the short
    # three (2, 1, 1) are a second call: 16 + 2*50 + 16 + 3*2 = 138 tokens
    # of work, against 16 + 5*50 = 266 in one call.
    assert calls == [[texts[0], texts[2]], [texts[3], texts[1], texts[4]]]


def test_without_a_tokenizer_one_call():
    calls = []

    def encode(batch):
        calls.append(list(batch))
        return np.zeros((len(batch), 2))

    assert token_lengths(object(), ["a", "b"]) is None
    encode_in_length_batches(object(), ["a", "b c"], encode, max_size=1)
    assert calls == [["a", "b c"]]


MIXED = [
    "2+2?",
    "Write a function that parses ISO 8601 dates and returns a datetime. " * 6,
    "capital of France?",
    "Explain why the sky is blue, in two sentences.",
    "¿Dónde está la biblioteca? 図書館はどこですか。",
    "What is the derivative of x squared times the sine of x?",
]


def test_query_encoder_splits_mixed_lengths_with_the_same_encodings(monkeypatch):
    model = _encoders._load_sentence_transformer(_encoders._default_model_path(), "cpu")
    one_by_one = np.vstack([model.encode([t]) for t in MIXED])
    sizes = []
    original = type(model).encode

    def spy(self, texts, **kwargs):
        sizes.append(len(texts))
        return original(self, texts, **kwargs)

    monkeypatch.setattr(type(model), "encode", spy)
    X = QueryEncoder(device="cpu").fit().transform(MIXED)
    np.testing.assert_allclose(X, one_by_one, atol=1e-5)
    # The long text is not padded against: it goes alone, first.
    lengths = token_lengths(model, MIXED)
    assert lengths.max() > 4 * np.sort(lengths)[-2]
    assert sizes[0] == 1 and sum(sizes) == len(MIXED) and max(sizes) > 1


class _AcceleratorModel(_WordModel):
    """A stand-in sentence-transformers model on an accelerator."""

    device = torch.device("cuda")

    def __init__(self):
        self.calls = []

    def encode(self, texts, **kwargs):
        self.calls.append((list(texts), kwargs))
        return np.zeros((len(texts), 2), dtype=np.float32)


def test_accelerator_keeps_sentence_transformers_batches():
    # A call's fixed cost there dwarfs its tokens': one call, batch_size as set.
    model = _AcceleratorModel()
    texts = ["w " * 50, "a", "a b"]
    X = QueryEncoder(batch_size=8)._encode_by_length(model, texts)
    assert X.shape == (3, 2)
    assert [c[0] for c in model.calls] == [texts]
    assert model.calls[0][1]["batch_size"] == 8


def _default_model():
    return _encoders._load_sentence_transformer(_encoders._default_model_path(), "cpu")


LONG = "Write a function that parses ISO 8601 dates and returns a datetime. " * 6


def test_token_lengths_leave_the_model_tokenizer_as_encode_set_it():
    """token_lengths called the model's own fast tokenizer without padding,
    which switched off the padding another thread's encode had just set (a
    fast tokenizer keeps it as state): that encode's ragged batch failed,
    "Unable to create tensor, you should probably activate ... padding"."""
    model = _default_model()
    backend = model.tokenizer.backend_tokenizer
    model.encode(["2+2?", LONG])  # encode pads: its padding is on
    settings = (backend.padding, backend.truncation)
    assert settings[0] is not None
    lengths = token_lengths(model, ["2+2?", "capital of France?", LONG])
    assert (backend.padding, backend.truncation) == settings
    # Unpadded counts: [CLS] 2 + 2 ? [SEP]; [CLS] capital of france ? [SEP];
    # 16 tokens six times and the two.
    assert lengths.tolist() == [6, 6, 98]


def test_token_lengths_beside_encoding_threads():
    """The race above, run: 4 threads each tokenising as encode does
    (padding on) and counting tokens in turn. With a thread switch at
    every chance, about a third of the calls failed or counted padded
    lengths before the fix."""
    model = _default_model()
    preprocess = getattr(model, "preprocess", None) or model.tokenize
    texts = ["2+2?", LONG, "capital of France?", "a " * 30]
    expected = token_lengths(model, texts).tolist()

    def call(i):
        batch = texts[i % 4 :] + texts[: i % 4]
        if i % 2:
            return preprocess(batch)["input_ids"].shape[0] == 4
        return (
            token_lengths(model, batch).tolist()
            == expected[i % 4 :] + expected[: i % 4]
        )

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        with ThreadPoolExecutor(4) as pool:
            results = list(pool.map(call, range(400)))
    finally:
        sys.setswitchinterval(interval)
    assert all(results)
