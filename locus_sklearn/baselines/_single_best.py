"""The single-best-model router: every query goes to the best model on average."""

import numpy as np

from .._base import BaseRouter

__all__ = ["SingleBestRouter"]


class SingleBestRouter(BaseRouter):
    """Route every query to the model with the best mean training score.

    ``predict_proba`` gives each model its mean score over its training
    evaluations, the same for every query, so :meth:`predict` always picks
    the best-mean model (or, with ``cost_weight > 0``, the best trade-off of
    mean score and cost). Queries are never encoded. A model's mean is taken
    over whichever queries it was evaluated on, so with models evaluated on
    different queries the means are not directly comparable.

    Parameters
    ----------
    cost_weight : float, default=0.0
        Weight of the model costs in :meth:`predict` (utility
        ``mean score - cost_weight * cost``).

    Attributes
    ----------
    classes_ : ndarray of str, shape (n_models,)
        Model names, sorted.
    model_costs_ : ndarray of shape (n_models,) or None
        Costs passed to :meth:`fit`, in ``classes_`` order.
    mean_scores_ : ndarray of float64, shape (n_models,)
        Mean training score of each model.
    n_evals_ : ndarray of int64, shape (n_models,)
        Number of training evaluations of each model.

    Examples
    --------
    >>> from locus_sklearn.baselines import SingleBestRouter
    >>> evals = {"model": ["a", "a", "b", "b"], "query": ["q1", "q2", "q1", "q2"],
    ...          "score": [1.0, 0.0, 1.0, 1.0]}
    >>> router = SingleBestRouter().fit(evals)
    >>> router.mean_scores_.tolist()
    [0.5, 1.0]
    >>> router.predict(["any query", "another"]).tolist()
    ['b', 'b']
    """

    _uses_query_encodings = False

    def __init__(self, *, cost_weight=0.0):
        self.cost_weight = cost_weight

    def _fit_encoded(self, table, X_query, encoder, model_costs=None):
        self.n_evals_ = np.bincount(table.model_index, minlength=table.n_models)
        total = np.bincount(
            table.model_index, weights=table.score, minlength=table.n_models
        )
        self.mean_scores_ = total / self.n_evals_

    def _predict_proba_encoded(self, X):
        return np.tile(self.mean_scores_, (len(X), 1))
