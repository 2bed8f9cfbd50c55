"""Smoke tests of the benchmark entry points on tiny synthetic pools, and the
task-level routers of ``benchmarks/headroom.py`` on hand-computed tables."""

import copy
import dataclasses
import importlib.util
import json
import os
import re
import sys
from types import SimpleNamespace
from unittest import mock

import numpy as np
import pandas as pd
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _benchmarks_on_path():
    """Put ``benchmarks/`` on ``sys.path`` (once): the scripts import their
    sibling helpers (_provenance, _loss_terms, ...)."""
    directory = os.path.join(ROOT, "benchmarks")
    if directory not in sys.path:
        sys.path.insert(0, directory)


def _load_script(name):
    path = os.path.join(ROOT, "benchmarks", f"{name}.py")
    if not os.path.exists(path):  # pragma: no cover - source checkout only
        pytest.skip("benchmarks/ is not part of this installation")
    _benchmarks_on_path()
    spec = importlib.util.spec_from_file_location(f"bench_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def routing():
    return _load_script("routing")


@pytest.fixture(scope="module")
def headroom():
    return _load_script("headroom")


@pytest.fixture(scope="module")
def complete_pool():
    """4 models, each scored on all 60 queries (8-d encodings)."""
    from locus_sklearn.datasets import make_model_pool

    return make_model_pool(
        n_models=4, n_queries=60, n_families=2, evals_per_model="all",
        n_features=8, random_state=0,
    )  # fmt: skip


def test_routing_benchmark_tiny(routing, tmp_path):
    import torch

    threads = str(torch.get_num_threads())  # leave the session's setting as it is
    results = routing.main(
        ["--data", "synthetic", "--tiny", "--seeds", "0", "1", "--jobs", "2",
         "--out", str(tmp_path), "--quiet", "--threads", threads]
    )  # fmt: skip
    result = results["synthetic"]
    files = sorted(p.name for p in tmp_path.iterdir())
    json_files = [f for f in files if f.endswith(".json")]
    assert len(json_files) == 1 and json_files[0].startswith("synthetic_")
    with open(tmp_path / json_files[0]) as f:
        saved = json.load(f)
    for key in (
        "dataset",
        "date",
        "git_commit",
        "seeds",
        "machine",
        "settings",
        "runs",
        "summary",
    ):
        assert key in saved
    assert {"cpu", "cores", "torch"} <= set(saved["machine"])
    # What decides whether the run may give the README its section.
    assert saved["tag"] == "" and saved["settings"]["locus_overrides"] == []
    assert saved["settings"]["experiments"] == list(routing.EXPERIMENTS)
    assert routing.readme_exclusion(saved, str(tmp_path / json_files[0])) is None
    summary = saved["summary"]
    assert set(summary["main"]) == {"32", "all"}
    routers = summary["main"]["32"]["routers"]
    assert set(routers) == {"LOCUS", "kNN", "KMeans", "MF", "IRT", "SingleBest"}
    for metrics in routers.values():
        for key in (
            "routing_acc",
            "correctness_acc",
            "log_loss",
            "fit_s",
            "latency_ms_per_query",
        ):
            assert 0 <= metrics[key]["mean"] < float("inf")
        assert (
            metrics["routing_acc"]["mean"]
            <= summary["main"]["32"]["oracle_acc"]["mean"] + 1e-9
        )
    assert "embed_s" in routers["LOCUS"]
    # The default router's shrinkage, recorded per seed and named in the README.
    chosen = [
        run["main"]["32"]["routers"]["LOCUS"]["shrinkage"] for run in saved["runs"]
    ]
    assert len(chosen) == 2 and all(0 <= s <= 1 for s in chosen)
    readme = (tmp_path / "README.md").read_text()
    assert "the shrinkage it chose at fit, per seed: " in readme
    assert all(0 <= run["onboarding"]["base_shrinkage"] <= 1 for run in saved["runs"])
    assert set(summary["onboarding"]["by_k"]) == {"16", "32"}
    assert set(summary["robustness"]["overlap"]) == {
        "0.0",
        "0.25",
        "0.5",
        "0.75",
        "1.0",
    }
    # The reference set itself (overlap 1) reproduces the reference embeddings.
    assert summary["robustness"]["overlap"]["1.0"]["drift_ratio_max"][
        "mean"
    ] == pytest.approx(0, abs=1e-5)
    assert result["mode"] == "tiny"
    # Seeds ran in two processes; each run is its own seed's, in order.
    assert [run["seed"] for run in saved["runs"]] == [0, 1]
    assert saved["runs"][0]["main"] != saved["runs"][1]["main"]
    readme = (tmp_path / "README.md").read_text()
    assert "## synthetic" in readme and "| LOCUS |" in readme and "Onboarding" in readme
    # --rebuild re-summarises the stored runs: same tables, no fitting.
    (tmp_path / "README.md").unlink()
    assert routing.main(["--rebuild", "--out", str(tmp_path)]) == {}
    assert (tmp_path / "README.md").read_text() == readme


def test_cost_curve_endpoints(routing):
    import numpy as np

    y = np.array([[1.0, 1.0], [1.0, 0.0], [0.0, 1.0]])
    proba = np.array([[0.9, 0.8], [0.9, 0.1], [0.2, 0.9]])
    costs = np.array([1.0, 0.01])
    cq = np.tile(costs, (3, 1))
    points = routing.cost_curve(y, proba, costs, cq, n_points=11)
    assert points[0]["cost_weight"] == 0 and points[0]["accuracy"] == 1.0
    assert points[-1]["cost"] == pytest.approx(
        0.01
    )  # a huge lambda picks the cheap model
    assert routing.cheapest_matching(points, 2 / 3) == pytest.approx(0.01)
    assert routing.cheapest_matching(points, 1.1) is None


# ------------------------------------------------------------ headroom.py
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


def test_encoding_clusters_group_queries_by_encoding(headroom):
    # Two tight groups of encodings far apart: two clusters, one per group,
    # and a label for every query of the data.
    rng = np.random.default_rng(0)
    centres = np.eye(4)[:2] * 10
    encodings = {
        f"q{i}": (centres[i % 2] + 0.01 * rng.normal(size=4)).astype(np.float32)
        for i in range(10)
    }
    evals = pd.DataFrame({"model": "a", "query": list(encodings), "score": 1.0})
    data = SimpleNamespace(evals=evals, encodings=encodings)
    labels = headroom.encoding_clusters(data, 2, seed=0)
    assert list(labels.index) == list(encodings)
    assert labels.nunique() == 2
    assert (labels.iloc[::2].nunique(), labels.iloc[1::2].nunique()) == (1, 1)
    assert labels.iloc[0] != labels.iloc[1]


def test_headroom_on_a_synthetic_pool(headroom, tmp_path):
    import torch

    threads = torch.get_num_threads()  # main() sets one thread; restore it
    try:
        per_seed = headroom.main(
            ["--data", "synthetic", "--n", "32", "--seeds", "0", "--clusters", "3",
             "--out", str(tmp_path)]
        )  # fmt: skip
    finally:
        torch.set_num_threads(threads)
    result = per_seed[0]
    oracle = result.pop("task oracle (test answers)")
    # Choosing each task's best model on the test answers is the best any
    # router that only sees the task can do on those answers.
    task_rows = {k: v for k, v in result.items() if k.startswith("task")}
    assert len(task_rows) == 3
    cluster_rows = {k: v for k, v in result.items() if k.startswith("3 clusters")}
    assert len(cluster_rows) == 2  # shrunk and low rank
    assert all(0 <= v <= 1 for v in cluster_rows.values())
    assert all(v <= oracle + 1e-12 for v in task_rows.values())
    assert (tmp_path / "headroom_synthetic_32.md").read_text().count("| task") == 4
    assert (tmp_path / "headroom_synthetic_32.json").exists()


@pytest.fixture(scope="module")
def quality():
    return _load_script("embedding_quality")


# A LOCUS small enough for a tiny benchmark run (--locus KEY=VALUE items).
TINY_LOCUS = [
    "embedding_dim=8", "n_latents=2", "n_blocks=1", "n_heads=2", "hidden_dim=8",
    "max_epochs=1", "episodes_per_epoch=16", "enc_size=[8,32]", "dec_size=16",
]  # fmt: skip


def _tiny_run(script, quality, argv, tmp_path):
    """``script.main(argv)`` with the tiny LOCUS, written to ``tmp_path``; the
    torch threads and embedding_quality's settings (which ``--locus`` edits in
    place) restored after."""
    import torch

    threads = torch.get_num_threads()
    saved = dict(quality.SETTINGS)
    try:
        return script.main(
            [*argv, "--out", str(tmp_path), "--threads", str(threads), "--locus",
             *TINY_LOCUS]
        )  # fmt: skip
    finally:
        torch.set_num_threads(threads)
        quality.SETTINGS.clear()
        quality.SETTINGS.update(saved)


def test_geometry_hand_computed(quality):
    # Rank one: every model on one line -> participation ratio 1, first share 1.
    strength = np.array([0.1, 0.2, 0.3, 0.4])
    Z = np.outer(strength, [1.0, 2.0, 0.0])
    g = quality.geometry(Z, strength)
    assert g["participation_ratio"] == pytest.approx(1.0)
    assert g["first_share"] == pytest.approx(1.0)
    assert g["abs_corr_strength"] == pytest.approx(1.0)
    # Two orthogonal directions of equal variance -> participation ratio 2.
    Z = np.array([[1.0, 0], [-1, 0], [0, 1], [0, -1]])
    g = quality.geometry(Z, np.arange(4.0))
    assert g["participation_ratio"] == pytest.approx(2.0)
    assert g["first_share"] == pytest.approx(0.5)


def test_group_recall_and_self_identification(quality):
    Z = np.array([[1.0, 0.0], [0.9, 0.1], [-1.0, 0.0], [0.0, 1.0]])
    models = ["a", "a2", "b", "c"]
    # a and a2 are each other's nearest (cosine after centring).
    r = quality.group_recall(Z, models, {"a": ["a", "a2"]})
    assert r == {"recall@1": 1.0, "recall@3": 1.0, "n_queries": 2}
    r = quality.group_recall(Z, models, {"x": ["a", "b"]})
    assert r["recall@1"] == 0.0 and r["recall@3"] == 1.0
    assert quality.self_identification(Z, Z + 0.01) == 1.0
    assert quality.self_identification(Z, Z[::-1]) == 0.0


def test_similarity_recall_reads_distances_and_skips_incomparable_pairs(quality):
    # Negated disagreements: a's nearest is b (0.1); b's is c (0.05), since
    # b-a2 is not comparable (NaN) and a2's only comparable model is c.
    D = np.array(
        [
            [0.0, 0.3, 0.1, 0.6],
            [0.3, 0.0, np.nan, 0.2],
            [0.1, np.nan, 0.0, 0.05],
            [0.6, 0.2, 0.05, 0.0],
        ]
    )
    r = quality.similarity_recall(-D, ["a", "a2", "b", "c"], {"a": ["a", "a2"]})
    assert r == {"recall@1": 0.0, "recall@3": 1.0, "n_queries": 2}
    r = quality.similarity_recall(-D, ["a", "a2", "b", "c"], {"x": ["a", "b"]})
    assert r["recall@1"] == 0.5  # a finds b; b finds c


def test_bench_group_rules():
    _benchmarks_on_path()
    import _data

    assert _data.shaberi_base_name("Qwen__Qwen3-30B-A3B-FP8") == "qwen3-30b-a3b"
    assert _data.shaberi_base_name("011-qwen3-8b-v2-sft-nothink") == "qwen3-8b-v2-sft"
    assert (
        _data.shaberi_base_name("shisa-ai__chotto-14b-20250922-W8A8-INT8-smooth")
        == "chotto-14b-20250922"
    )
    assert _data.shaberi_base_name("augmxnt__shisa-7b-v1-run2") == "shisa-7b-v1"
    groups = _data.bfcl_twin_groups(["x", "x-FC", "y-FC-Any", "y", "y-FC-Auto", "z"])
    assert groups == {"x": ["x", "x-FC"], "y": ["y", "y-FC-Any", "y-FC-Auto"]}


def test_embedding_quality_tiny(quality, tmp_path):
    results = _tiny_run(
        quality, quality,
        ["--pools", "specialists", "--seeds", "0", "--n", "all",
         "--variants", "baseline", "profile", "--guard"],
        tmp_path,
    )  # fmt: skip
    s = results["specialists"]["summary"]["all"]
    r = s["routing"]
    assert r["oracle"]["mean"] >= r["task oracle"]["mean"] >= r["per-task best"]["mean"]
    for name in ("baseline", "profile"):
        assert 0 <= r[f"LOCUS {name}"]["mean"] <= r["oracle"]["mean"]
        e = s["embeddings"][f"LOCUS {name}"]
        assert 1 <= e["participation_ratio"]["mean"] <= 8
        assert e["relative_spread"]["mean"] > 0
        # Fallback with no outage is the router's own routing accuracy.
        assert e["no_outage"]["mean"] == pytest.approx(r[f"LOCUS {name}"]["mean"])
        assert 0 <= e["fallback@1"]["mean"] <= 1
        # Every training query is shared: the fallback by score disagreement too.
        assert 0 <= e["fallback@1 by scores"]["mean"] <= 1
        assert 0 <= r[f"LOCUS {name} +guard"]["mean"] <= 1
        assert 0 <= r[f"LOCUS {name} +cv-guard"]["mean"] <= 1
        assert e["cv-guard alpha"]["mean"] in (0.0, 0.25, 0.5, 0.75, 1.0)
    assert s["embeddings"]["score-disagreement"]["recall@1"]["mean"] == 1.0
    # The planted pool's truth is known: every router also gets its expected
    # accuracy, and routing by task can at best reach the expected task oracle.
    x = s["expected"]
    assert x["oracle"]["mean"] >= x["task oracle"]["mean"] >= x["per-task best"]["mean"]
    assert x["task oracle"]["mean"] >= x["single best"]["mean"]
    assert set(x) >= {"kNN", "MF", "LOCUS baseline", "LOCUS profile +guard"}
    md = (tmp_path / "embedding_quality.md").read_text()
    assert md.startswith("# Embedding") and "expected (true probabilities)" in md


def test_embedding_quality_repeated_shrinkage(quality, tmp_path):
    """--shrinkage-repeats adds the default router choosing its shrinkage on
    several shuffles of the folds, beside the single draw, for every variant
    (the random_state variants included)."""
    results = _tiny_run(
        quality, quality,
        ["--pools", "specialists", "--seeds", "0", "--n", "all",
         "--variants", "baseline", "baseline-rs1000", "--shrinkage-auto",
         "--shrinkage-repeats", "3"],
        tmp_path,
    )  # fmt: skip
    s = results["specialists"]["summary"]["all"]
    grid = (0.0, 0.25, 0.5, 0.75, 1.0)
    for name in ("baseline", "baseline-rs1000"):
        for key in (f"LOCUS {name} shrinkage=auto", f"LOCUS {name} shrinkage=auto x3"):
            assert 0 <= s["routing"][key]["mean"] <= s["routing"]["oracle"]["mean"]
        e = s["embeddings"][f"LOCUS {name}"]
        assert e["shrinkage"]["mean"] in grid
        assert e["shrinkage repeated"]["mean"] in grid
    # Another random_state on the same rows is another fit.
    a, b = (
        results["specialists"]["runs"][0]["by_n"]["all"]["embeddings"][k]
        for k in ("LOCUS baseline", "LOCUS baseline-rs1000")
    )
    assert a["participation_ratio"] != b["participation_ratio"]


def _paired_pool(base, cand, routed=None):
    """An embedding_quality.py result of two splits x two random_states:
    ``base`` / ``cand`` map a measure to its four values in pairing order
    (split 0 at +0, +1000, then split 1)."""
    runs = []
    for split in range(2):
        emb, routing = {}, {"kNN": 0.80, "single best": 0.70, "MF": 0.75}
        for side, name, values in (
            ("baseline", "b", base),
            ("agreement-0.1", "c", cand),
        ):
            for j, offset in enumerate(("", "-rs1000")):
                i = 2 * split + j
                emb[f"LOCUS {side}{offset}"] = {
                    "best_valid_loss": values["loss"][i],
                    "best_valid_routing": values["routing"][i],
                    "groups": {"recall@1": values["recall"][i]},
                    "self_id": {"64": 0.0, "256": values["self_id"][i]},
                    "relative_spread": values["spread"][i],
                    "participation_ratio": 1.0,
                    "n_epochs": 10,
                    "shrinkage": 0.0,
                }
                for key in (
                    f"LOCUS {side}{offset}",
                    f"LOCUS {side}{offset} shrinkage=auto",
                ):
                    routing[key] = (routed or {}).get(name, [0.8] * 4)[i]
        runs.append({"by_n": {"256": {"embeddings": emb, "routing": routing}}})
    return {"runs": runs}


def test_paired_random_state_rule():
    """Session 40's paired rule on hand-made fits: each candidate fit is read
    against the baseline fit of the same split and random_state."""
    _benchmarks_on_path()
    import paired_random_state as pr

    base = {
        "loss": [0.50, 0.52, 0.54, 0.56],
        "routing": [0.90, 0.80, 0.90, 0.80],
        "recall": [0.10, 0.20, 0.30, 0.40],
        "self_id": [0.5, 0.5, 0.5, 0.5],
        "spread": [0.1, 0.005, 0.1, 0.1],
    }
    # Loss +0.001 on every pair (passes 1); recall up 0.04 on every pair
    # (passes 5 at 0.03); self-identification lower by 0.1 on every pair
    # (SE 0: clearly lower, fails 3); one more collapsed fit (fails 4).
    cand = {
        "loss": [x + 0.001 for x in base["loss"]],
        "routing": base["routing"],
        "recall": [x + 0.04 for x in base["recall"]],
        "self_id": [0.4, 0.4, 0.4, 0.4],
        "spread": [0.005, 0.005, 0.1, 0.1],
    }
    results = {"shaberi": _paired_pool(base, cand)}
    offsets = ["", "-rs1000"]
    rows, failed = pr.judge(
        "shaberi", results["shaberi"], "baseline", "agreement-0.1", offsets, "256"
    )
    assert failed == ["(3) self-identification", "(4)"]
    got = dict(rows)
    assert got["(1) best validation loss"]["d"] == pytest.approx(0.001)
    assert got["(1) best validation loss"]["se"] == pytest.approx(0.0, abs=1e-12)
    assert got["(3) recall@1"]["base"] == pytest.approx(0.25)
    assert got["(3) recall@1"]["d"] == pytest.approx(0.04)
    assert got["(4) collapsed fits"] == [1, 2]
    # A noisy fall of the same mean is not "clearly lower": d = -0.1 with
    # SE 0.058 (pairs at 0 and -0.2), so d + 2 SE > 0.
    cand["self_id"] = [0.5, 0.3, 0.5, 0.3]
    cand["spread"] = base["spread"]
    results = {"shaberi": _paired_pool(base, cand)}
    rows, failed = pr.judge(
        "shaberi", results["shaberi"], "baseline", "agreement-0.1", offsets, "256"
    )
    assert failed == []
    # Rule (5) on another measure: the validation routing did not move.
    _, failed = pr.judge(
        "shaberi", results["shaberi"], "baseline", "agreement-0.1", offsets, "256",
        gain=("shaberi", "validation-routing", 0.005),
    )  # fmt: skip
    assert failed == ["(5)"]
    r = dict(rows)["(3) self-identification"]
    assert r["d"] == pytest.approx(-0.1)
    assert r["se"] == pytest.approx((0.04 / 3) ** 0.5 / 2)  # sample sd / sqrt(4)
    # The default router lower by 1 point on every pair: clearly lower.
    routed = {"b": [0.80] * 4, "c": [0.79] * 4}
    pool = _paired_pool(base, cand, routed)
    trows, lower, peers, chosen = pr.routing_rows(
        pool, "baseline", "agreement-0.1", offsets, "256"
    )
    assert lower and dict(trows)["default router"]["d"] == pytest.approx(-0.01)
    assert peers == {"kNN": 0.80, "single best": 0.70, "MF": 0.75}
    text, verdicts = pr.report(
        {"shaberi": pool}, "baseline", "agreement-0.1", offsets, "256", test=True
    )
    assert verdicts == {"shaberi": []}
    assert "## shaberi (4 pairs): passes" in text and "clearly lower" in text


def test_paired_random_state_merges_runs():
    """A candidate run alone pairs with an earlier run's baseline fits: the
    files' entries join, and an entry both hold must agree."""
    _benchmarks_on_path()
    import paired_random_state as pr

    base = {
        "loss": [0.50, 0.52, 0.54, 0.56], "routing": [0.9, 0.8, 0.9, 0.8],
        "recall": [0.1, 0.2, 0.3, 0.4], "self_id": [0.5] * 4, "spread": [0.1] * 4,
    }  # fmt: skip
    both = _paired_pool(base, dict(base, recall=[0.2, 0.3, 0.4, 0.5]))
    for seed, run in enumerate(both["runs"]):
        run["seed"] = seed
    old, new = copy.deepcopy(both), copy.deepcopy(both)
    # The earlier run holds the baseline fits only, the candidate's run the
    # candidate's only; both hold the peers.
    for pool, drop in ((old, "agreement"), (new, "baseline")):
        for run in pool["runs"]:
            for part in run["by_n"]["256"].values():
                for key in [k for k in part if drop in k]:
                    del part[key]
    merged = pr.merge_results({"shaberi": old}, {"shaberi": new})
    assert merged == {"shaberi": {**both, "variants": {}}}
    rows, failed = pr.judge(
        "shaberi", merged["shaberi"], "baseline", "agreement-0.1", ["", "-rs1000"],
        "256",
    )  # fmt: skip
    assert dict(rows)["(3) recall@1"]["d"] == pytest.approx(0.1)
    assert failed == []
    # A pool only one file has is kept whole.
    assert pr.merge_results({}, {"bfcl": new}) == {"bfcl": new}
    # A rerun of one fit on the same split: another wall time and a measure
    # the later version adds are not other splits (they stopped the merge).
    fit = {"pr": 1.1, "fit_s": 30.0}
    for pool, extra in ((old, {}), (new, {"fit_s": 31.5, "added": 2.0})):
        pool["runs"][0]["by_n"]["256"]["embeddings"]["LOCUS rerun"] = {**fit, **extra}
    rerun = pr.merge_results({"shaberi": old}, {"shaberi": new})["shaberi"]
    assert rerun["runs"][0]["by_n"]["256"]["embeddings"]["LOCUS rerun"] == {
        "pr": 1.1, "fit_s": 30.0, "added": 2.0,
    }  # fmt: skip
    new["runs"][0]["by_n"]["256"]["embeddings"]["LOCUS rerun"]["pr"] = 1.2
    with pytest.raises(ValueError, match=r"embeddings\['LOCUS rerun'\]\['pr'\]"):
        pr.merge_results({"shaberi": old}, {"shaberi": new})
    for pool in (old, new):
        del pool["runs"][0]["by_n"]["256"]["embeddings"]["LOCUS rerun"]
    # Runs on other splits do not pair.
    new["runs"][1]["by_n"]["256"]["routing"]["kNN"] = 0.5
    with pytest.raises(ValueError, match=r"seed 1, n 256: routing\['kNN'\] differs"):
        pr.merge_results({"shaberi": old}, {"shaberi": new})
    new["runs"][1]["by_n"]["256"]["routing"]["kNN"] = 0.80
    new["runs"][1]["n_test"], old["runs"][1]["n_test"] = 99, 100
    with pytest.raises(ValueError, match="seed 1: n_test differs"):
        pr.merge_results({"shaberi": old}, {"shaberi": new})
    new["settings"] = {"max_epochs": 40}
    with pytest.raises(ValueError, match="shared settings differ"):
        pr.merge_results({"shaberi": old}, {"shaberi": new})
    new["runs"][1]["seed"] = 2
    with pytest.raises(ValueError, match=r"seeds \[0, 1\] and \[0, 2\]"):
        pr.merge_results({"shaberi": old}, {"shaberi": new})


def test_shrinkage_repeats_holdout_tiny(tmp_path):
    """The holdout is a fixed fifth of the split's training queries, kept out of
    every fit; the routers route those of them every model answered."""
    _benchmarks_on_path()
    import embedding_quality
    import routing
    import shrinkage_repeats_holdout as srh

    data = embedding_quality.load_pool("specialists")
    split = routing.Split(data, 0)
    held, queries, y = srh.holdout_split(split)
    train_queries = set(split.train_rows["query"])
    assert held <= train_queries
    assert len(held) == round(0.2 * len(train_queries))
    assert set(queries) <= held and not set(queries) & set(split.test_queries)
    assert y.shape == (len(queries), len(split.models))
    assert srh.holdout_split(split)[0] == held  # the split's seed fixes it
    results = _tiny_run(
        srh, embedding_quality,
        ["--pools", "specialists", "--seeds", "0", "--offsets", "0", "1000",
         "--n", "64", "--repeats", "2"],
        tmp_path,
    )  # fmt: skip
    fits = results["specialists"]["fits"]
    assert [f["offset"] for f in fits] == [0, 1000]
    for f in fits:
        assert f["n_holdout_queries"] == len(queries)
        assert f["n_inner_rows"] < 64 * len(split.models)
        for v in f["shrinkage"].values():
            assert v in (0.0, 0.25, 0.5, 0.75, 1.0)
        r = f["routing"]
        assert all(0 <= v <= r["oracle"] for v in r.values())
    s = results["specialists"]["summary"]
    d = [f["routing"]["repeated"] - f["routing"]["single"] for f in fits]
    assert s["d_repeated_single"] == pytest.approx(sum(d) / 2)
    assert (tmp_path / "shrinkage_repeats_holdout.json").exists()


def test_predicted_profile_is_the_routers_own_prediction(quality):
    """The predicted-profile fingerprint at the encodings of some queries is the
    plain router's P(correct) there, transposed (models x probes); read from a
    subset of rows, it is the prediction of models embedded from that subset."""
    from locus_sklearn import LocusEmbedder, LocusRouter
    from locus_sklearn.datasets import make_model_pool

    pool = make_model_pool(
        n_models=5, n_queries=100, evals_per_model=60, random_state=0
    )
    embedder = LocusEmbedder(
        pool.encodings, embedding_dim=8, n_latents=2, n_blocks=1, n_heads=2,
        max_epochs=1, episodes_per_epoch=8, enc_size=(16, 32), dec_size=16,
        random_state=0,
    )  # fmt: skip
    router = LocusRouter(embedder, shrinkage=None).fit(pool.evals)
    queries = sorted(pool.encodings)[:7]
    probes = np.stack([pool.encodings[q] for q in queries])
    sets = {"all": probes, "first two": probes[:2]}
    profiles = quality.predicted_profiles(router, pool.evals, sets)
    P = profiles["all"]
    assert P.shape == (5, 7)
    np.testing.assert_allclose(P, router.predict_proba(queries).T, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(profiles["first two"], P[:, :2], rtol=1e-5, atol=1e-6)
    half = pool.evals.groupby("model").head(30)
    Z = router.embed(half)
    expected = router.embedder_.predict_proba(Z, queries, evals=half).T
    from_half = quality.predicted_profiles(router, half, sets)["all"]
    np.testing.assert_allclose(from_half, expected, rtol=1e-5, atol=1e-6)
    assert not np.allclose(from_half, P)


def test_expected_routing_hand_computed(quality):
    # Two tasks, two queries each; model 1 is better on task a, model 0 on b.
    truth = np.array([[0.2, 0.9], [0.4, 0.7], [0.8, 0.1], [0.6, 0.5]])
    tasks = np.array(["a", "a", "b", "b"])
    scores = {"always 0": np.array([[1.0, 0.0]] * 4), "per query": truth}
    out = quality.expected_routing(truth, scores, tasks)
    assert np.isclose(out["always 0"], (0.2 + 0.4 + 0.8 + 0.6) / 4)
    assert np.isclose(out["per query"], (0.9 + 0.7 + 0.8 + 0.6) / 4)
    # Task a -> model 1 (mean 0.8), task b -> model 0 (mean 0.7).
    assert np.isclose(out["task oracle"], (0.8 * 2 + 0.7 * 2) / 4)
    assert np.isclose(out["oracle"], out["per query"])


def test_task_features_append_a_scaled_one_hot(quality):
    data = quality.load_pool("specialists")
    out = quality.with_task_features(data, 0.5)
    task_of = data.evals.drop_duplicates("query").set_index("query")["task"]
    tasks = sorted(task_of.unique())
    for q in list(data.encodings)[:20]:
        v = out.encodings[q]
        np.testing.assert_array_equal(v[: len(data.encodings[q])], data.encodings[q])
        expected = np.zeros(len(tasks), dtype=np.float32)
        expected[tasks.index(task_of[q])] = 0.5
        np.testing.assert_array_equal(v[len(data.encodings[q]) :], expected)
    assert out.evals is data.evals and "one-hot(task)" in out.description


@pytest.fixture(scope="module")
def visibility():
    return _load_script("task_visibility")


def test_participation_ratio_hand_computed(visibility):
    assert visibility.participation_ratio(np.diag([1.0, 1.0, 0.0])) == 2.0
    assert visibility.participation_ratio(np.diag([4.0, 0.0])) == 1.0
    # (1 + 1/2)^2 / (1 + 1/4) = 1.8; a negative eigenvalue counts as zero.
    assert np.isclose(visibility.participation_ratio(np.diag([1.0, 0.5, -0.3])), 1.8)
    # Only the symmetric part: an antisymmetric cross-covariance carries nothing.
    assert visibility.participation_ratio(np.array([[0.0, 1.0], [-1.0, 0.0]])) == 0.0


def test_split_half_pr_drops_noise(visibility):
    """Profiles that are one signal axis plus independent noise: the plain
    ratio counts the noise dimensions, the split-half ratio does not."""
    rng = np.random.default_rng(0)
    n_models, n_tasks, n_rows = 80, 6, 120
    strength = rng.normal(0, 1, n_models)
    rows = pd.DataFrame(
        {
            "model": np.repeat(np.arange(n_models), n_rows),
            "task": np.tile(np.arange(n_tasks), n_models * n_rows // n_tasks),
        }
    )
    rows["score"] = strength[rows["model"]] + rng.normal(0, 3, len(rows))

    def profile(r):
        return r.pivot_table(index="model", columns="task", values="score").to_numpy()

    full = profile(rows)
    full = full - full.mean(0)
    plain = visibility.participation_ratio(full.T @ full)
    split = visibility.split_half_pr(profile, rows, np.random.default_rng(1))
    assert split < 1.3 < 1.5 < plain  # 30 seeds: split 1.01-1.20, plain 1.56-2.09


def test_task_visibility_tiny(visibility, tmp_path):
    results = visibility.main(
        ["--pools", "specialists", "--seeds", "0", "--n", "64", "--out", str(tmp_path)]
    )
    s = results["specialists"]["summary"]
    assert 0 <= s["majority_share"]["mean"] <= s["probe_accuracy"]["mean"] <= 1
    r = s["by_n"]["64"]["routing"]
    assert r["task oracle"]["mean"] >= r["per-task best (true task)"]["mean"]
    assert 1 <= s["by_n"]["64"]["profile_pr"]["mean"] <= 6
    assert (tmp_path / "task_visibility.md").read_text().startswith("# Task visibility")


def test_portfolios_tiny(tmp_path):
    portfolios = _load_script("portfolios")
    result = portfolios.main(
        ["--pools", "specialists", "--seeds", "0", "--out", str(tmp_path), "--locus",
         "embedding_dim=8", "n_latents=2", "n_blocks=1", "n_heads=2", "hidden_dim=8",
         "max_epochs=1", "episodes_per_epoch=16", "enc_size=[8,32]", "dec_size=16"]
    )  # fmt: skip
    (run,) = result["pools"]["specialists"]
    assert list(run["by_k"]) == [1, 2, 3, 5, 8]
    full = {row["full pool"] for row in run["by_k"].values()}
    assert len(full) == 1  # one pool, the same test queries at every k
    for row in run["by_k"].values():
        assert set(row) == set(portfolios.METHODS)
        assert all(0 <= value <= 1 for value in row.values())
    assert (tmp_path / "portfolios.md").read_text().startswith("# Portfolios")


def test_geometry_relative_spread_hand_computed(quality):
    # Mean (3, 4), norm 5; each row 1 away from it.
    Z = np.array([[2.0, 4.0], [4.0, 4.0]])
    g = quality.geometry(Z, np.array([0.1, 0.2]))
    assert np.isclose(g["relative_spread"], 1 / 5)
    assert np.isclose(g["participation_ratio"], 1.0)


def test_vicreg_terms_hand_computed():
    vicreg = _load_script("_vicreg")
    import torch

    # Coordinate 0 has std sqrt(4/3) > 1 (no hinge), coordinate 1 none:
    # hinge 1 - sqrt(1e-4) = 0.99, mean 0.495; no covariance.
    z = torch.tensor([[1.0, 0.0], [-1.0, 0.0], [1.0, 0.0], [-1.0, 0.0]])
    variance, covariance = vicreg.variance_covariance(z)
    assert variance.item() == pytest.approx(0.495)
    assert covariance.item() == 0.0
    # Two equal coordinates: covariance 4/3 twice off the diagonal, over d = 2.
    variance, covariance = vicreg.variance_covariance(torch.cat([z[:, :1]] * 2, 1))
    assert variance.item() == 0.0
    assert covariance.item() == pytest.approx(2 * (4 / 3) ** 2 / 2)


def test_vicreg_training_adds_the_terms_in_training_only():
    vicreg = _load_script("_vicreg")
    import torch

    from locus_sklearn import _training

    original = _training.LocusNet.get_loss
    z = torch.tensor([[1.0, 0.0], [-1.0, 0.0]])

    class Net(_training.LocusNet):
        def __init__(self):  # no module needed: the base loss is replaced
            pass

    base = torch.tensor(0.5)
    _training.LocusNet.get_loss = lambda self, *a, **k: base
    try:
        with vicreg.vicreg_training(variance_weight=2.0, covariance_weight=1.0):
            # std of coordinate 1 is sqrt(1e-4): hinge 0.99, mean over 2: 0.495.
            trained = Net().get_loss((None, z), None, training=True)
            assert trained.item() == pytest.approx(0.5 + 2 * 0.495)
            assert Net().get_loss((None, z), None, training=False) is base
        assert _training.LocusNet.get_loss.__name__ == "<lambda>"  # restored
    finally:
        _training.LocusNet.get_loss = original


def test_identity_nce_hand_computed():
    identity = _load_script("_identity")
    import math

    import torch

    # Centre (0, 0): halves along +x/-x and +y/-y. Cosines: a0.b0 = 1,
    # a0.b1 = 0, a1.b0 = 0, a1.b1 = 1; logits /0.1: 10 on the diagonal.
    z_a = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    z_b = z_a.clone()
    z_a2 = torch.cat([z_a, -z_a])
    z_b2 = torch.cat([z_b, -z_b])
    expected = -math.log(math.exp(10) / (math.exp(10) + 2 * 1 + math.exp(-10)))
    assert identity.identity_nce(z_a2, z_b2).item() == pytest.approx(expected)
    # Adding one vector to every row changes nothing: the term reads centred
    # cosines (raw cosines would all be near 1 after a large shift).
    shifted = identity.identity_nce(z_a2 + 100, z_b2 + 100)
    assert shifted.item() == pytest.approx(expected, rel=1e-5)
    # Each row's nearest other-half row is itself; swapping two rows of one
    # half leaves two of four.
    assert identity.identity_top1(z_a2, z_b2).item() == 1.0
    assert identity.identity_top1(z_a2, z_b2[[1, 0, 2, 3]]).item() == 0.5
    mask = torch.tensor([[True, True, True, False], [True, False, False, False]])
    first, second = identity.half_masks(mask)
    assert first.tolist() == [[True, False, True, False], [True, False, False, False]]
    assert second.tolist() == [[False, True, False, False], [False] * 4]


def test_identity_training_adds_the_term_in_training_steps_only():
    identity = _load_script("_identity")
    from locus_sklearn import LocusEmbedder, _nn, _training
    from locus_sklearn.datasets import make_model_pool

    pool = make_model_pool(
        n_models=6, n_queries=120, evals_per_model=80, random_state=0
    )
    record = []
    forward, get_loss = _nn.LocusNetwork.forward, _training.LocusNet.get_loss
    embedder = LocusEmbedder(
        pool.encodings, embedding_dim=8, n_latents=2, n_blocks=1, n_heads=2,
        max_epochs=2, episodes_per_epoch=8, batch_size=4, enc_size=(16, 32),
        random_state=0,
    )  # fmt: skip
    with identity.identity_training(record=record):
        embedder.fit(pool.evals)
    # One value per training step; the validation passes add none.
    steps = [b for epoch in embedder.net_.history for b in epoch["batches"]]
    n_train = sum("train_loss" in b for b in steps)
    assert n_train > 0 and len(record) == n_train
    assert all(nce > 0 and 0 <= top1 <= 1 for nce, top1 in record)
    assert _nn.LocusNetwork.forward is forward  # restored
    assert _training.LocusNet.get_loss is get_loss


def test_ranking_term_hand_computed():
    ranking = _load_script("_model_ranking")
    import math

    import torch

    nan = float("nan")
    # Episode 0 has queries 7 and 3, episode 1 has 3 and 9, episode 2 has 7
    # and padding (NaN target; its query id 3 must not count).
    query_id = torch.tensor([[7, 3], [3, 9], [7, 3]])
    target = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, nan]])
    logits = torch.tensor([[2.0, 0.5], [1.0, -3.0], [0.0, 9.0]])
    loss, n_pairs = ranking.ranking_term(logits, target, query_id)
    # Disagreeing pairs: query 7, episode 0 (1) over episode 2 (0): margin
    # 2 - 0; query 3, episode 1 (1) over episode 0 (0): margin 1 - 0.5.
    # Episode 2's query 3 is padding; query 9 has one answer.
    expected = (math.log1p(math.exp(-2.0)) + math.log1p(math.exp(-0.5))) / 2
    assert n_pairs == 2
    assert loss.item() == pytest.approx(expected)
    # Graded: the target is (1 + gap) / 2 for the higher scorer.
    graded = torch.tensor([[0.75, 0.25], [0.25, 0.5]])
    loss, n_pairs = ranking.ranking_term(
        torch.tensor([[0.3, 0.0], [0.0, 0.0]]), graded, torch.tensor([[1, 2], [1, 3]])
    )
    p = 1 / (1 + math.exp(-0.3))
    t = (1 + 0.5) / 2
    assert n_pairs == 1
    assert loss.item() == pytest.approx(-(t * math.log(p) + (1 - t) * math.log(1 - p)))
    # Ties and single answers give no pair.
    assert ranking.ranking_term(
        logits[:2], torch.tensor([[1.0, 1.0], [1.0, 0.0]]), query_id[:2]
    ) == (None, 0)
    # The difficulty of a query cancels: adding a constant to every logit of
    # a query column changes nothing.
    shifted = logits + torch.tensor([[5.0, -1.0], [-1.0, 0.0], [5.0, 0.0]])
    assert ranking.ranking_term(shifted, target, query_id)[0].item() == pytest.approx(
        ranking.ranking_term(logits, target, query_id)[0].item()
    )


