"""Cross-validating onboarding: ModelGroupSplit and make_onboarding_scorer."""

import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone
from sklearn.model_selection import (
    GridSearchCV,
    GroupKFold,
    cross_val_score,
    cross_validate,
)

from locus_sklearn import LocusRouter
from locus_sklearn.datasets import make_model_pool
from locus_sklearn.metrics import correctness_accuracy
from locus_sklearn.model_selection import ModelGroupSplit, make_onboarding_scorer

POOL = make_model_pool(n_models=8, n_queries=200, evals_per_model=100, random_state=0)
EVALS = POOL.evals


@pytest.fixture
def tiny_router(tiny_embedder):
    """Factory of unfitted routers on POOL: ``tiny_router(**router_params)``."""

    def make(**params):
        embedder = tiny_embedder(POOL.encodings, max_epochs=2)
        return LocusRouter(embedder).set_params(**params)

    return make


def test_folds_partition_the_models():
    cv = ModelGroupSplit(n_splits=3, n_onboard=40, random_state=1)
    assert cv.get_n_splits() == 3
    held = []
    for train, test in cv.split(EVALS):
        assert np.array_equal(
            np.sort(np.concatenate([train, test])), np.arange(len(EVALS))
        )
        train_models = set(EVALS["model"].iloc[train])
        test_models = set(EVALS["model"].iloc[test])
        assert not train_models & test_models
        held += sorted(test_models)
    assert sorted(held) == sorted(EVALS["model"].unique())
    # Deterministic: the same folds on every call.
    again = [test.tolist() for _, test in cv.split(EVALS)]
    assert again == [test.tolist() for _, test in cv.split(EVALS)]


def test_onboarding_rows_are_n_onboard_queries_per_model_whatever_the_order():
    cv = ModelGroupSplit(n_splits=2, n_onboard=30, random_state=0)
    # Duplicate (model, query) rows go together.
    X = pd.concat([EVALS, EVALS.iloc[:5]], ignore_index=True)
    onboard, score = cv.onboarding_split(X)
    assert np.array_equal(np.sort(np.concatenate([onboard, score])), np.arange(len(X)))
    on, sc = X.iloc[onboard], X.iloc[score]
    assert on.groupby("model")["query"].nunique().eq(30).all()
    pairs = set(zip(on["model"], on["query"], strict=True))
    assert not pairs & set(zip(sc["model"], sc["query"], strict=True))
    # Independent of row order and of the other models in the table.
    shuffled = X.sample(frac=1.0, random_state=3)
    on_shuffled = shuffled.iloc[cv.onboarding_split(shuffled)[0]]
    assert set(zip(on_shuffled["model"], on_shuffled["query"], strict=True)) == pairs
    one = X[X["model"] == X["model"].iloc[0]]
    on_one = one.iloc[cv.onboarding_split(one)[0]]
    assert set(zip(on_one["model"], on_one["query"], strict=True)) <= pairs
    # Another seed, another choice.
    other = ModelGroupSplit(n_splits=2, n_onboard=30, random_state=1)
    on_other = X.iloc[other.onboarding_split(X)[0]]
    assert set(zip(on_other["model"], on_other["query"], strict=True)) != pairs


def test_scores_equal_a_hand_rolled_onboarding_loop(tiny_router):
    router = tiny_router()
    cv = ModelGroupSplit(n_splits=3, n_onboard=40, random_state=0)
    scores = cross_val_score(router, EVALS, cv=cv, scoring=make_onboarding_scorer(cv))
    assert scores.shape == (3,) and np.isfinite(scores).all()
    expected = []
    for train, test in cv.split(EVALS):
        fitted = clone(router).fit(EVALS.iloc[train])
        held_out = EVALS.iloc[test]
        onboard, score = cv.onboarding_split(held_out)
        fitted.add_models(held_out.iloc[onboard])
        rows = held_out.iloc[score]
        queries = np.unique(rows["query"])
        dense = (
            rows.pivot_table(index="query", columns="model", values="score")
            .reindex(index=queries, columns=fitted.classes_)
            .to_numpy()
        )
        expected.append(correctness_accuracy(dense, fitted.predict_proba(queries)))
    np.testing.assert_allclose(scores, expected, rtol=0, atol=1e-12)
    # Grouping the router's own score by model cannot work: all NaN (the
    # reason for this module).
    with pytest.warns(UserWarning):
        nan_scores = cross_val_score(
            router, EVALS, cv=GroupKFold(2), groups=EVALS["model"], error_score=np.nan
        )
    assert np.isnan(nan_scores).all()


