"""The ``locus`` command line, driven as a user would.

The main round trip runs in subprocesses (``python -m locus_sklearn``); the
many option and error cases run ``main()`` in process, which is the same code
path without the cost of starting Python and importing torch each time.
"""

import errno
import gzip
import json
import math
import os
import re
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from conftest import locus

from locus_sklearn.datasets import make_model_pool


@pytest.fixture
def cli(capsys, monkeypatch):
    """Run ``locus ARGS`` in this process (fast); return (status, stdout, stderr)."""
    import io

    from locus_sklearn._cli import main

    def run(*args, stdin=None):
        if stdin is not None:
            monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
        capsys.readouterr()
        try:
            status = main([str(a) for a in args])
        except SystemExit as exc:  # argparse: --help, --version, usage errors
            status = exc.code
        out, err = capsys.readouterr()
        return status, out, err

    return run


def assert_one_line_error(result, status=1, contains=()):
    assert result.returncode == status, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    for text in contains:
        assert text in result.stderr, result.stderr


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, tiny_cli_args, tiny_settings):
    """Evaluations of 8 models (2 kept apart as new), encodings, costs, a router."""
    path = tmp_path_factory.mktemp("cli")
    pool = make_model_pool(
        n_models=8, n_queries=120, n_tasks=3, n_families=3, evals_per_model=60,
        n_features=8, random_state=0,
    )  # fmt: skip
    evals = pool.evals
    new = ["fam2-m06", "fam2-m07"]
    evals[~evals["model"].isin(new)].to_csv(path / "evals.csv", index=False)
    evals[evals["model"].isin(new)].to_csv(path / "new.csv", index=False)
    queries = np.array(sorted(pool.encodings), dtype=str)
    np.savez(
        path / "enc.npz",
        queries=queries,
        vectors=np.stack([pool.encodings[q] for q in queries]),
    )
    pd.DataFrame(
        {"model": pool.models["model"], "cost": pool.models["n_params"]}
    ).to_csv(path / "costs.csv", index=False)
    result = locus(
        "fit", path / "evals.csv", "-o", path / "router.locus", "--json",
        "--encodings", path / "enc.npz", "--costs", path / "costs.csv", *tiny_cli_args,
        "--shrinkage-repeats", "2",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    from locus_sklearn._files import read_file

    assert read_file(path / "router.locus", "LocusRouter")[0]["shrinkage_repeats"] == 2
    assert "Saved a LocusRouter (6 models" in result.stderr
    # Progress (the epoch table) went to stderr without colour codes; stdout
    # holds only the JSON summary.
    assert "train_loss" in result.stderr and "\x1b[" not in result.stderr
    summary = json.loads(result.stdout)
    assert summary["models"] == sorted(summary["costs"]) and len(summary["models"]) == 6
    assert summary["embedding_dim"] == tiny_settings["embedding_dim"]
    assert summary["n_epochs"] == 2
    assert summary["shrinkage"] in (0.0, 0.25, 0.5, 0.75, 1.0)  # "auto" chose it
    assert f"shrinkage {summary['shrinkage']:g}" in result.stderr
    return path


def test_round_trip(workdir, tmp_path, cli, tiny_settings):
    """fit -> route -> onboard -> neighbors -> embed -> select, as a user runs them."""
    router = tmp_path / "router.locus"
    router.write_bytes((workdir / "router.locus").read_bytes())

    routed = locus("route", router, "q001", "q017", "--tsv")
    assert routed.returncode == 0, routed.stderr
    lines = routed.stdout.strip().splitlines()
    assert lines[0].split("\t") == ["query", "model", "P(correct)", "cost"]
    assert [line.split("\t")[0] for line in lines[1:]] == ["q001", "q017"]
    assert all(0 <= float(line.split("\t")[2]) <= 1 for line in lines[1:])

    onboarded = locus(
        "onboard", router, workdir / "new.csv", "--costs", workdir / "costs.csv"
    )
    assert onboarded.returncode == 0, onboarded.stderr
    assert "added 2 model(s)" in onboarded.stderr.lower()
    assert "8 models" in onboarded.stderr

    neighbors = locus("neighbors", router, "fam2-m06", "--k", "3", "--tsv")
    assert neighbors.returncode == 0, neighbors.stderr
    rows = [line.split("\t") for line in neighbors.stdout.strip().splitlines()[1:]]
    assert [r[0] for r in rows] == ["1", "2", "3"]
    assert "fam2-m06" not in [r[1] for r in rows]

    embeddings = tmp_path / "emb.csv"
    embedded = locus("embed", router, workdir / "evals.csv", "-o", embeddings)
    assert embedded.returncode == 0, embedded.stderr
    frame = pd.read_csv(embeddings, index_col="model")
    assert frame.shape == (6, tiny_settings["embedding_dim"])
    assert list(frame.index) == sorted(frame.index)

    selected = locus("select", embeddings, "--k", "2", "--tsv")
    assert selected.returncode == 0, selected.stderr
    assert len(selected.stdout.strip().splitlines()) == 3

    # The same commands' options, in process (faster).
    status, out, err = cli(
        "route", router, "q003", "--models", "fam2-m06,fam2-m07", "--tsv"
    )
    assert status == 0, err
    assert out.splitlines()[1].split("\t")[1] in {"fam2-m06", "fam2-m07"}
    status, out, err = cli(
        "route", router, "q001", "--top", "3", "--cost-weight", "0.01"
    )
    assert status == 0, err
    assert len(out.strip().splitlines()) == 2 + 3  # header, rule, 3 models
    status, out, err = cli(
        "select", embeddings, "--budget", "300", "--costs", workdir / "costs.csv"
    )
    assert status == 0, err
    costs = pd.read_csv(workdir / "costs.csv", index_col="model")["cost"]
    chosen = [line.split()[1] for line in out.strip().splitlines()[2:]]
    assert chosen and costs[chosen].sum() <= 300
    status, out, err = cli("select", embeddings, "--k", "3", "--method", "kcenter")
    assert status == 0 and len(out.strip().splitlines()) == 2 + 3, err
    status, out, err = cli("neighbors", embeddings, "fam0-m00", "--k", "2")
    assert status == 0 and len(out.strip().splitlines()) == 2 + 2, err


def test_route_from_stdin_in_a_pipe(workdir):
    piped = locus(
        "route", workdir / "router.locus", "-", "--tsv", stdin="q002\nq005\n\nq009\n"
    )
    assert piped.returncode == 0, piped.stderr
    assert [line.split("\t")[0] for line in piped.stdout.splitlines()[1:]] == [
        "q002", "q005", "q009",
    ]  # fmt: skip


def test_route_with_only_blank_queries_is_a_data_error(workdir, cli):
    # A source given but empty is bad data (1); no source at all is a command
    # line missing its argument (2, in the table of errors above).
    status, _, err = cli("route", workdir / "router.locus", "-", stdin="\n  \n")
    assert_one_line(status, err, 1, "every query read was blank")


def test_missing_file_exits_3_with_one_line():
    result = locus("route", "no-such-router.locus", "q001")
    assert_one_line_error(result, 3, ["No such file", "no-such-router.locus"])


def test_route_from_file_and_stdin(workdir, tmp_path, cli):
    router = workdir / "router.locus"
    status, piped, _ = cli("route", router, "-", "--tsv", stdin="q002\nq005\n")
    assert status == 0
    queries = tmp_path / "queries.txt"
    queries.write_text("q002\nq005\n")
    status, from_file, _ = cli("route", router, "--file", queries, "--tsv")
    assert status == 0 and from_file == piped
    status, table, _ = cli("route", router, "q002", "q005", "--top", "2")
    assert status == 0
    lines = table.splitlines()
    assert lines[0].split() == ["query", "rank", "model", "P(correct)", "cost"]
    assert len(lines) == 2 + 2 * 2


def test_embedder_file_and_debug(workdir, tmp_path, cli, tiny_settings):
    """`embed` also takes a saved LocusEmbedder; --debug shows the traceback."""
    from locus_sklearn import LocusRouter

    router = LocusRouter.load(workdir / "router.locus")
    router.embedder_.save(tmp_path / "embedder.locus")
    out = tmp_path / "emb.csv"
    status, _, err = cli(
        "embed", tmp_path / "embedder.locus", workdir / "new.csv", "-o", out
    )
    assert status == 0, err
    assert pd.read_csv(out, index_col="model").shape == (
        2,
        tiny_settings["embedding_dim"],
    )
    # --debug prints the traceback, and keeps the status of the error (3: a
    # missing file), where re-raising made every failure Python's 1.
    for args in (
        ["route", workdir / "missing.locus", "q1", "--debug"],
        ["--debug", "route", workdir / "missing.locus", "q1"],
    ):
        status, _, err = cli(*args)
        assert status == 3, err
        assert "Traceback (most recent call last)" in err
        assert "FileNotFoundError" in err


def test_embed_ignores_the_saved_output_container(workdir, tmp_path, cli, monkeypatch):
    """An embedder saved after set_output(transform="polars") is embedded
    where polars is not installed: the command writes a csv, and needs no
    DataFrame library for that."""
    from locus_sklearn import LocusEmbedder, LocusRouter
    from locus_sklearn._files import read_file

    router = LocusRouter.load(workdir / "router.locus")
    # set_output stores the name without importing polars; only a transform
    # under it does.
    router.embedder_.set_output(transform="polars").save(tmp_path / "embedder.locus")
    assert read_file(tmp_path / "embedder.locus", "LocusEmbedder")[0][
        "output_config"
    ] == {"transform": "polars"}
    # polars missing, whether installed here or not: its import fails.
    monkeypatch.setitem(sys.modules, "polars", None)
    out = tmp_path / "emb.csv"
    status, _, err = cli(
        "embed", tmp_path / "embedder.locus", workdir / "new.csv", "-o", out
    )
    assert status == 0, err
    written = pd.read_csv(out, index_col="model")
    assert list(written.index) == ["fam2-m06", "fam2-m07"]
    expected = router.embed(pd.read_csv(workdir / "new.csv"))
    np.testing.assert_allclose(written.to_numpy(), expected, rtol=1e-6, atol=1e-6)
    # A user's own load keeps the saved setting (the command's copy only
    # was set back to arrays).
    loaded = LocusEmbedder.load(tmp_path / "embedder.locus")
    assert loaded._sklearn_output_config == {"transform": "polars"}


R = "{w}/router.locus"
FIT = ["{w}/evals.csv", "-o", "{w}/x.locus"]


@pytest.mark.parametrize(
    "args, status, message",
    [
        (["route", "{w}/corrupt.locus", "q001"], 1, "not a readable locus_sklearn"),
        (["route", "{w}/new.csv", "q001"], 1, "not a readable locus_sklearn file"),
        (["route", R, "unknown-query"], 1, "no vector"),
        (["route", R, "q001", "--models", "nope"], 1, "not in the pool"),
        (["route", R, "q001", "--top", "0"], 2, "positive integer"),
        (["route", R, "q001", "--cost-weight", "-1"], 2, "number >= 0"),
        (["route", R, "q001", "--cost-weight", "x"], 2, "number >= 0"),
        (["route", R], 2, "No queries given: pass them"),
        (["route", R, "q1", "--encodings", "{w}/missing.npz"], 3,
         "No such encodings file"),
        (["neighbors", R, "nope"], 1, "not a model of the pool"),
        (["neighbors", R, "fam0-m00", "--k", "99"], 1, "--k 99"),
        (["fit", "{w}/missing.csv", "-o", "{w}/x.locus"], 3, "missing.csv"),
        (["fit", "{w}/evals.csv"], 2, "-o/--output"),
        (["fit", *FIT, "--set", "n_latent=3"], 2,
         "did you mean n_latents"),
        (["fit", *FIT, "--set", "oops"], 2, "NAME=VALUE"),
        (["fit", *FIT, "--encodings", "{w}/costs.csv"], 1,
         "not a valid encodings file"),
        (["fit", *FIT, "--encodings", "{w}/enc.npz",
          "--set", "dropout=2.0"], 1, "dropout"),
        (["fit", *FIT, "--encodings", "{w}/enc.npz",
          "--costs", "{w}/evals.csv"], 1, "columns model,cost"),
        (["fit", *FIT, "--encoder", "{w}/nodir"], 3,
         "No such --encoder folder"),
        (["select", "{w}/new.csv", "--k", "2"], 1, "not an embeddings csv"),
        (["select", "{w}/costs.csv"], 2, "one of the arguments --k --budget"),
        (["embed", "{w}/corrupt.locus", "{w}/new.csv", "-o", "{w}/e.csv"], 1,
         "not a readable"),
        (["frobnicate"], 2, "invalid choice"),
    ],
)  # fmt: skip
def test_errors_are_one_line(workdir, cli, args, status, message):
    (workdir / "corrupt.locus").write_bytes(b"\x00not a safetensors file at all")
    code, out, err = cli(*[a.format(w=workdir) for a in args])
    assert code == status, err
    assert message in err, err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith(("locus ", "locus:"))
    assert not (workdir / "x.locus").exists()


def test_failed_onboard_leaves_router_intact(workdir, tmp_path, cli):
    router = tmp_path / "router.locus"
    router.write_bytes((workdir / "router.locus").read_bytes())
    before = router.read_bytes()
    # The router has costs, so new models need --costs.
    status, _, err = cli("onboard", router, workdir / "new.csv")
    assert status == 1 and "--costs" in err
    # Evaluations with an out-of-range score fail validation.
    bad = pd.read_csv(workdir / "new.csv")
    bad.loc[0, "score"] = 3.0
    bad.to_csv(tmp_path / "bad.csv", index=False)
    status, _, err = cli(
        "onboard", router, tmp_path / "bad.csv", "--costs", workdir / "costs.csv"
    )
    assert status == 1 and "score" in err
    # Queries the router cannot encode.
    bad.assign(score=1.0, query="never-seen", task="t").to_csv(
        tmp_path / "unknown.csv", index=False
    )
    status, _, err = cli(
        "onboard", router, tmp_path / "unknown.csv", "--costs", workdir / "costs.csv"
    )
    assert status == 1 and "no vector" in err
    assert router.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "bad.csv", "router.locus", "unknown.csv",
    ]  # fmt: skip


def test_onboard_new_queries_with_encodings(workdir, tmp_path, cli):
    """--encodings adds vectors to those saved in the router, which keeps both."""
    router = tmp_path / "router.locus"
    router.write_bytes((workdir / "router.locus").read_bytes())
    new = pd.read_csv(workdir / "new.csv")
    new["query"] = "new-" + new["query"]
    new.to_csv(tmp_path / "new.csv", index=False)
    queries = np.array(sorted(new["query"].unique()), dtype=str)
    rng = np.random.default_rng(0)
    np.savez(
        tmp_path / "more.npz",
        queries=queries,
        vectors=rng.normal(size=(len(queries), 8)),
    )
    status, _, err = cli(
        "onboard", router, tmp_path / "new.csv", "--costs", workdir / "costs.csv",
        "--encodings", tmp_path / "more.npz",
    )  # fmt: skip
    assert status == 0, err
    status, out, err = cli("route", router, "q001", queries[0], "--tsv")
    assert status == 0, err
    assert len(out.splitlines()) == 3


def test_onboard_summary_keeps_model_names_as_written(workdir, tmp_path, cli):
    # str.capitalize() on the summary lowercased every name after its start.
    router = tmp_path / "router.locus"
    router.write_bytes((workdir / "router.locus").read_bytes())
    new = pd.read_csv(workdir / "new.csv")
    new["model"] = new["model"].map({"fam2-m06": "Org/Big-M06", "fam2-m07": "SMALL"})
    new.to_csv(tmp_path / "new.csv", index=False)
    costs = pd.DataFrame({"model": ["Org/Big-M06", "SMALL"], "cost": [1.0, 2.0]})
    costs.to_csv(tmp_path / "costs.csv", index=False)
    status, _, err = cli(
        "onboard", router, tmp_path / "new.csv", "--costs", tmp_path / "costs.csv"
    )
    assert status == 0, err
    assert "Added 2 model(s): Org/Big-M06, SMALL." in err


def test_cost_weight_without_costs(workdir, tmp_path, cli):
    from locus_sklearn import LocusRouter

    router = LocusRouter.load(workdir / "router.locus")
    router.model_costs_ = None
    router.save(tmp_path / "plain.locus")
    status, out, err = cli(
        "route", tmp_path / "plain.locus", "q001", "--cost-weight", "1"
    )
    assert status == 1 and "--costs" in err
    status, out, err = cli("route", tmp_path / "plain.locus", "q001")
    assert status == 0 and out.split("\n")[0].split() == [
        "query",
        "model",
        "P(correct)",
    ]


def test_demo_quick(tmp_path):
    """The report on stdout; with --json the summary there and the report on
    stderr; the epoch table always on stderr."""
    pytest.importorskip("matplotlib")
    # On a stdout that writes only ASCII, too: the report's "±" failed the
    # demo half-way (status 1, no figures).
    result = locus(
        "demo", "--quick", "--output", tmp_path / "out", cwd=tmp_path,
        env={"PYTHONIOENCODING": "ascii"},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "portfolios (mean +/- sd)" in out and "\\x" not in out
    for text in ("LocusRouter", "single best", "oracle", "Onboarding", "Portfolio"):
        assert text in out
    assert "train_loss" not in out and "train_loss" in result.stderr
    last = out.strip().splitlines()[-1]
    assert last.endswith(str(tmp_path / "out"))
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "model_dendrogram.png", "model_map.png", "portfolio_curve.png",
    ]  # fmt: skip
    result = locus(
        "demo", "--quick", "--json", "--output", tmp_path / "out2", cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert "Portfolio" in result.stderr
    assert summary["output"] == str(tmp_path / "out2")
    assert 0 <= summary["locus_accuracy"] <= summary["oracle_accuracy"] <= 1
    assert len(summary["portfolio"]) == 5
    assert 0 <= summary["kmedoids_portfolio_accuracy"] <= 1


def test_help_and_version(cli):
    status, out, _ = cli("--help")
    assert status == 0
    for command in (
        "demo", "fit", "route", "embed", "onboard", "select", "portfolio", "neighbors",
        "match",
    ):  # fmt: skip
        assert command in out
    status, out, _ = cli("--version")
    assert status == 0 and out.startswith("locus ")


# ----------------------------------------------------------- hardening (issue 15)
def copy_router(workdir, tmp_path):
    router = tmp_path / "router.locus"
    router.write_bytes((workdir / "router.locus").read_bytes())
    return router


def assert_one_line(status, err, expected_status, *contains):
    assert status == expected_status, err
    assert len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err
    for text in contains:
        assert text in err, err


@pytest.mark.skipif(
    __import__("torch").cuda.is_available(), reason="needs a machine without CUDA"
)
@pytest.mark.parametrize(
    "command", ["fit", "route", "serve", "calibrate", "litellm-config"]
)
def test_unavailable_device_is_a_usage_error(workdir, cli, command):
    args = {
        "fit": ["fit", workdir / "evals.csv", "-o", workdir / "x.locus"],
        "route": ["route", workdir / "router.locus", "q001"],
        "serve": ["serve", workdir / "router.locus"],
        "calibrate": ["calibrate", workdir / "router.locus", workdir / "evals.csv",
                      "--target-cost", "1", "-o", workdir / "x.locus"],
        "litellm-config": ["litellm-config", workdir / "router.locus", "--config",
                           workdir / "gateway.yaml"],
    }[command]  # fmt: skip
    status, _, err = cli(*args, "--device", "cuda")
    assert status == 2 and "Traceback" not in err
    assert "--device" in err and "'cuda' is not available" in err, err
    status, _, err = cli(*args, "--device", "tpu-please")
    assert status == 2 and "not a torch device" in err, err
    assert not (workdir / "x.locus").exists()


@pytest.mark.parametrize(
    "error",
    [
        OSError(errno.ENOSPC, "No space left on device"),
        PermissionError(errno.EACCES, "Permission denied", "/somewhere/tmpab12.tmp"),
        "safetensors",
    ],
)
def test_failed_write_during_onboard(workdir, tmp_path, cli, monkeypatch, error):
    """A full disk (OSError or safetensors' own error) or a refused write while
    saving: one line naming the router, exit 3, the file unchanged, no
    temporary file left."""
    from safetensors import SafetensorError

    from locus_sklearn import _files as _persistence

    if error == "safetensors":
        error = SafetensorError(
            "Error while serializing: IoError(Os { code: 28, kind: StorageFull, "
            'message: "No space left on device" })'
        )

    def fail(*args, **kwargs):
        raise error

    router = copy_router(workdir, tmp_path)
    before = router.read_bytes()
    monkeypatch.setattr(_persistence, "save", fail)
    status, _, err = cli(
        "onboard", router, workdir / "new.csv", "--costs", workdir / "costs.csv"
    )
    reason = "Permission denied" if isinstance(error, PermissionError) else "No space"
    assert_one_line(status, err, 3, f"could not write ROUTER '{router}'", reason)
    assert "the file is unchanged" in err and ".tmp" not in err
    assert router.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["router.locus"]


def test_target_folder_checked_before_work(workdir, tmp_path, cli, tiny_cli_args):
    """A missing target folder fails at once, naming the target."""
    target = tmp_path / "no-such-folder" / "router.locus"
    status, _, err = cli("fit", workdir / "evals.csv", "-o", target, *tiny_cli_args)
    assert_one_line(status, err, 3, f"cannot write ROUTER '{target}'", "does not exist")
    assert "train_loss" not in err  # no training happened
    status, _, err = cli(
        "onboard", workdir / "router.locus", workdir / "new.csv", "-o", target
    )
    assert_one_line(status, err, 3, f"cannot write ROUTER '{target}'")
    status, _, err = cli(
        "embed", workdir / "router.locus", workdir / "new.csv", "-o", tmp_path
    )
    assert_one_line(status, err, 3, "cannot write EMBEDDINGS", "is a folder")


@pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() == 0,
    reason="root writes into read-only folders",
)
def test_read_only_target_folder(workdir, tmp_path, cli):
    folder = tmp_path / "locked"
    folder.mkdir()
    router = copy_router(workdir, folder)
    before = router.read_bytes()
    folder.chmod(0o555)
    try:
        status, _, err = cli(
            "onboard", router, workdir / "new.csv", "--costs", workdir / "costs.csv"
        )
    finally:
        folder.chmod(0o755)
    assert_one_line(status, err, 3, f"cannot write ROUTER '{router}'", "not writable")
    assert router.read_bytes() == before


