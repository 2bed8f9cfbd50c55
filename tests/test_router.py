"""LocusRouter: routing, cost-aware routing, scoring, onboarding and removing
models, and sklearn integration (clone, GridSearchCV, FrozenEstimator, pickle).

The tiny settings and the fitted ``pool`` / ``router`` fixtures are in conftest.py.
"""

import copy
import pickle
import re
import warnings

import joblib
import numpy as np
import pandas as pd
import pytest
import sklearn
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.frozen import FrozenEstimator
from sklearn.model_selection import GridSearchCV, GroupKFold, ParameterGrid
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from locus_sklearn import (
    FewEvaluationsWarning,
    LocusEmbedder,
    LocusRouter,
    QueryEncoder,
)
from locus_sklearn._base import check_cost_weight, routing_utility
from locus_sklearn.baselines import IRTRouter, KNNRouter
from locus_sklearn.datasets import make_model_pool
from locus_sklearn.metrics import correctness_accuracy


def test_router_shapes_and_probabilities(router, model_names, query_texts):
    queries = query_texts[:7]
    proba = router.predict_proba(queries)
    assert proba.shape == (7, 12)
    assert np.isfinite(proba).all() and (proba >= 0).all() and (proba <= 1).all()
    assert router.classes_.tolist() == sorted(model_names)
    routed = router.predict(queries)
    np.testing.assert_array_equal(routed, router.classes_[proba.argmax(axis=1)])
    frame = pd.DataFrame({"query": queries})
    np.testing.assert_array_equal(router.predict(frame), routed)


def test_predict_restricted_to_subset(router, pool, query_texts):
    subset = ["fam0-m01", "fam2-m10"]
    routed = router.predict(query_texts[:50], models=subset)
    assert set(routed) <= set(subset)
    with pytest.raises(ValueError, match="not in the pool: \\['nope'\\]"):
        router.predict(query_texts[:2], models=["nope"])
    # A repeated name is a list built wrong: refused, not collapsed.
    with pytest.raises(
        ValueError, match=r"models repeats 1 model\(s\): \['fam0-m01'\]"
    ):
        router.predict(query_texts[:2], models=["fam0-m01", "fam2-m10", "fam0-m01"])


@pytest.mark.parametrize(
    "wrap",
    [
        lambda names: pytest.importorskip("pyarrow").array(names),
        lambda names: pytest.importorskip("pyarrow").chunked_array(
            [names[:1], names[1:]]
        ),
        lambda names: pd.DataFrame({"model": names, "cost": [1.0] * len(names)}),
    ],
    ids=["pyarrow-array", "pyarrow-chunked", "dataframe"],
)
def test_model_names_in_the_containers_queries_come_in(
    router, fitted_copy, query_texts, wrap
):
    # A pyarrow array (accepted as queries) gave Arrow scalars, "not str"; a
    # DataFrame gave its column labels: "1 model(s) not in the pool: ['model']".
    # Its 'model' column is read, as check_queries reads 'query'.
    subset = ["fam0-m01", "fam2-m10"]
    queries = query_texts[:50]
    np.testing.assert_array_equal(
        router.predict(queries, models=wrap(subset)),
        router.predict(queries, models=subset),
    )
    removed = fitted_copy(router)
    removed.remove_models(wrap(subset))
    assert removed.classes_.tolist() == [m for m in router.classes_ if m not in subset]


def test_a_dataframe_of_model_names_needs_one_model_column():
    from locus_sklearn._base import check_model_subset

    classes = np.array(["a", "b"], dtype=object)
    with pytest.raises(
        ValueError,
        match=r"models is a DataFrame without a 'model' column; it has columns "
        r"\['name'\]",
    ):
        check_model_subset(pd.DataFrame({"name": ["a"]}), classes)
    twice = pd.DataFrame([["a", "b"]], columns=["model", "model"])
    with pytest.raises(ValueError, match=r"models\['model'\] is not one column"):
        check_model_subset(twice, classes)
    assert check_model_subset(pd.DataFrame({"model": ["b"]}), classes).tolist() == [
        False,
        True,
    ]


def test_numpy_str_ids_come_back_as_plain_str():
    # list() of a '<U' array gives np.str_ items: they reached classes_ and
    # predict() as np.str_('m1'), where the '<U' array itself (or a
    # DataFrame, or a saved and loaded router) gives 'm1'.
    from locus_sklearn.baselines import SingleBestRouter

    models = np.array(["m1", "m1", "m2", "m2"])
    queries = np.array(["q1", "q2", "q1", "q2"])
    evals = {"model": list(models), "query": list(queries), "score": [1, 0, 1, 1]}
    router = SingleBestRouter().fit(evals)
    assert [type(m) for m in router.classes_] == [str, str]
    assert router.classes_.tolist() == ["m1", "m2"]
    assert [type(m) for m in router.predict(["q1"])] == [str]


def test_cost_aware_routing(pool, tiny_embedder, model_names, query_texts):
    costs = {m: 0.0 for m in model_names}
    r = LocusRouter(tiny_embedder(pool.encodings, max_epochs=1)).fit(
        pool.evals, model_costs=costs
    )
    queries = query_texts[:40]
    favourite = pd.Series(r.predict(queries)).mode()[0]
    costs[favourite] = 10.0
    r = LocusRouter(tiny_embedder(pool.encodings, max_epochs=1), cost_weight=1.0).fit(
        pool.evals, model_costs=costs
    )
    assert favourite not in set(r.predict(queries))
    costless = LocusRouter(tiny_embedder(pool.encodings, max_epochs=1), cost_weight=1.0)
    with pytest.raises(ValueError, match="needs model costs"):
        costless.fit(pool.evals)
    assert not hasattr(costless.embedder, "net_")  # refused before training


