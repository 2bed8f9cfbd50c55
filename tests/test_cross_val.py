"""cross_val_predict_proba: out-of-fold P(correct) on a router's own queries,
and the cost calibration that reads it."""

import numpy as np
import pandas as pd
import pytest
import torch
from sklearn.frozen import FrozenEstimator
from sklearn.model_selection import (
    GroupKFold,
    KFold,
    LeaveOneGroupOut,
    PredefinedSplit,
    ShuffleSplit,
    StratifiedKFold,
)

from locus_sklearn import LocusRouter
from locus_sklearn.baselines import KNNRouter
from locus_sklearn.inspection import calibrate_cost_weight, cost_quality_curve
from locus_sklearn.model_selection import ModelGroupSplit, cross_val_predict_proba
from locus_sklearn.model_selection._cross_val import out_of_fold_proba

# Four queries in two pairs of near neighbours (q1 ~ q3, q2 ~ q4); KFold(2)
# over the sorted queries holds out q1, q2 and then q3, q4, so each query's
# nearest training query is its pair's other member.
ENCODER = {"q1": [1.0, 0.0], "q2": [0.0, 1.0], "q3": [1.0, 0.1], "q4": [0.1, 1.0]}
QUERIES = ["q1", "q2", "q3", "q4"]
# big is always right; small is right on q1 and q4 only, so its neighbour's
# answer is always the opposite of its own.
EVALS = pd.DataFrame(
    {
        "model": ["big"] * 4 + ["small"] * 4,
        "query": QUERIES * 2,
        "score": [1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 1.0],
    }
)
COSTS = {"big": 10.0, "small": 1.0}


@pytest.fixture
def knn():
    return KNNRouter(1, encoder=ENCODER).fit(EVALS, model_costs=COSTS)


def test_out_of_fold_probabilities_by_hand(knn):
    np.testing.assert_array_equal(knn.predict_proba(QUERIES)[:, 1], [1, 0, 0, 1])
    proba = cross_val_predict_proba(knn, EVALS, cv=KFold(2))
    np.testing.assert_array_equal(proba, [[1, 0], [1, 1], [1, 1], [1, 0]])
    # The same folds given as a splitter of another kind.
    fold = PredefinedSplit([0, 0, 1, 1])
    np.testing.assert_array_equal(cross_val_predict_proba(knn, EVALS, cv=fold), proba)
    # An int: shuffled KFold; a 4-fold split leaves each query its pair's
    # other member among the training queries, as above.
    np.testing.assert_array_equal(cross_val_predict_proba(knn, EVALS, cv=4), proba)
    # The router itself is not changed.
    np.testing.assert_array_equal(knn.predict_proba(QUERIES)[:, 1], [1, 0, 0, 1])


def test_cost_curve_with_cv_routes_by_the_out_of_fold_proba(knn):
    # In the middle interval of λ (0 < λ < 1/9) small takes the queries where
    # its P(correct) is 1. In-sample that is where it is right (q1, q4:
    # accuracy 1); out of fold, where it is wrong (q2, q3: accuracy 0.5).
    middle = cost_quality_curve(knn, EVALS).points.iloc[1]
    assert (middle["mean_cost"], middle["accuracy"]) == (5.5, 1.0)
    curve = cost_quality_curve(knn, EVALS, cv=KFold(2))
    assert curve.points["mean_cost"].tolist() == [10.0, 5.5, 1.0]
    assert curve.points["accuracy"].tolist() == [1.0, 0.5, 0.5]
    result = calibrate_cost_weight(knn, EVALS, target_cost=6.0, cv=KFold(2))
    assert (result.mean_cost, result.accuracy) == (5.5, 0.5)
    # Inside the interval (0, 1/9), at its midpoint.
    assert (result.lower, result.upper) == (0.0, pytest.approx(1 / 9))
    assert result.cost_weight == pytest.approx(1 / 18)


