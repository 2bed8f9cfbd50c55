"""
=======================================
Is this endpoint a known model?
=======================================

An API endpoint may serve a model you already know under another name. Score
it on 128 queries, embed it, and compare with the embeddings of the known
models: if it lies closer to one of them than different models ever do, it is
most likely that model.
:func:`~locus_sklearn.inspection.calibrate_fingerprint_threshold` sets the
distance threshold on the known pool;
:func:`~locus_sklearn.inspection.match_models` applies it. Where the endpoint
can be scored on the known models' own queries,
:func:`~locus_sklearn.inspection.match_models_by_scores` compares its answers
with theirs query by query (the last section).
"""

# %%
# Known models
# ------------
# A synthetic pool of 31 unrelated models (each its own family); 30 are known
# (the router is trained on them), one is kept unknown.
import numpy as np
import pandas as pd

from locus_sklearn import LocusEmbedder, LocusRouter
from locus_sklearn.datasets import make_model_pool

pool = make_model_pool(
    n_models=31, n_queries=1000, n_families=31, evals_per_model="all", random_state=6
)
unknown = pool.models["model"].iloc[-1]
known = pool.evals[pool.evals["model"] != unknown]
router = LocusRouter(
    LocusEmbedder(
        pool.encodings,
        embedding_dim=32,
        n_latents=8,
        n_blocks=1,
        enc_size=(32, 256),
        dec_size=128,
        max_epochs=40,
        episodes_per_epoch=128,
        patience=10,
        random_state=0,
    )
).fit(known)

# %%
# Calibrate the threshold
# -----------------------
# Each known model is embedded several times from random subsets of 128 of
# its evaluations. Distances between two embeddings of one model show how
# much a probe of 128 queries moves an embedding; distances between models,
# how far apart models are. The threshold lets 5 % of the cross pairs through:
# a lower false-match rate also rejects more true matches (the two
# histograms below overlap), and a longer probe or a larger, better-trained
# embedder separates them further.
from locus_sklearn.inspection import calibrate_fingerprint_threshold

calibration = calibrate_fingerprint_threshold(
    router, known, n_evals=128, n_resamples=5, false_match_rate=0.05, random_state=0
)
print(
    f"threshold {calibration.threshold:.4f}: "
    f"{calibration.true_match_rate:.0%} of same-model pairs match, "
    f"{calibration.false_match_rate:.1%} of different-model pairs"
)

# %%
# Probe three endpoints
# ---------------------
# Two serve known models (fresh answers on 128 new random queries: a re-run,
# not the stored evaluations); the third serves the unknown model.
rng = np.random.default_rng(0)


def probe(model, endpoint):
    """128 fresh scored evaluations of ``model``, under the name ``endpoint``."""
    queries = rng.choice(pool.queries["query"], 128, replace=False)
    p = pool.probabilities.loc[queries, model].to_numpy()
    return pd.DataFrame(
        {"model": endpoint, "query": queries, "score": (rng.random(128) < p) * 1.0}
    )


serving = {
    "endpoint-a": router.classes_[3],
    "endpoint-b": router.classes_[17],
    "endpoint-c": unknown,
}
probes = pd.concat([probe(model, name) for name, model in serving.items()])

# %%
# ``embed`` embeds the probes without adding them to the pool (rows in sorted
# name order); ``match_models`` finds each one's nearest known model.
from locus_sklearn.inspection import match_models

names = sorted(serving)
embeddings = router.embed(probes)
matches = match_models(embeddings, router, threshold=calibration.threshold, names=names)
matches["actually serves"] = [serving[n] for n in names]
matches

# %%
# A match is only as sharp as the embedding: known models that lie within the
# threshold of each other cannot be told apart by a probe. List, for each
# endpoint, every known model within the threshold -- the candidates it may
# be. One candidate is an identification; several call for a longer probe
# (or a larger embedder); none means a model the pool does not know.
from sklearn.metrics.pairwise import cosine_distances

distances = cosine_distances(embeddings, router.model_embeddings_)
matches["candidates"] = [
    ", ".join(router.classes_[row <= calibration.threshold]) or "(none)"
    for row in distances
]
matches[["actually serves", "candidates"]]

# %%
import matplotlib.pyplot as plt

fig, ax = plt.subplots(figsize=(6.5, 3.5), layout="constrained")
bins = np.linspace(0, np.quantile(calibration.cross_distances, 0.99), 40)
ax.hist(
    calibration.cross_distances,
    bins=bins,
    density=True,
    alpha=0.6,
    label="different models",
)
ax.hist(
    calibration.self_distances,
    bins=bins,
    density=True,
    alpha=0.6,
    label="same model, two probes",
)
ax.axvline(calibration.threshold, color="k", ls="--", label="threshold")
top = ax.get_ylim()[1]
for i, (name, distance) in enumerate(matches["distance"].items()):
    ax.axvline(distance, color="C3", lw=1)
    ax.annotate(
        name,
        (distance, top * (0.95 - 0.12 * i)),
        xytext=(3, 0),
        textcoords="offset points",
        va="top",
        fontsize=8,
        color="C3",
    )
ax.set_xlabel("cosine distance between embeddings")
ax.set_ylabel("density")
ax.legend(loc="upper right")
plt.show()

# %%
# When the endpoint answers the known queries: compare scores
# -------------------------------------------------------------
# If the endpoint can be scored on queries the known models were scored on,
# compare the scores query by query instead:
# :func:`~locus_sklearn.inspection.match_models_by_scores` finds the known
# model whose answers it repeats most closely. This reads the answers
# themselves, so it tells apart models only as far as each model's answers
# repeat: it finds the same weights behind another API, a quantised copy or
# a greedy re-run, while a model that samples its answers (as this synthetic
# pool does, with probability ``p``) disagrees with itself on a share
# ``2 p (1 - p)`` of the queries, as much as different models do. Here the
# first endpoint serves known model 5 and gives its stored answers with 4 %
# changed (a quantised copy); the second serves the unknown model.
# :func:`~locus_sklearn.inspection.calibrate_score_threshold` sets the
# threshold as it set the embeddings' one: on random sets of 128 of the known
# queries (a probe measures a disagreement only to within a few points: its
# standard error is up to 0.5 / sqrt(128) = 0.044), it lets 1 % of the pairs
# of different known models through.
from locus_sklearn.inspection import calibrate_score_threshold, match_models_by_scores

by_scores_calibration = calibrate_score_threshold(
    known, n_evals=128, false_match_rate=0.01, random_state=0
)
threshold = by_scores_calibration.threshold
print(f"threshold {threshold:.3f} (disagreement on a probe's 128 queries)")
queries = rng.choice(pool.queries["query"], 128, replace=False)
stored = known.set_index(["model", "query"])["score"]
copied = stored.loc[router.classes_[5]].loc[queries].to_numpy()
copied = np.where(rng.random(128) < 0.04, 1 - copied, copied)
fresh = pool.probabilities.loc[queries, unknown].to_numpy() > rng.random(128)
endpoints = pd.DataFrame(
    {
        "model": np.repeat(["endpoint-d", "endpoint-e"], 128),
        "query": np.concatenate([queries, queries]),
        "score": np.concatenate([copied, fresh * 1.0]),
    }
)
by_scores = match_models_by_scores(endpoints, known, threshold=threshold)
by_scores["actually serves"] = [router.classes_[5], unknown]
by_scores