def test_add_models_costs_name_the_models_of_evals(router, pool, fitted_copy):
    # fam0-m00 costs 1, fam0-m01 2, ..., in sorted-name order.
    pool_costs = np.arange(1.0, len(router.classes_) + 1)
    new = pool.evals[pool.evals["model"] == "fam0-m00"].assign(model="newcomer")
    both = pd.concat([new, pool.evals[pool.evals["model"] == "fam0-m01"]])

    def costed():
        out = fitted_copy(router)
        out.model_costs_ = pool_costs.copy()
        return out

    def cost_of(r):
        return dict(zip(r.classes_, r.model_costs_.tolist(), strict=True))

    # Costs for the new model only, in a call that also refreshes fam0-m01:
    # the refreshed model keeps its cost (it was refused, though the
    # docstring says an omitted cost is kept on refresh).
    for costs in ({"newcomer": 7.0}, pd.Series({"newcomer": 7.0})):
        r = costed().add_models(both, model_costs=costs)
        assert cost_of(r) == {**cost_of(costed()), "newcomer": 7.0}
        assert cost_of(r)["fam0-m01"] == 2.0
    # A cost it names replaces the refreshed model's.
    r = costed().add_models(both, model_costs={"newcomer": 7.0, "fam0-m01": 3.0})
    assert (cost_of(r)["newcomer"], cost_of(r)["fam0-m01"]) == (7.0, 3.0)
    # A new model still needs its cost, and names not in evals are refused.
    r = costed()
    with pytest.raises(
        ValueError,
        match=r"model_costs has no cost for 1 model\(s\) of evals: \['newcomer'\]",
    ):
        r.add_models(both, model_costs={"fam0-m01": 3.0})
    with pytest.raises(ValueError, match=r"that are not in evals: \['fam0-m02'\]"):
        r.add_models(both, model_costs={"newcomer": 2.0, "fam0-m02": 1.0})
    with pytest.raises(ValueError, match=r"index repeats 1 model name\(s\)"):
        r.add_models(both, model_costs=pd.Series([2.0, 3.0], ["newcomer"] * 2))
    assert "newcomer" not in r.classes_
    np.testing.assert_array_equal(r.model_costs_, pool_costs)


def test_add_models_refuses_model_costs_not_named_by_model(router, pool, fitted_copy):
    """A list was read in sorted-name order: costs listed in the order of
    evals went to the wrong models, silently. A Series by model name is fine."""
    costed = fitted_copy(router)
    costed.model_costs_ = np.ones(len(router.classes_))
    one = pool.evals[pool.evals["model"] == "fam0-m00"]
    new = pd.concat([one.assign(model="zz-new"), one.assign(model="aa-new")])
    for costs in ([300.0, 3.0], np.array([300.0, 3.0])):
        with pytest.raises(TypeError, match=r"model_costs must be a mapping .* got"):
            costed.add_models(new, model_costs=costs)
    assert "zz-new" not in costed.classes_  # refused before any change
    costed.add_models(new, model_costs=pd.Series({"zz-new": 300.0, "aa-new": 3.0}))
    cost = dict(zip(costed.classes_, costed.model_costs_, strict=True))
    assert (cost["zz-new"], cost["aa-new"]) == (300.0, 3.0)


def test_nan_costs_rejected(pool, tiny_embedder, model_names):
    costs = {m: 1.0 for m in model_names}
    costs[model_names[0]] = float("nan")
    with pytest.raises(ValueError, match="model_costs must be finite"):
        LocusRouter(tiny_embedder(pool.encodings)).fit(pool.evals, model_costs=costs)


def test_score_is_routing_accuracy(router, pool):
    accuracy = router.score(pool.evals)
    assert 0.0 <= accuracy <= 1.0
    with pytest.raises(ValueError, match="not in the pool"):
        router.score(pool.evals.assign(model="stranger"))


def test_empty_queries_rejected(router):
    with pytest.raises(ValueError, match="queries is empty"):
        router.predict_proba([])


def test_add_models_leaves_other_rows_unchanged(
    pool, tiny_embedder, model_names, rows_of
):
    held_out = ["fam1-m04", "fam2-m09"]
    train = pool.evals[~pool.evals["model"].isin(held_out)]
    r = LocusRouter(tiny_embedder(pool.encodings, max_epochs=2)).fit(train)
    before = dict(zip(r.classes_, r.model_embeddings_.copy(), strict=True))
    r.add_models(rows_of(pool.evals, held_out))
    assert r.classes_.tolist() == sorted(model_names)
    for name, z in before.items():
        np.testing.assert_array_equal(
            r.model_embeddings_[r.classes_.tolist().index(name)], z
        )
    # Refreshing an existing model from fewer evaluations changes only its row.
    rows = rows_of(pool.evals, ["fam0-m00"]).iloc[:50]
    snapshot = r.model_embeddings_.copy()
    r.add_models(rows)
    changed = np.any(r.model_embeddings_ != snapshot, axis=1)
    assert changed.tolist() == [name == "fam0-m00" for name in r.classes_]
    r.remove_models(held_out)
    assert set(held_out).isdisjoint(r.classes_)
    assert r.model_embeddings_.shape[0] == 10
    with pytest.raises(ValueError, match="every model"):
        r.remove_models(list(r.classes_))
    with pytest.raises(ValueError, match=r"repeats 1 model\(s\)"):
        r.remove_models([r.classes_[0], r.classes_[0]])
    assert r.model_embeddings_.shape[0] == 10  # nothing removed


def test_a_failed_add_models_leaves_the_router_as_it_was(
    router, pool, fitted_copy, query_texts, monkeypatch
):
    """The pool grew before the stored evaluations were merged: a merge that
    failed (out of memory, interrupted, a stored query the merge refuses)
    left a pool its evaluations did not match, and every later predict
    failed."""
    import locus_sklearn._router as router_module

    costed = fitted_copy(router)
    costed.model_costs_ = np.arange(1.0, len(router.classes_) + 1)
    before = {k: v for k, v in vars(costed).items() if k.endswith("_")}
    expected = costed.predict_proba(query_texts[:5])
    real_check_evals = router_module.check_evals
    calls = []

    def fails_at_the_merge(evals, **kwargs):
        calls.append(evals)
        if len(calls) > 1:  # the first validates evals, the next merges
            raise MemoryError("merging the stored evaluations")
        return real_check_evals(evals, **kwargs)

    monkeypatch.setattr(router_module, "check_evals", fails_at_the_merge)
    new = pool.evals[pool.evals["model"] == "fam0-m00"].assign(model="newcomer")
    with pytest.raises(MemoryError):
        costed.add_models(new, model_costs={"newcomer": 2.0})
    assert len(calls) == 2
    for name, value in before.items():
        assert getattr(costed, name) is value, name
    np.testing.assert_array_equal(costed.predict_proba(query_texts[:5]), expected)


