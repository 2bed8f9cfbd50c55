"""
=====================================
Trade accuracy for cost when routing
=====================================

With per-model costs, a router picks the model with the largest
``P(correct) - cost_weight * cost``. ``cost_weight = 0`` routes for accuracy
alone; larger weights send more queries to cheaper models. One fitted router
serves every point of the cost--quality curve: only ``cost_weight`` changes.
"""

# %%
# A router with costs
# -------------------
# Costs here are the synthetic models' sizes in billions of parameters, a
# stand-in for a price per query. Every model is scored on every query, so
# the realised accuracy of any routing decision is known on the test queries.
import numpy as np
from sklearn.model_selection import GroupShuffleSplit

from locus_sklearn import LocusEmbedder, LocusRouter, check_evals
from locus_sklearn.datasets import make_model_pool

pool = make_model_pool(
    n_models=30, n_queries=1000, evals_per_model="all", random_state=4
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
).fit(train, model_costs=pool.n_params)
costs = router.model_costs_  # aligned with router.classes_

# %%
# Sweep the cost weight
# ---------------------
# For each weight, route the test queries and record the accuracy of the
# routed models and their mean cost. ``score`` includes the cost weight.
table = check_evals(test)
Y = table.to_dense(router.classes_)  # (n_queries, n_models)
weights = np.concatenate([[0.0], np.geomspace(1e-5, 1e-1, 25)])
accuracy, mean_cost = [], []
for weight in weights:
    router.set_params(cost_weight=weight)
    routed = np.searchsorted(router.classes_, router.predict(table.queries))
    accuracy.append(Y[np.arange(len(Y)), routed].mean())
    mean_cost.append(costs[routed].mean())
router.set_params(cost_weight=0.0)
print(f"cost weight 0: accuracy {accuracy[0]:.3f} at mean cost {mean_cost[0]:.0f}")

# %%
# The curve, next to each model served alone
# ------------------------------------------
import matplotlib.pyplot as plt

fig, ax = plt.subplots(figsize=(6.5, 4), layout="constrained")
ax.plot(mean_cost, accuracy, "o-", ms=3, label="LocusRouter, cost weight swept")
ax.scatter(costs, Y.mean(axis=0), color="C7", s=15, label="single models")
best = np.argmax(Y.mean(axis=0))
ax.annotate(
    "best single model",
    (costs[best], Y.mean(axis=0)[best]),
    textcoords="offset points",
    xytext=(5, -12),
)
ax.set_xscale("log")
ax.set_xlabel("mean cost per query (billions of parameters)")
ax.set_ylabel("accuracy on test queries")
ax.legend(loc="lower right")
plt.show()

# %%
# The same in two lines, for a chosen weight: a cheaper router for a small
# loss of accuracy.
router.set_params(cost_weight=1e-3)
print(f"cost weight 1e-3: accuracy {router.score(test):.3f}")
