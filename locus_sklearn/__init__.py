"""LOCUS model embeddings with a scikit-learn API.

Turn each language model's scored evaluations into a low-dimensional embedding,
route queries to the model most likely to answer them, onboard new models without
retraining, compare models and choose portfolios.
"""

from ._accuracy_selector import ExpectedAccuracySelector
from ._embedder import CollapsedEmbeddingWarning, FewEvaluationsWarning, LocusEmbedder
from ._encoders import QueryEncoder, SharedEncodingsWarning
from ._evals import EvalTable, check_evals, check_model_costs, check_queries
from ._router import LocusRouter
from ._selectors import (
    BudgetGreedySelector,
    KCenterSelector,
    KMedoidsSelector,
    budget_greedy_select,
    k_center_select,
    k_medoids_select,
)
from ._version import __version__

__all__ = [
    "BudgetGreedySelector",
    "CollapsedEmbeddingWarning",
    "EvalTable",
    "ExpectedAccuracySelector",
    "FewEvaluationsWarning",
    "KCenterSelector",
    "KMedoidsSelector",
    "LocusEmbedder",
    "LocusRouter",
    "QueryEncoder",
    "SharedEncodingsWarning",
    "__version__",
    "budget_greedy_select",
    "check_evals",
    "check_model_costs",
    "check_queries",
    "k_center_select",
    "k_medoids_select",
]
