"""Smoke test of the routing benchmark entry point on a tiny synthetic pool."""

import importlib.util
import json
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "benchmarks", "routing.py")


@pytest.fixture(scope="module")
def routing():
    if not os.path.exists(SCRIPT):  # pragma: no cover - source checkout only
        pytest.skip("benchmarks/ is not part of this installation")
    spec = importlib.util.spec_from_file_location("bench_routing", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