def test_ranking_term_weighs_pairs_by_likeness_in_strength():
    ranking = _load_script("_model_ranking")
    import math

    import torch

    # Query 1: episode 0 beats 1 and 2; episodes 0 and 1 of one strength,
    # episode 2 0.1 apart from both (weight exp(-0.01 / 0.005) = exp(-2)).
    logits = torch.tensor([[1.0], [0.0], [-1.0]])
    target = torch.tensor([[1.0], [0.0], [0.0]])
    query_id = torch.ones(3, 1, dtype=torch.long)
    strength = torch.tensor([0.5, 0.5, 0.6])
    loss, n_pairs = ranking.ranking_term(logits, target, query_id, strength)
    w = math.exp(-2.0)
    expected = (math.log1p(math.exp(-1.0)) + w * math.log1p(math.exp(-2.0))) / (1 + w)
    assert n_pairs == 2
    assert loss.item() == pytest.approx(expected, rel=1e-6)
    # Each episode's strength: its mean over encoder and decoder rows.
    X = {
        "enc_score": torch.tensor([[1.0, 0.0, 5.0], [1.0, 1.0, 1.0]]),
        "enc_mask": torch.tensor([[True, True, False], [True, True, True]]),
    }
    dec = torch.tensor([[1.0, float("nan")], [0.0, 0.0]])
    strength = ranking.episode_strength(X, dec)
    assert strength.tolist() == pytest.approx([2 / 3, 3 / 5])


