"""Routing and correctness metrics, and scorers for model selection.

Functions take score matrices of shape (n_queries, n_models) with NaN where a
model has no observed score; see :meth:`locus_sklearn._evals.EvalTable.to_dense`
for turning an ``evals`` table into one.
"""

from ._routing import (
    correctness_accuracy,
    correctness_log_loss,
    oracle_accuracy,
    route,
    routing_accuracy,
    single_best_accuracy,
)
from ._scorers import get_router_scorer

__all__ = [
    "correctness_accuracy",
    "correctness_log_loss",
    "get_router_scorer",
    "oracle_accuracy",
    "route",
    "routing_accuracy",
    "single_best_accuracy",
]
