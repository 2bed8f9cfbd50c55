"""How much of the models' score agreement the model embeddings carry.

The agreement terms of training (``LocusEmbedder(agreement_weight=...)``, a
stress on a batch's distances, and ``_neighbour_geometry.py``, a neighbour
divergence against a queue of episodes) ask the embeddings to follow the
models' root mean squared score difference on the training queries they
share. On Shaberi, where every model answered the same training prompts,
that disagreement finds 0.40 of the same-base siblings at recall@1 and the
embeddings 0.10-0.15. This script reads, on ``embedding_quality.py``'s
Shaberi rows (``routing.Split``, 256 training rows per model, the harness's
settings), per seed and variant, from the training models' embeddings
(``model_embeddings_``):

- Spearman's rank correlation, over all pairs of models, of the centred
  embeddings' euclidean distances with the disagreement on all training rows;
- neighbour recall@1 / @3: the share of models whose nearest model by
  disagreement is among their 1 / 3 nearest by embedding;
- sibling recall@1 / @3 (the harness's ``group_recall``) of the embeddings,
  and of the disagreement itself;
- the embedder's best validation loss, and for the neighbour term its value
  over the first and the last ten training steps.

A measurement: nothing is chosen from it, no test query is read.

Usage::

    python benchmarks/agreement_ceiling.py [--seeds 0 1 2] [--variants ...]
"""

import argparse
import os
import time

import numpy as np
import torch
from _provenance import stamp, write_result
from agreement_specialists import score_matrix
from embedding_quality import (
    VARIANTS,
    fit_locus,
    group_recall,
    load_pool,
    similarity_recall,
)
from routing import Split
from scipy.stats import spearmanr

from locus_sklearn._agreement import rms_disagreement

DEFAULT_VARIANTS = ("baseline", "agreement-3", "neighbour-geometry-3")


def disagreement_matrix(train, models):
    """Each pair of models' root mean squared score difference over the
    training queries both hold, (M, M) in the order of ``models``."""
    held, values, _ = score_matrix(train, models)
    rms, _ = rms_disagreement(torch.tensor(held), torch.tensor(values))
    return rms.numpy()


def neighbour_recall(D, T, k):
    """Share of rows whose nearest other row by ``T`` is among their ``k``
    nearest other rows by ``D`` (both (M, M) distances)."""
    D, T = np.array(D, float), np.array(T, float)
    np.fill_diagonal(D, np.inf)
    np.fill_diagonal(T, np.inf)
    nearest = T.argmin(1)
    order = np.argsort(D, axis=1)[:, :k]
    return float(np.mean([nearest[i] in order[i] for i in range(len(D))]))


def follow(Z, T):
    """How the centred embeddings ``Z`` (M, d) follow the disagreement ``T``."""
    C = np.asarray(Z, float)
    C = C - C.mean(0)
    D = np.linalg.norm(C[:, None] - C[None], axis=-1)
    pairs = np.triu_indices(len(D), 1)
    return {
        "spearman": float(spearmanr(D[pairs], T[pairs]).statistic),
        "neighbour_recall@1": neighbour_recall(D, T, 1),
        "neighbour_recall@3": neighbour_recall(D, T, 3),
    }


def one_seed(data, seed, variants):
    split = Split(data, seed)
    train = split.training_rows(256)
    models = list(split.models)
    groups = data.info["groups"]
    T = disagreement_matrix(train, models)
    out = {"seed": seed, "disagreement": similarity_recall(-T, models, groups)}
    for variant in variants:
        start = time.perf_counter()
        record = []  # the neighbour term's (value, candidates) per step
        router = fit_locus(data, seed, variant, train, record=record)
        Z = np.asarray(router.model_embeddings_, float)
        history = router.embedder_.net_.history
        row = follow(Z, T) | {
            "siblings": group_recall(Z, models, groups),
            "best_valid_loss": float(min(history[:, "valid_loss"])),
            "fit_seconds": time.perf_counter() - start,
        }
        if record:
            row["term_first_10"] = float(np.mean([v for v, _ in record[:10]]))
            row["term_last_10"] = float(np.mean([v for v, _ in record[-10:]]))
        out[variant] = row
        print(f"seed {seed} {variant}: {row}", flush=True)
    return out


def report(result):
    runs, variants = result["runs"], result["variants"]
    lines = [
        "# How much of the models' score agreement the embeddings carry",
        "",
        f"{result['date']}, commit {result['commit']}, {result['machine']['processor']}; "
        f"{result['description']}; 256 training rows per model. Seeds "
        f"{', '.join(str(r['seed']) for r in runs)}.",
        "",
        "| seed | variant | Spearman (d, disagreement) | neighbour recall@1 / @3 | "
        "siblings recall@1 / @3 | best validation loss | term, first / last 10 steps |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        s = r["disagreement"]
        lines.append(
            f"| {r['seed']} | the disagreement itself | 1 | 1 / 1 | "
            f"{s['recall@1']:.3f} / {s['recall@3']:.3f} | – | – |"
        )
        for v in variants:
            e = r[v]
            term = (
                f"{e['term_first_10']:.3f} / {e['term_last_10']:.3f}"
                if "term_first_10" in e
                else "–"
            )
            lines.append(
                f"| {r['seed']} | {v} | {e['spearman']:.3f} | "
                f"{e['neighbour_recall@1']:.3f} / {e['neighbour_recall@3']:.3f} | "
                f"{e['siblings']['recall@1']:.3f} / {e['siblings']['recall@3']:.3f} | "
                f"{e['best_valid_loss']:.4f} | {term} |"
            )
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument(
        "--variants", nargs="+", default=list(DEFAULT_VARIANTS), choices=list(VARIANTS)
    )
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--tag", default="")
    parser.add_argument("--out", default=os.path.join("benchmarks", "results"))
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    data = load_pool("shaberi")
    result = stamp(torch=torch.__version__, threads=args.threads) | {
        "description": data.description,
        "variants": args.variants,
        "runs": [one_seed(data, seed, args.variants) for seed in args.seeds],
    }
    write_result(os.path.join(args.out, "agreement_ceiling" + args.tag), result, report)


if __name__ == "__main__":
    main()
