"""
=======================================
When the routed model is down: fallback
=======================================

Endpoints fail. When the model a query is routed to is unavailable, its
nearest neighbor in embedding space is a natural stand-in: near models
answer alike. :func:`~locus_sklearn.inspection.fallback_routing_accuracy`
measures how much accuracy that keeps, against a random stand-in; and
``predict(queries, models=...)`` re-routes among the models still up.
"""

# %%
# A fitted router
# ---------------
import numpy as np
from sklearn.model_selection import GroupShuffleSplit

from locus_sklearn import LocusEmbedder, LocusRouter
from locus_sklearn.datasets import make_model_pool

pool = make_model_pool(
    n_models=30, n_queries=1000, evals_per_model="all", random_state=3
)
evals = pool.evals
split = GroupShuffleSplit(n_splits=1, test_size=0.2, random_state=0)
train_rows, test_rows = next(split.split(evals, groups=evals["query"]))
train, test = evals.iloc[train_rows], evals.iloc[test_rows]
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
).fit(train)

# %%
# Each model's fallback order: the other models, nearest first.
from locus_sklearn.inspection import fallback_order

fallback_order(router).iloc[:5, :4]

# %%
# Fallback to the k-th nearest neighbor
# --------------------------------------
# Each test query is routed as usual; the routed model is then taken down
# and the query goes to its k-th nearest model. The baseline falls back in
# the order of random embeddings, i.e. to a random other model.
import matplotlib.pyplot as plt

from locus_sklearn.inspection import fallback_routing_accuracy

ks = [1, 2, 3, 5, 10, 20]
nearest = fallback_routing_accuracy(router, test, k=ks)
rng = np.random.default_rng(0)
random_runs = [
    fallback_routing_accuracy(
        router, test, k=ks, embeddings=rng.normal(size=router.model_embeddings_.shape)
    )["accuracy"]
    for _ in range(10)
]
random_fallback = np.mean(random_runs, axis=0)
print(nearest)

fig, ax = plt.subplots(figsize=(6, 3.5), layout="constrained")
ax.plot(ks, nearest["accuracy"], "o-", label="k-th nearest in LOCUS space")
ax.plot(ks, random_fallback, "s--", color="C7", label="random other model")
ax.axhline(nearest["no_outage_accuracy"].iloc[0], color="k", ls=":", label="no outage")
ax.set_xscale("log")
ax.set_xticks(ks, [str(k) for k in ks])
ax.set_xlabel("fallback model: neighbor rank k")
ax.set_ylabel("accuracy on test queries")
ax.legend()

# %%
# Re-routing around an outage
# ---------------------------
# With every model's P(correct) at hand, a router can also re-route among the
# models that are up: ``predict(queries, models=up)``. Say the two most-used
# models fail. ``score`` on the evaluations of the models that are up gives
# the routing accuracy during the outage.
queries = test["query"].unique()
routed = router.predict(queries)
names, counts = np.unique(routed, return_counts=True)
down = names[np.argsort(counts)[::-1][:2]]
up = [m for m in router.classes_ if m not in set(down)]
rerouted = router.predict(queries, models=up)
changed = np.mean(rerouted != routed)
print(f"down: {', '.join(down)}; {changed:.0%} of the queries go elsewhere")
print(f"routing accuracy, all models up: {router.score(test):.3f}")
during_outage = router.score(test[test["model"].isin(up)])
print(f"routing accuracy, {len(up)} models up: {during_outage:.3f}")
plt.show()
