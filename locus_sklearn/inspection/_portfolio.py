"""Routing accuracy of portfolios chosen from the embeddings, against random ones."""

import math
from numbers import Integral, Real

import numpy as np
import pandas as pd
from sklearn.base import clone
from sklearn.utils import check_random_state

from .._accuracy_selector import ExpectedAccuracySelector
from .._evals import check_evals, check_model_costs
from .._params import validate_random_state
from .._selectors import KMedoidsSelector, _within_budget
from .._warnings import ignoring, warn_external
from ._common import check_models_in_pool, router_embeddings, router_routing

# ExpectedAccuracySelector's warning that a step added nothing (a tie).
_TIED_SELECTION = "Selecting model .* raised the expected accuracy by nothing"

__all__ = ["portfolio_curve"]


def _random_feasible(costs, budget, rng):
    """A random subset that fits the budget and to which no other model fits."""
    chosen, spent = [], []
    for m in rng.permutation(len(costs)):
        # The selector's own test (a total within rounding of the budget
        # fits), so the random portfolios are held to the same budget.
        if _within_budget([*spent, costs[m]], budget):
            chosen.append(m)
            spent.append(costs[m])
    return np.asarray(chosen, dtype=np.int64)


def _check_values(values, parameter):
    """``values`` as a non-empty list: ints for ``n_select``, numbers for
    ``budget``."""
    what, kind = (
        ("portfolio sizes", Integral) if parameter == "n_select" else ("budgets", Real)
    )
    # A string would be iterated by character, a single number not at all.
    if isinstance(values, str):
        raise TypeError(
            f"values must be a sequence of {what} ({parameter}), not the string "
            f"{values!r}."
        )
    if not hasattr(values, "__iter__"):
        # A single size or budget is a mistake with a fix; None is no value.
        hint = (
            f" Pass [{values!r}] for one."
            if isinstance(values, Real) and not isinstance(values, bool)
            else ""
        )
        raise TypeError(
            f"values must be a sequence of {what} ({parameter}); got {values!r} "
            f"({type(values).__name__}).{hint}"
        )
    values = list(values)
    if not values:
        raise ValueError(f"values must hold at least one of the {what}; got none.")
    for value in values:
        if isinstance(value, bool | np.bool_) or not isinstance(value, kind):
            raise TypeError(
                f"values must be a sequence of {what} ({parameter}), each "
                f"{'an int' if kind is Integral else 'a number'}; got {value!r} "
                f"({type(value).__name__})."
            )
    return values


