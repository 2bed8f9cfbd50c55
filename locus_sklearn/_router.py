"""LocusRouter: route queries with LOCUS model embeddings; onboard models."""

import copy
from collections.abc import Mapping
from numbers import Integral, Real

import numpy as np
import pandas as pd
from sklearn.base import clone
from sklearn.frozen import FrozenEstimator
from sklearn.utils._param_validation import HasMethods, Interval, StrOptions
from sklearn.utils.validation import check_is_fitted

from ._base import BaseRouter, _check_costs_for_weight
from ._embedder import LocusEmbedder, averaged_pairs_note
from ._evals import _preview, check_evals, check_model_costs
from ._params import subclass_param_names
from ._persistence import load_router, save_router
from ._shrinkage import SHRINKAGE_GRID, choose_shrinkage, mean_scores, shrink
from ._training import python_scalars
from ._warnings import warn_external

__all__ = ["LocusRouter"]


def _unwrap(embedder):
    """The LocusEmbedder inside a FrozenEstimator, or the embedder itself."""
    return embedder.estimator if isinstance(embedder, FrozenEstimator) else embedder


def _check_embedder_type(embedder):
    """Refuse an ``embedder`` the router cannot use, naming what it is.

    The parameter's constraint asks only for ``fit`` and ``transform``, which
    any transformer has (a Pipeline, a QueryEncoder, a scaler), and ``fit``
    then failed deep inside with an AttributeError naming a private method:
    the router trains and reads a LocusEmbedder's own network. Subclasses of
    LocusEmbedder are accepted."""
    if embedder is None or isinstance(_unwrap(embedder), LocusEmbedder):
        return
    given = type(embedder).__name__
    if isinstance(embedder, FrozenEstimator):
        given = f"a FrozenEstimator wrapping {type(embedder.estimator).__name__}"
    raise TypeError(
        f"embedder must be None, a LocusEmbedder or a FrozenEstimator wrapping a "
        f"fitted LocusEmbedder; got {given}. The router trains and reads a "
        "LocusEmbedder's network, which no other transformer has."
    )


def _check_fitted_embedder(locus):
    """A fitted LocusEmbedder's settings before it embeds: the run-time ones
    (``refine_steps``, ``inference_dtype``, ...) may have been set after fit,
    the network-shaping ones may not."""
    locus._validate_params()
    locus._check_fitted_network()


# The run-time settings of a LocusEmbedder that change the embeddings
# transform makes (beyond float32 rounding, which transform_batch_tokens and
# device change alone): the router records them with its pool, and embeds
# no model with others (_check_embedding_settings).
_EMBEDDING_SETTINGS = ("refine_steps", "refine_prior", "inference_dtype")


def _embedding_settings(locus):
    """``locus``'s :data:`_EMBEDDING_SETTINGS`, by name (Python scalars)."""
    return python_scalars({name: getattr(locus, name) for name in _EMBEDDING_SETTINGS})


def _settings_text(settings, names):
    return ", ".join(f"{name}={settings[name]!r}" for name in names)


def _rows_of(table, X_query, models):
    """(table, X_query) of the rows of ``models`` (a mask over
    ``table.models``): the table they make on their own (as ``check_evals``
    of those rows makes it) and the encodings of its queries."""
    part = check_evals(table.to_frame()[models[table.model_index]])
    return part, X_query[np.searchsorted(table.queries, part.queries)]