def test_bad_evaluation_files(workdir, tmp_path, cli, tiny_cli_args):
    """Messages name the file, the column and the first bad row."""
    fit = ["fit", "-o", tmp_path / "x.locus", *tiny_cli_args]
    good = pd.read_csv(workdir / "evals.csv")

    repeated = tmp_path / "repeated.csv"
    good.assign(extra=good["score"]).rename(columns={"extra": "score"}).to_csv(
        repeated, index=False
    )
    status, _, err = cli(*fit, repeated)
    assert_one_line(status, err, 1, str(repeated), "repeated column names", "'score'")

    words = tmp_path / "words.csv"
    bad = good.astype({"score": object})
    bad.loc[[4, 9], "score"] = ["yes", "no"]
    bad.to_csv(words, index=False)
    status, _, err = cli(*fit, words)
    assert_one_line(status, err, 1, str(words), "column 'score'", "'yes' in data row 5")
    assert "(2 row(s) are not)" in err

    empty = tmp_path / "empty.csv"
    empty.write_text("")
    status, _, err = cli(*fit, empty)
    assert_one_line(status, err, 1, str(empty), "is empty")
    assert not (tmp_path / "x.locus").exists()


def test_encodings_given_a_text_file(workdir, tmp_path, cli):
    text = tmp_path / "enc.txt"
    text.write_text("q001 0.1 0.2\n")
    status, _, err = cli("route", workdir / "router.locus", "q001", "--encodings", text)
    assert_one_line(status, err, 1, str(text), "not an npz archive")
    np.save(tmp_path / "one.npy", np.zeros((2, 3)))
    status, _, err = cli(
        "route", workdir / "router.locus", "q001", "--encodings", tmp_path / "one.npy"
    )
    assert_one_line(status, err, 1, "a single .npy array")


def test_bad_costs_file(workdir, tmp_path, cli):
    costs = pd.read_csv(workdir / "costs.csv")
    costs.loc[2, "cost"] = -1.0
    costs.to_csv(tmp_path / "costs.csv", index=False)
    status, _, err = cli(
        "select",
        workdir / "router.locus",
        "--k",
        "2",
        "--costs",
        tmp_path / "costs.csv",
    )
    assert_one_line(status, err, 1)
    status, _, err = cli(
        "onboard", copy_router(workdir, tmp_path), workdir / "new.csv",
        "--costs", tmp_path / "costs.csv",
    )  # fmt: skip
    assert_one_line(status, err, 1, "costs file", "finite and >= 0")


def test_refresh_keeps_costs(workdir, tmp_path, cli):
    """Refreshing a model of a router with costs, without --costs, keeps its
    cost (issue 15, item 1: it used to become NaN in the saved file)."""
    from locus_sklearn import LocusRouter

    router = copy_router(workdir, tmp_path)
    before = LocusRouter.load(router)
    refresh = pd.read_csv(workdir / "evals.csv")
    refresh[refresh["model"] == "fam0-m00"].to_csv(
        tmp_path / "refresh.csv", index=False
    )
    status, out, err = cli("onboard", router, tmp_path / "refresh.csv", "--json")
    assert status == 0, err
    assert json.loads(out)["refreshed"] == ["fam0-m00"]
    after = LocusRouter.load(router)
    assert np.isfinite(after.model_costs_).all()
    np.testing.assert_array_equal(after.model_costs_, before.model_costs_)
    assert after.predict(["q001"])[0] == before.predict(["q001"])[0]


def test_progress_on_stderr_without_colour(workdir, tmp_path, cli, tiny_cli_args):
    status, out, err = cli(
        "fit", workdir / "evals.csv", "-o", tmp_path / "x.locus",
        "--encodings", workdir / "enc.npz", *tiny_cli_args,
    )  # fmt: skip
    assert status == 0, err
    assert out == ""
    assert "train_loss" in err and "\x1b[" not in err