def portfolio_curve(
    router,
    evals,
    values,
    *,
    selector=None,
    costs=None,
    embeddings=None,
    n_random=20,
    random_state=None,
):
    """Routing accuracy restricted to selected portfolios, as the portfolio grows.

    For each value (a portfolio size, or a budget for a budgeted selector),
    the selector chooses a portfolio from the model embeddings alone, and
    each query of ``evals`` is routed as ``router.predict(queries,
    models=portfolio)`` would, among the portfolio's models with a score for
    it (paper, section 3.5 and appendix E.4). Random portfolios of the same
    size (or random budget-feasible ones that no further model fits) give the
    baseline, as mean and standard deviation over ``n_random`` draws.

    Parameters
    ----------
    router : fitted router
        Any router with ``classes_`` and ``predict_proba``, with
        ``model_embeddings_`` unless ``embeddings`` is given. Queries are
        routed by its ``decision_function`` (P(correct) less the cost term),
        or by ``predict_proba`` for a router without one, which then cannot
        have a positive ``cost_weight``.
    evals : DataFrame or mapping of columns
        Scored evaluations of models of the pool (a model not in
        ``router.classes_`` is refused), typically held-out queries that every
        model has a score for. Queries where no model of a
        portfolio has a score are not counted for it.
    values : sequence of int or float
        Portfolio sizes (``n_select``, ints) for count selectors, budgets
        (``budget``, numbers) for :class:`~locus_sklearn.BudgetGreedySelector`;
        at least one.
    selector : estimator, default=None
        An unfitted selector with an ``n_select`` or a ``budget`` parameter;
        cloned for each value. Defaults to
        :class:`~locus_sklearn.KMedoidsSelector` ``()``.
    costs : mapping of str to float or array-like of shape (n_models,), default=None
        Model costs for a budgeted selector; defaults to
        ``router.model_costs_``. Refused with a count selector, which does
        not use them.
    embeddings : array-like of shape (n_models, d), default=None
        Embeddings of ``router.classes_`` (in that order, or a DataFrame
        indexed by model name; for a selector with ``metric="precomputed"``,
        a distance DataFrame with the model names as index and columns, in
        any order); defaults to ``router.model_embeddings_``. For an
        :class:`~locus_sklearn.ExpectedAccuracySelector`, the models'
        predicted P(correct) on queries other than those of ``evals``, e.g.
        ``router.predict_proba(training_queries).T``: required, as the model
        embeddings are not probabilities.
    n_random : int, default=20
        Random portfolios per value; 0 skips the baseline.
    random_state : int, RandomState instance or None, default=None
        Seeds the random portfolios.

    Returns
    -------
    curve : DataFrame with one row per value
        Columns ``value``; ``n_models`` (portfolio size); ``cost`` (its total
        cost, budgeted selectors only); ``accuracy`` (NaN, with a warning,
        when ``n_queries`` is 0); ``n_queries`` (queries counted: those of
        ``evals`` with a score of a model of the portfolio); ``random_mean``
        and ``random_std`` (the random baseline);
        ``n_random`` (random portfolios counted in it: a draw none of whose
        models has a score in ``evals`` has no accuracy and is left out; with
        none counted the baseline is NaN); ``full_pool_accuracy`` (routing
        among every model); ``models`` (the portfolio, a tuple of names in
        selection order).

    Examples
    --------
    >>> from locus_sklearn.baselines import KNNRouter
    >>> from locus_sklearn.inspection import portfolio_curve
    >>> encoder = {"q1": [1.0, 0.0], "q2": [0.9, 0.1], "q3": [0.0, 1.0]}
    >>> evals = {"model": ["a"] * 3 + ["b"] * 3 + ["c"] * 3,
    ...          "query": ["q1", "q2", "q3"] * 3,
    ...          "score": [1, 1, 0,  1, 0, 0,  0, 0, 1]}
    >>> router = KNNRouter(1, encoder=encoder).fit(evals)
    >>> Z = [[0.9, 0.1], [1.0, 0.0], [0.0, 1.0]]  # "b" resembles "a"
    >>> curve = portfolio_curve(router, evals, [1, 2], embeddings=Z, random_state=0)
    >>> curve[["value", "models", "accuracy", "random_mean"]]
       value  models  accuracy  random_mean
    0      1    (a,)  0.666667         0.45
    1      2  (a, c)  1.000000         0.75
    """
    if embeddings is None and isinstance(selector, ExpectedAccuracySelector):
        # It reads its input as P(correct) on queries: the router's
        # embedding coordinates (of any sign) would select without an error.
        raise ValueError(
            f"selector={selector!r} selects by the models' predicted "
            "P(correct), so embeddings must hold them; got embeddings=None, "
            "which would read router.model_embeddings_ as P(correct). Pass "
            "embeddings=router.predict_proba(queries).T, on queries other than "
            "those of evals (for instance the training queries)."
        )
    Z, classes = router_embeddings(router, embeddings)
    selector = KMedoidsSelector() if selector is None else selector
    if isinstance(selector, type):
        raise TypeError(
            f"selector must be an estimator instance, e.g. {selector.__name__}(); "
            f"got the class {selector.__name__}."
        )
    if not hasattr(selector, "get_params"):
        # A name such as "kmedoids" failed on get_params, naming no parameter.
        raise TypeError(
            "selector must be an unfitted selector instance with an n_select or "
            "a budget parameter, such as KMedoidsSelector() or "
            f"BudgetGreedySelector(); got {selector!r} ({type(selector).__name__})."
        )
    params = selector.get_params(deep=False)
    if "budget" in params:
        parameter = "budget"
        costs = check_model_costs(
            getattr(router, "model_costs_", None) if costs is None else costs,
            classes,
            name="costs",
        )
        if costs is None:
            raise ValueError(
                "A budgeted selector needs model costs: pass costs= or fit the "
                "router with model_costs=."
            )
    elif "n_select" in params:
        parameter = "n_select"
        if costs is not None:
            # A count selector never reads costs: taking them would leave a
            # mistyped mapping unchecked and the curve without its cost column.
            raise ValueError(
                "costs applies to budgeted selectors (such as BudgetGreedySelector, "
                "with a budget parameter); the count selector "
                f"{type(selector).__name__} selects by n_select and does not use "
                "them. Leave costs=None, or pass a budgeted selector."
            )
    else:
        raise TypeError(
            "selector must have an n_select or a budget parameter (a KCenterSelector, "
            "KMedoidsSelector, ExpectedAccuracySelector or BudgetGreedySelector); got "
            f"{type(selector).__name__}."
        )
    if isinstance(n_random, bool) or not isinstance(n_random, Integral):
        raise TypeError(
            f"n_random must be an int >= 0, the random portfolios per value; got "
            f"{n_random!r} ({type(n_random).__name__})."
        )
    if n_random < 0:
        raise ValueError(f"n_random={n_random} should be >= 0.")
    validate_random_state(random_state, caller="portfolio_curve")
    values = _check_values(values, parameter)
    if parameter == "budget":
        # The selector's own test, up front: it would name the cheapest model
        # by its position in classes_, an order the user never wrote.
        cheapest = int(np.argmin(costs))
        for value in values:
            if not _within_budget([costs[cheapest]], value):
                raise ValueError(
                    f"values holds budget={value!r}, which should be >= the "
                    "cheapest model's cost, "
                    f"costs[{str(classes[cheapest])!r}]={float(costs[cheapest])!r}; "
                    "no model fits."
                )

    table = check_evals(evals)
    check_models_in_pool(
        table,
        classes,
        pool="the router's classes_",
        remedy="the router cannot route to them, so leave them out of evals",
    )
    Y = table.to_dense(classes)
    observed = ~np.isnan(Y)
    routed_among = router_routing(router, table.queries, function="portfolio_curve")

    def accuracy(portfolio):
        available = observed.copy()
        keep = np.zeros(len(classes), dtype=bool)
        keep[portfolio] = True
        available &= keep
        counted = available.any(axis=1)
        if not counted.any():
            return np.nan, 0
        routed = routed_among(available[counted], np.flatnonzero(counted))
        return float(Y[counted][np.arange(counted.sum()), routed].mean()), int(
            counted.sum()
        )

    full_pool, _ = accuracy(np.arange(len(classes)))
    rng = check_random_state(random_state)
    records = []
    for value in values:
        fitted = clone(selector).set_params(**{parameter: value})
        # A curve runs past the size where selections stop gaining: that
        # flat end is what it shows, not a mistake to warn of per size.
        with ignoring({"message": _TIED_SELECTION}):
            if parameter == "budget":
                fitted.fit(Z, costs=costs)
            else:
                fitted.fit(Z)
        portfolio = fitted.selected_indices_
        score, n_queries = accuracy(portfolio)
        if n_queries == 0:
            warn_external(
                f"The portfolio of {parameter}={value}, "
                f"{list(classes[portfolio])}, has accuracy NaN: no held-out "
                "query of evals has a score of those models (n_queries=0). "
                "Pass evals with scores of every model of the pool.",
                UserWarning,
            )
        if parameter == "budget":
            draws = [_random_feasible(costs, value, rng) for _ in range(n_random)]
        else:
            draws = [
                rng.choice(len(classes), len(portfolio), replace=False)
                for _ in range(n_random)
            ]
        random_scores = np.array([accuracy(d)[0] for d in draws])
        # A draw of models without a held-out score has no accuracy (NaN):
        # the baseline averages the draws that have one, counted in n_random.
        random_scores = random_scores[~np.isnan(random_scores)]
        counted = len(random_scores)
        record = {"value": value, "n_models": len(portfolio)}
        if parameter == "budget":
            record["cost"] = math.fsum(costs[portfolio])
        record.update(
            accuracy=score,
            n_queries=n_queries,
            random_mean=float(np.mean(random_scores)) if counted else np.nan,
            random_std=float(np.std(random_scores)) if counted else np.nan,
            n_random=counted,
            full_pool_accuracy=full_pool,
            models=tuple(classes[portfolio]),
        )
        records.append(record)
    return pd.DataFrame.from_records(records)
