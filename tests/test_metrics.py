"""Routing and correctness metrics on hand-computed cases, and router scorers."""

import numpy as np
import pytest

from locus_sklearn.metrics import (
    correctness_accuracy,
    correctness_log_loss,
    get_router_scorer,
    oracle_accuracy,
    route,
    routing_accuracy,
    single_best_accuracy,
)

NAN = np.nan
Y = np.array([[1.0, 0.0, 1.0], [0.0, 0.0, 1.0], [0.0, 1.0, NAN], [0.5, 0.0, 0.0]])


def test_route_ties_and_availability():
    assert route([[0.5, 0.5, 0.1]]).tolist() == [0]
    assert route([[0.9, 0.5, 0.1]], [[False, True, True]]).tolist() == [1]


def test_routing_accuracy_hand_computed():
    scores = np.array(
        [[0.9, 0.1, 0.0], [0.9, 0.1, 0.0], [0.1, 0.1, 0.9], [0.2, 0.9, 0.1]]
    )
    # Routed: 0 (1.0), 0 (0.0), 2 is missing for query 3 -> best observed is 0 or 1
    # (0.1 each, tie -> model 0: 0.0), 1 (0.0).
    assert routing_accuracy(Y, scores) == pytest.approx((1 + 0 + 0 + 0) / 4)
    assert routing_accuracy(Y, np.nan_to_num(Y, nan=-1)) == pytest.approx(3.5 / 4)


def test_oracle_and_single_best():
    assert oracle_accuracy(Y) == pytest.approx((1 + 1 + 1 + 0.5) / 4)
    # Means: model 0 = 1.5/4, model 1 = 1/4, model 2 = 2/3 -> model 2, over its 3 rows.
    assert single_best_accuracy(Y) == pytest.approx(2 / 3)
    assert single_best_accuracy(Y, model=1) == pytest.approx(0.25)
    with pytest.raises(ValueError, match="model=3 is not a column"):
        single_best_accuracy(Y, model=3)


def test_correctness_accuracy_and_log_loss():
    scores = np.full(Y.shape, 0.6)
    # Observed cells: 11. Predicted "correct" everywhere; true >= .5 in 5 cells.
    assert correctness_accuracy(Y, scores) == pytest.approx(5 / 11)
    assert correctness_log_loss([[1.0, 0.0]], [[0.5, 0.5]]) == pytest.approx(np.log(2))
    assert correctness_log_loss([[1.0]], [[1.0]]) < 1e-6


def test_metric_input_errors():
    with pytest.raises(ValueError, match="no observed score"):
        oracle_accuracy([[NAN, NAN]])
    with pytest.raises(ValueError, match="shape"):
        routing_accuracy(Y, np.zeros((4, 2)))
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        oracle_accuracy([[2.0]])
    with pytest.raises(ValueError, match="probabilities"):
        correctness_log_loss([[1.0]], [[1.5]])


def test_get_router_scorer():
    assert callable(get_router_scorer("neg_log_loss"))
    with pytest.raises(ValueError, match="Unknown router scorer 'acc'; valid names"):
        get_router_scorer("acc")
