"""The kernel readout (locus_sklearn._readout): hand-computed values, the pool
cache, sparse and dense layouts, and the nearest-neighbour options
(ReadoutPool, KernelReadout.pairwise_pool)."""

import gc
import pickle
import sys
import weakref

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.base import clone

from locus_sklearn import LocusEmbedder, LocusRouter
from locus_sklearn import _readout as readout_module
from locus_sklearn._readout import EvaluationSets, KernelReadout, ReadoutPool


def _pairwise_exact(readout, queries, bank, set_index, set_score, indptr, chunk=256):
    """The readout through each model's log-sum-exp, one model at a time over
    a (Q, R) similarity matrix: the slow reference the pool's paths are
    checked against."""
    n_models = len(indptr) - 1
    out = queries.new_zeros(queries.shape[0], n_models, readout.n_outputs)
    queries, bank = F.normalize(queries, dim=-1), F.normalize(bank, dim=-1)
    for start in range(0, queries.shape[0], chunk):
        similarity = (queries[start : start + chunk] @ bank.T)[:, set_index]
        for m in range(n_models):
            rows = slice(int(indptr[m]), int(indptr[m + 1]))
            sim = similarity[:, rows]
            out[start : start + chunk, m] = readout._features(
                sim, set_score[rows], torch.ones_like(sim, dtype=torch.bool)
            )
    return out


def _fresh_proba(router, queries):
    """P(correct) computed from pool_evals_ with no cached pool."""
    locus = router._fitted_locus()
    return locus._predict_proba_encoded(
        router.model_embeddings_, router._encode(queries), router.pool_evals_
    )


def _random_sets(seed, n_bank, n_features, sizes, n_duplicates=0):
    gen = torch.Generator().manual_seed(seed)
    bank = torch.randn(n_bank, n_features, generator=gen)
    if n_duplicates:  # identical encodings under different bank rows
        bank[:n_duplicates] = bank[n_duplicates : 2 * n_duplicates]
    index = torch.randint(0, n_bank, (sum(sizes),), generator=gen)
    score = torch.rand(sum(sizes), generator=gen)
    indptr = np.concatenate([[0], np.cumsum(sizes)]).astype(int)
    return EvaluationSets(bank, index, score, indptr)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    sizes=st.lists(st.integers(0, 12), min_size=1, max_size=6),
    n_duplicates=st.integers(0, 3),
    bandwidth=st.sampled_from([1.0, 0.1, 0.02]),
)
def test_sparse_dense_and_log_sum_exp_agree(seed, sizes, n_duplicates, bandwidth):
    """Sparse and dense pools, with merged duplicate encodings and models
    without rows, give the per-model log-sum-exp readout; the sparse pool's
    two forms (weights transposed in cache, or read in blocks) the same."""
    sets = _random_sets(seed, 8, 5, sizes, n_duplicates)
    queries = torch.randn(9, 5, generator=torch.Generator().manual_seed(seed + 1))
    readout = KernelReadout(bandwidth)
    with torch.no_grad():
        exact = _pairwise_exact(readout, queries, *sets)
        dense = readout.pairwise_pool(queries, ReadoutPool(sets, sparse=False), 4)
        sparse = readout.pairwise_pool(queries, ReadoutPool(sets, sparse=True), 4)
        with pytest.MonkeyPatch.context() as patch:  # no bank is small enough
            patch.setattr(readout_module, "_TRANSPOSED_WEIGHTS", 0)
            blocked = readout.pairwise_pool(queries, ReadoutPool(sets, sparse=True), 4)
    # The paths' float32 cosines differ by up to ~5e-7 (summation order), and
    # a weight exp((cos - 1) / bandwidth) carries that over 1 / bandwidth: at
    # 0.02 a readout feature moves by up to ~1e-6 / bandwidth (1.76e-6 seen).
    slack = 1e-6 / bandwidth
    torch.testing.assert_close(dense, exact, rtol=1e-4, atol=1e-5 + slack)
    torch.testing.assert_close(sparse, dense, rtol=1e-5, atol=1e-6 + slack)
    torch.testing.assert_close(blocked, sparse, rtol=1e-5, atol=1e-6 + slack)
    empty = np.diff(sets.indptr) == 0
    assert torch.equal(dense[:, empty], torch.zeros(9, int(empty.sum()), 2))


