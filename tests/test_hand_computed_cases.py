"""Small sparse or asymmetric cases, each worked out by hand.

Most tests elsewhere use complete matrices, models that all share queries,
overall means of exactly 0.5 or float64 copies of float32 data: on such
symmetric inputs two different formulas (a mean over observed cells or over
all cells, a pooled or a per-model average, the rows or the columns of a
distance matrix) give the same number. Each case here is one where they
differ, with the expected value derived in the comment above it.
"""

import re
import warnings

import numpy as np
import pandas as pd
import pytest

from locus_sklearn import (
    BudgetGreedySelector,
    ExpectedAccuracySelector,
    KCenterSelector,
)
from locus_sklearn.baselines import KMeansRouter, KNNRouter, SingleBestRouter
from locus_sklearn.inspection import (
    cost_quality_curve,
    neighbor_agreement,
    portfolio_curve,
    profile_recall_at_k,
)
from locus_sklearn.metrics import correctness_log_loss, single_best_accuracy

nan = np.nan


def test_single_best_accuracy_defaults_to_the_best_mean_over_observed_scores():
    # Model 0 is scored once (1), model 1 three times (0, 1, 1).
    # Observed means: model 0 1/1 = 1.0, model 1 2/3: the default is model 0,
    # and its accuracy over the queries it has a score for is 1/1 = 1.0.
    # (Counting a missing score as 0, model 0's mean would be 1/3 < 2/3, and
    # model 1's accuracy 2/3 would come out.)
    y_true = [[1.0, 0.0], [nan, 1.0], [nan, 1.0]]
    assert single_best_accuracy(y_true) == 1.0
    assert single_best_accuracy(y_true, model=1) == pytest.approx(2 / 3)
    # The same by label: column "b" holds model 0's scores.
    frame = pd.DataFrame(y_true, columns=["b", "a"])
    assert single_best_accuracy(frame) == 1.0


def test_correctness_log_loss_averages_over_observed_cells_only():
    # One observed cell, score 1 predicted 0.5: -log(0.5) = log 2. The NaN
    # cell is skipped, not counted as a zero loss (which would give log 2 / 2).
    assert correctness_log_loss([[1.0, nan]], [[0.5, 0.5]]) == pytest.approx(np.log(2))
    # Two observed cells of four, a 1 predicted 0.8 and a 0 predicted 0.4:
    # -(log 0.8 + log(1 - 0.4)) / 2 ~ 0.3670; the 0.9s under the NaNs are
    # unused.
    loss = correctness_log_loss([[1.0, nan], [nan, 0.0]], [[0.8, 0.9], [0.9, 0.4]])
    assert loss == pytest.approx(-(np.log(0.8) + np.log(0.6)) / 2)


def test_k_center_ties_at_zero_coverage_go_to_the_farthest_from_the_selection():
    # Points 0, 50, 99, 100 with bandwidth 0.01: every distance between two
    # models (>= 1) is >= 100 bandwidths, so every kernel value off the
    # diagonal underflows to 0. Row sums are all 1: the tie goes to row 0.
    # Then all coverages are 0 and the distances rank the models:
    #   step 2: distances to {0}: 50, 99, 100 -> row 3 (100);
    #   step 3: distances to {0, 100}: min(50, 50) = 50 for row 1,
    #           min(99, 1) = 1 for row 2 -> row 1 (50).
    # (Ranked by the distance to the first pick alone, 99 would come third,
    # next to the 100 already selected.)
    X = np.array([[0.0], [50.0], [99.0], [100.0]])
    selector = KCenterSelector(n_select=3, metric="euclidean", bandwidth=0.01).fit(X)
    assert selector.selected_indices_.tolist() == [0, 3, 1]


def test_expected_accuracy_selector_warns_of_a_gain_of_exactly_zero():
    # Utilities (any finite values are allowed). F of each single model:
    # row 0 (-0.5 + 0) / 2 = -0.25, row 1 0, row 2 (0 - 0.25) / 2 = -0.125:
    # row 1 first, F = 0. With it, max(P[m], 0) is 0 on both queries for
    # every other row, so rows 0 and 2 both give F = 0 (a tie, to row 0),
    # then row 2 F = 0. The steps gain exactly 0, and every term averaged is
    # 0, so the rounding tolerance is 0 too: a gain <= 0 is no gain.
    X = np.array([[-0.5, 0.0], [0.0, 0.0], [0.0, -0.25]])
    message = re.escape(
        "Selecting model 2 of n_select=3, and every model after it, raised the "
        "expected accuracy by nothing"
    )
    with pytest.warns(UserWarning, match=message):
        selector = ExpectedAccuracySelector(n_select=3).fit(X)
    assert selector.selected_indices_.tolist() == [1, 0, 2]
    assert selector.objective_path_.tolist() == [0.0, 0.0, 0.0]
    assert selector.full_objective_ == 0.0


