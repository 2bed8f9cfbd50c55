"""The router API shared by LocusRouter and every peer router.

A router is fitted on an ``evals`` table and answers, for each query, the
probability that each model of its pool scores well (``predict_proba``), the
model to route to (``predict``), and how well its routing does on scored
evaluations (``score``).
"""

from collections.abc import Mapping
from numbers import Real

import numpy as np
from sklearn.base import BaseEstimator, _fit_context
from sklearn.utils._param_validation import Interval
from sklearn.utils.validation import check_is_fitted

from ._encoders import as_query_encoder
from ._evals import _preview, check_evals, check_queries
from .metrics._routing import route

__all__ = ["BaseRouter", "check_model_costs", "check_model_subset"]


def check_model_costs(model_costs, classes, *, name="model_costs"):
    """Validate per-model costs and align them with ``classes``.

    Parameters
    ----------
    model_costs : mapping of str to float, pandas Series, array-like of shape (n_models,) or None
        Cost of each model (e.g. USD per query, or billions of parameters). A
        mapping or a Series is read by model name (a Series by its index) and
        must name exactly the models of ``classes``; an array is read in the
        order of ``classes`` (sorted model names).
    classes : ndarray of str, shape (n_models,)

    Returns
    -------
    costs : ndarray of float64, shape (n_models,) or None

    Examples
    --------
    >>> import numpy as np
    >>> check_model_costs({"b": 2.0, "a": 1.0}, np.array(["a", "b"])).tolist()
    [1.0, 2.0]
    """
    import pandas as pd

    if model_costs is None:
        return None
    classes = np.asarray(classes, dtype=object)
    if isinstance(model_costs, pd.Series):
        # A Series names its models in its index; reading it by position would
        # silently give each model another one's cost.
        index = model_costs.index
        not_names = [m for m in index if not isinstance(m, str)]
        if not_names:
            raise ValueError(
                f"{name} is a pandas Series, which is read by its index of model "
                f"names, but {len(not_names)} index label(s) are not model names: "
                f"{_preview(not_names)}. Index it by model name, or pass "
                f"{name}.to_numpy() for costs in sorted model-name order."
            )
        repeated = index[index.duplicated()].unique().tolist()
        if repeated:
            raise ValueError(
                f"{name} is a pandas Series whose index repeats {len(repeated)} "
                f"model name(s): {_preview(repeated)}; give each model one cost."
            )
        model_costs = model_costs.to_dict()
    if isinstance(model_costs, Mapping):
        known = set(classes)
        missing = [m for m in classes if m not in model_costs]
        extra = [m for m in model_costs if m not in known]
        if missing:
            raise ValueError(
                f"{name} has no cost for {len(missing)} model(s) of the pool: "
                f"{_preview(missing)}."
            )
        if extra:
            raise ValueError(
                f"{name} has costs for {len(extra)} model(s) that are not in the "
                f"pool: {_preview(extra)}; pass costs for exactly the pool's models."
            )
        costs = [model_costs[m] for m in classes]
    else:
        costs = model_costs
    # Only real numbers: numpy would turn "1.5" into 1.5, True into 1.0 and
    # drop the imaginary part of a complex number, silently.
    try:
        raw = np.asarray(
            costs, dtype=object if isinstance(costs, (list, tuple)) else None
        )
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must hold numbers; {exc}.") from None
    if raw.dtype == object:
        items = raw.ravel().tolist()
        bad = [
            v
            for v in items
            if not isinstance(v, Real) or isinstance(v, np.bool_ | bool)
        ]
    else:
        bad = [] if raw.dtype.kind in "iuf" else raw.ravel()[:5].tolist()
    if bad:
        raise TypeError(
            f"{name} must hold real numbers; got {len(bad)} value(s) that are "
            f"not (e.g. {_preview(bad[:5])}, dtype {raw.dtype})."
        )
    try:
        costs = raw.astype(np.float64)
    except (TypeError, ValueError, OverflowError) as exc:
        raise TypeError(f"{name} must hold real numbers; {exc}.") from None
    if costs.shape != (len(classes),):
        raise ValueError(
            f"{name} must have one cost per model, shape ({len(classes)},); got "
            f"shape {costs.shape}."
        )
    bad = ~np.isfinite(costs) | (costs < 0)
    if bad.any():
        raise ValueError(
            f"{name} must be finite and >= 0; {int(bad.sum())} cost(s) are not: "
            f"{_preview(dict(zip(classes[bad], costs[bad].tolist(), strict=True)).items())}."
        )
    return costs


def check_model_subset(models, classes, *, name="models"):
    """Boolean mask over ``classes`` for the model names in ``models``.

    Examples
    --------
    >>> import numpy as np
    >>> check_model_subset(["b"], np.array(["a", "b"])).tolist()
    [False, True]
    """
    if isinstance(models, str):
        raise TypeError(
            f"{name} must be a list of model names; got the string {models!r}."
        )
    models = list(models)
    if not models:
        raise ValueError(f"{name} is empty; give at least one model of the pool.")
    position = {m: i for i, m in enumerate(classes)}
    unknown = [m for m in models if m not in position]
    if unknown:
        raise ValueError(
            f"{name} has {len(unknown)} model(s) that are not in the pool: "
            f"{_preview(unknown)}; the pool is {_preview(classes, limit=10)}."
        )
    mask = np.zeros(len(classes), dtype=bool)
    mask[[position[m] for m in models]] = True
    return mask