def test_locus_router_folds_reuse_the_trained_network(tiny_embedder):
    from locus_sklearn.datasets import make_model_pool

    pool = make_model_pool(n_models=5, n_queries=120, evals_per_model="all",
                           random_state=0)  # fmt: skip
    router = LocusRouter(tiny_embedder(pool.encodings, max_epochs=2)).fit(
        pool.evals, model_costs=pool.n_params
    )
    weights = {
        k: v.clone()
        for k, v in router._fitted_locus().net_.module_.state_dict().items()
    }
    embeddings = router.model_embeddings_.copy()
    proba = cross_val_predict_proba(router, pool.evals, cv=3)
    # Each fold: the same network, the pool re-embedded from the other folds'
    # rows, the router's shrinkage.
    queries = np.sort(pool.evals["query"].unique())
    expected = np.empty_like(proba)
    for _, held in KFold(3, shuffle=True, random_state=0).split(queries):
        inside = pool.evals[~pool.evals["query"].isin(queries[held])]
        frozen = FrozenEstimator(router.embedder_)
        copy = LocusRouter(frozen, shrinkage=router.shrinkage_).fit(inside)
        expected[held] = copy.predict_proba(queries[held])
    np.testing.assert_allclose(proba, expected, rtol=1e-6)
    # The router's own dtype, not float64.
    assert proba.dtype == router.predict_proba(queries[:2]).dtype == np.float32
    # The same folds as (train, test) pairs of positions in the sorted queries,
    # and by group (each query's task), as sklearn's check_cv accepts them.
    pairs = list(KFold(3, shuffle=True, random_state=0).split(queries))
    np.testing.assert_array_equal(
        cross_val_predict_proba(router, pool.evals, cv=pairs), proba
    )
    task = pool.evals.groupby("query")["task"].first().loc[queries].to_numpy()
    by_task = list(GroupKFold(3).split(queries, groups=task))
    np.testing.assert_array_equal(
        cross_val_predict_proba(
            router, pool.evals, cv=GroupKFold(3), groups=pool.evals["task"]
        ),
        cross_val_predict_proba(router, pool.evals, cv=by_task),
    )
    for key, value in router._fitted_locus().net_.module_.state_dict().items():
        assert torch.equal(value, weights[key])  # not retrained
    np.testing.assert_array_equal(router.model_embeddings_, embeddings)
    # A model whose rows all lie in one fold cannot be embedded without it.
    first = KFold(3, shuffle=True, random_state=0).split(queries)
    fold = queries[next(first)[1]]
    lone = router.classes_[0]
    sparse = pool.evals[(pool.evals["model"] != lone) | pool.evals["query"].isin(fold)]
    with pytest.raises(ValueError, match=f"every evaluation in one fold.*'{lone}'"):
        cross_val_predict_proba(router, sparse, cv=3)
    # A fold of every query leaves nothing to embed from (it was skipped, and
    # its queries reported as in no test fold).
    with pytest.raises(ValueError, match="A test fold holds all 120 queries"):
        cross_val_predict_proba(router, pool.evals, cv=_Everything())


def test_cv_takes_what_check_cv_takes(knn, pool):
    # Iterables of (train, test) pairs and None were refused.
    proba = cross_val_predict_proba(knn, EVALS, cv=KFold(2))
    pairs = list(KFold(2).split(QUERIES))
    for cv in (pairs, tuple(pairs), (fold for fold in pairs)):
        np.testing.assert_array_equal(cross_val_predict_proba(knn, EVALS, cv=cv), proba)
    # Lists of positions; an empty test fold holds nothing to predict.
    lists = [([2, 3], [0, 1]), ([0, 1], []), ([0, 1], [2, 3])]
    np.testing.assert_array_equal(cross_val_predict_proba(knn, EVALS, cv=lists), proba)
    # None: 5 folds, as the default, which is KFold shuffled with seed 0.
    router = KNNRouter(3, encoder=pool.encodings).fit(pool.evals)
    five = cross_val_predict_proba(router, pool.evals)
    np.testing.assert_array_equal(
        cross_val_predict_proba(router, pool.evals, cv=None), five
    )
    shuffled = KFold(5, shuffle=True, random_state=0)
    np.testing.assert_array_equal(
        cross_val_predict_proba(router, pool.evals, cv=shuffled), five
    )
    assert five.dtype == router.predict_proba(["q000"]).dtype


