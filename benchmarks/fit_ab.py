"""Training speed of two revisions side by side: the same fit, alternating.

Fits a ``LocusEmbedder`` on the pool of ``core_speed.py --fit`` (112 synthetic
models x 1,024 evaluations, 384-d encodings, defaults otherwise) for a fixed
number of epochs without early stopping, each fit in a fresh process, the
processes alternating between a base revision (checked out into a temporary
git worktree) and this checkout: on a shared machine whose speed drifts by
tens of percent from minute to minute, only alternation makes two timings
comparable. Reports every fit's median epoch (skorch's ``dur``: training
steps and the validation pass) and the medians per revision. The two
revisions may train differently (another random stream, say); the pool, the
seed and the number of epochs are the same.

Usage: python benchmarks/fit_ab.py --base REV [--epochs 4] [--rounds 3]
       [--out benchmarks/results]
"""

import argparse
import os

import numpy as np
from _provenance import ROOT
from _worktree import base_worktree, run_child, short_revision, write_ab_result

# Run in each child, with the revision's checkout first on sys.path.
CHILD = """
import json, os, sys, time
import numpy as np
import locus_sklearn
from locus_sklearn import LocusEmbedder
from locus_sklearn.datasets import make_model_pool
tree = os.path.realpath(sys.argv[1])
assert os.path.realpath(locus_sklearn.__file__).startswith(tree), locus_sklearn.__file__
pool = make_model_pool(n_models=112, n_queries=8000, evals_per_model=1024,
                       n_features=384, random_state=0)
embedder = LocusEmbedder(pool.encodings, max_epochs=int(sys.argv[2]),
                         early_stopping=None, random_state=0)
start = time.perf_counter()
embedder.fit(pool.evals)
seconds = time.perf_counter() - start
epochs = [float(d) for d in embedder.net_.history[:, "dur"]]
print(json.dumps({"seconds": seconds, "epoch_seconds": epochs}))
"""


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="git revision to compare with")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results"))
    args = parser.parse_args(argv)
    base = short_revision(args.base)
    runs = {"base": [], "this": []}
    with base_worktree(base) as worktree:
        for round_ in range(args.rounds):
            for arm, tree in (("base", worktree), ("this", ROOT)):
                result = run_child(tree, CHILD, args.epochs)
                result["median_epoch_seconds"] = float(
                    np.median(result["epoch_seconds"])
                )
                runs[arm].append(result)
                print(
                    f"round {round_ + 1} {arm}: {result['seconds']:.1f} s, "
                    f"median epoch {result['median_epoch_seconds']:.2f} s",
                    flush=True,
                )
    summary = {
        arm: float(np.median([r["median_epoch_seconds"] for r in rows]))
        for arm, rows in runs.items()
    }
    print(
        f"median epoch: base {base} {summary['base']:.2f} s, this checkout "
        f"{summary['this']:.2f} s ({summary['this'] / summary['base']:.2f}x)"
    )
    write_ab_result(
        args.out,
        "fit_ab.json",
        base,
        epochs=args.epochs,
        median_epoch_seconds=summary,
        runs=runs,
    )


if __name__ == "__main__":
    main()
