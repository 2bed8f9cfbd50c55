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
# Queries split three ways: training, calibration (to tune the cost weight
# on queries the router did not see) and test.
split = GroupShuffleSplit(n_splits=1, test_size=0.4, random_state=0)
train_rows, held_rows = next(split.split(evals, groups=evals["query"]))
train, held = evals.iloc[train_rows], evals.iloc[held_rows]
split = GroupShuffleSplit(n_splits=1, test_size=0.5, random_state=0)
calibration_rows, test_rows = next(split.split(held, groups=held["query"]))
calibration, test = held.iloc[calibration_rows], held.iloc[test_rows]

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
    ),
).fit(train, model_costs=pool.n_params)
# The default shrinkage blends P(correct) toward each model's mean score by
# an amount chosen on the training queries; with costs it stays below 1, so
# that the cost weight has per-query estimates to trade against cost.
print(f"shrinkage chosen at fit: {router.shrinkage_:g}")
costs = router.model_costs_  # aligned with router.classes_

# %%
# The cost--quality curve
# -----------------------
# :func:`~locus_sklearn.inspection.cost_quality_curve` routes the test queries
# at every cost weight where some routing decision changes (found exactly,
# no grid) and records the accuracy of the routed models and their mean cost,
# the Pareto points, and the area under the curve (RouterBench's AIQ: the
# mean accuracy reachable over the costs covered).
from locus_sklearn.inspection import calibrate_cost_weight, cost_quality_curve

curve = cost_quality_curve(router, test)
print(f"{len(curve.points)} distinct routings, {len(curve.pareto)} Pareto points")
print(f"area under the curve (AIQ): {curve.auc:.3f}")
print(curve.pareto[["cost_weight", "mean_cost", "accuracy"]].head())

# %%
# Tune the cost weight to a target
# --------------------------------
# Ask for the least cost pressure (the smallest cost weight) whose mean cost
# is at most a quarter of the best single model's. :func:`~locus_sklearn.inspection.calibrate_cost_weight`
# needs only queries for a cost target (a log of real traffic will do). It is
# tuned on the calibration queries, which the router never read at fit (its
# kernel readout knows the answers to the training queries, so they would
# make it look surer than it is on new traffic), then checked on the test
# queries.
table = check_evals(test)
Y = table.to_dense(router.classes_)  # (n_queries, n_models)
best = np.argmax(Y.mean(axis=0))
target = costs[best] / 4
result = calibrate_cost_weight(
    router, calibration["query"].unique(), target_cost=target
)
print(
    f"target mean cost {target:.1f}: cost weight {result.cost_weight:.2e} gives "
    f"{result.mean_cost:.1f} on the calibration queries"
)
router.set_params(cost_weight=result.cost_weight)
routed = np.searchsorted(router.classes_, router.predict(table.queries))
test_cost = costs[routed].mean()
test_accuracy = Y[np.arange(len(Y)), routed].mean()
print(
    f"on the test queries: mean cost {test_cost:.1f}, accuracy {test_accuracy:.3f} "
    f"(best single model: {Y.mean(axis=0)[best]:.3f} at {costs[best]:.0f})"
)

# %%
# The curve, next to each model served alone
# ------------------------------------------
import matplotlib.pyplot as plt

points = curve.points
fig, ax = plt.subplots(figsize=(6.5, 4), layout="constrained")
ax.step(
    points["mean_cost"],
    points["accuracy"],
    where="post",
    lw=1,
    color="C0",
    label="LocusRouter, every cost weight",
)
ax.plot(curve.pareto["mean_cost"], curve.pareto["accuracy"], "o", ms=3, color="C0")
ax.scatter(costs, Y.mean(axis=0), color="C7", s=15, label="single models")
ax.annotate(
    "best single model",
    (costs[best], Y.mean(axis=0)[best]),
    textcoords="offset points",
    xytext=(5, -12),
)
ax.plot(
    test_cost,
    test_accuracy,
    "*",
    ms=14,
    color="C3",
    label=f"calibrated to mean cost {target:.0f}",
)
ax.axvline(target, color="C3", lw=0.8, ls="--")
ax.set_xscale("log")
ax.set_xlabel("mean cost per query (billions of parameters)")
ax.set_ylabel("accuracy on test queries")
ax.legend(loc="lower right")
plt.show()
