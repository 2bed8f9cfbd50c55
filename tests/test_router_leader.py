"""LocusRouter warns where a mean of few evaluations leads the blended routing."""

import copy
import re
import warnings

import numpy as np
import pandas as pd
import pytest

from locus_sklearn import FewEvaluationsWarning, LocusRouter
from locus_sklearn.datasets import make_model_pool

THIN = r"'tiny' has the pool's highest mean score, 1\.000, over only 2 evaluation\(s\)"


def _user_warnings(method, *args):
    """The UserWarnings ``method(*args)`` issues, FewEvaluationsWarning aside."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        method(*args)
    return [
        w
        for w in caught
        if issubclass(w.category, UserWarning)
        and not issubclass(w.category, FewEvaluationsWarning)
    ]


@pytest.fixture(scope="module")
def thin_pool():
    """A 6-model pool (means 0.3 to 0.62) and its evaluations plus 'tiny': two
    rows of one model, both scored 1, so a mean of 1 from 2 evaluations."""
    small = make_model_pool(
        n_models=6, n_queries=120, n_families=2, evals_per_model=60,
        n_features=8, random_state=0,
    )  # fmt: skip
    evals = small.evals
    best = evals[(evals["model"] == "fam0-m00") & (evals["score"] == 1)]
    tiny = best.iloc[:2].assign(model="tiny")
    return small, pd.concat([evals, tiny], ignore_index=True)


def _embedder(tiny_embedder, encodings):
    return tiny_embedder(encodings, max_epochs=2, enc_size=(8, 32), dec_size=16)


@pytest.mark.parametrize(
    "shrinkage, routes",
    [
        (1.0, r"With shrinkage_=1, routing sends it every query \(cost aside\) on "),
        (
            "auto",
            # 1 in the report; 0.25 here, and the mean still takes every query.
            r'With shrinkage_=(1|0\.\d+) \(chosen by shrinkage="auto"\), (routing '
            r"sends it|predict_proba blends that mean into its P\(correct\) on) "
            r"every query",
        ),
        (
            0.25,
            r"With shrinkage_=0\.25, predict_proba blends that mean into its "
            r"P\(correct\) on every query with weight 0\.25, which can send it every",
        ),
    ],
)
def test_fit_warns_where_a_mean_of_few_evaluations_leads(
    thin_pool, tiny_embedder, shrinkage, routes
):
    # With shrinkage="auto", a model with 2 evaluations (both scored 1) made
    # auto choose 1 and took all 118 queries with only FewEvaluationsWarning.
    small, evals = thin_pool
    router = LocusRouter(_embedder(tiny_embedder, small.encodings), shrinkage=shrinkage)
    (caught,) = _user_warnings(router.fit, evals)
    message = str(caught.message)
    assert re.search(THIN + r", fewer than enc_size\[0\]=8\. " + routes, message)
    assert message.endswith(
        "Give it at least 8 evaluations spread over the pool's tasks, remove it "
        "(remove_models), or route with shrinkage=None (the plain router)."
    )
    assert caught.filename == __file__
    assert router.shrinkage_ > 0
    queries = small.evals["query"].unique().tolist()
    assert (router.predict(queries) == "tiny").all()


def test_fit_warns_only_where_the_leader_is_thin_and_the_means_take_part(
    thin_pool, tiny_embedder
):
    small, evals = thin_pool
    embedder = _embedder(tiny_embedder, small.encodings)
    (caught,) = _user_warnings(LocusRouter(embedder, shrinkage=1.0).fit, evals)
    assert re.search(THIN, str(caught.message))
    # No shrinkage: the means take no part in routing.
    assert _user_warnings(LocusRouter(embedder, shrinkage=None).fit, evals) == []
    # A model of few evaluations that does not lead.
    low = evals.assign(score=np.where(evals["model"] == "tiny", 0.0, evals["score"]))
    assert _user_warnings(LocusRouter(embedder, shrinkage=1.0).fit, low) == []
    # The pool alone: its leader has 60 evaluations.
    assert _user_warnings(LocusRouter(embedder, shrinkage=1.0).fit, small.evals) == []


def test_add_models_warns_where_an_added_mean_of_few_evaluations_leads(router, pool):
    best = router.classes_[np.argmax(router.model_mean_scores_)]
    rows = pool.evals[pool.evals["model"] == best].assign(model="tiny", score=1.0)
    blended = copy.deepcopy(router)
    blended.shrinkage_ = 0.5
    (caught,) = _user_warnings(blended.add_models, rows.iloc[:2])
    assert re.search(
        THIN + r", fewer than enc_size\[0\]=16\. With shrinkage_=0\.5(, | \()",
        str(caught.message),
    )
    assert caught.filename == __file__
    # At shrinkage 1 the new-leader warning says it; one warning, not two.
    whole = copy.deepcopy(router)
    whole.shrinkage_ = 1.0
    (caught,) = _user_warnings(whole.add_models, rows.iloc[:2])
    assert "'tiny' now has the pool's highest mean" in str(caught.message)
    # Enough evaluations (enc_size[0]=16), or no shrinkage: silent.
    assert _user_warnings(copy.deepcopy(blended).add_models, rows.iloc[:64]) == []
    plain = copy.deepcopy(router)
    plain.shrinkage_ = 0.0
    assert _user_warnings(plain.add_models, rows.iloc[:2]) == []


def test_add_models_warned_into_an_error_leaves_the_router_as_it_was(
    router, pool, query_texts
):
    # The leader warning came after the pool was replaced: under
    # ``pytest -W error`` add_models raised, yet the model had been added.
    whole = copy.deepcopy(router)
    whole.shrinkage_ = 1.0
    before = {k: v for k, v in vars(whole).items() if k.endswith("_")}
    expected = whole.predict_proba(query_texts[:5])
    best = whole.classes_[np.argmax(whole.model_mean_scores_)]
    lucky = pool.evals[pool.evals["model"] == best].assign(model="lucky", score=1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(UserWarning, match="'lucky' now has the pool's highest"):
            whole.add_models(lucky.iloc[:64])
    for name, value in before.items():
        assert getattr(whole, name) is value, name
    assert "lucky" not in whole.classes_
    np.testing.assert_array_equal(whole.predict_proba(query_texts[:5]), expected)


def test_add_models_warns_only_where_the_leader_changes(router, pool):
    # The check compared with the other models after the call: refreshing the
    # leader from the rows it was fitted on warned it "now" led, naming the
    # runner-up as "the best before".
    whole = copy.deepcopy(router)
    whole.shrinkage_ = 1.0
    means = dict(zip(whole.classes_, whole.model_mean_scores_, strict=True))
    first, second = sorted(means, key=means.get, reverse=True)[:2]
    rows = pool.evals[pool.evals["model"] == first]
    assert _user_warnings(whole.add_models, rows) == []
    assert whole.model_mean_scores_.tolist() == list(means.values())
    # The leader refreshed to a mean that falls below the runner-up's, and a
    # new model on top: the best before is the leader before the call.
    low = rows.assign(score=0.0)
    top = rows.assign(model="lucky", score=1.0)
    (caught,) = _user_warnings(whole.add_models, pd.concat([low, top]))
    assert (
        f"'lucky' now has the pool's highest mean score, 1.000 over the "
        f"{len(top)} evaluation(s) it was added from (the best before: {first!r}, "
        f"{means[first]:.3f})"
    ) in str(caught.message)
    # A refreshed model that takes the lead is warned of as an added one.
    whole = copy.deepcopy(router)
    whole.shrinkage_ = 1.0
    up = pool.evals[pool.evals["model"] == second].assign(score=1.0)
    (caught,) = _user_warnings(whole.add_models, up)
    assert (
        f"{second!r} now has the pool's highest mean score, 1.000 over the "
        f"{len(up)} evaluation(s) it was added from (the best before: {first!r}, "
        f"{means[first]:.3f})"
    ) in str(caught.message)