def test_pool_merges_identical_encodings_and_drops_unused_queries():
    bank = torch.tensor([[1.0, 0.0], [2.0, 0.0], [0.0, 1.0], [0.0, 3.0]])
    # Rows 0 and 1 have one direction (one unit encoding); row 3 is unused.
    sets = EvaluationSets(bank, torch.tensor([0, 1, 2]), torch.ones(3), [0, 2, 3])
    pool = ReadoutPool(sets)
    assert pool.bank.shape == (2, 2)
    table = pool.table(torch.float32)
    # Model 0 has two evaluations on the merged query, model 1 one on the other.
    assert sorted(table[0].tolist()) == [0.0, 2.0]
    assert sorted(table[1].tolist()) == [0.0, 1.0]


def test_sparse_layout_chosen_for_sparse_or_large_pools():
    sparse_sets = _random_sets(0, 1000, 4, [3] * 50)  # 2% of the cells
    assert ReadoutPool(sparse_sets).is_sparse
    assert not ReadoutPool(_random_sets(0, 10, 4, [30] * 3)).is_sparse
    assert ReadoutPool(sparse_sets).nbytes() > 0


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("bandwidth", [0.1, 0.001])
def test_neighbours_readout_with_every_query_is_exact(bandwidth, sparse):
    """At τ = 0.001 the weights of distant neighbours, exp((cos − 1) / τ),
    underflow float64: a model with only those read 0.5 with no evidence
    until each model's weights were taken relative to its largest."""
    sets = _random_sets(3, 30, 6, [10, 0, 25, 7, 1])
    queries = torch.randn(11, 6, generator=torch.Generator().manual_seed(0))
    readout = KernelReadout(bandwidth)
    pool = ReadoutPool(sets, sparse=sparse)
    with torch.no_grad():
        full = readout.pairwise_pool(queries, pool)
        top = readout.pairwise_pool(queries, pool, neighbors=len(pool.bank))
        few = readout.pairwise_pool(queries, pool, neighbors=3)
    # The case: model 4's one row, far enough from some queries that its
    # weight is 0 in float64, still gives them its own score.
    row = torch.nn.functional.normalize(sets.bank[sets.index[-1]], dim=0)
    cos = torch.nn.functional.normalize(queries, dim=-1) @ row
    assert ((cos.double() - 1) / bandwidth).exp().eq(0).any() == (bandwidth < 0.003)
    assert torch.equal(full[:, 4, 0], torch.full((11,), 2 * sets.score[-1] - 1))
    # Float32 cosines (to about 1e-7, summed in another order by the exact
    # path) differ by 1e-7 / τ in the weights' exponents.
    tolerance = 1e-5 if bandwidth >= 0.003 else 1e-3
    torch.testing.assert_close(top, full, rtol=tolerance, atol=tolerance / 10)
    # With 3 neighbours the evidence can only drop.
    assert (few[..., 1] <= full[..., 1] + 1e-6).all()


def test_neighbours_readout_hand_computed():
    """Two bank queries; with one neighbour, only the nearest counts."""
    bank = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    sets = EvaluationSets(
        bank, torch.tensor([0, 1, 1]), torch.tensor([1.0, 0.0, 1.0]), [0, 2, 3]
    )
    readout = KernelReadout(0.5)
    with torch.no_grad():
        out = readout.pairwise_pool(
            torch.tensor([[1.0, 0.1]]), ReadoutPool(sets), neighbors=1
        )
    cos = 1 / np.sqrt(1.01)
    w = np.exp((cos - 1) / 0.5)
    # Model 0: its row on query 0 only (score 1); model 1 has none nearby.
    torch.testing.assert_close(
        out[0, 0], torch.tensor([1.0, np.log1p(w)], dtype=torch.float32)
    )
    torch.testing.assert_close(out[0, 1], torch.tensor([0.0, 0.0]))


