"""What the agreement term does to planted specialists of equal strength.

Session 36 measured that ``LocusEmbedder(agreement_weight=0.3)`` lowers the
planted specialists' participation ratio (2.95 -> 1.21) and left the cause
open. This script reads, on ``embedding_quality.py``'s specialists pool and
rows (``routing.Split``, 256 training rows per model, the harness's
settings), per seed:

- the term's target: each pair of models' root mean squared score difference
  on the training queries both hold, observed and expected under the true
  probabilities, its ratio across specialties to within one, and the share
  of the expected squared difference that is signal, ``(p_i - p_j)^2``,
  rather than Bernoulli noise, ``p_i (1 - p_i) + p_j (1 - p_j)``;
- for the baseline and the term at 0.3, the fitted embeddings of the
  training models: their spread relative to the norm of their mean (the
  package's ``embedding_spread``, which ``CollapsedEmbeddingWarning``
  reads), the participation ratio, the share of variance within
  specialties, the ratio of mean distances across and within specialties,
  and the participation ratio of the three specialty centroids.

A measurement: nothing is chosen from it, no test query is read.

Usage::

    python benchmarks/agreement_specialists.py [--seeds 0 1 2] [--threads 1]
"""

import argparse
import os
import time

import numpy as np
import torch
from _provenance import stamp, write_result
from embedding_quality import fit_locus, load_pool
from routing import Split

from locus_sklearn._agreement import rms_disagreement
from locus_sklearn._embedder import embedding_spread
from locus_sklearn.inspection._geometry import spread_of

VARIANTS = ("baseline", "agreement-0.3")


def across_over_within(D, same):
    """Mean of ``D`` over pairs of different specialties over its mean over
    distinct pairs of the same specialty."""
    distinct = ~np.eye(len(D), dtype=bool)
    return float(D[distinct & ~same].mean() / D[distinct & same].mean())


def score_matrix(train, models):
    """The rows' scores as (M, Q) arrays in the order of ``models``: which
    queries each model holds (1.0 / 0.0) and its scores there (0 elsewhere),
    the input of ``rms_disagreement``; and the Q queries, sorted."""
    S = train.pivot_table(index="model", columns="query", values="score")
    S = S.reindex(models)
    return S.notna().to_numpy(float), np.nan_to_num(S.to_numpy(float)), S.columns


def target(train, models, truth):
    """The agreement term's target on the models' whole training rows: its
    square (observed), and the signal and noise parts of its expectation."""
    held, x, queries = score_matrix(train, models)
    p = truth.reindex(index=queries, columns=models).to_numpy(float).T
    rms, n_shared = rms_disagreement(torch.tensor(held), torch.tensor(x))
    observed, n_shared = rms.numpy() ** 2, n_shared.numpy()
    shared = np.maximum(n_shared, 1)
    both = held[:, None, :] * held[None, :, :]
    signal = ((p[:, None] - p[None]) ** 2 * both).sum(-1) / shared
    variance = p * (1 - p)
    noise = ((variance[:, None] + variance[None]) * both).sum(-1) / shared
    return observed, signal, noise, n_shared


def one_seed(data, seed):
    split = Split(data, seed)
    train = split.training_rows(256)
    models = list(split.models)
    specialty = {m: g for g, ms in data.info["groups"].items() for m in ms}
    labels = np.array([specialty[m] for m in models])
    same = labels[:, None] == labels[None, :]
    distinct = ~np.eye(len(models), dtype=bool)
    observed, signal, noise, shared = target(train, models, data.info["probabilities"])
    share = signal / (signal + noise)
    out = {
        "seed": seed,
        "shared_queries_mean": float(shared[distinct].mean()),
        "target_across_over_within": across_over_within(np.sqrt(observed), same),
        "expected_target_across_over_within": across_over_within(
            np.sqrt(signal + noise), same
        ),
        "signal_share_within": float(share[distinct & same].mean()),
        "signal_share_across": float(share[distinct & ~same].mean()),
    }
    for variant in VARIANTS:
        start = time.perf_counter()
        Z = np.asarray(fit_locus(data, seed, variant, train).model_embeddings_, float)
        C = Z - Z.mean(0)
        centroids = np.array([C[labels == g].mean(0) for g in np.unique(labels)])
        within = sum(((C[labels == g] - c) ** 2).sum() for g, c in
                     zip(np.unique(labels), centroids, strict=True))  # fmt: skip
        D = np.linalg.norm(Z[:, None] - Z[None], axis=-1)
        out[variant] = {
            "relative_spread": embedding_spread(Z),
            "participation_ratio": spread_of(Z).participation_ratio,
            "within_specialty_variance_share": float(within / (C**2).sum()),
            "distance_across_over_within": across_over_within(D, same),
            "centroid_participation_ratio": spread_of(centroids).participation_ratio,
            "fit_seconds": time.perf_counter() - start,
        }
    return out


def report(result):
    runs = result["runs"]
    lines = [
        "# The agreement term on planted specialists",
        "",
        f"{result['date']}, commit {result['commit']}, {result['machine']['processor']}; "
        f"{result['description']}. Seeds {', '.join(str(r['seed']) for r in runs)}.",
        "",
        "| seed | shared queries | target across/within (expected) | signal share "
        "within / across |",
        "|---|---|---|---|",
    ]
    for r in runs:
        lines.append(
            f"| {r['seed']} | {r['shared_queries_mean']:.1f} | "
            f"{r['target_across_over_within']:.3f} "
            f"({r['expected_target_across_over_within']:.3f}) | "
            f"{r['signal_share_within']:.3f} / {r['signal_share_across']:.3f} |"
        )
    lines += [
        "",
        "| seed | variant | relative spread | PR | within-specialty variance | "
        "distance across/within | centroid PR |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        for v in VARIANTS:
            e = r[v]
            lines.append(
                f"| {r['seed']} | {v} | {e['relative_spread']:.1e} | "
                f"{e['participation_ratio']:.2f} | "
                f"{e['within_specialty_variance_share']:.3f} | "
                f"{e['distance_across_over_within']:.2f} | "
                f"{e['centroid_participation_ratio']:.2f} |"
            )
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=os.path.join("benchmarks", "results"))
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    data = load_pool("specialists")
    result = stamp(torch=torch.__version__, threads=args.threads) | {
        "description": data.description,
        "runs": [one_seed(data, seed) for seed in args.seeds],
    }
    write_result(os.path.join(args.out, "agreement_specialists"), result, report)


if __name__ == "__main__":
    main()
