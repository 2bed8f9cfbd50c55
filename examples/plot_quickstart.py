"""
=========================
Route queries with LOCUS
=========================

Train a :class:`~locus_sklearn.LocusRouter` on scored evaluations of a pool
of models, route new queries to the model most likely to answer them, and
compare its routing accuracy with the single best model, a kNN router and
the oracle on held-out queries.
"""

# %%
# A pool of models and their scored evaluations
# ---------------------------------------------
# :func:`~locus_sklearn.datasets.make_model_pool` draws a synthetic pool: 30
# models in 5 families, 1,000 queries in 8 tasks, each model scored (0 or 1)
# on its own random 300 queries. ``evals`` is the long table every estimator
# takes; ``encodings`` maps each query id to a vector, and is passed as the
# query encoder (with real text, leave ``encoder=None`` for the bundled
# MiniLM).
from locus_sklearn.datasets import make_model_pool

pool = make_model_pool(n_models=30, n_queries=1000, evals_per_model=300, random_state=0)
evals = pool.evals
evals.head()

# %%
# Hold out 20 % of the queries, as a router meets new queries in production:
# grouping by query keeps every evaluation of a test query out of training.
from sklearn.model_selection import GroupShuffleSplit

split = GroupShuffleSplit(n_splits=1, test_size=0.2, random_state=0)
train_rows, test_rows = next(split.split(evals, groups=evals["query"]))
train, test = evals.iloc[train_rows], evals.iloc[test_rows]
print(f"{train['query'].nunique()} training queries, {test['query'].nunique()} test")

# %%
# Train the router
# ----------------
# The router trains a :class:`~locus_sklearn.LocusEmbedder` (the attention
# encoder that turns a model's evaluations into an embedding, and the
# predictor of P(correct)) and embeds every model of the pool. The settings
# below are small, for a quick CPU run; training stops early on held-out
# validation loss.
from locus_sklearn import LocusEmbedder, LocusRouter

embedder = LocusEmbedder(
    pool.encodings,
    embedding_dim=32,
    n_latents=8,
    n_blocks=1,
    enc_size=(32, 256),
    dec_size=128,
    max_epochs=100,
    episodes_per_epoch=128,
    patience=20,
    random_state=0,
)
router = LocusRouter(embedder).fit(train)
print(
    f"{len(router.classes_)} models embedded in {router.model_embeddings_.shape[1]} "
    f"dimensions after {router.embedder_.n_epochs_} epochs"
)

# %%
# Route
# -----
# ``predict`` gives the routed model of each query; ``predict_proba`` each
# model's probability of answering correctly (independent per model, so rows
# do not sum to 1).
queries = test["query"].unique()[:5]
for query, model in zip(queries, router.predict(queries), strict=True):
    print(f"{query} -> {model}")
router.predict_proba(queries).shape

# %%
# How good is the routing?
# ------------------------
# ``score`` routes each test query among the models that have a score for it
# and averages the routed model's score. Peer routers from
# :mod:`locus_sklearn.baselines` share the API. The oracle picks a correct
# model whenever one exists.
import matplotlib.pyplot as plt

from locus_sklearn import check_evals
from locus_sklearn.baselines import KNNRouter, SingleBestRouter
from locus_sklearn.metrics import oracle_accuracy

Y_test = check_evals(test).to_dense(router.classes_)  # (n_queries, n_models), NaN gaps
accuracy = {
    "single best model": SingleBestRouter().fit(train).score(test),
    "kNN router (k=20)": KNNRouter(k=20, encoder=pool.encodings).fit(train).score(test),
    "LocusRouter": router.score(test),
    "oracle": oracle_accuracy(Y_test),
}
for name, value in accuracy.items():
    print(f"{name:>18}: {value:.3f}")

fig, ax = plt.subplots(figsize=(6, 3), layout="constrained")
ax.barh(list(accuracy), list(accuracy.values()), color=["C7", "C1", "C0", "C2"])
ax.set_xlim(0.5, 1.0)
ax.set_xlabel("routing accuracy on held-out queries")
ax.set_title("Routing 30 synthetic models")

# %%
# Training curves
# ---------------
# The fitted skorch network keeps its history: the loss on training episodes,
# and on held-out validation queries (each model embedded from its other
# evaluations), which early stopping watches.
history = router.embedder_.net_.history
fig, ax = plt.subplots(figsize=(6, 3), layout="constrained")
ax.plot(history[:, "train_loss"], label="train")
ax.plot(history[:, "valid_loss"], label="validation")
ax.set_xlabel("epoch")
ax.set_ylabel("binary cross-entropy")
ax.legend()
plt.show()