def test_hnsw_index_agrees_with_exact_top_k_on_separated_clusters():
    pytest.importorskip("hnswlib")
    gen = torch.Generator().manual_seed(0)
    centres = torch.nn.functional.normalize(torch.randn(20, 32, generator=gen), dim=1)
    bank = centres.repeat_interleave(25, 0) + 0.05 * torch.randn(500, 32, generator=gen)
    sizes = [100] * 8
    index = torch.randint(0, 500, (800,), generator=gen)
    sets = EvaluationSets(
        bank, index, torch.rand(800, generator=gen), np.arange(9) * 100
    )
    queries = centres + 0.05 * torch.randn(20, 32, generator=gen)
    pool = ReadoutPool(sets)
    unit = torch.nn.functional.normalize(queries, dim=1)
    _, exact = pool.nearest(unit, 10)
    _, approx = pool.nearest(unit, 10, "hnsw")
    recall = np.mean(
        [
            len(set(a.tolist()) & set(e.tolist())) / 10
            for a, e in zip(approx, exact, strict=True)
        ]
    )
    assert recall >= 0.95
    readout = KernelReadout(0.1)
    with torch.no_grad():
        a = readout.pairwise_pool(queries, pool, neighbors=10, index="hnsw")
        e = readout.pairwise_pool(queries, pool, neighbors=10)
    assert torch.allclose(a, e, atol=1e-5) or recall < 1
    del sizes


# ------------------------------------------------------------ the router cache
@pytest.fixture
def readout_router(pool, tiny_embedder):
    return LocusRouter(tiny_embedder(pool.encodings, max_epochs=1)).fit(pool.evals)


def test_cache_is_reused_and_equals_a_fresh_computation(readout_router, query_texts):
    r = readout_router
    queries = query_texts[:20]
    first = r.predict_proba(queries)
    pool = r._readout_pool()
    assert r._readout_pool() is pool  # kept between calls
    np.testing.assert_array_equal(r.predict_proba(queries), first)
    np.testing.assert_array_equal(_fresh_proba(r, queries), first)


def test_cache_follows_add_and_remove_models(
    readout_router, query_texts, model_names, rows_of, pool
):
    r = readout_router
    queries = query_texts[:20]
    r.predict_proba(queries)
    before = r._readout_pool()
    r.remove_models(model_names[:3])
    assert r._readout_pool() is not before
    assert r._readout_pool().n_models == len(model_names) - 3
    np.testing.assert_array_equal(r.predict_proba(queries), _fresh_proba(r, queries))
    r.add_models(rows_of(pool.evals, model_names[:2]))
    assert r._readout_pool().n_models == len(model_names) - 1
    np.testing.assert_array_equal(r.predict_proba(queries), _fresh_proba(r, queries))


def test_cache_never_keeps_a_view_of_a_replaced_pool(
    readout_router, pool, model_names, query_texts, rows_of, monkeypatch
):
    """add_models in another thread while the first prediction builds the
    readout's view: the view of the old pool was kept under the new pool's
    key, and every later prediction used it (or failed on its model count)."""
    r = readout_router
    queries = query_texts[:20]
    r.remove_models(model_names[:1])
    locus = r._fitted_locus()
    build = type(locus)._readout_pool

    def build_while_the_pool_changes(self, *pool_evals):
        view = build(self, *pool_evals)
        monkeypatch.setattr(type(locus), "_readout_pool", build)
        r.add_models(rows_of(pool.evals, model_names[:1]))  # "another thread"
        return view

    monkeypatch.setattr(type(locus), "_readout_pool", build_while_the_pool_changes)
    r._readout_pool()
    assert r._readout_pool().n_models == len(model_names)
    np.testing.assert_array_equal(r.predict_proba(queries), _fresh_proba(r, queries))


def test_cache_of_a_replaced_pool_is_let_go(
    readout_router, query_texts, pool, model_names, rows_of
):
    """fit, add_models and remove_models left the old pool's view (its
    network and every stored evaluation) referenced until the next
    prediction."""
    r = readout_router
    changes = [
        lambda: r.fit(pool.evals.iloc[::2]),
        lambda: r.remove_models(model_names[:2]),
        lambda: r.add_models(rows_of(pool.evals, model_names[:2])),
    ]
    for change in changes:
        r.predict_proba(query_texts[:5])
        old = weakref.ref(r._readout_cache[2])
        change()
        gc.collect()
        assert old() is None


def test_cache_follows_refit_set_params_pickle_and_load(
    readout_router, query_texts, pool, tmp_path
):
    r = readout_router
    queries = query_texts[:20]
    r.predict_proba(queries)
    r.set_params(embedder__max_epochs=2).fit(pool.evals.iloc[::2])
    np.testing.assert_array_equal(r.predict_proba(queries), _fresh_proba(r, queries))
    assert r._readout_pool().n_rows == r.pool_evals_[1].n_rows
    restored = pickle.loads(pickle.dumps(r))
    assert "_readout_cache" not in restored.__dict__
    np.testing.assert_array_equal(
        restored.predict_proba(queries), r.predict_proba(queries)
    )
    r.save(tmp_path / "r.safetensors")
    loaded = LocusRouter.load(tmp_path / "r.safetensors")
    np.testing.assert_array_equal(
        loaded.predict_proba(queries), r.predict_proba(queries)
    )
    assert "_readout_cache" not in clone(r).__dict__


