"""The ``locus`` command line, driven as a user would.

The main round trip runs in subprocesses (``python -m locus_sklearn``); the
many option and error cases run ``main()`` in process, which is the same code
path without the cost of starting Python and importing torch each time.
"""

import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from locus_sklearn.datasets import make_model_pool

TINY = [
    "--embedding-dim", "8", "--epochs", "2", "--seed", "0",
    "--set", "n_latents=4", "--set", "n_blocks=1", "--set", "n_heads=2",
    "--set", "hidden_dim=8", "--set", "enc_size=(8, 32)", "--set", "dec_size=16",
    "--set", "episodes_per_epoch=16", "--set", "early_stopping=None",
]  # fmt: skip


def locus(*args, stdin=None, cwd=None):
    """Run ``python -m locus_sklearn ARGS``; return the CompletedProcess."""
    # One torch thread: the networks are tiny, and on a busy machine OpenMP's
    # spinning threads can make a multi-threaded run many times slower.
    env = dict(
        os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", OMP_NUM_THREADS="1"
    )
    return subprocess.run(
        [sys.executable, "-m", "locus_sklearn", *map(str, args)],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=300,
    )


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
    assert len(lines) == 1 if status in (1, 3) else lines, result.stderr
    assert "Traceback" not in result.stderr
    for text in contains:
        assert text in result.stderr, result.stderr


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
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
        "fit", path / "evals.csv", "-o", path / "router.locus",
        "--encodings", path / "enc.npz", "--costs", path / "costs.csv", *TINY,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "Saved a LocusRouter (6 models" in result.stderr
    return path


def test_round_trip(workdir, tmp_path, cli):
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
    assert frame.shape == (6, 8)
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


def test_embedder_file_and_debug(workdir, tmp_path, cli):
    """`embed` also takes a saved LocusEmbedder; --debug raises the exception."""
    from locus_sklearn import LocusRouter

    router = LocusRouter.load(workdir / "router.locus")
    router.embedder_.save(tmp_path / "embedder.locus")
    out = tmp_path / "emb.csv"
    status, _, err = cli(
        "embed", tmp_path / "embedder.locus", workdir / "new.csv", "-o", out
    )
    assert status == 0, err
    assert pd.read_csv(out, index_col="model").shape == (2, 8)
    with pytest.raises(FileNotFoundError):
        cli("route", workdir / "missing.locus", "q1", "--debug")
    with pytest.raises(FileNotFoundError):
        cli("--debug", "route", workdir / "missing.locus", "q1")


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
        (["route", R], 1, "No queries given"),
        (["route", R, "q1", "--encodings", "{w}/missing.npz"], 3,
         "No such encodings file"),
        (["neighbors", R, "nope"], 1, "not a model of the pool"),
        (["neighbors", R, "fam0-m00", "--k", "99"], 1, "--k 99"),
        (["fit", "{w}/missing.csv", "-o", "{w}/x.locus"], 3, "missing.csv"),
        (["fit", "{w}/evals.csv"], 2, "-o/--output"),
        (["fit", *FIT, "--set", "n_latent=3"], 1,
         "did you mean n_latents"),
        (["fit", *FIT, "--set", "oops"], 2, "NAME=VALUE"),
        (["fit", *FIT, "--encodings", "{w}/costs.csv"], 1,
         "not a valid encodings file"),
        (["fit", *FIT, "--encodings", "{w}/enc.npz",
          "--set", "dropout=2.0"], 1, "dropout"),
        (["fit", *FIT, "--encodings", "{w}/enc.npz",
          "--costs", "{w}/evals.csv"], 1, "columns model,cost"),
        (["fit", *FIT, "--encoder", "{w}/nodir"], 1,
         "not an existing local directory"),
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
    if status in (1, 3):
        assert len(err.strip().splitlines()) == 1, err
        assert err.startswith("locus ")
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
    pytest.importorskip("matplotlib")
    result = locus("demo", "--quick", "--output", tmp_path / "out", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    for text in ("LocusRouter", "single best", "oracle", "Onboarding", "Portfolio"):
        assert text in out
    last = out.strip().splitlines()[-1]
    assert last.endswith(str(tmp_path / "out"))
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "model_dendrogram.png", "model_map.png", "portfolio_curve.png",
    ]  # fmt: skip


def test_help_and_version(cli):
    status, out, _ = cli("--help")
    assert status == 0
    for command in ("demo", "fit", "route", "embed", "onboard", "select", "neighbors"):
        assert command in out
    status, out, _ = cli("--version")
    assert status == 0 and out.startswith("locus ")