@pytest.mark.parametrize("kind", [set, iter, lambda names: dict.fromkeys(names).keys()])
def test_remove_models_takes_any_collection_of_names(router, fitted_copy, kind):
    # The stored evaluations go with the model whatever holds its name (a
    # generator was spent, and a set taken as one object, leaving them).
    removed = fitted_copy(router)
    removed.remove_models(kind(["fam0-m00", "fam1-m05"]))
    expected = fitted_copy(router)
    expected.remove_models(["fam0-m00", "fam1-m05"])
    assert removed.pool_evals_[1].models.tolist() == expected.classes_.tolist()
    np.testing.assert_array_equal(
        removed.predict_proba(["q001", "q002"]),
        expected.predict_proba(["q001", "q002"]),
    )


def test_onboarded_model_from_128_evaluations_is_usable(tiny_embedder, rows_of):
    pool = make_model_pool(
        n_models=16,
        n_queries=600,
        n_tasks=4,
        n_families=4,
        evals_per_model=300,
        random_state=1,
    )
    new = "fam3-m15"
    train = pool.evals[pool.evals["model"] != new]
    queries = np.array(sorted(pool.evals["query"].unique()))
    rng = np.random.default_rng(0)
    new_rows = rows_of(pool.evals, [new])
    onboard = new_rows.sample(128, random_state=0)
    test = new_rows.drop(onboard.index)
    r = LocusRouter(
        tiny_embedder(pool.encodings, max_epochs=30, patience=5, episodes_per_epoch=64)
    ).fit(train)
    r.add_models(onboard)
    from locus_sklearn._evals import check_evals

    table = check_evals(test)
    y_true = table.to_dense([new])
    proba = r.predict_proba(table.queries)[:, [r.classes_.tolist().index(new)]]
    # Pool-average predictor: the mean score of the training pool.
    pool_mean = np.full_like(y_true, train["score"].mean())
    assert correctness_accuracy(y_true, proba) > correctness_accuracy(y_true, pool_mean)
    del queries, rng


def test_kernel_readout_router_keeps_evaluations(
    pool, tmp_path, tiny_embedder, model_names, query_texts, rows_of
):
    r = LocusRouter(tiny_embedder(pool.encodings, max_epochs=1, kernel_readout=True))
    r.fit(pool.evals)
    queries = query_texts[:15]
    before = r.predict_proba(queries)
    assert r.pool_evals_[1].n_models == 12 and np.isfinite(before).all()
    names = model_names
    r.remove_models(names[:2])
    assert r.pool_evals_[1].models.tolist() == names[2:]
    r.add_models(rows_of(pool.evals, names[:2]))
    np.testing.assert_allclose(r.predict_proba(queries), before, atol=1e-6)
    r.save(tmp_path / "kr.safetensors")
    loaded = LocusRouter.load(tmp_path / "kr.safetensors")
    np.testing.assert_array_equal(
        loaded.predict_proba(queries), r.predict_proba(queries)
    )
    with pytest.raises(ValueError, match="pass evals="):
        r.embedder_.predict_proba(r.model_embeddings_, queries)
    z = r.embedder_.transform(pool.evals)
    np.testing.assert_allclose(
        r.embedder_.predict_proba(z, queries, evals=pool.evals), before, atol=1e-6
    )


def test_clone_and_params(pool, tiny_embedder):
    router = LocusRouter(tiny_embedder(pool.encodings), cost_weight=0.5)
    params = router.get_params()
    assert params["embedder__embedding_dim"] == 16 and params["cost_weight"] == 0.5
    cloned = clone(router)
    assert cloned.get_params()["embedder__embedding_dim"] == 16
    cloned.set_params(embedder__embedding_dim=8)
    assert router.embedder.embedding_dim == 16


def test_default_embedder_parameters_are_reachable():
    # embedder=None means LocusEmbedder() with its defaults: its parameters are
    # reported and settable, as DESIGN.md's GridSearchCV(LocusRouter(), ...) needs.
    router = LocusRouter()
    params = router.get_params()
    assert params["embedder"] is None
    assert params["embedder__embedding_dim"] == LocusEmbedder().embedding_dim
    assert set(router.get_params(deep=False)) == {
        "cost_weight", "embedder", "shrinkage", "shrinkage_repeats"
    }  # fmt: skip
    other = LocusRouter()
    router.set_params(embedder__embedding_dim=64, cost_weight=0.5)
    assert isinstance(router.embedder, LocusEmbedder)
    assert router.embedder.embedding_dim == 64 and router.cost_weight == 0.5
    # Each router gets its own embedder: another default router is untouched.
    assert other.embedder is None
    assert other.get_params()["embedder__embedding_dim"] == 128
    assert clone(router).get_params()["embedder__embedding_dim"] == 64


def test_grid_search_over_the_default_embedder(pool, tiny_settings):
    # The grid names only embedder__ parameters of a default LocusRouter().
    grid = {f"embedder__{k}": [v] for k, v in tiny_settings.items()}
    grid |= {"embedder__encoder": [pool.encodings], "embedder__max_epochs": [1]}
    grid |= {"embedder__embedding_dim": [8, 16]}
    search = GridSearchCV(LocusRouter(), grid, cv=GroupKFold(2)).fit(
        pool.evals, groups=pool.evals["query"]
    )
    assert search.best_params_["embedder__embedding_dim"] in (8, 16)
    assert search.best_estimator_.embedder_.embedding_dim in (8, 16)
    assert np.isfinite(search.cv_results_["mean_test_score"]).all()


@pytest.mark.parametrize(
    "params",
    [
        {"refine_steps": -1},
        {"inference_dtype": "float16"},
        {"transform_batch_tokens": -5},
    ],
)
def test_embedder_settings_changed_after_fit_are_checked_by_the_router(
    router, pool, params
):
    # embed and add_models run the embedder's transform path: they refuse what
    # LocusEmbedder.transform refuses, rather than ignore it.
    frozen = LocusRouter(FrozenEstimator(copy.deepcopy(router.embedder_)))
    frozen.fit(pool.evals)
    frozen.embedder_.estimator.set_params(**params)
    (name,) = params
    new = pool.evals[pool.evals["model"] == "fam0-m00"].assign(model="newcomer")
    with pytest.raises(ValueError, match=f"'{name}' parameter of LocusEmbedder"):
        frozen.embed(new)
    with pytest.raises(ValueError, match=f"'{name}' parameter of LocusEmbedder"):
        frozen.add_models(new)
    assert "newcomer" not in frozen.classes_


