"""The router API shared by LocusRouter and every peer router.

A router is fitted on an ``evals`` table and answers, for each query, the
probability that each model of its pool scores well (``predict_proba``), the
model to route to (``predict``), and how well its routing does on scored
evaluations (``score``).
"""

import unicodedata
from collections import Counter
from collections.abc import Mapping
from numbers import Real

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator, _fit_context
from sklearn.utils import metadata_routing
from sklearn.utils._param_validation import (
    Interval,
    InvalidParameterError,
    make_constraint,
)
from sklearn.utils.validation import _num_samples, check_is_fitted

from ._encoders import (
    as_query_encoder,
    encode_as_fitted,
    encode_queries,
    warn_shared_encodings,
)
from ._evals import (
    _as_frame,
    _is_arrow_array,
    _is_missing,
    _preview,
    check_evals,
    check_model_costs,
    check_queries,
    frame_column,
)
from ._params import NoBoolNumbersMixin, short_int, unrepresentable_int
from ._repr import SummaryReprMixin
from .metrics._routing import route

__all__ = [
    "BaseRouter",
    "check_cost_weight",
    "check_model_subset",
    "route_by_utility",
    "routing_utility",
]


def _check_ignored_y(y, evals):
    """Refuse a ``y`` that is not None nor one entry per row of ``evals``.

    Routers ignore y, but ignoring costs passed positionally would silently
    fit without them: only what a meta-estimator passes on (a y given with
    ``evals``, split with its rows) is let through. A pandas Series is such
    a y where it is a column of ``evals`` (``cross_val_score(router, df,
    df["score"])``): where ``evals`` is a DataFrame, its index must be
    ``evals``' index, which a split keeps for both; a costs Series is
    indexed by model names.
    """
    if y is None:
        return
    frame = _as_frame(evals, "evals")
    n_rows = len(frame)
    if isinstance(y, Mapping | str):
        got = f"y of type {type(y).__name__}"
    else:
        try:
            n_y = _num_samples(y)
        except TypeError:
            got = f"y of type {type(y).__name__}"
        else:
            if n_y != n_rows:
                got = f"y of type {type(y).__name__} with {n_y} entries"
            elif (
                isinstance(y, pd.Series)
                and isinstance(evals, pd.DataFrame)
                and not y.index.equals(frame.index)
            ):
                got = (
                    f"y of type Series with {n_y} entries whose index is not "
                    "evals' index"
                )
            else:
                return
    raise TypeError(
        f"routers take no y; pass costs as model_costs=: fit(evals, "
        f"model_costs=...). Got {got}; y is ignored and may only be None or, as "
        f"a meta-estimator passes it, one entry per row of evals ({n_rows})."
    )


def _normal_form_hint(unknown, pool):
    """A sentence for an error about names of ``unknown`` that are not in
    ``pool``: the names of the pool that are the same text in another
    Unicode normal form, or "" if there are none.

    Names are matched exactly, so "café" typed with "é" (NFC) is not "café"
    written with "e" and a combining accent (NFD, as macOS file names and
    some exports give it); the two print alike, so the names are shown with
    :func:`ascii`, which tells them apart.

    Examples
    --------
    >>> print(_normal_form_hint(["caf\\u00e9"], ["cafe\\u0301", "llama"]))
    ... # doctest: +NORMALIZE_WHITESPACE
    Did you mean 'cafe\\u0301' (not 'caf\\xe9')? It is the same text in
    another Unicode normal form; names are matched exactly.
    >>> _normal_form_hint(["gpt-5"], ["gpt-4"])
    ''
    """
    canonical = {}
    for known in pool:
        if isinstance(known, str):
            canonical.setdefault(unicodedata.normalize("NFC", known), []).append(known)
    pairs = [
        (known, given)
        for given in unknown
        if isinstance(given, str)
        for known in canonical.get(unicodedata.normalize("NFC", given), [])
    ]
    if not pairs:
        return ""
    shown = ", ".join(
        f"{ascii(known)} (not {ascii(given)})" for known, given in pairs[:5]
    )
    more = ", ..." if len(pairs) > 5 else ""
    each = "It is" if len(pairs) == 1 else "Each is"
    return (
        f" Did you mean {shown}{more}? {each} the same text in another Unicode "
        "normal form; names are matched exactly."
    )


