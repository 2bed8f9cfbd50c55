"""The refinement's prior weight on held-out rows of the training models.

``LocusEmbedder(refine_steps=..., refine_prior=0.1)``: 0.1 is session 3's
setting, which had seen MMLU-Pro open's test routing. This script asks what
the training rows alone say. Per pool and seed it fits the embedding
benchmark's embedder (``embedding_quality.py --quick`` settings) on the
256 training rows per model of ``routing.Split`` less those of a random
quarter of the training queries (held out, new queries as the test's are);
embeds each model from its seen rows (encoder,
then refined under each prior of ``--priors``), and scores the
held-out rows with the model's embedding and the kernel readout of the
rest: log-loss (mean BCE; graded scores are soft targets) and correctness
accuracy. The encoder's embedding (no refinement) is the row ``encoder``.
No test query is read. The recorded runs (``refine_prior_{a,b}.json``) also
had a prior of 0, which ``LocusEmbedder`` refuses since 2026-12-05 (below
0.001 a refined embedding depends on the other models of its batch).

Usage: python benchmarks/refine_prior.py [--pools bfcl mmlu-open]
       [--seeds 0 1 2] [--priors 0.001 ... 1] [--tag T]
"""

import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import embedding_quality as eq  # noqa: E402
import routing  # noqa: E402
from refine_solver import command_line, priors_argument  # noqa: E402

HELD_SHARE = 0.25


def split_rows(train, seed):
    """A random quarter of the training queries held out (as the routing
    benchmark's test queries are new queries): their rows, and the rest."""
    rng = np.random.default_rng([seed, 29])
    queries = np.asarray(train["query"].unique(), dtype=object)
    held_queries = rng.permutation(queries)[: int(round(HELD_SHARE * len(queries)))]
    held = train["query"].isin(set(held_queries)).to_numpy()
    return train[~held].reset_index(drop=True), train[held].reset_index(drop=True)


def held_out_scores(embedder, z, seen, held):
    """Log-loss and correctness accuracy of embeddings ``z`` (models in
    sorted order) on each model's held-out rows, the readout from ``seen``."""
    models = np.sort(seen["model"].unique())
    queries = np.asarray(held["query"].unique(), dtype=object)
    proba = embedder.predict_proba(z, queries, evals=seen)  # (Q, M)
    q_pos = {q: i for i, q in enumerate(queries)}
    m_pos = {m: j for j, m in enumerate(models)}
    p = proba[held["query"].map(q_pos).to_numpy(), held["model"].map(m_pos).to_numpy()]
    p = np.clip(p, 1e-7, 1 - 1e-7)
    y = held["score"].to_numpy(dtype=float)
    loss = -(y * np.log(p) + (1 - y) * np.log1p(-p))
    correct = (p >= 0.5) == (y >= 0.5)
    per_model = held.assign(loss=loss, correct=correct).groupby("model")
    # Each model weighs the same, whatever its number of rows.
    return {
        "log_loss": float(per_model["loss"].mean().mean()),
        "correctness": float(per_model["correct"].mean().mean()),
    }


def run(pool, seed, args, log):
    data = eq.load_pool(pool, seed)
    split = routing.Split(data, seed)
    # The embedder trains on the seen rows only: the held-out queries are new
    # to the encoder, the predictor and the refinement alike.
    seen, held = split_rows(split.training_rows(256), seed)
    embedder = eq.fit_locus(data, seed, "baseline", seen).embedder_
    out = {}
    embedder.set_params(refine_steps=0)
    z0 = embedder.transform(seen)
    out["encoder"] = held_out_scores(embedder, z0, seen, held)
    for prior in args.priors:
        embedder.set_params(refine_steps=10, refine_prior=prior)
        start = time.perf_counter()
        z = embedder.transform(seen)
        out[f"prior {prior:g}"] = held_out_scores(embedder, z, seen, held)
        out[f"prior {prior:g}"]["seconds"] = time.perf_counter() - start
    for key, value in out.items():
        log(
            f"{pool} seed {seed} {key:12s} held-out log-loss {value['log_loss']:.4f} "
            f"correctness {value['correctness']:.4f}"
        )
    return out


def main(argv=None):
    command_line(
        __doc__, "refine_prior", run, argv,
        add_arguments=priors_argument([0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0]),
        header=lambda _: {"held_share": HELD_SHARE},
    )  # fmt: skip


if __name__ == "__main__":
    main()
