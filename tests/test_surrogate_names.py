"""Model names, queries and tasks holding a lone surrogate.

``b"caf\\xe9".decode("utf-8", errors="surrogateescape")`` gives ``"caf\\udce9"``:
a str that check_evals accepts, but that pandas' Arrow-backed str dtype (the
one pandas 3 infers for strings) refuses with a bare UnicodeEncodeError. Every
path from a validated table on must keep such ids as Python objects.
"""

import contextlib
import copy
import io
import json

import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone
from sklearn.utils import Bunch

from locus_sklearn import FewEvaluationsWarning, LocusRouter, check_evals
from locus_sklearn.datasets import from_wide, load_evals, make_model_pool
from locus_sklearn.inspection import (
    calibrate_fingerprint_threshold,
    distance_disagreement_correlation,
    embed_profile,
    embedding_dimensionality,
    fallback_order,
    match_models,
    match_models_by_scores,
    nearest_models,
    score_disagreement,
    task_profiles,
)
from locus_sklearn.metrics import get_router_scorer
from locus_sklearn.model_selection import (
    ModelGroupSplit,
    cross_val_predict_proba,
    make_onboarding_scorer,
)

# What a decode with errors="surrogateescape" gives for the byte 0xE9, and a
# valid character sorting at the same place among the ids below: the twin pool
# named with it must be fitted exactly as the pool with surrogates.
LONE = "\udce9"
VALID = "\ufffd"


def _pool(mark):
    """A small pool whose first model and first query end in ``mark``, and its
    encodings (a mapping keyed by query)."""
    pool = make_model_pool(n_models=6, n_queries=60, evals_per_model=30, random_state=0)
    model, query = "fam0-m00", sorted(pool.evals["query"].unique())[0]

    def marked(values, name):
        # An object Series: pandas' str dtype would refuse the surrogate.
        return pd.Series([v + mark if v == name else v for v in values], dtype=object)

    evals = pool.evals.assign(
        model=marked(pool.evals["model"], model),
        query=marked(pool.evals["query"], query),
    )
    encodings = {(q + mark if q == query else q): v for q, v in pool.encodings.items()}
    return evals, encodings, model + mark, query + mark


def _twins(mark, fit):
    """``fit(evals, encodings, model, query)`` on the pool marked ``mark``."""
    evals, encodings, model, query = _pool(mark)
    return fit(evals, encodings, model, query)


def test_default_router_fits_adds_and_removes_models_named_with_a_lone_surrogate(
    tiny_embedder,
):
    # shrinkage="auto" (the default) cross-fits on DataFrames of the ids;
    # add_models and remove_models rebuild the stored evaluations from one:
    # each raised UnicodeEncodeError from pyarrow.
    def run(evals, encodings, model, query):
        embedder = tiny_embedder(encodings, embedding_dim=4, max_epochs=2)
        costs = {m: float(i + 1) for i, m in enumerate(sorted(evals["model"].unique()))}
        router = LocusRouter(embedder).fit(evals, model_costs=costs)
        queries = [query, "q10"]
        fitted = router.predict_proba(queries)
        classes = router.classes_.tolist()
        # A refresh of the marked model with a Series naming only the new
        # model's cost: the marked model keeps its cost (1.0, the first name).
        newcomer = evals[evals["model"] == model].assign(model="newcomer")
        refresh = pd.concat([evals[evals["model"] == model], newcomer])
        router.add_models(refresh, model_costs=pd.Series({"newcomer": 7.0}))
        added = dict(
            zip(router.classes_.tolist(), router.model_costs_.tolist(), strict=True)
        )
        added_proba = router.predict_proba(queries)
        router.remove_models([model])
        return (
            router.shrinkage_, classes, fitted, added, added_proba,
            router.classes_.tolist(), router.predict_proba(queries),
            router.predict(queries).tolist(),
        )  # fmt: skip

    lone = _twins(LONE, run)
    valid = _twins(VALID, run)
    shrinkage, classes, fitted, added, added_proba, kept, proba, routed = lone
    assert classes[0] == f"fam0-m00{LONE}" and len(classes) == 6
    assert added[f"fam0-m00{LONE}"] == 1.0 and added["newcomer"] == 7.0
    assert f"fam0-m00{LONE}" not in kept and "newcomer" in kept and len(kept) == 6
    assert proba.shape == (2, 6) and np.isfinite(proba).all()
    # The same fit, to the bit, as the twin pool with a valid character.
    assert shrinkage == valid[0]
    np.testing.assert_array_equal(fitted, valid[2])
    assert list(added.values()) == list(valid[3].values())
    np.testing.assert_array_equal(added_proba, valid[4])
    np.testing.assert_array_equal(proba, valid[6])
    assert [m.replace(LONE, VALID) for m in routed] == valid[7]


