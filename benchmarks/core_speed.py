"""Speed of the LOCUS core on this machine: embedding, routing and fitting.

Measures, with random weights and synthetic data (384-d query encodings):
- transform: embed 112 models x 4,096 evaluations each in one call (float32 and
  bfloat16), against the float32 FLOP floor measured with a torch matmul;
- predict_proba: 4,096 queries x 112 models with precomputed encodings, with
  the paper's embedding-only predictor and with the default kernel readout
  (which reads every stored evaluation), with the pool's readout data kept
  (as LocusRouter does) and rebuilt per call; the readout at 10,000 models
  is in ``benchmarks/readout_scale.py``;
- growth at 2x and 4x the evaluations and the models (should be linear);
- fit: 112 models x 1,024 evaluations each to early stopping (``--fit``);
- fit scaling (``--fit-scaling``): a fixed number of epochs at 1x, 2x and 4x
  the models, the evaluations per model and the queries of a small base pool,
  each fit in a fresh process (time and its own peak memory), with the fitted
  log-log slope per axis (1 is linear);
- transform per ``transform_batch_tokens`` and chunking (``--batch-sweep``),
  float32 and bfloat16, at 112 x 4,096;
- refinement (``--refine``): transform with ``refine_steps=10`` (Gauss-Newton
  steps; each model stops at convergence) against the
  encoder's pass alone, at 71 models x 256 evaluations (BFCL's pool at the
  embedding benchmark's size) and 112 x 1,024.
Prints medians over repeats, ratios to the FLOP floor measured in the same run
and peak memory (RSS), and writes JSON. A run without ``--fit``,
``--fit-scaling`` or ``--refine`` keeps those sections of the JSON it
replaces, named under ``earlier_sections`` with the date, commit and
machine of the run that measured them.

With ``--device cuda`` every section runs on the GPU (timers synchronise
with it; the floors are that GPU's matmul rates) and the JSON is written as
``core_speed_cuda.json`` beside the CPU's ``core_speed.json``.

Usage: python benchmarks/core_speed.py [--fit] [--fit-scaling] [--refine]
       [--batch-sweep] [--repeats 3] [--device cpu] [--out benchmarks/results]
"""

import argparse
import functools
import json
import os
import resource
import subprocess
import sys
import time

import numpy as np
import pandas as pd
import torch
from _args import positive_int
from _provenance import git_commit, machine_info

from locus_sklearn import LocusEmbedder
from locus_sklearn._device import resolve_device
from locus_sklearn._evals import check_evals
from locus_sklearn._refinement import embedding_scale
from locus_sklearn._training import build_net

N_FEATURES = 384
# Where every section runs: set once by ``--device`` before any section.
DEVICE = "cpu"


def _synchronize():
    """Wait for the GPU's queued work: its calls return before it is done."""
    if torch.device(DEVICE).type == "cuda":
        torch.cuda.synchronize(DEVICE)


def _median_time(fn, repeats):
    times = []
    for _ in range(repeats):
        _synchronize()
        start = time.perf_counter()
        fn()
        _synchronize()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def _peak_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def matmul_gflops(dtype, n=2048, repeats=5):
    a = torch.randn(n, n, dtype=dtype, device=DEVICE)
    b = torch.randn(n, n, dtype=dtype, device=DEVICE)
    a @ b
    t = _median_time(lambda: a @ b, repeats)
    return 2 * n**3 / t / 1e9


def encoder_flops_per_token(d=128, r=64, n_blocks=2):
    """Multiply-adds x2 per evaluation token, tokenizer factorised away."""
    per_block = (
        2 * d * d  # K, V projections of the tokens for the compress step
        + 2 * r * d  # compress attention: scores and weighted sum against r latents
        + d * d  # Q projection of the tokens for the broadcast step
        + 2 * r * d  # broadcast attention
        + d * d  # output projection
        + 4 * d * d  # FFN d -> 2d -> d
    )
    pool = 2 * d * d  # K, V projections for the pooling step
    return 2 * (n_blocks * per_block + pool)