def test_neighbour_options_predict_saved_and_loaded(
    readout_router, query_texts, tmp_path, assert_reproduced
):
    r = readout_router
    queries = query_texts[:20]
    exact = r.predict_proba(queries)
    r.embedder_.set_params(readout_neighbors=len(r._readout_pool().bank))
    np.testing.assert_allclose(r.predict_proba(queries), exact, atol=1e-6)
    r.embedder_.set_params(readout_neighbors=5)
    approx = r.predict_proba(queries)
    assert np.isfinite(approx).all() and not np.allclose(approx, exact)
    r.save(tmp_path / "k.safetensors")
    loaded = LocusRouter.load(tmp_path / "k.safetensors")
    assert loaded.embedder_.readout_neighbors == 5
    assert_reproduced(loaded.predict_proba(queries), approx)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        # None is valid: the message once read "..., not a bool or None".
        (
            {"readout_neighbors": 0},
            r"'readout_neighbors' .* an int in the range \[1, inf\) \(not a bool\) "
            r"or None\. Got 0 instead",
        ),
        ({"readout_neighbors": 2.5}, "readout_neighbors"),
        # A bool is no count: True was read as k=1 at prediction.
        ({"readout_neighbors": True}, "'readout_neighbors' .*not a bool"),
        ({"readout_neighbors": np.True_}, "'readout_neighbors' .*not a bool"),
        ({"readout_index": "faiss"}, "readout_index"),
        ({"readout_dtype": "float16"}, "readout_dtype"),
        ({"readout_index": "hnsw"}, "needs|readout_neighbors=None"),
    ],
)
def test_readout_parameters_are_validated(
    params, message, readout_router, query_texts, pool
):
    with pytest.raises(ValueError, match=message):
        LocusEmbedder(pool.encodings, **params).fit(pool.evals)
    # Also when set on a fitted embedder, at prediction.
    r = readout_router
    r.embedder_.set_params(**params)
    with pytest.raises(ValueError, match=message):
        r.predict_proba(query_texts[:3])


def test_bool_readout_neighbors_refused_by_embedder_predict_proba(
    readout_router, query_texts, pool
):
    embedder = readout_router.embedder_
    embedder.set_params(readout_neighbors=True)
    with pytest.raises(ValueError, match="'readout_neighbors' .*not a bool"):
        embedder.predict_proba(
            readout_router.model_embeddings_, query_texts[:3], evals=pool.evals
        )


HNSW_MISSING = (
    "readout_index='hnsw' needs hnswlib: pip install 'locus-sklearn\\[ann\\]'"
)


@pytest.mark.parametrize("shrinkage", [None, "auto"])
def test_missing_hnswlib_is_reported_before_training(
    pool, tiny_embedder, monkeypatch, shrinkage
):
    monkeypatch.setitem(sys.modules, "hnswlib", None)  # not installed
    trained = []
    monkeypatch.setattr(
        "locus_sklearn._embedder.fit_network",
        lambda *args, **kwargs: trained.append(1),
    )
    embedder = tiny_embedder(pool.encodings, readout_neighbors=8, readout_index="hnsw")
    with pytest.raises(ImportError, match=HNSW_MISSING):
        LocusRouter(embedder, shrinkage=shrinkage).fit(pool.evals)
    with pytest.raises(ImportError, match=HNSW_MISSING):
        clone(embedder).fit(pool.evals)
    assert not trained
    # Without the kernel readout the index is never searched: no hnswlib needed.
    embedder.set_params(kernel_readout=False, max_epochs=1)
    monkeypatch.undo()
    monkeypatch.setitem(sys.modules, "hnswlib", None)
    assert np.isfinite(embedder.fit_transform(pool.evals)).all()


def test_router_with_hnsw_loads_without_hnswlib(
    readout_router, tmp_path, monkeypatch, query_texts
):
    # A saved file can still be read (and set to the exact readout) where
    # hnswlib is missing; only searching with it needs it.
    pytest.importorskip("hnswlib")
    r = readout_router
    r.embedder_.set_params(readout_neighbors=8, readout_index="hnsw")
    r.save(tmp_path / "r.safetensors")
    monkeypatch.setitem(sys.modules, "hnswlib", None)
    loaded = LocusRouter.load(tmp_path / "r.safetensors")
    with pytest.raises(ImportError, match=HNSW_MISSING):
        loaded.predict_proba(query_texts[:3])
    loaded.embedder_.set_params(readout_index="exact")
    assert np.isfinite(loaded.predict_proba(query_texts[:3])).all()