def check_model_subset(models, classes, *, name="models"):
    """Boolean mask over ``classes`` for the model names in ``models``.

    Parameters
    ----------
    models : iterable of str, pyarrow array, or DataFrame with a ``model`` column
        Model names (a list, 1-D array, set, pyarrow Array or ChunkedArray,
        ...), each once; a DataFrame gives its ``model`` column, as
        :func:`~locus_sklearn.check_queries` takes a DataFrame's ``query``
        column.
    classes : ndarray of str, shape (n_models,)
    name : str, default="models"
        The parameter, as error messages name it.

    Returns
    -------
    mask : ndarray of bool, shape (n_models,)

    Raises
    ------
    TypeError
        If ``models`` is a string, a mapping, not iterable, or holds an entry
        that is not a str (a nested list, the row of a 2-D array, a number, a
        missing value).
    ValueError
        If ``models`` is empty, repeats a model or names one not in
        ``classes``, or is a DataFrame without one ``model`` column.

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
    if isinstance(models, Mapping):
        # Iterating would give the keys and drop the values, which may be the
        # point ({"a": False, "b": True} would allow "a").
        raise TypeError(
            f"{name} must be a list of model names; got a {type(models).__name__} "
            f"of {len(models)} entries, whose values would be ignored. Pass "
            "list(d) for its keys, or [m for m, ok in d.items() if ok] for the "
            "models it marks True."
        )
    if isinstance(models, pd.DataFrame):
        # Iterating a DataFrame gives its column labels ('model', ...), which
        # were then reported as unknown models.
        models = frame_column(models, "model", name, "model names")
    try:
        # NumPy and list() would give a pyarrow array's Arrow scalars, which
        # are not str.
        models = models.to_pylist() if _is_arrow_array(models) else list(models)
    except TypeError:
        raise TypeError(
            f"{name} must be a list of model names; got {models!r} of type "
            f"{type(models).__name__}, which is not iterable."
        ) from None
    if not models:
        raise ValueError(f"{name} is empty; give at least one model of the pool.")
    not_names = [m for m in models if not isinstance(m, str)]
    if not_names:
        # Missing names (None, NaN, pd.NA) get their own remedy, as in
        # check_queries: the hint on nested lists does not fit them.
        n_missing = sum(map(_is_missing, not_names))
        others = [m for m in not_names if not _is_missing(m)]
        if not others:
            raise TypeError(
                f"{name} must hold model names (str); {n_missing} of "
                f"{len(models)} entries are missing values: drop or fill those "
                "entries."
            )
        missing = (
            f" ({n_missing} missing value(s): drop or fill those entries)"
            if n_missing
            else ""
        )
        # A number is no row of a 2-D array: most likely a name read as a
        # number (a csv's model ids '0', '1', ...), which the pool holds as str.
        numbers = [
            m
            for m in others
            if isinstance(m, Real | np.number) and not isinstance(m, bool | np.bool_)
        ]
        pool = set(classes)
        named = list(dict.fromkeys(str(m) for m in numbers if str(m) in pool))
        hint = ""
        if named:
            shown = repr(named[0]) if len(named) == 1 else _preview(named)
            hint += f" Model names are strings: pass {shown}."
        if not named or len(numbers) < len(others):
            hint += " A nested list or a 2-D array gives one entry per row: flatten it."
        raise TypeError(
            f"{name} must be a one-dimensional list of model names (str); "
            f"{len(others)} of {len(models)} entries are not: "
            f"{_preview(others)}{missing}.{hint}"
        )
    position = {m: i for i, m in enumerate(classes)}
    unknown = [m for m in models if m not in position]
    if unknown:
        raise ValueError(
            f"{name} has {len(unknown)} model(s) that are not in the pool: "
            f"{_preview(unknown)}; the pool is {_preview(classes, limit=10)}."
            + _normal_form_hint(unknown, classes)
        )
    counts = Counter(models)
    repeated = [m for m, n in counts.items() if n > 1]
    if repeated:  # a list built wrong, not a subset: say so rather than collapse it
        raise ValueError(
            f"{name} repeats {len(repeated)} model(s): {_preview(repeated)}; give "
            "each model once."
        )
    mask = np.zeros(len(classes), dtype=bool)
    mask[[position[m] for m in models]] = True
    return mask


def check_cost_weight(cost_weight, *, name="cost_weight"):
    """Validate the cost weight λ where it is used (it can change after fit).

    Examples
    --------
    >>> check_cost_weight(0.5)
    0.5
    """
    if isinstance(cost_weight, bool) or not isinstance(cost_weight, Real):
        raise TypeError(
            f"{name} must be a real number >= 0; got {cost_weight!r} of type "
            f"{type(cost_weight).__name__}."
        )
    try:
        cost_weight = float(cost_weight)
    except OverflowError:  # an int past the float range: 10**400
        raise ValueError(
            f"{name} must be finite and >= 0; got {short_int(cost_weight)}, "
            f"{unrepresentable_int(cost_weight, integral=False)}."
        ) from None
    if not np.isfinite(cost_weight) or cost_weight < 0:
        raise ValueError(f"{name} must be finite and >= 0; got {cost_weight}.")
    return cost_weight


def _check_costs_for_weight(cost_weight, model_costs):
    """The validated ``cost_weight``; a positive one needs ``model_costs``."""
    cost_weight = check_cost_weight(cost_weight)
    if cost_weight > 0 and model_costs is None:
        raise ValueError(
            f"cost_weight={cost_weight} needs model costs; pass model_costs= to "
            "fit, or set cost_weight=0."
        )
    return cost_weight


def routing_utility(proba, model_costs, cost_weight):
    """What routing maximises: ``P(correct) - cost_weight * cost``.

    The one place the utility is computed (routers, inspection, calibration,
    the CLI and the routing service all use it).

    Parameters
    ----------
    proba : ndarray of shape (n_queries, n_models)
    model_costs : ndarray of shape (n_models,) or None
    cost_weight : float
        Checked here, since it can change after fit.

    Returns
    -------
    utility : ndarray of float64, shape (n_queries, n_models)
        float64 whatever the weight and ``proba``'s dtype (LocusRouter's
        P(correct) is float32): at 0, ``proba`` itself in float64.

    Examples
    --------
    >>> import numpy as np
    >>> routing_utility(np.array([[0.9, 0.8]]), np.array([1.0, 0.0]), 0.2)
    array([[0.7, 0.8]])
    >>> routing_utility(np.array([[0.5, 0.25]], dtype=np.float32), None, 0.0).dtype
    dtype('float64')
    """
    cost_weight = _check_costs_for_weight(cost_weight, model_costs)
    # One dtype at every weight: a float32 proba was returned as it was at 0
    # and upcast by the float64 costs above 0, so utilities compared or
    # stacked across a cost sweep changed dtype with the weight's value.
    # float32 values are exact in float64, so routing is unchanged.
    proba = np.asarray(proba, dtype=np.float64)
    if cost_weight == 0:
        return proba
    # A huge weight may overflow to -inf; route_by_utility() resolves such a
    # row by cost, and route() still picks an allowed model.
    with np.errstate(over="ignore"):
        return proba - cost_weight * model_costs


def route_by_utility(proba, model_costs, cost_weight, available=None):
    """Model routed to for each query: the largest ``P - cost_weight * cost``.

    The utilities are :func:`routing_utility`'s and are routed by
    :func:`~locus_sklearn.metrics.route`, except in a row where every
    available utility overflowed to -inf (a huge ``cost_weight``): there the
    query goes to the cheapest available model, ties to the larger P, then
    to the first. That is the model with the largest exact utility: two
    different float costs differ by at least one part in 2**53, which
    ``cost_weight`` times a cost past the float range multiplies to far more
    than the at most 1 by which the P differ.

    Parameters
    ----------
    proba : ndarray of shape (n_queries, n_models)
        P(correct), finite.
    model_costs : ndarray of shape (n_models,) or None
        Finite costs >= 0.
    cost_weight : float
    available : ndarray of bool, shape (n_queries, n_models) or (n_models,), default=None
        Models a query may be routed to; None allows every model.

    Returns
    -------
    routed : ndarray of int64, shape (n_queries,)
        Column of the routed model; ties go to the lowest column, as in
        :func:`~locus_sklearn.metrics.route`.

    Examples
    --------
    >>> import numpy as np
    >>> proba, costs = np.array([[1.0, 0.5, 0.0]]), np.array([5.0, 2.0, 9.0])
    >>> route_by_utility(proba, costs, 0.01).tolist()
    [0]
    >>> routing_utility(proba, costs, 1e308)
    array([[-inf, -inf, -inf]])
    >>> route_by_utility(proba, costs, 1e308).tolist()  # the cheapest
    [1]
    """
    cost_weight = _check_costs_for_weight(cost_weight, model_costs)
    utility = routing_utility(proba, model_costs, cost_weight)
    routed = route(utility, available)
    if cost_weight == 0:
        return routed
    # route() has chosen an allowed model; a -inf utility there means that
    # every allowed one overflowed (P is finite and the costs are, so -inf
    # comes only from cost_weight * cost).
    stuck = np.flatnonzero(utility[np.arange(len(routed)), routed] == -np.inf)
    if len(stuck):
        candidates = utility[stuck] == -np.inf
        if available is not None:
            candidates &= np.broadcast_to(available, utility.shape)[stuck]
        cost = np.where(candidates, model_costs, np.inf)
        # lexsort is stable: full ties keep the lowest column.
        order = np.lexsort((-np.asarray(proba)[stuck], cost), axis=-1)
        routed[stuck] = order[:, 0]
    return routed


def observed_scores(router, evals, reason):
    """``(table, y_true)``: ``evals`` checked and its scores as a dense
    (n_queries, n_models) matrix in ``router.classes_`` order (NaN where a
    model has no score), refused where ``router`` is not fitted or ``evals``
    has models outside its pool (``reason``, for the message, says why the
    fitted models only). Shared by :meth:`BaseRouter.score` and the
    scorers of :mod:`locus_sklearn.metrics`, so that both fail alike."""
    # Before classes_ is read: an unfitted router raised AttributeError.
    check_is_fitted(router)
    table = check_evals(evals)
    pool = set(router.classes_)
    unknown = [m for m in table.models if m not in pool]
    if unknown:
        raise ValueError(
            f"evals has {len(unknown)} model(s) that are not in the pool: "
            f"{_preview(unknown)}; {reason}."
            + _normal_form_hint(unknown, router.classes_)
        )
    return table, table.to_dense(router.classes_)


class BaseRouter(SummaryReprMixin, NoBoolNumbersMixin, BaseEstimator):
    """Base class of routers: fit on ``evals``, route queries to models.

    Subclasses set ``_parameter_constraints`` and implement two hooks:
    ``_fit_encoded(table, X_query, encoder, model_costs=None)`` (``table`` a
    validated :class:`~locus_sklearn.EvalTable`, ``X_query`` the encodings
    of ``table.queries`` by the fitted query encoder ``encoder``, shape
    (n_queries, n_features), ``model_costs`` the validated costs in
    ``table.models`` order or None; most routers ignore them), returning a
    dict of the fitted attributes it computed (set by ``fit`` together with
    ``classes_``, once nothing can fail; a hook whose fitting can still fail
    after its first result, as LocusRouter's can, must return them rather
    than set them) or None where it set them itself, and
    ``_predict_proba_encoded(X)`` returning an array of shape (n_queries,
    n_models) of P(correct) per model. By default the query encoder comes
    from ``encoder``, ``memory`` and ``device`` parameters; a router whose
    encoder lives elsewhere overrides ``_query_encoder()``. Every router has
    a ``cost_weight`` parameter.

    ``_predict_proba_encoded`` returns the columns of the pool the router was
    fitted on, whatever :meth:`remove_models` removed since (it reads its
    fitted arrays, never ``len(classes_)``): :meth:`predict_proba` keeps the
    remaining models' columns, for every method that predicts.

    Set ``_uses_query_encodings = False`` in a router that ignores the query
    (it then never loads an encoder).
    """

    _parameter_constraints = {
        "cost_weight": [Interval(Real, 0, None, closed="left")],
    }
    _uses_query_encodings = True

    # scikit-learn's metadata routing takes every argument but X and y for
    # metadata a meta-estimator may route; evals and queries are the data
    # (what X is elsewhere), so set_fit_request(evals=True) is not offered.
    # model_costs stays routable (per-model metadata), and so does predict's
    # models: a per-call restriction of the pool (an outage) that a Pipeline
    # ending in a router should forward to its predict.
    __metadata_request__fit = {"evals": metadata_routing.UNUSED}
    __metadata_request__predict = {"queries": metadata_routing.UNUSED}
    __metadata_request__predict_proba = {"queries": metadata_routing.UNUSED}
    __metadata_request__decision_function = {"queries": metadata_routing.UNUSED}
    __metadata_request__score = {"evals": metadata_routing.UNUSED}

    def _validate_params(self):
        # A mapping where a number belongs is most likely the query encodings
        # passed first (LocusEmbedder takes them first; KNNRouter takes k):
        # scikit-learn's message would print every vector of it.
        params = self.get_params(deep=False)
        for name, constraints in self._parameter_constraints.items():
            value = params.get(name)
            if isinstance(value, Mapping) and isinstance(constraints, list):
                if not any(c in (dict, Mapping) for c in constraints):
                    hint = ""
                    if "encoder" in self._parameter_constraints:
                        hint = " If they are query encodings, pass them as encoder=."
                    elif name == "embedder":
                        hint = (
                            " If they are query encodings, pass them to the "
                            f"embedder: {type(self).__name__}(LocusEmbedder("
                            "encoder=...))."
                        )
                    # Worded as scikit-learn lists them.
                    valid = [make_constraint(c) for c in constraints]
                    valid = [str(c) for c in valid if not c.hidden]
                    valid = " or ".join(
                        filter(None, [", ".join(valid[:-1]), valid[-1]])
                    )
                    raise InvalidParameterError(
                        f"The {name!r} parameter of {type(self).__name__} got a "
                        f"mapping of {len(value)} entries; it must be {valid}."
                        f"{hint}"
                    )
        super()._validate_params()

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        # Routers fit on a long table of evaluations (model and query ids,
        # scores) and predict from query texts, as LocusEmbedder fits: not on
        # a numeric matrix, which BaseEstimator's defaults describe.
        tags.input_tags.two_d_array = False
        tags.input_tags.string = True
        return tags

    def _encode(self, queries):
        """Encodings of ``queries`` by the fitted encoder, shape (n, n_features)."""
        if not self._uses_query_encodings:
            return np.zeros((len(queries), 0), dtype=np.float32)
        return encode_as_fitted(self, queries)

    def _query_encoder(self):
        """The fitted query encoder to fit with."""
        return as_query_encoder(
            self.encoder, memory=self.memory, device=getattr(self, "device", None)
        )

    # Nested estimators (LocusRouter's embedder) validate their own parameters.
    @_fit_context(prefer_skip_nested_validation=False)
    def fit(self, evals, y=None, *, model_costs=None):
        """Fit the router on scored evaluations.

        Parameters
        ----------
        evals : DataFrame or mapping of columns
            Long-format evaluations with columns ``model``, ``query``, ``score``
            (see :func:`~locus_sklearn.check_evals`).
        y : None or array-like of shape (n_rows,), default=None
            Ignored; present for scikit-learn API consistency (a meta-estimator
            passes on a y given with ``evals``, one entry per row: an array, or
            a pandas Series with ``evals``' index where ``evals`` is a
            DataFrame, as ``cross_val_score(router, df, df["score"])`` passes
            it). Anything else, a mapping, a Series with another index (model
            costs by name) or an array of another length, is refused: it is
            most likely the costs passed positionally, which go in
            ``model_costs=``.
        model_costs : mapping of str to float, pandas Series or array-like of shape (n_models,), default=None
            Cost of each model, used by :meth:`predict` when ``cost_weight > 0``.
            A mapping or Series is read by model name (a Series by its index);
            an array in sorted model-name order (see
            :func:`~locus_sklearn.check_model_costs`).

        Returns
        -------
        self : object
        """
        table = check_evals(evals)
        _check_ignored_y(y, evals)
        costs = check_model_costs(model_costs, table.models)
        # Fail before training rather than at the first predict.
        _check_costs_for_weight(self.cost_weight, costs)
        encoder = None
        if self._uses_query_encodings:
            encoder = self._query_encoder()
            X_query = encode_queries(encoder, table.queries)
            warn_shared_encodings(X_query, table.queries)
        else:
            X_query = np.zeros((table.n_queries, 0), dtype=np.float32)
        fitted = dict(
            self._fit_encoded(table, X_query, encoder, model_costs=costs) or {}
        )
        # Set only once fitting succeeded, all in one step (one dict update, no
        # Python code between its stores for an interrupt to land in): a failed
        # first fit leaves no fitted state, and a failed refit leaves the
        # previous fit whole, never its pool with a new network.
        if encoder is not None:
            fitted["encoder_"] = encoder
            fitted["n_query_features_"] = X_query.shape[1]
        fitted["classes_"] = table.models.copy()
        fitted["model_costs_"] = costs
        # A refit predicts its whole new pool: no column is removed.
        fitted["_kept_columns"] = None
        vars(self).update(fitted)
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
            rows do not sum to 1. float32 for
            :class:`~locus_sklearn.LocusRouter` (its network's precision),
            float64 for the peer routers of :mod:`locus_sklearn.baselines`.
        """
        check_is_fitted(self)
        # Settings read at prediction (KNNRouter's k and weights) may have been
        # set after fit: checked where they are read, as at fit.
        self._validate_params()
        queries = check_queries(queries)
        proba = self._predict_proba_encoded(self._encode(queries))
        # The one place the hook's columns (the fitted pool's) become the
        # pool's: predict, decision_function, score, the chunked predictions
        # and the scorers all read predict_proba. getattr: a router pickled
        # or loaded without the attribute has removed nothing.
        kept = getattr(self, "_kept_columns", None)
        return proba if kept is None else proba[:, kept]

    def remove_models(self, models):
        """Remove models from the pool, with no refit.

        Each router predicts a model's P(correct) independently of the other
        models, so the remaining models' predictions are unchanged: the
        fitted state stays whole, and :meth:`predict_proba` (and so
        :meth:`predict`, :meth:`decision_function` and :meth:`score`) drops
        the removed models' columns. ``classes_`` and ``model_costs_`` lose
        them; other fitted attributes (``mean_scores_``, ``n_evals_``,
        ``cluster_scores_``, ``net_``, ...) still describe the pool the router
        was fitted on. :meth:`fit` predicts its whole new pool again.
        :class:`~locus_sklearn.LocusRouter` overrides this method.

        The pool changes in place: do not predict from another thread
        meanwhile.

        Parameters
        ----------
        models : iterable of str
            Names of models of the pool (a list, array, set, ...), each once;
            at least one model must remain.

        Returns
        -------
        self : object
            With ``classes_`` of shape (n_models - n_removed,), and
            ``model_costs_`` (where fitted with costs) of the same shape.

        Examples
        --------
        >>> from locus_sklearn.baselines import SingleBestRouter
        >>> evals = {"model": ["a", "a", "b", "b", "c", "c"],
        ...          "query": ["q1", "q2"] * 3,
        ...          "score": [1.0, 0.0, 1.0, 1.0, 0.0, 0.0]}
        >>> router = SingleBestRouter().fit(
        ...     evals, model_costs={"a": 1.0, "b": 2.0, "c": 3.0})
        >>> router.predict(["q1"]).tolist()
        ['b']
        >>> router.remove_models(["b"]).classes_.tolist()
        ['a', 'c']
        >>> router.predict_proba(["q1"])
        array([[0.5, 0. ]])
        >>> router.model_costs_.tolist()
        [1.0, 3.0]
        >>> router.predict(["q1"]).tolist()
        ['a']
        """
        drop = self._models_to_remove(models)
        kept = getattr(self, "_kept_columns", None)
        if kept is None:
            kept = np.arange(len(self.classes_))
        # Set in one step, as fit sets its state: the pool, its costs and the
        # predicted columns never disagree.
        removed = {"classes_": self.classes_[~drop], "_kept_columns": kept[~drop]}
        if self.model_costs_ is not None:
            removed["model_costs_"] = self.model_costs_[~drop]
        vars(self).update(removed)
        return self

    def _models_to_remove(self, models):
        """The mask over ``classes_`` of the fitted pool's ``models`` that
        ``remove_models`` removes, checked: names of the pool, and not all of
        them."""
        check_is_fitted(self)
        drop = check_model_subset(models, self.classes_)
        if drop.all():
            raise ValueError(
                "remove_models would remove every model of the pool; at least one "
                "must remain."
            )
        return drop

    def _utility(self, proba):
        return routing_utility(proba, self.model_costs_, self.cost_weight)

    def decision_function(self, queries):
        """Utility of routing each query to each model.

        The utility of model m is ``P(correct) - cost_weight * cost_m``;
        :meth:`predict` routes to the largest one. A huge ``cost_weight`` may
        overflow utilities to -inf; where every one of a query's does,
        :meth:`predict` routes to the cheapest model.

        Parameters
        ----------
        queries : sequence of str or DataFrame with a ``query`` column

        Returns
        -------
        utility : ndarray of float64, shape (n_queries, n_models)
            Columns in ``classes_`` order; float64 for every router and every
            ``cost_weight`` (0 included, where it is :meth:`predict_proba`'s
            P(correct) upcast).
        """
        return self._utility(self.predict_proba(queries))

    def predict(self, queries, models=None):
        """Route each query to the model with the largest utility.

        The utility of model m is ``P(correct) - cost_weight * cost_m``. Where
        a huge ``cost_weight`` overflows every allowed model's utility to
        -inf, the query goes to the cheapest allowed model (ties to the larger
        P(correct), then to the first), the model of largest exact utility.

        Parameters
        ----------
        queries : sequence of str or DataFrame with a ``query`` column
        models : sequence of str, default=None
            Restrict routing to these models of the pool (an outage, a
            portfolio), each named once. Defaults to the whole pool.

        Returns
        -------
        routed : ndarray of str, shape (n_queries,)
        """
        check_is_fitted(self)
        available = None
        if models is not None:
            available = check_model_subset(models, self.classes_)
        proba = self.predict_proba(queries)
        routed = route_by_utility(proba, self.model_costs_, self.cost_weight, available)
        return self.classes_[routed]

    def score(self, evals, y=None):
        """Routing accuracy on the queries of ``evals``.

        Each query is routed as :meth:`predict` routes it, among the models
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
        table, y_true = observed_scores(
            self, evals, "score() routes among the fitted models"
        )
        proba = self.predict_proba(table.queries)
        # routing_accuracy(y_true, utility), but routed as predict routes: a
        # row whose utilities all overflowed goes by cost, which the
        # utilities alone cannot tell.
        routed = route_by_utility(
            proba, self.model_costs_, self.cost_weight, ~np.isnan(y_true)
        )
        return float(y_true[np.arange(len(y_true)), routed].mean())
