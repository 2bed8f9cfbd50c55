"""Folds of whole models, and a scorer that onboards the held-out ones."""

import copy
import zlib
from collections.abc import Mapping
from numbers import Integral

import numpy as np
import pandas as pd
from sklearn.model_selection import BaseCrossValidator
from sklearn.utils.validation import check_is_fitted

from .._evals import _as_frame, _preview, check_evals, check_model_costs
from ..metrics._scorers import ROUTER_SCORERS

__all__ = ["ModelGroupSplit", "make_onboarding_scorer"]


def _check_int(value, name, low, why=""):
    if not isinstance(value, Integral) or isinstance(value, bool):
        raise TypeError(
            f"{name} must be an int >= {low}; got {value!r} "
            f"({type(value).__name__}).{why}"
        )
    if value < low:
        raise ValueError(f"{name} must be an int >= {low}; got {value!r}.")
    return int(value)


def _columns(X, name="X"):
    """The ``model`` and ``query`` columns of an evaluation table, row-aligned."""
    check_evals(X, name=name)  # one validation path, with its messages
    frame = _as_frame(X, name)
    return (
        frame["model"].to_numpy(dtype=object),
        frame["query"].to_numpy(dtype=object),
    )


class ModelGroupSplit(BaseCrossValidator):
    """K folds of whole models, for cross-validating the onboarding of new models.

    Each fold holds out a group of models: the training set is every row of
    the other models, the test set every row of the held-out ones. Within a
    held-out model, :meth:`onboarding_split` picks ``n_onboard`` of its
    queries to onboard it from (through ``add_models``); its other rows score
    it. :func:`make_onboarding_scorer` does both for
    :func:`~sklearn.model_selection.cross_val_score` and
    :class:`~sklearn.model_selection.GridSearchCV`.

    Grouping a router's own ``score`` by model instead (``GroupKFold`` on
    ``evals["model"]``) cannot work: a fitted router knows nothing of models
    it was not fitted on, so every fold scores NaN.

    Parameters
    ----------
    n_splits : int, default=5
        Number of folds, at least 2 and at most the number of models.
    n_onboard : int, default=128
        Distinct queries of each held-out model used to onboard it (the
        paper's protocol uses 128). Every model needs more than this, so that
        rows remain to score it.
    random_state : int, default=0
        Seeds the assignment of models to folds and the choice of onboarding
        queries. An int, not None: the scorer must pick the same onboarding
        rows as every other call, and every candidate of a grid search must
        be scored on the same rows.

    See Also
    --------
    make_onboarding_scorer : The scorer that onboards and scores a fold.

    Notes
    -----
    The onboarding queries of a model depend only on its name, its queries
    and ``random_state``: not on row order, nor on which other models share
    its fold. All rows of a chosen (model, query) pair, duplicates included,
    are onboarding rows.

    Examples
    --------
    >>> from locus_sklearn.datasets import make_model_pool
    >>> from locus_sklearn.model_selection import ModelGroupSplit
    >>> evals = make_model_pool(n_models=6, n_queries=100, evals_per_model=50,
    ...                         random_state=0).evals
    >>> cv = ModelGroupSplit(n_splits=3, n_onboard=20)
    >>> train, test = next(cv.split(evals))
    >>> sorted(set(evals["model"].iloc[train]) & set(evals["model"].iloc[test]))
    []
    >>> onboard, score = cv.onboarding_split(evals.iloc[test])
    >>> evals.iloc[test].iloc[onboard].groupby("model")["query"].nunique().unique()
    array([20])
    """

    def __init__(self, n_splits=5, *, n_onboard=128, random_state=0):
        self.n_splits = _check_int(n_splits, "n_splits", 2)
        self.n_onboard = _check_int(n_onboard, "n_onboard", 1)
        self.random_state = _check_int(
            random_state,
            "random_state",
            0,
            " Not None or a RandomState: the onboarding rows must be the same "
            "on every call, for every candidate of a search.",
        )

    def get_n_splits(self, X=None, y=None, groups=None):
        """Number of folds.

        Parameters
        ----------
        X, y, groups : ignored

        Returns
        -------
        n_splits : int
        """
        return self.n_splits

    def split(self, X, y=None, groups=None):
        """Rows of the training models and rows of the held-out models, per fold.

        Parameters
        ----------
        X : DataFrame
            Long-format evaluations (``model``, ``query``, ``score``).
        y : None
            Ignored.
        groups : None
            Ignored: the models are the groups.

        Yields
        ------
        train : ndarray of int
            Positions of every row of the training models.
        test : ndarray of int
            Positions of every row of the held-out models (onboarding and
            scoring rows; see :meth:`onboarding_split`).
        """
        models, queries = _columns(X)
        names, codes = np.unique(models, return_inverse=True)
        if len(names) < self.n_splits:
            raise ValueError(
                f"n_splits={self.n_splits} should be <= the number of models, "
                f"{len(names)}; each fold holds out at least one model."
            )
        # Grouped by codes, queries as objects: pandas would infer its str
        # dtype for both, which refuses a lone surrogate (ids may hold one).
        counts = pd.Series(queries, dtype=object).groupby(codes).nunique().to_numpy()
        short = np.flatnonzero(counts <= self.n_onboard)
        if len(short):
            shown = _preview(f"{names[i]}: {counts[i]}" for i in short)
            raise ValueError(
                f"n_onboard={self.n_onboard} leaves no rows to score "
                f"{len(short)} model(s), which have at most that many distinct "
                f"queries ({shown}); lower n_onboard or drop those models."
            )
        order = np.random.default_rng(self.random_state).permutation(names)
        for held_out in np.array_split(order, self.n_splits):
            test = np.isin(models, held_out)
            yield np.flatnonzero(~test), np.flatnonzero(test)

    def onboarding_split(self, X):
        """Onboarding rows and scoring rows of the models of ``X``.

        Parameters
        ----------
        X : DataFrame
            Evaluations of held-out models (a fold's test rows).

        Returns
        -------
        onboard : ndarray of int
            Positions of the rows of ``n_onboard`` distinct queries per model.
        score : ndarray of int
            Positions of every other row.
        """
        models, queries = _columns(X)
        onboard = np.zeros(len(models), dtype=bool)
        for name in np.unique(models):
            rows = np.flatnonzero(models == name)
            distinct = np.unique(queries[rows])
            if len(distinct) <= self.n_onboard:
                raise ValueError(
                    f"Model {name!r} has {len(distinct)} distinct queries; "
                    f"n_onboard={self.n_onboard} leaves none to score it."
                )
            # Seeded by the model's name, so its choice does not depend on
            # the other models of the fold or on the order of rows.
            # surrogatepass: a name may hold a lone surrogate, which strict
            # UTF-8 refuses; other names encode as before.
            key = zlib.crc32(name.encode("utf-8", "surrogatepass"))
            rng = np.random.default_rng([self.random_state, key])
            chosen = distinct[rng.permutation(len(distinct))[: self.n_onboard]]
            onboard[rows] = np.isin(queries[rows], chosen)
        return np.flatnonzero(onboard), np.flatnonzero(~onboard)