def test_groups_are_passed_to_the_splitter(knn):
    # GroupKFold and LeaveOneGroupOut failed: groups could not be given.
    proba = cross_val_predict_proba(knn, EVALS, cv=KFold(2))
    groups = ["x", "x", "y", "y"] * 2  # one per row: q1, q2 in x; q3, q4 in y
    for cv in (LeaveOneGroupOut(), GroupKFold(2)):
        np.testing.assert_array_equal(
            cross_val_predict_proba(knn, EVALS, cv=cv, groups=groups), proba
        )
    # A Series is read by position, as sklearn reads groups.
    series = pd.Series(groups, index=np.arange(8)[::-1])
    np.testing.assert_array_equal(
        cross_val_predict_proba(knn, EVALS, cv=LeaveOneGroupOut(), groups=series),
        proba,
    )
    with pytest.raises(ValueError, match="'groups' parameter should not be None"):
        cross_val_predict_proba(knn, EVALS, cv=GroupKFold(2))
    mixed = ["x", "x", "y", "y", "x", "x", "x", "y"]  # q3 in x and y
    with pytest.raises(
        ValueError,
        match=r"every row of a query the same group .*1 quer\(y/ies\).*"
        r"query 'q3' in groups \['x', 'y'\]",
    ):
        cross_val_predict_proba(knn, EVALS, cv=GroupKFold(2), groups=mixed)
    with pytest.raises(
        ValueError, match=r"one group per row of evals \(8 rows\); got 4"
    ):
        cross_val_predict_proba(knn, EVALS, cv=GroupKFold(2), groups=groups[:4])
    with pytest.raises(ValueError, match="groups must be a 1-D array-like"):
        cross_val_predict_proba(knn, EVALS, cv=GroupKFold(2), groups="x")
    with pytest.raises(ValueError, match=r"groups has 1 missing value"):
        cross_val_predict_proba(
            knn, EVALS, cv=GroupKFold(2), groups=[None, *groups[1:]]
        )


