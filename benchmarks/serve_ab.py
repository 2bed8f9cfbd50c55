"""Request latency of two revisions' ``locus serve``, side by side, alternating.

Fits ``serve_load.py``'s router (the built-in MMLU-Pro subset, 32 models,
kernel readout) with this checkout, saves it, and serves the same file from
two processes at once: one running a base revision (checked out into a
temporary git worktree) and one running this checkout. One client sends
single-query ``POST /route`` requests to each in turn, ``--requests`` per
round, the arms alternating for ``--rounds`` rounds: on a shared machine
whose speed drifts by tens of percent from minute to minute, only
alternation makes two latencies comparable. The client is the standard
library's blocking ``http.client`` on one kept-alive connection (it costs
the shared cores less than an asyncio client, so more of what is measured
is the server). Queries: precomputed ids (the encoder costs nothing; what
is left is the HTTP stack, the batcher and ``predict_proba``), or with
``--text`` the first 300 characters of each question, encoded by MiniLM
(``--encoder-backend``).

Writes ``results/serve_ab.json`` (``serve_ab_text.json`` with ``--text``):
every round's p50 / p99 / mean per arm and the pooled figures.

Usage: HF_HUB_OFFLINE=1 python benchmarks/serve_ab.py --base REV
       [--rounds 6] [--requests 300] [--text [--encoder-backend onnx]]
"""

import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
from _provenance import ROOT
from _worktree import base_worktree, short_revision, write_ab_result
from serve_load import (
    CHARS,
    _fit_router,
    _free_port,
    _load_blocking,
    _start_server,
)


def _package_of(tree):
    """Where ``tree``'s interpreter setup imports locus_sklearn from."""
    env = {**os.environ, "PYTHONPATH": tree}
    return subprocess.run(
        [sys.executable, "-c", "import locus_sklearn; print(locus_sklearn.__file__)"],
        capture_output=True, text=True, check=True, env=env, cwd=tree,
    ).stdout.strip()  # fmt: skip


def _checked(port, queries, n_requests, offset=0):
    """ms per request (serve_load's blocking client); a failed request stops
    the comparison."""
    ms, failures = _load_blocking(port, queries, n_requests, offset)
    if failures:
        raise RuntimeError(f"{len(failures)} failed requests: {failures[:3]}")
    return ms


def _summary(ms):
    return {
        "p50_ms": float(np.percentile(ms, 50)),
        "p99_ms": float(np.percentile(ms, 99)),
        "mean_ms": float(ms.mean()),
        "requests": int(ms.size),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="git revision to compare with")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--threads", type=int, default=2, help="server torch threads")
    parser.add_argument("--text", action="store_true", help="text queries, encoded")
    parser.add_argument("--encoder-backend", choices=["torch", "onnx"], default="onnx")
    parser.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results"))
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.path.insert(0, ROOT)
    from locus_sklearn._encoders import _default_model_path

    base = short_revision(args.base)
    encoder = str(_default_model_path()) if args.text else None
    rounds = {"base": [], "this": []}
    with tempfile.TemporaryDirectory() as folder, base_worktree(base) as worktree:
        path = os.path.join(folder, "router.safetensors")
        _, queries = _fit_router(path)
        queries = [
            queries[i] for i in np.random.default_rng(0).permutation(len(queries))
        ]
        if args.text:
            queries = [q[:CHARS] for q in queries]
        trees = {"base": worktree, "this": ROOT}
        servers = {}
        try:
            for arm, tree in trees.items():
                package = _package_of(tree)
                if not package.startswith(os.path.realpath(tree)):
                    raise RuntimeError(f"{arm} imports {package}, not {tree}")
                port = _free_port()
                process = _start_server(
                    path, port, encoder, args.threads, args.encoder_backend, tree
                )
                servers[arm] = (process, port)
                _checked(port, queries, 30)  # warm up
            for round_ in range(args.rounds):
                for arm, (_, port) in servers.items():
                    ms = _checked(port, queries, args.requests, round_ * args.requests)
                    rounds[arm].append(_summary(ms) | {"ms": ms.round(3).tolist()})
                    print(
                        f"round {round_ + 1} {arm}: p50 {np.percentile(ms, 50):.2f} ms, "
                        f"p99 {np.percentile(ms, 99):.2f} ms",
                        flush=True,
                    )
        finally:
            for process, _ in servers.values():
                process.terminate()
                process.wait(30)
                os.remove(process.log_path)
    pooled = {
        arm: _summary(np.concatenate([r.pop("ms") for r in rows]))
        for arm, rows in rounds.items()
    }
    for arm, s in pooled.items():
        print(
            f"{arm}: p50 {s['p50_ms']:.2f} ms, p99 {s['p99_ms']:.2f} ms, "
            f"mean {s['mean_ms']:.2f} ms over {s['requests']} requests"
        )
    write_ab_result(
        args.out,
        "serve_ab_text.json" if args.text else "serve_ab.json",
        base,
        queries=f"text ({args.encoder_backend})" if args.text else "id",
        server_threads=args.threads,
        pooled=pooled,
        rounds=rounds,
    )


if __name__ == "__main__":
    main()