def test_verbose_0_prints_nothing(workdir, tmp_path, tiny_embedder):
    """A router fitted with verbose=0 and the default encoder prints nothing,
    not even the encoder's weight-loading bar on the first predict."""
    from locus_sklearn import LocusRouter

    evals = pd.read_csv(workdir / "evals.csv")
    embedder = tiny_embedder(None, max_epochs=1, early_stopping=None, verbose=0)
    LocusRouter(embedder).fit(evals).save(tmp_path / "router.locus")
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_HUB_DISABLE")}
    script = (
        "import sys; from locus_sklearn import LocusRouter; "
        "print(LocusRouter.load(sys.argv[1]).predict(['q001'])[0])"
    )
    result = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "router.locus")],
        capture_output=True, text=True, timeout=300,
        env=dict(env, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1"),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert result.stdout.strip() in set(evals["model"])


def test_threads_option(workdir, cli, monkeypatch):
    import torch

    calls = []
    real = torch.set_num_threads

    def spy(n):
        calls.append(n)
        real(n)

    monkeypatch.setattr(torch, "set_num_threads", spy)
    before = torch.get_num_threads()
    status, _, err = cli("--threads", "1", "route", workdir / "router.locus", "q001")
    assert status == 0, err
    assert calls == [1, before]  # set for the command, then restored
    status, _, err = cli("route", workdir / "router.locus", "q001", "--threads", "2")
    assert status == 0 and calls[2:] == [2, before], err
    status, _, err = cli("--threads", "0", "route", workdir / "router.locus", "q001")
    assert status == 2 and "from 1 to 1024" in err


def test_json_output(workdir, tmp_path, cli):
    router = copy_router(workdir, tmp_path)
    costs = pd.read_csv(workdir / "costs.csv", index_col="model")["cost"]

    status, out, err = cli("route", router, "q001", "q002", "--top", "2", "--json")
    assert status == 0, err
    routed = json.loads(out)
    assert [r["query"] for r in routed] == ["q001", "q002"]
    status, tsv, _ = cli("route", router, "q001", "q002", "--tsv")
    assert [r["model"] for r in routed] == [
        line.split("\t")[1] for line in tsv.splitlines()[1:]
    ]
    for r in routed:
        assert len(r["ranking"]) == 2 and r["ranking"][0]["model"] == r["model"]
        first, second = r["ranking"]
        assert first["p_correct"] >= second["p_correct"]
        assert first["cost"] == costs[first["model"]]

    status, out, err = cli("neighbors", router, "fam0-m00", "--k", "2", "--json")
    assert status == 0, err
    near = json.loads(out)
    assert [n["rank"] for n in near] == [1, 2]
    assert near[0]["distance"] <= near[1]["distance"]

    embeddings = tmp_path / "emb.csv"
    status, out, err = cli(
        "embed", router, workdir / "evals.csv", "-o", embeddings, "--json"
    )
    assert status == 0, err
    embedded = json.loads(out)
    frame = pd.read_csv(embeddings, index_col="model")
    assert embedded["models"] == list(frame.index)
    np.testing.assert_allclose(embedded["embeddings"], frame.to_numpy(), rtol=1e-6)

    status, out, err = cli(
        "select", embeddings, "--budget", "300", "--costs", workdir / "costs.csv",
        "--json",
    )  # fmt: skip
    assert status == 0, err
    chosen = json.loads(out)
    names = [s["model"] for s in chosen["selected"]]
    assert chosen["total_cost"] == pytest.approx(costs[names].sum())
    assert chosen["total_cost"] <= 300
    assert chosen["n_models"] == 6

    status, out, err = cli(
        "onboard", router, workdir / "new.csv", "--costs", workdir / "costs.csv",
        "--json",
    )  # fmt: skip
    assert status == 0, err
    assert json.loads(out)["added"] == ["fam2-m06", "fam2-m07"]
    assert len(json.loads(out)["models"]) == 8

    status, _, err = cli("route", router, "q001", "--json", "--tsv")
    assert status == 2 and "not allowed with" in err


def test_subcommands_defined_elsewhere(cli, monkeypatch):
    """build_parser adds the subcommands of locus_sklearn.serve._cli when that
    module is there, and runs them through their ``func``."""
    import types

    def add_subparsers(subparsers):
        p = subparsers.add_parser("hello", help="say hello")
        p.add_argument("name")
        p.set_defaults(func=lambda args: print(f"hello {args.name}") or 0)

    serve = types.ModuleType("locus_sklearn.serve")
    serve_cli = types.ModuleType("locus_sklearn.serve._cli")
    serve_cli.add_subparsers = add_subparsers
    serve._cli = serve_cli
    monkeypatch.setitem(sys.modules, "locus_sklearn.serve", serve)
    monkeypatch.setitem(sys.modules, "locus_sklearn.serve._cli", serve_cli)
    status, out, err = cli("hello", "world")
    assert status == 0 and out == "hello world\n", err
    status, out, _ = cli("--help")
    assert "hello" in out


def test_reader_closing_the_pipe(workdir):
    """`locus route ... | head -1`: a quiet stop when the reader goes away,
    with status 141 (128 + SIGPIPE, as shell tools report it), not 1, which
    says the data was invalid. The output (5000 lines, far over a pipe's
    64 KiB) cannot all be written before the reader closes."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    process = subprocess.Popen(
        [sys.executable, "-m", "locus_sklearn", "route", workdir / "router.locus",
         "-", "--tsv"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env=env,
    )  # fmt: skip
    process.stdin.write(b"q001\n" * 5000)
    process.stdin.close()
    assert process.stdout.readline().startswith(b"query\t")
    process.stdout.close()
    err = process.stderr.read().decode()
    assert process.wait(timeout=300) == 141, err
    assert err == "", err  # no traceback, no "error: Broken pipe"


# The tiny router's P may saturate within the portfolio (warned, as it should).
@pytest.mark.filterwarnings(
    "ignore:Selecting model .* raised the expected accuracy by nothing:UserWarning"
)
def test_portfolio_for_expected_routing_accuracy(workdir, cli):
    from locus_sklearn import ExpectedAccuracySelector, LocusRouter

    path = workdir / "router.locus"
    queries = [f"q{i:03d}" for i in range(0, 120, 3)]
    status, out, err = cli("portfolio", path, *queries, "--k", "3", "--json")
    assert status == 0, err
    result = json.loads(out)
    router = LocusRouter.load(path)
    expected = ExpectedAccuracySelector(n_select=3).fit(router.predict_proba(queries).T)
    assert [s["model"] for s in result["selected"]] == list(
        router.classes_[expected.selected_indices_]
    )
    np.testing.assert_allclose(
        [s["expected_accuracy"] for s in result["selected"]], expected.objective_path_
    )
    assert result["full_pool_expected_accuracy"] == pytest.approx(
        expected.full_objective_
    )
    assert (result["n_queries"], result["n_models"]) == (len(queries), 6)

    status, out, err = cli("portfolio", path, *queries, "--k", "2", "--tsv")
    assert status == 0, err
    lines = out.strip().splitlines()
    assert lines[0].split("\t") == ["rank", "model", "expected accuracy"]
    assert [line.split("\t")[0] for line in lines[1:]] == ["1", "2"]

    status, _, err = cli("portfolio", path, "q001", "--k", "7")
    assert status == 1
    assert "--k 7 is larger than the number of models (6)" in err
    assert "n_select" not in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "text, value", [("auto", "auto"), ("none", None), ("None", None), ("0.25", 0.25)]
)
def test_fit_shrinkage_option(text, value):
    from locus_sklearn._cli._parser import build_parser

    args = build_parser().parse_args(["fit", "e.csv", "-o", "r", "--shrinkage", text])
    assert args.shrinkage == value
    assert build_parser().parse_args(["fit", "e.csv", "-o", "r"]).shrinkage == "auto"


def test_fit_shrinkage_repeats_option(capsys):
    from locus_sklearn._cli._parser import build_parser

    fit = ["fit", "e.csv", "-o", "r"]
    # Not given: None, which fit runs as LocusRouter's default of 1 (and
    # tells apart from an explicit --shrinkage-repeats).
    assert build_parser().parse_args(fit).shrinkage_repeats is None
    assert (
        build_parser().parse_args([*fit, "--shrinkage-repeats", "3"]).shrinkage_repeats
        == 3
    )
    for text in ("0", "2.5", "many"):
        with pytest.raises(SystemExit):
            build_parser().parse_args([*fit, "--shrinkage-repeats", text])
        err = capsys.readouterr().err
        assert "--shrinkage-repeats" in err and repr(text) in err


@pytest.mark.parametrize(
    "given, option",
    [
        (["--set", "max_epochs=abc", "--epochs", "1"], "--epochs 1"),
        (["--set", "embedding_dim=8", "--embedding-dim", "4"], "--embedding-dim 4"),
        (["--set", "random_state=3", "--seed", "0"], "--seed 0"),
    ],
)
def test_fit_set_conflicting_with_its_option_is_refused(
    workdir, tmp_path, cli, given, option
):
    """``--set NAME=...`` and the option that sets NAME: neither silently
    wins; a command-line error before any work."""
    out = tmp_path / "x.locus"
    status, _, err = cli("fit", workdir / "evals.csv", "-o", out, *given)
    assert_one_line(status, err, 2, given[1].split("=")[0], option, "only one")
    assert not out.exists()


@pytest.fixture
def python_sigint():
    """Python's own Ctrl-C handler for the test, whatever the test run was
    started with: a background job of a non-interactive shell starts with
    SIGINT ignored, which ``interrupts_kept`` keeps ignoring (so a run of the
    suite started that way failed the tests of Ctrl-C in training)."""
    import signal

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def _interrupted_fit(self, evals, y=None, **params):
    """A LocusRouter.fit stand-in: a Ctrl-C during training, caught as
    skorch's training loop catches it (the fit returns)."""
    import signal

    try:
        os.kill(os.getpid(), signal.SIGINT)
    except KeyboardInterrupt:
        pass
    return self


def test_fit_interrupted_in_training_exits_130_and_writes_nothing(
    workdir, tmp_path, cli, monkeypatch, tiny_cli_args, python_sigint
):
    """skorch ends a fit at Ctrl-C and keeps the network trained so far;
    ``locus fit`` must not save that router and exit 0."""
    import signal

    from locus_sklearn import LocusRouter

    monkeypatch.setattr(LocusRouter, "fit", _interrupted_fit)
    out = tmp_path / "router.locus"
    out.write_bytes(b"the router in place")
    status, stdout, err = cli(
        "fit", workdir / "evals.csv", "-o", out, "--encodings", workdir / "enc.npz",
        "--json", *tiny_cli_args,
    )  # fmt: skip
    assert_one_line(status, err.splitlines()[-1], 130, "interrupted")
    assert stdout == "" and out.read_bytes() == b"the router in place"
    # The handler is put back: Ctrl-C is Python's KeyboardInterrupt again.
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_deploy_commands_take_threads():
    """``calibrate --threads N`` (like every locus command), and N given
    before ``serve`` is not dropped by serve's own option."""
    from locus_sklearn._cli._parser import build_parser

    parser = build_parser()
    for argv in (
        ["--threads", "3", "serve", "r"],
        ["serve", "r", "--threads", "3"],
        ["calibrate", "r", "e.csv", "--target-cost", "1", "--threads", "3"],
        ["--threads", "3", "litellm-config", "r", "--config", "g.yaml"],
    ):
        assert parser.parse_args(argv).threads == 3, argv


@pytest.mark.parametrize("text", ["1.5", "-0.1", "always", "nan"])
def test_fit_bad_shrinkage_is_named(text, capsys):
    from locus_sklearn._cli._parser import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(["fit", "e.csv", "-o", "r", "--shrinkage", text])
    err = capsys.readouterr().err
    assert "--shrinkage" in err and repr(text) in err and "[0, 1]" in err


# ------------------------------------------------------------------ match


@pytest.fixture(scope="module")
def match_files(tmp_path_factory):
    """Known models' scores, and two endpoints on 150 of their queries: a copy
    of known model fam1-m05 with 3 % of its scores changed, and a model the
    known pool does not have."""
    path = tmp_path_factory.mktemp("match")
    pool = make_model_pool(
        n_models=12, n_queries=600, evals_per_model="all", random_state=0
    )
    evals = pool.evals
    stranger = "fam4-m11"
    evals[evals["model"] != stranger].to_csv(path / "known.csv", index=False)
    rng = np.random.default_rng(1)
    queries = rng.choice(evals["query"].unique(), 150, replace=False)
    on_probe = evals["query"].isin(queries)
    copy = evals[(evals["model"] == "fam1-m05") & on_probe].assign(model="endpoint-a")
    changed = rng.random(len(copy)) < 0.03
    copy.loc[changed, "score"] = 1 - copy.loc[changed, "score"]
    fresh = evals[(evals["model"] == stranger) & on_probe].assign(model="endpoint-b")
    pd.concat([copy, fresh]).to_csv(path / "endpoints.csv", index=False)
    return path, changed.mean()


def test_match_names_the_copy_and_not_the_stranger(match_files, cli):
    path, changed = match_files
    known, endpoints = path / "known.csv", path / "endpoints.csv"
    status, out, err = cli("match", known, endpoints, "--tsv")
    assert status == 0, err
    rows = [line.split("\t") for line in out.strip().splitlines()]
    assert rows[0] == [
        "endpoint",
        "nearest known model",
        "disagreement",
        "queries",
        "match",
    ]
    table = {r[0]: r[1:] for r in rows[1:]}
    assert table["endpoint-a"][0] == "fam1-m05"
    assert float(table["endpoint-a"][1]) == pytest.approx(changed, abs=1e-4)
    assert table["endpoint-a"][2:] == ["150", "yes"]
    # The calibrated threshold (on random sets of 150 known queries) is on
    # stderr; here it lies between the copy and the stranger.
    threshold = float(err.split("threshold ")[1].split(":")[0])
    assert float(table["endpoint-a"][1]) < threshold
    assert (float(table["endpoint-b"][1]) <= threshold) == (
        table["endpoint-b"][3] == "yes"
    )
    # A threshold given replaces the calibration; JSON for programs.
    status, out, err = cli("match", known, endpoints, "--threshold", "0.1", "--json")
    assert status == 0 and "threshold" not in err
    document = json.loads(out)
    assert document["threshold"] == 0.1
    matches = {m["endpoint"]: m for m in document["matches"]}
    assert (
        matches["endpoint-a"]["is_match"] and matches["endpoint-a"]["n_shared"] == 150
    )
    assert not matches["endpoint-b"]["is_match"]


@pytest.mark.parametrize(
    "extra, status, message",
    [
        (["--min-shared", "500"], 1, "fewer than --min-shared 500"),
        (["--false-match-rate", "1.5"], 2, "--false-match-rate: expected a number"),
        (["--threshold", "0.1", "--false-match-rate", "0.1"], 2, "not allowed"),
        (["--threshold", "-1"], 2, "--threshold"),
    ],
)
def test_match_errors_are_one_line(match_files, cli, extra, status, message):
    path, _ = match_files
    code, out, err = cli("match", path / "known.csv", path / "endpoints.csv", *extra)
    assert code == status, err
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert out == ""


def test_match_calibrates_on_the_queries_shared_with_known(tmp_path, cli):
    """An endpoint scored on 40 queries of KNOWN and 360 others is compared
    on those 40 only, so the threshold is calibrated on random sets of 40
    known queries. Counting all 400 calibrated on sets of 400, whose rates
    are far less noisy: a looser threshold (0.45 here, against 0.16) that
    matched this endpoint, a model KNOWN does not have (disagreement 0.35
    with its nearest known model), with status 0."""
    from locus_sklearn.inspection import calibrate_score_threshold

    rng = np.random.default_rng(0)
    queries = [f"k{i:04d}" for i in range(1000)]
    scores = (rng.random((1000, 6)) < 0.5).astype(float)  # 6 unrelated models
    known = pd.DataFrame({
        "model": np.repeat([f"m{i}" for i in range(6)], 1000),
        "query": queries * 6,
        "score": scores.T.ravel(),
    })  # fmt: skip
    probe = scores[:40, 0].copy()
    probe[:14] = 1 - probe[:14]  # m0 with 14 of its 40 answers changed: 0.35
    endpoint = pd.DataFrame({
        "model": "endpoint",
        "query": queries[:40] + [f"other{i}" for i in range(360)],
        "score": np.r_[probe, rng.random(360) < 0.5].astype(float),
    })  # fmt: skip
    known.to_csv(tmp_path / "known.csv", index=False)
    endpoint.to_csv(tmp_path / "endpoint.csv", index=False)
    status, out, err = cli(
        "match", tmp_path / "known.csv", tmp_path / "endpoint.csv", "--json"
    )
    assert status == 0, err
    expected = calibrate_score_threshold(known, n_evals=40, random_state=0)
    document = json.loads(out)
    assert document["threshold"] == expected.threshold
    assert "random sets of 40 known queries" in err, err
    (match,) = document["matches"]
    assert match["nearest"] == "m0" and match["distance"] == pytest.approx(0.35)
    assert match["n_shared"] == 40 and not match["is_match"]
    # --min-shared counts the shared queries too (40), not all 400.
    status, out, err = cli(
        "match", tmp_path / "known.csv", tmp_path / "endpoint.csv",
        "--min-shared", "41",
    )  # fmt: skip
    assert_one_line(
        status, err, 1, "'endpoint' has scores on 40 of KNOWN's queries",
        "fewer than --min-shared 41",
    )  # fmt: skip
    assert out == ""


def test_match_reads_missing_files_as_a_file_error(match_files, cli):
    path, _ = match_files
    code, _, err = cli("match", path / "missing.csv", path / "endpoints.csv")
    assert code == 3 and "missing.csv" in err


@pytest.mark.parametrize(
    "args, command",
    [
        (["neighbors", "ROUTER", "fam0-m00", "--bogus"], "neighbors"),
        (["route", "ROUTER", "q001", "--top", "2", "--bogus"], "route"),
        (["serve", "ROUTER", "--bogus"], "serve"),
    ],
)
def test_unknown_option_after_a_command_is_that_commands_error(
    workdir, cli, args, command
):
    """The subcommand reports it and points to its own help, not ``locus``'s."""
    args = [workdir / "router.locus" if a == "ROUTER" else a for a in args]
    status, _, err = cli(*args)
    assert_one_line(
        status,
        err,
        2,
        f"locus {command}: error: unrecognized arguments: --bogus",
        f"(see `locus {command} --help`)",
    )
    # Before the command name it is the top-level parser's.
    status, _, err = cli("--bogus", *args[:-1])
    assert_one_line(status, err, 2, "locus: error: unrecognized arguments: --bogus")


def test_blank_queries_name_where_they_came_from(workdir, tmp_path, cli):
    router = workdir / "router.locus"
    status, _, err = cli("route", router, "")
    assert_one_line(status, err, 1, "every query read was blank", "QUERY argument")
    assert "stdin" not in err and "--file" not in err, err
    blank = tmp_path / "blank.txt"
    blank.write_text("\n   \n")
    status, _, err = cli("portfolio", router, "--file", blank, "--k", "1")
    assert_one_line(status, err, 1, f"--file {str(blank)!r}")
    assert "stdin" not in err and "argument" not in err, err
    status, _, err = cli("route", router, "-", stdin="  \n")
    assert_one_line(status, err, 1, "stdin")
    assert "argument" not in err and "--file" not in err, err


# --------------------------------------------------------- hardening (issue 44)
def _full_disk(monkeypatch, folder):
    """Make every write into ``folder`` (or through a file descriptor) write
    a few bytes and then fail with ENOSPC, as on a full disk."""
    import builtins
    import io

    real_open = io.open

    class Full:
        def __init__(self, handle):
            self._handle = handle

        def write(self, data):
            self._handle.write(data[:8])
            self._handle.flush()
            raise OSError(errno.ENOSPC, "No space left on device")

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self._handle.close()

        def __getattr__(self, name):
            return getattr(self._handle, name)

    def full_open(file, mode="r", *args, **kwargs):
        handle = real_open(file, mode, *args, **kwargs)
        inside = isinstance(file, int) or str(folder) in os.fspath(file)
        return Full(handle) if inside and ("w" in mode or "a" in mode) else handle

    monkeypatch.setattr(builtins, "open", full_open)
    monkeypatch.setattr(io, "open", full_open)


@pytest.mark.parametrize("command", ["embed", "litellm-config"])
def test_failed_write_leaves_the_file_intact(
    workdir, tmp_path, cli, monkeypatch, command
):
    """A full disk: one line naming the target, exit 3, the old file as it
    was, no temporary file left."""
    if command == "embed":
        target = tmp_path / "emb.csv"
        args = ["embed", workdir / "router.locus", workdir / "new.csv", "-o", target]
        what = "EMBEDDINGS"
    else:
        yaml = pytest.importorskip("yaml")
        gateway = workdir / "gw44.yaml"
        gateway.write_text(
            yaml.safe_dump({"backends": {"fam0-m00": {"base_url": "http://x"}}})
        )
        target = tmp_path / "litellm.yaml"
        args = ["litellm-config", workdir / "router.locus", "--config", gateway]
        args += ["-o", target]
        what = "FILE.yaml"
    status, _, err = cli(*args)
    assert status == 0, err
    before = target.read_bytes()
    target.chmod(0o640)
    _full_disk(monkeypatch, tmp_path)
    status, _, err = cli(*args)
    monkeypatch.undo()
    assert_one_line(status, err, 3, f"could not write {what} '{target}'", "No space")
    assert "the file is unchanged" in err and ".tmp" not in err
    assert target.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == [target.name]
    status, _, err = cli(*args)  # a good write keeps the file's mode
    assert status == 0 and target.stat().st_mode & 0o777 == 0o640, err


def test_evaluations_without_a_column_name_the_file(workdir, tmp_path, cli):
    """The file and what to do on the command line, not load_evals' keywords."""
    bad = tmp_path / "nocol.csv"
    bad.write_text("model,query\na,q001\n")
    router = workdir / "router.locus"
    for args in (
        ["fit", bad, "-o", tmp_path / "x.locus", "--encodings", workdir / "enc.npz"],
        ["onboard", router, bad, "-o", tmp_path / "x.locus"],
        ["match", workdir / "evals.csv", bad],
        ["calibrate", router, bad, "--target-cost", "5"],
    ):
        status, _, err = cli(*args)
        assert_one_line(status, err, 1, f"evaluations file '{bad}'", "['score']")
        assert "model_column" not in err and "path " not in err, err
    assert not (tmp_path / "x.locus").exists()


def _embeddings_csv(workdir, path, names=None):
    from locus_sklearn import LocusRouter

    router = LocusRouter.load(workdir / "router.locus")
    X = router.model_embeddings_
    names = router.classes_ if names is None else names
    pd.DataFrame(X, index=pd.Index(names, name="model")).to_csv(path)
    return path


def test_model_names_pandas_would_read_as_missing(workdir, tmp_path, cli):
    names = ["NA", "None", "null", "nan", "007", "n/a"]
    emb = _embeddings_csv(workdir, tmp_path / "emb.csv", names)
    status, out, err = cli("select", emb, "--k", "6", "--tsv")
    assert status == 0, err
    assert sorted(line.split("\t")[1] for line in out.splitlines()[1:]) == sorted(names)
    status, out, err = cli("neighbors", emb, "NA", "--k", "5", "--tsv")
    assert status == 0, err
    assert {line.split("\t")[1] for line in out.splitlines()[1:]} == set(names) - {"NA"}
    costs = tmp_path / "costs.csv"
    costs.write_text(
        "model,cost\n" + "".join(f"{m},{i + 1}\n" for i, m in enumerate(names))
    )
    status, out, err = cli("select", emb, "--budget", "3", "--costs", costs, "--json")
    assert status == 0, err
    assert json.loads(out)["total_cost"] <= 3


def test_demo_output_checked_before_work(tmp_path, cli, monkeypatch):
    from locus_sklearn._cli import _demo

    def ran(*args, **kwargs):
        raise AssertionError("the demo ran")

    monkeypatch.setattr(_demo, "run_demo", ran)
    afile = tmp_path / "afile"
    afile.write_text("")
    status, out, err = cli("demo", "--quick", "--output", afile)
    assert_one_line(status, err, 3, f"--output '{afile}'", "not a folder")
    assert out == ""
    status, _, err = cli("demo", "--quick", "--output", afile / "sub")
    assert_one_line(status, err, 3, "not a folder")


def test_query_file_not_utf8_names_the_option_and_file(workdir, tmp_path, cli):
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes(b"caf\xe9\n")
    for command, extra in (("route", []), ("portfolio", ["--k", "2"])):
        status, _, err = cli(
            command, workdir / "router.locus", "--file", latin1, *extra
        )
        assert_one_line(status, err, 1, f"--file '{latin1}'", "not UTF-8", "0xe9")
    status, _, err = cli("route", workdir / "router.locus", "--file", tmp_path / "no")
    assert_one_line(status, err, 3, f"--file '{tmp_path / 'no'}'")


@pytest.mark.parametrize(
    "args, status, contains, absent",
    [
        (["select", "EMB", "--budget", "0.001", "--costs", "{w}/costs.csv"], 1,
         ["--budget 0.001", "--costs"], ["budget=", "min(costs)"]),
        (["portfolio", "{w}/router.locus", "q001", "--k", "9"], 1,
         ["--k 9", "(6)"], ["n_select"]),
        (["neighbors", "EMB", "fam0-m00", "--k", "6"], 1, ["--k 6", "(5)"], ["k=6"]),
        (["calibrate", "{w}/router.locus", "QUERIES", "--min-accuracy", "0.3"], 1,
         ["--min-accuracy needs"], ["min_accuracy"]),
        (["calibrate", "{w}/router.locus", "QUERIES", "--target-share", "0.2",
          "--models", "bogus"], 1, ["--models has"], []),
        (["calibrate", "PLAIN", "QUERIES", "--target-cost", "5"], 1,
         ["locus fit --costs FILE"], ["model_costs"]),
        (["embed", "{w}/router.locus", "{w}/nofile.parquet", "-o", "{w}/x.csv"], 3,
         ["nofile.parquet"], ["path="]),
        (["fit", *FIT, "--set", "encoder=x"], 2, ["--encoder DIR", "--encodings"],
         ["did you mean"]),
        (["fit", *FIT, "--set", "device=cpu"], 2, ["--device"], ["did you mean"]),
        (["fit", *FIT, "--set", "memory=x"], 2, ["--cache DIR"], ["did you mean"]),
        (["fit", *FIT, "--set", "verbose=0"], 2, ["-q/--quiet"], ["did you mean"]),
        (["route", "EMBEDDER", "q001"], 1, ["locus embed", "router file"],
         ["LocusEmbedder.load"]),
    ],
)  # fmt: skip
def test_errors_name_options_not_parameters(
    workdir, tmp_path, cli, args, status, contains, absent
):
    from locus_sklearn import LocusRouter

    router = LocusRouter.load(workdir / "router.locus")
    files = {"EMB": _embeddings_csv(workdir, tmp_path / "emb.csv")}
    files["QUERIES"] = tmp_path / "queries.txt"
    files["QUERIES"].write_text("q001\nq017\n")
    files["EMBEDDER"] = tmp_path / "embedder.locus"
    router.embedder_.save(files["EMBEDDER"])
    router.model_costs_ = None
    files["PLAIN"] = tmp_path / "plain.locus"
    router.save(files["PLAIN"])
    args = [files.get(a, a.format(w=workdir)) for a in args]
    code, _, err = cli(*args)
    assert_one_line(code, err, status, *contains)
    for text in absent:
        assert text not in err, err
    assert not (workdir / "x.locus").exists() and not (workdir / "x.csv").exists()


@pytest.mark.parametrize(
    "args, command",
    [
        (["route", "{w}/router.locus"], "route"),
        (["calibrate", "{w}/router.locus", "{w}/evals.csv", "--target-share", "0.5"],
         "calibrate"),
        (["fit", *FIT, "--set", "max_epochs=3", "--epochs", "1"], "fit"),
    ],
)  # fmt: skip
def test_usage_errors_found_while_running_point_to_help(workdir, cli, args, command):
    status, _, err = cli(*[a.format(w=workdir) for a in args])
    assert_one_line(status, err, 2, f"(see `locus {command} --help`)")
    assert err.startswith(f"locus {command}: error: ")


def test_calibrate_share_is_documented_as_computed_with_models(cli):
    """``share`` is that of --models with any target (null without --models)."""
    status, out, _ = cli("calibrate", "--help")
    assert status == 0
    assert "their share of calls is reported" in " ".join(out.split())


def test_costs_file_with_one_bad_cost_names_it(workdir, tmp_path, cli):
    costs = pd.read_csv(workdir / "costs.csv").astype({"cost": object})
    costs.loc[1, "cost"] = "abc"
    costs.to_csv(tmp_path / "costs.csv", index=False)
    emb = _embeddings_csv(workdir, tmp_path / "emb.csv")
    status, _, err = cli(
        "select", emb, "--budget", "1e9", "--costs", tmp_path / "costs.csv"
    )
    assert_one_line(
        status, err, 1, "column 'cost'", "'abc' in data row 2", "(1 row(s) are not)"
    )


def test_embed_refuses_an_output_that_is_not_csv(workdir, tmp_path, cli):
    target = tmp_path / "emb.parquet"
    status, _, err = cli(
        "embed", workdir / "router.locus", workdir / "new.csv", "-o", target
    )
    assert_one_line(status, err, 2, f"'{target}'", ".csv")
    assert not target.exists()


def test_aligned_table_with_a_tab_in_a_name(workdir, tmp_path, cli):
    names = ["tab\there", "b", "c", "d", "e", "line\nbreak"]
    emb = _embeddings_csv(workdir, tmp_path / "emb.csv", names)
    status, out, err = cli("select", emb, "--k", "6")
    assert status == 0, err
    lines = out.splitlines()
    assert len(lines) == 8 and "\t" not in out
    assert {len(line) for line in lines[:2]} == {len(lines[1])}
    assert any("tab here" in line for line in lines)
    assert any("line break" in line for line in lines)


# --- the demo on a user's evaluations ------------------------------------------


def _demo_data(seed=0):
    from types import SimpleNamespace

    from locus_sklearn._cli import _demo

    pool = make_model_pool(
        n_models=6, n_queries=200, n_tasks=2, n_families=2, evals_per_model=200,
        n_features=8, random_state=seed,
    )  # fmt: skip
    rng = np.random.RandomState(seed)
    train, test = _demo._split(pool.evals, rng)
    return pool, SimpleNamespace(train=train, test=test, rng=rng, say=lambda *a: None)


def test_demo_holds_out_only_models_it_can_score():
    # A held-out model without test rows ended the demo at step 3 with
    # "queries is empty", after training.
    from locus_sklearn._cli import _demo

    _, demo = _demo_data()
    test = demo.test[demo.test["model"] != "fam0-m00"]
    for seed in range(10):
        held = _demo._held_out_models(demo.train, test, np.random.RandomState(seed), 3)
        assert len(held) == 3 and "fam0-m00" not in held


def test_demo_onboarding_reads_locus_predictions_not_shrunk_ones(
    tiny_settings, monkeypatch
):
    # The "from 128 evals" column read the router's predict_proba, blended
    # with each model's mean score (shrinkage_), against the embedder's
    # unblended prediction "from all": at shrinkage 1 it was the majority
    # guess. Both now read LOCUS's prediction from their embedding.
    from locus_sklearn import LocusEmbedder, LocusRouter
    from locus_sklearn._cli import _demo
    from locus_sklearn.metrics import correctness_accuracy

    pool, demo = _demo_data()
    demo.held_out = ["fam1-m03"]
    trained = demo.train[demo.train["model"] != "fam1-m03"]
    embedder = LocusEmbedder(pool.encodings, max_epochs=2, random_state=0)
    router = LocusRouter(embedder.set_params(**tiny_settings), shrinkage=1.0)
    router.fit(trained)

    def blended(queries):
        raise AssertionError("onboarding read the router's shrunk predictions")

    monkeypatch.setattr(router, "predict_proba", blended)
    results = _demo._onboard(demo, router)["onboarding_accuracy"]
    onboard = _demo._onboard_rows(
        type(demo)(
            held_out=["fam1-m03"], train=demo.train, rng=np.random.RandomState(0)
        )
    )
    test_m = demo.test[demo.test["model"] == "fam1-m03"]
    col = list(router.classes_).index("fam1-m03")
    expected = correctness_accuracy(
        test_m["score"].to_numpy()[:, None],
        router.embedder_.predict_proba(
            router.model_embeddings_[[col]], test_m["query"].tolist(), evals=onboard
        ),
    )
    assert results["fam1-m03"] == pytest.approx(expected)


def test_demo_single_best_is_routed_on_the_same_queries(tmp_path, cli):
    # On a sparse pool the single best was scored on its own test queries
    # (0.833 above the oracle's 0.774), or NaN for a best model with none.
    pytest.importorskip("matplotlib")
    rng = np.random.default_rng(0)
    rows = [("a", f"q{i:03d}", 1.0) for i in range(0, 200, 40)]  # 5 rows, all right
    for m in ("b", "c", "d"):
        for i in range(200):
            if m == "b" or rng.random() < 0.5:
                rows.append((m, f"q{i:03d}", float(rng.random() < 0.6)))
    evals = pd.DataFrame(rows, columns=["model", "query", "score"])
    evals.to_csv(tmp_path / "sparse.csv", index=False)
    status, out, err = cli(
        "demo", "--quick", "--json", "--evals", tmp_path / "sparse.csv",
        "--output", tmp_path / "out",
    )  # fmt: skip
    assert status == 0, err
    summary = json.loads(out)
    assert 0 <= summary["single_best_accuracy"] <= summary["oracle_accuracy"]
    assert "the next where it has no score" in err


def test_demo_refuses_a_single_model(tmp_path, cli):
    evals = pd.DataFrame({"model": "a", "query": ["q1", "q2"], "score": [1.0, 0.0]})
    evals.to_csv(tmp_path / "one.csv", index=False)
    status, _, err = cli("demo", "--evals", tmp_path / "one.csv")
    assert status == 1 and "needs at least 2" in err
    status, _, err = cli("demo", "--evals", tmp_path / "missing.csv")
    assert status != 0 and "No such evaluations file" in err


# --- query and encodings files ----------------------------------------------------


def test_stdin_queries_are_utf8_text_without_a_byte_order_mark(monkeypatch):
    # Bytes that are not UTF-8 reached the tokenizer (or became surrogates);
    # a byte-order mark stayed in the first query ("\ufeffq1" was unknown).
    import io

    from locus_sklearn._cli._io import read_queries

    def stdin(data):
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))

    stdin("\ufeffq1\r\nq2\n\nq\u20283\n".encode())
    assert read_queries(["-"]) == ["q1", "q2", "q\u20283"]
    stdin(b"\xff\xfeq2\n")
    with pytest.raises(ValueError, match=r"stdin \('-'\) is not UTF-8 text: byte 0xff"):
        read_queries(["-"])


def test_query_file_with_a_byte_order_mark(tmp_path):
    from locus_sklearn._cli._io import read_queries

    (tmp_path / "q.txt").write_bytes("\ufeffq1\nq2\n".encode())
    assert read_queries([], tmp_path / "q.txt") == ["q1", "q2"]