def test_bfloat16_similarity_is_close_to_float32():
    sets = _random_sets(5, 200, 32, [40, 0, 80, 10])
    queries = torch.randn(30, 32)
    readout = KernelReadout(0.1)
    pool = ReadoutPool(sets)
    with torch.no_grad():
        full = readout.pairwise_pool(queries, pool)
        low = readout.pairwise_pool(queries, pool, similarity_dtype=torch.bfloat16)
    # Cosines to ~1e-2 move each weight by exp(1e-2 / 0.1): about 10%.
    torch.testing.assert_close(low, full, rtol=0.1, atol=0.05)
    assert not torch.equal(low, full)
    assert torch.equal(low[:, 1], full[:, 1])  # the model without rows


def _brute_force_readout(queries, sets, bandwidth):
    """Each model's log-sum-exp readout in float64, one (query, model) at a time."""
    unit = torch.nn.functional.normalize(queries.double(), dim=-1)
    rows = torch.nn.functional.normalize(sets.bank.double(), dim=-1)[sets.index]
    out = torch.zeros(len(queries), len(sets.indptr) - 1, 2, dtype=torch.float64)
    for m in range(len(sets.indptr) - 1):
        part = slice(int(sets.indptr[m]), int(sets.indptr[m + 1]))
        if part.start == part.stop:
            continue
        logits = ((unit @ rows[part].T - 1).clamp_max(0)) / bandwidth
        log_mass = torch.logsumexp(logits, dim=1)
        weights = (logits - log_mass[:, None]).exp()
        out[:, m, 0] = 2 * (weights @ sets.score[part].double()) - 1
        out[:, m, 1] = torch.nn.functional.softplus(log_mass)
    return out


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("bandwidth", [0.0029, 0.001, 1e-4])
def test_narrow_exact_readout_is_chunked_and_matches_float64(bandwidth, sparse):
    """Below τ = 0.003 the exact readout fell back to a per-model loop: a
    (256, R) matrix of evaluations whatever query_chunk said, a Python loop
    over the models, and float64 queries refused. It reads the pool's cells
    in chunks of at most query_chunk queries, and matches a float64 brute
    force (float32 cosines, to about 1e-7, move the exponents by 1e-7 / τ)."""
    sets = _random_sets(7, 40, 6, [10, 0, 25, 7, 1, 40])
    queries = torch.randn(13, 6, generator=torch.Generator().manual_seed(2))
    readout = KernelReadout(bandwidth)
    pool = ReadoutPool(sets, sparse=sparse)
    chunks = []
    gather = pool.gather

    def spy(nearest, weights, log=False):
        chunks.append(tuple(weights.shape))
        return gather(nearest, weights, log=log)

    with pytest.MonkeyPatch.context() as patch, torch.no_grad():
        patch.setattr(pool, "gather", spy)
        got = readout.pairwise_pool(queries, pool, query_chunk=4)
        got64 = readout.pairwise_pool(queries.double(), pool, query_chunk=4)
    assert chunks and all(q <= 4 and u == len(pool.bank) for q, u in chunks)
    expected = _brute_force_readout(queries, sets, bandwidth)
    tolerance = 1e-7 / bandwidth * 10
    torch.testing.assert_close(got.double(), expected, rtol=tolerance, atol=tolerance)
    assert got64.dtype == torch.float64
    torch.testing.assert_close(got64, got.double())
    assert torch.equal(got[:, 1], torch.zeros(13, 2))  # the model without rows