def fitted_random_embedder(n_features=N_FEATURES, device=None, **params):
    """An embedder with random weights (seeded), ready to transform (no
    training), on ``device`` (default: ``--device``)."""
    device = device or DEVICE
    embedder = LocusEmbedder(device=device, **params)
    net = build_net(embedder._saved_params(), n_features, device=device)
    torch.manual_seed(0)
    net.initialize()
    net.module_.eval()
    embedder.net_ = net
    embedder.n_query_features_ = n_features
    embedder.classes_ = np.array([], dtype=object)
    embedder.n_epochs_ = 0
    return embedder


def synthetic_table(n_models, n_evals, n_queries, seed=0):
    rng = np.random.default_rng(seed)
    models = np.repeat([f"m{i:05d}" for i in range(n_models)], n_evals)
    queries = np.concatenate(
        [rng.choice(n_queries, n_evals, replace=False) for _ in range(n_models)]
    )
    evals = pd.DataFrame(
        {
            "model": models,
            "query": [f"q{i:06d}" for i in queries],
            "score": rng.integers(0, 2, len(models)).astype(float),
        }
    )
    table = check_evals(evals)
    X = rng.normal(size=(table.n_queries, N_FEATURES)).astype(np.float32)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    return evals, table, X


def bench_transform(repeats, floors, time_bfloat16=True):
    """Transform times (s); ``floors`` maps dtype -> FLOP floor (s) of 112 x 4096.

    Without ``time_bfloat16`` (a CPU without bfloat16 matrix units, where a
    bfloat16 matmul runs at a fraction of a GFLOP/s) the bfloat16 path is not
    timed; its accuracy is still measured, on 16 models x 512 evaluations.
    """
    embedder = fitted_random_embedder()
    rows = {}
    for n_models, n_evals in [
        (112, 4096),
        (224, 4096),
        (448, 4096),
        (112, 8192),
        (112, 16384),
    ]:
        _, table, X = synthetic_table(n_models, n_evals, max(2 * n_evals, 12000))
        for dtype in ("float32", "bfloat16"):
            if dtype == "bfloat16" and (
                not time_bfloat16 or (n_models, n_evals) != (112, 4096)
            ):
                continue
            embedder.inference_dtype = dtype
            embedder._transform_encoded(table, X)  # warm-up
            t = _median_time(
                lambda t=table, x=X: embedder._transform_encoded(t, x), repeats
            )
            rows[f"{n_models}x{n_evals}/{dtype}"] = t
            ratio = t / (floors[dtype] * n_models * n_evals / (112 * 4096))
            print(
                f"transform {n_models:4d} models x {n_evals:5d} evals [{dtype}]: "
                f"{t:.2f} s, {ratio:.2f}x the floor"
            )
    embedder.inference_dtype = "float32"
    _, table, X = synthetic_table(112, 4096, 12000)
    # Before issue 14: the module-by-module path at the old default batch.
    encoder = embedder.net_.module_.encoder
    batch = embedder.transform_batch_tokens
    encoder.forward = lambda *args: encoder.forward_plain(*args[:4])  # no tables
    embedder.transform_batch_tokens = 262144
    embedder._transform_encoded(table, X)
    t = _median_time(lambda: embedder._transform_encoded(table, X), repeats)
    del encoder.forward
    embedder.transform_batch_tokens = batch
    rows["112x4096/float32/module_path_262144"] = t
    print(
        f"transform  112 models x  4096 evals [float32, module path, 262144 "
        f"tokens per pass, as before issue 14]: {t:.2f} s, "
        f"{t / floors['float32']:.2f}x the floor"
    )
    if not time_bfloat16:
        _, table, X = synthetic_table(16, 512, 12000)
    z32 = embedder._transform_encoded(table, X)
    embedder.inference_dtype = "bfloat16"
    z16 = embedder._transform_encoded(table, X)
    rel = float(np.max(np.linalg.norm(z16 - z32, axis=1) / np.linalg.norm(z32, axis=1)))
    print(f"bfloat16 vs float32: max relative embedding difference {rel:.4f}")
    return rows, rel