def test_model_ranking_training_adds_the_term_in_training_steps_only():
    ranking = _load_script("_model_ranking")
    from locus_sklearn import LocusEmbedder, _training
    from locus_sklearn.datasets import make_model_pool

    # Every model answers every query, so decoder sets share queries.
    pool = make_model_pool(n_models=6, n_queries=60, evals_per_model=60, random_state=0)
    record = []
    get_loss = _training.LocusNet.get_loss
    embedder = LocusEmbedder(
        pool.encodings, embedding_dim=8, n_latents=2, n_blocks=1, n_heads=2,
        max_epochs=2, episodes_per_epoch=8, batch_size=4, enc_size=(8, 16),
        random_state=0,
    )  # fmt: skip
    with ranking.model_ranking_training(record=record, near=True):
        embedder.fit(pool.evals)
    steps = [b for epoch in embedder.net_.history for b in epoch["batches"]]
    n_train = sum("train_loss" in b for b in steps)
    assert n_train > 0 and len(record) == n_train
    assert all(term > 0 and n > 0 for term, n in record)
    assert _training.LocusNet.get_loss is get_loss  # restored


def test_relative_scores_hand_computed():
    relative = _load_script("_relative_scores")
    from locus_sklearn._evals import check_evals

    # q1: scores 1, 0 (two rows); q2: 1 (one row). Table mean g = 2 / 3.
    table = check_evals(
        {"model": ["a", "b", "a"], "query": ["q1", "q1", "q2"], "score": [1.0, 0, 1]}
    )
    total, count, g = relative.query_sums(table)
    np.testing.assert_array_equal(total, [1, 1])
    np.testing.assert_array_equal(count, [2, 1])
    assert g == pytest.approx(2 / 3)
    # (sum + g) / (count + 1): q1 (1 + 2/3) / 3, q2 (1 + 2/3) / 2.
    np.testing.assert_allclose(relative.shrunk_mean(total, count, g), [5 / 9, 5 / 6])
    np.testing.assert_allclose(
        relative.relative(np.array([1.0, 0.0]), np.array([0.25, 0.75])), [0.875, 0.125]
    )
    module = SimpleNamespace(
        relative_queries_=table.queries,
        relative_sums_=total,
        relative_counts_=count,
        relative_mean_=g,
    )
    # A query the fit table did not hold reads the table's mean.
    np.testing.assert_allclose(
        relative.means_for(module, np.array(["q0", "q2", "q1", "q9"])),
        [2 / 3, 5 / 6, 5 / 9, 2 / 3],
    )
    assert relative.means_for(SimpleNamespace(), np.array(["q1"])) is None
    # Leaving the row's own score out: a's 1 on q1 leaves b's 0 and the
    # pseudo-row, (0 + 2/3) / 2; a's 1 on q2 leaves the pseudo-row alone.
    module.relative_rows_ = {("a", "q1"): 1.0, ("b", "q1"): 0.0, ("a", "q2"): 1.0}
    np.testing.assert_allclose(
        relative.means_for(
            module,
            np.array(["q1", "q1", "q2", "q2", "q1"]),
            np.array(["a", "b", "a", "b", "c"]),
        ),
        # b on q2 and c on q1 are not fit rows: the plain shrunk means.
        [1 / 3, 5 / 6, 2 / 3, 5 / 6, 5 / 9],
    )
    # Eight pseudo-rows at g = 2/3 (16/3 in all): q1 (1 + 16/3) / 10, q2
    # (1 + 16/3) / 9; a's 1 on q1 left out, (0 + 16/3) / 9; a's 1 on q2
    # left out, the pseudo-rows alone: g.
    np.testing.assert_allclose(
        relative.shrunk_mean(total, count, g, 8), [19 / 30, 19 / 27]
    )
    module.relative_pseudo_rows_ = 8
    np.testing.assert_allclose(
        relative.means_for(
            module, np.array(["q1", "q2", "q1", "q9"]), np.array(["a", "a", "c", "a"])
        ),
        [16 / 27, 2 / 3, 19 / 30, 2 / 3],
    )


