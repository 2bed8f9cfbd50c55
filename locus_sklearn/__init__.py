"""LOCUS model embeddings with a scikit-learn API.

Turn each language model's scored evaluations into a low-dimensional embedding,
route queries to the model most likely to answer them, onboard new models without
retraining, compare models and choose portfolios.
"""

# The public names load on first use (PEP 562), so that importing a submodule
# -- the ``locus`` command's entry point above all -- does not wait for torch
# and scikit-learn: the command answers ``--help`` without them, and a Ctrl-C
# while they load reaches its handler instead of printing a traceback.
import importlib
from typing import TYPE_CHECKING

from ._version import __version__

# public name -> the submodule that defines it
_PUBLIC = {
    "BudgetGreedySelector": "._selectors",
    "CollapsedEmbeddingWarning": "._embedder",
    "EvalTable": "._evals",
    "ExpectedAccuracySelector": "._accuracy_selector",
    "FewEvaluationsWarning": "._embedder",
    "KCenterSelector": "._selectors",
    "KMedoidsSelector": "._selectors",
    "LocusEmbedder": "._embedder",
    "LocusRouter": "._router",
    "QueryEncoder": "._encoders",
    "SharedEncodingsWarning": "._encoders",
    "budget_greedy_select": "._selectors",
    "check_evals": "._evals",
    "check_model_costs": "._evals",
    "check_queries": "._evals",
    "k_center_select": "._selectors",
    "k_medoids_select": "._selectors",
}

__all__ = [  # the keys of _PUBLIC and __version__ (tests/test_common.py checks)
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


def __getattr__(name):
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__():
    return sorted({*globals(), *_PUBLIC})


if TYPE_CHECKING:  # what static tools and IDEs see
    from ._accuracy_selector import ExpectedAccuracySelector
    from ._embedder import (
        CollapsedEmbeddingWarning,
        FewEvaluationsWarning,
        LocusEmbedder,
    )
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