def bench_batch_sweep(repeats, floors):
    """Transform 112 x 4,096 per ``transform_batch_tokens`` and chunking.

    "chunked" streams each pass in the CPU's cache-sized chunks of 8,192
    tokens (the CPU's path, and the GPU's before ``transform_batch_tokens``
    became "auto"); "whole pass" runs each pass in one chunk (the GPU's path
    now).
    """
    embedder = fitted_random_embedder()
    encoder = embedder.net_.module_.encoder
    _, table, X = synthetic_table(112, 4096, 12000)
    rows = {}
    for chunking, chunk in (("chunked", 8192), ("whole pass", sys.maxsize)):
        encoder.forward_inference = functools.partial(
            type(encoder).forward_inference, encoder, chunk_tokens=chunk
        )
        for dtype in ("float32", "bfloat16"):
            embedder.inference_dtype = dtype
            for batch in (16384, 65536, 262144, 1048576):
                embedder.transform_batch_tokens = batch
                embedder._transform_encoded(table, X)
                t = _median_time(lambda: embedder._transform_encoded(table, X), repeats)
                rows[f"{chunking}/{dtype}/{batch}"] = t
                print(
                    f"transform 112 x 4096 [{dtype}, {batch} tokens per pass, "
                    f"{chunking}]: {t * 1000:.1f} ms, {t / floors[dtype]:.1f}x the floor"
                )
        del encoder.forward_inference
    return rows


def bench_refine(repeats, steps=10):
    """Seconds of ``transform`` with ``refine_steps=steps`` and without, per
    pool size; the step unit is the pool's own spread, as a fit sets it."""
    embedder = fitted_random_embedder()
    out = {}
    # 112 x 4,096 is the transform target's size (issue 14).
    for n_models, n_evals in [(71, 256), (112, 1024), (112, 4096)]:
        _, table, X = synthetic_table(n_models, n_evals, 12000)
        embedder.refine_steps = 0
        embedder.embedding_scale_ = embedding_scale(
            embedder._transform_encoded(table, X)
        )
        encoder = _median_time(
            lambda t=table, x=X: embedder._transform_encoded(t, x), repeats
        )
        embedder.refine_steps = steps
        refined = _median_time(
            lambda t=table, x=X: embedder._transform_encoded(t, x), repeats
        )
        out[f"{n_models}x{n_evals}"] = {"encoder": encoder, f"refined_{steps}": refined}
        print(
            f"transform {n_models:4d} models x {n_evals:5d} evals: encoder {encoder:.2f} s, "
            f"refined (at most {steps} steps) {refined:.2f} s, {refined / encoder:.1f}x"
        )
    return out