@pytest.mark.parametrize(
    "queries, vectors, match",
    [
        ([b"q1", "é".encode()], [[1.0, 0.0], [0.0, 1.0]], None),
        ([b"q1", b"\xff"], [[1.0, 0.0], [0.0, 1.0]], "bytes that are not UTF-8"),
        (["q1", "q2"], [[np.nan, 0.0], [0.0, 1.0]], r"1 row\(s\) with NaN .* \['q1'\]"),
        (["q1", "q2"], [[1e39, 0.0], [0.0, 1.0]], "beyond float32's range"),
    ],
)
def test_encodings_file_texts_and_values_are_checked(tmp_path, queries, vectors, match):
    # Byte-string queries failed with a bare codec error; NaN vectors and
    # float64 values past float32 passed and were reported later, as the
    # encoder's, naming neither --encodings nor the file.
    from locus_sklearn._cli._io import read_encodings

    path = tmp_path / "enc.npz"
    np.savez(path, queries=np.array(queries), vectors=np.array(vectors))
    if match is None:
        assert sorted(read_encodings(path)) == ["q1", "é"]
        return
    with pytest.raises(ValueError, match=f"enc.npz.*{match}"):
        read_encodings(path)


@pytest.mark.parametrize("value", ["-1", "4294967296", "x"])
def test_seed_options_take_numpy_seeds(cli, value):
    # demo --seed -1 was a status-1 error naming no option.
    status, _, err = cli("demo", "--quick", "--seed", value)
    assert status == 2 and "--seed" in err and "0 to 4294967295" in err


# --- CLI defects of issue 46 ------------------------------------------------------


def test_calibrate_target_cost_is_described_as_what_it_returns(cli):
    """calibrate_cost_weight returns the smallest λ meeting a cost target;
    accuracy is not monotone in λ, so "the most accurate λ" was wrong."""
    status, out, _ = cli("calibrate", "--help")
    text = " ".join(out.split())
    assert status == 0
    assert "the smallest lambda whose mean cost is <= --target-cost" in text
    assert "most accurate lambda with" not in text
    from pathlib import Path

    guide = Path(__file__).parents[1] / "docs" / "user_guide" / "deploying.rst"
    guide = " ".join(guide.read_text(encoding="utf-8").split())
    assert "# the most accurate routing with a mean cost" not in guide
    assert "# the smallest λ whose mean cost is at most" in guide


@pytest.mark.parametrize(
    "text, message",
    [
        # No model column: the first dimension was read as the model names.
        ("a,b\n1,2\n3,4\n5,6\n", "its first column is 'a', not 'model'"),
        ("model,a,b\n,1,2\nm2,1,3\nm3,0,1\n", "blank model name in data row(s) [1]"),
        ("model,a\nm1,1\nm1,2\nm2,3\n", "more than once: ['m1']"),
    ],
)
def test_embeddings_csv_needs_a_named_model_column(tmp_path, cli, text, message):
    emb = tmp_path / "emb.csv"
    emb.write_text(text)
    for args in (["select", emb, "--k", "1"], ["neighbors", emb, "m2", "--k", "1"]):
        status, out, err = cli(*args)
        assert_one_line(status, err, 1, f"'{emb}'", message)
        assert out == ""


def test_embed_writes_the_model_column_select_reads(workdir, tmp_path, cli):
    emb = tmp_path / "emb.csv"
    status, _, err = cli("embed", workdir / "router.locus", workdir / "new.csv",
                         "-o", emb)  # fmt: skip
    assert status == 0, err
    assert emb.read_text().startswith("model,")
    status, out, err = cli("select", emb, "--k", "1", "--tsv")
    assert status == 0, err
    assert out.splitlines()[1].split("\t")[1] in ("fam2-m06", "fam2-m07")


@pytest.mark.parametrize(
    "option", [["--encodings", "x.npz"], ["--encoder", "dir"], ["--device", "cpu"]]
)
def test_neighbors_on_embeddings_csv_refuses_encoder_options(
    workdir, tmp_path, cli, option
):
    emb = _embeddings_csv(workdir, tmp_path / "emb.csv")
    status, out, err = cli("neighbors", emb, "fam0-m00", "--k", "2", *option)
    assert_one_line(status, err, 2, option[0], "embeddings csv", "--help")
    assert out == ""


def test_fit_set_the_same_name_twice_is_refused(workdir, tmp_path, cli):
    out = tmp_path / "x.locus"
    status, _, err = cli(
        "fit", workdir / "evals.csv", "-o", out, "--encodings", workdir / "enc.npz",
        "--set", "max_epochs=1", "--set", "max-epochs=2",
    )  # fmt: skip
    assert_one_line(status, err, 2, "--set max_epochs=1", "--set max_epochs=2", "once")
    assert not out.exists()


@pytest.mark.parametrize("shrinkage", ["0.5", "none"])
def test_fit_shrinkage_repeats_without_auto_is_refused(
    workdir, tmp_path, cli, shrinkage
):
    out = tmp_path / "x.locus"
    status, _, err = cli(
        "fit", workdir / "evals.csv", "-o", out, "--encodings", workdir / "enc.npz",
        "--shrinkage", shrinkage, "--shrinkage-repeats", "3",
    )  # fmt: skip
    assert_one_line(
        status, err, 2, "--shrinkage-repeats 3", f"--shrinkage {shrinkage}", "auto"
    )
    assert not out.exists()


@pytest.mark.parametrize(
    "device, reason",
    [
        ("meta", "meta tensors hold no data"),
        pytest.param(
            "mps",
            "MPS backend is not available",
            marks=pytest.mark.skipif(
                __import__("torch").backends.mps.is_available(), reason="has MPS"
            ),
        ),
    ],
)
def test_unusable_device_is_a_usage_error(workdir, cli, device, reason):
    """mps/meta failed at run time (status 1) naming the parameter device=."""
    for args in (
        ["route", workdir / "router.locus", "q001"],
        ["calibrate", workdir / "router.locus", workdir / "evals.csv",
         "--target-cost", "1"],
    ):  # fmt: skip
        status, out, err = cli(*args, "--device", device)
        assert_one_line(status, err, 2, "argument --device", f"'{device}'", reason)
        assert "device=" not in err and out == ""


def test_fit_cache_is_checked_first_and_refused_with_encodings(
    workdir, tmp_path, cli, monkeypatch
):
    from locus_sklearn import LocusRouter

    def trained(*args, **kwargs):
        raise AssertionError("fit trained")

    monkeypatch.setattr(LocusRouter, "fit", trained)
    out, afile = tmp_path / "x.locus", tmp_path / "afile"
    afile.write_text("")
    status, _, err = cli("fit", workdir / "evals.csv", "-o", out, "--cache", afile)
    assert_one_line(status, err, 3, f"--cache '{afile}'", "not a folder")
    status, _, err = cli(
        "fit", workdir / "evals.csv", "-o", out, "--cache", tmp_path / "cache",
        "--encodings", workdir / "enc.npz",
    )  # fmt: skip
    assert_one_line(status, err, 2, "--cache", "--encodings")
    assert not out.exists()


@pytest.mark.parametrize("budget", ["2.9", "0.5"])
def test_select_budget_without_costs_is_a_whole_number(workdir, tmp_path, cli, budget):
    emb = _embeddings_csv(workdir, tmp_path / "emb.csv")
    status, out, err = cli("select", emb, "--budget", budget)
    assert_one_line(status, err, 2, f"--budget {budget}", "whole number")
    assert "min(costs)" not in err and "budget=" not in err and out == ""
    status, out, err = cli("select", emb, "--budget", "2", "--tsv")
    assert status == 0, err
    assert len(out.strip().splitlines()) - 1 <= 2


def test_select_budget_decimal_costs_that_add_up_to_it_fit(workdir, tmp_path, cli):
    # 0.1 + 0.2 is over the float 0.3: the selector takes a total within
    # rounding of the budget, and the command's own "no model fits" check
    # must read the budget as the selector does.
    names = ["a", "b", "c"]
    emb = _embeddings_csv(workdir, tmp_path / "emb.csv")
    emb = pd.read_csv(emb, index_col="model").iloc[:3]
    emb.index = pd.Index(names, name="model")
    emb.to_csv(tmp_path / "emb3.csv")
    costs = tmp_path / "costs3.csv"
    pd.DataFrame({"model": names, "cost": [0.1, 0.2, 5.0]}).to_csv(costs, index=False)
    status, out, err = cli(
        "select", tmp_path / "emb3.csv", "--budget", "0.3", "--costs", costs, "--json"
    )
    assert status == 0, err
    assert sorted(s["model"] for s in json.loads(out)["selected"]) == ["a", "b"]
    pd.DataFrame({"model": names, "cost": [0.1 + 0.2, 5.0, 6.0]}).to_csv(
        costs, index=False
    )  # the cheapest cost is 0.30000000000000004, the budget 0.3
    status, out, err = cli(
        "select", tmp_path / "emb3.csv", "--budget", "0.3", "--costs", costs, "--json"
    )
    assert status == 0, err
    assert [s["model"] for s in json.loads(out)["selected"]] == ["a"]


def _select_files(tmp_path, embeddings, costs):
    """An embeddings csv (model,d0,d1) and a costs csv (model,cost)."""
    emb, cost_file = tmp_path / "emb.csv", tmp_path / "costs.csv"
    pd.DataFrame(
        embeddings.values(), index=pd.Index(embeddings, name="model"),
        columns=["d0", "d1"],
    ).to_csv(emb)  # fmt: skip
    pd.DataFrame({"model": list(costs), "cost": list(costs.values())}).to_csv(
        cost_file, index=False
    )
    return emb, cost_file


def test_select_json_total_cost_is_the_exactly_rounded_sum(tmp_path, cli):
    # The greedy selects a, c, b (0.1, 0.3, 0.2); summed in that order they
    # came out 0.6000000000000001, over --budget 0.6, where the selector's
    # total_cost_ (exactly rounded) is 0.6.
    emb, costs = _select_files(
        tmp_path,
        {"a": [0, 0], "b": [0, 1], "c": [5, 0]},
        {"a": 0.1, "b": 0.2, "c": 0.3},
    )
    status, out, err = cli(
        "select", emb, "--budget", "0.6", "--costs", costs, "--metric", "euclidean",
        "--json",
    )  # fmt: skip
    assert status == 0, err
    result = json.loads(out)
    assert [s["model"] for s in result["selected"]] == ["a", "c", "b"]
    assert (0.1 + 0.3) + 0.2 == 0.6000000000000001  # what was reported
    assert result["total_cost"] == math.fsum([0.1, 0.2, 0.3]) == 0.6


def test_select_budget_zero_selects_the_free_models(tmp_path, cli):
    # BudgetGreedySelector(budget=0) selects the free models, as documented;
    # the command refused --budget 0 as not > 0.
    emb, costs = _select_files(
        tmp_path,
        {"zeta": [10, 10], "mid": [5, 0], "alpha": [0, 0], "beta": [0, 1]},
        {"alpha": 0, "beta": 0, "mid": 3, "zeta": 4},
    )
    status, out, err = cli(
        "select", emb, "--budget", "0", "--costs", costs, "--metric", "euclidean",
        "--json",
    )  # fmt: skip
    assert status == 0, err
    result = json.loads(out)
    assert sorted(s["model"] for s in result["selected"]) == ["alpha", "beta"]
    assert result["total_cost"] == 0.0
    # Without --costs the budget counts models: 0 is still refused.
    status, out, err = cli("select", emb, "--budget", "0")
    assert_one_line(status, err, 2, "--budget 0", "whole number >= 1")
    # With costs but no free model: no model fits.
    dear = tmp_path / "dear.csv"
    dear.write_text("model,cost\nalpha,1\nbeta,1\nmid,3\nzeta,4\n")
    status, out, err = cli("select", emb, "--budget", "0", "--costs", dear)
    assert_one_line(status, err, 1, "--budget 0 is below the cheapest model's cost")
    # A negative budget is a command-line error.
    status, out, err = cli("select", emb, "--budget", "-1", "--costs", costs)
    assert_one_line(status, err, 2, "argument --budget", ">= 0")
    status, out, err = cli("select", "--help")
    assert "largest total cost, >= 0" in " ".join(out.split())


@pytest.mark.parametrize(
    "extra, status, contains, absent",
    [
        (["--threshold", "5"], 2, ["argument --threshold", "[0, 1]"], []),
        (["--false-match-rate", "1"], 2, ["argument --false-match-rate", "(0, 1)"],
         []),
        (["--threshold", "0.2", "--min-shared", "500"], 1,
         ["--min-shared 500", "between ENDPOINTS and KNOWN"],
         ["min_shared", "reference_evals"]),
        (["--min-shared", "1000"], 1, ["KNOWN", "--min-shared 1000"],
         ["min_shared", "n_evals"]),
    ],
)  # fmt: skip
def test_match_ranges_and_min_shared_in_option_terms(
    match_files, cli, extra, status, contains, absent
):
    path, _ = match_files
    code, out, err = cli("match", path / "known.csv", path / "endpoints.csv", *extra)
    assert_one_line(code, err, status, *contains)
    for text in absent:
        assert text not in err, err
    assert out == ""


@pytest.mark.parametrize(
    "args, status, contains, absent",
    [
        (["neighbors", "{w}/router.locus", "nosuch"], 1, ["MODEL 'nosuch'"],
         ["model="]),
        (["route", "{w}/router.locus", "new text"], 1, ["--encodings", "no vector"],
         ["encoder (", "mapping"]),
        (["fit", *FIT, "--encoder", "{w}/costs.csv"], 1, ["--encoder '", "is a file",
          "Give --encoder the path"], ["encoder=", "mapping {query_id"]),
        (["calibrate", "{w}/router.locus", "QUERIES", "--target-cost", "1",
          "--cv", "2"], 1, ["--cv 2", "EVALS must be scored"], ["cv=", "of evals"]),
        (["fit", "{w}", "-o", "{w}/x.locus", "--encodings", "{w}/enc.npz"], 3,
         ["The evaluations file", "is a folder"], ["path="]),
        (["serve", "PLAIN", "--config", "GATEWAY"], 1,
         ["`locus fit --costs FILE`", "cost_weight=0.5"], ["model_costs"]),
    ],
)  # fmt: skip
def test_more_errors_name_options_not_parameters(
    workdir, tmp_path, cli, args, status, contains, absent
):
    from locus_sklearn import LocusRouter

    files = {"QUERIES": tmp_path / "queries.txt", "GATEWAY": tmp_path / "g.yaml"}
    files["QUERIES"].write_text("q001\nq017\n")
    files["GATEWAY"].write_text(
        "backends:\n  fam0-m00:\n    base_url: http://127.0.0.1:9/v1\n"
        "cost_weight: 0.5\n"
    )
    router = LocusRouter.load(workdir / "router.locus")
    router.model_costs_ = None
    files["PLAIN"] = tmp_path / "plain.locus"
    router.save(files["PLAIN"])
    if args[0] == "serve":
        pytest.importorskip("uvicorn")
    code, _, err = cli(*[files.get(a, a.format(w=workdir)) for a in args])
    assert_one_line(code, err, status, *contains)
    for text in absent:
        assert text not in err, err
    assert not (workdir / "x.locus").exists()


def test_portfolio_tie_warning_names_options(workdir, tmp_path, cli):
    from locus_sklearn import LocusRouter

    router = LocusRouter.load(workdir / "router.locus")
    router.shrinkage_ = 1.0  # P(correct) is each model's mean score
    router.save(tmp_path / "flat.locus")
    status, _, err = cli("portfolio", tmp_path / "flat.locus", "q001", "q017",
                         "--k", "3", "--tsv")  # fmt: skip
    assert status == 0, err
    assert "locus portfolio: warning: Selecting model 2 of --k 3" in err, err
    assert "`locus fit --shrinkage none`" in err
    for text in ("n_select", "shrinkage=None", "shrinkage_", "take X"):
        assert text not in err, err


def test_models_option_reads_csv_quoting(workdir, tmp_path, cli):
    """A model whose name holds a comma or spaces can be chosen; "a, b"
    with spaces after the commas still names a and b."""
    from locus_sklearn import LocusRouter
    from locus_sklearn._cli._types import model_list

    assert model_list('"a,b", padded ,c') == ["a,b", " padded ", "c"]
    router = LocusRouter.load(workdir / "router.locus")
    names = ["a,b", " padded ", "c", 'say "hi"', "e", "f"]
    router.classes_ = np.array(sorted(names), dtype=object)  # classes_ is sorted
    router.save(tmp_path / "odd.locus")
    for given, expected in (
        ('"a,b", padded ', {"a,b", " padded "}),
        ('"say ""hi""",c', {'say "hi"', "c"}),
        ("c, e", {"c", "e"}),
    ):
        status, out, err = cli("route", tmp_path / "odd.locus", "q001", "--models",
                               given, "--top", "6", "--json")  # fmt: skip
        assert status == 0, err
        ranking = json.loads(out)[0]["ranking"]
        assert {r["model"] for r in ranking} == expected, given
    status, _, err = cli("route", tmp_path / "odd.locus", "q001", "--models", '"a,b')
    assert_one_line(status, err, 2, "argument --models")


def test_output_that_is_an_input_is_refused(workdir, tmp_path, cli):
    evals = tmp_path / "evals.csv"
    evals.write_bytes((workdir / "evals.csv").read_bytes())
    before = evals.read_bytes()
    status, _, err = cli("embed", workdir / "router.locus", evals, "-o", evals)
    assert_one_line(status, err, 2, f"EMBEDDINGS '{evals}' is EVALS", "overwrite")
    status, _, err = cli("fit", evals, "-o", evals, "--encodings", workdir / "enc.npz")
    assert_one_line(status, err, 2, f"ROUTER '{evals}' is EVALS", "overwrite")
    assert evals.read_bytes() == before


def test_route_cost_weight_that_overflows_is_refused(workdir, cli):
    from locus_sklearn import LocusRouter

    costs = LocusRouter.load(workdir / "router.locus").model_costs_
    huge = f"{np.finfo(np.float64).max / costs.max() * 1.5:g}"
    status, out, err = cli("route", workdir / "router.locus", "q001",
                           "--cost-weight", huge, "--top", "3")  # fmt: skip
    assert_one_line(status, err, 1, f"--cost-weight {float(huge):g}", "too large")
    assert out == ""
    # A large weight that does not overflow ranks by cost, cheapest first.
    status, out, err = cli("route", workdir / "router.locus", "q001",
                           "--cost-weight", "1e300", "--top", "3", "--json")  # fmt: skip
    assert status == 0, err
    ranked = [r["cost"] for r in json.loads(out)[0]["ranking"]]
    assert ranked == sorted(costs.tolist())[:3]


def test_costs_file_with_an_extra_field_names_the_row(workdir, tmp_path, cli):
    """A decimal comma ("m,1,5") made pandas take the model column as the
    index and read every row shifted."""
    from locus_sklearn import LocusRouter

    names = LocusRouter.load(workdir / "router.locus").classes_
    costs = tmp_path / "costs.csv"
    costs.write_text("model,cost\n" + "".join(f"{m},{i},5\n" for i, m in
                                              enumerate(names, 1)))  # fmt: skip
    emb = _embeddings_csv(workdir, tmp_path / "emb.csv")
    status, out, err = cli("select", emb, "--budget", "3", "--costs", costs)
    assert_one_line(status, err, 1, f"'{costs}'", "data row 1 has 3 fields")
    assert out == "" and "warning" not in err


# --- demo defects of issue 47 -----------------------------------------------------


@pytest.fixture
def fake_minilm(monkeypatch):
    """The demo's query encoder for a user's file, without loading MiniLM:
    seeded random vectors (the demo's steps, not its accuracies, are tested)."""
    import locus_sklearn._encoders

    real = locus_sklearn._encoders.QueryEncoder

    class Encoder(real):  # the bundled MiniLM (encoder=None) only
        def fit(self, X=None, y=None):
            return self if self.encoder is None else super().fit(X, y)

        def transform(self, X):
            if self.encoder is not None:
                return super().transform(X)
            rng = np.random.default_rng(0)
            return rng.normal(size=(len(X), 8)).astype(np.float32)

    monkeypatch.setattr(locus_sklearn._encoders, "QueryEncoder", Encoder)


