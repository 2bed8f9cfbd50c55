"""Fixed-seed outputs are bit-identical to the reference recorded before the
training code moved into one home (tests/data/reference/make_reference.py).

The reference was written on this project's CI machine type with one torch
thread; a different CPU or torch build may round differently, so the files are
regenerated (not loosened) when the platform changes.

P(correct) (``proba``) is the one exception: the prediction path computes the
same formula in a faster order (the readout's kernel weights exp((cos - 1)/τ)
directly instead of shifted by each query's best similarity, the predictor's
model terms inside its matrix product), which rounds differently in the last
bits of float32. So ``proba`` is compared to 1e-6 (absolute; about ten float32
ulps) and the routed models, every embedding and every saved tensor stay
bit-identical.
"""

import os
import sys

import numpy as np
import pytest

REFERENCE = os.path.join(os.path.dirname(__file__), "data", "reference")
sys.path.insert(0, REFERENCE)
from make_reference import POOL, reference_outputs  # noqa: E402

sys.path.remove(REFERENCE)


@pytest.mark.parametrize("kernel_readout", [True, False])
def test_outputs_and_saved_tensors_match_the_reference(kernel_readout, tmp_path):
    name = "readout" if kernel_readout else "embedding_only"
    expected = np.load(os.path.join(REFERENCE, f"{name}.npz"))
    actual = reference_outputs(kernel_readout, tmp_path)
    assert sorted(actual) == sorted(expected.files)
    for key in expected.files:
        if key == "proba":  # see the module docstring
            np.testing.assert_allclose(actual[key], expected[key], rtol=0, atol=1e-6)
            np.testing.assert_array_equal(
                actual[key].argmax(axis=1), expected[key].argmax(axis=1)
            )
        else:
            np.testing.assert_array_equal(actual[key], expected[key], err_msg=key)


def test_file_saved_before_the_move_loads_and_predicts_the_same():
    from locus_sklearn import LocusRouter
    from locus_sklearn.datasets import make_model_pool

    router = LocusRouter.load(os.path.join(REFERENCE, "router_fd95f1c.safetensors"))
    pool = make_model_pool(**POOL)
    queries = pool.evals["query"].unique()
    expected = np.load(os.path.join(REFERENCE, "embedding_only.npz"))
    proba = router.predict_proba(queries)
    np.testing.assert_allclose(proba, expected["proba"], rtol=0, atol=1e-6)
    np.testing.assert_array_equal(
        proba.argmax(axis=1), expected["proba"].argmax(axis=1)
    )
