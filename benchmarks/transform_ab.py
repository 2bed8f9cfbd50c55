"""Transform speed of two revisions side by side: the same embedding, alternating.

Embeds ``core_speed.py``'s transform pool (by default 112 synthetic models x
4,096 evaluations, 384-d encodings, random weights with seed 0) with
``LocusEmbedder`` in float32, once with binary scores and once with graded
scores in [0, 1] (the two input paths of the encoder), each revision in a
fresh process, the processes alternating between a base revision (checked out
into a temporary git worktree) and this checkout: on a shared machine whose
speed drifts by tens of percent from minute to minute, only alternation makes
two timings comparable: each round's ratio of the two arms' times is reported
with the medians. Every process also measures the float32 matmul rate
before and after its transforms, so that each time is reported as a ratio to
the FLOP floor at the faster of the two rates (as ``core_speed.py`` does), and
saves its embeddings: the largest relative difference between the two
revisions' embeddings is reported with the times.

Usage: python benchmarks/transform_ab.py --base REV [--rounds 3] [--repeats 3]
       [--models 112] [--evals 4096] [--out benchmarks/results]
"""

import argparse
import os
import tempfile

import numpy as np
from _provenance import ROOT
from _worktree import base_worktree, run_child, short_revision, write_ab_result

# Run in each child, with the revision's checkout first on sys.path and this
# checkout's benchmarks (for core_speed's pool and floor) after it.
CHILD = """
import json, os, sys
import numpy as np
import torch
import locus_sklearn
tree, benchmarks, out = sys.argv[1], sys.argv[2], sys.argv[3]
repeats, n_models, n_evals = map(int, sys.argv[4:7])
assert os.path.realpath(locus_sklearn.__file__).startswith(os.path.realpath(tree))
sys.path.append(benchmarks)
from core_speed import (_median_time, encoder_flops_per_token, fitted_random_embedder,
                        matmul_gflops, synthetic_table)
from locus_sklearn._evals import check_evals
torch.set_grad_enabled(False)
embedder = fitted_random_embedder()
evals, binary, X = synthetic_table(n_models, n_evals, max(2 * n_evals, 12000))
graded = evals.assign(score=np.random.default_rng(1).uniform(0, 1, len(evals)))
tables = {"binary": binary, "graded": check_evals(graded)}
rate_before = matmul_gflops(torch.float32)
seconds, embeddings = {}, {}
for name, table in tables.items():
    embeddings[name] = embedder._transform_encoded(table, X)  # also the warm-up
    seconds[name] = _median_time(lambda t=table: embedder._transform_encoded(t, X), repeats)
rate_after = matmul_gflops(torch.float32)
flop = encoder_flops_per_token() * n_models * n_evals
floor = flop / max(rate_before, rate_after) / 1e9
np.savez(out, **embeddings)
print(json.dumps({"seconds": seconds, "floor_seconds": floor,
                  "floor_ratio": {k: v / floor for k, v in seconds.items()},
                  "matmul_gflops": [rate_before, rate_after]}))
"""


def _max_relative_difference(a, b):
    with np.load(a) as za, np.load(b) as zb:
        return {
            name: float(
                np.max(
                    np.linalg.norm(za[name] - zb[name], axis=1)
                    / np.linalg.norm(za[name], axis=1)
                )
            )
            for name in za.files
        }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="git revision to compare with")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--models", type=int, default=112)
    parser.add_argument("--evals", type=int, default=4096)
    parser.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results"))
    args = parser.parse_args(argv)
    base = short_revision(args.base)
    benchmarks = os.path.join(ROOT, "benchmarks")
    runs = {"base": [], "this": []}
    with base_worktree(base) as worktree, tempfile.TemporaryDirectory() as scratch:
        for round_ in range(args.rounds):
            for arm, tree in (("base", worktree), ("this", ROOT)):
                saved = os.path.join(scratch, f"{arm}.npz")
                sizes = (args.repeats, args.models, args.evals)
                result = run_child(tree, CHILD, benchmarks, saved, *sizes)
                runs[arm].append(result)
                print(
                    f"round {round_ + 1} {arm}: "
                    + ", ".join(
                        f"{name} {t:.2f} s ({result['floor_ratio'][name]:.2f}x)"
                        for name, t in result["seconds"].items()
                    ),
                    flush=True,
                )
        # Each arm's embeddings are the same every round: compare the last.
        difference = _max_relative_difference(
            os.path.join(scratch, "base.npz"), os.path.join(scratch, "this.npz")
        )
    summary = {
        arm: {
            name: float(np.median([r["floor_ratio"][name] for r in rows]))
            for name in rows[0]["floor_ratio"]
        }
        for arm, rows in runs.items()
    }
    # Each round's two arms ran back to back: the ratio of their seconds is the
    # comparison least moved by the machine's drift (the floors are measured
    # by a separate product and drift on their own).
    time_ratio = {
        name: float(
            np.median(
                [
                    this["seconds"][name] / base_run["seconds"][name]
                    for base_run, this in zip(runs["base"], runs["this"], strict=True)
                ]
            )
        )
        for name in summary["base"]
    }
    for name in summary["base"]:
        print(
            f"{name} scores, median ratio to the floor: base {base} "
            f"{summary['base'][name]:.2f}x, this checkout {summary['this'][name]:.2f}x; "
            f"median time this / base per round {time_ratio[name]:.2f}; "
            f"embeddings differ by at most {difference[name]:.1e} relative"
        )
    write_ab_result(
        args.out,
        "transform_ab.json",
        base,
        repeats=args.repeats,
        pool={"models": args.models, "evaluations_per_model": args.evals},
        median_floor_ratio=summary,
        median_time_ratio_this_to_base=time_ratio,
        max_relative_embedding_difference=difference,
        runs=runs,
    )


if __name__ == "__main__":
    main()