@pytest.mark.parametrize(
    "params",
    [
        {"refine_steps": -1},
        {"refine_steps": True},
        {"refine_prior": -5.0},
        {"inference_dtype": "float16"},
        {"transform_batch_tokens": 0},
    ],
)
def test_frozen_embedder_settings_set_after_fit_are_checked_at_router_fit(
    router, pool, fitted_copy, params
):
    # A frozen embedder is not fitted again: the router checks its run-time
    # settings as transform, embed and add_models do, before embedding.
    embedder = fitted_copy(router.embedder_, **params)
    (name,) = params
    frozen = LocusRouter(FrozenEstimator(embedder), shrinkage=None)
    with pytest.raises(ValueError, match=f"The '{name}' parameter of LocusEmbedder"):
        frozen.fit(pool.evals)
    assert not hasattr(frozen, "model_embeddings_")


def test_global_pandas_output_changes_nothing_the_router_computes(
    router, pool, tiny_embedder, query_texts, assert_reproduced
):
    """sklearn.set_config(transform_output="pandas") made the query encoder
    return DataFrames to fit, predict_proba and add_models, which failed."""
    queries = query_texts[:10]
    new = pool.evals[pool.evals["model"] == "fam0-m00"].assign(model="newcomer")
    embedder = tiny_embedder(pool.encodings, max_epochs=1)
    plain = LocusRouter(embedder, shrinkage=None).fit(pool.evals)
    frozen_plain = LocusRouter(FrozenEstimator(router.embedder_), shrinkage=None)
    frozen_plain.fit(pool.evals)
    with sklearn.config_context(transform_output="pandas"):
        fitted = LocusRouter(embedder, shrinkage=None).fit(pool.evals)
        frozen = LocusRouter(FrozenEstimator(router.embedder_), shrinkage=None)
        frozen.fit(pool.evals)
        proba = router.predict_proba(queries)
        routed = router.predict(queries)
        added = copy.deepcopy(router).add_models(new)
        embedded = router.embed(new)
    assert_reproduced(fitted.model_embeddings_, plain.model_embeddings_)
    assert_reproduced(fitted.predict_proba(queries), plain.predict_proba(queries))
    np.testing.assert_array_equal(
        frozen.model_embeddings_, frozen_plain.model_embeddings_
    )
    assert isinstance(proba, np.ndarray) and isinstance(routed, np.ndarray)
    np.testing.assert_array_equal(proba, router.predict_proba(queries))
    np.testing.assert_array_equal(routed, router.predict(queries))
    assert isinstance(embedded, np.ndarray)
    np.testing.assert_array_equal(embedded, router.embed(new))
    np.testing.assert_array_equal(
        added.predict_proba(queries),
        copy.deepcopy(router).add_models(new).predict_proba(queries),
    )


@pytest.mark.parametrize(
    "make",
    [
        lambda enc: KNNRouter(encoder=enc),
        lambda enc: IRTRouter(encoder=enc, random_state=0),
    ],
)
def test_global_pandas_output_and_peer_routers(pool, query_texts, make):
    queries = query_texts[:10]
    expected = make(pool.encodings).fit(pool.evals).predict_proba(queries)
    with sklearn.config_context(transform_output="pandas"):
        peer = make(pool.encodings).fit(pool.evals)
        proba = peer.predict_proba(queries)
        routed = peer.predict(queries)
    assert isinstance(proba, np.ndarray)
    np.testing.assert_allclose(proba, expected, rtol=1e-6)
    np.testing.assert_array_equal(routed, peer.predict(queries))


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"cost_weight": -1.0}, "'cost_weight' parameter of LocusRouter"),
        ({"cost_weight": float("nan")}, "'cost_weight' parameter of LocusRouter"),
        ({"cost_weight": True}, "Got True, a bool"),
        ({"shrinkage": "bogus"}, "'shrinkage' parameter of LocusRouter"),
        ({"shrinkage_repeats": 0}, "'shrinkage_repeats' parameter"),
        # Saved, it loaded, and every predict of it failed.
        ({"cost_weight": 0.5}, "cost_weight=0.5 needs model costs"),
    ],
)
def test_save_refuses_settings_that_load_would_refuse(
    router, tmp_path, fitted_copy, params, message
):
    path = tmp_path / "router.safetensors"
    router.save(path)
    before = path.read_bytes()
    with pytest.raises(ValueError, match=message):
        fitted_copy(router, **params).save(path)
    # The file in place is left as it was, still loadable.
    assert path.read_bytes() == before
    LocusRouter.load(path)


@pytest.mark.parametrize("flag", [False, True])
def test_save_takes_a_numpy_bool_for_include_query_text(router, tmp_path, flag):
    """save(include_query_text=np.True_) raised TypeError, where every other
    bool parameter of the package takes a NumPy bool; an int is still refused."""
    numpy_flag = np.asarray([1.0, 0.0])[0] > (0.5 if flag else 2.0)
    assert type(numpy_flag) is np.bool_ and bool(numpy_flag) is flag
    for estimator in (router, router.embedder_):
        plain, numpy = tmp_path / "plain.locus", tmp_path / "numpy.locus"
        estimator.save(plain, include_query_text=flag)
        estimator.save(numpy, include_query_text=numpy_flag)
        assert numpy.read_bytes() == plain.read_bytes()
        with pytest.raises(
            TypeError, match=r"include_query_text must be True or False; got 1\."
        ):
            estimator.save(numpy, include_query_text=1)


def _user_set_params(estimator):
    """The parameters the HTML repr's table highlights as set by the user."""
    rows = re.findall(
        r'<tr class="([^"]*)">.*?<td class="param">(.*?)</td>',
        estimator._repr_html_(),
        re.S,
    )
    return [name for cls, name in rows if "user-set" in cls.split()]


def test_html_repr_of_a_default_router_marks_no_parameter_as_user_set():
    """The 39 embedder__* defaults get_params(deep=True) adds for
    embedder=None were all highlighted as set by the user."""
    assert _user_set_params(LocusRouter()) == []
    assert "embedder__" not in LocusRouter()._repr_html_()
    assert _user_set_params(LocusRouter(cost_weight=0.5)) == ["cost_weight"]
    assert _user_set_params(LocusRouter(LocusEmbedder())) == ["embedder"]
    # get_params itself still lists them (GridSearchCV's embedder__<name>).
    assert "embedder__embedding_dim" in LocusRouter().get_params()