def test_bfloat16_similarity_chooses_the_neighbours_too():
    """readout_dtype="bfloat16" was ignored with neighbours: the top-k ran in
    float32. The neighbours now come from the bfloat16 product, each within
    its rounding (about 1e-2) of the float32 k-th nearest."""
    sets = _random_sets(5, 200, 32, [40, 0, 80, 10])
    queries = torch.randn(30, 32, generator=torch.Generator().manual_seed(4))
    readout = KernelReadout(0.1)
    pool = ReadoutPool(sets)
    with torch.no_grad():
        full = readout.pairwise_pool(queries, pool, neighbors=8)
        low = readout.pairwise_pool(
            queries, pool, neighbors=8, similarity_dtype=torch.bfloat16
        )
    torch.testing.assert_close(low, full, rtol=0.1, atol=0.05)
    assert not torch.equal(low, full)
    unit = torch.nn.functional.normalize(queries, dim=-1)
    similarity, nearest = pool.nearest(unit, 8, dtype=torch.bfloat16)
    assert similarity.dtype == torch.bfloat16
    exact = unit @ pool.bank.T
    kth = exact.topk(8, dim=1).values[:, -1:]
    assert (exact.gather(1, nearest) >= kth - 2e-2).all()
    torch.testing.assert_close(
        similarity.float(), exact.gather(1, nearest), rtol=0, atol=1e-2
    )


def test_readout_chunks_are_sized_by_the_weights_dtype():
    """The (U, q) weights of a chunk, with the float32 similarities they are
    converted from, stay within 32 MB: float64 weights (1/30 > τ >= 0.003)
    took chunks sized for float32 ones, 96 MB in all."""
    n_bank = 2**16
    gen = torch.Generator().manual_seed(0)
    sets = EvaluationSets(
        torch.randn(n_bank, 4, generator=gen), torch.arange(n_bank),
        torch.rand(n_bank, generator=gen), [0, n_bank],
    )  # fmt: skip
    pool = ReadoutPool(sets, sparse=False)
    queries = torch.randn(300, 4, generator=gen)
    sizes = []
    write = KernelReadout._readout

    def spy(sums, pool, out, peak=None):
        sizes.append(len(out))
        return write(sums, pool, out, peak)

    for bandwidth, itemsize in [(0.1, 4), (0.01, 8 + 4)]:
        sizes.clear()
        with pytest.MonkeyPatch.context() as patch, torch.no_grad():
            patch.setattr(KernelReadout, "_readout", staticmethod(spy))
            KernelReadout(bandwidth).pairwise_pool(queries, pool)
        assert max(sizes) * n_bank * itemsize <= 32 * 2**20, bandwidth


def test_nbytes_counts_the_cells_of_the_neighbour_readout():
    """nbytes left out the (U, K + M) cells the neighbour and narrow readouts
    build and keep."""
    sets = _random_sets(0, 300, 4, [50, 120, 30])
    pool = ReadoutPool(sets)
    queries = torch.randn(5, 4)
    before = pool.nbytes()
    with torch.no_grad():
        KernelReadout(0.1).pairwise_pool(queries, pool, neighbors=3)
    cells = sum(t.numel() * t.element_size() for t in pool._by_bank)
    assert pool.nbytes() == before + cells > before


def test_models_on_the_same_queries_share_one_row_of_counts():
    """Every model evaluated on the whole bank: one row of counts, same readout."""
    gen = torch.Generator().manual_seed(0)
    bank = torch.randn(15, 6, generator=gen)
    index = torch.arange(15).repeat(4)
    sets = EvaluationSets(bank, index, torch.rand(60, generator=gen), np.arange(5) * 15)
    pool = ReadoutPool(sets)
    assert pool.n_count_rows == 1 and pool.table(torch.float32).shape == (5, 15)
    queries = torch.randn(7, 6, generator=gen)
    readout = KernelReadout(0.1)
    with torch.no_grad():
        shared = readout.pairwise_pool(queries, pool)
        sparse = readout.pairwise_pool(queries, ReadoutPool(sets, sparse=True))
        top = readout.pairwise_pool(queries, pool, neighbors=15)
        exact = _pairwise_exact(readout, queries, *sets)
    torch.testing.assert_close(shared, exact, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(shared, sparse, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(top, shared, rtol=1e-5, atol=1e-6)


def test_kernel_readout_hand_computed():
    readout = KernelReadout(bandwidth=0.5)
    query = torch.tensor([[[1.0, 0.0]]])  # (B=1, M=1, F=2)
    rows = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]]])
    score = torch.tensor([[1.0, 0.0, 1.0]])
    mask = torch.tensor([[True, True, False]])
    # cos = 1 and 0; w = exp(0/.5) = 1 and exp(-1/.5) = e^-2; third row masked.
    w = torch.tensor([1.0, float(np.exp(-2.0))])
    expected_r = (w[0] * 1 + w[1] * 0) / w.sum()
    out = readout(query, rows, score, mask)[0, 0]
    torch.testing.assert_close(out[0], 2 * expected_r - 1)
    torch.testing.assert_close(out[1], torch.log1p(w.sum()))
    # The pairwise form over a bank gives the same numbers.
    pairwise = readout.pairwise(
        query[0], rows[0], torch.tensor([0, 1]), torch.tensor([1.0, 0.0]), [0, 2]
    )
    torch.testing.assert_close(pairwise[0, 0], out)