class _OnboardingScorer:
    """``scorer(router, X, y=None)``: onboard the models of ``X``, score them."""

    def __init__(self, cv, metric, model_costs):
        self.cv = cv
        self.metric = metric
        self.model_costs = model_costs  # validated: dict of str to float, or None

    def __call__(self, estimator, X, y=None):
        if not callable(getattr(estimator, "add_models", None)):
            raise TypeError(
                f"The onboarding scorer needs a router with add_models (such as "
                f"LocusRouter); got {type(estimator).__name__}."
            )
        # Before classes_ is read: an unfitted router raised AttributeError.
        check_is_fitted(estimator)
        frame = _as_frame(X, "X")
        onboard, score = self.cv.onboarding_split(frame)
        held_out = np.unique(frame["model"].to_numpy(dtype=object))
        known = held_out[np.isin(held_out, estimator.classes_)]
        if len(known) == len(held_out):
            # A fold of ModelGroupSplit holds out only models outside the
            # pool: rows of fitted models alone are most often the training
            # rows, which return_train_score=True scores too.
            raise ValueError(
                f"The onboarding scorer scores models the router was not fitted "
                f"on, but every model of X ({len(known)} model(s): "
                f"{_preview(known)}) is in its pool: it cannot score the rows of "
                "the fitted models, such as the training rows that "
                "return_train_score=True scores (use return_train_score=False). "
                "The test rows of a fold of ModelGroupSplit hold only models "
                "outside the pool."
            )
        if len(known):
            raise ValueError(
                f"The onboarding scorer scores models the router was not fitted "
                f"on, but {len(known)} model(s) of this fold are in its pool: "
                f"{_preview(known)}. Split with ModelGroupSplit."
            )
        # Checked here, not left to add_models: its messages advise its own
        # model_costs= or a refit, while the costs missing (or extra) are the
        # scorer's.
        fitted_costs = getattr(estimator, "model_costs_", None)
        if fitted_costs is not None and self.model_costs is None:
            raise ValueError(
                f"The router was fitted with model costs, so the {len(held_out)} "
                f"held-out model(s) {_preview(held_out)} need costs too: pass "
                "model_costs= (costs by model name) to make_onboarding_scorer."
            )
        if fitted_costs is None and self.model_costs is not None:
            raise ValueError(
                "make_onboarding_scorer was given model_costs, but the router was "
                "fitted without costs: drop model_costs from make_onboarding_scorer, "
                "or fit the router with model_costs=."
            )
        costs = None
        if self.model_costs is not None:
            missing = [m for m in held_out if m not in self.model_costs]
            if missing:
                raise ValueError(
                    f"model_costs of the onboarding scorer has no cost for "
                    f"{len(missing)} held-out model(s): {_preview(missing)}."
                )
            costs = {m: self.model_costs[m] for m in held_out}
        # A copy: the fitted estimator is reused for the other scorers.
        router = copy.deepcopy(estimator)
        router.add_models(frame.iloc[onboard], model_costs=costs)
        return ROUTER_SCORERS[self.metric](router, frame.iloc[score])

    def __repr__(self):
        costs = ""
        if self.model_costs is not None:
            costs = f", model_costs={self.model_costs!r}"
        return f"make_onboarding_scorer({self.cv!r}, metric={self.metric!r}{costs})"


