"""The refinement's prior and what the refined embeddings identify.

``LocusEmbedder(refine_steps=10, refine_prior=p)`` fits each model's
embedding to its own rows through the trained predictor; a smaller prior lets
it follow more of what is particular to the model's rows. Issue 12 asks the
embedding to retrieve a model's twins or siblings and to identify a model from
a disjoint set of its rows as well as the best simple fingerprint does. Per
pool and seed this script fits the embedding benchmark's embedder
(``embedding_quality.py --quick`` settings) on its 256 training rows per model
and reads, for the encoder's embeddings and the refined ones under each prior
of ``--priors``: group recall@1 and @3 (twins on BFCL, siblings on Shaberi),
self-identification from two disjoint row sets at every n of
``embedding_quality.SELF_NS``, the split-half participation ratio of the
largest such n, and the same retrieval and self-identification read through
the pool's whitener. The rows, pairs and measures are
``embedding_quality.py``'s; no test query is read.

A prior for fingerprints is chosen on BFCL's self-identification at 256 rows
(the row the issue's target reads there), with Shaberi's siblings held out.

Usage: python benchmarks/refine_fingerprints.py --pools bfcl shaberi
       [--seeds 0 1 2] [--priors 1 0.1 0.03 0.01 0.003] [--tag T]
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import embedding_quality as eq  # noqa: E402
import routing  # noqa: E402
from refine_solver import command_line, priors_argument  # noqa: E402

# The priors read besides the encoder's embeddings (0.1 is the default).
PRIORS = (1.0, 0.1, 0.03, 0.01, 0.003)


def fingerprint_row(fingerprint, train, models, groups, pairs):
    """Retrieval, self-identification and split-half ratio of ``fingerprint``
    (rows -> (n_models, d), models in ``models`` order), plain and whitened."""
    Z = fingerprint(train)
    row = {"groups": eq.group_recall(Z, models, groups)}
    row |= eq.identity_measures(fingerprint, pairs)
    row["whitened"] = eq.whitened_measures(Z, fingerprint, pairs, models, groups)
    return row


def run(pool, seed, args, log):
    data = eq.load_pool(pool, seed)
    split = routing.Split(data, seed)
    groups = data.info.get("groups", {})
    train = split.training_rows(256)
    router = eq.fit_locus(data, seed, "baseline", train)
    pairs = eq.self_id_pairs(split, seed)
    settings = [("encoder", {"refine_steps": 0})] + [
        (f"prior {p:g}", {"refine_steps": 10, "refine_prior": p}) for p in args.priors
    ]
    out = {}
    for key, params in settings:
        router.embedder_.set_params(**params)
        row = fingerprint_row(
            router.embedder_.transform, train, split.models, groups, pairs
        )
        out[key] = row
        ratio = row.get("split_half_pr", float("nan"))
        log(
            f"{pool} seed {seed} {key:12s} recall {row['groups']} self-id "
            f"{row['self_id']} split-half PR {ratio:.2f} whitened {row['whitened']}"
        )
    return out


def main(argv=None):
    add_priors = priors_argument(PRIORS)
    command_line(__doc__, "refine_fingerprints", run, argv, add_arguments=add_priors)


if __name__ == "__main__":
    main()
