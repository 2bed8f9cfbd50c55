"""scikit-learn's estimator checks for every estimator that takes array input.

The selectors take an embedding matrix (or a precomputed distance matrix) and
run the whole suite. ``QueryEncoder`` takes text: its tags say so
(``two_d_array=False, string=True``), and ``parametrize_with_checks`` then
yields only ``check_estimator_cloneable``, because every other check fits on
numeric matrices. The API checks that do not depend on the input type run on
it explicitly below. The routers and ``LocusEmbedder`` fit evaluation tables,
not arrays, and their tags say so as ``QueryEncoder``'s do (checked below);
their sklearn integration (clone, GridSearchCV, Pipeline, pickle) is tested
in test_router.py, test_embedder.py and test_baselines.py.
"""

import warnings

import numpy as np
import pytest
import sklearn
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV, KFold, cross_validate
from sklearn.pipeline import Pipeline
from sklearn.utils import estimator_checks
from sklearn.utils.estimator_checks import parametrize_with_checks

from locus_sklearn import (
    BudgetGreedySelector,
    ExpectedAccuracySelector,
    KCenterSelector,
    KMedoidsSelector,
    LocusEmbedder,
    LocusRouter,
    QueryEncoder,
)
from locus_sklearn.baselines import (
    IRTRouter,
    KMeansRouter,
    KNNRouter,
    MatrixFactorizationRouter,
    SingleBestRouter,
)
from locus_sklearn.datasets import make_model_pool

SELECTORS = [
    KCenterSelector(n_select=3),
    KMedoidsSelector(n_select=3),
    KMedoidsSelector(n_select=3, method="pam"),
    BudgetGreedySelector(budget=3.0),
]
PRECOMPUTED = [clone(s).set_params(metric="precomputed") for s in SELECTORS]
MAPPING_ENCODER = QueryEncoder({"q1": np.array([1.0, 0.0]), "q2": np.array([0.6, 0.8])})


def _expected_failed_checks(estimator):
    if getattr(estimator, "metric", None) == "precomputed":
        # check_clustering fits raw (n_samples, 2) features whatever the pairwise
        # tag says; a precomputed selector rightly rejects a non-square matrix.
        return {"check_clustering": "passes features, not a distance matrix"}
    return {}


with warnings.catch_warnings():
    # The SkipTestWarning says what the module docstring says: text input.
    warnings.filterwarnings("ignore", "Can't test estimator QueryEncoder")
    _ESTIMATOR_CHECKS = parametrize_with_checks(
        [
            *SELECTORS,
            *PRECOMPUTED,
            ExpectedAccuracySelector(n_select=3),
            MAPPING_ENCODER,
        ],
        expected_failed_checks=_expected_failed_checks,
    )


# scikit-learn's generic data is no P: later steps of ExpectedAccuracySelector
# often add nothing there (warned).
@pytest.mark.filterwarnings(
    "ignore:Selecting model .* raised the expected accuracy by nothing:UserWarning"
)
@_ESTIMATOR_CHECKS
def test_sklearn_compatible(estimator, check):
    check(estimator)


# Checks of the estimator API that never fit on numeric matrices, so they apply
# to a transformer of text.
TEXT_INPUT_API_CHECKS = [
    "check_estimator_tags_renamed",
    "check_valid_tag_types",
    "check_estimator_repr",
    "check_no_attributes_set_in_init",
    "check_do_not_raise_errors_in_init_or_set_params",
    "check_mixin_order",
    "check_get_params_invariance",
    "check_set_params",
    "check_parameters_default_constructible",
    "check_estimators_unfitted",
    "check_transformers_unfitted",
    "check_get_feature_names_out_error",
]


@pytest.mark.parametrize("check", TEXT_INPUT_API_CHECKS)
def test_query_encoder_api(check):
    getattr(estimator_checks, check)("QueryEncoder", clone(MAPPING_ENCODER))


def test_query_encoder_is_tagged_as_a_text_transformer():
    tags = MAPPING_ENCODER.__sklearn_tags__()
    assert tags.input_tags.string and not tags.input_tags.two_d_array
    encoded = clone(MAPPING_ENCODER).fit().transform(["q2", "q1", "q2"])
    np.testing.assert_allclose(encoded, [[0.6, 0.8], [1.0, 0.0], [0.6, 0.8]])


ROUTERS = [
    LocusRouter(),
    KNNRouter(),
    KMeansRouter(),
    SingleBestRouter(),
    MatrixFactorizationRouter(),
    IRTRouter(),
]


