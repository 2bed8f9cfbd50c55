"""Pools that outgrow one DataFrame: streaming transform from Parquet, joblib workers.

A synthetic pool (10,000 models x 1,024 evaluations = 10 M rows by default,
384-d precomputed query encodings, default LOCUS sizes with one-epoch weights)
is written to a Parquet file sorted by model in a temporary folder, then
embedded with ``locus_sklearn.parallel.transform_chunked`` straight from the
file, sequentially and with joblib workers (loky), and at a quarter and half of
the models to show that peak memory does not grow with the pool. Each run is a
fresh process; its peak memory is the largest RSS of the process and its
workers summed, sampled every 0.1 s. Scoring: ``predict_chunked`` routes many
queries over a pool of routed models, sequentially and in workers.

Usage: python benchmarks/scale.py [--quick] [--out benchmarks/results]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

import joblib
import numpy as np
import pandas as pd
from _args import positive_int
from _provenance import git_commit, machine_info

N_FEATURES = 384


def _query_names(n_queries):
    return np.array([f"q{i:06d}" for i in range(n_queries)], dtype=object)


def encodings(n_queries, seed=0):
    """Precomputed unit query encodings, {query: vector}."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n_queries, N_FEATURES)).astype(np.float32)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    return dict(zip(_query_names(n_queries), X, strict=True))


def pool_frames(n_models, n_evals, n_queries, seed=0, models_per_frame=500):
    """The synthetic pool as DataFrames of whole models, sorted by model."""
    rng = np.random.default_rng(seed)
    names = _query_names(n_queries)
    for start in range(0, n_models, models_per_frame):
        stop = min(start + models_per_frame, n_models)
        picks = np.concatenate(
            [rng.choice(n_queries, n_evals, replace=False) for _ in range(start, stop)]
        )
        yield pd.DataFrame(
            {
                "model": np.repeat(
                    [f"m{i:05d}" for i in range(start, stop)], n_evals
                ).astype(object),
                "query": names[picks],
                "score": rng.integers(0, 2, len(picks)).astype(np.float64),
            }
        )