@pytest.mark.parametrize(
    "leave_one_out, pseudo_rows", [(False, 1), (True, 1), (True, 8)]
)
def test_relative_scores_reach_the_encoder_and_not_the_readout(
    leave_one_out, pseudo_rows
):
    relative = _load_script("_relative_scores")
    relative = _load_script("_relative_scores")  # a second load wraps nothing twice
    from locus_sklearn import LocusEmbedder, _embedder, _nn, _readout
    from locus_sklearn._evals import check_evals
    from locus_sklearn.datasets import make_model_pool

    pool = make_model_pool(n_models=6, n_queries=60, evals_per_model=40, random_state=0)
    params = dict(
        embedding_dim=8, n_latents=2, n_blocks=1, n_heads=2, max_epochs=2,
        episodes_per_epoch=8, batch_size=4, enc_size=(8, 16), random_state=0,
    )  # fmt: skip
    seen = {"encoder": [], "readout": []}
    embed, episodes = _nn.LocusNetwork.embed, _readout.KernelReadout.episodes

    def spy_embed(self, features, query_index, score, mask, tables=None):
        if self.training:
            seen["encoder"].append(score[mask].detach().clone())
        return embed(self, features, query_index, score, mask, tables)

    def spy_episodes(self, features, query_index, set_index, set_score, set_mask):
        if self.training:
            seen["readout"].append(set_score[set_mask].detach().clone())
        return episodes(self, features, query_index, set_index, set_score, set_mask)

    embedder = LocusEmbedder(pool.encodings, **params)
    forward = _nn.LocusNetwork.forward
    with (
        relative.relative_scores_training(
            leave_one_out=leave_one_out, pseudo_rows=pseudo_rows
        ),
        mock.patch.object(_nn.LocusNetwork, "embed", spy_embed),
        mock.patch.object(_readout.KernelReadout, "episodes", spy_episodes),
    ):
        embedder.fit(pool.evals)
    assert _nn.LocusNetwork.forward is forward  # restored
    table = check_evals(pool.evals)
    total, count, g = relative.query_sums(table)
    # The means an encoder row may read: its query's, plain or without a
    # 0 or a 1 of its own.
    k = pseudo_rows
    if leave_one_out:
        p = np.concatenate(
            [relative.mean_without(total, count, g, y, k) for y in (0, 1)]
        )
        q = table.query_index
        p_rows = relative.mean_without(total[q], count[q], g, table.score, k)
    else:
        p = relative.shrunk_mean(total, count, g, k)
        p_rows = p[table.query_index]
    assert seen["encoder"] and len(seen["encoder"]) == len(seen["readout"])
    for enc, raw in zip(seen["encoder"], seen["readout"], strict=True):
        assert set(np.unique(raw.numpy())) <= {0.0, 1.0}  # the pool's raw scores
        # Each encoder score is (1 + y - p) / 2 of its raw score y: the
        # implied p is one of the means above.
        implied = (1 + raw.numpy() - 2 * enc.numpy()).astype(np.float64)
        nearest = np.abs(implied[:, None] - p[None, :]).min(axis=1)
        assert nearest.max() < 1e-6
    # transform (after the block) embeds from the relative scores ...
    X_query = embedder._encode(table.queries)
    package = _embedder.LocusEmbedder._transform_encoded.package_transform
    shifted = relative.relative(table.score, p_rows).astype(np.float32)
    expected = package(embedder, dataclasses.replace(table, score=shifted), X_query)
    np.testing.assert_allclose(embedder.transform(pool.evals), expected, rtol=1e-6)
    assert not np.allclose(expected, package(embedder, table, X_query))
    # ... and an embedder fitted without the block is unaffected.
    plain = LocusEmbedder(pool.encodings, **params).fit(pool.evals)
    np.testing.assert_array_equal(
        plain.transform(pool.evals), package(plain, table, X_query)
    )


def test_relative_channel_token_hand_computed():
    """With ``both``, a new tokenizer starts every other weight (and the
    global random stream) as the package's, its relative term at zero; a
    token of two score channels is the package's token at the raw score plus
    ``r (W_r φ + b_r)``; one channel is the package's token."""
    relative = _load_script("_relative_scores")
    from locus_sklearn import _nn

    torch.manual_seed(0)
    package = _nn.EvaluationTokenizer(3, 2)
    after_package = torch.random.get_rng_state()
    torch.manual_seed(0)
    with relative.relative_scores_training(both=True):
        tokenizer = _nn.EvaluationTokenizer(3, 2)
    assert torch.equal(torch.random.get_rng_state(), after_package)
    assert torch.equal(tokenizer.query.weight, package.query.weight)
    assert torch.equal(tokenizer.score, package.score)
    assert not tokenizer.relative.weight.any() and not tokenizer.relative.bias.any()
    with torch.no_grad():
        tokenizer.relative.weight.copy_(torch.tensor([[1.0, 0, 0], [0, 2, 0]]))
        tokenizer.relative.bias.copy_(torch.tensor([0.5, -1.0]))
    features = torch.tensor([[1.0, 2.0, 3.0], [0.0, -1.0, 1.0]])
    query_index = torch.tensor([[0, 1, 1]])
    y = torch.tensor([[1.0, 0.0, 1.0]])
    r = torch.tensor([[0.25, -0.5, 0.0]])
    tokens = tokenizer(features, query_index, torch.stack([y, r], dim=-1))
    plain = tokenizer(features, query_index, y)
    # W_r φ + b_r: [1.5, 3.0] for query 0, [0.5, -3.0] for query 1.
    extra = torch.tensor([[[0.375, 0.75], [-0.25, 1.5], [0.0, 0.0]]])
    torch.testing.assert_close(tokens, plain + extra)
    torch.testing.assert_close(plain, package(features, query_index, y))


def test_relative_channel_fit_and_transform():
    """In a fit with ``both``, the encoder reads (raw, raw - p) with p a
    fitted shrunk mean, the readout the raw scores; ``transform`` equals the
    plain encoder path run model by model on the two channels; the relative
    term trained away from zero; an embedder fitted outside is unaffected."""
    relative = _load_script("_relative_scores")
    from locus_sklearn import LocusEmbedder, _embedder, _nn
    from locus_sklearn._evals import check_evals
    from locus_sklearn.datasets import make_model_pool

    pool = make_model_pool(n_models=6, n_queries=60, evals_per_model=40, random_state=0)
    params = dict(
        embedding_dim=8, n_latents=2, n_blocks=1, n_heads=2, max_epochs=2,
        episodes_per_epoch=8, batch_size=4, enc_size=(8, 16), random_state=0,
    )  # fmt: skip
    seen = []
    embed = _nn.LocusNetwork.embed

    def spy_embed(self, features, query_index, score, mask, tables=None):
        if self.training:
            seen.append(score[mask].detach().clone())
        return embed(self, features, query_index, score, mask, tables)

    embedder = LocusEmbedder(pool.encodings, **params)
    with (
        relative.relative_scores_training(both=True),
        mock.patch.object(_nn.LocusNetwork, "embed", spy_embed),
    ):
        embedder.fit(pool.evals)
    table = check_evals(pool.evals)
    total, count, g = relative.query_sums(table)
    p = relative.shrunk_mean(total, count, g)
    assert seen
    for pair in seen:
        raw, shifted = pair[:, 0].numpy(), pair[:, 1].numpy()
        assert set(np.unique(raw)) <= {0.0, 1.0}
        implied = (raw - shifted).astype(np.float64)
        assert np.abs(implied[:, None] - p[None, :]).min(axis=1).max() < 1e-6
    module = embedder.net_.module_
    assert module.encoder.tokenizer.relative.weight.abs().sum() > 0
    X_query = torch.as_tensor(embedder._encode(table.queries), dtype=torch.float32)
    p_rows = p[table.query_index]
    both = torch.as_tensor(np.stack([table.score, table.score - p_rows], -1))
    expected = []
    with torch.no_grad():
        for start, stop in zip(table.indptr[:-1], table.indptr[1:], strict=True):
            index = torch.as_tensor(table.query_index[start:stop])[None]
            mask = torch.ones_like(index, dtype=torch.bool)
            score = both[start:stop][None].float()
            z = module.encoder.forward_plain(X_query, index, score, mask)
            expected.append(z[0].numpy())
    np.testing.assert_allclose(
        embedder.transform(pool.evals), np.stack(expected), rtol=1e-5, atol=1e-6
    )
    plain = LocusEmbedder(pool.encodings, **params).fit(pool.evals)
    assert not hasattr(plain.net_.module_.encoder.tokenizer, "relative")
    package = _embedder.LocusEmbedder._transform_encoded.package_transform
    np.testing.assert_array_equal(
        plain.transform(pool.evals), package(plain, table, X_query.numpy())
    )


def test_core_speed_keeps_sections_a_run_skipped():
    """A run without --fit / --fit-scaling keeps those sections of the file it
    replaces, each named with the date and commit of the run that measured it
    (carried over twice, it keeps its first source); run sections replace."""
    core_speed = _load_script("core_speed")
    first = {"date": "d1", "commit": "c1", "fit": {"seconds": 400.0},
             "fit_scaling": {"slopes": 1}}  # fmt: skip
    second = core_speed.carry_over(
        {"date": "d2", "commit": "c2", "fit": {"seconds": 300.0}, "fit_scaling": None},
        first,
    )
    assert second["fit"] == {"seconds": 300.0}  # run now: replaces
    assert second["fit_scaling"] == {"slopes": 1}
    assert second["earlier_sections"] == {
        "fit_scaling": {"date": "d1", "commit": "c1", "machine": None}
    }
    third = core_speed.carry_over(
        {"date": "d3", "commit": "c3", "fit": None, "fit_scaling": None}, second
    )
    assert third["fit"] == {"seconds": 300.0}
    assert third["earlier_sections"] == {
        "fit": {"date": "d2", "commit": "c2", "machine": None},
        "fit_scaling": {"date": "d1", "commit": "c1", "machine": None},
    }
    # Nothing earlier to keep: the skipped section stays null, no provenance.
    alone = core_speed.carry_over({"fit": None, "fit_scaling": None}, {"fit": None})
    assert alone == {"fit": None, "fit_scaling": None}


