"""KNNRouter ranks tied training queries by index whatever the batch.

Two exact computations of one similarity can round apart: a float32 product,
and the order in which BLAS sums a float64 one, differ between one query and
a batch. Ties must still go by training query index, so that a query's
prediction does not depend on the other queries of the call.
"""

import numpy as np
import pandas as pd
import pytest

from locus_sklearn.baselines import KNNRouter
from locus_sklearn.baselines._neighbors import _top_k

# x is orthogonal to each of t1..t4 (integer dot products of 0), and stays so
# once the vectors are normalised to float32: a four-way tie, which a float32
# batch product broke by rounding (0.0 alone, -1e-9 to 7e-9 in a batch).
ORTHOGONAL = {
    "x": [-1.0, -2.0, -2.0],
    "t1": [2.0, 0.0, -1.0],
    "t2": [-2.0, -1.0, 2.0],
    "t3": [-2.0, 0.0, 1.0],
    "t4": [-2.0, 1.0, 0.0],
}
ORTHOGONAL_SCORES = {"t1": 1.0, "t2": 0.75, "t3": 0.75, "t4": 0.25}


def _permuted_tie():
    """x and two training queries whose cosines with x are equal in exact
    arithmetic: t2 is t1 with its coordinates permuted within the blocks
    where x is constant. With 16 features, float64 BLAS sums the products of
    one query and of a batch in different orders (here: t2 ahead of t1 by
    2.8e-17 in a batch of three, exactly tied alone). t3 = -x is far."""
    x = np.r_[np.ones(8), 2 * np.ones(8)]
    t1 = np.random.default_rng(11).normal(size=16)
    t2 = np.r_[t1[:8][::-1], t1[8:][::-1]]
    return {"x": x, "t1": t1, "t2": t2, "t3": -x}, {"t1": 1.0, "t2": 0.0, "t3": 0.5}


def _with_far_queries(encoder, scores, n_far):
    """``n_far`` more training queries near -x (cosine with x below -0.9, all
    distinct), ids sorting after the tied ones, of score 0."""
    x = np.asarray(encoder["x"], dtype=np.float64)
    rng = np.random.default_rng(0)
    far = {f"u{i:02d}": -x + 0.1 * rng.normal(size=len(x)) for i in range(n_far)}
    return {**encoder, **far}, {**scores, **dict.fromkeys(far, 0.0)}


@pytest.mark.parametrize("weights", ["uniform", "distance"])
# With 4 training queries each model takes its own top-k; with 40 more, one
# neighbor list shared by the models is cheaper.
@pytest.mark.parametrize("n_far, shared", [(0, False), (40, True)])
@pytest.mark.parametrize(
    "case, k, expected",
    [
        # By hand: all four tie at cosine 0; by index the 2 nearest are t1 and
        # t2: (1 + 0.75) / 2 (equal distances: "distance" weighs them alike).
        ("orthogonal", 2, 0.875),
        # t1 and t2 tie; by index the nearest is t1, of score 1.
        ("permuted", 1, 1.0),
    ],
)
def test_ties_go_by_training_index_alone_and_in_a_batch(
    case, k, expected, n_far, shared, weights
):
    encoder, scores = (
        (ORTHOGONAL, ORTHOGONAL_SCORES) if case == "orthogonal" else _permuted_tie()
    )
    encoder, scores = _with_far_queries(encoder, scores, n_far)
    rows = [(m, q, s) for m in ("a", "b", "c") for q, s in scores.items()]
    evals = pd.DataFrame(rows, columns=["model", "query", "score"])
    router = KNNRouter(k=k, encoder=encoder, weights=weights).fit(evals)
    assert len(router._shared_models) == (3 if shared else 0)  # the search meant
    alone = router.predict_proba(["x"])
    batch = router.predict_proba(["x", "x", "x"])
    np.testing.assert_array_equal(alone, np.full((1, 3), expected))
    np.testing.assert_array_equal(batch, np.full((3, 3), expected))


def test_top_k_counts_similarities_within_the_tolerance_as_tied():
    # Column 2 is 1e-15 above columns 1 and 3: within tol, a tie by column.
    similarity = np.array([[0.5, 0.9, 0.9 + 1e-15, 0.9, 0.1]])
    assert _top_k(similarity, 1, tol=1e-14).tolist() == [[1]]
    assert sorted(_top_k(similarity, 2, tol=1e-14)[0].tolist()) == [1, 2]
    # Without tolerance, the larger value wins.
    assert _top_k(similarity, 1).tolist() == [[2]]
    # A gap past tol is no tie.
    assert _top_k(similarity, 1, tol=1e-16).tolist() == [[2]]