def test_grid_search_with_group_kfold_on_queries(pool, tiny_embedder):
    search = GridSearchCV(
        LocusRouter(tiny_embedder(pool.encodings, max_epochs=1)),
        {"embedder__embedding_dim": [8, 16]},
        cv=GroupKFold(2),
    )
    search.fit(pool.evals, groups=pool.evals["query"])
    assert search.best_params_["embedder__embedding_dim"] in (8, 16)
    assert np.isfinite(search.cv_results_["mean_test_score"]).all()


def test_frozen_embedder_is_reused_without_training(router, pool, query_texts):
    frozen = FrozenEstimator(router.embedder_)
    reused = LocusRouter(frozen).fit(pool.evals)
    np.testing.assert_array_equal(reused.model_embeddings_, router.model_embeddings_)
    np.testing.assert_array_equal(
        reused.predict_proba(query_texts[:5]), router.predict_proba(query_texts[:5])
    )


def test_pickle_and_joblib_round_trip(router, tmp_path, query_texts):
    queries = query_texts[:20]
    expected = router.predict_proba(queries)
    np.testing.assert_array_equal(
        pickle.loads(pickle.dumps(router)).predict_proba(queries), expected
    )
    joblib.dump(router, tmp_path / "router.joblib")
    np.testing.assert_array_equal(
        joblib.load(tmp_path / "router.joblib").predict_proba(queries), expected
    )


def test_unfitted_router_raises():
    with pytest.raises(NotFittedError):
        LocusRouter().predict(["2+2?"])


def test_router_refuses_an_embedder_network_param_set_after_fit(
    router, pool, fitted_copy, tmp_path
):
    """A router's fitted embedder_ with embedding_dim changed after fit
    embedded with the old network and saved a file load refused."""
    changed = fitted_copy(router)
    changed.embedder_ = fitted_copy(router.embedder_, embedding_dim=32)
    match = "embedding_dim=32 was set after fit.*refit, or set it back to 16"
    with pytest.raises(ValueError, match=match):
        changed.embed(pool.evals)
    with pytest.raises(ValueError, match=match):
        changed.save(tmp_path / "router.safetensors")
    assert not (tmp_path / "router.safetensors").exists()


class _SubclassedEmbedder(LocusEmbedder):
    """A LocusEmbedder subclass, which the router still accepts."""


@pytest.mark.parametrize(
    "make, given",
    [
        (lambda pool, tiny: make_pipeline(tiny(pool.encodings)), "Pipeline"),
        (lambda pool, tiny: QueryEncoder(pool.encodings), "QueryEncoder"),
        (lambda pool, tiny: StandardScaler(), "StandardScaler"),
        (
            lambda pool, tiny: FrozenEstimator(QueryEncoder(pool.encodings).fit()),
            "a FrozenEstimator wrapping QueryEncoder",
        ),
    ],
)
def test_an_embedder_that_is_no_locus_embedder_is_refused_by_name(
    pool, tiny_embedder, make, given
):
    # Any object with fit and transform passed, and fit failed deep inside
    # with an AttributeError naming a private method.
    router = LocusRouter(make(pool, tiny_embedder))
    message = (
        "embedder must be None, a LocusEmbedder or a FrozenEstimator wrapping a "
        f"fitted LocusEmbedder; got {given}."
    )
    with pytest.raises(TypeError, match=re.escape(message)):
        router.fit(pool.evals)
    assert not hasattr(router, "embedder_") and not hasattr(router, "classes_")


def test_a_subclass_of_locus_embedder_is_accepted(pool, tiny_embedder):
    params = tiny_embedder(pool.encodings, max_epochs=1).get_params(deep=False)
    embedder = _SubclassedEmbedder(**params)
    router = LocusRouter(embedder, shrinkage=None).fit(pool.evals)
    assert type(router.embedder_) is _SubclassedEmbedder
    frozen = LocusRouter(FrozenEstimator(router.embedder_), shrinkage=None)
    np.testing.assert_array_equal(
        frozen.fit(pool.evals).model_embeddings_, router.model_embeddings_
    )


def test_set_params_with_embedder_none_and_embedder_parameters():
    # embedder=None beside embedder__<name> (what get_params(deep=True) itself
    # returns, and a grid may list) failed on None.set_params.
    params = LocusRouter().get_params(deep=True)
    router = LocusRouter().set_params(**params)
    assert isinstance(router.embedder, LocusEmbedder)
    assert router.embedder.get_params() == LocusEmbedder().get_params()
    given = LocusEmbedder(embedding_dim=8, n_heads=2)
    router = LocusRouter(given).set_params(embedder=None, embedder__embedding_dim=64)
    # None means LocusEmbedder() with its defaults: a fresh one, not the
    # embedder given before, which is left alone.
    assert router.embedder is not given and given.embedding_dim == 8
    assert router.embedder.get_params() == LocusEmbedder(embedding_dim=64).get_params()
    grid = ParameterGrid({"embedder": [None], "embedder__embedding_dim": [32]})
    for candidate in grid:
        other = clone(LocusRouter(given)).set_params(**candidate)
        assert other.embedder.embedding_dim == 32 and other.embedder.n_heads == 4


def _few_evaluations_warnings(method, *args):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        method(*args)
    return [w for w in caught if issubclass(w.category, FewEvaluationsWarning)]


def test_fit_warns_once_of_models_embedded_from_few_evaluations(tiny_embedder):
    # fit embeds every model from its evaluations, as transform does, but
    # never warned; shrinkage="auto" embeds the pool five more times, and
    # still warns once.
    small = make_model_pool(
        n_models=6, n_queries=60, evals_per_model=30, random_state=0
    )
    embedder = tiny_embedder(small.encodings, max_epochs=1, enc_size=(40, 128))
    for shrinkage in ("auto", None):
        router = LocusRouter(embedder, shrinkage=shrinkage)
        (caught,) = _few_evaluations_warnings(router.fit, small.evals)
        assert "6 model(s) have fewer than enc_size[0]=40" in str(caught.message)
        assert caught.filename == __file__
    frozen = LocusRouter(FrozenEstimator(router.embedder_), shrinkage=None)
    assert len(_few_evaluations_warnings(frozen.fit, small.evals)) == 1
    assert len(_few_evaluations_warnings(router.embed, small.evals)) == 1


def _fitted_state(router):
    return {k: v for k, v in vars(router).items() if k.endswith("_")}


