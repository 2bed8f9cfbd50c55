"""Portfolios on real pools: chosen for expected routing accuracy, by k-medoids,
the k strongest models, and random ones, side by side.

For each pool and seed (the query splits of ``routing.py``), a default
LocusRouter is fitted on n = 256 training rows per model; then, for each
portfolio size k, test queries every model answered are routed among:

- ``expected``: :class:`~locus_sklearn.ExpectedAccuracySelector` on the
  router's P(correct) on the training queries (no scores, no test query);
- ``k-medoids``: :class:`~locus_sklearn.KMedoidsSelector` on the embeddings;
- ``strongest``: the k models with the highest mean training score;
- ``random``: 20 random k-model portfolios (mean);
- ``full pool``: every model.

Routing among a portfolio uses the router's own predictions
(``portfolio_curve``). Writes ``results/portfolios.{md,json}``.

Usage: python benchmarks/portfolios.py [--pools mmlu-open bfcl shaberi]
       [--seeds 0 1 2] [--quick]
"""

import argparse
import json
import os
import sys
import time

import numpy as np
import pandas as pd

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import embedding_quality  # noqa: E402
import routing  # noqa: E402
from _args import locus_setting  # noqa: E402
from _provenance import git_commit, machine_info, torch_device  # noqa: E402

from locus_sklearn import ExpectedAccuracySelector, KMedoidsSelector  # noqa: E402
from locus_sklearn.inspection import portfolio_curve  # noqa: E402

SIZES = (1, 2, 3, 5, 8)
N_PER_MODEL = 256
METHODS = ("expected", "k-medoids", "strongest", "random", "full pool")


class _Fixed:
    """A selector that returns a fixed ranking (the k strongest models)."""

    def __init__(self, order, n_select=1):
        self.order = order
        self.n_select = n_select

    def get_params(self, deep=False):
        return {"order": self.order, "n_select": self.n_select}

    def set_params(self, **params):
        for key, value in params.items():
            setattr(self, key, value)
        return self

    def fit(self, X, y=None):
        self.selected_indices_ = np.asarray(self.order[: self.n_select])
        return self


def run_one(data, seed, settings):
    split = routing.Split(data, seed)
    train = split.training_rows(N_PER_MODEL)
    start = time.perf_counter()
    saved = dict(embedding_quality.SETTINGS)
    embedding_quality.SETTINGS.update(settings)
    try:
        router = embedding_quality.fit_locus(data, seed, "baseline", train)
    finally:
        embedding_quality.SETTINGS.clear()
        embedding_quality.SETTINGS.update(saved)
    fit_s = time.perf_counter() - start
    classes = router.classes_
    test = pd.DataFrame(split.y_test, index=split.test_queries, columns=split.models)
    test = test.reindex(columns=classes).rename_axis("query").reset_index()
    test = test.melt(id_vars="query", var_name="model", value_name="score")
    predicted = router.predict_proba(pd.unique(train["query"])).T
    strength = train.groupby("model")["score"].mean().reindex(classes).to_numpy()
    sizes = [k for k in SIZES if k < len(classes)]
    curves = {
        "expected": portfolio_curve(
            router, test, sizes, selector=ExpectedAccuracySelector(),
            embeddings=predicted, n_random=20, random_state=seed,
        ),
        "k-medoids": portfolio_curve(
            router, test, sizes, selector=KMedoidsSelector(), n_random=0
        ),
        "strongest": portfolio_curve(
            router, test, sizes, selector=_Fixed(np.argsort(-strength, kind="stable")),
            embeddings=np.zeros((len(classes), 1)), n_random=0,
        ),
    }  # fmt: skip
    rows = {}
    for i, k in enumerate(sizes):
        rows[k] = {
            name: float(curve["accuracy"].iloc[i]) for name, curve in curves.items()
        }
        rows[k]["random"] = float(curves["expected"]["random_mean"].iloc[i])
        rows[k]["full pool"] = float(curves["expected"]["full_pool_accuracy"].iloc[i])
    return {"seed": seed, "fit_s": fit_s, "n_models": len(classes),
            "n_test_queries": len(split.test_queries), "by_k": rows}  # fmt: skip


def markdown(result):
    lines = [
        "# Portfolios: routing accuracy among k models (benchmarks/portfolios.py)",
        "",
        f"{result['date']}, commit `{result['commit']}`, {result['machine']}. "
        f"The plain LocusRouter (shrinkage=None; the embedder's defaults) on "
        f"{N_PER_MODEL} training rows per model "
        f"(settings: {result['settings']}); test queries every model answered; "
        f"mean ± population sd (ddof=0) over seeds {result['seeds']}. `expected`: "
        "ExpectedAccuracySelector on the router's P(correct) on the training "
        "queries; `k-medoids`: KMedoidsSelector on the embeddings; `strongest`: "
        "the k models with the best mean training score; `random`: mean of 20 "
        "random portfolios.",
        "",
    ]
    for pool, runs in result["pools"].items():
        lines += [f"## {pool}", "", "| k | " + " | ".join(METHODS) + " |"]
        lines.append("|---" * (len(METHODS) + 1) + "|")
        for k in runs[0]["by_k"]:
            cells = []
            for method in METHODS:
                values = [run["by_k"][k][method] for run in runs]
                cells.append(f"{np.mean(values):.3f} ± {np.std(values):.3f}")
            lines.append(f"| {k} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def main(argv=None):
    # The docstring's first paragraph: its first line stops mid-sentence.
    parser = argparse.ArgumentParser(
        description=" ".join(__doc__.split("\n\n")[0].split())
    )
    parser.add_argument(
        "--pools",
        nargs="+",
        default=["mmlu-open", "bfcl", "shaberi"],
        choices=embedding_quality.POOLS,
    )
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--quick", action="store_true", help="max_epochs 20")
    parser.add_argument(
        "--locus", nargs="*", type=locus_setting(embedding_quality.PROTOTYPE_KEYS),
        default=[], metavar="KEY=VALUE",
        help="LocusEmbedder settings over the benchmark's own "
        "(embedding_quality.py's, with max_epochs 20 under --quick)",
    )  # fmt: skip
    parser.add_argument("--out", default=os.path.join(HERE, "results"))
    args = parser.parse_args(argv)
    # Every pool before the first fit: a missing one must not end the run
    # after the others were fitted.
    embedding_quality.require_pools(args.pools)
    os.makedirs(args.out, exist_ok=True)  # before the run, not after it
    settings = {"max_epochs": 20} if args.quick else {}
    routing.update_settings(settings, args.locus)
    device = (dict(embedding_quality.SETTINGS) | settings).get("device")
    result = {
        "date": time.strftime("%Y-%m-%d"),
        "commit": git_commit(),
        "machine": machine_info(device=torch_device(device)),
        "seeds": args.seeds,
        "settings": {
            k: list(v) if isinstance(v, tuple) else v
            for k, v in (dict(embedding_quality.SETTINGS) | settings).items()
        },
        "pools": {},
    }
    for pool in args.pools:
        data = embedding_quality.load_pool(pool)
        runs = []
        for seed in args.seeds:
            run = run_one(data, seed, settings)
            runs.append(run)
            print(pool, seed, json.dumps(run["by_k"]), flush=True)
        result["pools"][pool] = runs
    with open(
        os.path.join(args.out, "portfolios.json"), "w", encoding="utf-8"
    ) as handle:
        json.dump(result, handle, indent=2)
    text = markdown(result)
    with open(os.path.join(args.out, "portfolios.md"), "w", encoding="utf-8") as handle:
        handle.write(text)
    print(text)
    return result


if __name__ == "__main__":
    main()