class LocusRouter(BaseRouter):
    """Route each query to the model most likely to answer it, from LOCUS embeddings.

    ``fit`` trains its embedder on the pool's evaluations (or reuses a fitted
    one wrapped in :class:`sklearn.frozen.FrozenEstimator`) and embeds every
    model. ``predict_proba`` gives each model's P(correct) from G_ψ (which, by
    default, also reads the model's own evaluations near each query);
    ``predict`` routes to the model maximising ``P(correct) - cost_weight *
    cost``, so one fitted router serves every point of the cost–quality curve.
    ``add_models`` onboards new models (or refreshes existing ones) from their
    evaluations with no training.

    A model with a single evaluation (one distinct query) cannot be trained
    on (training needs one evaluation to encode and one to predict): ``fit``
    fits the pool on the other models (training the embedder and choosing
    ``shrinkage_`` on them alone), then adds it as ``add_models`` does,
    warnings included (a :class:`~locus_sklearn.FewEvaluationsWarning`
    below ``enc_size[0]`` evaluations). ``classes_`` holds every model, and
    the router is that of ``fit`` on the other models' rows followed by
    ``add_models`` of its rows (with a frozen embedder too). ``fit`` refuses
    a table in which no model has two evaluations.

    Parameters
    ----------
    embedder : LocusEmbedder or FrozenEstimator, default=None
        The embedder to train (cloned) or a frozen fitted one; ``fit``
        refuses any other transformer (a Pipeline, a QueryEncoder) with a
        TypeError. None means ``LocusEmbedder()`` with its defaults. Its
        parameters are reachable as ``embedder__<name>`` (e.g. in
        GridSearchCV). A FrozenEstimator is not copied (scikit-learn's
        ``clone`` returns it): ``embedder_`` is that object, and the embedder
        it wraps is shared with the caller. Refitting that embedder after the
        router's ``fit`` makes every method that predicts, embeds or saves
        (``predict_proba``, ``predict``, ``decision_function``, ``score``,
        ``add_models``, ``embed``, ``save``) raise a ValueError until the
        router is refitted, since its pool was embedded with the previous
        network; wrap a copy (``FrozenEstimator(copy.deepcopy(embedder))``)
        to keep the router apart from later fits. Likewise, after
        ``refine_steps``, ``refine_prior`` (with refinement on) or
        ``inference_dtype`` of that embedder (or of ``embedder_``) is set to
        another value than at the router's fit, ``add_models``, ``embed``
        and ``save`` raise a ValueError naming it, since they would embed
        models, or store the embedder, otherwise than the pool; refit the
        router or set the value back. Predictions, which read the stored
        embeddings only, are unchanged and not refused.
    cost_weight : float, default=0.0
        λ in ``P(correct) - λ·cost``; needs ``model_costs`` at fit.
    shrinkage : "auto", float in [0, 1] or None, default="auto"
        A safeguard: ``predict_proba`` returns ``(1 - s)·P(correct) +
        s·(the model's mean score over its evaluations)``, which moves routing
        toward the model that is best on average by ``s`` (1: always that
        model, cost aside). "auto" chooses ``s`` in {0, 0.25, 0.5, 0.75, 1}
        at fit by the cross-fitted accuracy of the routing over 5 folds of
        the training queries (ties to the larger; it costs five more
        embeddings of the pool and one prediction per training query); None
        or 0 is the plain router. On six of seven real pool-and-size runs it
        kept the router within 0.5 point of both the single best model and
        kNN, where the plain router fell up to 2.1 points below the single
        best (the Routing page of the user guide). With ``model_costs`` at
        fit, "auto" judges each value by ``score - cost_weight·cost`` of the
        routed model at the ``cost_weight`` of fit, and never chooses 1 (at
        1 every query looks alike to the router, and the cost weight could
        only move whole traffic from one model to another). With ``s > 0``
        the probabilities are the shrunk ones (at ``s = 1`` each model's
        mean score, the same for every query); use ``shrinkage=None`` for
        the per-query estimates themselves. Where ``shrinkage_ > 0`` and the
        model with the highest mean score has it from fewer than the
        embedder's ``enc_size[0]`` evaluations, ``fit`` and ``add_models``
        warn (``UserWarning``): that mean alone can send it every query (two
        evaluations, both scored 1, took all of a 6-model pool's queries
        from ``s = 0.1`` up, and "auto" chose 1); give it more evaluations,
        remove it, or fit with ``shrinkage=None``.
    shrinkage_repeats : int, default=1
        With ``shrinkage="auto"``: how many shuffles of the 5 folds each value
        is judged on, together. At a few hundred evaluations per model the
        choice rests on about as many judged queries and can change with
        which queries share a fold (on 7 of 12 fits of four real pools at
        256 per model); more shuffles take that part of the noise out, at
        that many times the choice's cost. Ignored otherwise.

    Attributes
    ----------
    embedder_ : LocusEmbedder or FrozenEstimator
        The fitted embedder.
    encoder_ : QueryEncoder
        The embedder's query encoder.
    classes_ : ndarray of str, shape (n_models,)
        The pool, sorted by name.
    model_embeddings_ : ndarray of shape (n_models, embedding_dim)
        One embedding per model of ``classes_``.
    model_costs_ : ndarray of shape (n_models,) or None
        Per-model costs, when given.
    model_mean_scores_ : ndarray of shape (n_models,)
        Each model's mean score over the evaluations it was embedded from
        (``fit`` or ``add_models``): where ``shrinkage`` shrinks toward.
    shrinkage_ : float
        The shrinkage ``predict_proba`` applies.
    shrinkage_scores_ : dict of float to float
        With ``shrinkage="auto"``: the cross-fitted accuracy of each value
        judged on at least one fold query (with costs, its utility at the
        ``cost_weight`` of fit); a value whose routed models answered none of
        the fold queries has no estimate and is left out. Empty otherwise,
        after ``load``, and when no value could be judged.
    n_query_features_ : int
        Dimension of the query encodings.
    pool_evals_ : tuple of (ndarray of shape (n_queries, n_features), EvalTable) or None
        With the embedder's kernel readout (the default): the pool's stored
        evaluations and their query encodings, which ``predict_proba`` reads;
        None for the embedding-only predictor.

    Examples
    --------
    >>> from locus_sklearn import LocusEmbedder, LocusRouter
    >>> from locus_sklearn.datasets import make_model_pool
    >>> pool = make_model_pool(n_models=6, n_queries=200, evals_per_model=100,
    ...                        random_state=0)
    >>> router = LocusRouter(LocusEmbedder(pool.encodings, embedding_dim=16,
    ...                                    n_latents=4, n_blocks=1, n_heads=2,
    ...                                    max_epochs=2, random_state=0))
    >>> router = router.fit(pool.evals)
    >>> queries = pool.evals["query"].unique()[:3]
    >>> router.predict_proba(queries).shape
    (3, 6)
    >>> router.predict(queries).shape
    (3,)
    """

    _parameter_constraints = {
        **BaseRouter._parameter_constraints,
        "embedder": [None, HasMethods(["fit", "transform"])],
        "shrinkage": [None, StrOptions({"auto"}), Interval(Real, 0, 1, closed="both")],
        "shrinkage_repeats": [Interval(Integral, 1, None, closed="left")],
    }

    def __init__(
        self, embedder=None, *, cost_weight=0.0, shrinkage="auto", shrinkage_repeats=1
    ):
        self.embedder = embedder
        self.cost_weight = cost_weight
        self.shrinkage = shrinkage
        self.shrinkage_repeats = shrinkage_repeats

    @classmethod
    def _own_param_names(cls):
        """The parameters of a subclass's signature that LocusRouter lacks,
        sorted: :meth:`save` stores them, :meth:`load` of that subclass
        restores them."""
        return subclass_param_names(cls, LocusRouter)

    def _fitted_locus(self):
        """The fitted LocusEmbedder, checked to still hold the network that
        embedded the pool: every use of the network after ``fit``
        (``predict_proba``, ``add_models``, ``embed``, ``save``) reads it here.

        A method, not a property: scikit-learn's HTML repr (Jupyter's
        display) reads every attribute with ``inspect.getmembers``, which
        tolerates AttributeError alone, so a property that refuses a
        refitted embedder made the display raise, and merely inspecting a
        loaded router recorded its network.
        """
        locus = _unwrap(self.embedder_)
        net = locus.net_
        fitted = getattr(self, "_network_at_fit_", None)
        if fitted is None:
            # Routers built by load() or unpickled from an earlier version do
            # not record it; their pool was embedded by the network saved or
            # pickled with it, which they hold now: recorded on first use.
            self._network_at_fit_ = net
        elif net is not fitted:
            # A refit gives the embedder a new net_. A FrozenEstimator is not
            # copied by fit (scikit-learn's clone returns it), so refitting the
            # embedder it wraps, e.g. for another experiment, reaches this
            # router: the new network would read the model_embeddings_ the old
            # one made (add_models would mix the two networks' embeddings),
            # and its probabilities would match neither network's router,
            # silently. The reference is to the skorch net, not its module_:
            # pickle and deepcopy keep its identity within the router.
            what, keep = self._embedder_described("fits")
            raise ValueError(
                f"{what} was refitted after the router was fitted: the router's "
                "model_embeddings_ come from the network it had then, and the new "
                "network would read them as its own, predicting for neither. "
                "Refit the router (router.fit(evals)) to embed its pool with the "
                f"new network.{keep}"
            )
        return locus

    def _embedder_described(self, changes):
        """(what, keep): the router's embedder named for an error, and, for a
        frozen (shared) one, how to keep a router apart from later
        ``changes`` of it."""
        if not isinstance(self.embedder_, FrozenEstimator):
            return "This router's embedder_", ""
        what = (
            "The LocusEmbedder wrapped in this router's FrozenEstimator "
            "(shared with the caller, not copied)"
        )
        keep = (
            f" To keep a router apart from later {changes} of its embedder, "
            "wrap a copy: LocusRouter(FrozenEstimator(copy.deepcopy(embedder)))."
        )
        return what, keep

    def _check_embedding_settings(self):
        """Refuse to embed models (``add_models``, ``embed``) or to save where
        the embedder's :data:`_EMBEDDING_SETTINGS` are no longer those the pool
        was embedded with.

        ``refine_steps`` and the others are run-time settings, so the shared
        embedder of a FrozenEstimator (or ``embedder_``) can be given others
        after the router's fit, e.g. ``set_params(refine_steps=10)`` to switch
        refinement on: ``add_models`` then embedded the new models refined
        beside a pool embedded unrefined, with no error, and ``save`` stored
        the new settings with the old pool (a loaded router could not tell).
        Predictions read the stored embeddings, which these settings do not
        touch: they are not refused (unlike a refitted network, which
        ``_fitted_locus`` refuses everywhere, as it reads them itself).

        A router without the record (unpickled from an earlier version) is
        not checked: what its pool was embedded with is unknown. ``load``
        records the settings saved with the embedder, which ``save`` checked.
        """
        fitted = getattr(self, "_embedding_settings_at_fit_", None)
        if fitted is None:
            return
        current = _embedding_settings(self._fitted_locus())
        changed = [
            name
            for name in _EMBEDDING_SETTINGS
            if name in fitted and current[name] != fitted[name]
        ]
        if not (fitted.get("refine_steps") or current["refine_steps"]):
            # Unrefined before and now: the prior is read by the refinement only.
            changed = [name for name in changed if name != "refine_prior"]
        if not changed:
            return
        what, keep = self._embedder_described("changes")
        now, then = _settings_text(current, changed), _settings_text(fitted, changed)
        raise ValueError(
            f"{what} has {now} set after the router was fitted, but the router's "
            f"model_embeddings_ were made with {then}: add_models and embed would "
            f"embed models with {now} beside a pool embedded with {then}, and save "
            "would store the one with the other. Refit the router "
            f"(router.fit(evals)) to embed its whole pool with {now}, or set the "
            f"embedder back with set_params({then}).{keep}"
        )

    def _query_encoder(self):
        # fit's first use of the embedder: a wrong kind is refused here.
        _check_embedder_type(self.embedder)
        if isinstance(self.embedder, FrozenEstimator):
            check_is_fitted(self.embedder.estimator)
            return self.embedder.estimator.encoder_
        embedder = LocusEmbedder() if self.embedder is None else self.embedder
        # Checked as LocusEmbedder.fit checks them, before the encoder loads
        # and every query is encoded, not after.
        embedder._validate_params()
        embedder._check_structure(check_import=True)
        embedder._check_training()
        return embedder._query_encoder()

    def get_params(self, deep=True):
        params = super().get_params(deep=deep)
        if deep and self.embedder is None:
            # None means LocusEmbedder() with its defaults: its parameters are
            # reported, and set_params can set them (GridSearchCV's
            # "embedder__<name>"), as for an embedder given explicitly.
            params.update(
                (f"embedder__{name}", value)
                for name, value in LocusEmbedder().get_params(deep=False).items()
            )
        return params

    def _get_params_html(self, deep=True, doc_link=""):
        # The HTML repr's parameter table. scikit-learn's is deep for an
        # estimator without an estimator parameter (here embedder=None), and
        # marks every parameter not of __init__ as set by the user: the
        # defaults get_params adds for None were 39 rows highlighted as
        # changed. They are LocusEmbedder()'s defaults, none of them set.
        if self.embedder is None:
            deep = False
        return super()._get_params_html(deep, doc_link)

    def set_params(self, **params):
        nested = any(name.startswith("embedder__") for name in params)
        if nested and params.get("embedder", self.embedder) is None:
            # A fresh default embedder to set them on (a default instance
            # shared between routers would carry one router's settings to
            # another), also where embedder=None is given with them, as
            # get_params(deep=True) returns it and a grid may list it: None
            # means LocusEmbedder() with its defaults.
            params["embedder"] = LocusEmbedder()
        return super().set_params(**params)

    def _fit_encoded(self, table, X_query, encoder, model_costs=None):
        # A model with one evaluation cannot be trained on (the embedder
        # needs one to encode and one to predict), and its one row would be
        # no held-out evidence for the shrinkage choice: the pool is fitted
        # without such models, which are then added as add_models adds them,
        # so that fit(evals) is fit(evals of the others) + add_models(their
        # rows), with a frozen embedder too.
        thin = np.diff(table.indptr) < 2
        if not thin.any():
            return self._fit_pool(table, X_query, encoder, model_costs)
        if thin.all():
            raise ValueError(
                "LocusRouter needs at least one model with 2 or more evaluations "
                "(one to encode, one to predict) to fit on; models with 1 are added "
                f"to that pool as add_models adds them. All {table.n_models} "
                f"model(s) of evals have 1: {_preview(table.models)}. Give at "
                "least one model evaluations on 2 distinct queries."
                f"{averaged_pairs_note(table)}"
            )
        trained, X_trained = _rows_of(table, X_query, ~thin)
        added, X_added = _rows_of(table, X_query, thin)
        costs, added_costs = None, None
        if model_costs is not None:
            costs = model_costs[~thin]
            added_costs = dict(zip(added.models, model_costs[thin], strict=True))
        fitted = self._fit_pool(trained, X_trained, encoder, costs)
        # Added on a copy holding that fit, through add_models' own steps
        # (embedding, FewEvaluationsWarning, the new-leader warning, merged
        # stored evaluations): a failure or a warning turned into an error
        # leaves this router as it was, as fit promises.
        pool = copy.copy(self)
        vars(pool).update(
            fitted,
            encoder_=encoder,
            n_query_features_=X_query.shape[1],
            classes_=trained.models.copy(),
            model_costs_=costs,
            _kept_columns=None,
        )
        pool._add_table(added, added_costs, X_query=X_added)
        # classes_ (the union, sorted) is table.models, which fit sets.
        for name in ("model_embeddings_", "model_mean_scores_", "pool_evals_"):
            fitted[name] = getattr(pool, name)
        return fitted

    def _fit_pool(self, table, X_query, encoder, model_costs=None):
        """The fitted attributes of a pool whose models all have at least 2
        evaluations (``_fit_encoded``'s)."""
        # Every result is kept aside and returned for BaseRouter.fit to set
        # with the pool in one step: the warnings below (errors under
        # ``pytest -W error``) and the shrinkage choice (five more embeddings,
        # where an interrupt most likely lands) may still raise after
        # training, and a router set as it went was left half-fitted (a first
        # fit: check_is_fitted passed, predict failed; a refit: the new
        # network served the old pool).
        _check_embedder_type(self.embedder)
        embedder = LocusEmbedder() if self.embedder is None else clone(self.embedder)
        locus = _unwrap(embedder)
        if isinstance(embedder, FrozenEstimator):
            # Fitted elsewhere: its settings may have been set after its fit.
            _check_fitted_embedder(locus)
        else:
            locus._fit_encoded(table, X_query, encoder, check_collapse=True)
        # Each model is embedded from its evaluations, as transform embeds
        # them, and warned of as transform warns (training itself does not:
        # it caps its sets to a model's rows).
        locus._warn_few_evaluations(table)
        model_embeddings = locus._transform_encoded(table, X_query)
        means = mean_scores(table)
        scores = {}
        if self.shrinkage == "auto":
            # With costs, P(correct) is traded against cost query by query;
            # at s = 1 no query differs from another, and the cost weight
            # could only move whole traffic from one model to another.
            grid = [s for s in SHRINKAGE_GRID if model_costs is None or s < 1]
            shrinkage, scores = choose_shrinkage(
                locus, table, X_query, grid=grid, model_costs=model_costs,
                cost_weight=self.cost_weight, n_repeats=self.shrinkage_repeats,
            )  # fmt: skip
        else:
            shrinkage = float(self.shrinkage or 0.0)
        self._warn_thin_leader(
            table.models, table.models, np.diff(table.indptr),
            means=means, shrinkage=shrinkage, locus=locus,
        )  # fmt: skip
        return {
            "embedder_": embedder,
            # The network the pool is embedded with: a later refit of the
            # embedder (shared, where it is frozen) is refused by _fitted_locus.
            "_network_at_fit_": locus.net_,
            # And the settings: _check_embedding_settings refuses others.
            "_embedding_settings_at_fit_": _embedding_settings(locus),
            "model_embeddings_": model_embeddings,
            # The kernel readout reads the pool's evaluations at prediction.
            "pool_evals_": (X_query, table) if locus.kernel_readout else None,
            "model_mean_scores_": means,
            "shrinkage_": shrinkage,
            "shrinkage_scores_": scores,
            # The previous fit's readout view held its network and whole pool
            # alive until the next prediction.
            "_readout_cache": None,
        }

    def _predict_proba_encoded(self, X):
        # Checked also where shrinkage_ is 1 and the network is not read: a
        # router whose embedder was refitted fails alike at every setting.
        locus = self._fitted_locus()
        if self.shrinkage_ == 1:
            # The blend is each model's mean score whatever the network says:
            # skip the network (and the kernel readout over the pool).
            means = self.model_mean_scores_.astype(np.float32)
            return np.tile(means, (len(X), 1))
        proba = locus._predict_proba_encoded(
            self.model_embeddings_, X, self._readout_pool()
        )
        return shrink(proba, self.model_mean_scores_, self.shrinkage_)

    def _readout_pool(self):
        """The kernel readout's view of ``pool_evals_`` (None without the
        readout), built on first use and kept while the pool and the network
        are the same objects: ``fit``, ``add_models``, ``remove_models`` and
        ``load`` replace ``pool_evals_`` (and the first two and ``load`` the
        network), so a kept one is never stale."""
        # Read once: an add_models in another thread may replace pool_evals_
        # while the view is built, and a view of the old pool kept under the
        # new one's key would be served, stale, from then on.
        pool_evals = self.pool_evals_
        if pool_evals is None:
            return None
        locus = self._fitted_locus()
        module = locus.net_.module_
        cached = getattr(self, "_readout_cache", None)
        if cached is None or cached[0] is not pool_evals or cached[1] is not module:
            pool = locus._readout_pool(*pool_evals)
            cached = self._readout_cache = (pool_evals, module, pool)
        return cached[2]

    def _drop_readout_cache(self):
        """Forget the readout view of a replaced pool: never served (it is
        keyed by the pool's identity), but it held the old pool's encodings
        and tables alive until the next prediction."""
        self.__dict__.pop("_readout_cache", None)

    def __getstate__(self):
        # The readout cache is derived data: rebuilt on first use, never pickled.
        state = dict(super().__getstate__())  # a copy: never edit __dict__
        state.pop("_readout_cache", None)
        return state

    def add_models(self, evals, *, model_costs=None):
        """Embed new models, or refresh existing ones, with no training.

        Each model of ``evals`` is embedded from all of its rows there: a new
        model joins the pool; an existing one gets a fresh embedding (pass
        every evaluation it should be built from, old and new). Every other
        row of ``model_embeddings_`` stays bit-for-bit unchanged.

        The pool changes in place: do not predict from another thread
        meanwhile; change a copy and swap it in instead (the Onboarding page
        of the user guide).

        Parameters
        ----------
        evals : DataFrame or mapping of columns
            Evaluations of the models to add or refresh.
        model_costs : mapping of str to float, default=None
            Costs of the models in ``evals``, by model name (a dict, or a
            pandas Series indexed by model name; a list or an array is
            refused, as its order could be read two ways); required for new
            models when the router has costs. It replaces the cost of each
            existing model it names; a refreshed model it does not name (every
            one, when it is omitted) keeps its cost. Names of models that are
            not in ``evals`` are refused.

        Returns
        -------
        self : LocusRouter
        """
        check_is_fitted(self)
        if model_costs is not None and not isinstance(model_costs, Mapping | pd.Series):
            # An array would be read in sorted-name order, which a caller
            # listing costs in the order of evals would not notice.
            raise TypeError(
                "model_costs must be a mapping of model name to cost (or a pandas "
                f"Series indexed by model name); got {type(model_costs).__name__}. "
                "add_models reads each model's cost by its name, which an array or "
                "a list does not hold: pass dict(zip(names, costs))."
            )
        self._add_table(check_evals(evals), model_costs)
        return self

    def _add_table(self, table, model_costs, X_query=None):
        """``add_models`` of a validated ``table`` (``X_query``: the encodings
        of its queries, where already made); also ``fit``'s for the models
        with one evaluation."""
        is_new = ~np.isin(table.models, self.classes_)
        if model_costs is not None and self.model_costs_ is not None:
            model_costs = self._keep_refreshed_costs(model_costs, table.models)
        new_costs = check_model_costs(model_costs, table.models, models="evals")
        if self.model_costs_ is not None and new_costs is None and is_new.any():
            raise ValueError(
                f"The router has model costs, so the {int(is_new.sum())} new model(s) "
                f"{_preview(table.models[is_new])} need costs: pass model_costs=."
            )
        if self.model_costs_ is None and new_costs is not None:
            raise ValueError(
                "model_costs were given, but the router was fitted without costs; "
                "refit with model_costs= for the whole pool."
            )
        X_query, embeddings = self._embed_table(table, X_query)
        classes = np.union1d(self.classes_, table.models).astype(object)
        old_at = np.searchsorted(classes, self.classes_)
        new_at = np.searchsorted(classes, table.models)

        def merged(old, new):
            """Per-model rows of the new pool: ``old`` rows, then ``new`` ones
            (None keeps the old rows of refreshed models)."""
            out = np.empty((len(classes), *old.shape[1:]), dtype=old.dtype)
            out[old_at] = old
            if new is not None:
                out[new_at] = new
            return out

        # Built aside and assigned only once nothing can fail (the merge of
        # the stored evaluations can): a failed call leaves the router as it
        # was, not with a pool its stored evaluations do not match.
        model_embeddings = merged(self.model_embeddings_, embeddings)
        model_mean_scores = merged(self.model_mean_scores_, mean_scores(table))
        model_costs = self.model_costs_
        if model_costs is not None:
            # A refresh without model_costs keeps the models' costs.
            model_costs = merged(model_costs, new_costs)
        pool_evals = self.pool_evals_
        if pool_evals is not None:
            keep = ~np.isin(pool_evals[1].models, table.models)
            pool_evals = self._merged_pool_evals(keep, table, X_query)
        # Warned of before anything is set, as fit does: a warning turned
        # into an error (``pytest -W error``) leaves the router as it was,
        # not with the models added behind an exception.
        self._warn_new_leader(table, classes, model_mean_scores)
        self.model_embeddings_ = model_embeddings
        self.model_mean_scores_ = model_mean_scores
        self.model_costs_ = model_costs
        self.classes_ = classes
        self.pool_evals_ = pool_evals
        self._drop_readout_cache()

    def _keep_refreshed_costs(self, model_costs, models):
        """``model_costs`` (a mapping or a Series, by model name) with the
        current cost of each model of ``models`` already in the pool that it
        does not name: a refreshed model keeps its cost, also in a call that
        gives costs for the new models only. New models and names not in
        ``models`` are left to :func:`check_model_costs` to refuse."""
        # Names read as check_model_costs reads them: a Series by its index.
        named = model_costs.index if isinstance(model_costs, pd.Series) else model_costs
        pool = dict(zip(self.classes_, self.model_costs_.tolist(), strict=True))
        kept = {m: pool[m] for m in models if m in pool and m not in named}
        if not kept:
            return model_costs
        if isinstance(model_costs, pd.Series):
            # Appended, not turned into a dict, so that check_model_costs
            # still sees (and refuses) a repeated or non-name index label. Not
            # by pd.concat, nor with an inferred index: pandas' str dtype
            # refuses a lone surrogate, which model names may hold.
            return pd.Series(
                [*model_costs.array, *kept.values()],
                index=pd.Index([*model_costs.index, *kept], dtype=object),
                dtype=object,
            )
        return {**model_costs, **kept}

    def _warn_new_leader(self, table, classes, means):
        """Warn where, at shrinkage 1, an added or refreshed model takes the
        lead (the pool's highest mean score) from another model: routing then
        sends it every query on its mean over the rows it was added from
        alone, read on other queries than the pool's means. Otherwise, warn
        as ``fit`` does where the pool's highest mean is an added model's
        over fewer than ``enc_size[0]`` evaluations (:meth:`_warn_thin_leader`).

        ``classes`` and ``means`` are the pool after the call, built aside:
        this runs before ``add_models`` sets them, and reads the pool before
        the call from the router."""
        if self.shrinkage_ != 1 or not self._warn_added_mean_tops_pool(
            table, classes, means
        ):
            self._warn_thin_leader(
                classes, table.models, np.diff(table.indptr),
                means=means, shrinkage=self.shrinkage_, locus=self._fitted_locus(),
            )  # fmt: skip

    def _warn_added_mean_tops_pool(self, table, classes, means):
        """At shrinkage 1: warn where the leader after the call (``classes``,
        ``means``) is an added or refreshed model that did not lead before
        it; whether it warned."""
        # The leaders as routing picks them at s = 1 (ties: the first, as
        # argmax). Compared with the pool before the call, not with the other
        # models after it: a leader refreshed from the rows it was fitted on
        # was otherwise told it "now" led, beside a "best before" that never was.
        before = int(np.argmax(self.model_mean_scores_))
        leader = int(np.argmax(means))
        name = classes[leader]
        if name == self.classes_[before] or name not in table.models:
            return False
        n = dict(zip(table.models, np.diff(table.indptr), strict=True))[name]
        warn_external(
            f"{name!r} now has the pool's highest mean score, {means[leader]:.3f} "
            f"over the {n} evaluation(s) it was added from (the best before: "
            f"{self.classes_[before]!r}, {self.model_mean_scores_[before]:.3f}). "
            "With shrinkage_=1, routing sends it every query (cost aside) on "
            "that mean alone, taken "
            "on other queries than the pool's means: add it from "
            "evaluations spread over the pool's tasks, or route with "
            "shrinkage=None (the plain router) to judge it by its embedding.",
            UserWarning,
        )
        return True

    def _warn_thin_leader(self, classes, models, counts, *, means, shrinkage, locus):
        """Warn where the model with the pool's highest mean score has that
        mean from fewer than ``enc_size[0]`` evaluations while ``shrinkage_``
        blends the means into routing.

        ``classes`` is the pool (in the order of ``means``);
        ``models`` the models whose means were just taken, from ``counts``
        evaluations each: ``fit``'s whole pool, or the models ``add_models``
        added or refreshed (another model's count was judged when it came).
        The mean itself is not changed (a count-adjusted mean would be
        another safeguard); the warning says what routing will do with it.

        ``means``, ``shrinkage`` and ``locus`` (the LocusEmbedder) are the
        router's ``model_mean_scores_``, ``shrinkage_`` and unwrapped
        ``embedder_``, passed rather than read: ``fit`` warns before it sets
        them, so a warning turned into an error leaves no half-fitted router.
        """
        # Any shrinkage above 0, not only 1: in (1 - s) * P + s * mean, the
        # leader loses a query only where another model's P(correct) tops its
        # own by more than s / (1 - s) times the gap between their means, on
        # every query alike; a mean of a few evaluations is far from the
        # others (two scored 1 give 1.0), so the means decide nearly every
        # query long before s = 1. On a 6-model pool (means 0.3 to 0.62) plus
        # a model with 2 evaluations, both scored 1, s = 0.1 already sent it
        # all 118 queries, as s = 1 does; "auto" chose 1 there (its
        # cross-fitted accuracy equal from 0.25 to 1). At s = 0 the means
        # route nothing.
        s = shrinkage
        if not s > 0:
            return
        # The model routing prefers at s = 1 (ties: the first, as argmax).
        leader = int(np.argmax(means))
        name = classes[leader]
        count_of = dict(zip(models, counts, strict=True))
        low = int(locus.enc_size[0])
        if name not in count_of or count_of[name] >= low:
            return
        n = int(count_of[name])
        chosen = ' (chosen by shrinkage="auto")' if self.shrinkage == "auto" else ""
        routes = (
            "routing sends it every query (cost aside) on that mean alone"
            if s == 1
            else f"predict_proba blends that mean into its P(correct) on every "
            f"query with weight {s:g}, which can send it every query (cost aside) "
            "on that mean alone"
        )
        warn_external(
            f"{name!r} has the pool's highest mean score, {means[leader]:.3f}, over "
            f"only {n} evaluation(s), fewer than enc_size[0]={low}. With "
            f"shrinkage_={s:g}{chosen}, {routes}. Give it at least {low} "
            "evaluations spread over the pool's tasks, remove it "
            "(remove_models), or route with shrinkage=None (the plain router).",
            UserWarning,
        )

    def _merged_pool_evals(self, keep, table=None, X_table=None):
        """The new ``pool_evals_``: the kept evaluations, of the old models in
        ``keep``, plus ``table`` (whose query encodings are ``X_table``)."""
        bank, old = self.pool_evals_
        # The readout needs no task labels; one table may have them and the
        # other not (a loaded router keeps none).
        columns = ["model", "query", "score"]
        frames = [old.to_frame().loc[keep[old.model_index], columns]]
        encoding_of = dict(zip(old.queries, bank, strict=True))
        if table is not None:
            frames.append(table.to_frame()[columns])
            encoding_of.update(zip(table.queries, X_table, strict=True))
        merged = check_evals(pd.concat(frames, ignore_index=True))
        encodings = np.stack([encoding_of[q] for q in merged.queries])
        return encodings.astype(np.float32), merged

    def remove_models(self, models):
        """Remove models from the pool.

        The pool changes in place, as with :meth:`add_models`: do not predict
        from another thread meanwhile. With the kernel readout the remaining
        models' P(correct) may change by float32 rounding (the readout's
        product over the pool changes shape; up to 2.4e-7 in small test
        fits), never beyond.

        Parameters
        ----------
        models : iterable of str
            Names of models of the pool (a list, array, set, ...), each once;
            at least one model must remain.

        Returns
        -------
        self : LocusRouter
        """
        drop = self._models_to_remove(models)
        if self.pool_evals_ is not None:
            # The validated mask, not ``models`` itself: a generator is spent
            # by now, and np.isin would take a set as one object.
            removed = self.classes_[drop]
            keep = ~np.isin(self.pool_evals_[1].models, removed)
            self.pool_evals_ = self._merged_pool_evals(keep)
            self._drop_readout_cache()
        self.classes_ = self.classes_[~drop]
        self.model_embeddings_ = self.model_embeddings_[~drop]
        self.model_mean_scores_ = self.model_mean_scores_[~drop]
        if self.model_costs_ is not None:
            self.model_costs_ = self.model_costs_[~drop]
        return self

    def save(self, path, *, include_query_text=True):
        """Save the fitted router to one safetensors file (no pickle).

        The file holds the embedder (weights, hyper-parameters, query encoder
        reference) and the pool: ``classes_``, ``model_embeddings_``,
        ``model_costs_``, ``cost_weight`` and, with the kernel readout,
        ``pool_evals_``: every stored evaluation with its query's encoding
        and, by default, the query's text. The query encoder stored is the
        fitted one (``encoder_``, which predictions use), not an ``encoder``
        set after fit; a precomputed-vector (mapping) encoder is stored with
        its keys, which are query texts too. The parameters that a subclass
        of the router or of its embedder adds are stored where each is None,
        a bool, an int, a float or a str (any other is refused: pickle such a
        router); :meth:`load` restores them, given those classes.

        Parameters
        ----------
        path : str or path-like
        include_query_text : bool, default=True
            False stores a SHA-256 hash of each query in place of its text
            (routing reads only the encodings, so predictions are unchanged)
            and leaves a mapping encoder out of the file: pass it again to
            :meth:`load` (``encoder=``). Use it when prompts must not ship.
        """
        check_is_fitted(self)
        # A NumPy bool (np.True_, e.g. computed from data) too, as every other
        # bool parameter of the package takes; an int is refused.
        if not isinstance(include_query_text, bool | np.bool_):
            raise TypeError(
                f"include_query_text must be True or False; got {include_query_text!r}."
            )
        include_query_text = bool(include_query_text)
        # Settings changed after fit are checked as load checks them: a file
        # written with one that load refuses could not be read back.
        self._validate_params()
        # A positive weight without costs: every predict of the file fails.
        _check_costs_for_weight(self.cost_weight, self.model_costs_)
        locus = self._fitted_locus()
        locus._validate_params()
        locus._check_structure()
        locus._check_fitted_network()
        # The file's embedder is read back as the one the pool was embedded
        # with (load records its settings as such).
        self._check_embedding_settings()
        if isinstance(self.embedder, LocusEmbedder):
            # Its own settings are saved too where set after fit (a clone of
            # the loaded router refits with them).
            self.embedder._validate_params()
            self.embedder._check_structure()
        save_router(self, path, include_query_text=include_query_text)

    @classmethod
    def load(cls, path, *, encoder=None, device=None, embedder_class=LocusEmbedder):
        """Load a router written by :meth:`save`; never unpickles.

        The file holds no code, so the router is built as ``cls`` (the class
        ``load`` is called on) and its embedder as ``embedder_class``, never
        as a class named in the file. The parameters a subclass adds are
        saved, and a file whose router or embedder had other ones than
        these classes have is refused, naming the class it was saved from.

        Parameters
        ----------
        path : str or path-like
        encoder : default=None
            Overrides the saved query encoder; a mapping whose vectors are
            not of the dimension the router was fitted on is refused here.
        device : str, default=None
            Torch device; None uses CUDA when available, else CPU.
        embedder_class : class, default=LocusEmbedder
            :class:`LocusEmbedder` or a subclass of it: the class the file's
            embedder (``embedder_``, and ``embedder``) is built as. Pass the
            subclass the router was fitted with where it adds parameters of
            its own (the file holds their values).

        Returns
        -------
        router : LocusRouter
            Its ``embedder_`` is a fitted :class:`LocusEmbedder`, or, for a
            router fitted on a ``FrozenEstimator``, one wrapping it (its
            ``embedder`` too, as ``fit`` left them). Otherwise its
            ``embedder`` is what it was at :meth:`save`: an unfitted embedder
            with its settings (``embedder__<name>`` set after ``fit``
            included; None as ``LocusEmbedder()``, which it stands for), or
            the fitted embedder frozen after ``fit``. An ``embedder`` that is
            a ``FrozenEstimator`` of another embedder than ``embedder_`` is
            refused by :meth:`save` (the file holds one network).
        """
        if not (
            isinstance(embedder_class, type)
            and issubclass(embedder_class, LocusEmbedder)
        ):
            raise TypeError(
                "embedder_class must be LocusEmbedder or a subclass of it; got "
                f"{embedder_class!r}."
            )
        router = load_router(cls, embedder_class, path, encoder=encoder, device=device)
        # The file records no settings of its own: those of the embedder saved
        # with the pool, which save refuses to store where they differ from
        # the pool's (and which files of versions before refinement lack,
        # loaded as the defaults, unrefined, as their pools were embedded).
        router._embedding_settings_at_fit_ = _embedding_settings(
            _unwrap(router.embedder_)
        )
        return router

    def embed(self, evals):
        """Embeddings of the models of ``evals`` without adding them to the pool.

        Parameters
        ----------
        evals : DataFrame or mapping of columns
            Long-format evaluations (``model``, ``query``, ``score``) of the
            models to embed, in the pool or not; see
            :func:`~locus_sklearn.check_evals`. Each model is embedded from all
            of its rows.

        Returns
        -------
        embeddings : ndarray of shape (n_models, embedding_dim)
            One row per distinct model of ``evals``, in sorted model-name order
            (``check_evals(evals).models``), whatever the order of ``evals``'
            rows; a bare array, so pair its rows with that sorted list, not
            with ``evals["model"].unique()``.

        Examples
        --------
        >>> import numpy as np
        >>> from locus_sklearn import LocusEmbedder, LocusRouter
        >>> from locus_sklearn.datasets import make_model_pool
        >>> pool = make_model_pool(n_models=6, n_queries=200, evals_per_model=100,
        ...                        random_state=0)
        >>> router = LocusRouter(LocusEmbedder(pool.encodings, embedding_dim=16,
        ...                                    n_latents=4, n_blocks=1, n_heads=2,
        ...                                    max_epochs=2, random_state=0))
        >>> router = router.fit(pool.evals)
        >>> evals = pool.evals.sort_values("model", ascending=False)
        >>> list(evals["model"].unique())
        ['fam4-m05', 'fam3-m04', 'fam2-m03', 'fam1-m02', 'fam0-m01', 'fam0-m00']
        >>> embeddings = router.embed(evals)  # rows in sorted model-name order
        >>> embeddings.shape
        (6, 16)
        >>> alone = router.embed(evals[evals["model"] == "fam4-m05"])
        >>> np.allclose(embeddings[-1], alone[0], atol=1e-6)  # evals' first: last row
        True
        """
        check_is_fitted(self)
        return self._embed_table(check_evals(evals))[1]

    def _embed_table(self, table, X_query=None):
        """(query encodings, embeddings) of the models of ``table``; its
        queries are encoded unless ``X_query`` gives their encodings."""
        locus = self._fitted_locus()
        _check_fitted_embedder(locus)
        self._check_embedding_settings()
        locus._warn_few_evaluations(table)
        if X_query is None:
            X_query = self._encode(table.queries)
        return X_query, locus._transform_encoded(table, X_query)
