"""Batches of texts of similar token length, for a transformer on a CPU.

A batch is padded to its longest text, and a padded token costs as much as a
real one. On a CPU a transformer gains little from a larger batch, so the
padding of a batch of mixed lengths is what it costs. sentence-transformers
sorts a call's texts by length and cuts batches of a fixed size;
:func:`length_batches` cuts the sorted texts where the padding would cost
more than another call. ``benchmarks/encoder_ceiling.py`` measures both on
the same texts (``benchmarks/results/encoder_ceiling.json``, 2026-12-02
01:36, one thread): calls of 64 mixed chat-length queries (20-185 tokens)
79 -> 31 ms per query in ONNX Runtime and 87 -> 43 ms in PyTorch; 400 whole
MMLU-Pro questions per call 121 -> 82 ms.
"""

import copy
import threading
import weakref

import numpy as np

__all__ = [
    "OVERHEAD_TOKENS",
    "encode_in_length_batches",
    "length_batches",
    "token_lengths",
]

#: The cost of one more call, in tokens of work. Set from one-off timings of
#: all-MiniLM-L6-v2 on one core of the project's 2-core test machine
#: (2026-12-01; texts cut to 32-192 tokens, 1-16 per call): PyTorch about
#: 9 ms per call beside 0.41 ms per token (about 20 tokens); ONNX Runtime
#: less per call, and batches of 2-16 only 5-15 % cheaper per text than one.
OVERHEAD_TOKENS = 16


def length_batches(lengths, max_size, overhead=OVERHEAD_TOKENS):
    """Split texts into batches that minimise the padded work.

    The texts are sorted by length, longest first, and cut into contiguous
    runs minimising ``Σ (overhead + size × longest)`` over the batches (exact,
    by dynamic programming in O(n · max_size)).

    Parameters
    ----------
    lengths : sequence of int, shape (n_texts,)
        Token length of each text.
    max_size : int
        Most texts per batch.
    overhead : float, default=OVERHEAD_TOKENS
        Cost of a call, in tokens.

    Returns
    -------
    batches : list of ndarray of int
        Positions into ``lengths``; together each position once.

    Examples
    --------
    >>> [b.tolist() for b in length_batches([10, 100, 12, 98, 11], max_size=64)]
    [[1, 3], [2, 4, 0]]
    """
    lengths = np.asarray(lengths, dtype=np.int64).reshape(-1)
    order = np.argsort(-lengths, kind="stable")
    longest = lengths[order].astype(np.float64)  # descending
    n = len(order)
    cost = np.zeros(n + 1)
    start = np.zeros(n + 1, dtype=np.int64)
    for end in range(1, n + 1):
        # The batch order[s:end]: its longest text is its first.
        s = np.arange(max(0, end - max_size), end)
        total = cost[s] + overhead + (end - s) * longest[s]
        best = int(np.argmin(total))
        cost[end], start[end] = total[best], s[best]
    batches, end = [], n
    while end > 0:
        batches.append(order[start[end] : end])
        end = int(start[end])
    return batches[::-1]


# A fast (Rust) tokenizer keeps its padding and truncation as state, which
# each call sets to its own arguments before it tokenizes. Counting tokens
# (no padding) with the model's own tokenizer therefore switched padding off
# under another thread's encode (padding on), whose ragged batch then failed
# ("Unable to create tensor ..."), or whose own count read padded lengths.
# Counts go through a private copy instead, made once per tokenizer and set
# to counting before any thread uses it: it is then only read, so threads
# count and encode at once without a lock (one around every encode would
# run a shared model one call at a time). Keyed weakly on the tokenizer: a
# model dropped, or given another tokenizer, takes its copy with it.
_COUNTERS = weakref.WeakKeyDictionary()
_COUNTERS_LOCK = threading.Lock()


def _count_tokens(tokenizer, texts, max_length):
    return tokenizer(texts, truncation=max_length is not None, max_length=max_length)[
        "input_ids"
    ]


def _counting_tokenizer(tokenizer, max_length):
    """``tokenizer``'s private copy for :func:`token_lengths` (a fast one's;
    a Python tokenizer keeps no such state and is used as it is)."""
    if getattr(tokenizer, "backend_tokenizer", None) is None:
        return tokenizer
    with _COUNTERS_LOCK:
        counter = _COUNTERS.get(tokenizer)
        if counter is None or counter[1] != max_length:
            copied = copy.deepcopy(tokenizer)
            # One call sets the copy's state; the calls after it, with the
            # same arguments, leave it as it is.
            _count_tokens(copied, [""], max_length)
            counter = _COUNTERS[tokenizer] = (copied, max_length)
    return counter[0]


def token_lengths(model, texts):
    """Token count of each text under a sentence-transformers model's
    tokenizer and truncation, or None when the model has no tokenizer.

    Safe beside other threads encoding with the same model: the tokens are
    counted by a private copy of its tokenizer, whose shared settings
    (padding) are left as the model's encode set them.
    """
    tokenizer = getattr(model, "tokenizer", None)
    if not callable(tokenizer):
        return None
    max_length = getattr(model, "max_seq_length", None)
    counter = _counting_tokenizer(tokenizer, max_length)
    ids = _count_tokens(counter, list(texts), max_length)
    return np.fromiter((len(i) for i in ids), dtype=np.int64, count=len(ids))


def encode_in_length_batches(model, texts, encode, max_size, progress=False):
    """``encode`` called once per :func:`length_batches` batch of ``texts``.

    Parameters
    ----------
    model : sentence_transformers.SentenceTransformer
        Whose tokenizer measures the texts (:func:`token_lengths`); without
        one, ``encode`` gets every text in one call.
    texts : list of str, length n_texts
    encode : callable
        ``encode(list_of_str) -> ndarray of shape (k, d)``.
    max_size : int
        Most texts per call.
    progress : bool, default=False
        A progress bar over the calls.

    Returns
    -------
    X : ndarray of shape (n_texts, d)
        Rows in the order of ``texts``.
    """
    lengths = token_lengths(model, texts) if len(texts) > 1 else None
    if lengths is None:
        return encode(texts)
    batches = length_batches(lengths, max_size)
    if progress:
        from tqdm.auto import tqdm  # sentence-transformers' own dependency

        batches = tqdm(batches, desc="Batches")
    out = None
    for rows in batches:
        X = np.asarray(encode([texts[i] for i in rows]))
        if out is None:
            out = np.empty((len(texts), X.shape[1]), dtype=X.dtype)
        out[rows] = X
    return out
