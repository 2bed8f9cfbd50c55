"""The k-nearest-neighbor router: mean score on the nearest training queries."""

import operator
import os
from numbers import Integral

import numpy as np
import torch
from sklearn.preprocessing import normalize
from sklearn.utils._param_validation import HasMethods, Interval, StrOptions

from .._base import BaseRouter

__all__ = ["KNNRouter"]

# Bound on the (queries, training queries) similarity block held at once.
_BLOCK_ELEMENTS = 2**24

# Cosine distance up to which weights="distance" counts a neighbor as an exact
# match. The encodings are stored as float32 after normalisation: a float64
# cosine of a float32 unit vector with itself is 1 only to about 1.2e-7
# (2 * 2**-24), so a threshold of 0 or 1e-12 would weigh a query's own
# training copy by the rounding of its norm.
_EXACT_MATCH_DISTANCE = 1e-6


def _tie_tolerance(n_features):
    """The gap up to which two similarities count as equal (a tie).

    Similarities are float64 products of float32 unit vectors: each product
    of two entries is exact, and the sum of ``n_features`` of them is off by
    at most ``(n_features - 1) * 2**-53`` in any order of summation. BLAS sums
    in another order for one query than for a batch, so two computations of
    one exact similarity (a tie, such as two training queries orthogonal to
    the query) differ by less than ``n_features * 2**-52``.
    """
    return n_features * 2.0**-52


def _tie_groups(ranked, tol):
    """Tie groups along rows sorted by decreasing similarity.

    ``ranked``: shape (n_rows, n); returns ints of the same shape, the group
    of each entry, counting from 0 along its row: an entry at most ``tol``
    below the one before it joins that one's group.

    >>> _tie_groups(np.array([[0.9, 0.9, 0.5, 0.5 - 1e-16, 0.1]]), 1e-15).tolist()
    [[0, 0, 1, 1, 2]]
    """
    step = ranked[:, :-1] - ranked[:, 1:] > tol
    first = np.zeros((len(ranked), 1), dtype=np.intp)
    return np.concatenate([first, np.cumsum(step, axis=1)], axis=1)


def _top_k(similarity, k, tol=0.0):
    """Columns of the ``k`` largest similarities of each row, ties to the left.

    Equal similarities, and similarities at most ``tol`` apart (a chain of
    such steps), are ranked by column, the lower first: a model's columns
    are its training queries in increasing index (an EvalTable's rows are
    sorted by model, then query), so this is the training query index, the
    order :meth:`KNNRouter._predict_shared` ranks ties by too.

    Parameters
    ----------
    similarity : ndarray of shape (n_queries, n_columns)
        ``n_columns > k``.
    k : int
    tol : float, default=0.0
        See :func:`_tie_tolerance`.

    Returns
    -------
    top : ndarray of int, shape (n_queries, k)
        Columns, in no particular order where a row has no tie at its k-th
        largest similarity, else by decreasing similarity.

    Examples
    --------
    >>> import numpy as np
    >>> _top_k(np.array([[0.5, 0.9, 0.9, 0.9]]), 2).tolist()
    [[1, 2]]
    >>> _top_k(np.array([[0.5, 0.9, 0.9 + 1e-15, 0.9]]), 2, tol=1e-14).tolist()
    [[1, 2]]
    """
    # A NumPy k (np.int8(50)) would compute n_columns - k in its own dtype
    # (NEP 50), which overflows past 127 columns.
    k = operator.index(k)
    n_columns = similarity.shape[1]
    top = np.argpartition(similarity, n_columns - k, axis=1)[:, n_columns - k :]
    # argpartition puts the k-th largest first and picks among equal values
    # arbitrarily: redo the rows where the k-th largest ties a column left out.
    kth = np.take_along_axis(similarity, top[:, :1], axis=1)
    tied = np.flatnonzero((similarity >= kth - tol).sum(axis=1) > k)
    if len(tied):
        order = np.argsort(-similarity[tied], axis=1, kind="stable")
        group = _tie_groups(np.take_along_axis(similarity[tied], order, axis=1), tol)
        by_column = np.lexsort((order, group), axis=-1)
        top[tied] = np.take_along_axis(order, by_column, axis=1)[:, :k]
    return top


def _exact_matches_take_all(weight):
    """Give rows with an exact match (an infinite weight) to those alone.

    Modifies ``weight`` (float, shape (n_queries, n_neighbors), 0 for
    neighbors not counted) in place and returns it: in a row holding an
    infinite weight, exact matches weigh 1 and the other neighbors 0, as
    scikit-learn's ``weights="distance"`` does for a zero distance.

    Examples
    --------
    >>> import numpy as np
    >>> _exact_matches_take_all(np.array([[np.inf, 2.0, np.inf], [1.0, 2.0, 0.0]]))
    array([[1., 0., 1.],
           [1., 2., 0.]])
    """
    exact = np.isinf(weight)
    rows = np.flatnonzero(exact.any(axis=1))
    if len(rows):
        weight[rows] = exact[rows]
    return weight


