"""Inspect a pool through its model embeddings: neighbors, families, portfolios.

- Neighbors: :func:`nearest_models`, :func:`fallback_order`,
  :func:`fallback_routing_accuracy`.
- Geometry: :func:`distance_disagreement_correlation`,
  :func:`neighbor_agreement`, :func:`model_linkage`,
  :func:`embedding_dimensionality`.
- Fingerprints: :func:`calibrate_fingerprint_threshold`, :func:`match_models`;
  on shared queries, :func:`score_disagreement`,
  :func:`calibrate_score_threshold`, :func:`match_models_by_scores`.
- Capability profiles: :func:`task_profiles`, :func:`embed_profile`,
  :func:`profile_recall_at_k`.
- Portfolios: :func:`portfolio_curve`.
- The cost knob: :func:`cost_quality_curve`, :func:`calibrate_cost_weight`.
- Plots (need matplotlib): :func:`plot_model_dendrogram`,
  :func:`plot_model_map`, :func:`plot_portfolio_curve`.

Functions that take ``embeddings`` accept a fitted router (its
``model_embeddings_`` and ``classes_``), a DataFrame indexed by model name (as
``LocusEmbedder.set_output(transform="pandas").transform`` returns it), or an
array of shape (n_models, d) with optional ``names``.
"""

from ._cost import calibrate_cost_weight, cost_quality_curve
from ._fingerprint import calibrate_fingerprint_threshold, match_models
from ._geometry import (
    distance_disagreement_correlation,
    embedding_dimensionality,
    model_linkage,
    neighbor_agreement,
)
from ._neighbors import fallback_order, fallback_routing_accuracy, nearest_models
from ._plotting import plot_model_dendrogram, plot_model_map, plot_portfolio_curve
from ._portfolio import portfolio_curve
from ._profiles import embed_profile, profile_recall_at_k, task_profiles
from ._score_agreement import (
    calibrate_score_threshold,
    match_models_by_scores,
    score_disagreement,
)

__all__ = [
    "calibrate_cost_weight",
    "calibrate_fingerprint_threshold",
    "calibrate_score_threshold",
    "cost_quality_curve",
    "distance_disagreement_correlation",
    "embed_profile",
    "embedding_dimensionality",
    "fallback_order",
    "fallback_routing_accuracy",
    "match_models",
    "match_models_by_scores",
    "model_linkage",
    "nearest_models",
    "neighbor_agreement",
    "plot_model_dendrogram",
    "plot_model_map",
    "plot_portfolio_curve",
    "portfolio_curve",
    "profile_recall_at_k",
    "score_disagreement",
    "task_profiles",
]