def _fit_that_fails(router, evals, failure, monkeypatch):
    """Fit ``router`` on ``evals`` so that it fails after training: where it
    warns of models embedded from few evaluations (an error under ``pytest -W
    error``), or interrupted in the shrinkage choice (its slow part)."""
    import locus_sklearn._router as router_module

    if failure == "warning":
        router.set_params(embedder__enc_size=(40, 128))  # 30 evaluations a model
        with warnings.catch_warnings():
            warnings.simplefilter("error", FewEvaluationsWarning)
            with pytest.raises(FewEvaluationsWarning):
                router.fit(evals)
    else:

        def interrupted(*args, **kwargs):
            raise KeyboardInterrupt

        monkeypatch.setattr(router_module, "choose_shrinkage", interrupted)
        router.set_params(shrinkage="auto")
        with pytest.raises(KeyboardInterrupt):
            router.fit(evals)
        monkeypatch.undo()


@pytest.mark.parametrize("failure", ["warning", "interrupt"])
def test_a_failed_first_fit_leaves_the_router_unfitted(
    tiny_embedder, monkeypatch, failure
):
    """embedder_ was set before fit's last steps could still fail:
    check_is_fitted then passed and predict failed with an AttributeError
    (no encoder_) instead of NotFittedError."""
    small = make_model_pool(
        n_models=6, n_queries=60, evals_per_model=30, random_state=0
    )
    router = LocusRouter(tiny_embedder(small.encodings, max_epochs=1), shrinkage=None)
    _fit_that_fails(router, small.evals, failure, monkeypatch)
    assert _fitted_state(router) == {}
    with pytest.raises(NotFittedError):
        router.predict(small.queries["query"][:3].tolist())


@pytest.mark.parametrize("failure", ["warning", "interrupt"])
def test_a_failed_refit_leaves_the_previous_fit_whole(
    tiny_embedder, monkeypatch, failure
):
    """A refit that failed after training left the new network serving the
    previous fit's pool (its classes_, model_embeddings_ and stored
    evaluations): predictions changed, from neither fit."""
    small = make_model_pool(
        n_models=6, n_queries=60, evals_per_model=30, random_state=0
    )
    router = LocusRouter(tiny_embedder(small.encodings, max_epochs=1), shrinkage=None)
    router.fit(small.evals)
    before = _fitted_state(router)
    queries = small.queries["query"][:5].tolist()
    expected = router.predict_proba(queries)
    # Another pool (five of the six models) and another network.
    other = small.evals[small.evals["model"] != router.classes_[0]]
    router.set_params(embedder__random_state=1)
    _fit_that_fails(router, other, failure, monkeypatch)
    assert _fitted_state(router).keys() == before.keys()
    for name, value in before.items():
        assert getattr(router, name) is value, name
    np.testing.assert_array_equal(router.predict_proba(queries), expected)


def test_add_models_warns_where_an_added_mean_tops_the_pool(router, pool):
    # At shrinkage 1 the mean of an added model's rows alone decides routing:
    # 128 rows of an easy category took every query on BFCL, silently.
    import copy

    r = copy.deepcopy(router)
    r.shrinkage_ = 1.0
    best = r.classes_[np.argmax(r.model_mean_scores_)]
    lucky = pool.evals[pool.evals["model"] == best].assign(model="lucky", score=1.0)
    with pytest.warns(UserWarning, match=r"'lucky' now has the pool's highest mean"):
        r.add_models(lucky.iloc[:64])
    assert (r.predict(pool.queries["query"][:10].tolist()) == "lucky").all()
    weak = lucky.assign(model="weak", score=0.0).iloc[:64]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # below the best: no warning
        r.add_models(weak)
    blended = copy.deepcopy(router)
    blended.shrinkage_ = 0.5
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # below 1 the embedding takes part
        blended.add_models(lucky.iloc[:64])
    plain = copy.deepcopy(router)
    plain.shrinkage_ = 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no shrinkage: the mean routes nothing
        plain.add_models(lucky.iloc[:64])


def test_fit_refuses_costs_passed_as_y(pool, tiny_embedder, model_names):
    # fit(evals, costs) read the costs as y, ignored them and fitted a router
    # without costs (model_costs_ None); refused before training.
    costs = {m: 1.0 for m in model_names}
    for y in (costs, pd.Series(costs)):
        router = LocusRouter(tiny_embedder(pool.encodings))
        with pytest.raises(TypeError, match="routers take no y; pass costs as model"):
            router.fit(pool.evals, y)
        assert not hasattr(router.embedder, "net_")


@pytest.mark.parametrize(
    "params",
    [
        {"max_epochs": 0},
        {"n_heads": 3},
        {"enc_size": (0, 4)},
        {"lr": 1.0, "weight_decay": 1.0},
    ],
)
def test_fit_checks_the_embedders_settings_before_encoding(pool, tiny_embedder, params):
    """LocusEmbedder.fit refuses them first; the router built the encoder and
    encoded every query, then failed on them."""

    class Counting:
        calls = 0

        def encode(self, texts):
            Counting.calls += len(texts)
            return np.stack([pool.encodings[t] for t in texts])

    router = LocusRouter(tiny_embedder(Counting(), **params))
    with pytest.raises(ValueError):
        router.fit(pool.evals)
    assert Counting.calls == 0


def test_query_encodings_passed_as_the_embedder_are_refused_with_the_fix(pool):
    # Said only "is none of its valid values", naming neither them nor the fix.
    with pytest.raises(ValueError) as info:
        LocusRouter(pool.encodings).fit(pool.evals)
    message = str(info.value)
    assert "must be None or an object implementing 'fit' and 'transform'" in message
    assert "LocusRouter(LocusEmbedder(encoder=...))" in message


def _small_pool():
    return make_model_pool(
        n_models=4, n_families=2, n_tasks=2, n_queries=60, evals_per_model=40,
        random_state=0,
    )  # fmt: skip


def _stale_router_pool(tiny_embedder):
    """A small pool, a fitted tiny embedder on it and a plain router reusing
    that embedder through a FrozenEstimator (shared, as scikit-learn's clone
    returns a FrozenEstimator itself)."""
    small = _small_pool()
    embedder = tiny_embedder(small.encodings, max_epochs=1).fit(small.evals)
    router = LocusRouter(FrozenEstimator(embedder), shrinkage=None).fit(small.evals)
    return small, embedder, router