def write_pool(path, n_models, n_evals, n_queries):
    """Write the pool to one Parquet file, a frame at a time (bounded memory)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    writer = None
    for frame in pool_frames(n_models, n_evals, n_queries):
        table = pa.Table.from_pandas(frame, preserve_index=False)
        if writer is None:
            writer = pq.ParquetWriter(path, table.schema)
        writer.write_table(table, row_group_size=128 * 1024)
    writer.close()


def make_embedder(mapping, n_queries, seed=0, **params):
    """Default-size LocusEmbedder, one short epoch (timing needs no training)."""
    from locus_sklearn import LocusEmbedder

    evals = next(pool_frames(32, 256, n_queries, seed=seed, models_per_frame=32))
    return LocusEmbedder(
        mapping,
        **params,
        max_epochs=1,
        episodes_per_epoch=32,
        validation_fraction=0.0,
        random_state=seed,
    ).fit(evals)


# ------------------------------------------------------------------ children
class PeakRSS:
    """Largest RSS of this process plus its children, sampled in a thread."""

    def __init__(self, interval=0.1):
        import psutil

        self.process = psutil.Process()
        self.interval = interval
        self.peak = 0
        self._stop = threading.Event()

    def _rss(self):
        total = self.process.memory_info().rss
        for child in self.process.children(recursive=True):
            try:
                total += child.memory_info().rss
            except Exception:  # noqa: BLE001 - a worker may exit meanwhile
                pass
        return total

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, self._rss())
            self._stop.wait(self.interval)

    def __enter__(self):
        self.peak = self._rss()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._rss())


def child_transform(args):
    """One streaming transform in this (fresh) process; prints a JSON line."""
    import torch

    from locus_sklearn.parallel import transform_chunked

    torch.set_num_threads(os.cpu_count() if args.n_jobs == 1 else 1)
    embedder = joblib.load(args.embedder)
    with PeakRSS() as rss:
        baseline = rss.peak
        start = time.perf_counter()
        Z, models = transform_chunked(
            embedder,
            args.parquet,
            chunk_models=args.chunk_models,
            n_jobs=args.n_jobs,
            return_models=True,
        )
        seconds = time.perf_counter() - start
    assert len(Z) == args.models and np.isfinite(Z).all()
    print(
        json.dumps(
            {
                "seconds": seconds,
                "baseline_rss_mb": baseline / 2**20,
                "peak_rss_mb": rss.peak / 2**20,
                "checksum": float(np.abs(Z).sum()),
            }
        )
    )


def child_route(args):
    """Route queries over a pool with predict_chunked; prints a JSON line."""
    import torch
    from sklearn.frozen import FrozenEstimator

    from locus_sklearn import LocusRouter
    from locus_sklearn.parallel import predict_chunked

    torch.set_num_threads(os.cpu_count() if args.n_jobs == 1 else 1)
    # Fitted with the embedding-only predictor: scoring reads the embeddings.
    # shrinkage=None: "auto" may choose 1 on these random scores, and a router
    # at 1 answers every query with the mean scores without the network.
    embedder = joblib.load(args.embedder)
    evals = pd.concat(pool_frames(args.models, 256, args.queries, seed=1))
    router = LocusRouter(FrozenEstimator(embedder), shrinkage=None).fit(evals)
    queries = _query_names(args.queries)
    times = []
    # The first call starts the workers (each imports torch); loky keeps them
    # for later calls of the same process.
    for _ in range(2):
        start = time.perf_counter()
        predict_chunked(router, queries, chunk_queries=2048, n_jobs=args.n_jobs)
        times.append(time.perf_counter() - start)
    print(json.dumps({"seconds": times[1], "first_call_seconds": times[0]}))


def _run_child(argv):
    out = subprocess.run(
        [sys.executable, __file__, *argv],
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode:
        raise RuntimeError(f"child {argv} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------- main
def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, seconds")
    parser.add_argument("--out", default=None, help="folder for scale.{md,json}")
    parser.add_argument(
        "--chunk-models",
        type=positive_int,
        default=None,
        help="models per chunk of the streaming transform (default 1000, "
        "100 with --quick)",
    )
    # The options of the child processes the run starts, not of a run.
    hidden = argparse.SUPPRESS
    parser.add_argument("--child", choices=["transform", "route"], help=hidden)
    parser.add_argument("--embedder", help=hidden)
    parser.add_argument("--parquet", help=hidden)
    parser.add_argument("--models", type=positive_int, help=hidden)
    parser.add_argument("--queries", type=positive_int, help=hidden)
    parser.add_argument("--n-jobs", type=positive_int, help=hidden)
    args = parser.parse_args(argv)
    child_only = ("embedder", "parquet", "models", "queries", "n_jobs")
    if args.child is None:
        given = [f"--{k.replace('_', '-')}" for k in child_only if getattr(args, k)]
        if given:
            parser.error(
                f"{', '.join(given)}: options of the child processes (--child), "
                "not of a run; use --quick, --chunk-models and --out"
            )
    if args.child == "transform":
        return child_transform(args)
    if args.child == "route":
        return child_route(args)

    if args.quick:
        n_evals, n_queries, sizes, full = 256, 4000, [200, 400], 800
        chunk_models, route_models, route_queries = 100, 100, 4000
    else:
        n_evals, n_queries, sizes, full = 1024, 20000, [2500, 5000], 10000
        chunk_models, route_models, route_queries = 1000, 1000, 20000
    chunk_models = args.chunk_models or chunk_models
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        mapping = encodings(n_queries)
        embedder_path = os.path.join(tmp, "embedder.joblib")
        joblib.dump(make_embedder(mapping, n_queries), embedder_path)
        router_embedder_path = os.path.join(tmp, "embedder_routing.joblib")
        joblib.dump(
            make_embedder(mapping, n_queries, kernel_readout=False),
            router_embedder_path,
        )
        del mapping
        runs = [(n, 1) for n in sizes] + [(full, 1), (full, 2)]
        files = {}
        for n_models, n_jobs in runs:
            if n_models not in files:
                path = os.path.join(tmp, f"pool_{n_models}.parquet")
                start = time.perf_counter()
                write_pool(path, n_models, n_evals, n_queries)
                print(
                    f"wrote {n_models} x {n_evals} to Parquet "
                    f"({os.path.getsize(path) / 2**20:.0f} MB) in "
                    f"{time.perf_counter() - start:.0f} s",
                    flush=True,
                )
                files[n_models] = path
            result = _run_child(
                ["--child", "transform", "--embedder", embedder_path,
                 "--parquet", files[n_models], "--models", str(n_models),
                 "--n-jobs", str(n_jobs), "--chunk-models", str(chunk_models)]
            )  # fmt: skip
            row = {
                "work": "transform_chunked from Parquet",
                "models": n_models,
                "evals_per_model": n_evals,
                "rows": n_models * n_evals,
                "chunk_models": chunk_models,
                "n_jobs": n_jobs,
                **result,
            }
            rows.append(row)
            print(
                f"transform {n_models:6d} x {n_evals} (chunks of {chunk_models}, "
                f"n_jobs={n_jobs}): {row['seconds']:6.1f} s, "
                f"{row['rows'] / row['seconds'] / 1e3:5.0f} k rows/s, peak RSS "
                f"{row['peak_rss_mb']:5.0f} MB (at start {row['baseline_rss_mb']:.0f})",
                flush=True,
            )
        for n_jobs in (1, 2):
            result = _run_child(
                ["--child", "route", "--embedder", router_embedder_path,
                 "--models", str(route_models), "--queries", str(route_queries),
                 "--n-jobs", str(n_jobs)]
            )  # fmt: skip
            rows.append(
                {
                    "work": "predict_chunked (embedding-only predictor)",
                    "models": route_models,
                    "queries": route_queries,
                    "n_jobs": n_jobs,
                    **result,
                }
            )
            print(
                f"route {route_queries} queries over {route_models} models "
                f"(n_jobs={n_jobs}): {result['seconds']:.1f} s (first call, "
                f"starting the workers: {result['first_call_seconds']:.1f} s)",
                flush=True,
            )
    checks = {
        r["checksum"] for r in rows if r.get("models") == full and "checksum" in r
    }
    assert len(checks) == 1 or np.allclose(list(checks), min(checks), rtol=1e-5)
    result = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "commit": git_commit(),
        "machine": machine_info(load_average_at_end=os.getloadavg()),
        "quick": args.quick,
        "rows": rows,
    }
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(
            os.path.join(args.out, "scale.json"), "w", encoding="utf-8"
        ) as handle:
            json.dump(result, handle, indent=2)
        with open(os.path.join(args.out, "scale.md"), "w", encoding="utf-8") as handle:
            handle.write(_markdown(result))
        print(f"wrote {args.out}/scale.{{json,md}}")
    return result


def _markdown(result):
    lines = [
        "# Large pools: streaming transform and joblib workers",
        "",
        f"{result['date']}, commit {result['commit']}, "
        f"{result['machine']['processor']} with {result['machine']['cores']} cores "
        f"(load average at the end: "
        f"{', '.join(f'{v:.1f}' for v in result['machine']['load_average_at_end'])}). "
        "`python benchmarks/scale.py --out benchmarks/results`.",
        "",
        "| work | models | rows | n_jobs | seconds | peak RSS (MB) | RSS at start (MB) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        if "rows" in r:
            lines.append(
                f"| {r['work']} (chunks of {r['chunk_models']}) | {r['models']:,} | "
                f"{r['rows']:,} | {r['n_jobs']} | {r['seconds']:.1f} | "
                f"{r['peak_rss_mb']:.0f} | {r['baseline_rss_mb']:.0f} |"
            )
        else:
            lines.append(
                f"| {r['work']}, {r['queries']:,} queries (first call: "
                f"{r['first_call_seconds']:.1f} s) | {r['models']:,} | – | "
                f"{r['n_jobs']} | {r['seconds']:.1f} | – | – |"
            )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
