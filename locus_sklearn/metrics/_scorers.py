"""Scorers for GridSearchCV: ``scorer(router, evals)`` on a fitted router."""

from ._routing import correctness_accuracy, correctness_log_loss, routing_accuracy

__all__ = ["get_router_scorer", "ROUTER_SCORERS"]


def _observed_and_predicted(router, evals):
    """Dense observed scores of ``evals`` and the router's P(correct), both
    in ``router.classes_`` order, checked as :meth:`BaseRouter.score` checks
    them (so that every scorer fails alike on the same fold)."""
    from .._base import observed_scores  # _base imports this package

    table, y_true = observed_scores(
        router, evals, "the scorer scores the fitted models only"
    )
    y_score = router.predict_proba(table.queries)
    return y_true, y_score


def _routing_scorer(router, evals, y=None):
    return router.score(evals)


def _correctness_scorer(router, evals, y=None):
    return correctness_accuracy(*_observed_and_predicted(router, evals))


def _neg_log_loss_scorer(router, evals, y=None):
    return -correctness_log_loss(*_observed_and_predicted(router, evals))


def _routing_no_cost_scorer(router, evals, y=None):
    return routing_accuracy(*_observed_and_predicted(router, evals))


ROUTER_SCORERS = {
    "routing_accuracy": _routing_scorer,
    "routing_accuracy_no_cost": _routing_no_cost_scorer,
    "correctness_accuracy": _correctness_scorer,
    "neg_log_loss": _neg_log_loss_scorer,
}


def get_router_scorer(name):
    """A scorer ``scorer(router, evals) -> float`` (larger is better) by name.

    Use it as ``scoring=`` of :class:`~sklearn.model_selection.GridSearchCV` or
    :func:`~sklearn.model_selection.cross_validate` with a router and an
    ``evals`` table. Names: ``"routing_accuracy"`` (the router's own
    :meth:`score`, cost weight included), ``"routing_accuracy_no_cost"``,
    ``"correctness_accuracy"`` and ``"neg_log_loss"``.

    ``"correctness_accuracy"`` (:func:`~locus_sklearn.metrics.correctness_accuracy`)
    thresholds the observed score and P(correct) at 0.5, which suits binary
    scores; on graded scores (fractions in [0, 1]) it rewards predicting the
    median score over the expected one, so that a miscalibrated router can
    beat a calibrated one. For graded pools use ``"neg_log_loss"``, which the
    expected score maximises (the package has no Brier scorer).

    Parameters
    ----------
    name : {"routing_accuracy", "routing_accuracy_no_cost", \
            "correctness_accuracy", "neg_log_loss"}
        Which scorer. Another str is a ValueError, a value that is not a str
        a TypeError.

    Returns
    -------
    scorer : callable
        ``scorer(router, evals, y=None) -> float`` on a fitted router; larger
        is better (``"neg_log_loss"`` is the negated log loss). ``y`` is
        ignored.

    Examples
    --------
    >>> from locus_sklearn.metrics import get_router_scorer
    >>> scorer = get_router_scorer("correctness_accuracy")
    >>> callable(scorer)
    True
    >>> get_router_scorer("accuracy")
    Traceback (most recent call last):
    ...
    ValueError: Unknown router scorer 'accuracy'; valid names are
    ['correctness_accuracy', 'neg_log_loss', 'routing_accuracy',
    'routing_accuracy_no_cost'].
    """
    if not isinstance(name, str):
        # A list or dict is unhashable: the lookup failed with a bare
        # "unhashable type" that named neither the parameter nor the names.
        raise TypeError(
            f"name must be a str, one of {sorted(ROUTER_SCORERS)}; got {name!r} "
            f"({type(name).__name__})."
        )
    try:
        return ROUTER_SCORERS[name]
    except KeyError:
        raise ValueError(
            f"Unknown router scorer {name!r}; valid names are {sorted(ROUTER_SCORERS)}."
        ) from None