def _demo_evals(path, models, n_queries=100, keep=None, seed=0):
    """A demo evaluations file: each model scored on the queries ``keep(model,
    query, is_test)`` allows (all by default), with the demo's own 80/20 split
    of seed 0 deciding which queries are test queries."""
    from locus_sklearn._cli import _demo

    rng = np.random.default_rng(seed)
    queries = [f"question {i:03d}" for i in range(n_queries)]
    frame = pd.DataFrame({"query": queries, "model": "x", "score": 0.0})
    _, test = _demo._split(frame, np.random.RandomState(0))
    test = set(test["query"])
    rows = [
        (m, q, float(rng.random() < 0.5))
        for m in models
        for q in queries
        if keep is None or keep(m, q, q in test)
    ]
    pd.DataFrame(rows, columns=["model", "query", "score"]).to_csv(path, index=False)
    return path


def test_demo_interrupted_in_training_exits_130(tmp_path, cli, monkeypatch,
                                                fake_minilm, python_sigint):  # fmt: skip
    """skorch ended the demo's fit at Ctrl-C: the demo went on with a partly
    trained router, printed everything and exited 0."""
    import signal

    from locus_sklearn import LocusRouter

    monkeypatch.setattr(LocusRouter, "fit", _interrupted_fit)
    evals = _demo_evals(tmp_path / "e.csv", ["a", "b", "c"])
    status, out, err = cli("demo", "--quick", "--evals", evals,
                           "--output", tmp_path / "out")  # fmt: skip
    assert status == 130 and err.splitlines()[-1] == "locus demo: interrupted", err
    assert "[1/4]" in out and "[2/4]" not in out
    assert not (tmp_path / "out").exists()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_demo_needs_two_trained_models_with_test_scores_before_training(
    tmp_path, cli, monkeypatch, fake_minilm
):
    """A model with only test rows left one model to train on (the demo
    trained, reported, then failed naming "embeddings"); models with no test
    rows failed after training with "evals is empty"."""
    from locus_sklearn import LocusRouter

    def trained(*args, **kwargs):
        raise AssertionError("the demo trained")

    monkeypatch.setattr(LocusRouter, "fit", trained)
    one = _demo_evals(tmp_path / "one.csv", ["a", "b"],
                      keep=lambda m, q, is_test: m == "a" or is_test)  # fmt: skip
    status, out, err = cli("demo", "--quick", "--evals", one)
    assert_one_line(status, err, 1, f"--evals '{one}'", "only 1 (a)",
                    "b (only test queries)", "at least 2")  # fmt: skip
    assert out == ""
    no_test = _demo_evals(tmp_path / "no_test.csv", ["a", "b", "c"],
                          keep=lambda m, q, is_test: (m == "c") == is_test)  # fmt: skip
    status, out, err = cli("demo", "--quick", "--evals", no_test)
    assert_one_line(status, err, 1, f"--evals '{no_test}'", "(a, b) has a score",
                    "20 test queries", "c (only test queries)")  # fmt: skip
    assert out == ""


def test_demo_says_which_models_it_leaves_out(tmp_path, cli, fake_minilm):
    # A model with only test rows was dropped silently.
    pytest.importorskip("matplotlib")
    evals = _demo_evals(tmp_path / "e.csv", ["a", "b", "c", "d"],
                        keep=lambda m, q, is_test: m != "d" or is_test)  # fmt: skip
    status, out, err = cli("demo", "--quick", "--evals", evals,
                           "--output", tmp_path / "out")  # fmt: skip
    assert status == 0, err
    assert "Left out, too few training scores to train on: d (only test queries)" in out
    assert "on 3 models" in out


def test_threads_is_capped_as_a_usage_error(cli):
    # torch failed on it: "Overflow when unpacking long long", status 1.
    for args in (("--threads", "99999999999999999999", "demo", "--quick"),
                 ("select", "x.csv", "--k", "2", "--threads", "2147483648")):  # fmt: skip
        status, _, err = cli(*args)
        assert_one_line(status, err, 2, "--threads", "from 1 to 1024")
    from locus_sklearn._cli._parser import build_parser

    assert build_parser().parse_args(["--threads", "1024", "demo"]).threads == 1024


def test_demo_single_best_names_the_model_it_routes_to(tmp_path, cli, fake_minilm):
    """The best model on train had no test scores: the row named it though
    every query went to another, and "Mean of empty slice" was warned."""
    pytest.importorskip("matplotlib")
    evals = _demo_evals(tmp_path / "e.csv", ["a", "b", "c"],
                        keep=lambda m, q, is_test: m != "a" or not is_test)  # fmt: skip
    frame = pd.read_csv(evals)
    frame.loc[frame["model"] == "a", "score"] = 1.0  # the best on train
    frame.to_csv(evals, index=False)
    means = frame[frame["model"] != "a"].groupby("model")["score"].mean()
    status, _, err = cli("demo", "--quick", "--json", "--evals", evals,
                         "--output", tmp_path / "out")  # fmt: skip
    assert status == 0, err
    row = next(line for line in err.splitlines() if "single best model (" in line)
    assert f"({means.idxmax()}, chosen on train among the models with test" in row
    assert "warning" not in err
    # The portfolio of a alone (the best on the training queries) has no
    # accuracy: said once, in the demo's terms.
    assert "No test query has a score of the models of the portfolios of " \
        "size 1 (expected)" in err  # fmt: skip


def test_demo_counts_repeated_rows_once(tmp_path, cli, fake_minilm):
    """Repeated (model, query) rows were counted as more queries and
    evaluations ("90 test queries" of 60; onboarding "from 128" of 105)."""
    pytest.importorskip("matplotlib")
    evals = _demo_evals(tmp_path / "e.csv", [f"m{i}" for i in range(6)],
                        n_queries=200)  # fmt: skip
    frame = pd.read_csv(evals)
    pd.concat([frame, frame]).to_csv(evals, index=False)
    status, out, err = cli("demo", "--quick", "--evals", evals,
                           "--output", tmp_path / "out")  # fmt: skip
    assert status == 0, err
    assert "6 models, 200 queries, 1,200 evaluations (1,200 repeated (model, " \
        "query) rows averaged)" in out  # fmt: skip
    assert "Split (seed 0): 160 training / 40 test queries." in out
    assert "on 3 models (480 evaluations" in out
    lines = out[out.index("[3/4]") :].splitlines()[3:6]
    assert [line.split()[1] for line in lines] == ["40"] * 3, lines
    assert "from all ~160" in out and "over the 1" not in err


@pytest.mark.parametrize(
    "args",
    [
        ("demo", "--output", ""),
        ("demo", "--evals", " "),
        ("fit", "e.csv", "-o", ""),
        ("onboard", "r.locus", "e.csv", "-o", ""),
        ("route", "r.locus", "q", "--encodings", ""),
        ("select", "emb.csv", "--k", "2", "--costs", ""),
        ("calibrate", "r.locus", "e.csv", "--target-cost", "1", "-o", ""),
        ("calibrate", "r.locus", "e.csv", "--target-cost", "1", "-o", " "),
        ("calibrate", "r.locus", "e.csv", "--target-cost", "1", "--encodings", ""),
        ("litellm-config", "r.locus", "--config", "g.yaml", "-o", ""),
        ("litellm-config", "r.locus", "--config", ""),
        ("serve", "r.locus", "--config", " "),
        ("serve", "r.locus", "--encoder", ""),
    ],
)
def test_empty_path_options_are_usage_errors(tmp_path, cli, monkeypatch, args):
    # demo --output '' wrote the figures into the current folder; onboard
    # -o '' replaced the router in place; --costs '' meant no costs;
    # calibrate -o '' wrote nothing and -o ' ' a file named ' ' (both with
    # status 0), litellm-config -o '' printed to stdout, --config '' was
    # read as the current folder (status 3).
    monkeypatch.chdir(tmp_path)
    status, _, err = cli(*args)
    option = args[[a.strip() for a in args].index("") - 1]  # the blank's option
    assert_one_line(status, err, 2, f"argument {option}", "expected a file or folder")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("option", ["--all-models", "--open-weights"])
def test_demo_refuses_model_choice_with_evals(tmp_path, cli, option):
    # Both chose among the built-in models, and were ignored with --evals.
    status, _, err = cli("demo", "--quick", "--evals", tmp_path / "e.csv", option)
    assert_one_line(status, err, 2, option, "--evals", "only one")
    from locus_sklearn._cli._parser import build_parser

    args = build_parser().parse_args(["demo", option])
    assert args.open_weights is (option == "--open-weights")


def test_demo_help_and_training_line_say_what_it_does(cli, monkeypatch):
    """--threads said "torch's own choice" (the demo uses 1 thread on CPU),
    --epochs did not say --quick trains 2 without early stopping, and the
    [1/4] line never said that early stopping (on valid_loss) was on."""
    from types import SimpleNamespace

    from locus_sklearn import LocusRouter
    from locus_sklearn._cli import _demo

    status, out, _ = cli("demo", "--help")
    text = " ".join(out.split())
    assert status == 0 and "(default: 1 on a machine without CUDA" in text
    assert "with --quick 2, without" in text

    class Stop(Exception):
        pass

    def fit(self, evals, y=None):
        raise Stop

    monkeypatch.setattr(LocusRouter, "fit", fit)
    said = []
    demo = SimpleNamespace(pool=["a", "b"], pool_train=pd.DataFrame(index=[0]),
                           encoder=None, seed=0,
                           say=lambda *lines: said.extend(lines))  # fmt: skip
    for settings, phrase in [
        (_demo.DEMO_SETTINGS, "256 episodes each, early stopping on valid_loss, "
                              "patience 7)"),
        (_demo.QUICK_SETTINGS, "32 episodes each)"),
    ]:  # fmt: skip
        said.clear()
        with pytest.raises(Stop):
            _demo._train(demo, dict(settings))
        assert said[0].endswith(phrase), said


def test_interrupt_while_starting_is_one_line(capsys, monkeypatch):
    """A Ctrl-C while the command's modules load printed a traceback."""
    import runpy

    import locus_sklearn._cli
    from locus_sklearn._cli import main

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(locus_sklearn._cli, "build_parser", interrupted)
    try:  # an escaping KeyboardInterrupt would end the test session
        status = main(["demo", "--quick"])
    except KeyboardInterrupt:
        pytest.fail("main() let KeyboardInterrupt through")
    assert status == 130
    assert capsys.readouterr().err == "locus: interrupted\n"

    class Finder:  # the import of the command line, interrupted
        def find_spec(self, name, path=None, target=None):
            if name == "locus_sklearn._cli":
                raise KeyboardInterrupt

    monkeypatch.delitem(sys.modules, "locus_sklearn._cli")
    monkeypatch.setattr(sys, "meta_path", [Finder(), *sys.meta_path])
    try:
        runpy.run_module("locus_sklearn.__main__", run_name="__main__")
    except KeyboardInterrupt:
        pytest.fail("python -m locus_sklearn let KeyboardInterrupt through")
    except SystemExit as exc:
        assert exc.code == 130
    else:
        pytest.fail("python -m locus_sklearn ran")
    assert capsys.readouterr().err == "locus: interrupted\n"

    # The `locus` script's entry point: the same handler, called as a function.
    from locus_sklearn.__main__ import main as entry_point

    assert entry_point(["demo", "--quick"]) == 130
    assert capsys.readouterr().err == "locus: interrupted\n"


def test_the_script_reaches_its_handler_before_the_heavy_imports():
    """The `locus` script imported the package, and with it torch and
    scikit-learn (seconds), before any handler: a Ctrl-C then printed a
    traceback. The package loads its public names on first use, so the entry
    point's module loads neither, and `--help` needs no torch."""
    from importlib.metadata import entry_points

    (script,) = entry_points(group="console_scripts", name="locus")
    assert script.value == "locus_sklearn.__main__:main"
    probe = (
        "import sys\n"
        "import locus_sklearn.__main__\n"
        "heavy = sorted({'torch', 'sklearn', 'pandas'} & set(sys.modules))\n"
        "assert not heavy, heavy\n"
        "import contextlib, io\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try:\n"
        "        locus_sklearn.__main__.main(['--help'])\n"
        "    except SystemExit as exc:\n"
        "        assert exc.code == 0, exc.code\n"
        "assert 'torch' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", probe], check=True, timeout=120)


@pytest.mark.parametrize(
    "args, dest",
    [
        (("match", "a", "b", "--threshold", "-0"), "threshold"),
        (("route", "r", "q", "--cost-weight", "-0.0"), "cost_weight"),
        (("fit", "e", "-o", "r", "--shrinkage", "-0"), "shrinkage"),
    ],
)
def test_negative_zero_is_zero(args, dest):
    # Kept as -0.0, and printed so ("threshold": -0.0).
    import math

    from locus_sklearn._cli._parser import build_parser

    value = getattr(build_parser().parse_args(list(args)), dest)
    assert value == 0 and math.copysign(1, value) == 1


def test_demo_knn_label_and_skipped_onboarding(tmp_path, cli, fake_minilm):
    """Under 50 training queries the label said k=50; with onboarding
    skipped the JSON summary had no onboarding_accuracy key."""
    pytest.importorskip("matplotlib")
    evals = _demo_evals(tmp_path / "e.csv", ["a", "b", "c"], n_queries=40)
    status, out, err = cli("demo", "--quick", "--json", "--evals", evals,
                           "--output", tmp_path / "out")  # fmt: skip
    assert status == 0, err
    assert "KNNRouter (k=32), a peer router" in err and "Onboarding skipped" in err
    assert json.loads(out)["onboarding_accuracy"] is None


# ------------------------------------------------- file inputs and outputs


@pytest.mark.parametrize("suffix", ["/", "/.", "/.."])
def test_output_naming_a_folder_is_refused_before_work(
    workdir, tmp_path, cli, tiny_cli_args, suffix
):
    """``-o router.locus/`` passed the check (Path() drops the separator and
    a last "."), so fit trained, then its save refused the name."""
    target = f"{tmp_path / 'new' / 'router.locus'}{suffix}"
    (tmp_path / "new").mkdir()
    status, _, err = cli("fit", workdir / "evals.csv", "-o", target, *tiny_cli_args)
    assert_one_line(status, err, 3, f"cannot write ROUTER {target!r}", "names a folder")
    assert "train_loss" not in err  # no training happened
    assert list((tmp_path / "new").iterdir()) == []


