"""Try LocusEmbedder settings against kNN, judged on held-out training queries.

Usage::

    python benchmarks/tune_locus.py [--data mmlu-open] [--n 256] [--seed 0 1 2] \
        [--configs NAME ...] [--set NAME:KEY=VALUE,...] [--also-report-test] \
        [--tiny] [--out benchmarks/results/TUNING.md]

For each seed: ``routing.Split(data, seed)`` and its training rows
``split.training_rows(n)`` (the rows ``routing.py`` fits on: n per model),
less a seeded fifth of the split's training queries held out as *validation*
queries (``shrinkage_repeats_holdout.holdout_split``: drawn from the split's
seed, the same for every setting). kNN, the single best model and every
configuration are fitted on exactly the remaining rows and scored on the same
validation queries (those every model answered in the split's training rows,
all of them, not only the sampled n). No test query is read: the settings
``routing.py`` reports are chosen without its test queries. With
``--also-report-test`` each fit is also scored on the split's test queries, a
figure labelled "read after, not used for choosing".

Each result is appended to ``<out>`` (and a JSON next to it) as soon as it is
measured, so a time-boxed run keeps what it finished; after the last seed a
table gives each setting's mean over the seeds.
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
from _args import n_or_all, non_negative_int, positive_int  # noqa: E402
from shrinkage_repeats_holdout import holdout_split  # noqa: E402

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
PEERS = ("kNN", "SingleBest")
TEST_LABEL = "read after, not used for choosing"


def validation_rows(split, n):
    """(fit rows, validation queries, their dense scores) of one split.

    The fit rows are ``split.training_rows(n)`` without the held-out fifth of
    the split's training queries; the validation queries are those held-out
    queries every model answered in the split's training rows, so the two are
    disjoint by query and neither holds a test query."""
    held, queries, y = holdout_split(split)
    train = split.training_rows(n)
    fit_rows = train[~train["query"].isin(held)].reset_index(drop=True)
    return fit_rows, queries, y


def score(router, queries, y):
    """(routing acc, correctness acc, distinct models routed) on ``queries``."""
    proba = router.predict_proba(queries)
    return (routing_accuracy(y, proba), correctness_accuracy(y, proba),
            len(np.unique(proba.argmax(1))))  # fmt: skip


def run_seed(data, seed, n, configs, settings, also_test, emit):
    """Fit kNN, the single best model and every configuration on one seed's
    fit rows; ``emit(record)`` each as it is measured."""
    split = routing.Split(data, seed)
    fit_rows, queries, y = validation_rows(split, n)
    methods = [(name, None) for name in PEERS] + list(configs.items())
    for name, over in methods:
        if over is None:
            router = routing.make_router(name, data.encodings, seed, settings)
        else:
            router = routing.make_router(
                "LOCUS",
                data.encodings,
                seed,
                {"locus": dict(settings["locus"], **over)},
            )
        t0 = time.perf_counter()
        router.fit(fit_rows)
        fit_s = time.perf_counter() - t0
        routing_acc, correctness_acc, distinct = score(router, queries, y)
        record = {
            "seed": seed, "name": name,
            "overrides": None if over is None else {
                k: list(v) if isinstance(v, tuple) else v for k, v in over.items()},
            "scored_on": "held-out training queries (validation)",
            # Not "routing_acc": the log's older records hold test figures there.
            "validation_routing_acc": routing_acc,
            "validation_correctness_acc": correctness_acc,
            "distinct_routed": distinct, "fit_s": fit_s,
            "n_fit_rows": len(fit_rows), "n_validation_queries": len(queries),
        }  # fmt: skip
        if over is not None:
            hist = router.embedder_.net_.history
            record["epochs"] = len(hist)
            record["valid_routing_curve"] = [
                h["valid_routing_accuracy"]
                for h in hist
                if "valid_routing_accuracy" in h
            ]
            record["valid_loss_curve"] = [h.get("valid_loss") for h in hist]
        if also_test:
            test = score(router, split.test_queries, split.y_test)
            record["test_read_after"] = {
                "routing_acc": test[0], "correctness_acc": test[1],
                "n_test_queries": len(split.y_test), "note": TEST_LABEL,
            }  # fmt: skip
        emit(record)


def _row(record, also_test):
    over = record["overrides"]
    curve = record.get("valid_routing_curve")
    cells = [
        record["name"] if over is None else f"{record['name']} `{json.dumps(over)}`",
        f"{record['validation_routing_acc']:.4f}",
        f"{record['validation_correctness_acc']:.4f}",
        str(record.get("epochs", "")),
        f"{max(curve):.4f}" if curve else "",
        f"{record['fit_s']:.1f}",
        str(record["distinct_routed"]),
    ]
    if also_test:
        cells.append(f"{record['test_read_after']['routing_acc']:.4f}")
    return "| " + " | ".join(cells) + " |\n"


def mean_table(records, seeds, also_test):
    """Markdown: each setting's mean over ``seeds`` (settings measured on
    every seed only)."""
    by_name = {}
    for r in records:
        by_name.setdefault(r["name"], {})[r["seed"]] = r
    lines = [
        f"\nMean over seeds {list(seeds)} (validation queries: held-out training "
        "queries; the settings are chosen on these):\n\n",
        "| setting | mean validation routing acc | mean validation correctness acc | validation routing acc per seed |"
        + (f" mean test routing acc ({TEST_LABEL}) |" if also_test else "")
        + "\n",
        "|---|---|---|---|" + ("---|" if also_test else "") + "\n",
    ]
    for name, per_seed in by_name.items():
        if set(per_seed) != set(seeds):
            continue
        rs = [per_seed[s] for s in seeds]
        cells = [
            name,
            f"{np.mean([r['validation_routing_acc'] for r in rs]):.4f}",
            f"{np.mean([r['validation_correctness_acc'] for r in rs]):.4f}",
            " / ".join(f"{r['validation_routing_acc']:.4f}" for r in rs),
        ]
        if also_test:
            test = [r["test_read_after"]["routing_acc"] for r in rs]
            cells.append(f"{np.mean(test):.4f}")
        lines.append("| " + " | ".join(cells) + " |\n")
    return "".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", default="mmlu-open")
    p.add_argument("--n", type=n_or_all, default=256)
    p.add_argument(
        "--seed",
        nargs="+",
        type=non_negative_int,
        default=[0],
        help="split seeds (one table per seed, then the mean over them)",
    )
    p.add_argument("--configs", nargs="*", default=list(CONFIGS), choices=list(CONFIGS))
    p.add_argument(
        "--set",
        nargs="*",
        default=[],
        metavar="NAME:KEY=VALUE,...",
        help="extra configurations, e.g. 'x:dropout=0.3,hidden_dim=32'",
    )
    p.add_argument(
        "--also-report-test",
        action="store_true",
        help="also score every fit on routing.py's test queries, a figure "
        f"labelled '{TEST_LABEL}' (the validation queries choose)",
    )
    p.add_argument(
        "--tiny",
        action="store_true",
        help="smoke run (tests): tiny LOCUS and peers and, for 'synthetic', a small pool",
    )
    p.add_argument("--out", default=os.path.join(HERE, "results", "TUNING.md"))
    p.add_argument("--threads", type=positive_int, default=1)
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
    n = args.n
    seeds = list(dict.fromkeys(args.seed))
    settings = {
        "locus": dict(PAPER),
        "peers": {k: dict(v) for k, v in routing.PEER_PARAMS.items()},
    }
    if args.tiny:
        settings["locus"].update(routing.TINY_LOCUS)
        for k, v in routing.TINY_PEERS.items():
            settings["peers"][k].update(v)
    data = _data.load(args.data, tiny=args.tiny)
    header = not os.path.exists(args.out)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    jpath = os.path.splitext(args.out)[0] + ".json"
    records = json.load(open(jpath, encoding="utf-8")) if os.path.exists(jpath) else []
    run = {"data": args.data, "n": str(n), "commit": routing.git_commit(),
           "date": time.strftime("%Y-%m-%d %H:%M")}  # fmt: skip
    measured = []
    with open(args.out, "a", encoding="utf-8") as md:
        if header:
            md.write(
                "# LOCUS tuning log\n\nEach row: one LocusEmbedder setting fitted on the same "
                "rows as the peers in the same process (`benchmarks/tune_locus.py`).\n\n"
            )
        md.write(
            f"\n## {args.data}, n={n}, seeds {seeds}, {run['date']} "
            f"(commit {run['commit']}{', TINY smoke settings' if args.tiny else ''})\n\n"
            "Scored on validation queries: a seeded fifth of each split's training "
            "queries, held out of the rows every setting and peer is fitted on. "
            "No test query is read"
            + (
                f" except for the last column ({TEST_LABEL})"
                if args.also_report_test
                else ""
            )
            + ".\n"
        )

        def emit(record):
            record = dict(run, **record)
            if not measured or measured[-1]["seed"] != record["seed"]:
                md.write(
                    f"\n### seed {record['seed']} ({record['n_validation_queries']} "
                    f"validation queries, {record['n_fit_rows']} fit rows)\n\n"
                    "| setting | validation routing acc | validation correctness acc | epochs | best valid routing acc (embedder's own split) | fit s | distinct routed |"
                    + (
                        f" test routing acc ({TEST_LABEL}) |"
                        if args.also_report_test
                        else ""
                    )
                    + "\n|---|---|---|---|---|---|---|"
                    + ("---|" if args.also_report_test else "")
                    + "\n"
                )
            md.write(_row(record, args.also_report_test))
            md.flush()
            measured.append(record)
            print({k: record[k] for k in ("seed", "name", "validation_routing_acc",
                                          "validation_correctness_acc", "fit_s")}, flush=True)  # fmt: skip
            records.append(record)
            with open(jpath, "w", encoding="utf-8") as f:
                json.dump(records, f, indent=1)

        for seed in seeds:
            run_seed(data, seed, n, configs, settings, args.also_report_test, emit)
        md.write(mean_table(measured, seeds, args.also_report_test))
    return measured


if __name__ == "__main__":
    main()
