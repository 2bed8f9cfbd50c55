"""The task-level routers of benchmarks/headroom.py on hand-computed tables."""

import importlib.util
import os
import sys

import numpy as np
import pandas as pd
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "benchmarks", "headroom.py")


@pytest.fixture(scope="module")
def headroom():
    if not os.path.exists(SCRIPT):  # pragma: no cover - source checkout only
        pytest.skip("benchmarks/ is not part of this installation")
    sys.path.insert(0, os.path.dirname(SCRIPT))
    try:
        spec = importlib.util.spec_from_file_location("bench_headroom", SCRIPT)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(os.path.dirname(SCRIPT))
    return module


def _rows():
    rows = pd.DataFrame(
        {
            "model": ["a", "a", "a", "b", "b"],
            "query": ["q1", "q2", "q3", "q1", "q3"],
            "score": [1.0, 0.0, 1.0, 0.0, 1.0],
        }
    )
    task_of = pd.Series({"q1": "math", "q2": "math", "q3": "law"})
    return rows, task_of


def test_task_table_means_and_shrinkage(headroom):
    rows, task_of = _rows()
    table = headroom.task_table(rows, task_of, ["a", "b"], ["law", "math"])
    # a: law {1} -> 1, math {1, 0} -> 0.5; b: law {1} -> 1, math {0} -> 0.
    np.testing.assert_allclose(table, [[1.0, 0.5], [1.0, 0.0]])
    shrunk = headroom.task_table(rows, task_of, ["a", "b"], ["law", "math"], prior=2)
    # a's mean is 2/3: law (1 + 2 * 2/3) / 3, math (1 + 2 * 2/3) / 4.
    np.testing.assert_allclose(shrunk[0], [7 / 9, 7 / 12])
    # b's mean is 1/2: law (1 + 1) / 3, math (0 + 1) / 3.
    np.testing.assert_allclose(shrunk[1], [2 / 3, 1 / 3])


def test_task_table_empty_cell_uses_the_model_mean(headroom):
    rows, task_of = _rows()
    rows = rows[~((rows["model"] == "b") & (rows["query"] == "q1"))]
    table = headroom.task_table(rows, task_of, ["a", "b"], ["law", "math"])
    assert table[1, 1] == 1.0  # b has no math rows: its overall mean


def test_low_rank_table_recovers_a_task_profile(headroom):
    # Two models with opposite task skills, many rows: the rank-1 fit
    # must rank them the same way per task as the truth does.
    rng = np.random.default_rng(0)
    truth = np.array([[0.9, 0.2], [0.2, 0.9]])
    parts = []
    for m, model in enumerate(["a", "b"]):
        q = rng.integers(0, 400, 2000)
        parts.append(
            pd.DataFrame(
                {
                    "model": model,
                    "query": [f"q{i}" for i in q],
                    "score": (rng.random(2000) < truth[m, q % 2]).astype(float),
                }
            )  # fmt: skip
        )
    rows = pd.concat(parts, ignore_index=True)
    task_of = pd.Series({f"q{i}": ["t0", "t1"][i % 2] for i in range(400)})
    table = headroom.low_rank_table(rows, task_of, ["a", "b"], ["t0", "t1"], 1, 1e-4, 0)
    np.testing.assert_allclose(table, truth, atol=0.05)


def test_headroom_on_a_synthetic_pool(headroom, tmp_path):
    import torch

    threads = torch.get_num_threads()  # main() sets one thread; restore it
    try:
        per_seed = headroom.main(
            ["--data", "synthetic", "--n", "32", "--seeds", "0", "--out", str(tmp_path)]
        )
    finally:
        torch.set_num_threads(threads)
    result = per_seed[0]
    oracle = result.pop("task oracle (test answers)")
    # Choosing each task's best model on the test answers is the best any
    # router that only sees the task can do on those answers.
    task_rows = {k: v for k, v in result.items() if k.startswith("task")}
    assert len(task_rows) == 3
    assert all(v <= oracle + 1e-12 for v in task_rows.values())
    assert (tmp_path / "headroom_synthetic_32.md").read_text().count("| task") == 4
    assert (tmp_path / "headroom_synthetic_32.json").exists()