def test_kernel_readout_empty_set_gives_zeros_not_nan():
    readout = KernelReadout()
    out = readout.pairwise(
        torch.randn(3, 4),
        torch.randn(5, 4),
        torch.tensor([0, 1]),
        torch.ones(2),
        [0, 0, 2],
    )
    assert torch.isfinite(out).all()
    assert torch.equal(out[:, 0], torch.zeros(3, 2))


@pytest.mark.parametrize("features_grad", [True, False])
@pytest.mark.parametrize("bandwidth", [0.5, 0.1, 0.02])
def test_episode_readout_equals_log_sum_exp_and_its_gradients(bandwidth, features_grad):
    """Training's readout (``episodes``: each feature row normalised once, the
    weights summed directly while exp(-2/τ) is a normal float, else the
    log-sum-exp) gives the log-sum-exp features of the gathered rows and the
    same gradients, with padding and a model whose whole set is padding.
    Without a gradient for the features (as in training, where they are
    inputs), the bandwidth's gradient comes from the sums' own derivative
    (``_KernelSums``), not from autograd through the weights."""
    gen = torch.Generator().manual_seed(1)
    features = torch.randn(15, 6, generator=gen, dtype=torch.float64)
    query_index = torch.randint(0, 15, (3, 4), generator=gen)
    set_index = torch.randint(0, 15, (3, 7), generator=gen)
    score = torch.rand(3, 7, generator=gen, dtype=torch.float64)
    mask = torch.ones(3, 7, dtype=torch.bool)
    mask[1, 5:] = False
    mask[2] = False  # no evaluation: readout 0.5 (feature 0), evidence 0
    readout = KernelReadout(bandwidth=bandwidth).double()
    features.requires_grad_(features_grad)

    def log_sum_exp(features):
        unit = torch.nn.functional.normalize(features, dim=-1)
        similarity = unit[query_index] @ unit[set_index].transpose(1, 2)
        return readout._features(similarity, score.unsqueeze(1), mask.unsqueeze(1))

    got = readout.episodes(features, query_index, set_index, score, mask)
    expected = log_sum_exp(features)
    torch.testing.assert_close(got, expected)
    assert torch.equal(got[2], torch.zeros(4, 2, dtype=torch.float64))
    # forward on the gathered rows is the same readout.
    torch.testing.assert_close(
        readout(features[query_index], features[set_index], score, mask), got
    )
    weights = torch.randn(got.shape, generator=gen, dtype=torch.float64)
    inputs = (
        (features, readout.log_bandwidth) if features_grad else (readout.log_bandwidth,)
    )
    grads = torch.autograd.grad((got * weights).sum(), inputs)
    expected_grads = torch.autograd.grad((expected * weights).sum(), inputs)
    for grad, expected_grad in zip(grads, expected_grads, strict=True):
        assert torch.isfinite(grad).all()
        torch.testing.assert_close(grad, expected_grad)


@pytest.mark.parametrize("bandwidth", [1.0, 0.1, 0.02, 0.001])
def test_kernel_readout_pairwise_matrix_form_matches_log_sum_exp(bandwidth):
    """The two-GEMM readout equals each model's log-sum-exp, for wide and
    narrow bandwidths (float32, float64 and the exact fallback), models
    without evaluations and a query evaluated twice for one model."""
    gen = torch.Generator().manual_seed(0)
    readout = KernelReadout(bandwidth=bandwidth)
    queries = torch.randn(37, 6, generator=gen)
    bank = torch.randn(20, 6, generator=gen)
    sizes = [5, 0, 12, 1, 9]
    set_index = torch.randint(0, 20, (sum(sizes),), generator=gen)
    set_index[1] = set_index[0]  # a duplicated query within model 0
    set_score = torch.rand(sum(sizes), generator=gen)
    indptr = np.concatenate([[0], np.cumsum(sizes)])
    with torch.no_grad():
        fast = readout.pairwise(
            queries, bank, set_index, set_score, indptr, query_chunk=8
        )
        exact = _pairwise_exact(readout, queries, bank, set_index, set_score, indptr)
    assert torch.isfinite(fast).all()
    torch.testing.assert_close(fast, exact, rtol=1e-4, atol=1e-5)
    assert torch.equal(fast[:, 1], torch.zeros(37, 2))  # model without rows