def _check_scorer_costs(model_costs):
    """``model_costs`` as a dict of model name to float cost, or None.

    Checked here, not in each fold: a bad cost surfaced only after the
    fold's training, and cross_val_score turned it into a NaN score.
    """
    if model_costs is None:
        return None
    if isinstance(model_costs, pd.Series):
        names = model_costs.index.tolist()
        repeated = model_costs.index[model_costs.index.duplicated()].unique().tolist()
        if repeated:
            raise ValueError(
                f"model_costs is a pandas Series whose index repeats "
                f"{len(repeated)} model name(s): {_preview(repeated)}; give each "
                "model one cost."
            )
        model_costs = dict(zip(names, model_costs.tolist(), strict=True))
    if not isinstance(model_costs, Mapping):
        raise TypeError(
            f"model_costs must be a mapping of model name to cost (or a pandas "
            f"Series indexed by model name); got {type(model_costs).__name__}. "
            "The scorer reads each held-out model's cost by its name, which an "
            "array or a list does not hold."
        )
    names = list(model_costs)
    if not names:
        raise ValueError(
            "model_costs is empty; give the cost of every model, or None when "
            "the router has no costs."
        )
    not_names = [m for m in names if not isinstance(m, str)]
    if not_names:
        raise TypeError(
            f"model_costs must be keyed (or indexed) by model name (str); "
            f"{len(not_names)} key(s) are not: {_preview(not_names)}."
        )
    costs = check_model_costs(model_costs, names, models="its keys")
    return dict(zip(names, costs.tolist(), strict=True))