def _bad_evaluation_files(folder, good):
    """Evaluation files that cannot be parsed, each with what the error says."""
    text = good.to_csv(index=False).encode()
    big = text * (300_000 // len(text) + 1)  # more than pandas' first read
    compressed = bytearray(gzip.compress(big))
    cut_late = bytes(compressed[: len(compressed) // 2])
    compressed[30:40] = b"\xff" * 10  # corrupt deflate data: a zlib.error
    files = {
        "not-gzip.csv.gz": (b"not gzip at all", "could not be read as gzip"),
        "cut.csv.gz": (gzip.compress(text)[:15], "could not be read as gzip"),
        "cut-late.csv.gz": (cut_late, "could not be read as gzip"),
        "corrupt.csv.gz": (bytes(compressed), "could not be read as gzip"),
        "utf16.csv": (text.decode().encode("utf-16"), "is not UTF-8 text"),
        "quote.csv": (b'"' + text, "could not be read as csv"),
    }
    for name, (data, _) in files.items():
        (folder / name).write_bytes(data)
    return {folder / name: message for name, (_, message) in files.items()}


def test_malformed_evaluation_files_name_the_file(workdir, tmp_path, cli):
    """Status 1 (invalid data) naming the file, as documented: a bad gzip
    file exited 3 (BadGzipFile is an OSError), and the others printed
    pandas', gzip's or the codec's bare message."""
    good = pd.read_csv(workdir / "new.csv")
    for path, message in _bad_evaluation_files(tmp_path, good).items():
        status, out, err = cli("match", path, workdir / "new.csv")
        assert_one_line(
            status, err, 1, f"The evaluations file {str(path)!r}", message
        )  # fmt: skip
        assert out == "" and "--debug" not in err


def test_gzip_costs_and_embeddings_files(tmp_path, cli):
    """A .csv.gz costs or embeddings file is read as gzip (as evaluation
    files are): the check for extra fields read it as UTF-8 text, a bare
    codec error; a folder or a corrupt file is named with its kind."""
    emb = tmp_path / "emb.csv"
    emb.write_text("model,0,1\na,0,0\nb,0,1\nc,5,5\nd,5,6\n")
    costs = tmp_path / "costs.csv"
    costs.write_text("model,cost\na,1\nb,2\nc,1\nd,3\n")
    for path in (emb, costs):
        path.with_suffix(".csv.gz").write_bytes(gzip.compress(path.read_bytes()))
    budget = ["--budget", "2", "--costs"]
    plain = cli("select", emb, *budget, costs, "--json")
    assert plain[0] == 0, plain[2]
    assert cli("select", emb, *budget, f"{costs}.gz", "--json") == plain
    assert cli("select", f"{emb}.gz", *budget, costs, "--json") == plain
    status, out, err = cli("neighbors", f"{emb}.gz", "a", "--k", "1", "--json")
    assert status == 0, err
    assert json.loads(out) == [{"rank": 1, "model": "b", "distance": 1.0}]

    (tmp_path / "folder").mkdir()
    folder = tmp_path / "folder"
    status, _, err = cli("select", emb, *budget, folder)
    assert_one_line(status, err, 3, f"The costs file {str(folder)!r} is a folder")
    bad = tmp_path / "bad.csv.gz"
    bad.write_bytes(b"not gzip")
    status, _, err = cli("select", emb, *budget, bad)
    assert_one_line(status, err, 1, f"costs file {str(bad)!r} as gzip")
    status, _, err = cli("select", bad, "--k", "2")
    assert_one_line(status, err, 1, f"embeddings file {str(bad)!r} as gzip")
    latin1 = tmp_path / "latin1.csv"
    latin1.write_bytes("model,cost\nmod\xe8le,1\n".encode("latin-1"))
    status, _, err = cli("select", emb, *budget, latin1)
    assert_one_line(status, err, 1, f"costs file {str(latin1)!r}", "not UTF-8")


def test_broken_pipe_at_the_final_flush_exits_141(tmp_path, monkeypatch):
    """Output still buffered when the command returns met the closed pipe
    at exit, outside the handler: status 0 here, a traceback and status 120
    from the interpreter's own flush at exit."""
    from locus_sklearn._cli import main

    class ClosedPipe:  # no fileno(): the runner must not touch this process's fd 1
        def write(self, text):
            return len(text)

        def flush(self):
            raise BrokenPipeError(errno.EPIPE, "Broken pipe")

    emb = tmp_path / "emb.csv"
    emb.write_text("model,0\na,0\nb,1\nc,3\n")
    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    assert main(["select", str(emb), "--k", "2", "--tsv"]) == 141


def test_a_router_saved_without_query_text_in_the_commands(workdir, tmp_path, cli):
    """litellm-config needs only the pool and its embeddings: it loaded the
    query encoder too, and refused a file saved without query text; route
    told the user to call "load(path, --encoder ...)", which no command has."""
    yaml = pytest.importorskip("yaml")
    from locus_sklearn import LocusRouter

    router = LocusRouter.load(workdir / "router.locus")
    path = tmp_path / "hashed.locus"
    router.save(path, include_query_text=False)
    gateway = tmp_path / "gw.yaml"
    gateway.write_text(
        yaml.safe_dump({"backends": {"fam0-m00": {"base_url": "http://x"}}})
    )
    status, out, err = cli("litellm-config", path, "--config", gateway)
    assert status == 0, err
    assert yaml.safe_load(out)["model_list"][0]["model_name"] == "fam0-m00"
    status, out, err = cli("route", path, "q001")
    assert_one_line(status, err, 1, "give them again with --encodings FILE.npz")
    assert "load(" not in err and "encoder=" not in err


# ---------------------------------------------- warnings and errors in options
# Python names the library's warnings and errors use, outside the option form
# that sets them ("--set agreement_weight=0.3" is an option, a bare
# "agreement_weight=0.3" is not).
_PYTHON_NAMES = re.compile(
    r"(?<![\w-])(?<!--set )(?<!--set ')"
    r"(random_state|agreement_weight=|refine_steps=|kernel_readout=|"
    r"validation_fraction=|max_epochs=|enc_size|n_heads=|embedding_dim=|"
    r"shrinkage=|shrinkage_|remove_models|predict_proba|transform\(\)|"
    r"LocusEmbedder\(|LocusRouter\.|evals read from|mapping encoder|"
    r"encoder\[|encoder gives)"
)


def _four_query_evals(path):
    """4 models scored on the same 4 queries: fewer evaluations than TINY's
    enc_size[0] (16), too few queries to hold any out for validation (0.1 *
    4 rounds to 0), and a leader whose mean is of 4: 'm_a', right on all 4,
    so that routing every query to it is the best accuracy there is, and
    --shrinkage auto chooses 1 (ties go to the larger value)."""
    scores = {
        "m_a": [1, 1, 1, 1],
        "m_b": [1, 0, 0, 0],
        "m_c": [0, 1, 0, 0],
        "m_d": [0, 0, 1, 1],
    }
    rows = [(m, f"q{i:03d}", s) for m, row in scores.items() for i, s in enumerate(row)]
    pd.DataFrame(rows, columns=["model", "query", "score"]).to_csv(path, index=False)
    return path


def test_fit_warnings_name_options(workdir, tmp_path, cli, tiny_cli_args, monkeypatch):
    """fit's warnings give advice in fit's options (--seed, --set, --epochs,
    --shrinkage), not as Python parameters, and never advise what no command
    does (remove_models, routing "with shrinkage=None"). The warnings are the
    library's own, raised by real fits; a pair of the translation that stops
    matching their text leaves a Python name or drops an option below."""
    import locus_sklearn._embedder as embedder_module

    # Every fit counts as collapsed: the library's real warning, both forms.
    monkeypatch.setattr(embedder_module, "COLLAPSE_SPREAD", float("inf"))
    evals = _four_query_evals(tmp_path / "evals.csv")
    fit = ["fit", evals, "--encodings", workdir / "enc.npz", "-q", *tiny_cli_args]

    status, _, auto = cli(*fit, "-o", tmp_path / "auto.locus")
    assert status == 0, auto
    # --shrinkage auto chose 1 (the thin leader warns at any value above 0).
    assert "shrinkage 1) to" in auto, auto
    assert auto.count("locus fit: warning: ") == 4, auto
    for text in (
        "locus fit: warning: --set validation_fraction=0.1 holds out no evaluations",
        "for --epochs 2 epochs. Give --set validation_fraction=0 to train without",
        "through the kernel readout. Another --seed may train apart",
        "--set agreement_weight=0.3 trained apart most",
        "and --set agreement_weight=0.1 --set refine_steps=10, the configuration",
        "4 model(s) have fewer than 16 evaluations (the low end of --set "
        "'enc_size=(16, 128)': the smallest set training draws",
        "over only 4 evaluation(s), fewer than 16, the low end of --set "
        "'enc_size=(16, 128)'. With shrinkage 1 (chosen by --shrinkage auto), "
        "routing sends it every query",
        "spread over the pool's tasks, or refit with `locus fit --shrinkage none` "
        "(the plain router).",
    ):
        assert text in auto, auto

    status, _, blend = cli(*fit, "-o", tmp_path / "blend.locus", "--shrinkage",
                           "0.5", "--set", "kernel_readout=False")  # fmt: skip
    assert status == 0, blend
    for text in (
        "the embedding-only predictor (--set kernel_readout=False) gives every",
        "With shrinkage 0.5, the router blends that mean into its P(correct)",
        "or refit with `locus fit --shrinkage none` (the plain router).",
    ):
        assert text in blend, blend
    assert _PYTHON_NAMES.findall(auto + blend) == [], auto + blend


def test_onboard_embed_and_calibrate_warnings_name_options(workdir, tmp_path, cli):
    """The warnings of onboard, embed and calibrate (the library's, raised on
    a router at shrinkage 1) point to `locus fit --shrinkage ...`, which
    neither route nor any other command replaces."""
    from locus_sklearn import LocusRouter

    router = LocusRouter.load(workdir / "router.locus")
    router.shrinkage_ = 1.0  # P(correct) is each model's mean score
    flat = tmp_path / "flat.locus"
    router.save(flat)
    # A new model right on 10 queries: the pool's best mean, from fewer
    # evaluations than the router's enc_size[0] (16).
    star = tmp_path / "star.csv"
    pd.DataFrame(
        {"model": "star", "query": [f"q{i:03d}" for i in range(10)], "score": 1.0}
    ).to_csv(star, index=False)
    costs = tmp_path / "star_cost.csv"
    pd.DataFrame({"model": ["star"], "cost": [1.0]}).to_csv(costs, index=False)

    status, _, onboard = cli(
        "onboard", flat, star, "--costs", costs, "-o", tmp_path / "out.locus"
    )
    assert status == 0, onboard
    for text in (
        "locus onboard: warning: 1 model(s) have fewer than 16 evaluations (the "
        "smallest set training draws",
        "'star' now has the pool's highest mean score",
        "With shrinkage 1, routing sends it every query",
        "or refit with `locus fit --shrinkage none` (the plain router) to judge "
        "it by its embedding.",
    ):
        assert text in onboard, onboard

    status, _, embed = cli("embed", flat, star, "-o", tmp_path / "emb.csv")
    assert status == 0, embed
    assert "locus embed: warning: 1 model(s) have fewer than 16 evaluations (the " \
        "smallest set" in embed, embed  # fmt: skip

    queries = tmp_path / "queries.txt"
    queries.write_text("q001\nq017\nq033\n")
    target = float(np.median(router.model_costs_))
    status, _, calibrate = cli("calibrate", flat, queries, "--target-cost", target)
    assert status == 0, calibrate
    for text in (
        "locus calibrate: warning: The router's shrinkage is 1: every query's",
        "For cost-aware routing, refit with `locus fit --shrinkage auto` (with "
        "costs it stays below 1), --shrinkage none or a --shrinkage below 1.",
    ):
        assert text in calibrate, calibrate
    found = _PYTHON_NAMES.findall(onboard + embed + calibrate)
    assert found == [], onboard + embed + calibrate


def _error_case(case, workdir, tmp_path):
    """(arguments, texts the error holds) of test_fit_and_file_errors_name_options."""
    from locus_sklearn import LocusRouter

    evals = pd.read_csv(workdir / "evals.csv")
    enc = ["--encodings", workdir / "enc.npz"]
    out = ["-o", tmp_path / "x.locus", "-q", "--epochs", "1"]
    path = tmp_path / f"{case}.csv"
    if case == "lonely":  # every model with one evaluation (one alone is added)
        evals.groupby("model").head(1).to_csv(path, index=False)
        return ["fit", path, *enc, *out], [
            "models with 1 are added to that pool as `locus onboard` adds them"
        ]
    if case in ("no_columns", "no_rows"):
        queries = np.load(workdir / "enc.npz")["queries"]
        shape = (len(queries), 0) if case == "no_columns" else (0, 8)
        path = tmp_path / f"{case}.npz"
        np.savez(path, queries=queries[: shape[0]], vectors=np.zeros(shape))
        return ["fit", workdir / "evals.csv", "--encodings", path, *out], [
            f"'{path}': 'vectors' has shape {shape}; it needs at least one query "
            "and one number per encoding"
        ]
    if case == "score":
        evals.assign(score=evals["score"].where(evals.index > 0, 2.0)).to_csv(
            path, index=False
        )
        return ["fit", path, *enc, *out], [
            f"The evaluations file '{path}', column 'score' has 1 value(s) outside "
            "[0, 1] (e.g. [2.0])"
        ]
    if case == "blank_model":
        evals.assign(model=evals["model"].where(evals.index > 0, "")).to_csv(
            path, index=False
        )
        return ["fit", path, *enc, *out], [
            f"The evaluations file '{path}', column 'model' has 1 empty"
        ]
    if case == "n_heads":
        return [
            "fit", workdir / "evals.csv", *enc, *out, "--embedding-dim", "16",
            "--set", "n_heads=3",
        ], ["--set n_heads=3 must divide --embedding-dim 16."]  # fmt: skip
    assert case == "dimension"
    # A file that saved no query text takes --encodings of its dimension (8).
    hashed = tmp_path / "hashed.locus"
    LocusRouter.load(workdir / "router.locus").save(hashed, include_query_text=False)
    vectors = tmp_path / "enc4.npz"
    np.savez(vectors, queries=np.array(["q001"]), vectors=np.ones((1, 4)))
    return ["route", hashed, "--encodings", vectors, "q001"], [
        "The query encoder (--encoder, or the vectors of --encodings) gives "
        "4-dimensional query encodings",
        "fitted on 8-dimensional ones; give the one it was fitted with: "
        "--encodings vectors of that dimension",
    ]


@pytest.mark.parametrize(
    "case",
    ["lonely", "no_columns", "no_rows", "score", "blank_model", "n_heads", "dimension"],
)
def test_fit_and_file_errors_name_options(workdir, tmp_path, cli, case):
    """Errors that named Python API (transform(), a mapping encoder, "evals
    read from ...", n_heads= and embedding_dim=, "encoder gives") name the
    commands, options and files instead."""
    args, contains = _error_case(case, workdir, tmp_path)
    status, _, err = cli(*args)
    assert_one_line(status, err, 1, *contains)
    assert _PYTHON_NAMES.findall(err) == [], err
    assert not (tmp_path / "x.locus").exists()


@pytest.mark.parametrize("command, extra", [("route", ["--top", "2"]),
                                            ("portfolio", ["--k", "2"])])  # fmt: skip
def test_queries_may_follow_options(workdir, cli, command, extra):
    """`locus route R --top 2 q1` routes q1, as `locus route R q1 --top 2`
    does (argparse left a QUERY after an option over as "unrecognized")."""
    router = workdir / "router.locus"
    enc = ["--encodings", workdir / "enc.npz"]
    status, expected, err = cli(command, router, "q001", "q017", *extra, "--json")
    assert status == 0, err
    for args in (
        [*extra, "q001", "q017", "--json"],
        ["q001", *extra, "q017", "--json"],
        [*extra, *enc, "--json", "q001", "q017"],
        [*extra, "--json", "--", "q001", "q017"],
    ):
        status, out, err = cli(command, router, *args)
        assert status == 0, (args, err)
        assert out == expected, args
    # '-' (stdin) after the options reads stdin, as before them.
    status, out, err = cli(command, router, *extra, "--json", "-",
                           stdin="q001\nq017\n")  # fmt: skip
    assert status == 0 and out == expected, err
    # An unknown option among the queries is still refused, and alone named.
    status, _, err = cli(command, router, *extra, "q001", "--bogus", "q017")
    assert_one_line(
        status, err, 2, f"locus {command}: error: unrecognized arguments: --bogus ("
    )


HUB_NAME = "sentence-transformers/all-MiniLM-L6-v2"


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    """A local Hugging Face cache (HF_HUB_CACHE) holding HUB_NAME as a
    download leaves it, built as tests/test_encoders.py builds one: refs/main
    naming a commit, and that commit's snapshot folder, whose files link to
    the bundled model's. Returns the snapshot folder; no network is reached."""
    import socket

    import huggingface_hub.constants

    from locus_sklearn._encoders import _default_model_path

    cache = tmp_path / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    commit = "a" * 40
    repo = cache / "models--sentence-transformers--all-MiniLM-L6-v2"
    snapshot = repo / "snapshots" / commit
    source = _default_model_path()
    for file in source.rglob("*"):
        if file.is_file():
            target = snapshot / file.relative_to(source)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.symlink_to(file)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)

    def refuse(*args, **kwargs):
        raise AssertionError(f"network access attempted: {args!r}")

    for name in ("create_connection", "getaddrinfo"):
        monkeypatch.setattr(socket, name, refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    return snapshot


def test_encoder_hub_name_in_the_local_cache(workdir, tmp_path, cli, hub_cache):
    """--encoder refused a hub name as a missing folder ("never resolved"),
    though the estimators use one already in the local cache, offline."""
    from locus_sklearn import LocusRouter

    out = tmp_path / "hub.locus"
    status, _, err = cli(
        "fit", workdir / "evals.csv", "-o", out, "--encoder", HUB_NAME, "-q",
        "--epochs", "1", "--embedding-dim", "4", "--seed", "0",
    )  # fmt: skip
    assert status == 0, err
    encoder = LocusRouter.load(out).embedder_.encoder_
    assert encoder.model_path_ == str(hub_cache.resolve())


def test_encoder_hub_name_not_cached_or_incomplete(workdir, cli, hub_cache):
    router = workdir / "router.locus"
    # Not in the cache (another model): a missing file, as a missing folder.
    other = "sentence-transformers/all-mpnet-base-v2"
    status, _, err = cli("route", router, "q001", "--encoder", other)
    assert_one_line(
        status, err, 3,
        f"No such --encoder folder: '{other}', nor a model of that name in the "
        "local Hugging Face cache.",
    )  # fmt: skip
    assert "is not resolved" not in err
    # In the cache, but its snapshot lacks the model's files: a bad value,
    # said as such (it was "not in the local Hugging Face cache").
    for file in ("modules.json", "config.json"):
        (hub_cache / file).unlink()
    status, _, err = cli("route", router, "q001", "--encoder", HUB_NAME)
    assert_one_line(
        status, err, 1,
        f"--encoder '{HUB_NAME}' was found in the local Hugging Face cache but "
        f"is incomplete: its snapshot folder '{hub_cache}' has neither "
        "modules.json nor config.json.",
    )  # fmt: skip
    assert "encoder=" not in err


def test_exit_statuses_of_a_missing_encoder_and_option_conflicts(
    workdir, tmp_path, cli
):
    """A missing --encoder folder is a missing file (3, as a missing
    --encodings); --method with --budget and an unknown --set name are bad
    command lines (2, pointing to the help), as the other option conflicts."""
    router = workdir / "router.locus"
    missing = tmp_path / "missing_dir"
    evals = tmp_path / "calib.txt"
    evals.write_text("q001\n")
    gateway = tmp_path / "gateway.yaml"
    gateway.write_text("models: {}\n")
    # The deployment commands read --encoder as every other command does
    # (they exited 1, the router's own refusal, before).
    for args in (["route", "--encoder", missing, router, "q001"],
                 ["neighbors", router, "fam0-m00", "--encoder", missing],
                 ["serve", router, "--encoder", missing],
                 ["calibrate", router, evals, "--target-cost", "1",
                  "--encoder", missing],
                 ["litellm-config", router, "--config", gateway,
                  "--encoder", missing]):  # fmt: skip
        status, _, err = cli(*args)
        assert_one_line(status, err, 3, f"No such --encoder folder: '{missing}'")
    emb = _embeddings_csv(workdir, tmp_path / "emb.csv")
    status, _, err = cli("select", emb, "--budget", "3", "--method", "kcenter")
    assert_one_line(status, err, 2, "--method kcenter applies to --k",
                    "(see `locus select --help`)")  # fmt: skip
    for name in ("bogus", "encoder"):
        status, _, err = cli(
            "fit", *[a.format(w=workdir) for a in FIT], "--set", f"{name}=1"
        )
        assert_one_line(status, err, 2, f"--set {name}=...",
                        "(see `locus fit --help`)")  # fmt: skip
    assert not (workdir / "x.locus").exists()


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes here")
def test_a_named_pipe_as_the_router_is_refused_without_blocking(tmp_path):
    # The command opened the pipe to tell a router from an embedder, and
    # waited for a writer that never came (in a call that holds the GIL: run
    # in a process of its own, a regression times out instead of hanging).
    fifo = tmp_path / "router.fifo"
    os.mkfifo(fifo)
    result = locus("route", fifo, "q001", timeout=120)
    assert_one_line_error(result, 3, ["is a named pipe (FIFO), not a regular file"])


# ------------------------------------------------ file input and output (cliio)
def _reads_any_file(folder):
    """Whether this process reads a file whatever its mode (root, with its
    capability to override file permissions): permission cases are then
    untestable."""
    probe = folder / "mode0"
    probe.write_text("x")
    probe.chmod(0)
    try:
        probe.read_text()
    except PermissionError:
        return False
    finally:
        probe.chmod(0o600)
    return True


def _cliio_commands(workdir, tmp_path, target):
    """Each command that writes a file, writing ``target``."""
    gateway = tmp_path / "gateway.yaml"
    gateway.write_text("backends:\n  fam0-m00:\n    base_url: http://127.0.0.1:9/v1\n")
    router, evals = workdir / "router.locus", workdir / "evals.csv"
    enc = ["--encodings", workdir / "enc.npz"]
    return {
        "fit": ["fit", evals, "-o", target, *enc, "--epochs", "1"],
        "embed": ["embed", router, workdir / "new.csv", "-o", target],
        "onboard": ["onboard", router, workdir / "new.csv", "-o", target,
                    "--costs", workdir / "costs.csv"],
        "calibrate": ["calibrate", router, evals, "--target-cost", "1e9",
                      "-o", target],
        "litellm-config": ["litellm-config", router, "--config", gateway,
                           "-o", target],
    }  # fmt: skip


def _no_work(monkeypatch):
    """Record the work each command does once its files are checked."""
    from locus_sklearn import LocusRouter, inspection
    from locus_sklearn.serve import _litellm

    done = []

    def record(name):
        def work(*args, **kwargs):
            done.append(name)
            raise AssertionError(f"{name} ran before the target was checked")

        return work

    monkeypatch.setattr(LocusRouter, "fit", record("fit"))
    monkeypatch.setattr(LocusRouter, "add_models", record("add_models"))
    monkeypatch.setattr(LocusRouter, "embed", record("embed"))
    monkeypatch.setattr(inspection, "calibrate_cost_weight", record("calibrate"))
    monkeypatch.setattr(_litellm, "litellm_config", record("litellm_config"))
    return done


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes here")
@pytest.mark.parametrize(
    "command", ["fit", "embed", "onboard", "calibrate", "litellm-config"]
)
def test_a_target_that_is_not_a_regular_file_is_refused_before_work(
    workdir, tmp_path, cli, monkeypatch, command
):
    """docs/cli.rst: "Commands that write a file check the target before any
    work". A named pipe (as /dev/null, a device) cannot be replaced by a
    file: write_bytes refuses it, and check_writable now does too, at once
    (fit trained fully before, then failed to write)."""
    fifo = tmp_path / "target.fifo"
    os.mkfifo(fifo)
    done = _no_work(monkeypatch)
    status, _, err = cli(*_cliio_commands(workdir, tmp_path, fifo)[command])
    what = {"embed": "EMBEDDINGS", "calibrate": "ROUTER_OUT",
            "litellm-config": "FILE.yaml"}.get(command, "ROUTER")  # fmt: skip
    assert_one_line(
        status, err, 3,
        f"cannot write {what} '{fifo}': it is a named pipe (FIFO), not a regular "
        "file; give the path of a file to write",
    )  # fmt: skip
    assert done == [] and "train_loss" not in err
    assert _is_fifo(fifo)  # left as it was


def _is_fifo(path):
    import stat

    return stat.S_ISFIFO(os.stat(path).st_mode)


def test_read_only_targets_are_refused_before_work(workdir, tmp_path, cli, monkeypatch):
    """A read-only target (onboard's ROUTER, replaced in place, included) is
    refused before any work, in write_bytes's words (status 3)."""
    if _reads_any_file(tmp_path):
        pytest.skip("this process writes files whatever their mode (root)")
    done = _no_work(monkeypatch)
    target = copy_router(workdir, tmp_path)
    before = target.read_bytes()
    target.chmod(0o444)
    commands = _cliio_commands(workdir, tmp_path, target)
    commands["onboard in place"] = ["onboard", target, workdir / "new.csv",
                                    "--costs", workdir / "costs.csv"]  # fmt: skip
    for name, args in commands.items():
        status, _, err = cli(*args)
        assert_one_line(
            status, err, 3, f"'{target}': the file is not writable (mode 0o444); "
            "make it writable or save elsewhere",
        )  # fmt: skip
        assert ": error: cannot write " in err, (name, err)  # not "could not"
    assert done == [] and target.read_bytes() == before


def test_calibrate_interval_is_that_of_the_same_routing(workdir, tmp_path, cli):
    """[lower, upper) is the interval of cost weights that route the
    calibration queries as cost_weight does (calibrate_cost_weight's
    docstring), not the cost weights meeting the target: with a target above
    every model's cost each λ meets it, yet upper is the first crossing of
    two utility lines, computed here by hand."""
    from locus_sklearn import LocusRouter

    router = LocusRouter.load(workdir / "router.locus")
    queries = sorted(set(pd.read_csv(workdir / "evals.csv")["query"]))
    text = tmp_path / "queries.txt"
    text.write_text("\n".join(queries) + "\n")
    costs = router.model_costs_
    target = 2 * float(costs.max())  # every routing meets it
    status, out, err = cli(
        "calibrate", workdir / "router.locus", text, "--target-cost", target, "--json"
    )
    assert status == 0, err
    result = json.loads(out)
    # Routed at λ = 0 (the smallest λ meeting the target): each query's best
    # model, until a cheaper one's line P - λ·cost crosses it.
    proba = router.predict_proba(queries)
    crossings = [
        (p[best] - p[j]) / (costs[best] - costs[j])
        for p in proba
        for best in [int(np.argmax(p))]
        for j in range(len(costs))
        if costs[j] < costs[best]
    ]
    assert result["cost_weight"] == 0 and result["lower"] == 0
    assert result["upper"] is not None
    assert result["upper"] == pytest.approx(min(crossings), rel=1e-5)
    # Past upper the routing changes, and the target is still met.
    router.set_params(cost_weight=2 * result["upper"])
    routed = router.predict(queries)
    assert not np.array_equal(routed, proba.argmax(axis=1))
    assert np.mean([costs[list(router.classes_).index(m)] for m in routed]) <= target
    # The text output and the help say which interval it is, as docs/cli.rst.
    status, out, _ = cli(
        "calibrate", workdir / "router.locus", text, "--target-cost", target
    )
    assert status == 0
    assert f"same routing [0, {result['upper']:.6g})" in out.splitlines()
    status, out, _ = cli("calibrate", "--help")
    help_text = " ".join(out.split())
    assert (
        "interval of cost weights that route the calibration queries as "
        "cost_weight does" in help_text
    )
    assert "(the text output's 'same routing')" in help_text
    from pathlib import Path

    docs = Path(__file__).parents[1] / "docs" / "cli.rst"
    docs = " ".join(docs.read_text(encoding="utf-8").split())
    assert (
        "cost weights that route the calibration queries as ``cost_weight`` "
        "does" in docs
    )
    assert "the interval of cost weights that meet the target" not in docs


@pytest.mark.parametrize(
    "extra, status, message",
    [
        (["--set", "max_epochs=0"], 1,
         "--set max_epochs=0 must be an int in the range [1, inf). Got 0 instead."),
        (["--set", "dropout=2.0"], 1,
         "--set dropout=2.0 must be a float in the range [0.0, 1.0). Got 2.0 "
         "instead."),
        (["--set", "early_stopping=bogus"], 1,
         "--set early_stopping='bogus' must be a str among"),
        (["--embedding-dim", "2"], 2,
         "argument --embedding-dim: expected an integer >= 3, got '2'"),
    ],
)  # fmt: skip
def test_fit_parameter_errors_name_the_options(
    workdir, tmp_path, cli, extra, status, message
):
    """scikit-learn's "The 'NAME' parameter of LocusEmbedder must be ..."
    names the option or --set that gave the value; --embedding-dim takes
    LocusEmbedder's own bound as a command-line error (status 2)."""
    from locus_sklearn import LocusEmbedder

    out = tmp_path / "x.locus"
    code, _, err = cli(
        "fit", workdir / "evals.csv", "-o", out,
        "--encodings", workdir / "enc.npz", *extra,
    )  # fmt: skip
    assert_one_line(code, err, status, message)
    assert "parameter of" not in err and "LocusEmbedder" not in err
    assert not out.exists()
    # The option's bound is the estimator's.
    (constraint,) = LocusEmbedder._parameter_constraints["embedding_dim"]
    assert constraint.left == 3 and constraint.closed == "left"


def test_fit_embedding_dim_at_the_bound_is_accepted():
    from locus_sklearn._cli._parser import build_parser

    args = build_parser().parse_args(
        ["fit", "e.csv", "-o", "r.locus", "--embedding-dim", "3"]
    )
    assert args.embedding_dim == 3


def test_file_errors_name_the_file_they_concern(workdir, tmp_path, cli, monkeypatch):
    """A folder given to --encodings is a folder, not a missing file; a "~"
    that no shell expanded (--costs=~/costs.csv) is expanded by every step
    that reads the file (pandas expanded it, the check of its rows did not),
    and an evaluations file's too (its existence was checked unexpanded)."""
    router = workdir / "router.locus"
    folder = tmp_path / "enc.npz"
    folder.mkdir()
    status, _, err = cli("route", router, "q001", "--encodings", folder)
    assert_one_line(
        status, err, 3, f"The encodings file '{folder}' is a folder, not a file."
    )
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    (home / "costs.csv").write_bytes((workdir / "costs.csv").read_bytes())
    (home / "new.csv").write_bytes((workdir / "new.csv").read_bytes())
    emb = _embeddings_csv(workdir, tmp_path / "emb.csv")
    status, expected, err = cli(
        "select", emb, "--budget", "1e9", "--costs", workdir / "costs.csv", "--json"
    )
    assert status == 0, err
    status, out, err = cli(
        "select", emb, "--budget", "1e9", "--costs=~/costs.csv", "--json"
    )
    assert status == 0, err
    assert out == expected
    status, _, err = cli("embed", router, "~/new.csv", "-o", tmp_path / "e.csv")
    assert status == 0, err
    assert len(pd.read_csv(tmp_path / "e.csv")) == 2  # the two new models
    # A missing one is still named as given.
    status, _, err = cli("select", emb, "--budget", "1e9", "--costs=~/none.csv")
    assert_one_line(status, err, 3, "No such costs file: '~/none.csv'.")


def test_unreadable_files_are_named(workdir, tmp_path, cli):
    """A file this process may not read is one line naming what it is and
    the file, as the costs file's was, not Python's "[Errno 13] ..."."""
    if _reads_any_file(tmp_path):
        pytest.skip("this process reads files whatever their mode (root)")
    files = {}
    for name, source in [("evals.csv", "new.csv"), ("enc.npz", "enc.npz"),
                         ("router.locus", "router.locus")]:  # fmt: skip
        files[name] = tmp_path / name
        files[name].write_bytes((workdir / source).read_bytes())
    files["queries.txt"] = tmp_path / "queries.txt"
    files["queries.txt"].write_text("q001\n")
    for path in files.values():
        path.chmod(0)
    router = workdir / "router.locus"
    cases = [
        (["fit", files["evals.csv"], "-o", tmp_path / "x.locus"],
         f"The evaluations file '{files['evals.csv']}' cannot be read"),
        (["match", workdir / "evals.csv", files["evals.csv"]],
         f"The evaluations file '{files['evals.csv']}' cannot be read"),
        (["route", router, "--file", files["queries.txt"]],
         f"--file '{files['queries.txt']}' cannot be read"),
        (["calibrate", router, files["queries.txt"], "--target-cost", "1"],
         f"EVALS '{files['queries.txt']}' cannot be read"),
        (["route", router, "q001", "--encodings", files["enc.npz"]],
         f"The encodings file '{files['enc.npz']}' cannot be read"),
        (["route", files["router.locus"], "q001"],
         f"The router file '{files['router.locus']}' cannot be read"),
        (["embed", files["router.locus"], workdir / "new.csv", "-o",
          tmp_path / "e.csv"],
         f"The router or embedder file '{files['router.locus']}' cannot be read"),
    ]  # fmt: skip
    for args, message in cases:
        status, _, err = cli(*args)
        assert_one_line(status, err, 3, f"{message}: permission denied.")
        assert "Errno" not in err


# --- demo: markers, --output, interrupts, run.sh, counts -------------------------


def _stub_demo_figures(monkeypatch):
    """A fitted-router stand-in of 6 models "a" to "f" for ``_demo._figures``,
    with the dendrogram and portfolio curve stubbed: only the model map is
    drawn. Returns (router, markers), markers filled with (marker, model)
    for each marker drawn on the map."""
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.axes import Axes
    from sklearn.base import BaseEstimator

    import locus_sklearn.inspection as inspection

    monkeypatch.setattr(
        inspection, "plot_model_dendrogram", lambda *a, **k: plt.figure()
    )

    def curve(*args, **kwargs):
        ax = kwargs.get("ax") or plt.subplots()[1]
        ax.plot([0, 1], [0, 1], label=kwargs["label"])  # for the legend
        return ax

    monkeypatch.setattr(inspection, "plot_portfolio_curve", curve)
    markers = []
    plot = Axes.plot

    def recording_plot(self, *args, **kwargs):
        if "marker" in kwargs:
            labels = {tuple(t.xy): t.get_text() for t in self.texts}
            markers.append((kwargs["marker"], labels[tuple(args)]))
        return plot(self, *args, **kwargs)

    monkeypatch.setattr(Axes, "plot", recording_plot)

    class Router(BaseEstimator):  # what plot_model_map reads of a fitted router
        def fit(self, *args):
            return self

    router = Router()
    router.classes_ = np.array(list("abcdef"))
    router.model_embeddings_ = np.random.RandomState(0).randn(6, 4)
    return router, markers


def test_demo_model_map_stars_every_portfolio_model_onboarded_too(
    tmp_path, monkeypatch
):
    # "a" was held out (onboarded) and is in the portfolio: it had only the
    # square, so the map showed 2 stars for a portfolio of 3.
    from locus_sklearn._cli import _demo

    router, markers = _stub_demo_figures(monkeypatch)
    curves = {"expected": None, "k-medoids": None}
    written = _demo._figures(
        router, None, ["a", "c", "d"], ["a", "b"], curves, tmp_path, print
    )
    assert written == ["model_map.png", "model_dendrogram.png", "portfolio_curve.png"]
    assert sorted(m for marker, m in markers if marker == "*") == ["a", "c", "d"]
    assert sorted(m for marker, m in markers if marker == "s") == ["a", "b"]
    assert len(markers) == 5


def test_demo_failed_figure_write_names_output(tmp_path, monkeypatch):
    from locus_sklearn._cli import _demo
    from locus_sklearn._cli._errors import CommandError

    router, _ = _stub_demo_figures(monkeypatch)
    (tmp_path / "model_map.png").mkdir()  # the figure cannot be written there
    with pytest.raises(CommandError) as caught:
        _demo._figures(
            router, None, ["a"], [], {"expected": None, "k-medoids": None},
            tmp_path, print,
        )  # fmt: skip
    assert caught.value.status == 3
    message = str(caught.value)
    assert message.startswith(
        f"could not write model_map.png into --output '{tmp_path}'"
    )
    # The atomic write's reason, as for every output of the command.
    assert message.endswith(": it is a directory"), message


def _demo_never_loads(monkeypatch):
    from locus_sklearn._cli import _demo

    def load(*args):
        raise AssertionError("the demo loaded its data")

    monkeypatch.setattr(_demo, "_load", load)


def test_demo_output_dangling_link_refused_before_any_work(tmp_path, cli, monkeypatch):
    # A link to an unmounted folder passed the check: the demo trained, then
    # failed with "[Errno 17] File exists", --output not named.
    _demo_never_loads(monkeypatch)
    link = tmp_path / "figs"
    link.symlink_to(tmp_path / "gone")
    status, out, err = cli("demo", "--quick", "--output", link)
    assert_one_line(
        status, err, 3, f"cannot write into --output '{link}': it is a symbolic "
        f"link to '{tmp_path / 'gone'}', which does not exist",
    )  # fmt: skip
    assert out == ""
    status, out, err = cli("demo", "--quick", "--output", link / "sub")
    assert_one_line(
        status, err, 3, f"--output '{link / 'sub'}': '{link}' is a symbolic link"
    )
    assert out == "" and not os.path.lexists(tmp_path / "gone")


def test_demo_output_created_before_any_work(tmp_path, cli, monkeypatch):
    # What the command line's check cannot tell (root under /proc passes its
    # access check) fails as the demo creates the folder, before any work,
    # naming --output; it failed after the whole run, without it.
    from locus_sklearn._cli import _commands

    _demo_never_loads(monkeypatch)
    monkeypatch.setattr(_commands, "check_folder_writable", lambda *args: None)
    afile = tmp_path / "afile"
    afile.write_text("")
    status, out, err = cli("demo", "--quick", "--output", afile / "sub")
    assert_one_line(
        status, err, 3, f"cannot create the folder --output '{afile / 'sub'}': "
        "Not a directory; give a folder",
    )  # fmt: skip
    assert out == ""
    # A folder that can be created is, for the check only: a run that fails
    # later leaves no empty folder behind.
    status, _, err = cli("demo", "--quick", "--output", tmp_path / "new" / "figs")
    assert status == 1 and "the demo loaded its data" in err
    assert not (tmp_path / "new").exists()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc")
def test_demo_output_under_proc_refused_before_any_work(cli, monkeypatch):
    # As root, /proc passes the access check: the demo trained, then failed.
    _demo_never_loads(monkeypatch)
    target = "/proc/locus-no-such-folder/figs"
    status, out, err = cli("demo", "--quick", "--output", target)
    assert_one_line(status, err, 3, f"--output '{target}'")
    assert out == ""


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_interrupts_kept_keeps_an_inherited_sigint_ignored():
    # A background job of a non-interactive shell (`locus fit ... &`) starts
    # with SIGINT ignored; interrupts_kept re-enabled it during training.
    import signal

    code = (
        "import os, signal, time\n"
        "from locus_sklearn._cli._errors import interrupts_kept\n"
        "with interrupts_kept():\n"
        "    os.kill(os.getpid(), signal.SIGINT)\n"
        "    time.sleep(0.2)\n"
        "print('ran on', signal.getsignal(signal.SIGINT) is signal.SIG_IGN)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "ran on True\n"


def test_demo_progress_lines_count_one_model_in_the_singular(monkeypatch):
    from types import SimpleNamespace

    import locus_sklearn.inspection as inspection
    from locus_sklearn._cli import _demo

    lines = []
    rng = np.random.RandomState(0)
    queries = [f"q{i:03d}" for i in range(200)]
    scores = rng.randint(0, 2, 200).astype(float)
    train = pd.DataFrame({"model": "c", "query": queries[:150], "score": scores[:150]})
    test = pd.DataFrame({"model": "c", "query": queries[150:], "score": scores[150:]})

    class Router:  # what _onboard and _portfolio read of a fitted router
        def __init__(self, names):
            self.classes_ = np.array(names)
            self.model_embeddings_ = np.eye(len(names))
            self.embedder_ = SimpleNamespace(
                predict_proba=lambda emb, q, evals: np.full((len(q), 1), 0.5)
            )

        def add_models(self, evals):
            return self

        def embed(self, evals):
            return np.zeros((evals["model"].nunique(), len(self.classes_)))

        def predict_proba(self, queries):
            return np.full((len(queries), len(self.classes_)), 0.5)

    def curve(router, scored, sizes, **kwargs):
        return pd.DataFrame(
            {
                "value": sizes,
                "models": [list(router.classes_[:size]) for size in sizes],
                "n_queries": 50, "accuracy": 0.5, "full_pool_accuracy": 0.5,
                "random_mean": 0.5, "random_std": 0.0,
            }
        )  # fmt: skip

    monkeypatch.setattr(inspection, "portfolio_curve", curve)
    demo = SimpleNamespace(
        held_out=["c"], train=train, test=test, rng=rng, seed=0,
        say=lambda *said: lines.extend(said),
    )  # fmt: skip
    _demo._onboard(demo, Router(["a", "b", "c"]))  # 1 model held out
    _demo._portfolio(demo, Router(["a", "b"]), quick=True)  # portfolios of 1
    assert lines[0] == (
        "[3/4] Onboarding the 1 held-out model from 128 evaluations (no "
        "training); correctness accuracy on its test queries:"
    )
    assert any(line.startswith("  (embedding the 1 model took ") for line in lines)
    assert "[4/4] Portfolios of 1 model (pool of 2):" in lines
    for text in (
        "the 1 model chosen for expected routing accuracy",
        "the 1 model chosen by k-medoids on the embeddings",
        "random 1-model portfolios",
    ):
        assert any(line.strip().startswith(text) for line in lines), lines
    assert not any("1 models" in line or "1 held-out models" in line for line in lines)


@pytest.mark.skipif(
    sys.platform == "win32" or __import__("shutil").which("bash") is None,
    reason="run.sh is a bash script",
)
def test_run_sh_runs_the_demo_in_the_callers_folder(tmp_path):
    # run.sh changed to its own folder: `bash run.sh demo --evals my.csv` read
    # the repository's my.csv, and the figures landed in the repository.
    # Tests and docs still run in the repository (CI calls them from there).
    import shutil

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    repo, caller = tmp_path / "repo", tmp_path / "caller"
    (repo / ".venv" / "bin").mkdir(parents=True)
    caller.mkdir()
    shutil.copy(os.path.join(root, "run.sh"), repo / "run.sh")
    (repo / "pyproject.toml").write_text("")
    # An installed .venv whose programs say where they ran and with what.
    for program in ("python", "sphinx-build"):
        stub = repo / ".venv" / "bin" / program
        stub.write_text(f'#!/bin/sh\necho "{program} in $(pwd -P): $*"\n')
        stub.chmod(0o755)
    for extras in ("[plot]", "[test]", "[docs,test]"):
        stamp = repo / ".venv" / f".locus-installed{extras}"
        stamp.write_text("")
        os.utime(stamp, (2e9, 2e9))  # newer than pyproject.toml: no setup
    env = {k: v for k, v in os.environ.items() if k not in ("VENV", "PYTHON")}

    def run_sh(*args):
        result = subprocess.run(
            ["bash", str(repo / "run.sh"), *args],
            cwd=caller, env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        return result.stdout

    repo_p, caller_p = os.path.realpath(repo), os.path.realpath(caller)
    assert run_sh("demo", "--evals", "my.csv") == (
        f"python in {caller_p}: -m locus_sklearn demo --evals my.csv\n"
    )
    assert run_sh("test", "-k", "x") == f"python in {repo_p}: -m pytest -q -k x\n"
    assert run_sh("docs").startswith(f"sphinx-build in {repo_p}: -W --keep-going")


def test_aligned_tables_pad_by_display_width():
    # len() padded "日本語" (6 terminal columns) as 3 and a combining accent
    # as a column: the columns after such a name were shifted.
    import unicodedata

    from locus_sklearn._cli._io import format_table

    def columns(text):  # terminal columns, as a terminal draws them
        return sum(
            2
            if unicodedata.east_asian_width(c) in "WF"
            else 0
            if unicodedata.combining(c)
            else 1
            for c in text
        )

    lines = format_table(
        ["model", "p"], [["日本語", "0.5"], ["e\u0301", "0.25"], ["ＡＢ", "1"]]
    )
    assert lines == [
        "model      p",
        "------  ----",
        "日本語   0.5",
        "e\u0301       0.25",
        "ＡＢ       1",
    ]
    assert {columns(line) for line in lines} == {12}


def test_embed_writes_a_blank_model_name_select_and_neighbors_read(
    workdir, tmp_path, cli
):
    # A name of spaces is a model id check_evals accepts (ids are exact
    # strings): embed wrote it, and select and neighbors refused the file.
    new = pd.read_csv(workdir / "new.csv", keep_default_na=False)
    new["model"] = new["model"].replace({"fam2-m06": " "})
    evals = tmp_path / "new_blank.csv"
    new.to_csv(evals, index=False)
    emb = tmp_path / "emb.csv"
    status, _, err = cli("embed", workdir / "router.locus", evals, "-o", emb)
    assert status == 0, err
    from locus_sklearn._cli._io import read_embeddings

    names, X = read_embeddings(emb)
    assert sorted(names) == [" ", "fam2-m07"] and X.shape[0] == 2
    status, out, err = cli("select", emb, "--k", "2", "--json")
    assert status == 0, err
    assert {m["model"] for m in json.loads(out)["selected"]} == {" ", "fam2-m07"}
    status, out, err = cli("neighbors", emb, " ", "--k", "1", "--json")
    assert status == 0, err
    assert [m["model"] for m in json.loads(out)] == ["fam2-m07"]


# --- the CLI in shell pipes (issue 52) ---------------------------------------------


def _non_ascii_embeddings(path):
    """An embeddings csv of 3 models, one named "modèle" (select reads only it)."""
    X = np.arange(12, dtype=float).reshape(3, 4) ** 1.5
    pd.DataFrame(X, index=pd.Index(["modèle", "b", "c"], name="model")).to_csv(path)
    return path


@pytest.mark.parametrize(
    "env",
    [{"PYTHONIOENCODING": "ascii"}, {"LC_ALL": "C", "PYTHONUTF8": "0"}],
    ids=["PYTHONIOENCODING=ascii", "LC_ALL=C"],
)
def test_stdout_that_is_not_utf8(tmp_path, env):
    """A stdout that cannot write every character: a non-ASCII model name is
    written as a backslash escape, as Python writes stderr, where the command
    failed half-way through its table with status 1 (invalid data); help
    texts are ASCII (calibrate's "λ" was a traceback); --json is unchanged."""
    emb = _non_ascii_embeddings(tmp_path / "emb.csv")
    result = locus("select", emb, "--k", "3", "--tsv", env=env)
    assert result.returncode == 0, result.stderr
    rows = [line.split("\t") for line in result.stdout.splitlines()]
    assert rows[0] == ["rank", "model", "covers"] and len(rows) == 4
    assert sorted(row[1] for row in rows[1:]) == ["b", "c", "mod\\xe8le"]
    result = locus("select", emb, "--k", "3", "--json", env=env)
    assert result.returncode == 0, result.stderr
    chosen = {m["model"] for m in json.loads(result.stdout)["selected"]}
    assert chosen == {"modèle", "b", "c"}
    result = locus("calibrate", "--help", env=env)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert "the smallest lambda whose mean cost" in " ".join(result.stdout.split())


def test_help_texts_are_ascii(cli):
    # Help is printed on stdouts of any encoding; the fixed texts need none.
    from locus_sklearn._cli import build_parser

    status, out, _ = cli("--help")
    assert status == 0 and out.isascii()
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert {"fit", "calibrate", "serve"} <= set(sub.choices)
    for command in sub.choices:
        status, out, _ = cli(command, "--help")
        assert status == 0 and out.isascii(), (command, out)


def _closed_stderr(*args):
    """``locus ARGS 2>&-``: (status, stdout)."""
    result = subprocess.run(
        [sys.executable, "-m", "locus_sklearn", *map(str, args)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, timeout=300,
        env=dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1"),
        preexec_fn=lambda: os.close(2),
    )  # fmt: skip
    return result.returncode, result.stdout


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX file descriptors")
def test_closed_stderr_keeps_notes_and_errors_out_of_stdout(tmp_path):
    """With stderr closed Python sets sys.stderr to None, and print() to None
    writes to stdout: the note after select's table and the error lines
    went into the results. They are dropped."""
    emb = _non_ascii_embeddings(tmp_path / "emb.csv")
    status, out = _closed_stderr("select", emb, "--k", "2", "--tsv")
    assert status == 0
    assert [line.split("\t")[0] for line in out.splitlines()] == ["rank", "1", "2"]
    status, out = _closed_stderr("select", emb, "--k", "9")
    assert status == 1 and out == ""


def test_closed_stderr_fit(workdir, tmp_path, cli, tiny_cli_args, monkeypatch):
    # fit's progress stream asked None whether it was a terminal: an internal
    # AttributeError (status 1) before training.
    monkeypatch.setattr(sys, "stderr", None)
    status, out, _ = cli(
        "fit", workdir / "evals.csv", "-o", tmp_path / "x.locus",
        "--encodings", workdir / "enc.npz", *tiny_cli_args,
    )  # fmt: skip
    assert sys.stderr is None  # restored
    assert status == 0 and out == ""
    from locus_sklearn import LocusRouter

    assert len(LocusRouter.load(tmp_path / "x.locus").classes_) == 6


def test_saving_twice_writes_the_same_bytes(workdir, tmp_path):
    """safetensors writes the metadata in a random (hash) order: two saves
    of one router differed in bytes. The header's keys are sorted, and the
    file loads as before."""
    import struct

    from locus_sklearn import LocusRouter
    from locus_sklearn._files import read_file

    router = LocusRouter.load(workdir / "router.locus")
    first, second = tmp_path / "a.locus", tmp_path / "b.locus"
    router.save(first)
    router.save(second)
    data = first.read_bytes()
    assert data == second.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    keys = list(json.loads(data[8 : 8 + n])["__metadata__"])
    assert keys == sorted(keys) and len(keys) > 5
    assert n % 8 == 0  # safetensors' alignment of the tensors that follow
    assert read_file(first, "LocusRouter")[2] is True  # intact
    again = LocusRouter.load(first)
    np.testing.assert_array_equal(
        again.predict_proba(["q001", "q002"]), router.predict_proba(["q001", "q002"])
    )


@pytest.mark.skipif(
    not os.path.isdir("/proc/self"), reason="needs /proc, where no file is created"
)
def test_folder_where_no_file_can_be_created(
    workdir, tmp_path, cli, tiny_cli_args, monkeypatch
):
    """os.access says yes to root everywhere (/proc, /sys, NFS root_squash):
    fit trained, then failed to write. The folder is tried by creating a
    file, before any work; os.access answers here as it does for root."""
    from locus_sklearn._cli import _demo
    from locus_sklearn._cli._io import check_writable

    monkeypatch.setattr(os, "access", lambda *args, **kwargs: True)
    status, _, err = cli(
        "fit", workdir / "evals.csv", "-o", "/proc/router.locus", *tiny_cli_args
    )
    assert_one_line(
        status, err, 3, "cannot write ROUTER '/proc/router.locus'",
        "cannot create a file in the folder '/proc'",
    )  # fmt: skip
    assert "train_loss" not in err

    def ran(*args, **kwargs):
        raise AssertionError("the demo ran")

    monkeypatch.setattr(_demo, "run_demo", ran)
    status, _, err = cli("demo", "--quick", "--output", "/proc")
    assert_one_line(status, err, 3, "--output '/proc'", "cannot create a file")
    # Where a file can be created, the one tried is removed.
    check_writable(tmp_path / "router.locus", "ROUTER")
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("no_color, coloured", [("1", False), ("", True)])
def test_no_color_on_a_terminal(monkeypatch, no_color, coloured):
    """NO_COLOR set and not empty (https://no-color.org): no colour codes in
    the progress, on a terminal too; empty is unset."""
    import io

    from locus_sklearn._cli._io import progress_to_stderr
    from locus_sklearn._training import progress_sink

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    monkeypatch.setenv("NO_COLOR", no_color)
    with progress_to_stderr():
        progress_sink("  1  \x1b[36m0.6323\x1b[0m")  # fit's epoch table
        print("\x1b[32mdone\x1b[0m")  # what skorch prints to stdout
    expected = "  1  \x1b[36m0.6323\x1b[0m\n\x1b[32mdone\x1b[0m\n"
    assert terminal.getvalue() == (expected if coloured else "  1  0.6323\ndone\n")
    assert sys.stderr is terminal


class _FullStdout:
    """A stdout on a full disk: every write fails with ENOSPC."""

    encoding, errors = "utf-8", "strict"

    def write(self, text):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def flush(self):
        pass


def test_failed_writes_to_stdout_are_errors_naming_it(workdir, cli, monkeypatch):
    """argparse dropped a failed write of --help and --version (status 0);
    a command's failed write did not say stdout was the target."""
    full = os.strerror(errno.ENOSPC)
    monkeypatch.setattr(sys, "stdout", _FullStdout())
    for args, prog in ((["--help"], "locus"), (["--version"], "locus")):
        status, _, err = cli(*args)
        assert err == f"{prog}: error: cannot write to stdout: {full}\n"
        assert status == 3
    status, _, err = cli("fit", "--help")
    assert (status, err) == (3, f"locus fit: error: cannot write to stdout: {full}\n")
    status, _, err = cli("route", workdir / "router.locus", "q001")
    assert_one_line(
        status, err, 3, f"locus route: error: cannot write to stdout: {full}"
    )
    # A closed stdout (``>&-``): Python's print() to None wrote nothing, status 0.
    monkeypatch.setattr(sys, "stdout", None)
    status, _, err = cli("route", workdir / "router.locus", "q001", "--json")
    assert_one_line(status, err, 3, "cannot write to stdout: it is closed")
    assert sys.stdout is None  # restored


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize(
    "command, prog",
    [
        (["locus_sklearn", "--version"], "locus"),
        # Its own main(), which parsed before the streams were set up: the
        # message was "[Errno 28] No space left on device", naming nothing.
        (["locus_sklearn.serve", "--help"], "locus"),
    ],
)
def test_help_to_a_full_device(command, prog):
    with open("/dev/full", "w") as full:
        result = subprocess.run(
            [sys.executable, "-m", *command],
            stdout=full, stderr=subprocess.PIPE, text=True, timeout=300,
        )  # fmt: skip
    assert result.returncode == 3
    full = os.strerror(errno.ENOSPC)
    assert result.stderr == f"{prog}: error: cannot write to stdout: {full}\n"


def test_debug_keeps_the_exit_status(workdir, cli):
    # A usage error found while running: 2 with --debug too, not Python's 1.
    status, _, err = cli("route", workdir / "router.locus", "--debug")
    assert status == 2, err
    assert "Traceback (most recent call last)" in err and "No queries given" in err


def test_calibrate_refit_refits_the_router_per_fold(workdir, cli):
    """--cv reused the router's network, which saw every fold; --refit fits a
    copy per fold, as calibrate_cost_weight(refit=True) does."""
    from locus_sklearn import LocusRouter
    from locus_sklearn.inspection import calibrate_cost_weight

    router = LocusRouter.load(workdir / "router.locus")
    evals = pd.read_csv(workdir / "evals.csv")
    target = float(np.median(router.model_costs_))
    args = ["calibrate", workdir / "router.locus", workdir / "evals.csv",
            "--target-cost", target, "--cv", 2, "--json"]  # fmt: skip
    results = {}
    for refit in (False, True):
        status, out, err = cli(*args, *(["--refit"] if refit else []))
        assert status == 0, err
        results[refit] = json.loads(out)
        expected = calibrate_cost_weight(
            router, evals, target_cost=target, cv=2, refit=refit
        )
        assert results[refit]["cost_weight"] == pytest.approx(expected.cost_weight)
        assert results[refit]["mean_cost"] == pytest.approx(expected.mean_cost)
    assert results[True] != results[False]
    status, _, err = cli(*args[:5], "--refit")
    assert status == 2
    assert "--refit needs --cv" in err


# --- probe 53: escapes, encodings headers, "~", atomic figures, graded -------


def test_tables_and_notes_escape_characters_that_are_not_printable(
    tmp_path, cli, capsys
):
    # A model name holding ESC sequences (check_evals accepts any string)
    # reached the terminal raw: "\x1b[2J" cleared the screen.
    from locus_sklearn._cli._io import format_table, note

    evil = "\x1b[2J\x1b]0;title\x07m\u202e1"
    for tsv in (False, True):
        lines = format_table(["model", "p"], [[evil, "0.5"], ["a\tb", "1"]], tsv=tsv)
        text = "\n".join(lines)
        assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text
        assert "\\x1b[2J\\x1b]0;title\\x07m\\u202e1" in text
        assert "a b" in text  # tabs and line breaks stay spaces
    assert format_table(["m"], [["modèle 日本語"]])[2] == "modèle 日本語"
    note(f"Added 1 model(s): {evil}")
    assert capsys.readouterr().err == (
        "Added 1 model(s): \\x1b[2J\\x1b]0;title\\x07m\\u202e1\n"
    )
    emb = tmp_path / "emb.csv"
    pd.DataFrame(
        {"model": [evil, "b", "c"], "locus0": [0.0, 1.0, 3.0], "locus1": [1, 0, 0]}
    ).to_csv(emb, index=False)
    for form in ([], ["--tsv"]):
        status, out, err = cli("neighbors", emb, "b", "--k", "2", *form)
        assert status == 0, err
        assert "\x1b" not in out and "\\x1b[2J" in out


def _npy_header_only(header):
    """A .npy member whose header declares ``header`` but holds 64 bytes."""
    import io

    from numpy.lib import format as npy_format

    buffer = io.BytesIO()
    npy_format.write_array_header_1_0(buffer, header)
    return buffer.getvalue() + b"\0" * 64


def test_encodings_declaring_more_than_they_hold_are_refused_unread(
    workdir, tmp_path, cli, monkeypatch
):
    # A 600-byte npz whose 'vectors' declared (2e6, 1000) float64 (16 GB):
    # read_encodings allocated it (MemoryError) before finding it cut short.
    import io
    import zipfile

    from locus_sklearn._cli._io import read_encodings

    bomb = tmp_path / "bomb.npz"
    with zipfile.ZipFile(bomb, "w") as archive:
        queries = io.BytesIO()
        np.save(queries, np.array(["q001", "q002"]))
        archive.writestr("queries.npy", queries.getvalue())
        header = {"descr": "<f8", "fortran_order": False, "shape": (2_000_000, 1000)}
        archive.writestr("vectors.npy", _npy_header_only(header))
    with pytest.raises(ValueError) as caught:
        read_encodings(bomb)
    message = str(caught.value)
    assert message.startswith(f"--encodings '{bomb}' is not a valid encodings file")
    # 2e6 * 1000 * 8 bytes declared, the 64 bytes after the header held.
    assert (
        "'vectors' (member 'vectors.npy'): shape (2000000, 1000) of float64 needs "
        "16,000,000,000 bytes, the file holds 64"
    ) in message
    status, _, err = cli("route", workdir / "router.locus", "q001", "--encodings", bomb)
    assert_one_line(status, err, 1, "16,000,000,000 bytes")
    # Arrays that are whole but do not fit in memory: the same terms.
    good = workdir / "enc.npz"

    def out_of_memory(self, key):
        raise MemoryError

    monkeypatch.setattr(np.lib.npyio.NpzFile, "__getitem__", out_of_memory)
    with pytest.raises(ValueError) as caught:
        read_encodings(good)
    message = str(caught.value)
    assert message.startswith(f"--encodings '{good}': its arrays do not fit in memory")
    assert "'vectors' (member 'vectors.npy'): shape (" in message


def test_every_path_argument_expands_a_leading_tilde(
    workdir, tmp_path, cli, monkeypatch
):
    # No shell expands --encodings=~/enc.npz (nor a quoted "~/x"): EVALS and
    # --costs were expanded, ROUTER, -o, --encodings, --file and --cache's
    # check were not ("the folder '~' does not exist").
    from locus_sklearn._cli import _demo
    from locus_sklearn._cli._errors import CommandError
    from locus_sklearn._cli._io import check_folder_writable, check_writable

    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(tmp_path)  # where an unexpanded "~" folder would go
    for name in ("router.locus", "enc.npz", "new.csv", "costs.csv"):
        (home / name).write_bytes((workdir / name).read_bytes())
    (home / "q.txt").write_text("q001\n")
    status, expected, err = cli(
        "route", workdir / "router.locus", "q001", "--encodings", workdir / "enc.npz"
    )
    assert status == 0, err
    status, out, err = cli(
        "route", "~/router.locus", "--file=~/q.txt", "--encodings=~/enc.npz"
    )
    assert status == 0, err
    assert out == expected
    status, _, err = cli("embed", "~/router.locus", "~/new.csv", "--output=~/e.csv")
    assert status == 0, err
    assert len(pd.read_csv(home / "e.csv")) == 2
    status, _, err = cli(
        "onboard", "~/router.locus", "~/new.csv", "-o", "~/r2.locus",
        "--costs=~/costs.csv",
    )  # fmt: skip
    assert status == 0, err
    assert (home / "r2.locus").is_file()
    # An output that is an input, both given with "~": refused, not overwritten.
    status, _, err = cli("embed", "~/router.locus", "~/new.csv", "-o", "~/new.csv")
    assert_one_line(status, err, 2, "EMBEDDINGS '~/new.csv' is EVALS")
    assert (home / "new.csv").read_bytes() == (workdir / "new.csv").read_bytes()
    # The checks before any work look at the expanded path, and name the
    # path as given.
    with pytest.raises(CommandError, match=r"the folder '~/none' does not exist"):
        check_writable("~/none/r.locus", "ROUTER")
    (home / "afile").write_text("")
    with pytest.raises(CommandError, match=r"into --cache '~/afile': it is a file"):
        check_folder_writable("~/afile", "--cache")
    check_folder_writable("~/cache", "--cache")
    # demo --output ~/figs: the figures go to the home folder.
    router, _ = _stub_demo_figures(monkeypatch)
    written = _demo._figures(
        router, None, ["a"], [], {"expected": None, "k-medoids": None},
        "~/figs", print,
    )  # fmt: skip
    assert sorted(os.listdir(home / "figs")) == sorted(written)
    assert not (tmp_path / "~").exists()


def test_demo_figure_write_that_fails_leaves_the_old_figure_whole(
    tmp_path, monkeypatch
):
    # savefig wrote into model_map.png itself: on a full disk last run's
    # figure was left cut short. A file-size limit fails the write the same
    # way (EFBIG where a full disk gives ENOSPC).
    import resource
    import signal

    from locus_sklearn._cli import _demo
    from locus_sklearn._cli._errors import CommandError

    router, _ = _stub_demo_figures(monkeypatch)
    old = b"last run's figure"
    (tmp_path / "model_map.png").write_bytes(old)
    limits = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (2048, limits[1]))
    try:
        with pytest.raises(CommandError) as caught:
            _demo._figures(
                router, None, ["a"], [], {"expected": None, "k-medoids": None},
                tmp_path, print,
            )  # fmt: skip
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limits)
        signal.signal(signal.SIGXFSZ, handler)
    assert caught.value.status == 3
    assert str(caught.value).startswith(
        f"could not write model_map.png into --output '{tmp_path}': "
    )
    assert (tmp_path / "model_map.png").read_bytes() == old
    assert os.listdir(tmp_path) == ["model_map.png"]  # no temporary file left


def test_demo_majority_guess_thresholds_scores_as_the_metric_does(tiny_settings):
    # The majority guess was the class of the mean score (0.6: "correct")
    # scored on y >= 0.5, where 2/3 of the graded scores are 0.4: it read
    # 0.33 for a constant guess that is right on 2/3 of the queries.
    from locus_sklearn import LocusEmbedder, LocusRouter
    from locus_sklearn._cli import _demo

    pool, demo = _demo_data()
    queries = np.sort(pool.evals["query"].unique())
    graded = pd.DataFrame(
        {
            "model": "h",
            "query": queries,
            "score": np.where(np.arange(len(queries)) % 3 == 0, 1.0, 0.4),
            "task": pool.evals["task"].iloc[0],
        }
    )
    demo.train, demo.test = _demo._split(
        pd.concat([pool.evals, graded]), np.random.RandomState(0)
    )
    demo.held_out = ["h"]
    lines = []
    demo.say = lambda *said: lines.extend(said)
    embedder = LocusEmbedder(pool.encodings, **tiny_settings)
    router = LocusRouter(embedder).fit(demo.train[demo.train["model"] != "h"])
    _demo._onboard(demo, router)
    y = demo.test.loc[demo.test["model"] == "h", "score"].to_numpy()
    assert 0.5 <= y.mean() and np.mean(y >= 0.5) < 0.5  # the case at hand
    # Most test scores are below 0.5: the guess "below" is right on those.
    row = next(line for line in lines if line.strip().startswith("h "))
    assert row.split()[-1] == f"{np.mean(y < 0.5):.3f}"


def test_match_help_says_what_the_disagreement_of_graded_scores_is(cli):
    status, out, _ = cli("match", "--help")
    assert status == 0
    text = " ".join(out.split())
    assert "the mean absolute difference of their scores on those queries" in text
    assert "for 0/1 scores is the share of them on which correctness differs" in text


def test_parquet_without_pyarrow_names_the_extra(tmp_path, cli, monkeypatch):
    # pandas' "Unable to find a usable engine" named no extra; the loader's
    # own message names its parameter (path=...), not the file.
    import locus_sklearn.datasets as datasets

    evals = tmp_path / "e.parquet"
    evals.write_bytes(b"PAR1")

    def no_engine(*args, **kwargs):
        raise ImportError(
            "Unable to find a usable engine; tried using: 'pyarrow', 'fastparquet'."
        )

    hint = 'pip install "locus_sklearn[parquet]"'
    monkeypatch.setattr(pd, "read_parquet", no_engine)
    status, _, err = cli("fit", evals, "-o", tmp_path / "r.locus")
    assert_one_line(
        status, err, 1, f"the evaluations file '{evals}' (Parquet) needs pyarrow", hint
    )
    assert "path=" not in err
    # A loader that lets pandas' error through: the same line.
    monkeypatch.setattr(datasets, "load_evals", no_engine)
    status, _, err = cli("match", evals, evals)
    assert_one_line(status, err, 1, f"'{evals}' (Parquet) needs pyarrow", hint)


def test_an_evaluations_file_that_exists_but_cannot_be_read_is_named(tmp_path, cli):
    # os.path.exists is False for a loop of symbolic links: the CLI said
    # "No such evaluations file" where load_evals names the loop.
    (tmp_path / "a.csv").symlink_to(tmp_path / "b.csv")
    (tmp_path / "b.csv").symlink_to(tmp_path / "a.csv")
    status, _, err = cli("fit", tmp_path / "a.csv", "-o", tmp_path / "r.safetensors")
    assert status != 0 and "No such evaluations file" not in err
    assert "symbolic links" in err and "a.csv" in err
    status, _, err = cli("fit", tmp_path / "none.csv", "-o", tmp_path / "r.safetensors")
    assert status != 0 and "No such evaluations file" in err
