"""Does ``inference_dtype="bfloat16"`` change routing on the benchmark pools?

Issue 14 asks the bfloat16 transform for embeddings within a stated tolerance
and routing decisions unchanged on the benchmark pools. This script fits the
default ``LocusEmbedder`` (the routing benchmark's settings) on the routing
benchmark's rows (``routing.Split`` and its n training rows per model), embeds
the training models in float32 and in bfloat16, and on the test queries every
model answered compares the plain router's P(correct) (the embedder's
``predict_proba``, no shrinkage) read from each: the largest relative
embedding difference ``max_m |z16 - z32| / |z32|``, the share of test queries
routed to the same model, the largest P(correct) difference, and the routing
accuracy of each. Nothing is tuned here.

bfloat16 needs bfloat16 matrix units to be fast (AVX-512 BF16 or AMX on a
CPU); without them this runs, slowly.

Usage::

    python benchmarks/bfloat16_routing.py [--pools mmlu-open routerbench bfcl
        shaberi] [--seeds 0 1 2] [--n 256] [--threads 1]
"""

import argparse
import json
import os
import time

import numpy as np
import torch
from _data import load
from _provenance import git_commit, machine_info
from routing import LOCUS_PARAMS, Split

from locus_sklearn import LocusEmbedder
from locus_sklearn.metrics import routing_accuracy


def compare(embedder, train, queries, scores):
    """float32 against bfloat16 embeddings of the fitted ``embedder``'s
    training models: the figures of one fit (see the module docstring)."""
    Z, P, seconds = {}, {}, {}
    for dtype in ("float32", "bfloat16"):
        embedder.set_params(inference_dtype=dtype)
        start = time.perf_counter()
        Z[dtype] = embedder.transform(train)
        seconds[dtype] = time.perf_counter() - start
        P[dtype] = embedder.predict_proba(Z[dtype], queries, evals=train)
    embedder.set_params(inference_dtype="float32")
    z32, z16 = Z["float32"], Z["bfloat16"]
    relative = np.linalg.norm(z16 - z32, axis=1) / np.linalg.norm(z32, axis=1)
    return {
        "max_relative_embedding_difference": float(relative.max()),
        "same_routing": float(
            np.mean(P["bfloat16"].argmax(1) == P["float32"].argmax(1))
        ),
        "max_abs_proba_difference": float(np.abs(P["bfloat16"] - P["float32"]).max()),
        "routing": {k: routing_accuracy(scores, p) for k, p in P.items()},
        "transform_seconds": seconds,
    }


def one_fit(data, seed, n):
    split = Split(data, seed)
    train = split.training_rows(n)
    embedder = LocusEmbedder(data.encodings, random_state=seed, **LOCUS_PARAMS)
    embedder.fit(train)
    out = compare(embedder, train, split.test_queries, split.y_test)
    out.update(seed=seed, n_models=len(split.models), n_test_queries=len(split.y_test))
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--pools", nargs="+", default=["mmlu-open", "routerbench", "bfcl", "shaberi"]
    )
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--n", type=int, default=256)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--out", default=os.path.join(os.path.dirname(__file__), "results")
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    result = {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "commit": git_commit(),
        "machine": machine_info(
            torch=torch.__version__,
            threads=args.threads,
            cpu_capability=torch.backends.cpu.get_cpu_capability(),
        ),
        "n": args.n,
        "pools": {},
    }
    for pool in args.pools:
        data = load(pool)
        rows = result["pools"][pool] = []
        for seed in args.seeds:
            row = one_fit(data, seed, args.n)
            rows.append(row)
            print(
                f"{pool} seed {seed}: max rel |dz| "
                f"{row['max_relative_embedding_difference']:.4f}; same routing "
                f"{row['same_routing']:.4f}; max |dP| "
                f"{row['max_abs_proba_difference']:.4f}; routing float32 "
                f"{row['routing']['float32']:.4f}, bfloat16 "
                f"{row['routing']['bfloat16']:.4f}",
                flush=True,
            )
    os.makedirs(args.out, exist_ok=True)
    name = "bfloat16_routing_" + "_".join(args.pools) + ".json"
    with open(os.path.join(args.out, name), "w", encoding="utf-8") as handle:
        json.dump(result, handle, indent=2)


if __name__ == "__main__":
    main()
