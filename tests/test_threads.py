"""The library in threads: what predictions leave of the process-wide
warning filters, seeded fits side by side, and the ONNX export's filters.

The tiny settings and the ``pool`` fixture are in conftest.py.
"""

import threading
import warnings
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from locus_sklearn import FewEvaluationsWarning


def _in_threads(n_threads, function, *args):
    """``function(*args)`` in ``n_threads`` threads started together (past
    one barrier, so that they overlap), and their results in thread order."""
    barrier = threading.Barrier(n_threads)

    def call(_):
        barrier.wait()
        return function(*args)

    with ThreadPoolExecutor(n_threads) as executor:
        return list(executor.map(call, range(n_threads)))


def _in_a_thread(function, *args):
    """``function(*args)`` in one worker thread: the reference for results
    made in threads. A thread's OpenMP settings are its own (conftest's
    torch.set_num_threads(1) holds in the main thread only), and a product
    may sum in another order with another thread count: compare threads with
    a thread."""
    with ThreadPoolExecutor(1) as executor:
        return executor.submit(function, *args).result()


def test_concurrent_predictions_leave_the_warning_filters_alone(
    pool, tiny_embedder, monkeypatch
):
    """``warnings.catch_warnings`` swaps the process-wide filter list; done
    per call on the predict path, two threads inside it at once left the
    library's "ignore UserWarning" installed for good, hiding every later
    UserWarning, the library's own FewEvaluationsWarning among them."""
    from locus_sklearn import _readout

    # readout_neighbors: every predict_proba(evals=) builds a pool whose CSR
    # cells are made anew; and the one-time quieting of torch's CSR warning
    # runs again, in the threads.
    monkeypatch.setattr(_readout, "_csr_beta_quieted", False, raising=False)
    emb = tiny_embedder(pool.encodings, max_epochs=1, readout_neighbors=10)
    emb.fit(pool.evals)
    Z = emb.transform(pool.evals)
    queries = list(pool.queries["query"][:4])
    expected = _in_a_thread(lambda: emb.predict_proba(Z, queries, evals=pool.evals))

    def predict():
        return [emb.predict_proba(Z, queries, evals=pool.evals) for _ in range(25)]

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # the user's own configuration
        before = list(warnings.filters)
        results = _in_threads(8, predict)
        assert warnings.filters == before
        del caught[:]
        emb.transform(pool.evals.groupby("model").head(3))
    assert any(issubclass(w.category, FewEvaluationsWarning) for w in caught)
    for proba in (p for thread in results for p in thread):
        np.testing.assert_array_equal(proba, expected)


def test_the_csr_warning_is_quieted_once_and_narrowly(monkeypatch):
    """The one-time quieting of torch's "sparse CSR is in beta" ignores that
    warning alone, and leaves the filters as they were."""
    from locus_sklearn import _readout

    monkeypatch.setattr(_readout, "_csr_beta_quieted", False)
    monkeypatch.setattr(
        torch.Tensor,
        "to_sparse_csr",
        lambda self: [
            warnings.warn(
                "Sparse CSR tensor support is in beta state.", UserWarning, stacklevel=1
            ),
            warnings.warn("something else", UserWarning, stacklevel=1),
        ],
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        before = list(warnings.filters)
        _readout._quiet_csr_beta_warning()
        _readout._quiet_csr_beta_warning()  # spent: no second conversion
        assert warnings.filters == before
    assert [str(w.message) for w in caught] == ["something else"]
    assert _readout._csr_beta_quieted


def test_seeded_fits_in_threads_reproduce_the_sequential_ones(pool, tiny_embedder):
    """Fits draw from torch's process-wide generator, which each seeds for
    its duration: in two threads at once they re-seeded and drew from one
    generator, each fit's draws depending on the other's timing."""

    def fit(seed):
        return tiny_embedder(pool.encodings, max_epochs=2, random_state=seed).fit(
            pool.evals
        )

    def fit_and_embed(seed):
        return fit(seed).transform(pool.evals)

    expected = {seed: _in_a_thread(fit_and_embed, seed) for seed in (0, 1)}
    barrier = threading.Barrier(2)

    def fit_in_thread(seed):
        barrier.wait()
        return fit(seed).transform(pool.evals)

    with ThreadPoolExecutor(2) as executor:
        got = dict(zip((0, 1), executor.map(fit_in_thread, (0, 1)), strict=True))
    for seed in (0, 1):
        np.testing.assert_array_equal(got[seed], expected[seed])


def test_seeded_mf_fits_in_threads_reproduce_the_sequential_one(pool):
    """The baselines' networks are seeded by the same helper."""
    from locus_sklearn.baselines import MatrixFactorizationRouter

    def fit():
        router = MatrixFactorizationRouter(
            encoder=pool.encodings, embedding_dim=8, max_epochs=3, random_state=0
        )
        return router.fit(pool.evals).predict_proba(list(pool.queries["query"]))

    expected = _in_a_thread(fit)
    for proba in _in_threads(2, fit):
        np.testing.assert_array_equal(proba, expected)


def test_seeded_blocks_nest_in_one_thread():
    """A seeded block inside another (the lock is re-entrant) runs, and each
    restores the generator it found."""
    from locus_sklearn._training import seeded_rng

    def nested():
        with seeded_rng(0, "cpu"):
            outer = torch.rand(2)
            with seeded_rng(1, "cpu"):
                inner = torch.rand(2)
            return outer, inner, torch.rand(2)

    torch.manual_seed(5)
    worker = ThreadPoolExecutor(1)
    outer, inner, after = worker.submit(nested).result(timeout=30)
    worker.shutdown()
    # The caller's generator, as it was before.
    mine = torch.Generator().manual_seed(5)
    torch.testing.assert_close(
        torch.rand(2), torch.rand(2, generator=mine), rtol=0, atol=0
    )
    seeded = torch.Generator().manual_seed(0)
    torch.testing.assert_close(outer, torch.rand(2, generator=seeded), rtol=0, atol=0)
    torch.testing.assert_close(after, torch.rand(2, generator=seeded), rtol=0, atol=0)
    torch.testing.assert_close(
        inner, torch.rand(2, generator=torch.Generator().manual_seed(1)), rtol=0, atol=0
    )


def test_onnx_export_hides_only_the_exporters_warnings(monkeypatch):
    """The export (several seconds) ignores the exporter's own warnings, not
    every warning of every thread: the user's and the library's show."""
    from locus_sklearn import _onnx

    class Stop(Exception):
        pass

    def other_thread():
        warnings.warn("another thread's warning", FewEvaluationsWarning, stacklevel=1)

    def export(*args, **kwargs):
        warnings.warn_explicit(
            "# The axis name: batch will not be used",
            UserWarning,
            "_onnx_program.py",
            486,
            module="torch.onnx._internal.exporter._onnx_program",
        )
        thread = threading.Thread(target=other_thread)
        thread.start()
        thread.join()
        raise Stop

    monkeypatch.setattr(torch.onnx, "export", export)
    transformer = torch.nn.Identity()
    transformer.config = SimpleNamespace(max_position_embeddings=8)
    encoder = object.__new__(_onnx.OnnxSentenceEncoder)
    encoder.input_names = ["input_ids"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        before = list(warnings.filters)
        with pytest.raises(Stop):
            encoder._export(transformer, {"input_ids": torch.zeros(1, 2)})
        assert warnings.filters == before
    assert [str(w.message) for w in caught] == ["another thread's warning"]