def test_check_evals_reads_lone_surrogates_from_a_mapping_and_in_tasks():
    # Lists, object and '<U' arrays of a mapping were read as pandas str, as
    # was the task column when pairing queries with tasks.
    model = [f"m{LONE}", "b", f"m{LONE}"]
    for column in (model, np.array(model, dtype=object), np.array(model)):
        evals = {
            "model": column,
            "query": ["q", "q", f"r{LONE}"],
            "score": [1.0, 0.0, 0.5],
            "task": [f"t{LONE}", f"t{LONE}", "u"],
        }
        table = check_evals(evals)
        assert table.models.tolist() == ["b", f"m{LONE}"]
        assert table.queries.tolist() == ["q", f"r{LONE}"]
        assert table.query_task.tolist() == [f"t{LONE}", "u"]
        frame = table.to_frame()
        assert frame["model"].tolist() == ["b", f"m{LONE}", f"m{LONE}"]
        assert frame["query"].tolist() == ["q", "q", f"r{LONE}"]
        assert frame["task"].tolist() == [f"t{LONE}", f"t{LONE}", "u"]
        np.testing.assert_array_equal(
            table.to_dense([f"m{LONE}", "b"]), [[1.0, 0.0], [0.5, np.nan]]
        )


def test_task_profiles_of_models_and_tasks_with_lone_surrogates():
    # A DataFrame of object columns, as a user builds one: grouping it by
    # model and task inferred pandas' str dtype for the group keys.
    ids = {
        "model": [f"a{LONE}", f"a{LONE}", f"a{LONE}", "b", "b"],
        "query": ["q1", "q2", f"q3{LONE}", "q1", f"q3{LONE}"],
        "task": [f"math{LONE}", f"math{LONE}", "code", f"math{LONE}", "code"],
    }
    evals = pd.DataFrame({k: pd.Series(v, dtype=object) for k, v in ids.items()})
    evals["score"] = [1.0, 0.0, 1.0, 0.25, 0.5]
    profiles = task_profiles(evals)
    # By hand: a scores 1 and 0 on math, 1 on code; b 0.25 on math, 0.5 on code.
    assert profiles.index.tolist() == [f"a{LONE}", "b"]
    assert profiles.columns.tolist() == ["code", f"math{LONE}"]
    assert profiles.columns.name == "task"
    np.testing.assert_array_equal(profiles.to_numpy(), [[1.0, 0.5], [0.5, 0.25]])


class _RowsPerTask:
    """A stand-in embedder: per model, its number of rows on each task
    (sorted tasks), read without pandas strings."""

    def __init__(self, tasks):
        self.tasks = tasks

    def transform(self, evals):
        model = evals["model"].to_numpy(dtype=object)
        task = evals["task"].to_numpy(dtype=object)
        return np.array(
            [
                [np.sum((model == m) & (task == t)) for t in self.tasks]
                for m in sorted(set(model))
            ]
        )


def test_embed_profile_draws_queries_of_tasks_with_lone_surrogates():
    tasks = ["code", f"math{LONE}"]
    queries_by_task = pd.DataFrame(
        {
            "query": pd.Series(
                [f"m{i}{LONE}" for i in range(6)] + ["c0", "c1"], dtype=object
            ),
            "task": pd.Series([tasks[1]] * 6 + [tasks[0]] * 2, dtype=object),
        }
    )
    # Every query of both tasks is drawn (n_evals is larger): 2 code, 6 math.
    out = embed_profile(
        _RowsPerTask(tasks), {tasks[1]: 0.5, "code": 1.0}, queries_by_task,
        n_evals=100, scores="exact",
    )  # fmt: skip
    np.testing.assert_array_equal(out, [[2, 6]])


