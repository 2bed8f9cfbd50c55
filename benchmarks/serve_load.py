"""Bounded load test of ``locus serve`` on loopback.

Fits a small LocusRouter on the built-in MMLU-Pro subset (32 models), saves it
and serves it with ``python -m locus_sklearn.serve serve`` in a subprocess,
twice: with precomputed query encodings (each query is looked up, so the
encoder costs nothing) and with the default MiniLM encoder on the query text.
For each, a fixed number of single-query ``POST /route`` requests is sent by
1, 8 and 64 concurrent clients (asyncio + httpx in this process, and again
from as many threads of the standard library's blocking ``http.client``, a
lighter load generator); the run stops by itself. Reported: sustained routed
queries per second, p50 / p99 latency, failed requests, the mean micro-batch
size (from ``/healthz``), and, measured in the same run, the encoder alone (MiniLM ``transform`` at batch 1,
8 and 64) and the whole in-process router (``predict_proba`` on text), whose
throughput bounds the service's. Writes ``results/serve_load.md`` and
``results/serve_load.json`` (``serve_load_threads{N}.*`` with ``--threads N``;
``--out DIR`` for another folder).

``--encoder-backend torch onnx`` measures the text runs and the bounds once per
query-encoder backend (``QueryEncoder(backend=...)``, ``locus serve
--encoder-backend``) in the same run, side by side; the files then end in
``_onnx`` when ONNX Runtime is among them.

Run: ``HF_HUB_OFFLINE=1 python benchmarks/serve_load.py`` (about 3-5 minutes
on 2 cores; ``--quick`` for a smoke run).
"""

import argparse
import asyncio
import datetime
import http.client
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
from _args import positive_int
from _provenance import cpu_model, git_commit

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RESULTS = os.path.join(HERE, "results")
CLIENTS = (1, 8, 64)
CHARS = 300
# One torch thread in the server and the in-process bounds by default: on a
# CPU shared with other processes, OpenMP spin-waiting makes two threads
# slower than one (``--threads`` for a quiet machine). Runs before the server
# got ``--threads`` here (the serve_load.md of 2026-11-30, since replaced by a
# one-thread run) served with torch's default, one thread per core; only
# their in-process bounds had one.
THREADS = 1


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _fit_router(path):
    from locus_sklearn import LocusEmbedder, LocusRouter
    from locus_sklearn.datasets import load_mmlu_pro

    data = load_mmlu_pro()
    router = LocusRouter(
        LocusEmbedder(
            data.encodings,
            embedding_dim=32,
            n_latents=8,
            n_blocks=1,
            max_epochs=2,
            episodes_per_epoch=64,
            random_state=0,
        )
    ).fit(data.evals)
    router.save(path)
    return router, list(data.evals["query"].unique())


def _time_calls(fn, batches, repeat=1):
    """Queries per second and seconds per call of ``fn`` over ``batches``."""
    fn(batches[0])  # warm up
    start = time.perf_counter()
    for _ in range(repeat):
        for batch in batches:
            fn(batch)
    elapsed = time.perf_counter() - start
    n = repeat * sum(len(b) for b in batches)
    return n / elapsed, elapsed / (repeat * len(batches))


def _bounds(router_path, texts, quick, backend="torch"):
    """In-process throughput of the encoder alone and of the whole router."""
    from locus_sklearn import LocusRouter, QueryEncoder
    from locus_sklearn._encoders import _default_model_path

    encoder = QueryEncoder(_default_model_path(), device="cpu", backend=backend).fit()
    router = LocusRouter.load(router_path, encoder=encoder, device="cpu")
    out = {}
    for size in (1, 8, 64):
        n_batches = {1: 12, 8: 4, 64: 2}[size] // (2 if quick else 1)
        batches = [
            texts[(i * size) % len(texts) : (i * size) % len(texts) + size]
            for i in range(1, n_batches + 1)
        ]
        qps, per_call = _time_calls(encoder.transform, batches)
        out[f"encoder_b{size}"] = {"qps": qps, "ms_per_call": per_call * 1000}
        qps, per_call = _time_calls(router.predict_proba, batches)
        out[f"router_b{size}"] = {"qps": qps, "ms_per_call": per_call * 1000}
    return out


