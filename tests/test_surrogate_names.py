"""Model names, queries and tasks holding a lone surrogate.

``b"caf\\xe9".decode("utf-8", errors="surrogateescape")`` gives ``"caf\\udce9"``:
a str that check_evals accepts, but that pandas' Arrow-backed str dtype (the
one pandas 3 infers for strings) refuses with a bare UnicodeEncodeError. Every
path from a validated table on must keep such ids as Python objects.
"""

import numpy as np
import pandas as pd

from locus_sklearn import LocusRouter, check_evals
from locus_sklearn.datasets import make_model_pool
from locus_sklearn.inspection import embed_profile, task_profiles

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