def test_float32_weights_answers_for_a_bandwidth_of_zero_or_nan():
    """A diverged step can leave τ = 0 (log τ = −inf) or NaN: the choice of
    precision must answer False there, not raise ZeroDivisionError before
    the divergence check can name the cause."""
    assert not readout_module._float32_weights(0.0)
    assert not readout_module._float32_weights(float("nan"))
    assert readout_module._float32_weights(0.1)
    assert not readout_module._float32_weights(0.03)


@pytest.mark.parametrize("bandwidth", [0.02, 0.004, 1e-6, 1e-10, float(np.exp(-100))])
def test_a_stored_query_weighs_one_at_any_bandwidth(bandwidth):
    """A query equal to a stored one has weight at most exp(0) = 1, whatever τ.

    Its float32 cosine can round to 1 + 1e-7; unclamped, exp((cos − 1) / τ)
    exceeded 1 by a factor growing as τ narrows (evidence 0.82 instead of
    log 2 at τ = 1e-6, 3.6e3 at 1e-10). A cosine rounded *below* 1 still
    lowers the weight (float32 cannot resolve τ much under 1e-7), so the
    evidence is bounded above, not pinned. Every path is checked: the exact
    log-sum-exp, the fused float32 / float64 products of both layouts, the
    neighbour gather and the training episodes. The other 63 stored queries
    are random directions, whose weights vanish at these bandwidths, so each
    query reads its own score."""
    gen = torch.Generator().manual_seed(0)
    bank = torch.randn(64, 32, generator=gen)
    score = (torch.arange(64) % 2).float()
    sets = EvaluationSets(bank, torch.arange(64), score, [0, 64])
    readout = KernelReadout(bandwidth)
    with torch.no_grad():
        paths = {
            "exact": _pairwise_exact(readout, bank, *sets)[:, 0],
            "neighbours": readout.pairwise_pool(bank, ReadoutPool(sets), neighbors=4)[
                :, 0
            ],
            "episodes": readout.episodes(
                bank,
                torch.arange(64)[None],
                torch.arange(64)[None],
                score[None],
                torch.ones(1, 64, dtype=torch.bool),
            )[0],
        }
        for sparse in (False, True):
            pool = ReadoutPool(sets, sparse=sparse)
            paths[f"pool sparse={sparse}"] = readout.pairwise_pool(bank, pool)[:, 0]
    for name, features in paths.items():
        readout_value, evidence = features.unbind(-1)
        torch.testing.assert_close(
            readout_value, 2 * score - 1, msg=lambda m, n=name: f"{n}: {m}"
        )
        assert torch.isfinite(evidence).all(), name
        assert evidence.max() <= np.log(2) + 1e-6, (name, evidence.max())
        assert evidence.min() >= 0, name


@pytest.mark.filterwarnings("ignore::locus_sklearn.CollapsedEmbeddingWarning")
def test_fitted_predictions_stay_finite_at_a_vanishing_bandwidth():
    """A fitted embedder whose bandwidth is set to e^-100 (a denormal
    float32) predicted NaN: the weight of a query's own stored copy,
    e^((cos − 1) / τ) with cos rounded to 1 + 1e-7, overflowed."""
    from locus_sklearn.datasets import make_model_pool

    small = make_model_pool(
        n_models=6, n_families=2, n_queries=40, evals_per_model=20, random_state=0
    )
    embedder = LocusEmbedder(
        small.encodings, embedding_dim=8, n_latents=2, n_blocks=1, n_heads=2,
        max_epochs=6, enc_size=(2, 16), episodes_per_epoch=12, batch_size=4,
        random_state=0, lr=10.0,
    ).fit(small.evals)  # fmt: skip
    Z = embedder.transform(small.evals)
    queries = sorted(small.evals["query"].unique())[:10]
    with torch.no_grad():
        embedder.net_.module_.readout.log_bandwidth.fill_(-100.0)
    for neighbors in (None, 3):
        embedder.set_params(readout_neighbors=neighbors)
        proba = embedder.predict_proba(Z, queries, evals=small.evals)
        assert np.isfinite(proba).all(), neighbors