def _start_server(
    router_path, port, encoder, threads=THREADS, backend="torch", tree=ROOT
):
    """``locus serve`` in a subprocess, running the package of checkout ``tree``."""
    command = [
        sys.executable,
        "-m",
        "locus_sklearn.serve",
        "serve",
        router_path,
        "--port",
        str(port),
        "--log-level",
        "warning",
        "--device",
        "cpu",
        "--threads",
        str(threads),
    ]
    if encoder:
        command += ["--encoder", encoder, "--encoder-backend", backend]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": tree}
    # The server's log goes to a file: a pipe nobody reads could fill and
    # block it. cwd=tree: ``python -m`` puts the working directory first on
    # sys.path, ahead of PYTHONPATH.
    log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
    process = subprocess.Popen(
        command, env=env, stderr=log, stdout=log, text=True, cwd=tree
    )
    process.log_path = log.name
    import httpx

    for _ in range(1200):
        if process.poll() is not None:
            with open(log.name, encoding="utf-8", errors="replace") as f:
                raise RuntimeError(f"server exited: {f.read()[-2000:]}")
        try:
            if (
                httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code
                == 200
            ):
                return process
        except httpx.HTTPError:
            time.sleep(0.1)
    process.terminate()
    raise RuntimeError("server did not start within 120 s")


async def _load(url, queries, n_requests, concurrency):
    import httpx

    latencies, failures = [], []
    counter = iter(range(n_requests))
    limits = httpx.Limits(
        max_connections=concurrency, max_keepalive_connections=concurrency
    )
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as client:

        async def worker():
            for i in counter:
                body = {"query": queries[i % len(queries)], "return_proba": False}
                start = time.perf_counter()
                try:
                    r = await client.post("/route", json=body)
                    if r.status_code != 200:
                        failures.append(f"HTTP {r.status_code}: {r.text[:200]}")
                except httpx.HTTPError as exc:
                    failures.append(type(exc).__name__)
                latencies.append(time.perf_counter() - start)

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.perf_counter() - start
    return _row("httpx", concurrency, np.array(latencies) * 1000, failures, wall)


def _row(client, clients, latencies_ms, failures, wall):
    """One load run's row: throughput, p50 / p99 latency and failures."""
    n_requests = len(latencies_ms)
    return {
        "clients": clients,
        "client": client,
        "requests": n_requests,
        "failed": len(failures),
        "failures": sorted(set(map(str, failures)))[:5],
        "qps": n_requests / wall,
        "p50_ms": float(np.percentile(latencies_ms, 50)),
        "p99_ms": float(np.percentile(latencies_ms, 99)),
        "wall_s": wall,
    }