_REFITTED = "wrapped in this router's FrozenEstimator .* was refitted after the router"


def test_refitting_a_frozen_embedder_after_the_router_fit_is_refused(
    tiny_embedder, tmp_path
):
    """The router kept model_embeddings_ from the network its shared embedder
    had at the router's fit; after the caller refitted that embedder, every
    prediction paired the new network with them (probabilities moved by up to
    0.15, matching neither network's router) and add_models mixed the
    embeddings of both networks, with no error."""
    small, embedder, router = _stale_router_pool(tiny_embedder)
    assert router.embedder_.estimator is embedder  # shared, not copied
    queries = small.queries["query"][:5].tolist()
    expected = router.predict_proba(queries)
    apart = copy.deepcopy(router)  # its own copy of the embedder: unaffected
    added = small.evals[small.evals["model"] == router.classes_[0]]
    embedder.set_params(random_state=1).fit(small.evals)
    for call in (
        lambda: router.predict_proba(queries),
        lambda: router.predict(queries),
        lambda: router.decision_function(queries),
        lambda: router.score(small.evals),
        lambda: router.add_models(added.assign(model="new")),
        lambda: router.embed(added),
        lambda: router.save(tmp_path / "router.safetensors"),
    ):
        with pytest.raises(ValueError, match=_REFITTED):
            call()
    assert router.classes_.tolist() == apart.classes_.tolist()  # nothing added
    assert not (tmp_path / "router.safetensors").exists()
    np.testing.assert_array_equal(apart.predict_proba(queries), expected)
    # A refit embeds the pool with the new network, as a new router does.
    fresh = LocusRouter(FrozenEstimator(embedder), shrinkage=None).fit(small.evals)
    np.testing.assert_array_equal(
        router.fit(small.evals).predict_proba(queries), fresh.predict_proba(queries)
    )


# scikit-learn 1.9 added the "Fitted attributes" table (PR 33399), which is
# what reads every attribute and shows model_embeddings_.
@pytest.mark.skipif(
    tuple(map(int, re.findall(r"\d+", sklearn.__version__)[:2])) < (1, 9),
    reason="the HTML repr lists fitted attributes from scikit-learn 1.9",
)
def test_html_repr_of_a_router_whose_frozen_embedder_was_refitted(tiny_embedder):
    """The HTML repr (Jupyter's display) reads every attribute with
    inspect.getmembers, which tolerates AttributeError alone: the property
    that refuses a refitted embedder made it raise ValueError, and merely
    inspecting a router without the record (unpickled from an earlier
    version) recorded its network."""
    small, embedder, router = _stale_router_pool(tiny_embedder)
    older = copy.deepcopy(router)
    del older._network_at_fit_
    assert "model_embeddings_" in older._repr_html_()
    assert not hasattr(older, "_network_at_fit_")  # inspecting records nothing
    embedder.set_params(random_state=1).fit(small.evals)
    assert "model_embeddings_" in router._repr_html_()
    assert "text/html" in router._repr_mimebundle_()
    # Predicting is still refused.
    with pytest.raises(ValueError, match=_REFITTED):
        router.predict(small.queries["query"][:2].tolist())
    assert older._fitted_locus() is older.embedder_.estimator


def test_refitting_the_routers_own_embedder_is_refused(tiny_embedder):
    small = _small_pool()
    r = LocusRouter(tiny_embedder(small.encodings, max_epochs=1), shrinkage=None)
    r.fit(small.evals)
    r.embedder_.set_params(random_state=1).fit(small.evals)
    with pytest.raises(ValueError, match="This router's embedder_ was refitted"):
        r.predict_proba(small.queries["query"][:2].tolist())


def test_a_frozen_router_without_refit_pickles_loads_and_predicts(
    tiny_embedder, tmp_path
):
    """The check passes on a router that was not refitted, after pickle,
    deepcopy and save/load (which record the network they hold), and on a
    router pickled before the check existed (no record)."""
    small, embedder, router = _stale_router_pool(tiny_embedder)
    queries = small.queries["query"][:5].tolist()
    expected = router.predict_proba(queries)
    for other in (pickle.loads(pickle.dumps(router)), copy.deepcopy(router)):
        np.testing.assert_array_equal(other.predict_proba(queries), expected)
        other.add_models(small.evals[small.evals["model"] == router.classes_[0]])
    older = copy.deepcopy(router)
    del older._network_at_fit_  # as unpickled from an earlier version
    np.testing.assert_array_equal(older.predict_proba(queries), expected)
    router.save(tmp_path / "router.safetensors")
    loaded = LocusRouter.load(tmp_path / "router.safetensors", device="cpu")
    np.testing.assert_allclose(loaded.predict_proba(queries), expected, atol=1e-6)
    # The loaded router records its network on first use: a later refit of
    # the embedder it wraps is refused as for a fitted router.
    loaded.embedder_.estimator.set_params(random_state=1).fit(small.evals)
    with pytest.raises(ValueError, match=_REFITTED):
        loaded.predict_proba(queries)


_SHARED = (
    "The LocusEmbedder wrapped in this router's FrozenEstimator (shared with the "
    "caller, not copied) has "
)