def bench_predict(repeats):
    # The paper's predictor reads the embeddings only: the latency target.
    embedder = fitted_random_embedder(kernel_readout=False)
    rng = np.random.default_rng(0)
    out = {}
    for n_queries, n_models in [(4096, 112), (8192, 112), (4096, 224), (4096, 448)]:
        Z = rng.normal(size=(n_models, 128)).astype(np.float32)
        X = rng.normal(size=(n_queries, N_FEATURES)).astype(np.float32)
        embedder._predict_proba_encoded(Z, X)
        t = _median_time(
            lambda z=Z, x=X: embedder._predict_proba_encoded(z, x), repeats
        )
        out[f"{n_queries}x{n_models}"] = t
        print(
            f"predict_proba {n_queries} queries x {n_models} models: {t * 1000:.0f} ms"
        )
    # The unfactorised way: expand every (query, model) pair, then the MLP.
    module = embedder.net_.module_
    Z = torch.as_tensor(rng.normal(size=(112, 128)).astype(np.float32)).to(DEVICE)
    X = torch.as_tensor(rng.normal(size=(4096, N_FEATURES)).astype(np.float32))
    X = X.to(DEVICE)
    pairs = torch.arange(4096, device=DEVICE).expand(112, 4096)

    def expanded():
        with torch.inference_mode():
            # The network's per-pair forward path (training's), on all pairs.
            return module.predictor(Z, X, pairs)

    t = _median_time(expanded, max(1, repeats // 2))
    out["4096x112/expanded"] = t
    print(f"predict_proba, every pair expanded: {t * 1000:.0f} ms")
    # The default predictor also reads a kernel readout of every stored
    # evaluation: linear in the pool's evaluations, like a kNN router. A
    # router builds what the readout reads from the pool once (its
    # ReadoutPool, kept until the pool changes); "uncached" rebuilds it per
    # call, as the embedder's predict_proba(..., evals=) does.
    readout = fitted_random_embedder()
    Z = rng.normal(size=(112, 128)).astype(np.float32)
    X = rng.normal(size=(4096, N_FEATURES)).astype(np.float32)
    for n_evals in (256, 1024, 4096):
        _, table, bank = synthetic_table(112, n_evals, 12000)
        start = time.perf_counter()
        pool = readout._readout_pool(bank, table)
        out[f"readout_pool_build/{n_evals}evals"] = time.perf_counter() - start
        t = _median_time(
            lambda p=pool: readout._predict_proba_encoded(Z, X, p), repeats
        )
        out[f"4096x112/readout/{n_evals}evals"] = t
        memory = (bank, table)
        t_uncached = _median_time(
            lambda m=memory: readout._predict_proba_encoded(Z, X, m),
            max(1, repeats // 2),
        )
        out[f"4096x112/readout_uncached/{n_evals}evals"] = t_uncached
        print(
            f"predict_proba 4096 queries x 112 models, kernel readout over "
            f"{n_evals} evals per model: {t * 1000:.0f} ms with the pool kept "
            f"({'sparse' if pool.is_sparse else 'dense'}), "
            f"{t_uncached * 1000:.0f} ms rebuilding it"
        )
    return out


def bench_fit():
    from locus_sklearn.datasets import make_model_pool

    pool = make_model_pool(
        n_models=112,
        n_queries=8000,
        evals_per_model=1024,
        n_features=384,
        random_state=0,
    )
    embedder = LocusEmbedder(pool.encodings, random_state=0, verbose=1, device=DEVICE)
    start = time.perf_counter()
    embedder.fit(pool.evals)
    t = time.perf_counter() - start
    print(f"fit 112 models x 1024 evals: {t:.0f} s, {embedder.n_epochs_} epochs")
    return {"seconds": t, "epochs": embedder.n_epochs_}


# The fit-scaling base pool (small: the seven fits take a few minutes) and the
# epochs each fit runs (no early stopping, so every fit does the same number of
# steps: an epoch is ``episodes_per_epoch`` episodes whatever the pool, so the
# training steps cost the same at every size and what grows is the validation
# pass, the data preparation and the memory).
SCALING_BASE = dict(n_models=16, evals_per_model=256, n_queries=1024)
SCALING_EPOCHS = 2
SCALING_EPISODES = 64


def _fit_once(config):
    """Fit on a synthetic pool in this process: seconds and own peak RSS (MB)."""
    from locus_sklearn.datasets import make_model_pool

    pool = make_model_pool(n_features=N_FEATURES, random_state=0, **config)
    embedder = LocusEmbedder(
        pool.encodings,
        max_epochs=SCALING_EPOCHS,
        episodes_per_epoch=SCALING_EPISODES,
        early_stopping=None,
        random_state=0,
        device=DEVICE,
    )
    before = _proc_status_mb("VmRSS")
    start = time.perf_counter()
    embedder.fit(pool.evals)
    seconds = time.perf_counter() - start
    # VmHWM, not getrusage: a child's ru_maxrss starts from its parent's
    # high-water mark at exec (Linux), here the 3 GB of the main benchmark.
    return {"seconds": seconds, "peak_rss_mb": _proc_status_mb("VmHWM") - before}


def _proc_status_mb(field):
    """A memory field of /proc/self/status (VmRSS, VmHWM, ...) in MB."""
    with open("/proc/self/status", encoding="utf-8") as handle:
        for line in handle:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise KeyError(field)


def bench_fit_scaling():
    """Fit time and memory at 1x, 2x, 4x of each axis; log-log slopes."""
    rows, slopes = {}, {}
    for axis in ("n_models", "evals_per_model", "n_queries"):
        times, memory = [], []
        for factor in (1, 2, 4):
            config = dict(SCALING_BASE)
            config[axis] *= factor
            if axis == "evals_per_model":  # a model cannot have more rows than queries
                config["n_queries"] = max(config["n_queries"], config[axis])
            out = subprocess.run(
                [sys.executable, __file__, "--fit-one", json.dumps(config),
                 "--device", DEVICE],
                capture_output=True, text=True, check=True,
            )  # fmt: skip
            result = json.loads(out.stdout.strip().splitlines()[-1])
            rows[f"{axis}x{factor}"] = {**config, **result}
            times.append(result["seconds"])
            memory.append(result["peak_rss_mb"])
            print(
                f"fit {config}: {result['seconds']:.1f} s, "
                f"+{result['peak_rss_mb']:.0f} MB peak RSS"
            )
        logs = np.log([1, 2, 4])
        slopes[axis] = {
            "time": float(np.polyfit(logs, np.log(times), 1)[0]),
            "memory": float(np.polyfit(logs, np.log(np.maximum(memory, 1)), 1)[0]),
        }
        print(
            f"fit scaling in {axis}: log-log slope {slopes[axis]['time']:.2f} (time), "
            f"{slopes[axis]['memory']:.2f} (memory)"
        )
    return {"base": SCALING_BASE, "epochs": SCALING_EPOCHS,
            "episodes_per_epoch": SCALING_EPISODES, "fits": rows,
            "slopes": slopes}  # fmt: skip


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--repeats", type=positive_int, default=3, help="timings per median (>= 1)"
    )
    parser.add_argument("--fit", action="store_true", help="also time a full fit")
    parser.add_argument(
        "--fit-scaling",
        action="store_true",
        help="also time fits at 1x, 2x, 4x models, evaluations and queries",
    )
    parser.add_argument(
        "--refine",
        action="store_true",
        help="also time transform with refine_steps=10",
    )
    parser.add_argument(
        "--fit-one", metavar="JSON", help="(internal) one fit of --fit-scaling"
    )
    parser.add_argument(
        "--device", default="cpu", help="torch device every section runs on"
    )
    parser.add_argument(
        "--batch-sweep",
        action="store_true",
        help="also time transform per transform_batch_tokens and chunking",
    )
    parser.add_argument(
        "--out", default=os.path.join(os.path.dirname(__file__), "results")
    )
    args = parser.parse_args(argv)
    global DEVICE
    DEVICE = resolve_device(args.device, name="--device")
    gpu = torch.device(DEVICE).type == "cuda"
    if args.fit_one:
        print(json.dumps(_fit_once(json.loads(args.fit_one))))
        return
    torch.set_grad_enabled(False)
    # A GPU needs a larger product than 2048^3 to reach its rate.
    n_matmul = 8192 if gpu else 2048
    f32 = matmul_gflops(torch.float32, n=n_matmul)
    # A first look at a small size on a CPU: without bfloat16 matrix units, a
    # 2048^3 bfloat16 product takes about a minute.
    bf16 = 0 if gpu else matmul_gflops(torch.bfloat16, n=256, repeats=3)
    if gpu or bf16 >= f32 / 4:
        bf16 = matmul_gflops(torch.bfloat16, n=n_matmul)
    flop = encoder_flops_per_token() * 112 * 4096
    print(
        f"matmul: {f32:.0f} GFLOP/s float32, {bf16:.0f} GFLOP/s bfloat16; embedding "
        f"112 x 4096 is {flop / 1e9:.0f} GFLOP: floor {flop / f32 / 1e9:.1f} s float32, "
        f"{flop / bf16 / 1e9:.1f} s bfloat16"
    )
    floors = {"float32": flop / f32 / 1e9, "bfloat16": flop / bf16 / 1e9}
    time_bfloat16 = bf16 >= f32 / 2
    if not time_bfloat16:
        print("bfloat16 transform not timed: no bfloat16 matrix units on this CPU")
    sweep = bench_batch_sweep(args.repeats, floors) if args.batch_sweep else None
    transform, bf16_rel = bench_transform(args.repeats, floors, time_bfloat16)
    f32_after = matmul_gflops(torch.float32, n=n_matmul)
    print(f"matmul after the transforms: {f32_after:.0f} GFLOP/s float32")
    # On a shared machine the measured rate moves by a third within minutes:
    # the ratio at the faster of the two rates is the conservative one.
    strict_ratio = transform["112x4096/float32"] / (flop / max(f32, f32_after) / 1e9)
    print(f"transform 112 x 4096 at the faster rate: {strict_ratio:.2f}x the floor")
    predict = bench_predict(args.repeats)
    torch.set_grad_enabled(True)
    refine = bench_refine(args.repeats) if args.refine else None
    fit = bench_fit() if args.fit else None
    fit_scaling = bench_fit_scaling() if args.fit_scaling else None
    result = {
        "date": time.strftime("%Y-%m-%d"),
        "commit": git_commit(),
        "machine": machine_info(
            torch=torch.__version__,
            threads=torch.get_num_threads(),
            device=DEVICE,
            **({"gpu": torch.cuda.get_device_name(DEVICE)} if gpu else {}),
        ),
        "matmul_gflops": {"float32": f32, "bfloat16": bf16},
        "matmul_gflops_float32_after_transforms": f32_after,
        "embedding_gflop_112x4096": flop / 1e9,
        "transform_seconds": transform,
        "transform_batch_sweep_seconds": sweep,
        "transform_floor_ratio_112x4096": {
            dtype: transform[f"112x4096/{dtype}"] / floor
            for dtype, floor in floors.items()
            if f"112x4096/{dtype}" in transform
        },
        "transform_floor_ratio_112x4096_at_faster_rate": strict_ratio,
        "bfloat16_max_relative_difference": bf16_rel,
        "predict_proba_seconds": predict,
        "refine_seconds": refine,
        "fit": fit,
        "fit_scaling": fit_scaling,
        "peak_rss_mb": _peak_rss_mb(),
    }
    os.makedirs(args.out, exist_ok=True)
    suffix = "" if DEVICE == "cpu" else "_" + torch.device(DEVICE).type
    path = os.path.join(args.out, f"core_speed{suffix}.json")
    if os.path.exists(path):
        with open(path, encoding="utf-8") as handle:
            result = carry_over(result, json.load(handle))
    for name, source in result.get("earlier_sections", {}).items():
        print(
            f"{name}: not run; kept from the run of {source['date']} ({source['commit']})"
        )
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(result, handle, indent=2)
    print(f"peak RSS {result['peak_rss_mb']:.0f} MB; wrote {path}")


# The sections a run may skip (``--fit``, ``--fit-scaling``, ``--refine``).
OPTIONAL_SECTIONS = (
    "fit",
    "fit_scaling",
    "refine_seconds",
    "transform_batch_sweep_seconds",
)


def carry_over(result, previous):
    """``result`` with the optional sections it did not run taken from the
    ``previous`` file, each named in ``earlier_sections`` with the date,
    commit and machine of the run that measured it (a rerun of the fast
    sections alone used to overwrite the slow ones with null)."""
    result = dict(result)
    earlier = {}
    for name in OPTIONAL_SECTIONS:
        if result.get(name) is not None or previous.get(name) is None:
            continue
        result[name] = previous[name]
        sources = previous.get("earlier_sections", {})
        earlier[name] = sources.get(
            name,
            {
                "date": previous.get("date"),
                "commit": previous.get("commit"),
                "machine": previous.get("machine"),
            },
        )
    if earlier:
        result["earlier_sections"] = earlier
    return result


if __name__ == "__main__":
    main()