class KNNRouter(BaseRouter):
    """Route by each model's mean score on its k nearest training queries.

    For each query and each model, the prediction is the model's mean score
    over the ``k`` training queries nearest to the query (cosine similarity
    of L2-normalised encodings) *among the queries that model was evaluated
    on*, so models evaluated on different queries are each judged on their
    own neighbors. A model with fewer than ``k`` evaluations uses all of
    them.

    Parameters
    ----------
    k : int, default=50
        Number of neighbors per model.
    encoder : None, str, object with ``encode`` or mapping, default=None
        Query encoder (see :class:`~locus_sklearn.QueryEncoder`); None uses
        the bundled all-MiniLM-L6-v2.
    memory : None, str, os.PathLike or joblib.Memory, default=None
        Cache of query encodings across fits and calls, predictions
        included; nothing evicts an entry (see
        :class:`~locus_sklearn.QueryEncoder`).
    cost_weight : float, default=0.0
        Weight of the model costs in :meth:`predict`.
    weights : {"uniform", "distance"}, default="uniform"
        "uniform" averages the neighbors' scores; "distance" weights each by
        the inverse of its cosine distance ``1 - cos``. A neighbor within
        cosine distance 1e-6 of the query is an exact match (the float32
        encodings put a query at up to about 1.2e-7 from itself): where a
        model's k neighbors include exact matches, its prediction is its mean
        score on those alone, as scikit-learn's ``KNeighborsRegressor`` with
        ``weights="distance"`` gives a zero distance all the weight.

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
    query_encodings_ : ndarray of float32, shape (n_train_queries, n_features)
        L2-normalised encodings of the training queries.
    n_evals_ : ndarray of int64, shape (n_models,)
        Number of training evaluations of each model.

    Notes
    -----
    The search is brute force and exact. Prediction computes the cosine
    similarities of a block of queries to all distinct training encodings
    once (one matrix product), then: models evaluated on most training
    queries share one list of nearest training queries, long enough that each
    usually finds its ``k`` evaluated ones in it (a query where one does not
    is resolved from that model's own similarities); models evaluated on few
    queries take a top-k over their own columns. :meth:`fit` picks the split
    that minimises the work, from the models' numbers of evaluations.

    Training queries equally similar to a query (duplicated encodings, say)
    are ranked by their position in the sorted training query ids, the first
    one nearest, in both searches: a model's k neighbors, and so its
    prediction, do not depend on the other models of the pool or on ``k``
    having been set before or after :meth:`fit`. Training queries with
    identical encodings get one similarity, computed once, so they tie
    exactly however many queries are predicted at once. The similarities are
    computed in float64 (from the float32 encodings), and two that differ by
    at most ``n_features * 2**-52`` (the most by which float64 rounding can
    part two computations of one similarity) count as equal: a float32
    product, or the order in which BLAS sums, differs between one query and
    a batch, and so would the neighbors chosen among ties and, with
    ``weights="distance"``, the weights and the exact matches.

    Examples
    --------
    >>> from locus_sklearn.baselines import KNNRouter
    >>> encoder = {"q1": [1.0, 0.0], "q2": [0.9, 0.1], "q3": [0.0, 1.0],
    ...            "q4": [0.1, 0.9]}
    >>> evals = {"model": ["a"] * 4 + ["b"] * 4, "query": ["q1", "q2", "q3", "q4"] * 2,
    ...          "score": [1, 1, 0, 0, 0, 1, 1, 1]}
    >>> router = KNNRouter(2, encoder=encoder).fit(evals)
    >>> router.predict_proba(["q1", "q3"])
    array([[1. , 0.5],
           [0. , 1. ]])
    >>> router.predict(["q1", "q3"]).tolist()
    ['a', 'b']
    """

    _parameter_constraints = {
        **BaseRouter._parameter_constraints,
        "k": [Interval(Integral, 1, None, closed="left")],
        "encoder": "no_validation",
        "memory": [None, str, os.PathLike, HasMethods(["cache"])],
        "weights": [StrOptions({"uniform", "distance"})],
    }

    def __init__(
        self, k=50, *, encoder=None, memory=None, cost_weight=0.0, weights="uniform"
    ):
        self.k = k
        self.encoder = encoder
        self.memory = memory
        self.cost_weight = cost_weight
        self.weights = weights

    def _fit_encoded(self, table, X_query, encoder, model_costs=None):
        self.query_encodings_ = normalize(X_query).astype(np.float32)
        # A matrix product may round one column differently from another
        # holding the same values (a single query takes another BLAS path than
        # a batch): similarities are computed once per distinct encoding, so
        # duplicated ones tie exactly and are ranked by training query index.
        _, first, inverse = np.unique(
            self.query_encodings_, axis=0, return_index=True, return_inverse=True
        )
        if len(first) == len(inverse):
            self._distinct_encodings, self._to_distinct = self.query_encodings_, None
        else:
            # In order of first occurrence, as close as may be to the product
            # over all training queries.
            order = np.argsort(first)
            rank = np.empty_like(order)
            rank[order] = np.arange(len(order))
            self._distinct_encodings = self.query_encodings_[first[order]]
            self._to_distinct = rank[inverse.reshape(-1)]
        self.n_evals_ = np.bincount(table.model_index, minlength=table.n_models)
        self._indptr = table.indptr
        self._query_index = table.query_index
        # At float32 precision, as the shared search's matrix holds them: a
        # model's prediction does not depend on which search reads it.
        self._score = table.score.astype(np.float32).astype(np.float64)
        self._n_shared_neighbors, shared = self._plan_search(table.n_queries)
        self._shared_models = np.flatnonzero(shared)
        in_shared = shared[table.model_index]
        column = np.cumsum(shared) - 1
        # (models, queries): each shared model's row is contiguous.
        shape = (len(self._shared_models), table.n_queries)
        self._shared_evaluated = np.zeros(shape, dtype=bool)
        self._shared_scores = np.zeros(shape, dtype=np.float32)
        rows = (column[table.model_index[in_shared]], table.query_index[in_shared])
        self._shared_evaluated[rows] = True
        self._shared_scores[rows] = table.score[in_shared]

    def _plan_search(self, n_queries):
        """Number of shared neighbors and mask of the models that use them.

        A shared list of n neighbors costs about n per model and query; a
        model's own top-k costs its number of evaluations. Sharing is tried
        for the models of largest coverage first.
        """
        n_evals = self.n_evals_
        order = np.argsort(-n_evals, kind="stable")
        own_cost = np.where(n_evals <= self.k, 0, n_evals)[order]
        rest = np.concatenate([np.cumsum(own_cost[::-1])[::-1], [0]])
        best = (rest[0], 0, 0)  # (cost, n_shared_models, n_neighbors)
        for i in range(1, len(order) + 1):
            n_min = n_evals[order[i - 1]]
            if n_min <= self.k:
                break
            # About 1.5 k of the sparsest shared model's queries are expected
            # among this many nearest training queries.
            n_neighbors = min(
                n_queries, int(np.ceil(1.5 * self.k * n_queries / n_min)) + 10
            )
            cost = i * n_neighbors + rest[i]
            if cost < best[0]:
                best = (cost, i, n_neighbors)
        shared = np.zeros(len(n_evals), dtype=bool)
        shared[order[: best[1]]] = True
        return best[2], shared

    def _weights(self, similarity):
        """Neighbor weights, None for uniform ones.

        For "distance", the inverse cosine distance, infinite for an exact
        match (see :func:`_exact_matches_take_all`).
        """
        if self.weights == "uniform":
            return None
        distance = 1.0 - similarity
        exact = distance <= _EXACT_MATCH_DISTANCE
        with np.errstate(divide="ignore"):
            weight = 1.0 / np.where(exact, 0.0, distance)
        return weight

    def _predict_one_model(self, m, similarity):
        """Prediction of model ``m`` from similarities to all training queries.

        similarity : ndarray of shape (n_queries, n_train_queries)
        Returns an ndarray of shape (n_queries,).
        """
        queries = self._query_index[self._indptr[m] : self._indptr[m + 1]]
        scores = self._score[self._indptr[m] : self._indptr[m + 1]]
        if len(queries) <= self.k and self.weights == "uniform":
            return np.full(len(similarity), scores.mean())
        similarity = similarity[:, queries]
        if len(queries) > self.k:
            top = _top_k(similarity, self.k, _tie_tolerance(self.n_query_features_))
            similarity = np.take_along_axis(similarity, top, axis=1)
            scores = scores[top]
        weight = self._weights(similarity)
        if weight is None:
            return np.broadcast_to(scores, similarity.shape).mean(1)
        weight = _exact_matches_take_all(weight)
        return (weight * scores).sum(1) / weight.sum(1)

    def _predict_shared(self, similarity, proba):
        """Fill ``proba``'s shared-model columns from one similarity block."""
        n_neighbors = self._n_shared_neighbors
        similarity_t = torch.from_numpy(similarity)
        # One neighbor more than the list holds shows whether the list ends
        # inside a group of equal similarities.
        n_take = min(n_neighbors + 1, similarity.shape[1])
        nearest, neighbor = torch.topk(similarity_t, n_take, dim=1, sorted=True)
        nearest, neighbor = nearest.numpy(), neighbor.numpy()
        tol = _tie_tolerance(self.n_query_features_)
        cut = None
        if n_take > n_neighbors:
            cut = nearest[:, n_neighbors - 1] - nearest[:, n_neighbors] <= tol
            nearest, neighbor = nearest[:, :n_neighbors], neighbor[:, :n_neighbors]
        # topk orders equal similarities arbitrarily: rank them by training
        # query index, as _top_k does, so that both searches pick the same
        # neighbors (rows without ties keep topk's order).
        group = _tie_groups(nearest, tol)
        tied = np.flatnonzero(group[:, -1] < n_neighbors - 1)
        if len(tied):
            order = np.lexsort((neighbor[tied], group[tied]), axis=-1)
            nearest[tied] = np.take_along_axis(nearest[tied], order, axis=1)
            neighbor[tied] = np.take_along_axis(neighbor[tied], order, axis=1)
        cut_tie = None
        if cut is not None and cut.any():
            # Where the list ends inside a group of equal similarities, topk
            # kept an arbitrary part of it, which need not hold its lowest
            # training query indices: that group is not read from the list,
            # and a model that needs it is resolved from its own similarities
            # (a miss, below).
            cut_tie = cut[:, None] & (group == group[:, -1:])
        weight = self._weights(nearest)
        has_exact = weight is not None and np.isinf(weight).any()
        rank_dtype = np.int16 if n_neighbors < np.iinfo(np.int16).max else np.int64
        # k may have been raised by set_params since fit planned the list: a
        # rank never exceeds the list's length, and comparing it with a k past
        # its dtype's range would overflow.
        k = min(self.k, n_neighbors)
        for j, m in enumerate(self._shared_models):
            # Neighbors are sorted by similarity: the model's k nearest
            # evaluated queries are its first k evaluated ones in the list.
            evaluated = self._shared_evaluated[j][neighbor]
            if cut_tie is not None:
                evaluated &= ~cut_tie
            rank = np.cumsum(evaluated, axis=1, dtype=rank_dtype)
            selected = evaluated & (rank <= k)
            scores = self._shared_scores[j][neighbor]
            if weight is None:
                # In float64, as _predict_one_model's mean (the float32 scores
                # are exact in it): a model's prediction does not depend on
                # which search the pool gave it, and equal means tie exactly.
                total = (scores * selected).sum(1, dtype=np.float64)
                count = np.minimum(rank[:, -1], k)
            else:
                # np.where, not a product: an exact match's infinite weight
                # times a neighbor left out would be NaN.
                selected = np.where(selected, weight, 0.0)
                if has_exact:
                    selected = _exact_matches_take_all(selected)
                total = (scores * selected).sum(1)
                count = selected.sum(1)
            with np.errstate(invalid="ignore", divide="ignore"):
                proba[:, m] = total / count
            missed = np.flatnonzero(rank[:, -1] < self.k)
            if len(missed):
                proba[missed, m] = self._predict_one_model(m, similarity[missed])

    def _predict_proba_encoded(self, X):
        X = normalize(X).astype(np.float32)
        # A float32 product rounds by the BLAS path (one query or a batch): a
        # cosine of 1 to 1 or to 1 - 6e-8, which changed the inverse distances
        # by orders of magnitude, and an exact 0 to +-1e-8, which broke ties
        # by that rounding instead of by training query index. In float64,
        # from the float32 values, the rounding is below _tie_tolerance.
        X = X.astype(np.float64)
        distinct = self._distinct_encodings.astype(np.float64)
        # The fitted pool's columns, not classes_ (see BaseRouter.remove_models).
        n_models = len(self.n_evals_)
        proba = np.empty((len(X), n_models), dtype=np.float64)
        own = np.setdiff1d(np.arange(n_models), self._shared_models)
        chunk = max(1, _BLOCK_ELEMENTS // len(self.query_encodings_))
        for start in range(0, len(X), chunk):
            block = slice(start, start + chunk)
            similarity = X[block] @ distinct.T
            if self._to_distinct is not None:
                similarity = np.take(similarity, self._to_distinct, axis=1)
            if len(self._shared_models):
                self._predict_shared(similarity, proba[block])
            for m in own:
                proba[block, m] = self._predict_one_model(m, similarity)
        # Weighted means of scores in [0, 1]; clip float rounding.
        return np.clip(proba, 0.0, 1.0, out=proba)
