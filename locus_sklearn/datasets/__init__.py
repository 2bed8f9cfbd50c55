"""Evaluation data: built-in real data, synthetic pools, loaders and converters.

- :func:`load_mmlu_pro`: real evaluations of 32 LLMs on 3,000 MMLU-Pro questions,
  shipped with the package, with precomputed query encodings.
- :func:`make_model_pool`: a synthetic pool with known families, task skills and
  true success probabilities.
- :func:`load_evals`: read a long-format table from csv, parquet or jsonl.
- :func:`from_wide`: a queries x models score matrix to a long table.
- :func:`from_lm_eval`: lm-evaluation-harness ``--log_samples`` output to a long
  table.

Every function returns evaluations in the long format that
:func:`locus_sklearn.check_evals` validates: columns ``model``, ``query``,
``score`` and optionally ``task``.
"""

from ._lm_eval import from_lm_eval
from ._loaders import from_wide, load_evals
from ._mmlu_pro import load_mmlu_pro
from ._synthetic import make_model_pool

__all__ = [
    "from_lm_eval",
    "from_wide",
    "load_evals",
    "load_mmlu_pro",
    "make_model_pool",
]