def test_grid_search_with_onboarding_scorer_leaves_routers_untouched(tiny_router):
    cv = ModelGroupSplit(n_splits=2, n_onboard=40, random_state=0)
    search = GridSearchCV(
        tiny_router(),
        {"embedder__query_noise": [0.0, 0.2]},
        cv=cv,
        scoring={
            "correctness": make_onboarding_scorer(cv),
            "routing": make_onboarding_scorer(cv, "routing_accuracy"),
        },
        refit="correctness",
        error_score="raise",
    ).fit(EVALS)
    results = search.cv_results_
    for key in ["mean_test_correctness", "mean_test_routing"]:
        assert np.isfinite(results[key]).all()
        assert ((results[key] >= 0) & (results[key] <= 1)).all()
    # The refit router is fitted on the whole pool; scoring did not add models.
    assert search.best_estimator_.classes_.tolist() == sorted(EVALS["model"].unique())


def test_scorer_does_not_modify_the_router(tiny_router):
    cv = ModelGroupSplit(n_splits=2, n_onboard=40, random_state=0)
    train, test = next(cv.split(EVALS))
    router = tiny_router().fit(EVALS.iloc[train])
    before = router.model_embeddings_.copy()
    score = make_onboarding_scorer(cv)(router, EVALS.iloc[test])
    assert 0 <= score <= 1
    np.testing.assert_array_equal(router.model_embeddings_, before)
    assert len(router.classes_) == len(set(EVALS["model"].iloc[train]))


def test_costs_reach_add_models(tiny_router):
    cv = ModelGroupSplit(n_splits=2, n_onboard=40, random_state=0)
    train, test = next(cv.split(EVALS))
    train_evals = EVALS.iloc[train]
    router = tiny_router(cost_weight=0.001).fit(
        train_evals, model_costs={m: POOL.n_params[m] for m in train_evals["model"]}
    )
    # add_models' own messages ("pass model_costs=", "refit with model_costs=")
    # named a method the user never called: the costs are the scorer's.
    held_out = sorted(set(EVALS["model"].iloc[test]))
    with pytest.raises(
        ValueError,
        match=rf"fitted with model costs, so the {len(held_out)} held-out model\(s\) "
        rf"\['{held_out[0]}'.* need costs too: pass model_costs= \(costs by model "
        r"name\) to make_onboarding_scorer\.$",
    ):
        make_onboarding_scorer(cv, "routing_accuracy")(router, EVALS.iloc[test])
    with pytest.raises(ValueError, match="no cost for"):
        make_onboarding_scorer(cv, model_costs={"x": 1.0})(router, EVALS.iloc[test])
    scorer = make_onboarding_scorer(cv, "routing_accuracy", model_costs=POOL.n_params)
    assert 0 <= scorer(router, EVALS.iloc[test]) <= 1
    # Costs for a router fitted without them.
    plain = tiny_router().fit(train_evals)
    with pytest.raises(
        ValueError,
        match=r"^make_onboarding_scorer was given model_costs, but the router was "
        r"fitted without costs: drop model_costs from make_onboarding_scorer, or "
        r"fit the router with model_costs=\.$",
    ):
        scorer(plain, EVALS.iloc[test])


def test_errors(tiny_router):
    with pytest.raises(ValueError, match="n_splits must be an int >= 2"):
        ModelGroupSplit(n_splits=1)
    with pytest.raises(ValueError, match="n_onboard must be an int >= 1"):
        ModelGroupSplit(n_onboard=0)
    with pytest.raises(TypeError, match="random_state must be an int"):
        ModelGroupSplit(random_state=None)
    with pytest.raises(
        ValueError, match=r"n_splits=9 should be <= the number of models, 8"
    ):
        next(ModelGroupSplit(n_splits=9, n_onboard=10).split(EVALS))
    with pytest.raises(
        ValueError, match=r"n_onboard=128 leaves no rows to score 8 model"
    ):
        next(ModelGroupSplit(n_splits=2).split(EVALS))
    with pytest.raises(ValueError, match="missing required column"):
        next(ModelGroupSplit(n_splits=2).split(EVALS[["model", "query"]]))
    cv = ModelGroupSplit(n_splits=2, n_onboard=40)
    with pytest.raises(TypeError, match="cv must be a ModelGroupSplit"):
        make_onboarding_scorer(GroupKFold(2))
    with pytest.raises(ValueError, match="metric='accuracy' is not a router scorer"):
        make_onboarding_scorer(cv, "accuracy")
    router = tiny_router().fit(EVALS)
    with pytest.raises(ValueError, match="8 model.*in its pool"):
        make_onboarding_scorer(cv)(router, EVALS)
    with pytest.raises(TypeError, match="needs a router with add_models"):
        make_onboarding_scorer(cv)(object(), EVALS)
    assert repr(cv) == "ModelGroupSplit(n_onboard=40, n_splits=2, random_state=0)"