def test_base_worktree_checks_out_the_revision_and_removes_it():
    """The A/B scripts' base arm: a detached worktree of the revision, gone
    (directory and git's record of it) after the block, even on an error."""
    import subprocess

    if subprocess.run(["git", "-C", ROOT, "rev-parse"], capture_output=True).returncode:
        pytest.skip("not a git checkout")
    worktree = _load_script("_worktree")
    head = worktree.short_revision("HEAD")
    assert head and worktree.this_revision().startswith(head)
    with pytest.raises(KeyError), worktree.base_worktree(head) as tree:
        checked_out = subprocess.run(
            ["git", "-C", tree, "rev-parse", "--short", "HEAD"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
        assert checked_out == head
        assert os.path.exists(os.path.join(tree, "locus_sklearn", "__init__.py"))
        raise KeyError("leaves through an error")
    assert not os.path.exists(tree)
    listed = subprocess.run(
        ["git", "-C", ROOT, "worktree", "list"], capture_output=True, text=True
    ).stdout
    assert tree not in listed


def test_ab_result_names_both_revisions_and_the_machine(tmp_path):
    worktree = _load_script("_worktree")
    written = worktree.write_ab_result(str(tmp_path), "ab.json", "abc1234", rounds=[1])
    with open(tmp_path / "ab.json") as handle:
        assert json.load(handle) == json.loads(json.dumps(written))
    assert written["base"] == "abc1234" and written["rounds"] == [1]
    assert {"date", "commit", "machine"} <= set(written)
    assert len(written["machine"]["load"]) == 3


def test_run_child_runs_the_trees_package_and_reads_its_last_line(tmp_path):
    worktree = _load_script("_worktree")
    package = tmp_path / "locus_sklearn"
    package.mkdir()
    (package / "__init__.py").write_text("")
    code = (
        "import json, sys, locus_sklearn\n"
        "print('not this line')\n"
        "print(json.dumps([locus_sklearn.__file__, sys.argv[1:]]))\n"
    )
    where, args = worktree.run_child(str(tmp_path), code, 3, "x")
    assert where == str(package / "__init__.py")
    assert args == [str(tmp_path), "3", "x"]


def test_transform_ab_tiny(tmp_path):
    """Both arms embed the same pool; this checkout against itself gives the
    same embeddings, and every time comes with its ratio to the floor."""
    import subprocess

    if subprocess.run(["git", "-C", ROOT, "rev-parse"], capture_output=True).returncode:
        pytest.skip("not a git checkout")
    transform_ab = _load_script("transform_ab")
    transform_ab.main(
        ["--base", "HEAD", "--rounds", "1", "--repeats", "1", "--models", "3",
         "--evals", "64", "--out", str(tmp_path)]
    )  # fmt: skip
    with open(tmp_path / "transform_ab.json") as handle:
        result = json.load(handle)
    assert result["pool"] == {"models": 3, "evaluations_per_model": 64}
    for arm in ("base", "this"):
        (run,) = result["runs"][arm]
        for name in ("binary", "graded"):
            ratio = run["seconds"][name] / run["floor_seconds"]
            assert run["floor_ratio"][name] == pytest.approx(ratio)
            assert result["median_floor_ratio"][arm][name] == run["floor_ratio"][name]
    (base,), (this,) = result["runs"]["base"], result["runs"]["this"]
    for name, ratio in result["median_time_ratio_this_to_base"].items():
        assert ratio == pytest.approx(this["seconds"][name] / base["seconds"][name])
    difference = result["max_relative_embedding_difference"]
    assert set(difference) == {"binary", "graded"}
    assert all(0 <= value < 1e-3 for value in difference.values())


def test_max_relative_difference_hand_computed(tmp_path):
    transform_ab = _load_script("transform_ab")
    a, b = tmp_path / "a.npz", tmp_path / "b.npz"
    np.savez(a, x=np.array([[3.0, 4.0], [1.0, 0.0]]))
    np.savez(b, x=np.array([[3.0, 4.5], [1.0, 0.0]]))
    # Row 0 moves by 0.5 against a norm of 5: 0.1; row 1 does not move.
    assert transform_ab._max_relative_difference(a, b) == {"x": pytest.approx(0.1)}


def test_resplit_draws_disjoint_parts_of_the_given_sizes():
    resplits = _load_script("calibration_resplits")
    queries = np.array([f"q{i}" for i in range(10)], dtype=object)
    train, test = resplits.resplit(queries, 3, seed=0)
    assert len(train) == 7 and len(test) == 3
    assert set(train) | set(test) == set(queries) and not set(train) & set(test)
    again = resplits.resplit(queries, 3, seed=0)
    assert list(again[1]) == list(test)
    draws = {tuple(resplits.resplit(queries, 3, seed=s)[1]) for s in range(5)}
    assert len(draws) > 1  # the seed moves the split


def test_resplit_summary_hand_computed():
    resplits = _load_script("calibration_resplits")
    base = {"router": "r", "protocol": "p", "target": "target_cost"}
    records = [
        {**base, "unreachable": False, "test_relative_miss": 0.02,
         "test_relative_sampling_sd": 0.03, "calibration_relative_miss": -0.01},
        {**base, "unreachable": False, "test_relative_miss": -0.005,
         "test_relative_sampling_sd": 0.01, "calibration_relative_miss": 0.0},
        {**base, "unreachable": True},
    ]  # fmt: skip
    (row,) = resplits.summarize(records)
    assert (row["splits"], row["reached"]) == (3, 2)
    assert row["mean_miss"] == pytest.approx(0.0075)
    assert row["mean_calibration_miss"] == pytest.approx(-0.005)
    # sd of (0.02, -0.005) with ddof 1: 0.025 / sqrt(2); s.e. that / sqrt(2).
    assert row["sd_miss"] == pytest.approx(0.025 / np.sqrt(2))
    assert row["standard_error"] == pytest.approx(0.0125)
    assert row["within_1pct"] == 0.5  # |-0.005| <= 1 %, 2 % is not
    assert row["mean_sampling_sd"] == pytest.approx(0.02)


def test_resplit_report_marks_targets_no_split_reached():
    resplits = _load_script("calibration_resplits")
    base = {"router": "r", "protocol": "p"}
    records = [
        {**base, "target": "target_cost", "unreachable": False,
         "test_relative_miss": 0.02, "test_relative_sampling_sd": 0.03,
         "calibration_relative_miss": -0.01},
        {**base, "target": "min_accuracy", "unreachable": True},
    ]  # fmt: skip
    settings = {"splits": 1, "n_queries": 10, "n_train": 7, "n_test": 3,
                "shrinkage": None}  # fmt: skip
    text = resplits.markdown(
        {"date": "d", "commit": "c", "machine": "m", "wall_minutes": 1.0,
         "settings": settings, "summary": resplits.summarize(records)}
    )  # fmt: skip
    rows = [line for line in text.splitlines() if line.startswith("| r |")]
    assert rows[0].endswith("| 1 (1) | -1.00% | +2.00% ± – | – | 0% | 3.00% |")
    assert rows[1].endswith("| 1 (0) | – | – ± – | – | – | – |")


def test_hold_out_quarter_keeps_each_query_on_one_side():
    calibration = _load_script("calibration")
    train = pd.DataFrame(
        {"model": ["a", "b"] * 8, "query": np.repeat([f"q{i}" for i in range(8)], 2),
         "score": 1.0}
    )  # fmt: skip
    fit_part, held = calibration.hold_out_quarter(train, seed=0)
    assert held["query"].nunique() == 2 and fit_part["query"].nunique() == 6
    assert not set(held["query"]) & set(fit_part["query"])
    assert len(held) + len(fit_part) == len(train)
    again = calibration.hold_out_quarter(train, seed=0)[1]
    assert set(again["query"]) == set(held["query"])


def test_target_values_hand_computed():
    calibration = _load_script("calibration")
    costs = np.array([1.0, 4.0, 10.0])
    routed = np.array([0, 2, 2, 1])
    Y = np.array([[1.0, 0, 0], [0, 0, 1.0], [0, 0, np.nan], [0, 1.0, 0]])
    values = calibration.target_values
    assert list(values("target_cost", routed, costs, 2, Y)) == [1, 10, 10, 4]
    assert list(values("target_share", routed, costs, 2, Y)) == [0, 1, 1, 0]
    # The third query's routed model has no score: left out of the accuracy.
    assert list(values("min_accuracy", routed, costs, 2, Y)) == [1, 1, 1]


def test_target_levels_hand_computed():
    calibration = _load_script("calibration")
    Y_train = np.array([[1.0, 0.0], [np.nan, 1.0], [0.0, 1.0]])
    levels = calibration.target_levels(np.array([1.0, 3.0]), 1, Y_train)
    assert list(levels) == ["target_cost", "target_share", "min_accuracy"]
    assert levels["target_cost"] == 1.5 and levels["target_share"] == 0.2
    assert levels["min_accuracy"] == pytest.approx(2 / 3 - 0.01)


def test_serve_load_threaded_clients_send_each_request_once():
    """``serve_load.py``'s http.client load generator, N threads: every request
    index in ``offset, offset + 1, ...`` is sent exactly once, on loopback, and
    a non-200 answer is counted as a failure, not dropped."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    serve_load = _load_script("serve_load")
    seen, lock = [], threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # kept-alive connections, as uvicorn's

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with lock:
                seen.append(body["query"])
            status = 500 if body["query"] == "q4" else 200
            self.send_response(status)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        queries = [f"q{i}" for i in range(10)]
        ms, failures = serve_load._load_blocking(
            server.server_address[1], queries, 25, offset=3, concurrency=4
        )
    finally:
        server.shutdown()
        server.server_close()
    assert len(ms) == 25 and (ms > 0).all()
    assert sorted(seen) == sorted(queries[(3 + i) % 10] for i in range(25))
    # q4 is request 1, 11 and 21 (offset 3): three failures, each named.
    assert failures == ["HTTP 500: b'{}'"] * 3


def _fingerprints(quality, **attributes):
    """A Fingerprints with the given attributes, without a pool to build it."""
    fp = quality.Fingerprints.__new__(quality.Fingerprints)
    vars(fp).update(attributes)
    return fp


def test_profile_at_hand_computed(quality):
    """Kernel smoothing at a probe, with one pseudo-row at the model's mean."""
    fp = _fingerprints(
        quality,
        models=np.array(["a", "b"]),
        encodings={"q1": np.array([2.0, 0.0]), "q2": np.array([0.0, 3.0])},
        bandwidth=0.1,
    )
    rows = pd.DataFrame(
        {
            "model": ["a", "a", "b"],
            "query": ["q1", "q2", "q2"],
            "score": [1.0, 0.0, 1.0],
        }
    )
    probes = np.array([[1.0, 0.0], [0.0, 1.0]])
    out = fp.profile_at(rows, probes)
    far = np.exp(-10.0)  # cos 0 at bandwidth 0.1
    expected_a = [(1 + 0.5) / (1 + far + 1), (far + 0.5) / (far + 1 + 1)]
    expected_b = [(far + 1) / (far + 1), (1 + 1) / (1 + 1)]
    np.testing.assert_allclose(out, [expected_a, expected_b])
    # A narrower bandwidth reads the nearest row more and the far one less.
    narrow = fp.profile_at(rows, probes, bandwidth=0.01)
    assert narrow[0, 0] > out[0, 0] and narrow[0, 1] < out[0, 1]


def test_knn_profile_at_hand_computed(quality):
    """The mean score of each model's k rows nearest the probe, no prior."""
    fp = _fingerprints(
        quality,
        models=np.array(["a"]),
        encodings={
            "q1": np.array([1.0, 0.0]),
            "q2": np.array([0.8, 0.6]),
            "q3": np.array([0.0, 1.0]),
        },
    )
    rows = pd.DataFrame(
        {"model": ["a"] * 3, "query": ["q1", "q2", "q3"], "score": [1.0, 0.0, 0.0]}
    )
    probes = np.array([[1.0, 0.0], [0.0, 1.0]])
    np.testing.assert_allclose(fp.knn_profile_at(rows, probes, k=1), [[1.0, 0.0]])
    np.testing.assert_allclose(fp.knn_profile_at(rows, probes, k=2), [[0.5, 0.0]])
    # k beyond the model's rows: its mean score everywhere.
    np.testing.assert_allclose(fp.knn_profile_at(rows, probes, k=10), [[1 / 3] * 2])


def test_split_half_ratio_hand_computed(quality):
    Z = np.array([[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0], [0.0, -1.0]])
    # The same fingerprint twice: the plain ratio, two even axes.
    assert np.isclose(quality.split_half_ratio(Z, Z), 2.0)
    # The second axis flips between the sets: it is not a way the models
    # differ, the cross-covariance there is negative and counts as zero.
    assert np.isclose(quality.split_half_ratio(Z, Z * [1.0, -1.0]), 1.0)
    # A constant shift of one set is centred away.
    assert np.isclose(quality.split_half_ratio(Z, Z + 5.0), 2.0)


def test_whitener_evens_the_pool_directions(quality):
    rng = np.random.default_rng(0)
    Z = rng.normal(size=(4000, 2)) * [2.0, 0.5] + [3.0, -1.0]
    white = quality.whitener(Z)(Z)
    np.testing.assert_allclose(white.mean(0), 0.0, atol=1e-9)
    # Ledoit-Wolf shrinks little with 4,000 samples in 2-d: close to identity.
    np.testing.assert_allclose(np.cov(white.T, bias=True), np.eye(2), atol=0.05)


def test_whitened_measures_read_the_pools_whitening(quality):
    """Retrieval and self-identification of the whitened fingerprints: the
    plain measures of the fingerprints mapped through the pool's whitener."""
    rng = np.random.default_rng(1)
    n = 12
    base = rng.normal(0, [10.0, 1.0, 0.3], (n, 3))
    sets = [base + rng.normal(0, 0.1, (n, 3)) for _ in range(2)]
    models = [f"m{i}" for i in range(n)]
    groups = {"g": ["m0", "m1"], "h": ["m2", "m3", "m4"]}
    pairs = {64: (0, 1), 128: None}
    got = quality.whitened_measures(base, sets.__getitem__, pairs, models, groups)
    white = quality.whitener(base)
    assert got["groups"] == quality.group_recall(white(base), models, groups)
    expected = quality.identity_measures(lambda i: white(sets[i]), pairs)
    assert got["self_id"] == expected["self_id"] and list(got["self_id"]) == ["64"]
    assert "split_half_pr" not in got  # whitening evens the directions


def test_task_profile_over_given_labels_hand_computed(quality):
    """The per-task table over labels given per query (e.g. clusters of the
    encodings); a label a model has no row of reads its overall mean."""
    fp = _fingerprints(quality, models=np.array(["a", "b"]))
    rows = pd.DataFrame(
        {
            "model": ["a", "a", "a", "b", "b"],
            "query": ["q1", "q2", "q3", "q1", "q2"],
            "score": [1.0, 0.0, 1.0, 0.0, 1.0],
        }
    )
    clusters = pd.Series([0, 1, 1, 2], index=["q1", "q2", "q3", "q4"])
    np.testing.assert_allclose(
        fp.task_profile(rows, clusters), [[1.0, 0.5, 2 / 3], [0.0, 1.0, 0.5]]
    )


def test_refine_solver_adam_reaches_the_gauss_newton_optimum(router, pool):
    """The benchmark's Adam reference and the package's Gauss-Newton steps
    minimise the same objective: a long Adam run ends where the steps do."""
    from locus_sklearn._evals import check_evals
    from locus_sklearn._refinement import refine_embeddings

    solver = _load_script("refine_solver")
    embedder = router.embedder_
    module = embedder.net_.module_.eval()
    table = check_evals(pool.evals)
    X_query = embedder._encode(table.queries)
    z0 = embedder.transform(pool.evals)
    scale = embedder.embedding_scale_
    newton = refine_embeddings(
        module, table, X_query, z0, scale=scale, steps=10, prior=solver.PRIOR,
        batch_tokens=16384,
    )  # fmt: skip
    rows = solver.problem(module, table, X_query)
    by_adam = solver.adam(rows, z0, scale, 300, 0.05)
    move = np.linalg.norm((newton - z0) / scale, axis=1)
    assert (move > 0).all()
    off = np.linalg.norm((by_adam - newton) / scale, axis=1) / move
    assert off.max() < 0.02
    m = solver.measures(rows, z0, scale, by_adam, newton)
    assert m["distance_to_reference_over_move_max"] == pytest.approx(off.max())
    # Adam's objective is no lower than the optimum's (beyond float32 noise).
    at_newton = solver.objective(rows, z0, scale, torch.as_tensor(newton))
    assert (m["_value"] >= at_newton.detach().numpy() - 1e-6).all()


def test_refine_prior_holds_out_whole_queries_and_scores_their_rows(router, pool):
    bench = _load_script("refine_prior")
    seen, held = bench.split_rows(pool.evals, seed=0)
    assert len(seen) + len(held) == len(pool.evals)
    assert not set(seen["query"]) & set(held["query"])
    n_queries = pool.evals["query"].nunique()
    assert held["query"].nunique() == round(bench.HELD_SHARE * n_queries)
    embedder = router.embedder_
    z = embedder.transform(seen)
    got = bench.held_out_scores(embedder, z, seen, held)
    # By hand: each held row's P(correct) from the full matrix, each model's
    # mean log-loss and correctness, then the mean over models.
    models = sorted(seen["model"].unique())
    queries = list(held["query"].unique())
    proba = embedder.predict_proba(z, queries, evals=seen)
    losses, correct = {}, {}
    for row in held.itertuples():
        p = proba[queries.index(row.query), models.index(row.model)]
        losses.setdefault(row.model, []).append(
            -(row.score * np.log(p) + (1 - row.score) * np.log(1 - p))
        )
        correct.setdefault(row.model, []).append((p >= 0.5) == (row.score >= 0.5))
    assert got["log_loss"] == pytest.approx(
        np.mean([np.mean(v) for v in losses.values()]), rel=1e-6
    )
    assert got["correctness"] == pytest.approx(
        np.mean([np.mean(v) for v in correct.values()])
    )


def test_refine_fingerprints_row_hand_computed():
    bench = _load_script("refine_fingerprints")
    models = ["a", "b", "c", "d"]
    groups = {"g": ["a", "b"], "h": ["c", "d"]}
    # Siblings share a direction; each model has a small one of its own, in
    # whichever rows it is read from: recall and self-identification are 1.
    own = np.eye(4) * 0.1
    base = np.array([[1.0, 0, 0, 0], [1, 0, 0, 0], [0, 1, 0, 0], [0, 1, 0, 0]])

    def fingerprint(rows):
        present = sorted(rows["model"].unique())
        return np.vstack(
            [base[models.index(m)] + own[models.index(m)] for m in present]
        )

    rows = pd.DataFrame({"model": models, "query": "q", "score": 1.0})
    row = bench.fingerprint_row(
        fingerprint, rows, models, groups, {2: (rows, rows), 4: None}
    )
    assert row["groups"]["recall@1"] == 1.0 and row["groups"]["n_queries"] == 4
    assert row["self_id"] == {"2": 1.0}
    assert row["split_half_n"] == 2
    assert row["whitened"]["self_id"] == {"2": 1.0}
    # Swapping two models' groups: nobody's nearest is a sibling any more.
    swapped = {"g": ["a", "c"], "h": ["b", "d"]}
    row = bench.fingerprint_row(fingerprint, rows, models, swapped, {2: None})
    assert row["groups"]["recall@1"] == 0.0 and row["self_id"] == {}


def test_top_k_routing_route_and_choice_hand_computed():
    bench = _load_script("top_k_routing")
    means = np.array([0.5, 0.9, 0.7])  # strongest: 1, then 2, then 0
    proba = np.array([[0.95, 0.8, 0.6], [0.2, 0.3, 0.9]])
    # Every model: the largest P; top-1: model 1 always; top-2: models 1, 2.
    assert bench.route(proba, means, 0.0, None).tolist() == [0, 2]
    assert bench.route(proba, means, 0.0, 1).tolist() == [1, 1]
    assert bench.route(proba, means, 0.0, 2).tolist() == [1, 2]
    # s = 1: the means alone.
    assert bench.route(proba, means, 1.0, None).tolist() == [1, 1]
    # One fold; query 0 answered by model 0 only (right), query 1 by all.
    y = np.array([[1.0, np.nan, np.nan], [0.0, 0.0, 1.0]])
    folds = [(y, proba, means, np.arange(3), np.arange(2))]
    grid = [(0.0, None), (0.0, 1), (0.0, 2), (1.0, None)]
    choice, scores = bench.choose(folds, grid)
    # (0, None): both judged, both right -> 1; (0, 1) and (1, None): query 0
    # routed to model 1, unanswered, not judged; query 1 wrong -> 0;
    # (0, 2): query 0 unjudged, query 1 right -> 1.
    assert scores == {(0.0, None): 1.0, (0.0, 1): 0.0, (0.0, 2): 1.0, (1.0, None): 0.0}
    # A tie between (0, None) and (0, 2): the smaller k.
    assert choice == (0.0, 2)


def test_stopping_point_hand_computed():
    bench = _load_script("stopping_rules")
    curve = [1.0, 0.9, 0.95, 0.9, 0.96, 0.85, 0.9]
    # Patience 2: epochs 3 and 4 miss (0.9 is no gain on 0.9): stop at 4, best 2.
    assert bench.stopping_point(curve, 2) == (4, 2)
    # Patience 3: epochs 3-5 miss: stop at 5, best 2.
    assert bench.stopping_point(curve, 3) == (5, 2)
    # Patience 4: epoch 6 improves; the curve ends one miss later.
    assert bench.stopping_point(curve, 4) == (7, 6)
    # The relative threshold: 0.89995 is within 1e-4 of 0.9, not a gain.
    assert bench.stopping_point([0.9, 0.89995, 0.89995], 2) == (3, 1)


@settings(max_examples=60, deadline=None)
@given(
    curve=st.lists(st.sampled_from([0.5, 0.50002, 0.6, 0.7]), min_size=1, max_size=25),
    patience=st.integers(1, 6),
)
def test_stopping_point_replays_skorch_early_stopping(curve, patience):
    """The replay stops where skorch's EarlyStopping (as the embedder sets it
    up) raises, and restores the epoch whose weights it keeps."""
    from skorch.callbacks import EarlyStopping
    from skorch.history import History

    bench = _load_script("stopping_rules")
    stopper = EarlyStopping(
        monitor="valid_loss", patience=patience, threshold=1e-4, load_best=True
    ).initialize()
    net = SimpleNamespace(history=History(), module_=torch.nn.Linear(1, 1), verbose=0)
    stopper.on_train_begin(net)
    ran = len(curve)
    for epoch, loss in enumerate(curve, start=1):
        net.history.new_epoch()
        net.history.record("epoch", epoch)
        net.history.record("valid_loss", loss)
        try:
            stopper.on_epoch_end(net)
        except KeyboardInterrupt:
            ran = epoch
            break
    assert bench.stopping_point(curve, patience) == (ran, stopper.best_epoch_)


def test_stopping_rules_run_measures_each_patience_at_its_restored_epoch(
    monkeypatch, tiny_embedder
):
    from locus_sklearn.datasets import make_model_pool

    bench = _load_script("stopping_rules")
    pool = make_model_pool(
        n_models=6, n_queries=150, n_families=2, evals_per_model="all",
        n_features=8, random_state=0,
    )  # fmt: skip
    queries = np.array(sorted(pool.evals["query"].unique()))
    is_test = pool.evals["query"].isin(queries[:30])
    is_sel = pool.evals["query"].isin(queries[30:60])
    test = pool.evals[is_test].pivot(index="query", columns="model", values="score")
    split = SimpleNamespace(
        models=np.array(test.columns), test_queries=test.index.to_numpy(),
        y_test=test.to_numpy(),
    )  # fmt: skip
    rows = (pool.evals[~is_test & ~is_sel], pool.evals[is_sel])
    monkeypatch.setattr(
        bench, "_pool", lambda name, seed, n: (pool.encodings, *rows, split, None)
    )
    # A large step: a curve noisy enough for the patiences to differ.
    monkeypatch.setattr(
        bench, "LocusEmbedder",
        lambda encoder, **kw: tiny_embedder(encoder, max_epochs=20, lr=0.01, **kw),
    )  # fmt: skip
    out = bench.run("tiny", 0, SimpleNamespace(n=256), log=lambda *a: None)
    losses = out["valid_loss"]
    assert len(losses) == len(out["epoch_seconds"]) <= 20
    by_epoch = {}
    for patience, rule in out["rules"].items():
        assert (rule["epochs"], rule["restored"]) == bench.stopping_point(
            losses, int(patience)
        )
        assert np.isfinite(rule["selection_log_loss"])
        assert 0 <= rule["test_routing_plain"] <= 1
        # The same restored weights give the same figures, whatever the patience.
        measures = {k: v for k, v in rule.items() if k not in ("epochs", "seconds")}
        assert by_epoch.setdefault(rule["restored"], measures) == measures


def test_epoch_geometry_run_measures_the_kept_epochs(monkeypatch, tiny_embedder):
    from locus_sklearn.datasets import make_model_pool

    bench = _load_script("epoch_geometry")
    pool = make_model_pool(
        n_models=6, n_queries=120, n_families=2, evals_per_model="all",
        n_features=8, random_state=0,
    )  # fmt: skip
    monkeypatch.setattr(bench, "_pool", lambda name, seed: (pool.encodings, pool.evals))
    monkeypatch.setattr(bench, "LocusEmbedder", tiny_embedder)
    out = bench.run("tiny", 0, SimpleNamespace(epochs=5), log=lambda *a: None)
    losses = out["valid_loss"]
    assert len(losses) == 5  # no early stopping
    assert out["restored_at_patience_7"] == bench.stopping_point(losses, 7)[1]
    assert list(out["epochs"]) == ["1", "2", "4"]  # EPOCHS up to --epochs
    for epoch, row in out["epochs"].items():
        assert row["valid_loss"] == losses[int(epoch) - 1]
        assert 1 <= row["participation_ratio"] <= 16
        assert 0 < row["first_share"] <= 1
    # Each epoch's own weights: the embeddings differ from epoch to epoch.
    ratios = {row["participation_ratio"] for row in out["epochs"].values()}
    assert len(ratios) == 3


def test_slow_predictor_training_slows_the_predictor_only():
    slow = _load_script("_slow_predictor")
    from locus_sklearn import LocusEmbedder, _training
    from locus_sklearn.datasets import make_model_pool

    pool = make_model_pool(n_models=6, n_queries=60, evals_per_model=40, random_state=0)
    build_net = _training.build_net
    embedder = LocusEmbedder(
        pool.encodings, embedding_dim=8, n_latents=2, n_blocks=1, n_heads=2,
        max_epochs=2, episodes_per_epoch=8, batch_size=4, enc_size=(8, 16),
        lr=2e-3, random_state=0,
    )  # fmt: skip
    with slow.slow_predictor_training():
        embedder.fit(pool.evals)
    assert _training.build_net is build_net  # restored
    net = embedder.net_
    groups = net.optimizer_.param_groups
    by_param = {id(p): g["lr"] for g in groups for p in g["params"]}
    for name, param in net.module_.named_parameters():
        expected = 5e-4 if name.startswith("predictor.") else 2e-3
        assert by_param[id(param)] == pytest.approx(expected), name
    # Both groups were trained: no parameter was left out of the optimizer.
    assert len(by_param) == len(list(net.module_.parameters()))
    assert sorted(g["lr"] for g in groups) == pytest.approx([5e-4, 2e-3])


def test_core_speed_keeps_a_skipped_batch_sweep():
    core_speed = _load_script("core_speed")
    previous = {"date": "d1", "commit": "c1",
                "transform_batch_sweep_seconds": {"whole pass/float32/262144": 0.025}}  # fmt: skip
    kept = core_speed.carry_over(
        {"date": "d2", "commit": "c2", "transform_batch_sweep_seconds": None}, previous
    )
    assert kept["transform_batch_sweep_seconds"] == {"whole pass/float32/262144": 0.025}
    assert kept["earlier_sections"] == {
        "transform_batch_sweep_seconds": {"date": "d1", "commit": "c1", "machine": None}
    }


def test_provenance_commit_override(monkeypatch):
    """A tree copied to another machine names the commit it was made from."""
    _benchmarks_on_path()
    import _provenance

    monkeypatch.setenv("LOCUS_COMMIT", "abc1234")
    assert _provenance.git_commit() == "abc1234"
    monkeypatch.delenv("LOCUS_COMMIT")
    assert _provenance.git_commit() != "abc1234"


def test_embedding_influence_runs_on_the_routing_benchmarks_rows(
    monkeypatch, tiny_embedder, complete_pool
):
    from locus_sklearn.metrics import oracle_accuracy

    influence = _load_script("embedding_influence")
    pool = complete_pool
    data = SimpleNamespace(evals=pool.evals, encodings=pool.encodings, split=None)
    seen = {}

    def recording_embedder(encoder, random_state, **_):
        embedder = tiny_embedder(encoder, random_state=random_state)
        fit = embedder.fit

        def recording_fit(X, y=None):
            seen["train"] = X
            return fit(X, y)

        embedder.fit = recording_fit
        return embedder

    monkeypatch.setattr(influence, "LocusEmbedder", recording_embedder)
    out = influence.one_fit(data, seed=1, n=20)
    split = influence.Split(data, 1)
    # The routing benchmark's training rows and complete test queries.
    pd.testing.assert_frame_equal(seen["train"], split.training_rows(20))
    assert out["n_test_queries"] == len(split.test_queries) > 0
    assert out["oracle"] == oracle_accuracy(split.y_test)
    best = seen["train"].groupby("model")["score"].mean().reindex(split.models)
    assert out["single_best_routing"] == split.y_test[:, best.argmax()].mean()
    assert set(out["routing"]) == {"own z", "mean z", "permuted z"}
    assert all(0 <= v <= out["oracle"] for v in out["routing"].values())
    assert 0 <= out["same_routing_mean z"] <= 1


def test_cuda_check_limits_and_true_accuracy():
    cuda_check = _load_script("cuda_check")
    cuda_check.CHECKS.clear()
    cuda_check.check("upper", 1e-5, 1e-4)
    cuda_check.check("upper, over", 1e-3, 1e-4)
    cuda_check.check("lower", 0.995, 0.99, at_least=True)
    assert [c["ok"] for c in cuda_check.CHECKS] == [True, False, True]
    cuda_check.CHECKS.clear()
    pool = SimpleNamespace(
        probabilities=pd.DataFrame(
            {"m0": [0.9, 0.2], "m1": [0.1, 0.7]}, index=["q0", "q1"]
        )
    )
    # q0 routed to m1 (0.1), q1 to m1 (0.7).
    assert cuda_check._true_accuracy(
        pool, ["q0", "q1"], ["m0", "m1"], ["m1", "m1"]
    ) == pytest.approx(0.4)


def test_bfloat16_routing_compares_the_two_dtypes_of_one_fit(
    tiny_embedder, complete_pool
):
    bench = _load_script("bfloat16_routing")
    pool = complete_pool
    embedder = tiny_embedder(pool.encodings, enc_size=(8, 64)).fit(pool.evals)
    test = pool.evals.pivot(index="query", columns="model", values="score")
    out = bench.compare(embedder, pool.evals, test.index.to_numpy(), test.to_numpy())
    # bfloat16 keeps 8 bits of mantissa: embeddings within a few 1e-3.
    assert 0 < out["max_relative_embedding_difference"] < 0.05
    assert 0 <= out["same_routing"] <= 1
    assert set(out["routing"]) == {"float32", "bfloat16"}
    assert embedder.inference_dtype == "float32"  # left as it was


def test_agreement_specialists_target_and_geometry_by_hand():
    script = _load_script("agreement_specialists")
    # Two models; a holds q0-q2, b holds q1-q3: they share q1 and q2.
    train = pd.DataFrame(
        {
            "model": ["a"] * 3 + ["b"] * 3,
            "query": ["q0", "q1", "q2", "q1", "q2", "q3"],
            "score": [1.0, 1.0, 0.0, 0.0, 0.0, 1.0],
        }
    )
    truth = pd.DataFrame(
        {"a": [0.5, 0.8, 0.2, 0.5], "b": [0.5, 0.4, 0.2, 0.5]},
        index=["q0", "q1", "q2", "q3"],
    )
    observed, signal, noise, shared = script.target(train, ["a", "b"], truth)
    assert shared[0, 1] == 2 and shared[0, 0] == 3
    # Shared scores (1, 0) against (0, 0): one difference of 1 in 2.
    assert observed[0, 1] == pytest.approx(0.5)
    # (0.8 - 0.4)^2 and (0.2 - 0.2)^2 over the 2 shared queries.
    assert signal[0, 1] == pytest.approx(0.16 / 2)
    # (0.16 + 0.24) + (0.16 + 0.16) over 2.
    assert noise[0, 1] == pytest.approx(0.72 / 2)
    # Three points: two together, one 3 away; across / within = 3 / 1.
    D = np.array([[0.0, 1.0, 3.0], [1.0, 0.0, 3.0], [3.0, 3.0, 0.0]])
    same = np.array([[1, 1, 0], [1, 1, 0], [0, 0, 1]], dtype=bool)
    assert script.across_over_within(D, same) == pytest.approx(3.0)
    # The ratio it reads (the package's): points on a line use one direction,
    # a square's corners two equal ones.
    line = np.array([[0.0, 0], [1, 1], [2, 2]])
    assert script.spread_of(line).participation_ratio == 1
    square = np.array([[0.0, 0], [1, 0], [0, 1], [1, 1]])
    assert script.spread_of(square).participation_ratio == pytest.approx(2.0)


def test_neighbour_divergence_hand_computed():
    neighbour = _load_script("_neighbour_geometry")
    import math

    # a holds q0, q1 with scores (1, 0); b holds q0-q2 with (0, 0, 1): they
    # share q0 and q1, one difference of 1 in 2.
    rms, shared = neighbour.cross_disagreement(
        torch.tensor([[1.0, 1.0, 0.0]]), torch.tensor([[1.0, 0.0, 0.0]]),
        torch.tensor([[1.0, 1.0, 1.0]]), torch.tensor([[0.0, 0.0, 1.0]]),
    )  # fmt: skip
    assert shared.tolist() == [[2.0]]
    assert rms.item() == pytest.approx(math.sqrt(0.5))
    z = torch.tensor([[0.0]], dtype=torch.float64)
    candidates = torch.tensor([[1.0], [3.0]], dtype=torch.float64)
    valid = torch.ones(1, 2, dtype=torch.bool)
    # Distances (1, 3) and targets in the same proportion: P = Q.
    same = torch.tensor([[2.0, 6.0]], dtype=torch.float64)
    assert neighbour.neighbour_divergence(z, candidates, same, valid, 1.0).item() == (
        pytest.approx(0.0, abs=1e-12)
    )
    # Targets reversed: over their mean 2, logits -1.5 / -0.5 against
    # -0.5 / -1.5; P = (s, 1 - s) with s = sigmoid(-1), Q = (1 - s, s), and
    # KL = (1 - 2s) log((1 - s) / s) = (1 - 2s) * 1.
    s = 1 / (1 + math.e)
    reversed_ = torch.tensor([[3.0, 1.0]], dtype=torch.float64)
    value = neighbour.neighbour_divergence(z, candidates, reversed_, valid, 1.0)
    assert value.item() == pytest.approx(1 - 2 * s)
    # Orders, not scales: the distances times 10 (z and candidates) give the same.
    scaled = neighbour.neighbour_divergence(
        z * 10, candidates * 10, reversed_, valid, 1.0
    )
    assert scaled.item() == pytest.approx(1 - 2 * s)
    # A third candidate left out by the mask weighs nothing; with one valid
    # candidate no row counts and the term is 0.
    wide = torch.cat([candidates, torch.tensor([[0.5]], dtype=torch.float64)])
    masked = torch.tensor([[True, True, False]])
    target = torch.tensor([[3.0, 1.0, 0.0]], dtype=torch.float64)
    value = neighbour.neighbour_divergence(z, wide, target, masked, 1.0)
    assert value.item() == pytest.approx(1 - 2 * s)
    one = torch.tensor([[True, False, False]])
    assert neighbour.neighbour_divergence(z, wide, target, one, 1.0).item() == 0


def test_neighbour_geometry_training_reads_a_queue_of_other_models():
    neighbour = _load_script("_neighbour_geometry")
    from locus_sklearn import LocusEmbedder, _training
    from locus_sklearn.datasets import make_model_pool

    pool = make_model_pool(n_models=6, n_queries=60, evals_per_model=40, random_state=0)
    call, get_loss = _training.EpisodeCollator.__call__, _training.LocusNet.get_loss
    record = []
    embedder = LocusEmbedder(
        pool.encodings, embedding_dim=8, n_latents=2, n_blocks=1, n_heads=2,
        max_epochs=2, episodes_per_epoch=8, batch_size=4, enc_size=(8, 16),
        random_state=0,
    )  # fmt: skip
    with neighbour.neighbour_geometry_training(queue=6, record=record):
        embedder.fit(pool.evals)
    assert _training.EpisodeCollator.__call__ is call  # restored
    assert _training.LocusNet.get_loss is get_loss
    steps = [b for epoch in embedder.net_.history for b in epoch["batches"]]
    n_train = sum("train_loss" in b for b in steps)
    assert n_train > 1 and len(record) == n_train
    # The first step sees its own batch's other models (at most 3 of 4
    # episodes); later ones the queue too (at most 3 + 6 candidates).
    assert 0 < record[0][1] <= 3
    assert max(c for _, c in record[1:]) > 3
    assert all(c <= 9 and value >= 0 for value, c in record)


def test_agreement_ceiling_measures_hand_computed():
    script = _load_script("agreement_ceiling")
    # Four shared queries: a and b differ on one (RMS 0.5), a and c on three
    # (sqrt 0.75), b and c on all four (1).
    train = pd.DataFrame(
        {
            "model": ["a"] * 4 + ["b"] * 4 + ["c"] * 4,
            "query": ["q0", "q1", "q2", "q3"] * 3,
            "score": [1.0, 0, 0, 0] + [1.0, 0, 0, 1] + [0.0, 1, 1, 0],
        }
    )
    T = script.disagreement_matrix(train, ["a", "b", "c"])
    assert T[0, 1] == pytest.approx(0.5) and T[1, 2] == pytest.approx(1.0)
    assert T[0, 2] == pytest.approx(np.sqrt(0.75))
    # Embeddings on a line at 0, 1 and -2: distances 1, 2, 3 in T's order.
    measures = script.follow(np.array([[0.0], [1.0], [-2.0]]), T)
    assert measures["spearman"] == pytest.approx(1.0)
    assert measures["neighbour_recall@1"] == 1.0
    # c at +2.5 instead: its nearest becomes b (1.5 away), not a; the pair
    # order (ab 1, bc 1.5, ac 2.5) no longer follows T's.
    measures = script.follow(np.array([[0.0], [1.0], [2.5]]), T)
    assert measures["neighbour_recall@1"] == pytest.approx(2 / 3)
    assert measures["neighbour_recall@3"] == 1.0
    assert measures["spearman"] == pytest.approx(0.5)
    # Four points on a line at 0, 1, 3, 7; by T4 the nearest of each is
    # 1, 0, 0, 2: the line's nearest (1, 0, 1, 2) match for rows 0, 1 and 3.
    D = np.abs(np.subtract.outer([0.0, 1, 3, 7], [0.0, 1, 3, 7]))
    T4 = np.array([[0, 1, 5, 5], [1, 0, 5, 5], [2, 5, 0, 5], [5, 5, 1, 0]], dtype=float)
    assert script.neighbour_recall(D, T4, 1) == 0.75
    # Row 2's two nearest by D are 1 and 0.
    assert script.neighbour_recall(D, T4, 2) == 1.0


def test_stamp_and_write_result(tmp_path, capsys):
    _benchmarks_on_path()
    import _provenance

    result = _provenance.stamp(threads=1) | {"runs": [1, 2]}
    assert list(result)[:3] == ["date", "commit", "machine"]
    assert result["machine"]["threads"] == 1 and result["runs"] == [1, 2]
    stem = str(tmp_path / "sub" / "result")
    _provenance.write_result(stem, result, lambda r: f"# {len(r['runs'])} runs\n")
    with open(stem + ".json") as handle:
        assert json.load(handle) == result
    with open(stem + ".md") as handle:
        assert handle.read() == "# 2 runs\n"
    assert capsys.readouterr().out == "# 2 runs\n\n"


def test_shrinkage_cv_rule_choice_and_fold_shuffles(router, pool):
    """The rule's choice from a curve (best accuracy, ties to the larger
    value, as ``choose_shrinkage``), and the curve of the estimator's own
    folds given as a splitter equals the estimator's scores."""
    from sklearn.model_selection import KFold

    from locus_sklearn import check_evals

    scv = _load_script("shrinkage_cv")
    curve = {
        "0.0": {"accuracy": 0.7},
        "0.5": {"accuracy": 0.8},
        "1.0": {"accuracy": 0.8},
    }
    assert scv.rule_choice(curve) == 1.0
    curve["0.5"]["accuracy"] = 0.81
    assert scv.rule_choice(curve) == 0.5

    table = check_evals(pool.evals)
    X_query = router._encode(table.queries)
    locus = router.embedder_
    ours = scv.fold_curves(None, locus, table, X_query, False)
    as_splitter = scv.fold_curves(
        None, locus, table, X_query, False, KFold(5, shuffle=True, random_state=0)
    )
    assert ours == as_splitter
    estimator = router.shrinkage_scores_
    assert {float(s): v["accuracy"] for s, v in ours.items()} == pytest.approx(
        estimator
    )
    assert scv.rule_choice(ours) == router.shrinkage_
    other = scv.fold_curves(
        None, locus, table, X_query, False, KFold(5, shuffle=True, random_state=1)
    )
    assert other != ours  # other folds, other held-out predictions


def test_fit_locus_seed_offset_moves_only_the_random_state(quality, monkeypatch):
    """The ``baseline-rs*`` variants: the embedder's random_state moves by the
    offset; every other setting is the baseline's and no prototype is
    entered for the key."""
    from locus_sklearn import LocusRouter

    monkeypatch.setattr(LocusRouter, "fit", lambda self, evals: self)
    data = SimpleNamespace(encodings={"q": np.zeros(3)})
    base = quality.fit_locus(data, 2, "baseline", None).embedder
    moved = quality.fit_locus(data, 2, "baseline-rs1000", None).embedder
    assert (base.random_state, moved.random_state) == (2, 1002)
    moved.set_params(random_state=2)
    assert moved.get_params() == base.get_params()


# ------------------------------------------- command lines, folders, provenance
@pytest.mark.parametrize(
    "name", ["embedding_quality", "task_visibility", "shrinkage_repeats_holdout"]
)
def test_results_folder_is_made_before_the_run(name, tmp_path, monkeypatch):
    """--out that does not exist yet is made at the start: a run used to end
    in FileNotFoundError when writing, its results lost."""
    script = _load_script(name)
    pools = script if name == "embedding_quality" else script.eq

    def stop(*args, **kwargs):
        raise RuntimeError("the run starts")

    monkeypatch.setattr(pools, "load_pool", stop)
    out = tmp_path / "new" / "folder"
    with pytest.raises(RuntimeError, match="the run starts"):
        script.main(["--pools", "specialists", "--out", str(out)])
    assert out.is_dir()


def test_missing_shared_data_stops_before_any_work(routing, headroom, tmp_path):
    """Without ../shared/data every pool read from it ends in a message naming
    the pool and the path, before the first fit (not a numpy traceback after
    the other pools were fitted)."""
    _benchmarks_on_path()
    import _data

    missing = tmp_path / "no-shared"
    out = tmp_path / "out"
    bfcl = re.escape(str(missing / "bfcl_71models" / "correctness.npz"))
    with mock.patch.object(_data, "SHARED_DATA", str(missing)):
        with pytest.raises(SystemExit, match=rf"'bfcl' reads {bfcl}.*synthetic"):
            routing.main(
                ["--data", "synthetic", "bfcl", "--tiny", "--seeds", "0",
                 "--experiments", "main", "--routers", "kNN", "--out", str(out),
                 "--quiet", "--threads", str(torch.get_num_threads())]
            )  # fmt: skip
        assert not list(out.glob("*.json"))  # synthetic was not run first
        with pytest.raises(SystemExit, match="'mmlu-open' reads"):
            headroom.main(["--out", str(out)])
        with pytest.raises(SystemExit, match=rf"'bfcl' reads {bfcl}"):
            _data.load_bfcl()
        portfolios = _load_script("portfolios")
        with mock.patch.object(portfolios, "run_one", side_effect=AssertionError):
            with pytest.raises(SystemExit, match="'bfcl' reads.*'shaberi' reads"):
                portfolios.main(
                    ["--pools", "specialists", "bfcl", "shaberi", "--out", str(out)]
                )
        _data.require_shared(["synthetic", "evals"])  # nothing shared: passes


@pytest.mark.parametrize(
    "argv, option",
    [
        (["--prior", "-1"], "--prior"),
        (["--prior", "nan"], "--prior"),
        (["--clusters", "0"], "--clusters"),
        (["--n", "0"], "--n"),
    ],
)
def test_headroom_refuses_bad_values_by_name(headroom, argv, option, tmp_path, capsys):
    """A negative prior gave probabilities above 1 (and -inf) and exited 0;
    --clusters 0 ended in a scikit-learn traceback."""
    threads = torch.get_num_threads()
    try:
        with pytest.raises(SystemExit) as stop:
            headroom.main(
                ["--data", "synthetic", "--n", "32", "--seeds", "0", *argv,
                 "--out", str(tmp_path)]
            )  # fmt: skip
    finally:
        torch.set_num_threads(threads)
    assert stop.value.code == 2
    assert f"argument {option}: '{argv[1]}'" in capsys.readouterr().err


def test_core_speed_refuses_zero_repeats(tmp_path, capsys):
    """--repeats 0 timed nothing and wrote NaN medians into the JSON."""
    core_speed = _load_script("core_speed")
    with mock.patch.object(core_speed, "matmul_gflops", side_effect=AssertionError):
        with pytest.raises(SystemExit) as stop:
            core_speed.main(["--repeats", "0", "--out", str(tmp_path)])
    assert stop.value.code == 2
    assert "argument --repeats: '0' is not an integer >= 1" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--n", "-5"], "argument --n: '-5' is neither an integer >= 1 nor 'all'"),
        (["--n", "0"], "argument --n: '0'"),
        (["--n", "foo"], "argument --n: 'foo'"),
        (["--threads", "0"], "argument --threads: '0' is not an integer >= 1"),
        (["--jobs", "0"], "argument --jobs: '0'"),
        (["--seeds", "-1"], "argument --seeds: '-1' is not an integer >= 0"),
        (["--locus", "bogus=1"], "'bogus' is not a LocusEmbedder parameter"),
        (["--locus", "random_state=3"], "sets 'random_state' itself"),
        (["--locus", "max_epochs"], "'max_epochs' is not KEY=VALUE"),
    ],
)
def test_routing_refuses_bad_values_by_name(routing, argv, message, capsys):
    """They used to end in tracebacks from numpy or torch, --locus only inside
    the worker after the data was loaded."""
    with pytest.raises(SystemExit) as stop:
        routing.parse_args(["--data", "synthetic", *argv])
    assert stop.value.code == 2
    assert message in capsys.readouterr().err
    args = routing.parse_args(["--n", "64", "all", "--locus", "max_epochs=1"])
    assert args.n == [64, "all"] and args.locus == ["max_epochs=1"]