def _load_blocking(port, queries, n_requests, offset=0, concurrency=1):
    """``concurrency`` clients, each a thread with one kept-alive connection
    of the standard library's blocking ``http.client`` (which costs the
    shared cores less per request than an asyncio client), taking requests
    ``offset``, ``offset + 1``, ... in turn: ms per request and the
    failures."""
    requests = iter(range(n_requests))
    lock = threading.Lock()
    latencies, failures = [], []

    def client():
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        try:
            while True:
                with lock:
                    i = next(requests, None)
                if i is None:
                    return
                query = queries[(offset + i) % len(queries)]
                body = json.dumps({"query": query, "return_proba": False})
                start = time.perf_counter()
                try:
                    connection.request(
                        "POST", "/route", body, {"Content-Type": "application/json"}
                    )
                    response = connection.getresponse()
                    payload = response.read()
                    if response.status != 200:
                        failures.append(f"HTTP {response.status}: {payload[:200]!r}")
                except (OSError, http.client.HTTPException) as exc:
                    failures.append(type(exc).__name__)
                    connection.close()  # reconnects on the next request
                latencies.append(time.perf_counter() - start)
        finally:
            connection.close()

    threads = [threading.Thread(target=client) for _ in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return np.array(latencies) * 1000, failures


def _blocking_row(port, queries, n_requests, concurrency=1):
    start = time.perf_counter()
    lat, failures = _load_blocking(port, queries, n_requests, concurrency=concurrency)
    return _row("http.client", concurrency, lat, failures, time.perf_counter() - start)


def _run_mode(
    router_path, queries, encoder, counts, clients=CLIENTS, threads=THREADS,
    backend="torch",
):  # fmt: skip
    import httpx

    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    process = _start_server(router_path, port, encoder, threads, backend)
    rows = []
    try:
        asyncio.run(_load(url, queries, 10, 1))  # warm up
        for n_clients in clients:
            n = counts[n_clients]
            # The same requests from a lighter client, threads of http.client:
            # what the server takes, with less of the load generator's own
            # work. At 64 clients the asyncio one can also starve the server:
            # it kept 64 requests in flight while the server's queue held 0-11
            # of them (micro-batches of about 3 instead of 30).
            runs = [
                lambda c=n_clients, n=n: asyncio.run(_load(url, queries, n, c)),
                lambda c=n_clients, n=n: _blocking_row(port, queries, n, c),
            ]
            for run in runs:
                before = httpx.get(f"{url}/healthz").json()["batching"]
                row = run()
                after = httpx.get(f"{url}/healthz").json()["batching"]
                batches = after["batches"] - before["batches"]
                row["mean_batch"] = (after["queries"] - before["queries"]) / max(
                    batches, 1
                )
                rows.append(row)
                print(
                    f"  {n_clients:>2} clients ({row['client']}): {row['qps']:7.1f} q/s"
                    f"  p50 {row['p50_ms']:6.1f} ms  p99 {row['p99_ms']:6.1f} ms"
                    f"  batch {row['mean_batch']:4.1f}"
                    f"  failed {row['failed']} {row['failures']}",
                    flush=True,
                )
    finally:
        process.terminate()
        process.wait(30)
        with open(process.log_path, encoding="utf-8", errors="replace") as f:
            errors = [line for line in f if "Error" in line or "error" in line]
        if errors:
            print("  server log:", *errors[-10:], sep="\n    ", flush=True)
        os.remove(process.log_path)
    return rows


def _markdown(result):
    backends = result.get("encoder_backends", ["torch"])
    lines = [
        "# `locus serve` load test (benchmarks/serve_load.py)",
        "",
        f"Date {result['date']}, commit `{result['commit']}`, {result['machine']}; "
        f"load average before the run {result['load_average']}.",
        "",
        "Single-query `POST /route` requests on 127.0.0.1 from asyncio + httpx clients "
        "in the same machine (they share its CPUs with the server); each run is "
        "repeated from threads of the standard library's blocking `http.client` "
        "(`N, http.client`: N threads, one kept-alive connection each), a lighter "
        "client, so that less of the load generator's own work is in the latency. "
        "Router: LocusRouter "
        "on the built-in MMLU-Pro subset (32 models), kernel readout. `id`: queries "
        "resolved from precomputed encodings; `text`: MiniLM encodes each query, "
        f"the first {result['text_chars']} characters of an MMLU-Pro question (a "
        "chat-length query); `text_full`: the whole question with its ten options "
        "(median 480, 90th percentile 1,300 characters; MiniLM reads 256 tokens). "
        "Encoder backend: `torch` (PyTorch) or `onnx` (`--encoder-backend onnx`, "
        "ONNX Runtime on the CPU; the same encodings to 1e-6).",
        "",
        "| queries | encoder | clients | requests | failed | routed q/s | p50 ms "
        "| p99 ms | mean batch | ratio to bound |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    modes = [("id", "id", "–")]
    for backend in backends:
        suffix = "" if backend == "torch" else f"/{backend}"
        modes += [
            (f"text{suffix}", "text", backend),
            (f"text_full{suffix}", "text_full", backend),
        ]
    for key, mode, backend in modes:
        for row in result[key]:
            ratio = ""
            if mode == "text":
                ratio = f"{row['ratio_to_encoder']:.2f}"
            # Runs of before the http.client rows have no "client".
            clients = row["clients"]
            if row.get("client", "httpx") != "httpx":
                clients = f"{clients}, {row['client']}"
            lines.append(
                f"| {mode} | {backend} | {clients} | {row['requests']} | "
                f"{row['failed']} | {row['qps']:.1f} | {row['p50_ms']:.1f} | "
                f"{row['p99_ms']:.1f} | {row['mean_batch']:.1f} | {ratio} |"
            )
    lines += [
        "",
        "In-process bounds, same run (queries per second; ms per call):",
        "",
        "| encoder | batch | MiniLM encoder alone | whole router (encode + "
        "predict_proba) |",
        "|---|---|---|---|",
    ]
    for backend in backends:
        b = result["bounds" if backend == "torch" else f"bounds/{backend}"]
        for size in (1, 8, 64):
            e, r = b[f"encoder_b{size}"], b[f"router_b{size}"]
            lines.append(
                f"| {backend} | {size} | {e['qps']:.1f} q/s; {e['ms_per_call']:.1f} ms | "
                f"{r['qps']:.1f} q/s; {r['ms_per_call']:.1f} ms |"
            )
    lines += [
        "",
        "Ratio to bound: served text q/s divided by the encoder-alone q/s at the "
        "batch size the service reached (1 client: batch 1; 8 clients: batch 8; "
        "64 clients: batch 64), of the same encoder backend.",
        "",
    ]
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run")
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument(
        "--out",
        default=RESULTS,
        help="folder of the results (a --quick run writes nothing)",
    )
    parser.add_argument(
        "--threads",
        type=positive_int,
        default=THREADS,
        help="torch threads of the server and the in-process bounds",
    )
    parser.add_argument(
        "--encoder-backend",
        nargs="+",
        choices=["torch", "onnx"],
        default=["torch"],
        help="query-encoder backends to measure, side by side (default: torch)",
    )
    args = parser.parse_args(argv)
    write = not args.no_write and not args.quick
    if write:  # before the run: a folder that cannot be made must not lose it
        os.makedirs(args.out, exist_ok=True)
    backends = list(dict.fromkeys(args.encoder_backend))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.path.insert(0, ROOT)
    import torch

    torch.set_num_threads(args.threads)
    from locus_sklearn._encoders import _default_model_path

    load_average = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    scale = 0.25 if args.quick else 1.0
    id_counts = {c: int(n * scale) for c, n in {1: 300, 8: 600, 64: 1200}.items()}
    text_counts = {c: int(n * scale) for c, n in {1: 300, 8: 160, 64: 384}.items()}
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "router.safetensors")
        start = time.perf_counter()
        _, queries = _fit_router(path)
        print(f"fitted the router in {time.perf_counter() - start:.0f} s", flush=True)
        rng = np.random.default_rng(0)
        queries = [queries[i] for i in rng.permutation(len(queries))]
        # Chat-length text queries: MMLU-Pro questions with their ten options
        # run to 480 characters at the median and 1,300 at the 90th
        # percentile; the text runs use their first CHARS characters.
        texts = [q[:CHARS] for q in queries]
        print("id queries:", flush=True)
        id_rows = _run_mode(path, queries, None, id_counts, threads=args.threads)
        per_backend = {}
        for backend in backends:
            suffix = "" if backend == "torch" else f"/{backend}"
            bounds = _bounds(path, texts, args.quick, backend)
            print(f"bounds{suffix}:", json.dumps(bounds), flush=True)
            print(f"text queries{suffix}:", flush=True)
            text_rows = _run_mode(
                path, texts, _default_model_path(), text_counts,
                threads=args.threads, backend=backend,
            )  # fmt: skip
            print(f"full-length text queries{suffix}, 1 client:", flush=True)
            full_rows = _run_mode(
                path, queries, _default_model_path(), {1: text_counts[1] // 2},
                clients=(1,), threads=args.threads, backend=backend,
            )  # fmt: skip
            for row in text_rows:
                size = {1: 1, 8: 8, 64: 64}[row["clients"]]
                row["ratio_to_encoder"] = row["qps"] / bounds[f"encoder_b{size}"]["qps"]
            per_backend |= {
                f"bounds{suffix}": bounds,
                f"text{suffix}": text_rows,
                f"text_full{suffix}": full_rows,
            }
    import torch

    result = {
        "date": datetime.date.today().isoformat(),
        "commit": git_commit(),
        "machine": f"{cpu_model()}, {os.cpu_count()} CPUs, "
        f"{platform.python_implementation()} {platform.python_version()}, "
        f"torch {torch.__version__} ({torch.get_num_threads()} threads)",
        "load_average": load_average,
        "encoder_backends": backends,
        "id": id_rows,
        **per_backend,
        "text_chars": CHARS,
    }
    text = _markdown(result)
    print(text)
    if write:
        name = (
            "serve_load"
            + ("" if args.threads == THREADS else f"_threads{args.threads}")
            + ("_onnx" if "onnx" in backends else "")
        )
        with open(os.path.join(args.out, f"{name}.json"), "w", encoding="utf-8") as f:
            json.dump(result, f, indent=2)
        with open(os.path.join(args.out, f"{name}.md"), "w", encoding="utf-8") as f:
            f.write(text)
    return result


if __name__ == "__main__":
    main()
