"""The kernel readout at scale, and what its approximations cost.

- scale: 10,000 models x 1,024 evaluations each (10.24 M stored evaluations)
  over ``--bank`` distinct stored queries, random 384-d encodings, one torch
  thread. Times the exact readout (sparse counts|sums; no queries x
  evaluations matrix) for ``--queries`` queries, and the neighbour readout
  (``readout_neighbors``) with an exact top-k and with hnswlib's HNSW graph;
  reports the pool's memory, peak RSS and how far the approximations are
  from the exact readout.
- mmlu: a LocusRouter fitted on the shipped MMLU-Pro open-weights subset
  (80% of the questions), then routing on the other 20% with the exact
  readout and with each approximation: routing agreement with exact,
  routing accuracy, largest P(correct) difference.

Usage: python benchmarks/readout_scale.py [--skip-mmlu] [--bank 50000]
       [--queries 256] [--out benchmarks/results]
"""

import argparse
import json
import os
import resource
import time

import numpy as np
import torch
from _provenance import git_commit, machine_info

from locus_sklearn._readout import EvaluationSets, KernelReadout, ReadoutPool

N_FEATURES = 384
NEIGHBORS = (8, 32, 128)


def _peak_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _timed(fn, repeats=1):
    best, result = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def _has_hnswlib():
    try:
        import hnswlib  # noqa: F401
    except ImportError:
        return False
    return True


def _agreement(approx, exact):
    """How far readout features (Q, M, 2) are from the exact ones."""
    evidence = exact[..., 1] > 1e-3  # pairs the exact readout has data on
    diff = (approx[..., 0] - exact[..., 0]).abs() / 2  # in readout units [0, 1]
    return {
        "max_abs_readout_diff": float(diff.max()),
        "mean_abs_readout_diff": float(diff.mean()),
        "pairs_within_0.05": float((diff < 0.05).float().mean()),
        "pairs_with_evidence": float(evidence.float().mean()),
    }


def bench_scale(n_models, n_evals, n_bank, n_queries, seed=0):
    rng = np.random.default_rng(seed)
    # Clustered encodings, as real queries are: 500 topics.
    centres = rng.normal(size=(500, N_FEATURES)).astype(np.float32)
    topic = rng.integers(0, 500, n_bank)
    bank = centres[topic] + rng.normal(size=(n_bank, N_FEATURES)).astype(np.float32)
    index = np.concatenate(
        [rng.choice(n_bank, n_evals, replace=False) for _ in range(n_models)]
    )
    score = rng.integers(0, 2, len(index)).astype(np.float32)
    sets = EvaluationSets(
        torch.from_numpy(bank),
        torch.from_numpy(index),
        torch.from_numpy(score),
        np.arange(n_models + 1) * n_evals,
    )
    queries = torch.from_numpy(
        centres[rng.integers(0, 500, n_queries)]
        + rng.normal(size=(n_queries, N_FEATURES)).astype(np.float32)
    )
    readout = KernelReadout()  # tau = 0.1, its initial bandwidth
    rss_before = _peak_rss_mb()
    build_s, pool = _timed(lambda: ReadoutPool(sets))
    out = {
        "n_models": n_models,
        "evals_per_model": n_evals,
        "stored_evaluations": n_models * n_evals,
        "bank_queries": n_bank,
        "queries": n_queries,
        "pool_build_seconds": build_s,
        "pool_sparse": pool.is_sparse,
        "pool_mb": pool.nbytes() / 2**20,
        "dense_counts_sums_would_be_mb": 2 * n_models * len(pool.bank) * 4 / 2**20,
    }
    print(
        f"pool of {n_models} x {n_evals} over {n_bank} stored queries: built in "
        f"{build_s:.1f} s, {out['pool_mb']:.0f} MB (sparse={pool.is_sparse}; dense "
        f"would be {out['dense_counts_sums_would_be_mb']:.0f} MB)"
    )
    with torch.inference_mode():
        exact_s, exact = _timed(lambda: readout.pairwise_pool(queries, pool))
        out["exact_seconds"] = exact_s
        out["exact_ms_per_query"] = 1000 * exact_s / n_queries
        print(
            f"exact readout, {n_queries} queries: {exact_s:.2f} s "
            f"({out['exact_ms_per_query']:.1f} ms per query)"
        )
        rows = {}
        indexes = ["exact"] + (["hnsw"] if _has_hnswlib() else [])
        for index in indexes:
            if index == "hnsw":
                unit = torch.nn.functional.normalize(queries, dim=-1)
                build, _ = _timed(lambda u=unit: pool.nearest(u[:1], 1, "hnsw"))
                out["hnsw_build_seconds"] = build
                print(f"HNSW graph of {len(pool.bank)} stored queries: {build:.1f} s")
            for k in NEIGHBORS:
                t, approx = _timed(
                    lambda k=k, i=index: readout.pairwise_pool(
                        queries, pool, neighbors=k, index=i
                    ),
                    repeats=2,
                )
                row = {"seconds": t, "ms_per_query": 1000 * t / n_queries}
                row.update(_agreement(approx, exact))
                rows[f"{index}/k={k}"] = row
                print(
                    f"readout_neighbors={k:3d} [{index}]: {t:.3f} s "
                    f"({row['ms_per_query']:.2f} ms/query); readout within 0.05 of "
                    f"exact on {100 * row['pairs_within_0.05']:.1f}% of pairs, max "
                    f"diff {row['max_abs_readout_diff']:.3f}"
                )
    out["neighbors"] = rows
    out["peak_rss_mb"] = _peak_rss_mb()
    out["peak_rss_growth_mb"] = out["peak_rss_mb"] - rss_before
    print(f"peak RSS {out['peak_rss_mb']:.0f} MB")
    return out


