"""Try LocusEmbedder settings against kNN on one split (mmlu-open, n=256, seed 0).

Usage::

    python benchmarks/tune_locus.py [--data mmlu-open] [--n 256] [--seed 0] \
        [--configs NAME ...] [--out benchmarks/results/TUNING.md]

Every configuration is fitted on exactly the rows kNN and the single best model
see (the same split and per-model subsets as ``routing.py``); each result is
appended to ``<out>`` (and a JSON next to it) as soon as it is measured, so a
time-boxed run keeps what it finished.
"""

# ruff: noqa: E501  (markdown tables and log lines are long by nature)

import argparse
import json
import os
import re
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import _data  # noqa: E402
import routing  # noqa: E402  (sets up paths and offline env)

from locus_sklearn.metrics import correctness_accuracy, routing_accuracy  # noqa: E402

# The benchmark's LOCUS settings with the paper's embedding-only predictor.
PAPER = dict(routing.LOCUS_PARAMS, kernel_readout=False)
# name -> overrides of PAPER (the package's paper defaults, max_epochs capped)
REG = dict(query_noise=0.15, weight_decay=0.1)
CONFIGS = {
    "paper-defaults(valid_loss)": {},
    "reg+loss": REG,
    "reg+monitor=routing": dict(REG, early_stopping="valid_routing_accuracy"),
    "reg+loss+enc(32,128)": dict(REG, enc_size=(32, 128)),
    "reg+loss+d64,r16": dict(REG, embedding_dim=64, n_latents=16),
    "reg+loss+lr3e-4": dict(REG, lr=3e-4),
    "reg+loss+drop.2": dict(REG, dropout=0.2),
    "reg+loss+ep64,pat15": dict(REG, episodes_per_epoch=64, patience=15),
    "reg+loss+nondisjoint": dict(REG, disjoint=False),
    "kernel": dict(kernel_readout=True),  # the package default since 2026-11-29
}


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--data", default="mmlu-open")
    p.add_argument("--n", default="256")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--configs", nargs="*", default=list(CONFIGS))
    p.add_argument(
        "--set",
        nargs="*",
        default=[],
        metavar="NAME:KEY=VALUE,...",
        help="extra configurations, e.g. 'x:dropout=0.3,hidden_dim=32'",
    )
    p.add_argument("--out", default=os.path.join(HERE, "results", "TUNING.md"))
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    routing.set_threads(args.threads)
    configs = {c: CONFIGS[c] for c in args.configs}
    for item in args.set:
        name, _, body = item.partition(":")
        over = {}
        for kv in re.split(r",(?![^\[]*\])", body):  # commas outside [...]
            k, _, v = kv.partition("=")
            v = routing.parse_value(v)
            over[k] = tuple(v) if isinstance(v, list) else v
        configs[name] = over
    n = args.n if args.n == "all" else int(args.n)
    data = _data.load(args.data)
    split = routing.Split(data, args.seed)
    train = split.training_rows(n)
    y = split.y_test
    header = not os.path.exists(args.out)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    jpath = os.path.splitext(args.out)[0] + ".json"
    records = json.load(open(jpath)) if os.path.exists(jpath) else []
    with open(args.out, "a") as md:
        if header:
            md.write(
                "# LOCUS tuning log\n\nEach row: one LocusEmbedder setting fitted on the same "
                "rows as the peers in the same process (`benchmarks/tune_locus.py`).\n\n"
            )
        md.write(
            f"\n## {args.data}, n={n}, seed {args.seed}, {time.strftime('%Y-%m-%d %H:%M')} "
            f"({len(y)} test queries, commit {routing.git_commit()})\n\n"
            "| setting | routing acc | correctness acc | epochs | best valid routing acc | fit s | distinct routed |\n"
            "|---|---|---|---|---|---|---|\n"
        )
        for name in ("kNN", "SingleBest"):
            r = routing.make_router(
                name, data.encodings, args.seed, {"peers": routing.PEER_PARAMS}
            )
            t0 = time.perf_counter()
            proba = r.fit(train).predict_proba(split.test_queries)
            row = (name, routing_accuracy(y, proba), correctness_accuracy(y, proba), "", "",
                   time.perf_counter() - t0, len(np.unique(proba.argmax(1))))  # fmt: skip
            md.write("| {} | {:.4f} | {:.4f} | {} | {} | {:.1f} | {} |\n".format(*row))
            md.flush()
            print(row, flush=True)
        for name, over in configs.items():
            params = dict(PAPER, **over)
            router = routing.make_router(
                "LOCUS", data.encodings, args.seed, {"locus": params}
            )
            t0 = time.perf_counter()
            router.fit(train)
            fit_s = time.perf_counter() - t0
            proba = router.predict_proba(split.test_queries)
            hist = router.embedder_.net_.history
            valid = [
                h.get("valid_routing_accuracy")
                for h in hist
                if "valid_routing_accuracy" in h
            ]
            row = (f"{name} `{json.dumps(over)}`", routing_accuracy(y, proba),
                   correctness_accuracy(y, proba), len(hist),
                   f"{max(valid):.4f}" if valid else "", fit_s,
                   len(np.unique(proba.argmax(1))))  # fmt: skip
            md.write("| {} | {:.4f} | {:.4f} | {} | {} | {:.1f} | {} |\n".format(*row))
            md.flush()
            print(row, flush=True)
            records.append({
                "data": args.data, "n": str(n), "seed": args.seed, "name": name,
                "overrides": {k: list(v) if isinstance(v, tuple) else v for k, v in over.items()},
                "routing_acc": row[1], "correctness_acc": row[2], "epochs": row[3],
                "fit_s": fit_s, "valid_routing_curve": valid,
                "valid_loss_curve": [h.get("valid_loss") for h in hist],
            })  # fmt: skip
            with open(jpath, "w") as f:
                json.dump(records, f, indent=1)


if __name__ == "__main__":
    main()
