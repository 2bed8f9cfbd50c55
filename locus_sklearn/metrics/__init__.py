"""Routing and correctness metrics, and scorers for model selection.

Functions take score matrices of shape (n_queries, n_models) with NaN where a
model has no observed score; see :meth:`locus_sklearn._evals.EvalTable.to_dense`
for turning an ``evals`` table into one.

The embedding-space metrics
:func:`~locus_sklearn.inspection.distance_disagreement_correlation`,
:func:`~locus_sklearn.inspection.neighbor_agreement`,
:func:`~locus_sklearn.inspection.fallback_routing_accuracy` and
:func:`~locus_sklearn.inspection.cost_quality_curve` are defined in
:mod:`locus_sklearn.inspection` and can be imported from here as well (the same
functions).
"""

import importlib
from typing import TYPE_CHECKING

from ._routing import (
    correctness_accuracy,
    correctness_log_loss,
    oracle_accuracy,
    route,
    routing_accuracy,
    single_best_accuracy,
)
from ._scorers import get_router_scorer

# Names defined in locus_sklearn.inspection, loaded on first use (PEP 562):
# inspection imports route from this package, so importing it here while this
# package initialises would be circular when inspection is imported first.
_FROM_INSPECTION = (
    "cost_quality_curve",
    "distance_disagreement_correlation",
    "fallback_routing_accuracy",
    "neighbor_agreement",
)

__all__ = [
    "correctness_accuracy",
    "correctness_log_loss",
    "cost_quality_curve",
    "distance_disagreement_correlation",
    "fallback_routing_accuracy",
    "get_router_scorer",
    "neighbor_agreement",
    "oracle_accuracy",
    "route",
    "routing_accuracy",
    "single_best_accuracy",
]


def __getattr__(name):
    if name not in _FROM_INSPECTION:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module("..inspection", __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__():
    return sorted({*globals(), *_FROM_INSPECTION})


if TYPE_CHECKING:  # what static tools and IDEs see
    from ..inspection import (
        cost_quality_curve,
        distance_disagreement_correlation,
        fallback_routing_accuracy,
        neighbor_agreement,
    )
