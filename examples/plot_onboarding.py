"""
==========================================
Onboard a new model from 128 evaluations
==========================================

A new model joins the pool with a few scored evaluations and no training:
:meth:`~locus_sklearn.LocusRouter.add_models` embeds it with the trained
encoder, and the router can route to it at once. As more of its evaluations
arrive, calling ``add_models`` again with all of them refreshes its embedding.

We hold six models out of training, onboard them from 8 to 800 evaluations,
and measure how well the router predicts their correctness on held-out
queries.
"""

# %%
# Train on the pool without the new models
# ----------------------------------------
# Every model is scored on every query here (``evals_per_model="all"``), so
# that each onboarded model can be tested on all held-out queries.
import numpy as np
from sklearn.model_selection import GroupShuffleSplit

from locus_sklearn import LocusEmbedder, LocusRouter, check_evals
from locus_sklearn.datasets import make_model_pool
from locus_sklearn.metrics import correctness_accuracy

pool = make_model_pool(
    n_models=36, n_queries=1000, evals_per_model="all", random_state=1
)
evals = pool.evals
split = GroupShuffleSplit(n_splits=1, test_size=0.2, random_state=0)
train_rows, test_rows = next(split.split(evals, groups=evals["query"]))
train, test = evals.iloc[train_rows], evals.iloc[test_rows]

new_models = pool.models["model"].to_numpy()[::6]  # one in six, across families
is_new = train["model"].isin(new_models)
print("held out of training:", ", ".join(new_models))

router = LocusRouter(
    LocusEmbedder(
        pool.encodings,
        embedding_dim=32,
        n_latents=8,
        n_blocks=1,
        enc_size=(8, 256),  # small sets too, so that few evaluations suffice
        dec_size=128,
        max_epochs=60,
        episodes_per_epoch=128,
        patience=15,
        random_state=0,
    )
).fit(train[~is_new])

# %%
# Onboard, then refresh as evaluations arrive
# -------------------------------------------
# Evaluations of each new model arrive in a random order; after ``n`` of them
# we pass all ``n`` to ``add_models`` (a new model is added, a known one is
# re-embedded) and score the router's P(correct) for the new models on the
# test queries. The reference: a constant guess from the same ``n``
# evaluations (the model's majority outcome), and the best possible
# accuracy, from the true success probabilities.
arrivals = (
    train[is_new].groupby("model", group_keys=False).sample(frac=1, random_state=0)
)
test_new = test[test["model"].isin(new_models)]
Y = check_evals(test_new).to_dense(new_models)
queries = check_evals(test_new).queries
true_p = pool.probabilities.loc[queries, new_models].to_numpy()

sizes = [8, 16, 32, 64, 128, 256, 512, 800]
locus_acc, majority_acc = [], []
for n in sizes:
    seen = arrivals.groupby("model").head(n)
    router.add_models(seen)
    columns = np.searchsorted(router.classes_, new_models)
    proba = router.predict_proba(queries)[:, columns]
    locus_acc.append(correctness_accuracy(Y, proba))
    majority = seen.groupby("model")["score"].mean().loc[new_models].to_numpy()
    majority_acc.append(correctness_accuracy(Y, np.broadcast_to(majority, Y.shape)))
    print(f"{n:4d} evaluations: LOCUS {locus_acc[-1]:.3f}, ", end="")
    print(f"majority {majority_acc[-1]:.3f}")
best = correctness_accuracy(Y, true_p)
print(f"with the true probabilities: {best:.3f}")

# %%
# Onboarded models are routed to like any other: here, the share of test
# queries sent to a new model.
routed = router.predict(check_evals(test).queries)
print(f"{np.isin(routed, new_models).mean():.0%} of test queries go to a new model")

# %%
import matplotlib.pyplot as plt

fig, ax = plt.subplots(figsize=(6, 3.5), layout="constrained")
ax.plot(sizes, locus_acc, "o-", label="LOCUS (add_models, no training)")
ax.plot(sizes, majority_acc, "s--", color="C7", label="majority outcome")
ax.axhline(best, color="k", ls=":", label="true probabilities")
ax.axvline(128, color="C3", lw=0.8)
ax.set_xscale("log", base=2)
ax.set_xlabel("evaluations of each new model")
ax.set_ylabel("correctness accuracy (test queries)")
ax.set_title("Onboarding six unseen models")
ax.legend()
plt.show()