@pytest.mark.parametrize(
    "name, argv",
    [
        ("embedding_quality", ["--threads", "0"]),
        ("embedding_quality", ["--n", "0"]),
        ("embedding_quality", ["--locus", "bogus=1"]),
        ("geometry", ["--threads", "0"]),
        ("serve_load", ["--threads", "0", "--no-write"]),
        ("shrinkage_repeats_holdout", ["--repeats", "0"]),
        ("task_visibility", ["--n", "-1"]),
    ],
)
def test_scripts_refuse_bad_values_by_name(name, argv, tmp_path, capsys):
    script = _load_script(name)
    threads = torch.get_num_threads()
    out = [] if name == "serve_load" else ["--out", str(tmp_path)]
    try:
        with pytest.raises(SystemExit) as stop:
            script.main([*argv, *out])
    finally:
        torch.set_num_threads(threads)
    assert stop.value.code == 2
    assert f"argument {argv[0]}: " in capsys.readouterr().err


def test_embedding_quality_locus_takes_the_prototype_keys(quality):
    """--locus sets the variants' training prototypes too (``_vicreg``, ...)."""
    check = quality.locus_setting(quality.PROTOTYPE_KEYS)
    assert check("_seed_offset=1000") == "_seed_offset=1000"
    assert "_vicreg" in quality.PROTOTYPE_KEYS


