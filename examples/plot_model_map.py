"""
=====================================
Map the pool: neighbors and families
=====================================

Models that answer the same queries correctly should sit close together in
LOCUS embedding space. Here the embeddings are drawn in two dimensions and
clustered hierarchically, and the clusters are checked against the pool's
model families -- known, because the pool is synthetic -- and against the
same clustering of the models' answers to shared queries.
"""

# %%
# Embed a pool with five families
# -------------------------------
from locus_sklearn import LocusEmbedder, LocusRouter
from locus_sklearn.datasets import make_model_pool

pool = make_model_pool(
    n_models=30, n_queries=1000, n_families=5, evals_per_model=300, random_state=0
)
router = LocusRouter(
    LocusEmbedder(
        pool.encodings,
        embedding_dim=32,
        n_latents=8,
        n_blocks=1,
        enc_size=(32, 256),
        dec_size=128,
        max_epochs=60,
        episodes_per_epoch=128,
        patience=15,
        random_state=0,
    )
).fit(pool.evals)
family = [pool.family[m] for m in router.classes_]

# %%
# A map of the models
# -------------------
# :func:`~locus_sklearn.inspection.plot_model_map` projects the embeddings
# with PCA (on cosine geometry by default) and colours them by a group.
import matplotlib.pyplot as plt

from locus_sklearn.inspection import plot_model_map

fig, ax = plt.subplots(figsize=(7, 5.5), layout="constrained")
plot_model_map(router, groups=family, ax=ax)
ax.set_title("LOCUS embeddings of 30 synthetic models, by family")

# %%
# Families as a dendrogram
# ------------------------
# :func:`~locus_sklearn.inspection.plot_model_dendrogram` clusters the models
# and shows their embedding distances in the dendrogram's order: families the
# embeddings separate appear as dark blocks on the diagonal. On this pool
# they mostly do not (the next cells measure it): the embeddings order the
# models mostly by strength, one axis on which families of equal strength
# overlap.
from locus_sklearn.inspection import plot_model_dendrogram

fig = plot_model_dendrogram(router, metric="cosine")

# %%
# How well do clusters match families? Cut the tree of
# :func:`~locus_sklearn.inspection.model_linkage` into five clusters and
# compare with the true families (an adjusted Rand index of 1 is a perfect
# match, 0 is chance). Here it is near chance.
from scipy.cluster.hierarchy import fcluster
from sklearn.metrics import adjusted_rand_score

from locus_sklearn.inspection import model_linkage

clusters = fcluster(model_linkage(router, metric="cosine"), t=5, criterion="maxclust")
print(f"adjusted Rand index: {adjusted_rand_score(family, clusters):.2f}")

# %%
# How many directions do the embeddings use?
# :func:`~locus_sklearn.inspection.embedding_dimensionality` counts them (the
# participation ratio: 1 when every model lies on a line) and says how closely
# the first follows each model's mean score: an embedding that orders the
# models by strength alone cannot separate families of equal strength.
from locus_sklearn.inspection import embedding_dimensionality

spread = embedding_dimensionality(router, pool.evals)
print(
    f"participation ratio {spread.participation_ratio:.2f}; first component "
    f"{spread.explained_variance_ratio[0]:.0%} of the variance, correlation "
    f"with mean score {spread.strength_correlation:.2f}"
)

# %%
# Nearest models, and whether nearness means agreement
# ----------------------------------------------------
# :func:`~locus_sklearn.inspection.nearest_models` lists a model's proxies.
# :func:`~locus_sklearn.inspection.neighbor_agreement` checks that neighbors
# in the space agree on queries more often than random pairs do.
from locus_sklearn.inspection import nearest_models, neighbor_agreement

model = router.classes_[0]
print(f"nearest to {model}:")
print(nearest_models(router, model, k=4))
neighbor_agreement(router, pool.evals, k=[1, 2, 5, 10])

# %%
# The same questions asked of the answers themselves
# --------------------------------------------------
# Where models were scored on common queries (here any two share about 90),
# :func:`~locus_sklearn.inspection.score_disagreement` measures how often two
# models' answers differ on them. The map and the family functions take such
# distances with ``metric="precomputed"``: ``method="mds"`` (classical
# multidimensional scaling) draws the models so that their distances on the
# page match these as closely as two dimensions allow. Compare the adjusted
# Rand index below with the embeddings' above: on a pool whose models share
# queries, the answers themselves can be the better family finder (the
# benchmarks' ``embedding_quality.py`` measures both on real pools).
from locus_sklearn.inspection import score_disagreement

disagreement = score_disagreement(pool.evals).distance
fig, ax = plt.subplots(figsize=(7, 5.5), layout="constrained")
plot_model_map(
    disagreement,
    method="mds",
    metric="precomputed",
    groups=[pool.family[m] for m in disagreement.index],
    ax=ax,
)
ax.set_title("The same 30 models by how often their answers differ")
clusters = fcluster(
    model_linkage(disagreement, metric="precomputed"), t=5, criterion="maxclust"
)
family_of_row = [pool.family[m] for m in disagreement.index]
print(f"adjusted Rand index: {adjusted_rand_score(family_of_row, clusters):.2f}")