def test_kmeans_router_shrinks_toward_each_models_own_mean():
    # Clusters {q1, q2} and {q3, q4}. Model a is scored 1, 1, 1, 0 (mean 3/4);
    # model b only on q1, q3, q4: 0, 1, 1 (mean 2/3). With prior_strength 1,
    # p(m, c) = (sum_c + mean_m) / (n(m, c) + 1):
    #   a, {q1, q2}: (2 + 3/4) / 3 = 11/12;  a, {q3, q4}: (1 + 3/4) / 3 = 7/12;
    #   b, {q1, q2}: (0 + 2/3) / 2 = 1/3;    b, {q3, q4}: (2 + 2/3) / 3 = 8/9.
    # (Shrunk toward 0.5 instead: 5/6, 1/2, 1/4 and 5/6.)
    encoder = {"q1": [1.0, 0.0], "q2": [0.9, 0.1], "q3": [0.0, 1.0], "q4": [0.1, 0.9]}
    evals = {
        "model": ["a"] * 4 + ["b"] * 3,
        "query": ["q1", "q2", "q3", "q4", "q1", "q3", "q4"],
        "score": [1.0, 1.0, 1.0, 0.0, 0.0, 1.0, 1.0],
    }
    router = KMeansRouter(2, encoder=encoder, prior_strength=1.0, random_state=0)
    router.fit(evals)
    np.testing.assert_allclose(router.mean_scores_, [3 / 4, 2 / 3])
    np.testing.assert_allclose(
        router.predict_proba(["q1", "q4"]), [[11 / 12, 1 / 3], [7 / 12, 8 / 9]]
    )


def test_pareto_front_ignores_a_float32_rounding_gain_in_float32_scores():
    # KNN (k=1) predicts a 0.1 and b 0.9 on both queries; costs a 1, b 2.
    # Utilities 0.9 - 2λ and 0.1 - λ cross at λ = 0.8: below, both queries go
    # to b (cost 2, scores 0.3 and 0.4), above, to a (cost 1, 0.7 and 0.0).
    # By hand both accuracies are 0.35, so b's costlier routing is dominated.
    # In float32 the scores read 0.300000012 + 0.400000006 and 0.699999988:
    # means of 0.3500000089 and 0.3499999940, 1.5e-8 apart, well within
    # float32's eps (1.2e-7), the documented tolerance.
    encoder = {"q1": [1.0, 0.0], "q2": [0.0, 1.0]}
    train = pd.DataFrame(
        {
            "model": ["a", "a", "b", "b"],
            "query": ["q1", "q2", "q1", "q2"],
            "score": [0.1, 0.1, 0.9, 0.9],
        }
    )
    test = train.assign(score=np.array([0.7, 0.0, 0.3, 0.4], dtype=np.float32))
    router = KNNRouter(k=1, encoder=encoder).fit(
        train, model_costs={"a": 1.0, "b": 2.0}
    )
    points = cost_quality_curve(router, test).points
    assert points["mean_cost"].tolist() == [2.0, 1.0]
    # The float32 rounding really is there (else this test proves nothing).
    assert points["accuracy"][0] > points["accuracy"][1]
    np.testing.assert_allclose(points["accuracy"], [0.35, 0.35], atol=1e-7)
    assert points["pareto"].tolist() == [False, True]


def test_cost_quality_curve_on_a_grid_routes_among_scored_models_only():
    # SingleBestRouter predicts each model's training mean: a 1.0, b 0.5;
    # costs a 1, b 0.5. Utilities 1 - λ and 0.5 - 0.5λ cross at λ = 1.
    # Held out, a has no score on q2: q2 goes to b, whatever λ.
    #   λ = 0: q1 -> a (score 1), q2 -> b (score 1):
    #          mean cost (1 + 0.5) / 2 = 0.75, accuracy 1.0;
    #   λ = 2: q1 -> b (score 0), q2 -> b (score 1):
    #          mean cost 0.5, accuracy 0.5.
    # (Routing q2 to a, which has no score there, gives cost 1 and NaN.)
    train = {
        "model": ["a", "a", "b", "b"],
        "query": ["q1", "q2", "q1", "q2"],
        "score": [1.0, 1.0, 0.0, 1.0],
    }
    router = SingleBestRouter().fit(train, model_costs={"a": 1.0, "b": 0.5})
    test = {
        "model": ["a", "b", "b"],
        "query": ["q1", "q1", "q2"],
        "score": [1.0, 0.0, 1.0],
    }
    grid = cost_quality_curve(router, test, [0.0, 2.0]).points
    np.testing.assert_allclose(grid["mean_cost"], [0.75, 0.5])
    np.testing.assert_allclose(grid["accuracy"], [1.0, 0.5])
    assert grid["pareto"].tolist() == [True, True]
    # The exact curve's ends agree with the grid.
    exact = cost_quality_curve(router, test).points
    np.testing.assert_allclose(exact["mean_cost"].iloc[[0, -1]], [0.75, 0.5])
    np.testing.assert_allclose(exact["accuracy"].iloc[[0, -1]], [1.0, 0.5])