def make_onboarding_scorer(cv, metric="correctness_accuracy", *, model_costs=None):
    """A scorer that onboards a fold's held-out models and scores them.

    Called as ``scorer(router, X, y=None)`` with a router fitted on the
    training models of a fold and ``X`` the rows of its held-out models (as
    :func:`~sklearn.model_selection.cross_val_score` and
    :class:`~sklearn.model_selection.GridSearchCV` do with ``cv=cv``): it
    onboards each held-out model from its onboarding rows
    (:meth:`ModelGroupSplit.onboarding_split`) with ``add_models`` on a copy
    of the router, then scores that copy on the other rows. The fitted
    router is left as it was.

    It scores only models the router was not fitted on, so not the fitted
    models' own rows: leave ``return_train_score=False`` in
    :func:`~sklearn.model_selection.cross_validate` and
    :class:`~sklearn.model_selection.GridSearchCV` (with True, every train
    score fails, and is NaN with a warning saying so).

    Parameters
    ----------
    cv : ModelGroupSplit
        The splitter of the search; it chooses the onboarding rows.
    metric : str, default="correctness_accuracy"
        A name of :func:`~locus_sklearn.metrics.get_router_scorer`:
        ``"correctness_accuracy"`` (are the onboarded models' P(correct)
        right on their scoring rows?), ``"neg_log_loss"``,
        ``"routing_accuracy"`` or ``"routing_accuracy_no_cost"`` (routing
        among the held-out models, on the queries they were scored on).
        The default thresholds the score and P(correct) at 0.5, which suits
        binary scores: on graded ones (fractions in [0, 1]) it rewards
        predicting the median score over the expected one (see
        :func:`~locus_sklearn.metrics.correctness_accuracy`); pass
        ``"neg_log_loss"`` for a graded pool.
    model_costs : mapping of str to float or pandas Series, default=None
        Costs of the models by name (finite, >= 0), checked here; needed
        when the router was fitted with costs, and refused when scoring a
        router fitted without them.
        Each fold's ``fit`` takes costs for exactly that fold's training
        models, while :func:`~sklearn.model_selection.cross_val_score` passes
        one ``params={"model_costs": ...}`` whole to every fold: with costs,
        fit each fold of ``cv.split(evals)`` yourself, with
        ``{m: costs[m] for m in training models}``, and call the scorer on
        the fold's held-out rows (the fitted router is left as it was).

    Returns
    -------
    scorer : callable
        ``scorer(router, X, y=None) -> float``, larger is better.

    Examples
    --------
    >>> from sklearn.model_selection import cross_val_score
    >>> from locus_sklearn import LocusEmbedder, LocusRouter
    >>> from locus_sklearn.datasets import make_model_pool
    >>> from locus_sklearn.model_selection import (ModelGroupSplit,
    ...                                            make_onboarding_scorer)
    >>> pool = make_model_pool(n_models=6, n_queries=100, evals_per_model=60,
    ...                        random_state=0)
    >>> router = LocusRouter(LocusEmbedder(pool.encodings, embedding_dim=8,
    ...                                    n_latents=2, n_blocks=1, n_heads=2,
    ...                                    enc_size=(16, 64), max_epochs=1,
    ...                                    random_state=0))
    >>> cv = ModelGroupSplit(n_splits=2, n_onboard=30)
    >>> scores = cross_val_score(router, pool.evals, cv=cv,
    ...                          scoring=make_onboarding_scorer(cv))
    >>> bool(((scores >= 0) & (scores <= 1)).all())
    True
    """
    if not isinstance(cv, ModelGroupSplit):
        raise TypeError(
            f"cv must be a ModelGroupSplit (it chooses the onboarding rows); got "
            f"{type(cv).__name__}."
        )
    if not isinstance(metric, str):
        # A list is unhashable: the lookup failed with a bare "unhashable type".
        raise TypeError(
            f"metric must be a str, one of {sorted(ROUTER_SCORERS)}; got {metric!r} "
            f"({type(metric).__name__})."
        )
    if metric not in ROUTER_SCORERS:
        raise ValueError(
            f"metric={metric!r} is not a router scorer; valid names are "
            f"{sorted(ROUTER_SCORERS)}."
        )
    return _OnboardingScorer(cv, metric, _check_scorer_costs(model_costs))
