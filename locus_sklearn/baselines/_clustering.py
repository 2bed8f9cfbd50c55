"""The K-means router: per-cluster mean score of each model."""

import os
from numbers import Integral, Real

import numpy as np
from sklearn.cluster import KMeans
from sklearn.utils._param_validation import HasMethods, Interval

from .._base import BaseRouter

__all__ = ["KMeansRouter"]


class KMeansRouter(BaseRouter):
    """Route by each model's mean score on the query's K-means cluster.

    The training query encodings are clustered with K-means; a model's
    predicted score on a query is its mean score over its evaluations in the
    query's cluster, shrunk toward the model's overall mean::

        p(m, c) = (sum_{x in c} s(m, x) + prior_strength * mean_m)
                  / (n(m, c) + prior_strength)

    where the sums run over the model's evaluations in cluster ``c``. A
    cluster where the model has no evaluation gets the model's overall mean;
    ``prior_strength=0`` gives the raw per-cluster means.

    Parameters
    ----------
    n_clusters : int, default=20
        Number of K-means clusters of the training queries.
    encoder : None, str, object with ``encode`` or mapping, default=None
        Query encoder (see :class:`~locus_sklearn.QueryEncoder`); None uses
        the bundled all-MiniLM-L6-v2.
    memory : None, str, os.PathLike or joblib.Memory, default=None
        Cache of query encodings across fits and calls, predictions
        included; nothing evicts an entry (see
        :class:`~locus_sklearn.QueryEncoder`).
    cost_weight : float, default=0.0
        Weight of the model costs in :meth:`predict`.
    prior_strength : float, default=1.0
        Pseudo-count of the model's overall mean in each cluster.
    random_state : int, RandomState instance or None, default=None
        Seeds K-means.

    Attributes
    ----------
    classes_ : ndarray of str, shape (n_models,)
        Model names, sorted.
    model_costs_ : ndarray of shape (n_models,) or None
        Costs passed to :meth:`fit`, in ``classes_`` order.
    encoder_ : QueryEncoder
        The fitted query encoder.
    n_query_features_ : int
        Dimension of the query encodings.
    kmeans_ : sklearn.cluster.KMeans
        K-means fitted on the training query encodings.
    cluster_scores_ : ndarray of float64, shape (n_clusters, n_models)
        Predicted score of each model on each cluster.
    cluster_counts_ : ndarray of int64, shape (n_clusters, n_models)
        Number of training evaluations of each model in each cluster.
    mean_scores_ : ndarray of float64, shape (n_models,)
        Overall mean training score of each model.

    Examples
    --------
    >>> from locus_sklearn.baselines import KMeansRouter
    >>> encoder = {"q1": [1.0, 0.0], "q2": [0.9, 0.1], "q3": [0.0, 1.0],
    ...            "q4": [0.1, 0.9]}
    >>> evals = {"model": ["a"] * 4 + ["b"] * 4, "query": ["q1", "q2", "q3", "q4"] * 2,
    ...          "score": [1, 1, 0, 0, 0, 0, 1, 1]}
    >>> router = KMeansRouter(2, encoder=encoder, prior_strength=0,
    ...                       random_state=0).fit(evals)
    >>> router.predict(["q1", "q4"]).tolist()
    ['a', 'b']
    """

    _parameter_constraints = {
        **BaseRouter._parameter_constraints,
        "n_clusters": [Interval(Integral, 1, None, closed="left")],
        "encoder": "no_validation",
        "memory": [None, str, os.PathLike, HasMethods(["cache"])],
        "prior_strength": [Interval(Real, 0, None, closed="left")],
        "random_state": ["random_state"],
    }

    def __init__(
        self,
        n_clusters=20,
        *,
        encoder=None,
        memory=None,
        cost_weight=0.0,
        prior_strength=1.0,
        random_state=None,
    ):
        self.n_clusters = n_clusters
        self.encoder = encoder
        self.memory = memory
        self.cost_weight = cost_weight
        self.prior_strength = prior_strength
        self.random_state = random_state

    def _fit_encoded(self, table, X_query, encoder, model_costs=None):
        if table.n_queries < self.n_clusters:
            raise ValueError(
                f"n_queries={table.n_queries} should be >= "
                f"n_clusters={self.n_clusters}; evals has too few distinct queries "
                "to cluster, lower n_clusters."
            )
        self.kmeans_ = KMeans(
            n_clusters=self.n_clusters, n_init="auto", random_state=self.random_state
        ).fit(X_query)
        shape = (self.n_clusters, table.n_models)
        # One (cluster, model) cell per row; bincount sums scores and counts.
        cell = (
            self.kmeans_.labels_[table.query_index] * table.n_models + table.model_index
        )
        total = np.bincount(cell, weights=table.score, minlength=np.prod(shape))
        counts = np.bincount(cell, minlength=np.prod(shape))
        total, counts = total.reshape(shape), counts.reshape(shape)
        self.mean_scores_ = total.sum(0) / counts.sum(0)
        # A float: numpy would take an int (10**30) into the int64 counts.
        prior = float(self.prior_strength)
        with np.errstate(invalid="ignore", divide="ignore"):
            scores = (total + prior * self.mean_scores_) / (counts + prior)
        self.cluster_scores_ = np.where(counts + prior > 0, scores, self.mean_scores_)
        self.cluster_counts_ = counts.astype(np.int64)

    def _predict_proba_encoded(self, X):
        return self.cluster_scores_[self.kmeans_.predict(X)]