def test_portfolio_curve_random_budget_baseline_draws_different_portfolios():
    # Four models of cost 1 and a budget of 2: a random budget-feasible
    # portfolio to which no further model fits is a pair, each of the 6
    # pairs equally likely. SingleBestRouter routes a pair to its member of
    # best training mean (a 1.0, b 0, c 0.5, d 0.5), so a pair's accuracy is
    #   {a, *}: 1.0 (3 pairs); {b, c}, {b, d}: 0.5; {c, d}: 0.5 either way,
    # mean 0.75 and standard deviation 0.25 over the pairs. A baseline that
    # always took the same pair ({a, b}) would give 1.0 and 0.
    models = ["a", "b", "c", "d"]
    evals = {
        "model": np.repeat(models, 4),
        "query": np.tile(["q1", "q2", "q3", "q4"], 4),
        "score": [1, 1, 1, 1, 0, 0, 0, 0, 1, 0, 1, 0, 0, 1, 0, 1],
    }
    router = SingleBestRouter().fit(evals)
    Z = [[0.0, 1.0], [1.0, 0.0], [0.7, 0.7], [-1.0, 0.0]]
    curve = portfolio_curve(
        router,
        evals,
        [2.0],
        selector=BudgetGreedySelector(),
        costs=np.ones(4),
        embeddings=Z,
        n_random=400,
        random_state=0,
    )
    assert curve["n_random"][0] == 400
    # 400 draws: standard errors of 0.25 / sqrt(400) = 0.0125 on the mean.
    assert curve["random_mean"][0] == pytest.approx(0.75, abs=0.05)
    assert curve["random_std"][0] == pytest.approx(0.25, abs=0.05)


def test_neighbor_agreement_random_baseline_weighs_every_model_the_same():
    # A chain: a and b share q1, b and c q2, c and d q3, no other pair shares
    # a query. Agreements: a-b 1 (1 and 1), b-c 0 (1 and 0), c-d 1 (1 and 1).
    # Mean agreement of each model with the models it shares a query with:
    # a 1, b (1 + 0) / 2, c (0 + 1) / 2, d 1 -> random_agreement 3 / 4.
    # (Pooled over the pairs instead: 2 / 3.)
    # Positions 0, 2, 3, 5: nearest neighbors a -> b, b -> c, c -> b, d -> c:
    # agreement (1 + 0 + 0 + 1) / 4 = 0.5 at k=1. Second nearest: a -> c and
    # d -> b share no query; b -> a (2 < 3), c -> d (2 < 3), both 1: 1.0 over
    # 2 models.
    evals = {
        "model": ["a", "b", "b", "c", "c", "d"],
        "query": ["q1", "q1", "q2", "q2", "q3", "q3"],
        "score": [1, 1, 1, 0, 1, 1],
    }
    Z = [[0.0, 0.0], [2.0, 0.0], [3.0, 0.0], [5.0, 0.0]]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = neighbor_agreement(Z, evals, k=[1, 2], metric="euclidean")
    assert result["k"].tolist() == [1, 2]
    np.testing.assert_allclose(result["agreement"], [0.5, 1.0])
    np.testing.assert_allclose(result["random_agreement"], [0.75, 0.75])
    assert result["n_models"].tolist() == [4, 2]


class _TaskAccuracy:
    """Embeds a model as its mean score per task (columns: code, math)."""

    def transform(self, evals):
        by_task = evals.groupby(["model", "task"])["score"].mean()
        return by_task.unstack().to_numpy()


def test_profile_recall_ranks_the_real_embeddings_by_distance_to_each_profile():
    # Profiles (code, math): a (0.2, 0.9), b (0.9, 0.2), c (0.5, 0.5); with
    # exact scores their embeddings are the profiles themselves. The real
    # embeddings are the same but c's, moved to (0.5, 2.5). Distances from
    # the profile (rows) to the real embeddings (columns):
    #          a       b       c
    #   a  0       0.990   1.628  (sqrt(0.09 + 2.56))
    #   b  0.990   0       2.335  (sqrt(0.16 + 5.29))
    #   c  0.5     0.5     2.0
    # Rank of model m: 1 + the real embeddings nearer to m's profile than m's
    # own, along row m: a 1, b 1, c 3 (a and b at 0.5 < 2.0). recall@1 and
    # recall@2 are 2/3, recall@3 is 1. (Down column m instead, c would rank
    # 2: only profile a, at 1.628, is nearer to c's real embedding than 2.0.)
    def scores(math, code):  # 20 math then 20 code queries
        return [1] * math + [0] * (20 - math) + [1] * code + [0] * (20 - code)

    evals = {
        "model": np.repeat(["a", "b", "c"], 40),
        "query": np.tile([f"q{i}" for i in range(40)], 3),
        "task": np.tile(["math"] * 20 + ["code"] * 20, 3),
        "score": scores(18, 4) + scores(4, 18) + scores(10, 10),
    }
    reference = np.array([[0.2, 0.9], [0.9, 0.2], [0.5, 2.5]])
    result = profile_recall_at_k(
        _TaskAccuracy(),
        evals,
        k=[1, 2, 3],
        n_evals=40,
        scores="exact",
        metric="euclidean",
        reference=reference,
    )
    assert result.ranks.to_dict() == {"a": 1, "b": 1, "c": 3}
    np.testing.assert_allclose(result.recall.to_numpy(), [2 / 3, 2 / 3, 1.0])