def _scale_children(monkeypatch, scale):
    """scale.py's parent run with no real work: the argv of each child."""
    calls = []

    def child(argv):
        calls.append(argv)
        if argv[1] == "transform":
            return {"seconds": 1.0, "baseline_rss_mb": 1.0, "peak_rss_mb": 2.0,
                    "checksum": 1.0}  # fmt: skip
        return {"seconds": 1.0, "first_call_seconds": 2.0}

    monkeypatch.setattr(scale, "make_embedder", lambda *a, **k: {})
    monkeypatch.setattr(scale, "write_pool", lambda path, *a: open(path, "w").close())
    monkeypatch.setattr(scale, "_run_child", child)
    return calls


def test_scale_hides_and_refuses_child_options(monkeypatch, capsys):
    """--models, --queries, --n-jobs (and --child's others) are the child
    processes' options: not in --help, refused in a run, where they used to
    be ignored; --chunk-models applies under --quick too."""
    scale = _load_script("scale")
    calls = _scale_children(monkeypatch, scale)
    with pytest.raises(SystemExit):
        scale.main(["--help"])
    text = capsys.readouterr().out
    assert "--chunk-models" in text
    assert not any(f"--{o}" in text for o in ("models ", "queries", "n-jobs", "child"))
    with pytest.raises(SystemExit) as stop:
        scale.main(["--quick", "--models", "5", "--n-jobs", "2"])
    assert stop.value.code == 2
    assert "--models, --n-jobs: options of the child processes" in (
        capsys.readouterr().err
    )
    assert not calls
    with pytest.raises(SystemExit):
        scale.main(["--quick", "--chunk-models", "0"])
    result = scale.main(["--quick", "--chunk-models", "7"])
    transforms = [argv for argv in calls if argv[1] == "transform"]
    assert transforms and all(
        argv[argv.index("--chunk-models") + 1] == "7" for argv in transforms
    )
    assert {r["chunk_models"] for r in result["rows"] if "chunk_models" in r} == {7}


