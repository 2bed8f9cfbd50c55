"""Fixed-seed outputs match the reference recorded before the
training code moved into one home (tests/data/reference/make_reference.py),
re-recorded three times since: when training's CPU dropout masks changed random
stream (``_dropout.py``), when a training step's arithmetic was regrouped
for speed (the readout's weights summed directly, the predictor's first layer
through per-model matrices, the tokenizer's fused multiply-adds, the attention
scale applied to the queries, AdamW's fused kernel; the same dropout masks):
against the reference before it, the same routed models, P(correct) within
1e-7 and embeddings within 2e-6; and when training's pooling stopped projecting
the tokens, the readout's bandwidth gradient came from its sums' own
derivative and projected rows were gathered with ``index_select`` (2026-12-04;
the same masks): the same routed models, P(correct) within 9e-8, embeddings
within 1.1e-6, weights within 1.2e-6 relative but the attention key biases
(up to 1e-4: softmax ignores them, so their gradients are rounding noise,
which AdamW's normalised step carries to the size of any other update).

The reference was written on this project's CI machine type with one torch
thread; a different CPU or torch build may round differently, so the files are
regenerated (not loosened) when the platform changes. They are recorded per CPU
vendor (``make_reference.cpu_vendor``: MKL rounds differently on Intel's and
AMD's processors whatever the pins below, every fitted weight about one float32
rounding apart), and the test compares with the folder of the CPU it runs on;
a vendor with none recorded is skipped, naming the command that records one. The fits run in a child
process with the CPU kernels held to AVX2 (``make_reference.PINNED_ISA``, read
when torch loads): a CPU with AVX-512 otherwise takes kernels that round
differently (seen 2026-12-04: the attention key biases 1e-5 apart, bit for bit
with the pins).

Training and the saved tensors stay bit-identical. Inference does not: since
issue 14 the encoder embeds through ``LocusEncoder.forward_inference`` (cache-
sized chunks, biases folded into the GEMMs and the attention, pooling without
token projections), and the prediction path computes the readout's kernel
weights exp((cos - 1)/τ) directly (not shifted by each query's best
similarity) with the predictor's model terms inside its matrix product: the
same maths summed in another order. Embeddings and
P(correct) (also the pool embeddings in the saved file) are compared within
``INFERENCE_TOLERANCE`` (about ten float32 roundings of values of order one),
the routed models exactly. The reference router is the plain one
(``shrinkage=None``); its saved file has since gained one tensor, each model's
mean score, checked against the pool (and recorded since the second
re-recording), and then another, the embedder's ``embedding_scale`` (session
28), checked against the spread of the saved pool embeddings and not recorded.
"""

import os
import subprocess
import sys

import numpy as np
import pytest

from locus_sklearn.datasets import make_model_pool

REFERENCE = os.path.join(os.path.dirname(__file__), "data", "reference")
sys.path.insert(0, REFERENCE)
from make_reference import PINNED_ISA, POOL, cpu_vendor  # noqa: E402

sys.path.remove(REFERENCE)

# Outputs of the streamed inference path (see the module docstring).
INFERENCE_OUTPUTS = ("embeddings", "transform", "proba", "file.pool.embeddings")
INFERENCE_TOLERANCE = dict(rtol=1e-5, atol=1e-5)


@pytest.fixture(scope="module")
def reference_run(tmp_path_factory):
    """The folder of this code's reference outputs, fitted as the reference
    was: ``make_reference.py --out`` in a child process (one thread, the
    pinned instruction set)."""
    out = tmp_path_factory.mktemp("reference")
    run = subprocess.run(
        [sys.executable, os.path.join(REFERENCE, "make_reference.py"), "--out", out],
        env={**os.environ, **PINNED_ISA},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    return out


@pytest.mark.parametrize("kernel_readout", [True, False])
def test_outputs_and_saved_tensors_match_the_reference(kernel_readout, reference_run):
    name = "readout" if kernel_readout else "embedding_only"
    recorded = os.path.join(REFERENCE, cpu_vendor())
    if not os.path.isdir(recorded):
        pytest.skip(
            f"no reference recorded for this CPU vendor ({cpu_vendor()}): record "
            "one with `python tests/data/reference/make_reference.py` from the "
            "commit whose outputs another vendor's reference matches"
        )
    expected = np.load(os.path.join(recorded, f"{name}.npz"))
    actual = dict(np.load(os.path.join(reference_run, f"{name}.npz")))
    # Saved since the shrinkage safeguard: each model's mean score.
    means = actual["file.pool.mean_scores"]
    scores = make_model_pool(**POOL).evals.groupby("model")["score"].mean()
    np.testing.assert_allclose(means, scores.sort_index().to_numpy())
    # Saved since refinement: each coordinate's spread over the encoder's
    # embeddings of the training models, here the router's pool.
    scale = actual.pop("file.embedding_scale")
    pool_embeddings = actual["file.pool.embeddings"]
    np.testing.assert_allclose(
        scale, np.maximum(pool_embeddings.std(axis=0, ddof=1), 1e-6), rtol=1e-5
    )
    assert sorted(actual) == sorted(expected.files)
    for key in expected.files:
        if key in INFERENCE_OUTPUTS:
            np.testing.assert_allclose(
                actual[key], expected[key], err_msg=key, **INFERENCE_TOLERANCE
            )
        else:  # training, the saved file and the routing decisions: exact
            np.testing.assert_array_equal(actual[key], expected[key], err_msg=key)


def test_file_saved_before_the_move_loads_and_predicts_the_same():
    from locus_sklearn import LocusRouter

    router = LocusRouter.load(os.path.join(REFERENCE, "router_fd95f1c.safetensors"))
    pool = make_model_pool(**POOL)
    queries = pool.evals["query"].unique()
    # What that file predicted when it was saved (the embedding-only reference
    # of fd95f1c).
    expected = np.load(os.path.join(REFERENCE, "router_fd95f1c.npz"))
    np.testing.assert_allclose(
        router.predict_proba(queries), expected["proba"], **INFERENCE_TOLERANCE
    )
    np.testing.assert_array_equal(router.predict(queries), expected["routed"])
