"""How good is the evidence ``LocusRouter(shrinkage="auto")`` chooses from?

Training rows only (no test query is read). For one pool, seed and n (the
rows ``embedding_quality.py`` trains on), the cross-fitted routing accuracy of
every shrinkage in the grid, two ways on the same 5 query folds:

- ``fitted``: what the estimator computes (``choose_shrinkage``): the embedder
  trained on all the training rows, each fold's models re-embedded from their
  rows outside the fold;
- ``refit``: a new embedder trained without the fold's rows for each fold (5
  more fits): no fold row has touched the weights, so the estimate is free of
  the optimism of judging the network on rows it trained on.

With ``--fold-seeds`` the ``fitted`` curves are also computed on other
shuffles of the 5 folds (``KFold``'s ``random_state``; the estimator's is 0),
each with the value the estimator's rule (best accuracy, ties to the larger)
would choose from it: how much the choice turns on which queries share a fold.
``--n-folds`` sets the folds of the ``fitted`` curves and their shuffles
(the estimator's 5): with more, each model is embedded from more of its rows
for the held-out predictions.

For each value it also counts the judged fold queries (the routed model
answered) and, of those, the ones where the routing differs from ``s = 1``
(always the model with the best mean score): only those carry evidence about
the choice.

Usage::

    python benchmarks/shrinkage_cv.py --pool mmlu-all --seed 2 [--n 256]
        [--kinds fitted refit] [--fold-seeds 1 2 3 4] [--out DIR]
"""

import argparse
import datetime
import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import embedding_quality as eq  # noqa: E402  (pools, settings)
import routing  # noqa: E402  (split, offline env)
from _provenance import git_commit, machine_info  # noqa: E402

from locus_sklearn import LocusEmbedder, LocusRouter, check_evals  # noqa: E402
from locus_sklearn._shrinkage import (  # noqa: E402
    SHRINKAGE_GRID,
    best_shrinkage,
    cross_fitted_predictions,
    query_folds,
    shrink,
)


def fold_curves(make_embedder, fitted, table, X_query, refit, folds=5):
    """Per grid value: judged routed scores and how many differ from s = 1;
    ``folds`` as ``cross_fitted_predictions``' ``n_folds`` (an int: the
    estimator's folds)."""
    hits = {s: [] for s in SHRINKAGE_GRID}
    differ = dict.fromkeys(SHRINKAGE_GRID, 0)
    fit_fold = (lambda evals: make_embedder().fit(evals)) if refit else None
    # The estimator's folds (choose_shrinkage reads the same generator).
    for y, proba, means, _, _ in cross_fitted_predictions(
        fitted, table, X_query, folds, fit_fold=fit_fold
    ):
        rows = np.arange(len(y))
        best = shrink(proba, means, 1.0).argmax(axis=1)
        for s in SHRINKAGE_GRID:
            routed = shrink(proba, means, s).argmax(axis=1)
            judged = np.isfinite(y[rows, routed])
            hits[s].append(y[rows, routed][judged])
            differ[s] += int((judged & (routed != best)).sum())
    return {
        str(s): {
            "accuracy": float(np.concatenate(hits[s]).mean()),
            "judged": int(sum(len(h) for h in hits[s])),
            "judged_differing_from_s1": differ[s],
        }
        for s in SHRINKAGE_GRID
    }


def rule_choice(curve):
    """The value ``choose_shrinkage`` takes from a curve (its rule,
    ``best_shrinkage``, on the curve's accuracies)."""
    return best_shrinkage({float(s): v["accuracy"] for s, v in curve.items()})


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--pool", required=True, choices=eq.POOLS)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--n", default="256")
    p.add_argument(
        "--kinds",
        nargs="+",
        default=["fitted", "refit"],
        choices=["fitted", "refit"],
        help="refit trains 5 more embedders",
    )
    p.add_argument(
        "--fold-seeds",
        nargs="*",
        type=int,
        default=[],
        help="more shuffles of the folds for the fitted curves",
    )
    p.add_argument(
        "--n-folds",
        type=int,
        default=5,
        help="folds of the fitted curves and their shuffles (the estimator's: 5)",
    )
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", default=os.path.join(HERE, "results", "shrinkage_cv"))
    args = p.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    n = args.n if args.n == "all" else int(args.n)
    data = eq.load_pool(args.pool, args.seed)
    split = routing.Split(data, args.seed)
    train = split.training_rows(n)

    def make_embedder():
        return LocusEmbedder(data.encodings, random_state=args.seed, **eq.SETTINGS)

    start = time.perf_counter()
    router = LocusRouter(make_embedder()).fit(train)
    table = check_evals(train[["model", "query", "score"]])
    X_query = router._encode(table.queries)
    curves = {}
    for kind in args.kinds:
        curves[kind] = fold_curves(
            make_embedder, router.embedder_, table, X_query, kind == "refit",
            args.n_folds if kind == "fitted" else 5,
        )  # fmt: skip
        print(args.pool, args.seed, n, kind, json.dumps(curves[kind]), flush=True)
    shuffles = {}
    for fold_seed in args.fold_seeds:
        # The estimator's folds with another shuffle (its own is seed 0).
        folds = query_folds(args.n_folds, random_state=fold_seed)
        curve = fold_curves(
            make_embedder, router.embedder_, table, X_query, False, folds
        )
        shuffles[str(fold_seed)] = {"choice": rule_choice(curve), "curve": curve}
        print(args.pool, args.seed, n, "fold seed", fold_seed, "chooses",
              rule_choice(curve), flush=True)  # fmt: skip
    result = {
        "pool": args.pool,
        "seed": args.seed,
        "n": args.n,
        "date": datetime.date.today().isoformat(),
        "commit": git_commit(),
        "dirty": routing.git_dirty(),
        "machine": machine_info(torch_threads=args.threads),
        "chosen": router.shrinkage_,
        "estimator_scores": {str(k): v for k, v in router.shrinkage_scores_.items()},
        "curves": curves,
        "n_folds": args.n_folds,
        "fold_shuffles": shuffles,
        "wall_s": time.perf_counter() - start,
    }
    os.makedirs(args.out, exist_ok=True)
    folds = "" if args.n_folds == 5 else f"_folds{args.n_folds}"
    path = os.path.join(args.out, f"{args.pool}_seed{args.seed}_n{args.n}{folds}.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)
    print("wrote", path)


if __name__ == "__main__":
    main()
