"""The CUDA paths checked against the CPU's on one machine: transform, predict, fit.

The test suite runs where there is no GPU (CI, most contributors), so the CUDA
paths are checked here, on a machine that has one, in one short run:

1. parity: one set of random weights on the CPU and on the GPU. Transform of
   112 models x 1,024 evaluations (float32): the largest relative embedding
   difference; predict_proba with the embedding-only predictor and with the
   kernel readout: the largest absolute difference. bfloat16 on the GPU
   against float32: the largest relative embedding difference.
2. fit: ``LocusRouter`` with its defaults (shrinkage "auto") on a synthetic
   pool, fitted on the GPU and on the CPU with the same seed: epochs, seconds
   and routing accuracy on held-out queries beside the single best model and
   the oracle (dropout draws differ between the devices, so the two fits are
   compared in quality, not bit for bit). The GPU-fitted router is saved and
   loaded on the CPU (the same P(correct)), onboards held-out models with
   ``add_models`` on both devices (the same embeddings) and drops one with
   ``remove_models``; ``refine_steps`` transforms on both devices agree (and
   how far the steps moved); bfloat16 on the GPU routes as float32 does.
3. determinism: two fits with one ``random_state`` on the GPU, by default and
   with ``torch.use_deterministic_algorithms(True)``.

Each check prints its figure and the limit it is held to; the run ends with
the number within their limits (exit status 1 if any is not) and writes
``cuda_check.json``. ``--device cpu`` runs the same code on
the CPU twice (a dry run of this script on a machine without a GPU).

Usage: python benchmarks/cuda_check.py [--device cuda] [--out DIR]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
from _provenance import git_commit, machine_info
from core_speed import N_FEATURES, fitted_random_embedder, synthetic_table

from locus_sklearn import LocusEmbedder, LocusRouter
from locus_sklearn._device import resolve_device
from locus_sklearn.datasets import make_model_pool

# The limits the figures are held to. float32 on two devices differs by
# rounding in another order of sums (1e-7 relative per operation, grown through
# two attention blocks; refinement's Gauss-Newton solves grow it further);
# bfloat16 keeps 8 bits of mantissa (the docs state about 1e-2 on embeddings).
FLOAT32_REL = 1e-4
REFINED_REL = 1e-3
BFLOAT16_REL = 5e-2
AGREEMENT = 0.99
BFLOAT16_AGREEMENT = 0.95
# Two fits differ in their dropout and noise draws (each device has its own
# generator): their held-out accuracies as two seeds' would.
FIT_GAP = 0.02
CHECKS = []


def check(name, value, limit, *, at_least=False):
    """Record one figure against its limit (an upper one unless ``at_least``)."""
    ok = value >= limit if at_least else value <= limit
    CHECKS.append({"check": name, "value": value, "ok": bool(ok), "limit": limit})
    sign = ">=" if at_least else "<="
    print(
        f"{'ok  ' if ok else 'FAIL'} {name}: {value:.3g} ({sign} {limit})", flush=True
    )


def _max_rel(a, b):
    return float(np.max(np.linalg.norm(a - b, axis=1) / np.linalg.norm(b, axis=1)))


def _pair(device, **params):
    """The same random weights on the CPU and on ``device``."""
    cpu = fitted_random_embedder(device="cpu", **params)
    gpu = fitted_random_embedder(device=device, **params)
    gpu.net_.module_.load_state_dict(cpu.net_.module_.state_dict())
    return cpu, gpu


def parity(device):
    """CPU and ``device`` with the same random weights."""
    _, table, X = synthetic_table(112, 1024, 12000)
    rng = np.random.default_rng(1)
    queries = rng.normal(size=(4096, N_FEATURES)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    out = {}
    for name, readout in [("embedding-only", False), ("kernel readout", True)]:
        cpu, gpu = _pair(device, kernel_readout=readout)
        z_cpu = cpu._transform_encoded(table, X)
        z_gpu = gpu._transform_encoded(table, X)
        rel = _max_rel(z_gpu, z_cpu)
        check(f"{name}: transform float32, GPU vs CPU, max rel", rel, FLOAT32_REL)
        memory = (X, table) if readout else None
        p_cpu = cpu._predict_proba_encoded(z_cpu, queries, memory)
        p_gpu = gpu._predict_proba_encoded(z_cpu, queries, memory)
        assert np.isfinite(p_gpu).all()
        diff = float(np.max(np.abs(p_gpu - p_cpu)))
        check(f"{name}: predict_proba, GPU vs CPU, max abs", diff, FLOAT32_REL)
        out[name] = {"transform_rel": rel, "proba_abs": diff}
    # bfloat16 on the GPU against the CPU's float32. (Routing is compared on
    # the fitted router: random weights give every model about the same
    # P(correct), so their argmax flips with any rounding.)
    gpu.inference_dtype = "bfloat16"
    rel16 = _max_rel(gpu._transform_encoded(table, X), z_cpu)
    check("transform bfloat16 vs float32, max rel", rel16, BFLOAT16_REL)
    out["bfloat16_transform_rel"] = rel16
    return out


def _split(pool, rng):
    """Training rows of all but 4 models, 128 rows of those 4, test queries."""
    queries = pool.queries["query"].to_numpy()
    test = rng.choice(queries, size=len(queries) // 5, replace=False)
    is_test = pool.evals["query"].isin(test)
    held_out = pool.models["model"].to_numpy()[-4:]
    is_new = pool.evals["model"].isin(held_out)
    train = pool.evals[~is_test & ~is_new]
    new = pool.evals[~is_test & is_new].groupby("model").head(128)
    return train, new, list(test), held_out


def _true_accuracy(pool, test, models, routed):
    """Mean true P(correct) of the ``routed`` models (names) on ``test``."""
    probabilities = pool.probabilities.loc[test, models]
    columns = probabilities.columns.get_indexer(routed)
    return float(probabilities.to_numpy()[np.arange(len(test)), columns].mean())


def fit(device):
    """The default router (at most 10 epochs) fitted on ``device`` and the CPU."""
    pool = make_model_pool(
        n_models=32, n_queries=2000, evals_per_model=384, n_features=N_FEATURES,
        n_specialties=4, random_state=0,
    )  # fmt: skip
    train, new, test, held_out = _split(pool, np.random.default_rng(0))
    trained = sorted(set(train["model"]))
    truth = pool.probabilities.loc[test, trained]
    out = {
        "pool": "make_model_pool(32, 2000, evals_per_model=384, n_specialties=4)",
        "single_best": float(truth.mean().max()),
        "oracle": float(truth.max(axis=1).mean()),
    }
    routers = {}
    for where in dict.fromkeys((device, "cpu")):
        router = LocusRouter(
            LocusEmbedder(pool.encodings, device=where, max_epochs=10, random_state=0)
        )
        start = time.perf_counter()
        router.fit(train)
        seconds = time.perf_counter() - start
        accuracy = _true_accuracy(pool, test, trained, router.predict(test))
        out[where] = {
            "seconds": seconds,
            "epochs": int(router.embedder_.n_epochs_),
            "shrinkage": float(router.shrinkage_),
            "test_accuracy": accuracy,
        }
        print(
            f"fit on {where}: {seconds:.1f} s, {router.embedder_.n_epochs_} epochs, "
            f"shrinkage {router.shrinkage_}, test accuracy {accuracy:.4f} "
            f"(single best {out['single_best']:.4f}, oracle {out['oracle']:.4f})",
            flush=True,
        )
        routers[where] = router
    gap = abs(out[device]["test_accuracy"] - out["cpu"]["test_accuracy"])
    check("fit: test accuracy, GPU fit vs CPU fit, abs gap", gap, FIT_GAP)
    gpu = routers[device]
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "router")
        gpu.save(path)
        loaded = LocusRouter.load(path, encoder=pool.encodings, device="cpu")
    diff = float(np.max(np.abs(gpu.predict_proba(test) - loaded.predict_proba(test))))
    check("saved on GPU, loaded on CPU: P(correct) max abs", diff, FLOAT32_REL)
    agree = float(np.mean(gpu.predict(test) == loaded.predict(test)))
    check("saved on GPU, loaded on CPU: same routing", agree, AGREEMENT, at_least=True)
    # bfloat16 transform on the GPU, through the embedder's public API.
    embedder = gpu.embedder_
    embedder = getattr(embedder, "estimator", embedder)
    routed = {}
    for dtype in ("float32", "bfloat16"):
        embedder.set_params(inference_dtype=dtype)
        Z = embedder.transform(train)
        proba = embedder.predict_proba(Z, test, evals=train)
        routed[dtype] = np.asarray(trained)[proba.argmax(1)]
    embedder.set_params(inference_dtype="float32")
    agree16 = float(np.mean(routed["bfloat16"] == routed["float32"]))
    check("bfloat16 vs float32 on the GPU: same routing", agree16,
          BFLOAT16_AGREEMENT, at_least=True)  # fmt: skip
    out["bfloat16"] = {
        "routing_agreement": agree16,
        **{
            f"test_accuracy_{d}": _true_accuracy(pool, test, trained, r)
            for d, r in routed.items()
        },
    }
    gpu.add_models(new)
    loaded.add_models(new)
    added = _max_rel(gpu.model_embeddings_, loaded.model_embeddings_)
    check("add_models on GPU vs CPU: embeddings max rel", added, FLOAT32_REL)
    out["after_add_models_test_accuracy"] = _true_accuracy(
        pool, test, list(gpu.classes_), gpu.predict(test)
    )
    gpu.remove_models(held_out[:1])
    assert held_out[0] not in gpu.classes_
    assert np.isfinite(gpu.predict_proba(test)).all()
    embedders = []
    for router in (gpu, loaded):
        embedder = router.embedder_
        embedders.append(getattr(embedder, "estimator", embedder))
    unrefined = embedders[0].transform(new)
    z = [e.set_params(refine_steps=5).transform(new) for e in embedders]
    refined = _max_rel(z[0], z[1])
    check("transform with refine_steps=5, GPU vs CPU: max rel", refined, REFINED_REL)
    # How far the steps moved the embeddings, in units of the pool's spread
    # (the refinement's own unit): where they stop at once (a pool whose
    # embeddings barely differ, so moving one barely changes its loss) the
    # check above compares the encoder's embeddings only.
    move = float(np.max(np.abs(z[0] - unrefined) / embedders[0].embedding_scale_))
    print(f"refinement moved the new models by at most {move:.3g} pool spreads")
    out.update(
        {"loaded_proba_abs": diff, "loaded_routing_agreement": agree,
         "add_models_rel": added, "refined_rel": refined,
         "refine_move_in_spreads": move}
    )  # fmt: skip
    return out


def fit_twice(device):
    """Largest difference between the embeddings of two fits with one seed."""
    pool = make_model_pool(
        n_models=12, n_queries=600, evals_per_model=200, n_features=N_FEATURES,
        random_state=0,
    )  # fmt: skip
    params = dict(device=device, max_epochs=2, random_state=0, early_stopping=None)
    params.update(embedding_dim=32, n_latents=8, n_blocks=1, n_heads=2)
    z = [
        LocusEmbedder(pool.encodings, **params).fit(pool.evals).transform(pool.evals)
        for _ in range(2)
    ]
    return float(np.max(np.abs(z[0] - z[1])))


def determinism(device):
    """Two fits with one ``random_state`` on ``device``: by default (atomic
    adds on a GPU sum in any order) and, in a fresh process, with
    ``torch.use_deterministic_algorithms(True)`` (cuBLAS then needs
    ``CUBLAS_WORKSPACE_CONFIG`` set before CUDA starts)."""
    default = fit_twice(device)
    print(f"two fits, one seed, default: max abs difference {default:.3g}")
    env = {**os.environ, "CUBLAS_WORKSPACE_CONFIG": ":4096:8"}
    run = subprocess.run(
        [sys.executable, __file__, "--fit-twice-deterministic", "--device", device],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    if run.returncode != 0:
        print(run.stderr[-3000:])
        check("deterministic fits ran", 0.0, 1.0, at_least=True)
        return {"default_abs": default, "deterministic_error": run.stderr[-3000:]}
    strict = float(run.stdout.strip().splitlines()[-1])
    check("two fits, one seed, deterministic algorithms: max abs", strict, 0.0)
    return {"default_abs": default, "deterministic_abs": strict}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument(
        "--out", default=os.path.join(os.path.dirname(__file__), "results")
    )
    parser.add_argument("--skip-fit", action="store_true")
    parser.add_argument(
        "--fit-twice-deterministic", action="store_true", help="(internal)"
    )
    args = parser.parse_args(argv)
    device = resolve_device(args.device, name="--device")
    if args.fit_twice_deterministic:
        torch.use_deterministic_algorithms(True)
        print(fit_twice(device))
        return 0
    gpu = torch.device(device).type == "cuda"
    result = {
        "date": time.strftime("%Y-%m-%d"),
        "commit": git_commit(),
        "machine": machine_info(
            torch=torch.__version__,
            device=device,
            **({"gpu": torch.cuda.get_device_name(device)} if gpu else {}),
        ),  # fmt: skip
    }
    with torch.no_grad():
        result["parity"] = parity(device)
    if not args.skip_fit:
        result["fit"] = fit(device)
        result["determinism"] = determinism(device)
    result["checks"] = CHECKS
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "cuda_check.json")
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(result, handle, indent=2)
    failed = [c["check"] for c in CHECKS if not c["ok"]]
    print(
        f"{len(CHECKS) - len(failed)} of {len(CHECKS)} checks within limits; wrote {path}"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