# ---------------------------------------------------------------------------
# Inspection, model selection, datasets and the command line on the marked
# pool: each site built a pandas object (an Index, a column, group keys) from
# the names, which pandas inferred as its str dtype and refused with a bare
# UnicodeEncodeError. Each result must be the twin pool's, the mark swapped.


def _swapped(value):
    """``value`` as plain Python data (pandas objects with their labels and
    dtypes), with LONE replaced by VALID in every str."""
    if isinstance(value, str):
        # Messages show a name's repr, which writes LONE as an escape.
        return value.replace(LONE, VALID).replace("\\udce9", VALID)
    if isinstance(value, pd.DataFrame):
        return {
            "index": _swapped(value.index),
            "columns": _swapped(value.columns),
            "dtypes": [str(d) for d in value.dtypes],
            "values": _swapped(value.to_numpy().tolist()),
        }
    if isinstance(value, pd.Series):
        return {
            "index": _swapped(value.index),
            "dtype": str(value.dtype),
            "values": _swapped(value.tolist()),
        }
    if isinstance(value, pd.Index):
        return {
            "name": value.name,
            "dtype": str(value.dtype),
            "labels": _swapped(value.tolist()),
        }
    if isinstance(value, np.ndarray):
        return _swapped(value.tolist())
    if isinstance(value, dict):
        return {_swapped(k): _swapped(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_swapped(v) for v in value]
    return value


def _marked_task(evals, mark):
    """``evals`` with its first task (sorted) ending in ``mark``."""
    task = sorted(evals["task"].unique())[0]
    tasks = [t + mark if t == task else t for t in evals["task"]]
    return evals.assign(task=pd.Series(tasks, dtype=object, index=evals.index))


@pytest.fixture(scope="module")
def marked_pools(tiny_embedder):
    """Per mark: a router fitted on the marked pool (its first task marked
    too), the pool, its marked model and query, and its embeddings as a
    DataFrame indexed by model."""
    pools = {}
    for mark in (LONE, VALID):
        evals, encodings, model, query = _pool(mark)
        evals = _marked_task(evals, mark)
        embedder = tiny_embedder(encodings, embedding_dim=4, max_epochs=2)
        router = LocusRouter(embedder).fit(evals)
        Z = pd.DataFrame(
            router.model_embeddings_,
            index=pd.Index(router.classes_, dtype=object),
        )
        pools[mark] = Bunch(
            router=router, evals=evals, encodings=encodings, model=model,
            query=query, Z=Z,
        )  # fmt: skip
    return pools


def _neighbors_of_the_second_model(p):
    # The marked model is among the neighbors (it is left out of its own).
    return nearest_models(p.router, p.router.classes_[1], k=5)


def _match_arrays(p):
    names = p.Z.index.tolist()
    return match_models(p.Z.to_numpy(), p.Z.to_numpy(), threshold=0.5,
                        names=names, reference_names=names)  # fmt: skip


def _fingerprint_threshold(p):
    # 30 evaluations per model: subsets of 16 (enc_size[0]) overlap, which
    # the calibration says (the marked query and task are among them).
    with pytest.warns(UserWarning, match=r"fewer than 2 \* n_evals = 32"):
        return calibrate_fingerprint_threshold(
            p.router.embedder_, p.evals, n_resamples=2, n_evals=16, random_state=0
        )


_INSPECTIONS = {
    "nearest_models": _neighbors_of_the_second_model,
    "nearest_models_frame": lambda p: nearest_models(p.Z, p.Z.index[1], k=5),
    "fallback_order": lambda p: fallback_order(p.router),
    "fallback_order_names": lambda p: fallback_order(
        p.Z.to_numpy(), names=p.Z.index.tolist()
    ),
    "distance_disagreement_correlation": lambda p: distance_disagreement_correlation(
        p.router, p.evals
    ),
    "embedding_dimensionality": lambda p: embedding_dimensionality(p.router, p.evals),
    "calibrate_fingerprint_threshold": _fingerprint_threshold,
    "match_models": lambda p: match_models(p.router, p.Z, threshold=0.5),
    "match_models_names": _match_arrays,
    "score_disagreement": lambda p: score_disagreement(p.evals, min_shared=2),
    "score_disagreement_reference": lambda p: score_disagreement(
        p.evals[p.evals["model"] != p.model], p.evals, min_shared=2
    ),
    "match_models_by_scores": lambda p: match_models_by_scores(
        p.evals, p.evals, threshold=0.3, min_shared=2
    ),
}


@pytest.mark.parametrize("name", list(_INSPECTIONS))
def test_inspection_of_models_named_with_a_lone_surrogate(marked_pools, name):
    inspect = _INSPECTIONS[name]
    lone = inspect(marked_pools[LONE])
    np.testing.assert_equal(_swapped(lone), _swapped(inspect(marked_pools[VALID])))
    # Names stay Python objects wherever a result holds them.
    for frame in lone.values() if isinstance(lone, dict) else [lone]:
        if isinstance(frame, pd.DataFrame):
            labels = [frame.index, frame.columns, *(frame[c] for c in frame)]
            held = [x for x in labels if any(LONE in str(v) for v in x)]
            assert all(x.dtype == object for x in held)


def test_inspection_results_hold_the_marked_names(marked_pools):
    # What the twin comparison rests on: the names reach the results.
    p = marked_pools[LONE]
    assert p.model in _neighbors_of_the_second_model(p)["model"].tolist()
    order = fallback_order(p.router)
    assert order.index[0] == p.model and order.index.dtype == object
    assert p.model in order.iloc[1].tolist()
    distance = score_disagreement(p.evals, min_shared=2).distance
    assert distance.index[0] == distance.columns[0] == p.model
    assert (
        match_models_by_scores(p.evals, p.evals, threshold=0.3, min_shared=2).loc[
            p.model, "nearest"
        ]
        == p.model
    )


def test_embedder_pandas_output_indexed_by_names_with_a_lone_surrogate(
    marked_pools,
):
    # set_output(transform="pandas") built pd.Index(models): pandas' str.
    def run(p):
        embedder = clone(p.router.embedder_).set_output(transform="pandas")
        fitted = embedder.fit_transform(p.evals)
        return fitted, embedder.transform(p.evals)

    (fitted, out), valid = run(marked_pools[LONE]), run(marked_pools[VALID])
    assert out.index.name == "model" and out.index.dtype == object
    assert out.index[0] == marked_pools[LONE].model
    np.testing.assert_array_equal(out.to_numpy(), fitted.to_numpy())
    np.testing.assert_equal(_swapped([fitted, out]), _swapped(list(valid)))


def test_model_group_split_of_models_named_with_a_lone_surrogate(marked_pools):
    # split grouped the queries by model name (pandas' str group keys);
    # onboarding_split seeded each model by name.encode() (strict UTF-8).
    cv = ModelGroupSplit(n_splits=2, n_onboard=10, random_state=0)
    p, twin = marked_pools[LONE], marked_pools[VALID]
    folds = [(a.tolist(), b.tolist()) for a, b in cv.split(p.evals)]
    assert folds == [(a.tolist(), b.tolist()) for a, b in cv.split(twin.evals)]
    onboard, score = cv.onboarding_split(p.evals)
    models = p.evals["model"].to_numpy(dtype=object)
    queries = p.evals["query"].to_numpy(dtype=object)
    for name in np.unique(models):
        picked = np.isin(np.flatnonzero(models == name), onboard)
        # 30 distinct queries each: 10 onboard the model, 20 score it.
        assert len(set(queries[models == name][picked])) == 10
        assert (~picked).sum() == 20
    # The marked model's choice is its own: the same alone as in the pool.
    alone = p.evals[models == p.model].reset_index(drop=True)
    mine = np.flatnonzero(models == p.model)
    assert queries[mine][np.isin(mine, onboard)].tolist() == (
        alone["query"].to_numpy(dtype=object)[cv.onboarding_split(alone)[0]].tolist()
    )
    # Other models' choices are the twin pool's.
    twin_onboard, _ = cv.onboarding_split(twin.evals)
    others = models != p.model
    assert np.isin(np.flatnonzero(others), onboard).tolist() == (
        np.isin(np.flatnonzero(others), twin_onboard).tolist()
    )
    # Too few queries to score: the error names the marked model.
    with pytest.raises(ValueError, match=r"6 model\(s\).*'fam0-m00\\udce9: 30'"):
        list(ModelGroupSplit(n_splits=2, n_onboard=30).split(p.evals))


def test_onboarding_scorer_of_models_named_with_a_lone_surrogate(
    marked_pools, tiny_embedder
):
    p = marked_pools[LONE]
    # 16 onboarding queries: enc_size[0], no FewEvaluationsWarning.
    cv = ModelGroupSplit(n_splits=2, n_onboard=16, random_state=0)
    # The fold that holds out the marked model.
    ((train, test),) = [
        (a, b) for a, b in cv.split(p.evals) if p.model in set(p.evals["model"].iloc[b])
    ]
    embedder = tiny_embedder(p.encodings, embedding_dim=4, max_epochs=2)
    router = LocusRouter(embedder, shrinkage=0.0).fit(p.evals.iloc[train])
    score = make_onboarding_scorer(cv)(router, p.evals.iloc[test])
    # By hand: onboard the held-out models from their onboarding rows, score
    # the rest (the scorer's steps, through the public methods).
    held_out = p.evals.iloc[test].reset_index(drop=True)
    onboard, rest = cv.onboarding_split(held_out)
    by_hand = copy.deepcopy(router)
    by_hand.add_models(held_out.iloc[onboard])
    assert score == get_router_scorer("correctness_accuracy")(
        by_hand, held_out.iloc[rest]
    )


def test_cross_val_names_a_model_lost_to_a_fold_with_a_lone_surrogate(
    marked_pools, tiny_embedder
):
    # The refitted path counted each lost model's queries in a groupby on
    # its name (pandas' str group keys): the error itself failed.
    p = marked_pools[LONE]
    first = sorted(p.evals["query"].unique())[:2]
    task = dict(zip(p.evals["query"], p.evals["task"], strict=True))
    extra = {
        "model": [f"solo{LONE}"] * 2, "query": first, "task": [task[q] for q in first],
    }  # fmt: skip
    solo = pd.DataFrame({k: pd.Series(v, dtype=object) for k, v in extra.items()})
    evals = pd.concat([p.evals, solo.assign(score=[1.0, 0.0])], ignore_index=True)
    embedder = tiny_embedder(p.encodings, embedding_dim=4, max_epochs=2)
    with pytest.warns(FewEvaluationsWarning, match=r"\['solo\\udce9'\] with 2"):
        router = LocusRouter(embedder, shrinkage=0.0).fit(evals)
    n = evals["query"].nunique()
    # The first fold holds both of solo's queries (positions 0 and 1).
    folds = [(np.arange(2, n), np.arange(2)), (np.arange(2), np.arange(2, n))]
    with pytest.raises(
        ValueError,
        match=r"^1 model\(s\) have every evaluation in one fold, so a copy fitted "
        r"without it cannot predict them: \['solo\\udce9'\]\.",
    ):
        cross_val_predict_proba(router, evals, cv=folds, refit=True)


@pytest.mark.parametrize("framed", [False, True], ids=["arrays", "DataFrame"])
def test_from_wide_with_lone_surrogates_in_names_queries_and_tasks(framed):
    # The uniqueness checks of models and queries built pd.Index(values).
    def run(mark):
        models, queries = [f"m{mark}", "b"], [f"q{mark}", "r"]
        scores = np.array([[1.0, 0.0], [0.5, np.nan]])
        if framed:
            scores = pd.DataFrame(
                scores,
                index=pd.Index(queries, dtype=object),
                columns=pd.Index(models, dtype=object),
            )
            return from_wide(scores, tasks={f"q{mark}": f"t{mark}", "r": "u"})
        return from_wide(scores, models, queries, tasks=[f"t{mark}", "u"])

    evals = run(LONE)
    # By hand: m scores 1 on q and 0.5 on r; b scores 0 on q (NaN on r).
    assert evals["model"].tolist() == [f"m{LONE}", f"m{LONE}", "b"]
    assert evals["query"].tolist() == [f"q{LONE}", "r", f"q{LONE}"]
    assert evals["task"].tolist() == [f"t{LONE}", "u", f"t{LONE}"]
    assert evals["score"].tolist() == [1.0, 0.5, 0.0]
    np.testing.assert_equal(_swapped(evals), _swapped(run(VALID)))
    with pytest.raises(ValueError, match=r"models must be unique; \['m\\udce9'\]"):
        from_wide(np.ones((1, 2)), [f"m{LONE}"] * 2, ["q"])


def _jsonl(path, records):
    # json.dumps escapes a lone surrogate ("\udce9"); json.loads gives it back.
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _query_table_pool(tmp_path, mark, *, shared_task):
    """A jsonl evaluation file keyed by query id, and its jsonl query table:
    ids ``1<mark>`` and ``2`` share the text ``same<mark>``, of one task
    (``shared_task``) or of two."""
    scores = [
        {"model": m, "qid": i, "score": s}
        for m, s in ((f"m{mark}", 1.0), ("b", 0.0))
        for i in (f"1{mark}", "2", "3")
    ]
    texts = [
        {"qid": f"1{mark}", "query": f"same{mark}", "task": f"t{mark}"},
        {"qid": "2", "query": f"same{mark}", "task": f"t{mark}" if shared_task else "u"},
        {"qid": "3", "query": "other", "task": f"t{mark}"},
    ]  # fmt: skip
    folder = tmp_path / ("lone" if mark == LONE else "valid")
    folder.mkdir()
    return _jsonl(folder / "e.jsonl", scores), _jsonl(folder / "q.jsonl", texts)


def test_load_evals_reads_lone_surrogates_from_jsonl(tmp_path):
    # A JSON escape gives a lone surrogate: pd.DataFrame(records) inferred
    # pandas' str dtype for the columns, which refused it.
    def run(mark):
        records = [
            {"model": f"m{mark}", "query": f"q{mark}", "score": 1, "task": f"t{mark}"},
            {"model": "b", "query": f"q{mark}", "score": 0.5, "task": f"t{mark}"},
            {"model": "b", "query": "r", "score": 0, "task": "u", "note": f"n{mark}"},
        ]
        folder = tmp_path / ("lone" if mark == LONE else "valid")
        folder.mkdir()
        return load_evals(_jsonl(folder / "e.jsonl", records))

    evals = run(LONE)
    assert evals["model"].tolist() == [f"m{LONE}", "b", "b"]
    assert evals["query"].tolist() == [f"q{LONE}", f"q{LONE}", "r"]
    assert evals["task"].tolist() == [f"t{LONE}", f"t{LONE}", "u"]
    assert evals["score"].tolist() == [1.0, 0.5, 0.0]
    assert evals["note"].tolist()[2] == f"n{LONE}" and evals["note"].dtype == object
    np.testing.assert_equal(_swapped(evals), _swapped(run(VALID)))


def test_load_evals_joins_query_tables_with_lone_surrogates(tmp_path):
    # Ids sharing a text are grouped to warn about them (by text, as group
    # keys); ids of several tasks sharing one are refused, found in groupbys.
    def run(mark):
        path, queries = _query_table_pool(tmp_path, mark, shared_task=True)
        with pytest.warns(UserWarning, match="belong to several ids") as caught:
            evals = load_evals(path, queries=queries, query_id_column="qid")
        return evals, str(caught[0].message)

    (evals, warning), valid = run(LONE), run(VALID)
    # 1<mark> and 2 are one query, "same<mark>", of task t<mark>.
    assert evals["query"].tolist() == [f"same{LONE}", f"same{LONE}", "other"] * 2
    assert evals["qid"].tolist() == [f"1{LONE}", "2", "3"] * 2
    assert set(evals["task"]) == {f"t{LONE}"}
    assert "(e.g. ['1\\udce9', '2'])" in warning
    np.testing.assert_equal(_swapped([evals, warning]), _swapped(list(valid)))


def test_load_evals_refuses_a_text_of_ids_of_two_tasks_with_lone_surrogates(
    tmp_path,
):
    path, queries = _query_table_pool(tmp_path, LONE, shared_task=False)
    with pytest.raises(
        ValueError,
        match=r"^1 text\(s\) in column 'query' of queries belong to ids of 'qid' "
        r"of several tasks \(e\.g\. 'same\\udce9' in the tasks \['t\\udce9', "
        r"'u'\], ids \['1\\udce9', '2'\]\)",
    ):
        load_evals(path, queries=queries, query_id_column="qid")


def test_load_evals_matches_int_and_text_ids_with_a_lone_surrogate(tmp_path):
    # An id column mixing ints and text: its decimal strings were built as
    # pandas' str dtype, which refused the text id.
    scores = [{"model": "a", "qid": i, "score": 1.0} for i in (1, f"x{LONE}")]
    texts = [{"qid": 1, "query": "one"}, {"qid": f"x{LONE}", "query": f"two{LONE}"}]
    path = _jsonl(tmp_path / "e.jsonl", scores)
    evals = load_evals(path, queries=_jsonl(tmp_path / "q.jsonl", texts),
                       query_id_column="qid")  # fmt: skip
    assert evals["qid"].tolist() == ["1", f"x{LONE}"]
    assert evals["query"].tolist() == ["one", f"two{LONE}"]


def test_cli_match_calibrates_for_endpoints_named_with_a_lone_surrogate(tmp_path):
    # locus match sized each endpoint's probe in a groupby on its name.
    from locus_sklearn._cli import main

    def run(mark):
        evals, _, _, _ = _pool(mark)
        folder = tmp_path / ("lone" if mark == LONE else "valid")
        folder.mkdir()
        records = evals[["model", "query", "score"]].to_dict("records")
        path = str(_jsonl(folder / "e.jsonl", records))
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            status = main(["match", path, path, "--min-shared", "2",
                           "--false-match-rate", "0.3", "--json"])  # fmt: skip
        assert status == 0
        return json.loads(out.getvalue())

    lone = run(LONE)
    # Every endpoint is a known model: each is its own nearest, at 0.
    first = lone["matches"][0]
    assert first["endpoint"] == first["nearest"] == f"fam0-m00{LONE}"
    np.testing.assert_equal(_swapped(lone), _swapped(run(VALID)))


def test_cli_embed_indexes_models_named_with_a_lone_surrogate(
    marked_pools, tmp_path, monkeypatch
):
    # locus embed indexed its table by pd.Index(models): pandas' str. The
    # csv itself is another matter (UTF-8 text cannot hold a lone
    # surrogate): the table is taken where the command writes it.
    from locus_sklearn._cli import _commands, main

    def run(mark):
        p = marked_pools[mark]
        folder = tmp_path / ("lone" if mark == LONE else "valid")
        folder.mkdir()
        router = folder / "r.safetensors"
        p.router.save(router)
        records = p.evals[["model", "query", "score"]].to_dict("records")
        evals = _jsonl(folder / "e.jsonl", records)
        encodings = folder / "enc.npz"
        np.savez(
            encodings,
            queries=np.array(list(p.encodings), dtype=str),
            vectors=np.array(list(p.encodings.values())),
        )
        written = []
        monkeypatch.setattr(
            _commands, "write_csv", lambda frame, *_: written.append(frame)
        )
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            status = main(["embed", str(router), str(evals), "-o",
                           str(folder / "emb.csv"), "--encodings", str(encodings),
                           "--json"])  # fmt: skip
        assert status == 0
        return written[0], json.loads(out.getvalue())

    (frame, shown), valid = run(LONE), run(VALID)
    del shown["output"], valid[1]["output"]  # the two folders
    assert frame.index.name == "model" and frame.index.dtype == object
    assert frame.index[0] == shown["models"][0] == f"fam0-m00{LONE}"
    # The router's own embeddings of its training models.
    np.testing.assert_allclose(
        frame.to_numpy(), marked_pools[LONE].router.embed(marked_pools[LONE].evals)
    )
    np.testing.assert_equal(_swapped([frame, shown]), _swapped(list(valid)))


def test_cli_text_output_with_a_lone_surrogate_is_refused_naming_the_line(tmp_path):
    # UTF-8 text cannot hold a lone surrogate: the write failed with a bare
    # UnicodeEncodeError (exit 1, "'utf-8' codec can't encode ...").
    from locus_sklearn._cli._io import write_text

    target = tmp_path / "emb.csv"
    with pytest.raises(
        ValueError,
        match=r"^cannot write EMBEDDINGS '.*emb\.csv' as UTF-8: line 3 holds "
        r"'\\udce9', a lone surrogate",
    ):
        write_text("model,x\na,1\nb\udce9,2\n", target, "EMBEDDINGS")
    assert not target.exists()
    assert list(tmp_path.iterdir()) == []