def test_errors_name_the_problem(knn):
    with pytest.raises(ValueError, match=r"cv must be an int in \[2, n_queries=4\]"):
        cross_val_predict_proba(knn, EVALS, cv=1)
    with pytest.raises(ValueError, match=r"n_queries=4\] .*got None \(5 folds\)"):
        cross_val_predict_proba(knn, EVALS, cv=None)
    kinds = "cv must be an int >= 2, None .*, a splitter .* or an iterable of"
    for bad in ("five", 3.0, True):
        with pytest.raises(TypeError, match=f"{kinds} .*; got {bad!r}"):
            cross_val_predict_proba(knn, EVALS, cv=bad)
    with pytest.raises(TypeError, match="got the class KFold, not an instance"):
        cross_val_predict_proba(knn, EVALS, cv=KFold)
    # A splitter that stratifies by y: queries have no target.
    with pytest.raises(ValueError, match=r"cv=StratifiedKFold\(.*\) stratifies by"):
        cross_val_predict_proba(knn, EVALS, cv=StratifiedKFold(2))
    # Iterables: each fold a pair, test folds positions of the sorted queries.
    with pytest.raises(TypeError, match="cv must give .*pairs.*; fold 0 is 3"):
        cross_val_predict_proba(knn, EVALS, cv=[3])
    with pytest.raises(ValueError, match=r"outside \[0, n_queries=4\): \[4, -1\]"):
        cross_val_predict_proba(knn, EVALS, cv=[([0, 1], [2, 3, 4, -1])])
    with pytest.raises(TypeError, match="test fold 0 as array.*integer positions"):
        mask = np.array([True, True, False, False])
        cross_val_predict_proba(knn, EVALS, cv=[(~mask, mask)])
    with pytest.raises(ValueError, match=r"more than one test fold.*\['q2'\]"):
        cross_val_predict_proba(knn, EVALS, cv=[([2, 3], [0, 1]), ([0], [1, 2, 3])])
    with pytest.raises(ValueError, match="more than one test fold"):
        cross_val_predict_proba(
            knn, EVALS, cv=ShuffleSplit(4, test_size=2, random_state=0)
        )
    with pytest.raises(ValueError, match=r"no rows for: \['small'\]"):
        cross_val_predict_proba(knn, EVALS[EVALS["model"] == "big"], cv=2)
    other = EVALS.assign(model=EVALS["model"].replace({"small": "tiny"}))
    with pytest.raises(ValueError, match=r"unknown model.*'tiny'"):
        cross_val_predict_proba(knn, other, cv=2)
    # small answered only q1 and q2: a fold holding both leaves it no rows.
    sparse = EVALS[(EVALS["model"] == "big") | EVALS["query"].isin(["q1", "q2"])]
    with pytest.raises(ValueError, match=r"every evaluation in one fold.*'small'"):
        cross_val_predict_proba(knn, sparse, cv=KFold(2))
    with pytest.raises(ValueError, match="more than one test fold"):
        cross_val_predict_proba(knn, EVALS, cv=_Overlapping())
    with pytest.raises(ValueError, match=r"in no test fold: \['q4'\]"):
        cross_val_predict_proba(knn, EVALS, cv=PredefinedSplit([0, 0, 1, -1]))
    with pytest.raises(TypeError, match="cv=2 refits copies.*queries only"):
        calibrate_cost_weight(knn, QUERIES, target_cost=6.0, cv=2)


class _Everything:
    def split(self, X):
        yield np.array([], dtype=int), np.arange(len(X))


class _Overlapping:
    def split(self, X):
        yield np.array([2, 3]), np.array([0, 1])
        yield np.array([0, 3]), np.array([1, 2])


def test_router_must_be_a_locus_sklearn_router(knn):
    # A FrozenEstimator failed on fit's y; had it run, its no-op fit would
    # have made every out-of-fold prediction in-sample.
    with pytest.raises(
        TypeError,
        match=r"router must be a fitted locus_sklearn router, not a "
        r"FrozenEstimator \(wrapping KNNRouter\).*router\.estimator",
    ):
        cross_val_predict_proba(FrozenEstimator(knn), EVALS, cv=KFold(2))
    # cost_quality_curve(cv=...) reads the out-of-fold P(correct) the same way.
    with pytest.raises(TypeError, match="not a FrozenEstimator"):
        cost_quality_curve(FrozenEstimator(knn), EVALS, cv=KFold(2))
    # Another fitted estimator raised AttributeError (classes_, model_costs_).
    from sklearn.dummy import DummyClassifier

    other = DummyClassifier().fit([[0.0], [1.0]], [0, 1])
    with pytest.raises(
        TypeError,
        match=r"router must be a fitted locus_sklearn router \(a BaseRouter.*\); "
        r"got DummyClassifier",
    ):
        cross_val_predict_proba(other, EVALS, cv=KFold(2))