@pytest.mark.parametrize("check", TEXT_INPUT_API_CHECKS)
@pytest.mark.parametrize(
    "estimator", [*ROUTERS, LocusEmbedder()], ids=lambda e: type(e).__name__
)
def test_evaluation_table_estimators_api(estimator, check):
    # The same input-independent API checks as for QueryEncoder (the
    # transformer ones apply to the embedder only).
    if "transformer" in check or "feature_names_out" in check:
        if not hasattr(estimator, "transform"):
            pytest.skip(f"{check} applies to transformers")
    if isinstance(estimator, LocusEmbedder) and check in {
        # predict_proba(embeddings, queries) takes two arguments, the check
        # calls it with one; the names locus0, ... follow embedding_dim and
        # are given before fit (transform's unfitted error is checked).
        "check_estimators_unfitted",
        "check_get_feature_names_out_error",
    }:
        pytest.skip(f"{check}: not this estimator's API")
    getattr(estimator_checks, check)(type(estimator).__name__, clone(estimator))


@pytest.mark.parametrize("router", ROUTERS, ids=lambda router: type(router).__name__)
def test_routers_are_tagged_for_text_input_as_the_embedder_is(router):
    # Routers inherited BaseEstimator's numeric-matrix input tags although
    # they fit on the same table of strings as LocusEmbedder.
    embedder = LocusEmbedder().__sklearn_tags__().input_tags
    tags = router.__sklearn_tags__().input_tags
    assert (tags.two_d_array, tags.string) == (False, True)
    assert (tags.two_d_array, tags.string) == (embedder.two_d_array, embedder.string)
    estimator_checks.check_valid_tag_types(type(router).__name__, router)


# Routers and LocusEmbedder take their data as evals / queries / embeddings,
# not X: scikit-learn's metadata routing listed these as metadata to route.
ROUTABLE_METADATA = {"fit": {"model_costs": None}, "predict": {"models": None}}


@pytest.mark.parametrize(
    "estimator, expected",
    [*[(router, ROUTABLE_METADATA) for router in ROUTERS], (LocusEmbedder(), {})],
    ids=lambda e: type(e).__name__ if hasattr(e, "fit") else "",
)
def test_metadata_routing_offers_metadata_not_data(estimator, expected):
    with sklearn.config_context(enable_metadata_routing=True):
        estimator = clone(estimator)
        assert estimator.get_metadata_routing()._serialize() == expected
        for method, data in [
            ("fit", "evals"),
            ("score", "evals"),
            ("predict", "queries"),
            ("predict_proba", "queries"),
            ("transform", "evals"),
        ]:
            setter = getattr(estimator, f"set_{method}_request", None)
            if setter is not None:
                with pytest.raises(TypeError, match="Unexpected args"):
                    setter(**{data: True})


def test_model_costs_and_models_are_routed_through_meta_estimators():
    pool = make_model_pool(
        n_models=4, n_queries=60, n_families=2, evals_per_model=40, random_state=0
    )
    costs = dict(zip(pool.models["model"], [1.0, 2.0, 3.0, 4.0], strict=True))
    with sklearn.config_context(enable_metadata_routing=True):
        # cost_weight > 0: fit raises unless the costs reach the router.
        router = (
            KNNRouter(k=5, encoder=pool.encodings, cost_weight=0.1)
            .set_fit_request(model_costs=True)
            .set_predict_request(models=True)
        )
        pipe = Pipeline([("router", router)]).fit(pool.evals, model_costs=costs)
        np.testing.assert_array_equal(pipe[-1].model_costs_, [1.0, 2.0, 3.0, 4.0])
        queries = list(pool.encodings)[:5]
        only = [pipe[-1].classes_[2]]
        assert (pipe.predict(queries, models=only) == only[0]).all()

        result = cross_validate(
            router,
            pool.evals,
            cv=KFold(3, shuffle=True, random_state=0),
            params={"model_costs": costs},
            return_estimator=True,
            error_score="raise",
        )
        for fitted in result["estimator"]:
            np.testing.assert_array_equal(fitted.model_costs_, [1.0, 2.0, 3.0, 4.0])

        search = GridSearchCV(
            router, {"k": [3, 5]}, cv=KFold(3, shuffle=True, random_state=0)
        )
        search.fit(pool.evals, model_costs=costs)
        np.testing.assert_array_equal(
            search.best_estimator_.model_costs_, [1.0, 2.0, 3.0, 4.0]
        )


def test_the_package_loads_its_public_names_on_first_use():
    # `import locus_sklearn` loads no torch (the `locus` script's Ctrl-C
    # handler depends on it; test_cli.py); every public name still resolves,
    # is listed by dir() and by a star import, and an unknown one is an
    # AttributeError naming it.
    import locus_sklearn

    namespace = {}
    exec("from locus_sklearn import *", namespace)
    public = sorted(set(namespace) - {"__builtins__"})
    assert public == sorted(locus_sklearn.__all__)
    assert {*locus_sklearn._PUBLIC, "__version__"} == set(public)
    assert set(public) <= set(dir(locus_sklearn))
    for name in public:
        value = getattr(locus_sklearn, name)
        if name != "__version__":
            assert value.__module__.startswith("locus_sklearn."), name
            assert value.__name__ == name
    with pytest.raises(AttributeError, match="has no attribute 'LocusRuoter'"):
        locus_sklearn.LocusRuoter  # noqa: B018