def test_machine_names_the_cpu_model_and_the_device(monkeypatch, routing):
    """The machine field said only ``x86_64`` on Linux (every stored result
    the same); geometry.py said "CPU only" whatever device LOCUS fitted on."""
    _benchmarks_on_path()
    import _provenance

    try:
        with open("/proc/cpuinfo") as f:
            names = [
                line.split(":", 1)[1].strip() for line in f if "model name" in line
            ]
    except OSError:  # pragma: no cover - not Linux
        names = []
    if not names:  # pragma: no cover - not Linux
        pytest.skip("no CPU model name in /proc/cpuinfo")
    assert _provenance.machine_info()["processor"] == names[0]
    assert routing.machine_info()["cpu"] == names[0]
    geometry = _load_script("geometry")
    assert "LOCUS fitted on cpu" in geometry.machine("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "FAKE GPU")
    assert _provenance.torch_device() == "cuda (FAKE GPU)"
    assert routing.machine_info()["device"] == "cuda (FAKE GPU)"
    text = geometry.machine()
    assert "CPU only" not in text and "cuda (FAKE GPU)" in text


def test_results_name_their_machine(quality, headroom, tmp_path, monkeypatch):
    """Each JSON carries date, commit and machine (benchmarks/results/README):
    headroom, embedding_quality, task_visibility and shrinkage_repeats_holdout
    wrote no machine."""
    threads = torch.get_num_threads()
    try:
        headroom.main(["--data", "synthetic", "--n", "32", "--seeds", "0",
                       "--out", str(tmp_path)])  # fmt: skip
    finally:
        torch.set_num_threads(threads)
    saved = json.loads((tmp_path / "headroom_synthetic_32.json").read_text())
    assert {"date", "commit", "machine"} <= set(saved)
    assert saved["machine"]["processor"]
    # embedding_quality, with the run itself replaced (the provenance is what
    # is tested here, and the tiny runs are tested above).
    monkeypatch.setattr(quality, "run_one", lambda *a, **k: {"seed": 0, "by_n": {}})
    monkeypatch.setattr(quality, "summarise", lambda runs: {})
    monkeypatch.setattr(quality, "markdown", lambda results: "")
    try:
        quality.main(["--pools", "specialists", "--seeds", "0", "--out",
                      str(tmp_path), "--threads", str(threads)])  # fmt: skip
    finally:
        torch.set_num_threads(threads)
    saved = json.loads((tmp_path / "embedding_quality.json").read_text())
    assert saved["specialists"]["machine"]["torch_threads"] == threads
    assert saved["specialists"]["machine"]["device"] in ("cpu", "cuda") or (
        saved["specialists"]["machine"]["device"].startswith("cuda")
    )
    visibility = _load_script("task_visibility")
    monkeypatch.setattr(visibility, "run_seed", lambda *a: {})
    monkeypatch.setattr(visibility, "summarise", lambda runs: {})
    monkeypatch.setattr(visibility, "markdown", lambda results: "")
    visibility.main(["--pools", "specialists", "--seeds", "0", "--out", str(tmp_path)])
    saved = json.loads((tmp_path / "task_visibility.json").read_text())
    assert {"date", "commit", "machine"} <= set(saved["specialists"])
    srh = _load_script("shrinkage_repeats_holdout")
    fit = {"shrinkage": {}, "routing": {}, "choice_s": {"single": 0, "repeated": 0}}
    monkeypatch.setattr(srh, "run_one", lambda *a: fit)
    monkeypatch.setattr(srh, "summarise", lambda fits: {})
    try:
        srh.main(["--pools", "specialists", "--seeds", "0", "--offsets", "0",
                  "--out", str(tmp_path)])  # fmt: skip
    finally:
        torch.set_num_threads(threads)
    saved = json.loads((tmp_path / "shrinkage_repeats_holdout.json").read_text())
    assert {"date", "commit", "machine"} <= set(saved["specialists"])


def test_core_speed_keeps_the_machine_of_a_kept_section():
    core_speed = _load_script("core_speed")
    previous = {"date": "d1", "commit": "c1", "machine": {"processor": "A"},
                "fit": {"seconds": 400.0}}  # fmt: skip
    kept = core_speed.carry_over(
        {"date": "d2", "commit": "c2", "machine": {"processor": "B"}, "fit": None},
        previous,
    )
    assert kept["earlier_sections"] == {
        "fit": {"date": "d1", "commit": "c1", "machine": {"processor": "A"}}
    }


def test_embedding_quality_merge_is_an_option_and_writes_into_out(
    quality, tmp_path, monkeypatch, capsys
):
    """--merge was read from sys.argv only, not in --help, and always wrote
    into benchmarks/results."""
    with pytest.raises(SystemExit):
        quality.main(["--help"])
    assert "--merge JSON" in capsys.readouterr().out
    block = {"routing": {"kNN": 0.5}, "embeddings": {}}
    paths = []
    for seed in (0, 1):
        run = {"seed": seed, "by_n": {"256": block}}
        path = tmp_path / f"part{seed}.json"
        path.write_text(json.dumps({"bfcl": {"wall_s": 1.0, "runs": [run]}}))
        paths.append(str(path))
    monkeypatch.setattr(quality, "markdown", lambda results: "merged\n")
    merged = quality.main(["--merge", *paths, "--out", str(tmp_path / "merged")])
    assert merged["bfcl"]["seeds"] == [0, 1]
    saved = json.loads((tmp_path / "merged" / "embedding_quality.json").read_text())
    assert saved["bfcl"]["sources"] == ["part0.json", "part1.json"]
    assert (tmp_path / "merged" / "embedding_quality.md").read_text() == "merged\n"


def test_serve_load_writes_into_out(tmp_path, monkeypatch):
    """serve_load.py had no --out: a full run always wrote into
    benchmarks/results."""
    serve_load = _load_script("serve_load")
    threads = torch.get_num_threads()
    row = {"clients": 1, "qps": 1.0}
    monkeypatch.setattr(serve_load, "_fit_router", lambda path: (None, ["q"] * 4))
    monkeypatch.setattr(serve_load, "_run_mode", lambda *a, **k: [dict(row)])
    monkeypatch.setattr(serve_load, "_bounds", lambda *a: {"encoder_b1": {"qps": 2.0}})
    monkeypatch.setattr(serve_load, "_markdown", lambda result: "# load\n")
    out = tmp_path / "load"
    try:
        result = serve_load.main(["--out", str(out), "--threads", str(threads)])
    finally:
        torch.set_num_threads(threads)
    name = "serve_load" + (
        "" if threads == serve_load.THREADS else f"_threads{threads}"
    )
    assert json.loads((out / f"{name}.json").read_text())["commit"] == result["commit"]
    assert (out / f"{name}.md").read_text() == "# load\n"


def test_help_texts_are_whole(routing, capsys):
    """portfolios.py's description and --locus help stopped mid-sentence;
    routing.py's --tiny claimed a seconds-long run on any data."""
    portfolios = _load_script("portfolios")
    with pytest.raises(SystemExit):
        portfolios.main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "and random ones, side by side." in text
    assert "over the benchmark's own" in text
    with pytest.raises(SystemExit):
        routing.parse_args(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "small synthetic pool (other data sets keep their size)" in text


# ------------------------------------------------- tuning, README, re-split costs
def _tune_locus_spied(monkeypatch):
    """tune_locus on the tiny synthetic pool with tiny LOCUS settings, every
    router's fit rows and scored queries recorded."""
    _benchmarks_on_path()
    import _data
    import routing as bench_routing
    import tune_locus

    data = _data.load("synthetic", tiny=True)
    monkeypatch.setattr(tune_locus._data, "load", lambda name, **kwargs: data)
    monkeypatch.setattr(
        tune_locus, "PAPER", dict(tune_locus.PAPER, **bench_routing.TINY_LOCUS)
    )
    fitted, scored = [], []
    real = bench_routing.make_router

    def make_router(name, *args, **kwargs):
        router = real(name, *args, **kwargs)
        fit, proba = router.fit, router.predict_proba

        def spy_fit(rows, *a, **k):
            fitted.append((name, rows.copy()))
            return fit(rows, *a, **k)

        def spy_proba(queries):
            scored.append((name, list(queries)))
            return proba(queries)

        router.fit, router.predict_proba = spy_fit, spy_proba
        return router

    monkeypatch.setattr(tune_locus.routing, "make_router", make_router)
    return tune_locus, bench_routing, data, fitted, scored


def test_tune_locus_never_reads_a_test_query(monkeypatch, tmp_path):
    """It used to score every setting on routing.Split's test queries, the ones
    routing.py reports. Now every method is fitted on the same training rows
    less a held-out fifth of the training queries and scored on those."""
    tune_locus, bench_routing, data, fitted, scored = _tune_locus_spied(monkeypatch)
    threads = torch.get_num_threads()
    try:
        tune_locus.main(
            ["--data", "synthetic", "--n", "32", "--seed", "0", "--configs",
             "kernel", "--out", str(tmp_path / "T.md")]
        )  # fmt: skip
    finally:
        torch.set_num_threads(threads)
    split = bench_routing.Split(data, 0)
    train_q = set(split.train_rows["query"])
    test_q = set(split.test_queries)
    assert [name for name, _ in fitted] == ["kNN", "SingleBest", "LOCUS"]
    assert [name for name, _ in scored] == ["kNN", "SingleBest", "LOCUS"]
    rows = fitted[0][1]
    fit_q = set(rows["query"])
    for _, other in fitted[1:]:  # every method: the same rows
        pd.testing.assert_frame_equal(other, rows)
    queries = scored[0][1]
    assert all(q == queries for _, q in scored)  # the same validation queries
    assert queries and set(queries) <= train_q
    assert not set(queries) & fit_q
    assert not (set(queries) | fit_q) & test_q
    # The holdout is the split's seeded fifth; the fit rows routing.py's n rows less it.
    held = tune_locus.holdout_split(split)[0]
    assert set(queries) <= held and len(held) == round(0.2 * len(train_q))
    expected = split.training_rows(32)
    expected = expected[~expected["query"].isin(held)].reset_index(drop=True)
    pd.testing.assert_frame_equal(rows, expected)


def test_tune_locus_means_over_seeds_and_labels_a_test_figure(monkeypatch, tmp_path):
    tune_locus, bench_routing, data, fitted, scored = _tune_locus_spied(monkeypatch)
    out = tmp_path / "T.md"
    threads = torch.get_num_threads()
    try:
        records = tune_locus.main(
            ["--data", "synthetic", "--n", "32", "--seed", "0", "1", "--configs",
             "kernel", "--also-report-test", "--out", str(out)]
        )  # fmt: skip
    finally:
        torch.set_num_threads(threads)
    assert [(r["seed"], r["name"]) for r in records] == [
        (s, name) for s in (0, 1) for name in ("kNN", "SingleBest", "kernel")
    ]
    # Opt-in only: the test queries are scored after each fit, labelled so.
    tests = {tuple(q) for _, q in scored[1::2]}
    assert tests == {tuple(bench_routing.Split(data, s).test_queries) for s in (0, 1)}
    assert all(
        r["test_read_after"]["note"] == "read after, not used for choosing"
        for r in records
    )
    text = out.read_text()
    # The run's note, each seed's table and the mean table.
    assert text.count("(read after, not used for choosing)") == 4
    rows = [line for line in text.splitlines() if line.startswith("| kernel |")]
    per_seed = [r["validation_routing_acc"] for r in records if r["name"] == "kernel"]
    test = [
        r["test_read_after"]["routing_acc"] for r in records if r["name"] == "kernel"
    ]
    assert rows == [
        f"| kernel | {np.mean(per_seed):.4f} | "
        f"{np.mean([r['validation_correctness_acc'] for r in records if r['name'] == 'kernel']):.4f} | "
        f"{per_seed[0]:.4f} / {per_seed[1]:.4f} | {np.mean(test):.4f} |"
    ]
    saved = json.loads((tmp_path / "T.json").read_text())
    assert len(saved) == 6 and saved[-1]["scored_on"].startswith("held-out training")


def test_readme_keeps_the_latest_full_untagged_run(routing, tmp_path):
    """write_readme / rebuild kept the newest JSON per data set whatever its
    --tag, --routers or --n: a later ablation (the stored dropout run: three
    routers, n = 256 only) replaced mmlu-open's whole section."""
    results = os.path.join(ROOT, "benchmarks", "results")
    with open(os.path.join(results, "mmlu-open_2026-12-04.json")) as f:
        full = json.load(f)
    with open(os.path.join(results, "mmlu-open_2026-12-01_dropout.json")) as f:
        ablation = json.load(f)

    def store(result, name, day, **changes):
        result = dict(
            result, date=f"2026-12-{day}", timestamp=f"2026-12-{day}T00:00:00"
        )
        result.update(changes)
        with open(tmp_path / name, "w") as f:
            json.dump(result, f)
        return result

    def section():
        text = (tmp_path / "README.md").read_text()
        routers = [r for r in routing.ROUTERS if f"| {r} |" in text]
        return text.count("## mmlu-open"), re.findall(r"Date (\S+),", text), routers

    store(full, "mmlu-open_2026-12-04.json", "04")
    # A later tagged ablation, tag read from the file name (older files).
    store(ablation, "mmlu-open_2026-12-05_ablation.json", "05")
    routing.write_readme(str(tmp_path))
    assert section() == (1, ["2026-12-04"], list(routing.ROUTERS))
    assert "**n = all" in (tmp_path / "README.md").read_text()
    # Untagged but partial; tagged by the recorded tag: neither replaces it.
    partial = store(ablation, "mmlu-open_2026-12-06.json", "06")
    tagged = store(full, "mmlu-open_2026-12-07.json", "07", tag="x")
    no_kmeans = store(full, "mmlu-open_2026-12-08.json", "08", tag="")
    no_kmeans["settings"] = dict(full["settings"], routers=["LOCUS", "kNN"])
    with open(tmp_path / "mmlu-open_2026-12-08.json", "w") as f:
        json.dump(no_kmeans, f)
    assert routing.rebuild(str(tmp_path)) == str(tmp_path / "README.md")
    assert section() == (1, ["2026-12-04"], list(routing.ROUTERS))

    def why(result):  # under an untagged name
        return routing.readme_exclusion(result, f"mmlu-open_{result['date']}.json")

    assert why(tagged) == "tagged 'x'"
    assert why(partial) == "partial: routers ['KMeans', 'MF', 'IRT'] not run"
    assert (
        why(no_kmeans)
        == "partial: routers ['KMeans', 'MF', 'IRT', 'SingleBest'] not run"
    )
    assert why(dict(full, ns=["256"])) == "partial: n ['all'] not run"
    settings = dict(full["settings"], experiments=["main"])
    assert why(dict(full, settings=settings)) == (
        "partial: experiments ['onboarding', 'robustness', 'cost'] not run"
    )
    settings = dict(full["settings"], locus_overrides=["dropout=0.2"])
    assert why(dict(full, settings=settings)) == "--locus overrides ['dropout=0.2']"
    settings = dict(full["settings"], locus_overrides=["device=cuda"])
    assert why(dict(full, settings=settings)) is None
    # A newer untagged run of every router and n does replace it.
    store(full, "mmlu-open_2026-12-09.json", "09", tag="")
    routing.write_readme(str(tmp_path))
    assert section() == (1, ["2026-12-09"], list(routing.ROUTERS))


def test_resplits_price_models_on_the_resplits_train_queries(monkeypatch, tmp_path):
    """calibration_resplits.py priced every re-split with the mean costs over
    RouterDC's own train split, which holds most of a re-split's test
    queries. GPT-4 costs 1 on the re-split's train queries and 5 on its test
    queries: half its cost is the target, 0.5, read from train only."""
    resplits = _load_script("calibration_resplits")
    import _data

    from locus_sklearn.baselines import KNNRouter
    from locus_sklearn.datasets import make_model_pool

    pool = make_model_pool(
        n_models=4,
        n_queries=80,
        n_families=2,
        evals_per_model="all",
        n_features=8,
        random_state=0,
    )
    models = sorted(pool.evals["model"].unique())
    strong = resplits.STRONG
    evals = pool.evals.replace({"model": {models[0]: strong}})
    queries = np.array(sorted(evals["query"].unique()), dtype=object)
    n_test = 20
    train_q, test_q = resplits.resplit(queries, n_test, seed=0)
    costs = pd.DataFrame(0.1, index=queries, columns=[strong, *models[1:]])
    costs.loc[train_q, strong], costs.loc[test_q, strong] = 1.0, 5.0
    split = dict.fromkeys(queries[:-n_test], "train") | dict.fromkeys(
        queries[-n_test:], "test"
    )  # RouterDC's split: not the re-split
    data = SimpleNamespace(
        evals=evals, encodings=pool.encodings, split=split, query_costs=costs,
        model_costs=costs.mean().to_dict(),
    )  # fmt: skip
    monkeypatch.setattr(_data, "load_routerbench", lambda: data)
    monkeypatch.setattr(
        resplits, "small_locus_router", lambda enc, s, seed: KNNRouter(5, encoder=enc)
    )
    monkeypatch.setattr(resplits, "RESULTS", str(tmp_path))
    threads = torch.get_num_threads()
    try:
        result = resplits.main(["--splits", "1", "--jobs", "1"])
    finally:
        torch.set_num_threads(threads)
    values = {r["value"] for r in result["records"] if r["target"] == "target_cost"}
    assert values == {0.5}
    text = (tmp_path / "calibration_resplits.md").read_text()
    assert "| sd of the miss (sample sd, ddof=1) |" in text