class _XOnly:
    """A splitter whose split takes X alone: two halves, as KFold(2)."""

    def split(self, X):
        n = len(X)
        yield np.arange(n // 2, n), np.arange(n // 2)
        yield np.arange(n // 2), np.arange(n // 2, n)


class _Keywords(_XOnly):
    def split(self, X, **kwargs):
        assert list(kwargs["groups"]) == ["x", "x", "y", "y"]  # one per query
        yield from super().split(X)


class _Broken:
    def split(self, X, y=None, groups=None):
        raise TypeError("broken inside")


def test_groups_need_a_splitter_that_takes_them(knn):
    # split(X) got groups= and failed with a bare "unexpected keyword".
    proba = cross_val_predict_proba(knn, EVALS, cv=KFold(2))
    np.testing.assert_array_equal(
        cross_val_predict_proba(knn, EVALS, cv=_XOnly()), proba
    )
    groups = ["x", "x", "y", "y"] * 2
    with pytest.raises(
        TypeError,
        match=r"cv=<.*_XOnly object.*> has a split method without a groups "
        r"parameter, but groups was given",
    ):
        cross_val_predict_proba(knn, EVALS, cv=_XOnly(), groups=groups)
    # **kwargs takes groups; a TypeError inside a splitter is left as it is.
    np.testing.assert_array_equal(
        cross_val_predict_proba(knn, EVALS, cv=_Keywords(), groups=groups), proba
    )
    with pytest.raises(TypeError, match="^broken inside$"):
        cross_val_predict_proba(knn, EVALS, cv=_Broken(), groups=groups)


def test_groups_are_refused_with_an_int_cv(knn):
    # An int became a shuffled KFold, which only warned (in sklearn's words,
    # naming KFold) that it ignores groups, and split the queries regardless
    # of their groups.
    groups = ["x", "y", "x", "y"] * 2
    with pytest.raises(
        TypeError,
        match=r"groups was given with cv=2, which splits the queries with a "
        r"shuffled KFold\(2\) that ignores groups\. To split by group, pass "
        r"cv=GroupKFold\(2\)",
    ):
        cross_val_predict_proba(knn, EVALS, cv=2, groups=groups)
    # The splitter named in the advice uses them: with x = {q1, q3} held out,
    # q1 and q3's nearest training query is q4 (small right), and with
    # y = {q2, q4} held out, q2 and q4's is q3 (small wrong).
    np.testing.assert_array_equal(
        cross_val_predict_proba(knn, EVALS, cv=GroupKFold(2), groups=groups),
        [[1, 1], [1, 0], [1, 1], [1, 0]],
    )


def test_groups_are_refused_with_fixed_folds(knn):
    # sklearn's check_cv ignores groups with an iterable, without a word.
    groups = ["x", "y", "x", "y"] * 2
    pairs = list(KFold(2).split(QUERIES))
    for cv in (pairs, (fold for fold in pairs)):
        with pytest.raises(
            TypeError,
            match=r"groups was given with cv=.*an iterable of \(train, test\) "
            r"pairs: its folds are already fixed, so groups would be ignored",
        ):
            cross_val_predict_proba(knn, EVALS, cv=cv, groups=groups)


def test_a_fold_of_every_query_is_named_for_every_router(knn):
    # A refitted router reported every model as having "every evaluation in
    # one fold" and advised fewer folds; a LocusRouter named the fold.
    with pytest.raises(
        ValueError,
        match=r"^A test fold holds all 4 queries: no evaluation is left outside "
        r"it to predict the fold from\. Every fold of the splitter \(cv\) must "
        r"leave queries outside it\.$",
    ):
        cross_val_predict_proba(knn, EVALS, cv=_Everything())
    with pytest.raises(ValueError, match="A test fold holds all 4 queries"):
        cross_val_predict_proba(knn, EVALS, cv=[([], [0, 1, 2, 3])])


class _NeedsY:
    """A splitter that does not stratify, but whose split requires y."""

    def split(self, X, y, groups=None):
        yield from _XOnly().split(X)


class _DefaultY(_NeedsY):
    def split(self, X, y=None, groups=None):
        yield from super().split(X, y, groups)


def test_a_split_that_requires_y_is_told_to_give_y_a_default(knn):
    # It was told it "stratifies by a target y", which it does not.
    with pytest.raises(ValueError) as error:
        cross_val_predict_proba(knn, EVALS, cv=_NeedsY())
    message = str(error.value)
    assert "split method that requires y (its signature gives y no default)" in message
    assert "give it a default (split(self, X, y=None, groups=None))" in message
    assert "stratifies" not in message
    # As the message says, a default is enough.
    np.testing.assert_array_equal(
        cross_val_predict_proba(knn, EVALS, cv=_DefaultY()),
        cross_val_predict_proba(knn, EVALS, cv=KFold(2)),
    )


def test_model_group_split_is_not_a_query_splitter(knn):
    # It failed inside its split with "X must be a pandas DataFrame".
    with pytest.raises(
        TypeError,
        match=r"cv=ModelGroupSplit\(.*\) holds out whole models, for onboarding "
        r"\(.*make_onboarding_scorer\); cross_val_predict_proba splits queries",
    ):
        cross_val_predict_proba(knn, EVALS, cv=ModelGroupSplit(2, n_onboard=1))


def test_a_model_scored_on_one_query_is_named_as_such():
    # The advice was "Use fewer folds (cv)", which cannot help: whatever the
    # split, the fold holding q1 leaves "lonely" no row to be fitted on.
    lonely = pd.DataFrame({"model": ["lonely"], "query": ["q1"], "score": [1.0]})
    evals = pd.concat([EVALS, lonely], ignore_index=True)
    router = KNNRouter(1, encoder=ENCODER).fit(evals)
    with pytest.raises(ValueError) as error:
        cross_val_predict_proba(router, evals, cv=KFold(2))
    message = str(error.value)
    assert message.startswith(
        "1 model(s) have evaluations on a single query, so the copy fitted "
        "without that query's fold cannot predict them: ['lonely']. A model "
        "needs evaluations on at least two queries"
    )
    assert "fewer folds" not in message
    # With a model that fewer folds would help too, each gets its advice.
    sparse = evals[(evals["model"] != "small") | evals["query"].isin(["q1", "q2"])]
    router = KNNRouter(1, encoder=ENCODER).fit(sparse)
    with pytest.raises(
        ValueError,
        match=r"single query.*\['lonely'\].* 1 model\(s\) have every evaluation "
        r"in one fold.*\['small'\]\. Use fewer folds",
    ):
        cross_val_predict_proba(router, sparse, cv=KFold(2))


def test_refit_fits_a_locus_router_without_the_fold(tiny_embedder):
    # The trained network was reused for every fold: it had been trained on
    # each fold's answers, so flipping a fold's labels moved its "out-of-fold"
    # P(correct) toward the new labels. With refit=True each copy, embedder
    # included, is fitted on the rows outside its fold only: a fold's labels
    # cannot reach its predictions (the other folds' copies do see them).
    from locus_sklearn.datasets import make_model_pool

    pool = make_model_pool(n_models=5, n_queries=24, evals_per_model="all",
                           random_state=0)  # fmt: skip
    evals = pool.evals
    queries = np.sort(evals["query"].unique())
    cv = KFold(3, shuffle=True, random_state=0)
    fold = next(cv.split(queries))[1]
    flipped = evals.copy()
    in_fold = flipped["query"].isin(queries[fold])
    flipped.loc[in_fold, "score"] = 1.0 - flipped.loc[in_fold, "score"]

    def fitted(table):
        embedder = tiny_embedder(pool.encodings, embedding_dim=4, max_epochs=3)
        return LocusRouter(embedder, shrinkage=0.0).fit(table)

    router, other = fitted(evals), fitted(flipped)
    proba = cross_val_predict_proba(router, evals, cv=cv, refit=True)
    again = cross_val_predict_proba(other, flipped, cv=cv, refit=True)
    np.testing.assert_array_equal(proba[fold], again[fold])
    assert not np.array_equal(proba, again)  # the other folds' copies saw them
    # As a clone of the router fitted on the rows outside the fold predicts.
    inside = evals[~evals["query"].isin(queries[fold])]
    copy = LocusRouter(
        tiny_embedder(pool.encodings, embedding_dim=4, max_epochs=3), shrinkage=0.0
    ).fit(inside)
    np.testing.assert_array_equal(proba[fold], copy.predict_proba(queries[fold]))
    assert proba.dtype == np.float32
    # refit=False (the default) reuses the network, which saw the fold's
    # labels: as documented, its predictions of the fold change with them.
    reused = cross_val_predict_proba(router, evals, cv=cv)
    assert not np.array_equal(
        reused[fold], cross_val_predict_proba(other, flipped, cv=cv)[fold]
    )
    np.testing.assert_array_equal(
        cross_val_predict_proba(router, evals, cv=cv, refit=False), reused
    )


def test_refit_must_be_a_bool_and_reaches_the_cost_functions(knn, monkeypatch):
    # A string "False" is truthy; it must not refit every fold's network.
    for bad in ("False", 1, None):
        with pytest.raises(
            TypeError, match=rf"refit must be a bool \(True or False\); got {bad!r}"
        ):
            cross_val_predict_proba(knn, EVALS, cv=KFold(2), refit=bad)
        with pytest.raises(TypeError, match="refit must be a bool"):
            calibrate_cost_weight(knn, EVALS, target_cost=6.0, cv=2, refit=bad)
        with pytest.raises(TypeError, match="refit must be a bool"):
            cost_quality_curve(knn, EVALS, cv=2, refit=bad)
    # Any other router is refitted per fold either way.
    proba = cross_val_predict_proba(knn, EVALS, cv=KFold(2))
    for refit in (True, np.True_):
        np.testing.assert_array_equal(
            cross_val_predict_proba(knn, EVALS, cv=KFold(2), refit=refit), proba
        )
    # Without folds there is nothing to refit.
    with pytest.raises(ValueError, match="refit=True refits a copy .* but cv=None"):
        calibrate_cost_weight(knn, EVALS, target_cost=6.0, refit=True)
    with pytest.raises(ValueError, match="refit=True refits a copy .* but cv=None"):
        cost_quality_curve(knn, EVALS, refit=True)
    # The cost functions pass refit on to the out-of-fold predictions.
    from locus_sklearn.inspection import _cost

    seen = []

    def spy(router, table, cv, **kwargs):
        seen.append(kwargs["refit"])
        return out_of_fold_proba(router, table, cv, **kwargs)

    monkeypatch.setattr(_cost, "out_of_fold_proba", spy)
    calibrate_cost_weight(knn, EVALS, target_cost=6.0, cv=KFold(2), refit=True)
    cost_quality_curve(knn, EVALS, cv=KFold(2), refit=True)
    cost_quality_curve(knn, EVALS, cv=KFold(2))
    assert seen == [True, True, False]


class _NeedsTwoArguments(Exception):
    def __init__(self, what, why):
        super().__init__(f"{what}: {why}")


class _FussyRouter(KNNRouter):
    """Fits on all four queries of EVALS only."""

    def fit(self, evals, y=None, *, model_costs=None):
        if pd.DataFrame(evals)["query"].nunique() < 4:
            raise _NeedsTwoArguments("fit", "too few queries")
        return super().fit(evals, model_costs=model_costs)


def test_a_copy_that_fails_to_fit_names_its_fold():
    # The copy's error read as if the user's table were too small:
    # "n_queries=2 should be >= n_clusters=3" of evals, which has 4.
    from locus_sklearn.baselines import KMeansRouter

    router = KMeansRouter(3, encoder=ENCODER, random_state=0).fit(EVALS)
    with pytest.raises(ValueError) as error:
        cross_val_predict_proba(router, EVALS, cv=KFold(2))
    # KFold(2) holds out q1, q2 first: the copy sees q3, q4 of both models.
    assert str(error.value).startswith(
        "Fitting the copy of KMeansRouter for test fold 0 on the 2 queries "
        "(4 rows) of evals outside it failed: n_queries=2 should be >= "
        "n_clusters=3"
    )
    assert str(error.value).endswith(
        "use fewer folds (cv gave 2), or a router that needs fewer queries."
    )
    assert isinstance(error.value.__cause__, ValueError)
    assert str(error.value.__cause__).startswith("n_queries=2 should be >=")
    # An exception type that cannot be built from a message is left as it is.
    fussy = _FussyRouter(1, encoder=ENCODER).fit(EVALS)
    with pytest.raises(_NeedsTwoArguments, match="^fit: too few queries$"):
        cross_val_predict_proba(fussy, EVALS, cv=KFold(2))


class _MyKFold(KFold):
    """A subclass of KFold: not one of sklearn's own classes."""


def test_groups_are_refused_with_a_splitter_that_ignores_them(knn):
    # KFold, LeaveOneOut and PredefinedSplit took groups= and only warned
    # (sklearn's "The groups parameter is ignored by KFold"); the folds mixed
    # the groups, which cv=2 with groups already refused.
    from sklearn.model_selection import LeaveOneOut

    groups = ["x", "y", "x", "y"] * 2
    for cv in (
        KFold(2),
        LeaveOneOut(),
        PredefinedSplit([0, 0, 1, 1]),
        _MyKFold(2),  # judged by sklearn's warning
    ):
        with pytest.raises(
            TypeError,
            match=rf"^groups was given with cv={type(cv).__name__}\(.*\), whose "
            r"split ignores groups \(scikit-learn only warns so\): its folds would "
            r"mix the groups\. To split by group, pass a group splitter such as "
            r"GroupKFold",
        ):
            cross_val_predict_proba(knn, EVALS, cv=cv, groups=groups)
    # Without groups they split as before.
    np.testing.assert_array_equal(
        cross_val_predict_proba(knn, EVALS, cv=_MyKFold(2)),
        cross_val_predict_proba(knn, EVALS, cv=KFold(2)),
    )


_FITS = []


class _CountingRouter(KNNRouter):
    def fit(self, evals, y=None, *, model_costs=None):
        _FITS.append(len(evals))
        return super().fit(evals, model_costs=model_costs)


def test_folds_are_checked_before_any_copy_is_fitted():
    # A cv that is no partition was refused only after its folds' copies
    # were fitted (each an embedder's training for some routers).
    router = _CountingRouter(1, encoder=ENCODER).fit(EVALS)
    _FITS.clear()
    with pytest.raises(ValueError, match=r"in no test fold: \['q4'\]"):
        cross_val_predict_proba(router, EVALS, cv=PredefinedSplit([0, 0, 1, -1]))
    with pytest.raises(ValueError, match="more than one test fold"):
        cross_val_predict_proba(router, EVALS, cv=_Overlapping())
    assert _FITS == []
    cross_val_predict_proba(router, EVALS, cv=KFold(2))
    assert _FITS == [4, 4]  # a valid cv: one copy per fold, on 2 queries x 2


def test_groups_given_as_a_table_are_named_by_type_and_shape(knn):
    # The message showed the DataFrame's rows, cut short by reprlib.
    table = EVALS.assign(task=["x", "x", "y", "y"] * 2)[["task"]]
    with pytest.raises(ValueError) as error:
        cross_val_predict_proba(knn, EVALS, cv=GroupKFold(2), groups=table)
    assert str(error.value) == (
        "groups must be a 1-D array-like with one group per row of evals; got "
        "type DataFrame, shape (8, 1); pass one column, such as evals['task']."
    )
    with pytest.raises(ValueError, match=r"got type ndarray, shape \(8, 2\);"):
        cross_val_predict_proba(knn, EVALS, cv=GroupKFold(2), groups=np.zeros((8, 2)))
