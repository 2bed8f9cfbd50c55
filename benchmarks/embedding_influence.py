"""How much of the default router's routing comes from the model embeddings?

The default predictor reads two things per (query, model): the model's
embedding z (through the MLP) and a kernel readout of the model's own stored
evaluations near the query. This script fits the default ``LocusEmbedder``
(the routing benchmark's settings) on the routing benchmark's rows
(``routing.Split``: its query split, the data's own where it has one, and its
n training rows per model) and, on the test queries every model answered,
compares the plain router's P(correct) (no shrinkage) with the same
prediction after every model's z is replaced by

- the pool's mean embedding (what the models share), and
- another model's embedding (a seeded permutation of the rows of Z),

the readout left as it is. If routing barely moves, the routing is the
readout's and the embedding is close to a bias: the collapse of issue 12
seen from the router's side. Also reported: the embeddings' spread (mean
over coordinates of the standard deviation across models) relative to the
norm of their mean, the share of test queries routed to the same model, the
mean absolute change of P(correct), and the test routing accuracy of each
(read, not used to choose anything: nothing is tuned here).

Usage::

    python benchmarks/embedding_influence.py [--pools mmlu-open bfcl shaberi
        routerbench] [--seeds 0 1 2] [--n 256 | all] [--threads 1]
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
from locus_sklearn.metrics import oracle_accuracy, routing_accuracy


def one_fit(data, seed, n):
    """One seed on the routing benchmark's rows: ``routing.Split`` (the
    data's own split where it has one, RouterBench's) and its n training
    rows per model, scored on the test queries every model answered."""
    split = Split(data, seed)
    train = split.training_rows(n)
    models, queries, scores = split.models, split.test_queries, split.y_test
    embedder = LocusEmbedder(data.encodings, random_state=seed, **LOCUS_PARAMS)
    start = time.perf_counter()
    embedder.fit(train)
    seconds = time.perf_counter() - start
    Z = embedder.transform(train)
    rng = np.random.default_rng(seed)
    variants = {
        "own z": Z,
        "mean z": np.repeat(Z.mean(0, keepdims=True), len(Z), axis=0),
        "permuted z": Z[rng.permutation(len(Z))],
    }
    P = {
        name: embedder.predict_proba(z, queries, evals=train)
        for name, z in variants.items()
    }
    own = P["own z"]
    single_best = models[train.groupby("model")["score"].mean()[models].argmax()]
    out = {
        "seed": seed,
        "n_models": len(models),
        "n_test_queries": len(queries),
        "fit_seconds": seconds,
        "epochs": int(embedder.n_epochs_),
        "relative_spread": float(Z.std(0).mean() / np.linalg.norm(Z.mean(0))),
        "routing": {name: routing_accuracy(scores, p) for name, p in P.items()},
        "single_best_routing": float(scores[:, list(models).index(single_best)].mean()),
        "oracle": oracle_accuracy(scores),
    }
    for name in ("mean z", "permuted z"):
        out[f"same_routing_{name}"] = float(np.mean(P[name].argmax(1) == own.argmax(1)))
        out[f"mean_abs_change_{name}"] = float(np.abs(P[name] - own).mean())
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--pools",
        nargs="+",
        default=["mmlu-open", "bfcl", "shaberi", "routerbench"],
    )
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--n", type=lambda v: v if v == "all" else int(v), default=256)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--out",
        default=os.path.join(os.path.dirname(__file__), "results"),
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    result = {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "commit": git_commit(),
        "machine": machine_info(torch=torch.__version__, threads=args.threads),
        "n": args.n,
        "locus": {k: list(v) if isinstance(v, tuple) else v
                  for k, v in LOCUS_PARAMS.items()},
        "pools": {},
    }  # fmt: skip
    for pool in args.pools:
        data = load(pool)
        rows = []
        for seed in args.seeds:
            row = one_fit(data, seed, args.n)
            rows.append(row)
            print(
                f"{pool} seed {seed}: spread {row['relative_spread']:.2e} of |mean z|; "
                f"routing own z {row['routing']['own z']:.3f}, mean z "
                f"{row['routing']['mean z']:.3f}, permuted z "
                f"{row['routing']['permuted z']:.3f} (single best "
                f"{row['single_best_routing']:.3f}); same routing with mean z "
                f"{row['same_routing_mean z']:.3f}, permuted "
                f"{row['same_routing_permuted z']:.3f}; mean |dP| "
                f"{row['mean_abs_change_mean z']:.4f} / "
                f"{row['mean_abs_change_permuted z']:.4f}",
                flush=True,
            )
        result["pools"][pool] = rows
    os.makedirs(args.out, exist_ok=True)
    suffix = "" if args.n == 256 else f"_n{args.n}"
    name = "embedding_influence_" + "_".join(args.pools) + suffix + ".json"
    with open(os.path.join(args.out, name), "w", encoding="utf-8") as handle:
        json.dump(result, handle, indent=2)


if __name__ == "__main__":
    main()