@pytest.mark.parametrize(
    ("fit_params", "params", "now", "then"),
    [
        ({}, {"refine_steps": 10}, "refine_steps=10", "refine_steps=0"),
        (
            {},
            {"inference_dtype": "bfloat16"},
            "inference_dtype='bfloat16'",
            "inference_dtype='float32'",
        ),
        (
            {"refine_steps": 3},
            {"refine_steps": 5, "refine_prior": 0.5},
            "refine_steps=5, refine_prior=0.5",
            "refine_steps=3, refine_prior=0.1",
        ),
        # With refinement on, the prior alone changes the embeddings.
        (
            {"refine_steps": 3},
            {"refine_prior": 0.5},
            "refine_prior=0.5",
            "refine_prior=0.1",
        ),
    ],
)
def test_changing_a_frozen_embedders_embedding_settings_after_the_router_fit_is_refused(
    tiny_embedder, tmp_path, fit_params, params, now, then
):
    """Switching refinement on for the shared embedder after the router's fit
    (embedder.set_params(refine_steps=10), as the training guide says) made
    add_models embed the new model refined beside a pool embedded unrefined,
    with no error; embed gave probes that no pool embedding was made like,
    and save stored the new setting with the old pool."""
    small = _small_pool()
    embedder = tiny_embedder(small.encodings, max_epochs=1, **fit_params)
    embedder.fit(small.evals)
    router = LocusRouter(FrozenEstimator(embedder), shrinkage=None).fit(small.evals)
    queries = small.queries["query"][:5].tolist()
    expected = router.predict_proba(queries)
    pool_embeddings = router.model_embeddings_.copy()
    added = small.evals[small.evals["model"] == router.classes_[0]]
    new = added.assign(model="new")
    fitted_settings = {k: embedder.get_params()[k] for k in params}
    embedder.set_params(**params)
    message = re.escape(
        f"{_SHARED}{now} set after the router was fitted, but the router's "
        f"model_embeddings_ were made with {then}: add_models and embed would "
        f"embed models with {now} beside a pool embedded with {then}, and save "
        "would store the one with the other. Refit the router "
        f"(router.fit(evals)) to embed its whole pool with {now}, or set the "
        f"embedder back with set_params({then})."
    )
    path = tmp_path / "router.safetensors"
    for call in (
        lambda: router.add_models(new),
        lambda: router.embed(new),
        lambda: router.save(path),
    ):
        with pytest.raises(ValueError, match=message):
            call()
    assert "new" not in router.classes_ and not path.exists()
    np.testing.assert_array_equal(router.model_embeddings_, pool_embeddings)
    # Predicting reads the stored embeddings only: unchanged, not refused.
    np.testing.assert_array_equal(router.predict_proba(queries), expected)
    # Set back: the new model is embedded as the pool was.
    embedder.set_params(**fitted_settings)
    router.add_models(new)
    i = router.classes_.tolist().index("new")
    np.testing.assert_array_equal(
        router.model_embeddings_[i], embedder.transform(new)[0]
    )
    # Refitted with the new settings: the whole pool is embedded with them,
    # and add_models goes on.
    embedder.set_params(**params)
    router.fit(small.evals)
    np.testing.assert_allclose(
        router.model_embeddings_, embedder.transform(small.evals), atol=1e-6
    )
    router.add_models(new)
    assert "new" in router.classes_


def test_refine_prior_without_refinement_and_batch_tokens_are_not_refused(
    tiny_embedder,
):
    # Neither changes the embeddings: refine_prior is read by the refinement
    # only, transform_batch_tokens changes float32 rounding only.
    small, embedder, router = _stale_router_pool(tiny_embedder)
    added = small.evals[small.evals["model"] == router.classes_[0]]
    embedder.set_params(refine_prior=0.5, transform_batch_tokens=7)
    router.add_models(added.assign(model="new"))
    np.testing.assert_allclose(
        router.embed(added)[0], router.model_embeddings_[0], atol=1e-5
    )


def test_changing_the_routers_own_embedder_settings_is_refused(tiny_embedder):
    small = _small_pool()
    r = LocusRouter(tiny_embedder(small.encodings, max_epochs=1), shrinkage=None)
    r.fit(small.evals)
    added = small.evals[small.evals["model"] == r.classes_[0]]
    # The parameter (an unfitted clone source) is not what embeds: no refusal.
    r.set_params(embedder__refine_steps=10)
    r.embed(added)
    r.embedder_.set_params(refine_steps=10)
    with pytest.raises(
        ValueError,
        match=re.escape(
            "This router's embedder_ has refine_steps=10 set after the router was "
            "fitted, but the router's model_embeddings_ were made with "
            "refine_steps=0:"
        ),
    ):
        r.embed(added)


def test_the_embedding_settings_survive_pickle_and_save_load(tiny_embedder, tmp_path):
    """The record travels with the router (pickle, deepcopy; load takes it
    from the saved embedder, which save checked); a router without it, as
    unpickled from an earlier version, is not checked."""
    small, embedder, router = _stale_router_pool(tiny_embedder)
    added = small.evals[small.evals["model"] == router.classes_[0]]
    new = added.assign(model="new")
    router.save(tmp_path / "router.safetensors")
    loaded = LocusRouter.load(tmp_path / "router.safetensors", device="cpu")
    copies = [pickle.loads(pickle.dumps(router)), copy.deepcopy(router), loaded]
    for other in copies:
        other.embedder_.estimator.set_params(refine_steps=10)
        with pytest.raises(ValueError, match=re.escape(f"{_SHARED}refine_steps=10")):
            other.add_models(new)
    older = copy.deepcopy(router)
    del older._embedding_settings_at_fit_  # as unpickled from an earlier version
    older.embedder_.estimator.set_params(refine_steps=10)
    older.add_models(new)
    assert "new" in older.classes_


@pytest.mark.parametrize("cost_weight", [0.0, 1e-9, 0.5])
def test_decision_function_is_float64_at_every_cost_weight(
    router, fitted_copy, query_texts, cost_weight
):
    """routing_utility returned LocusRouter's float32 P(correct) as it was at
    cost_weight=0 and float64 above: the dtype changed with the value."""
    costs = np.linspace(0.0, 1.0, len(router.classes_))
    r = fitted_copy(router, cost_weight=cost_weight)
    r.model_costs_ = costs
    queries = query_texts[:4]
    proba = r.predict_proba(queries)
    assert proba.dtype == np.float32  # documented: LocusRouter's precision
    utility = r.decision_function(queries)
    assert utility.dtype == np.float64
    np.testing.assert_array_equal(
        utility, proba.astype(np.float64) - cost_weight * costs
    )


def test_a_cost_weight_no_float_holds_is_refused_by_name(pool, tiny_embedder):
    """An int past the float range passed the Interval constraint and
    check_cost_weight failed on float() with an OverflowError naming no
    parameter."""
    router = LocusRouter(tiny_embedder(pool.encodings), cost_weight=10**400)
    with pytest.raises(ValueError, match="'cost_weight' .* too large for a float"):
        router.fit(pool.evals)
    assert not hasattr(router.embedder, "net_")  # before training
    # Where it is read apart from the constraints (routing_utility, the CLI).
    message = (
        r"^cost_weight must be finite and >= 0; got 1\.000e\+400 \(an int of about "
        r"401 digits\), an int too large for a float \(at most 1\.8e\+308\)\.$"
    )
    with pytest.raises(ValueError, match=message):
        check_cost_weight(10**400)
    with pytest.raises(ValueError, match=message):
        routing_utility(np.ones((1, 2)), np.ones(2), 10**400)
    assert check_cost_weight(10**300) == 1e300  # a float holds it
