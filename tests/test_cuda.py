"""The CUDA paths against the CPU's: these run only where torch sees a GPU.

CI has none; ``benchmarks/cuda_check.sh`` runs them (with the rest of the
suite on the GPU) on a machine that has one.
"""

import numpy as np
import pytest
import torch

from locus_sklearn import LocusRouter

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA device"
)


@pytest.fixture(scope="module")
def pair(pool, tiny_embedder):
    """One router fitted on the GPU, and a copy of it on the CPU."""
    gpu = LocusRouter(tiny_embedder(pool.encodings, device="cuda")).fit(pool.evals)
    cpu = LocusRouter(tiny_embedder(pool.encodings, device="cpu", max_epochs=1)).fit(
        pool.evals
    )
    # The GPU's weights on the CPU: same network, so every output should agree
    # to float32 rounding (sums in another order).
    cpu_embedder = cpu.embedder_
    cpu_embedder.net_.module_.load_state_dict(
        {k: v.cpu() for k, v in gpu.embedder_.net_.module_.state_dict().items()}
    )
    cpu_embedder.embedding_scale_ = gpu.embedder_.embedding_scale_
    return gpu, cpu_embedder


def test_transform_and_predict_proba_match_the_cpu(pair, pool):
    gpu, cpu_embedder = pair
    z_gpu = gpu.embedder_.transform(pool.evals)
    assert next(gpu.embedder_.net_.module_.parameters()).is_cuda
    z_cpu = cpu_embedder.transform(pool.evals)
    np.testing.assert_allclose(z_gpu, z_cpu, rtol=1e-4, atol=1e-5)
    queries = pool.queries["query"].to_numpy()[:50]
    p_gpu = gpu.embedder_.predict_proba(z_gpu, queries, evals=pool.evals)
    p_cpu = cpu_embedder.predict_proba(z_gpu, queries, evals=pool.evals)
    np.testing.assert_allclose(p_gpu, p_cpu, rtol=0, atol=1e-5)


def test_saved_on_the_gpu_loads_on_the_cpu(pair, pool, tmp_path):
    gpu, _ = pair
    gpu.save(tmp_path / "router")
    loaded = LocusRouter.load(tmp_path / "router", encoder=pool.encodings, device="cpu")
    assert not next(loaded.embedder_.net_.module_.parameters()).is_cuda
    queries = pool.queries["query"].to_numpy()[:50]
    np.testing.assert_allclose(
        loaded.predict_proba(queries), gpu.predict_proba(queries), rtol=0, atol=1e-5
    )
    np.testing.assert_array_equal(loaded.predict(queries), gpu.predict(queries))