class BaseRouter(BaseEstimator):
    """Base class of routers: fit on ``evals``, route queries to models.

    Subclasses set ``_parameter_constraints``, implement ``_fit_encoded(table,
    X_query)`` (``X_query`` holds the encodings of ``table.queries``, shape
    (n_queries, n_features)) and ``_predict_proba_encoded(X)`` returning an
    array of shape (n_queries, n_models) of P(correct) per model. They take
    ``encoder``, ``memory`` and ``cost_weight`` parameters.

    Set ``_uses_query_encodings = False`` in a router that ignores the query
    (it then never loads an encoder).
    """

    _parameter_constraints = {
        "cost_weight": [Interval(Real, 0, None, closed="left")],
    }
    _uses_query_encodings = True

    def _encode(self, queries):
        """Encodings of ``queries`` by the fitted encoder, shape (n, n_features)."""
        if not self._uses_query_encodings:
            return np.zeros((len(queries), 0), dtype=np.float32)
        X = self.encoder_.transform(queries)
        if X.shape[1] != self.n_query_features_:
            raise ValueError(
                f"The encoder gives {X.shape[1]}-dimensional query encodings, but "
                f"{type(self).__name__} was fitted on {self.n_query_features_}-"
                "dimensional ones; use the encoder it was fitted with."
            )
        return X

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, evals, y=None, *, model_costs=None):
        """Fit the router on scored evaluations.

        Parameters
        ----------
        evals : DataFrame or mapping of columns
            Long-format evaluations with columns ``model``, ``query``, ``score``
            (see :func:`~locus_sklearn.check_evals`).
        y : None
            Ignored; present for API consistency.
        model_costs : mapping of str to float or array-like of shape (n_models,), default=None
            Cost of each model, used by :meth:`predict` when ``cost_weight > 0``.

        Returns
        -------
        self : object
        """
        table = check_evals(evals)
        costs = check_model_costs(model_costs, table.models)
        encoder = None
        if self._uses_query_encodings:
            encoder = as_query_encoder(
                self.encoder, memory=self.memory, device=getattr(self, "device", None)
            )
            X_query = encoder.transform(table.queries)
        else:
            X_query = np.zeros((table.n_queries, 0), dtype=np.float32)
        self._fit_encoded(table, X_query)
        # Set only once fitting succeeded, so a failed fit leaves no fitted state.
        if encoder is not None:
            self.encoder_ = encoder
            self.n_query_features_ = X_query.shape[1]
        self.classes_ = table.models.copy()
        self.model_costs_ = costs
        return self

    def predict_proba(self, queries):
        """Probability that each model of the pool answers each query correctly.

        Parameters
        ----------
        queries : sequence of str or DataFrame with a ``query`` column

        Returns
        -------
        proba : ndarray of shape (n_queries, n_models)
            Independent P(correct) per model, columns in ``classes_`` order;
            rows do not sum to 1.
        """
        check_is_fitted(self)
        queries = check_queries(queries)
        return self._predict_proba_encoded(self._encode(queries))

    def _utility(self, proba):
        if self.cost_weight == 0:
            return proba
        if self.model_costs_ is None:
            raise ValueError(
                f"cost_weight={self.cost_weight} needs model costs; pass "
                "model_costs= to fit, or set cost_weight=0."
            )
        return proba - self.cost_weight * self.model_costs_

    def predict(self, queries, models=None):
        """Route each query to the model with the largest utility.

        The utility of model m is ``P(correct) - cost_weight * cost_m``.

        Parameters
        ----------
        queries : sequence of str or DataFrame with a ``query`` column
        models : sequence of str, default=None
            Restrict routing to these models of the pool (an outage, a
            portfolio). Defaults to the whole pool.

        Returns
        -------
        routed : ndarray of str, shape (n_queries,)
        """
        check_is_fitted(self)
        available = None
        if models is not None:
            available = check_model_subset(models, self.classes_)
        utility = self._utility(self.predict_proba(queries))
        if available is not None:
            available = np.broadcast_to(available, utility.shape)
        return self.classes_[route(utility, available)]

    def score(self, evals, y=None):
        """Routing accuracy on the queries of ``evals``.

        Each query is routed (cost weight included) among the pool's models
        that have a score for it in ``evals``, and the routed model's score is
        averaged over queries (see :func:`~locus_sklearn.metrics.routing_accuracy`).

        Parameters
        ----------
        evals : DataFrame or mapping of columns
            Scored evaluations of models of the pool.
        y : None
            Ignored.

        Returns
        -------
        accuracy : float
        """
        from .metrics import routing_accuracy

        check_is_fitted(self)
        table = check_evals(evals)
        pool = set(self.classes_)
        unknown = [m for m in table.models if m not in pool]
        if unknown:
            raise ValueError(
                f"evals has {len(unknown)} model(s) that are not in the pool: "
                f"{_preview(unknown)}; score() routes among the fitted models."
            )
        y_true = table.to_dense(self.classes_)
        utility = self._utility(self.predict_proba(table.queries))
        return routing_accuracy(y_true, utility)