def bench_mmlu(seed=0):
    from locus_sklearn import LocusEmbedder, LocusRouter
    from locus_sklearn.datasets import load_mmlu_pro

    data = load_mmlu_pro(open_weights_only=True)
    rng = np.random.default_rng(seed)
    questions = data.queries["query"].to_numpy()
    test = rng.permutation(questions)[: len(questions) // 5]
    train = data.evals[~data.evals["query"].isin(test)]
    embedder = LocusEmbedder(
        data.encodings,
        embedding_dim=64,
        n_latents=16,
        n_blocks=1,
        max_epochs=30,
        patience=5,
        random_state=seed,
    )
    start = time.perf_counter()
    router = LocusRouter(embedder).fit(train)
    fit_s = time.perf_counter() - start
    tau = float(
        router._fitted_locus().net_.module_.readout.log_bandwidth.detach().exp()
    )
    scores = data.scores.loc[test, router.classes_].to_numpy()
    answered = ~np.isnan(scores).all(axis=1)
    test, scores = test[answered], scores[answered]

    def accuracy(proba):
        routed = np.where(np.isnan(scores), -np.inf, proba).argmax(axis=1)
        return float(np.nanmean(scores[np.arange(len(test)), routed])), routed

    exact_t, exact = _timed(lambda: router.predict_proba(test), repeats=2)
    exact_acc, exact_routed = accuracy(exact)
    out = {
        "fit_seconds": fit_s,
        "bandwidth": tau,
        "test_queries": len(test),
        "stored_evaluations": int(router.pool_evals_[1].n_rows),
        "exact": {"routing_accuracy": exact_acc, "seconds": exact_t},
    }
    print(
        f"MMLU-Pro open: fit {fit_s:.0f} s, tau {tau:.3f}; exact readout routing "
        f"accuracy {exact_acc:.4f} on {len(test)} questions"
    )
    indexes = ["exact"] + (["hnsw"] if _has_hnswlib() else [])
    for index in indexes:
        for k in NEIGHBORS:
            router.embedder_.set_params(readout_neighbors=k, readout_index=index)
            t, proba = _timed(lambda: router.predict_proba(test), repeats=2)
            acc, routed = accuracy(proba)
            row = {
                "routing_accuracy": acc,
                "routing_agreement": float((routed == exact_routed).mean()),
                "max_abs_proba_diff": float(np.abs(proba - exact).max()),
                "seconds": t,
            }
            out[f"{index}/k={k}"] = row
            print(
                f"  readout_neighbors={k:3d} [{index}]: routing accuracy {acc:.4f}, "
                f"same model as exact on {100 * row['routing_agreement']:.1f}%, max "
                f"|dP| {row['max_abs_proba_diff']:.4f}"
            )
    router.embedder_.set_params(
        readout_neighbors=None, readout_index="exact", readout_dtype="bfloat16"
    )
    t, proba = _timed(lambda: router.predict_proba(test), repeats=2)
    acc, routed = accuracy(proba)
    out["bfloat16"] = {
        "routing_accuracy": acc,
        "routing_agreement": float((routed == exact_routed).mean()),
        "max_abs_proba_diff": float(np.abs(proba - exact).max()),
        "seconds": t,
    }
    print(
        f"  readout_dtype='bfloat16': routing accuracy {acc:.4f}, same model as "
        f"exact on {100 * out['bfloat16']['routing_agreement']:.1f}%, max |dP| "
        f"{out['bfloat16']['max_abs_proba_diff']:.4f}"
    )
    router.embedder_.set_params(readout_dtype="float32")
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=10_000)
    parser.add_argument("--evals", type=int, default=1024)
    parser.add_argument("--bank", type=int, default=50_000)
    parser.add_argument("--queries", type=int, default=256)
    parser.add_argument("--skip-mmlu", action="store_true")
    parser.add_argument("--skip-scale", action="store_true")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--out", default=os.path.join(os.path.dirname(__file__), "results")
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    result = {
        "date": time.strftime("%Y-%m-%d"),
        "commit": git_commit(),
        "machine": machine_info(
            torch=torch.__version__, threads=torch.get_num_threads()
        ),
    }
    if not args.skip_mmlu:
        result["mmlu_pro_open"] = bench_mmlu()
    if not args.skip_scale:
        result["scale"] = bench_scale(args.models, args.evals, args.bank, args.queries)
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "readout_scale.json")
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(result, handle, indent=2)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