@pytest.mark.parametrize(
    "params, message",
    [
        ({"n_splits": 2.0}, r"n_splits must be an int >= 2; got 2.0 \(float\)"),
        ({"n_onboard": "10"}, r"n_onboard must be an int >= 1; got '10' \(str\)"),
        ({"n_splits": True}, r"n_splits must be an int >= 2; got True \(bool\)"),
        # None is a valid random_state of sklearn's splitters, not here: the
        # onboarding rows must be the same on every call.
        (
            {"random_state": None},
            r"random_state must be an int >= 0; got None .* same on every call",
        ),
    ],
)
def test_split_parameters_of_the_wrong_type(params, message):
    # A float or None raised ValueError, where the library raises TypeError.
    with pytest.raises(TypeError, match=message):
        ModelGroupSplit(**params)


def test_onboarding_scorer_metric_of_the_wrong_type():
    # A list is unhashable: the lookup raised a bare "unhashable type: 'list'".
    cv = ModelGroupSplit(n_splits=2, n_onboard=40)
    with pytest.raises(TypeError, match=r"metric must be a str, one of \[.*\]; got"):
        make_onboarding_scorer(cv, metric=["routing_accuracy"])


@pytest.mark.parametrize(
    "model_costs, error, message",
    [
        ({"a": -1.0}, ValueError, r"model_costs must be finite and >= 0.*'a', -1.0"),
        ({"a": float("nan")}, ValueError, "model_costs must be finite and >= 0"),
        ({"a": "1.5"}, TypeError, "model_costs must hold real numbers"),
        ({"a": True}, TypeError, "model_costs must hold real numbers"),
        ({1: 1.0}, TypeError, r"keyed \(or indexed\) by model name.*\[1\]"),
        ({}, ValueError, "model_costs is empty"),
        ("cheap", TypeError, "model_costs must be a mapping .* got str"),
        # An array holds no names: every model "had no cost" in each fold.
        (np.arange(8.0), TypeError, "model_costs must be a mapping .* got ndarray"),
        (pd.Series([1.0, 2.0]), TypeError, r"by model name.*\[0, 1\]"),
        (pd.Series([1.0, 2.0], index=["a", "a"]), ValueError, r"repeats 1 .*\['a'\]"),
    ],
)
def test_onboarding_scorer_checks_model_costs(model_costs, error, message):
    # Bad costs were accepted and failed only inside each fold's scoring,
    # which cross_val_score turned into NaN scores.
    cv = ModelGroupSplit(n_splits=2, n_onboard=40)
    with pytest.raises(error, match=message):
        make_onboarding_scorer(cv, model_costs=model_costs)


def test_onboarding_scorer_repr_shows_model_costs():
    cv = ModelGroupSplit(n_splits=2, n_onboard=40)
    scorer = make_onboarding_scorer(cv, model_costs=pd.Series({"a": 1, "b": 2.5}))
    assert repr(scorer) == (
        "make_onboarding_scorer(ModelGroupSplit(n_onboard=40, n_splits=2, "
        "random_state=0), metric='correctness_accuracy', "
        "model_costs={'a': 1.0, 'b': 2.5})"
    )
    assert "model_costs" not in repr(make_onboarding_scorer(cv))


def test_train_scores_are_named_as_rows_the_scorer_cannot_score(tiny_router):
    """With return_train_score=True the scorer is called on the training rows
    and failed with "... Split with ModelGroupSplit." although cv was one."""
    cv = ModelGroupSplit(n_splits=2, n_onboard=40, random_state=0)
    scorer = make_onboarding_scorer(cv)
    train, test = next(cv.split(EVALS))
    router = tiny_router(shrinkage=None).fit(EVALS.iloc[train])
    message = (
        r"every model of X \(4 model\(s\): .*\) is in its pool: it cannot score "
        r"the rows of the fitted models, such as the training rows that "
        r"return_train_score=True scores \(use return_train_score=False\)"
    )
    with pytest.raises(ValueError, match=message):
        scorer(router, EVALS.iloc[train])
    # Rows of fitted and held-out models together: a split that is not by model.
    fitted, held_out = EVALS["model"].iloc[train[0]], EVALS["model"].iloc[test[0]]
    mixed = EVALS[EVALS["model"].isin([fitted, held_out])]
    with pytest.raises(ValueError, match="1 model.*in its pool.*Split with Model"):
        scorer(router, mixed)
    with pytest.raises(ValueError, match=message):
        cross_validate(
            tiny_router(shrinkage=None), EVALS, cv=cv, scoring=scorer,
            return_train_score=True, error_score="raise",
        )  # fmt: skip


def test_onboarding_scorer_needs_a_fitted_router():
    # It read classes_ first and raised AttributeError.
    from sklearn.exceptions import NotFittedError

    scorer = make_onboarding_scorer(ModelGroupSplit(n_splits=2, n_onboard=20))
    with pytest.raises(NotFittedError, match="LocusRouter instance is not fitted"):
        scorer(LocusRouter(), EVALS)
