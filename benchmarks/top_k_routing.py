"""Routing among the k strongest models, k chosen on cross-fitted folds.

``LocusRouter(shrinkage="auto")`` blends each model's P(correct) toward its
mean score by a value chosen on cross-fitted query folds: a soft pull toward
the single best model. This script tries a hard one: route each query among
the k models with the best mean training score only (k in ``KS``; None is
every model), so that the argmax over many noisy estimates cannot land on a
weak model overestimated at that query, while the strong models' per-query
differences stay at full strength. Per pool and seed it fits the embedding
benchmark's embedder (``embedding_quality.py --quick`` settings) on ``--n``
training rows per model (256, or ``all``), computes the package's
cross-fitted fold predictions once (``_shrinkage.cross_fitted_predictions``,
the folds "auto" uses), and chooses by the package's criterion (each fold
query routed among all models, judged where the routed model answered; ties
toward the single best):

- ``shrinkage``: s in ``SHRINKAGE_GRID``, every model (the default router's
  rule; its test figure is the default's);
- ``top-k``: k in ``KS``, s = 0;
- ``joint``: every (s, k).

Each choice is then applied to the test queries. ``test_curve`` holds every
(s, k)'s test accuracy: read for the ceiling only, never for a choice.

Usage: python benchmarks/top_k_routing.py
       --pools bfcl mmlu-open mmlu-all shaberi routerbench [--n 256 | all]
       [--seeds 0 1 2] [--tag T]
"""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import embedding_quality as eq  # noqa: E402
import routing  # noqa: E402
from refine_solver import command_line  # noqa: E402

from locus_sklearn._evals import check_evals  # noqa: E402
from locus_sklearn._shrinkage import (  # noqa: E402
    SHRINKAGE_GRID,
    cross_fitted_predictions,
    shrink,
)

KS = (1, 2, 3, 5, 8, None)


def route(proba, means, shrinkage, k):
    """Each query's model: the largest shrunk P(correct) among the ``k``
    models with the largest ``means`` (every model for None; ties in the
    means to the earlier model)."""
    p = shrink(proba, means, shrinkage).astype(np.float64)
    if k is not None and k < len(means):
        outside = np.argsort(-means, kind="stable")[k:]
        p[:, outside] = -np.inf
    return p.argmax(axis=1)


def choose(folds, grid):
    """The (shrinkage, k) of ``grid`` with the best cross-fitted accuracy
    (queries whose routed model answered), ties to the larger shrinkage and
    then the smaller k; and every value's accuracy."""
    hits = {g: [] for g in grid}
    for y, proba, means, _, _ in folds:
        rows = np.arange(len(y))
        for g in grid:
            routed = y[rows, route(proba, means, *g)]
            hits[g].append(routed[np.isfinite(routed)])
    scores = {g: float(np.concatenate(h).mean()) for g, h in hits.items()}
    best = max(scores.values())
    ties = [g for g in grid if scores[g] >= best - 1e-12]
    return min(ties, key=lambda g: (-g[0], len(KS) if g[1] is None else g[1])), scores


def run(pool, seed, args, log):
    data = eq.load_pool(pool, seed)
    split = routing.Split(data, seed)
    train = split.training_rows(args.n if args.n == "all" else int(args.n))
    router = eq.fit_locus(data, seed, "baseline", train)  # shrinkage=None
    table = check_evals(train)
    folds = list(
        cross_fitted_predictions(
            router.embedder_, table, router._encode(table.queries), 5
        )
    )
    proba = router.predict_proba(split.test_queries)
    means = train.groupby("model")["score"].mean().reindex(split.models).to_numpy()
    y = split.y_test
    rows = np.arange(len(y))

    def accuracy(shrinkage, k):
        return float(y[rows, route(proba, means, shrinkage, k)].mean())

    rules = {
        "shrinkage": [(s, None) for s in SHRINKAGE_GRID],
        "top-k": [(0.0, k) for k in KS],
        "joint": [(s, k) for s in SHRINKAGE_GRID for k in KS],
    }
    out = {
        "single best": float(y[:, int(np.argmax(means))].mean()),
        "plain": accuracy(0.0, None),
    }
    for name, grid in rules.items():
        choice, _ = choose(folds, grid)
        out[name] = {"choice": list(choice), "test": accuracy(*choice)}
    out["test_curve"] = {
        f"s={s:g},k={k}": accuracy(s, k) for s in SHRINKAGE_GRID for k in KS
    }
    log(
        f"{pool} seed {seed} n={args.n}: single best {out['single best']:.4f} plain "
        f"{out['plain']:.4f} "
        + " ".join(f"{n} {out[n]['choice']} {out[n]['test']:.4f}" for n in rules)
    )
    return out


def main(argv=None):
    def add_n(parser):
        parser.add_argument("--n", default="256", help="rows per model, or 'all'")

    command_line(
        __doc__, "top_k_routing", run, argv, add_arguments=add_n,
        header=lambda args: {"n": args.n},
    )  # fmt: skip


if __name__ == "__main__":
    main()
