"""
==================================
Choose a portfolio of a few models
==================================

Serving every model of a large pool is costly. A portfolio -- a few models
that cover the pool's skills -- keeps most of the routing accuracy. Selectors
choose it from the model embeddings alone: by count
(:class:`~locus_sklearn.KMedoidsSelector`, :class:`~locus_sklearn.KCenterSelector`)
or within a budget of parameters or price
(:class:`~locus_sklearn.BudgetGreedySelector`); or from the router's
predictions, for expected routing accuracy
(:class:`~locus_sklearn.ExpectedAccuracySelector`).
:func:`~locus_sklearn.inspection.portfolio_curve` then measures routing
accuracy restricted to each portfolio, against random portfolios.
"""

# %%
# A router with per-model costs
# -----------------------------
# The cost of a model here is its size in billions of parameters (from the
# synthetic pool); it could be a price per query.
from sklearn.model_selection import GroupShuffleSplit

from locus_sklearn import LocusEmbedder, LocusRouter
from locus_sklearn.datasets import make_model_pool

pool = make_model_pool(n_models=40, n_queries=1000, evals_per_model=300, random_state=2)
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
        max_epochs=60,
        episodes_per_epoch=128,
        patience=15,
        random_state=0,
    )
).fit(train, model_costs=pool.n_params)

# %%
# A portfolio of five
# -------------------
# A selector works on any embedding matrix of shape (n_models, d);
# ``selected_indices_`` are rows in selection order, ``labels_`` tell which
# selected model covers each model of the pool.
from locus_sklearn import KMedoidsSelector

selector = KMedoidsSelector(n_select=5).fit(router.model_embeddings_)
portfolio = router.classes_[selector.selected_indices_]
print("portfolio:", ", ".join(portfolio))
print(f"routing among all: {router.score(test):.3f}")

# %%
# Route among the portfolio only with ``predict(queries, models=portfolio)``.
queries = test["query"].unique()[:3]
router.predict(queries, models=portfolio)

# %%
# Accuracy as the portfolio grows, by count and by budget
# -------------------------------------------------------
# Each point routes the test queries among the selected models only;
# the grey band is random portfolios of the same size (or random portfolios
# that fill the same budget).
import matplotlib.pyplot as plt

from locus_sklearn import BudgetGreedySelector
from locus_sklearn.inspection import plot_portfolio_curve, portfolio_curve

by_count = portfolio_curve(router, test, range(1, 13), random_state=0)
# The router's P(correct) on the training queries (no scores needed), for a
# portfolio chosen for expected routing accuracy.
from locus_sklearn import ExpectedAccuracySelector

P = router.predict_proba(train["query"].unique()).T  # (n_models, n_queries)
by_expected = portfolio_curve(
    router,
    test,
    range(1, 13),
    selector=ExpectedAccuracySelector(),
    embeddings=P,
    n_random=0,
)
budgets = [25, 50, 100, 200, 400, 800]
by_budget = portfolio_curve(
    router,
    test,
    budgets,
    selector=BudgetGreedySelector(),
    random_state=0,
)
fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), layout="constrained", sharey=True)
plot_portfolio_curve(by_count, ax=axes[0], label="k-medoids")
plot_portfolio_curve(
    by_expected, ax=axes[0], label="expected accuracy", random=False, full_pool=False
)
axes[0].legend()
axes[0].set_title("by number of models")
plot_portfolio_curve(by_budget, ax=axes[1], label="budget greedy")
axes[1].set_xscale("log")
axes[1].minorticks_off()
axes[1].set_xticks(budgets, [str(b) for b in budgets])
axes[1].set_xlabel("budget (billions of parameters)")
axes[1].set_title("by parameter budget")
by_budget[["value", "n_models", "cost", "accuracy", "random_mean"]]
