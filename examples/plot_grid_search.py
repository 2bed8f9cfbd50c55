"""
=========================================
Tune hyper-parameters with GridSearchCV
=========================================

A :class:`~locus_sklearn.LocusRouter` is a scikit-learn estimator: its
embedder's hyper-parameters are reachable as ``embedder__<name>``, and
:class:`~sklearn.model_selection.GridSearchCV` searches them. Splitting with
:class:`~sklearn.model_selection.GroupKFold` on the query keeps every
evaluation of a validation query out of training -- the paper's protocol
(routing unseen queries). To test onboarding of unseen models instead,
:class:`~locus_sklearn.model_selection.ModelGroupSplit` holds whole models
out and :func:`~locus_sklearn.model_selection.make_onboarding_scorer`
onboards them with ``add_models`` before scoring them (last section).
"""

# %%
# A small grid
# ------------
# Two values of the query-noise regulariser, three folds: six short fits and
# a final refit on all data. The score is the router's own ``score``, routing
# accuracy; :func:`~locus_sklearn.metrics.get_router_scorer` adds others.
import pandas as pd
from sklearn.model_selection import GridSearchCV, GroupKFold

from locus_sklearn import LocusEmbedder, LocusRouter
from locus_sklearn.datasets import make_model_pool
from locus_sklearn.metrics import get_router_scorer

pool = make_model_pool(n_models=20, n_queries=600, evals_per_model=200, random_state=5)
evals = pool.evals

router = LocusRouter(
    LocusEmbedder(
        pool.encodings,
        embedding_dim=16,
        n_latents=4,
        n_blocks=1,
        enc_size=(32, 128),
        dec_size=64,
        max_epochs=25,
        episodes_per_epoch=64,
        random_state=0,
    )
)
search = GridSearchCV(
    router,
    {"embedder__query_noise": [0.0, 0.2]},
    cv=GroupKFold(n_splits=3),
    scoring={
        "routing": get_router_scorer("routing_accuracy"),
        "correctness": get_router_scorer("correctness_accuracy"),
    },
    refit="routing",
)
search.fit(evals, groups=evals["query"])
print("best:", search.best_params_, f"routing accuracy {search.best_score_:.3f}")

# %%
# The results
# -----------
results = pd.DataFrame(search.cv_results_)
results[
    [
        "param_embedder__query_noise",
        "mean_test_routing",
        "std_test_routing",
        "mean_test_correctness",
        "mean_fit_time",
    ]
]

# %%
import matplotlib.pyplot as plt

fig, ax = plt.subplots(figsize=(5, 3.2), layout="constrained")
labels = [str(v) for v in results["param_embedder__query_noise"]]
ax.bar(
    labels, results["mean_test_routing"], yerr=results["std_test_routing"], capsize=4
)
ax.set_ylim(0.5, 1.0)
ax.set_xlabel("embedder__query_noise")
ax.set_ylabel("routing accuracy (3-fold, unseen queries)")
plt.show()

# %%
# ``search.best_estimator_`` is the router refitted on all evaluations with
# the best setting, ready to route.
search.best_estimator_.predict(evals["query"].unique()[:3])

# %%
# Searching for the best onboarding
# ----------------------------------
# ``GroupKFold`` on ``evals["model"]`` would score each fold with a router
# that has never seen the held-out models: every score is NaN. Instead,
# :class:`~locus_sklearn.model_selection.ModelGroupSplit` holds out whole
# models, and its scorer onboards each of them from ``n_onboard`` of its
# evaluations through ``add_models`` (no training), then scores the
# onboarded models on their other evaluations: here, correctness accuracy
# of their predicted P(correct).
from locus_sklearn.model_selection import ModelGroupSplit, make_onboarding_scorer

cv = ModelGroupSplit(n_splits=3, n_onboard=64, random_state=0)
onboarding_search = GridSearchCV(
    router,
    {"embedder__enc_size": [(32, 128), (64, 128)]},
    cv=cv,
    scoring=make_onboarding_scorer(cv),
    refit=False,  # only the scores are wanted here
)
onboarding_search.fit(evals)
pd.DataFrame(onboarding_search.cv_results_)[
    ["param_embedder__enc_size", "mean_test_score", "std_test_score"]
]
