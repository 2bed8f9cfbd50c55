"""Portfolio selectors: sklearn conventions, hand-computed cases, invariants."""

import itertools
import math
import pickle
import warnings

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.base import clone
from sklearn.exceptions import ConvergenceWarning
from sklearn.metrics import pairwise_distances
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils._param_validation import InvalidParameterError

from locus_sklearn import (
    BudgetGreedySelector,
    KCenterSelector,
    KMedoidsSelector,
    budget_greedy_select,
    k_center_select,
    k_medoids_select,
)


def J(K, selected):
    return K[:, selected].max(axis=1).sum()


def kernel(X, metric="euclidean"):
    D = pairwise_distances(X, metric=metric)
    n = len(D)
    sigma = np.median(D[~np.eye(n, dtype=bool)])
    return np.exp(-(D**2) / sigma**2)


def random_pool(seed, n, d=3):
    return np.random.default_rng(seed).standard_normal((n, d))


# ---------------------------------------------------------------- kernel, bandwidth


def test_median_bandwidth_hand_computed():
    # Pair distances 1, 3, 7, 2, 6, 4: the median is (3 + 4) / 2.
    X = np.array([[0.0], [1.0], [3.0], [7.0]])
    selector = KCenterSelector(1, metric="euclidean").fit(X)
    assert selector.bandwidth_ == pytest.approx(3.5)
    # K(x, z) = exp(-d^2 / sigma^2) to the selected model.
    z = X[selector.selected_indices_[0], 0]
    expected = np.exp(-((X[:, 0] - z) ** 2) / 3.5**2)
    np.testing.assert_allclose(selector.transform(X)[:, 0], expected)


def test_cosine_bandwidth_hand_computed():
    # Cosine distances: 1 between the axes, 1 - 1/sqrt(2) to the diagonal.
    X = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    selector = KCenterSelector(1).fit(X)
    assert selector.bandwidth_ == pytest.approx(1 - 1 / np.sqrt(2))
    # The diagonal is the kernel medoid.
    assert selector.selected_indices_.tolist() == [2]
    np.testing.assert_allclose(selector.coverage_, [np.exp(-1.0), np.exp(-1.0), 1.0])


def test_bandwidth_fallbacks():
    # 4 duplicates and 1 other model: 6 of 10 pairs are at distance 0, so the
    # median of the non-zero distances (all 2.0) is used.
    X = np.array([[0.0]] * 4 + [[2.0]])
    assert KCenterSelector(1, metric="euclidean").fit(X).bandwidth_ == 2.0
    assert KCenterSelector(1, metric="euclidean").fit(np.ones((3, 2))).bandwidth_ == 1
    assert KCenterSelector(1).fit([[1.0, 2.0]]).bandwidth_ == 1.0


def test_identical_rows_are_at_distance_zero():
    # 1 - cos of two copies of a row rounds to ~2e-16, which the median rule
    # took as the bandwidth: coverage exp(-1) for models covered by their copy.
    row = [0.3, 0.7, 0.1]
    for X in (np.tile(row, (4, 1)), [[1.0, 1.0], [3.0, 3.0]]):  # copies, same way
        selector = KCenterSelector(1).fit(X)
        assert selector.bandwidth_ == 1.0
        np.testing.assert_array_equal(selector.coverage_, 1.0)
        assert selector.objective_ == 1.0
    # 6 of 10 pairs are copies: sigma is the one other distance, 1 - cos.
    X = np.array([row] * 4 + [[1.0, 0.0, 0.0]])
    selector = KMedoidsSelector(2).fit(X)
    assert selector.bandwidth_ == pytest.approx(1 - 0.3 / np.sqrt(0.59))
    assert selector.objective_ == 5.0
    # euclidean_distances leaves ~1e-8 |x| between copies of a random row.
    X = np.repeat(random_pool(4, 2, d=64) * 30, [4, 1], axis=0)
    selector = KCenterSelector(1, metric="euclidean").fit(X)
    assert selector.bandwidth_ == pytest.approx(np.linalg.norm(X[0] - X[-1]))
    np.testing.assert_array_equal(selector.transform(X[:4]), 1.0)


def test_zero_vector_is_at_cosine_distance_zero_from_itself():
    # Distance 1 from the axes, 0 from itself on both the kernel-matrix path
    # (fit) and the row-to-selection path (coverage_, transform).
    X = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    selector = KCenterSelector(3).fit(X)
    assert selector.bandwidth_ == 1.0
    np.testing.assert_array_equal(selector.coverage_, 1.0)
    assert selector.objective_ == 1.0
    column = selector.selected_indices_.tolist().index(0)
    expected = np.full(3, np.exp(-1.0))
    expected[column] = 1.0
    np.testing.assert_allclose(selector.transform([[0.0, 0.0]])[0], expected)


def test_float_bandwidth_is_kept_and_user_parameters_untouched():
    X = np.array([[0.0], [1.0], [3.0]])
    selector = KCenterSelector(2, metric="euclidean", bandwidth=2.0).fit(X)
    assert selector.bandwidth == 2.0 and selector.bandwidth_ == 2.0
    np.testing.assert_allclose(
        selector.transform([[1.0]]),
        np.exp(-((1.0 - X[selector.selected_indices_, 0]) ** 2) / 4.0)[None],
    )
    assert selector.get_params() == clone(selector).get_params()


def test_precomputed_matches_euclidean():
    X = random_pool(0, 12)
    D = pairwise_distances(X)
    for selector in (KCenterSelector(4), KMedoidsSelector(4), BudgetGreedySelector(4)):
        a = clone(selector).set_params(metric="euclidean").fit(X)
        b = clone(selector).set_params(metric="precomputed").fit(D)
        assert a.selected_indices_.tolist() == b.selected_indices_.tolist()
        assert b.selected_embeddings_ is None
        assert b.n_features_in_ == 12
        # transform takes the distances from new rows to the fitted models.
        np.testing.assert_allclose(a.transform(X[:3]), b.transform(D[:3]), atol=1e-10)
        np.testing.assert_array_equal(b.predict(D), b.labels_)


# ---------------------------------------------------------------- hand-computed runs


def test_k_center_hand_computed_with_tie():
    X = np.array([[0.0], [0.1], [5.0], [5.1], [10.0]])
    selector = KCenterSelector(3, metric="euclidean").fit(X)
    # Medoid 5.0; then 0.0 and 10.0 are both 5.0 away: the lowest index wins.
    assert selector.selected_indices_.tolist() == [2, 0, 4]
    assert selector.labels_.tolist() == [1, 1, 0, 0, 2]
    assert selector.objective_ == pytest.approx(selector.coverage_.min())


def test_k_medoids_improves_on_k_center():
    X = np.array([[0.0], [0.1], [0.2], [3.0], [3.1], [10.0]])
    for method in ("fasterpam", "pam"):
        selector = KMedoidsSelector(2, metric="euclidean", method=method).fit(X)
        assert selector.initial_indices_.tolist() == [2, 5]
        assert selector.selected_indices_.tolist() == [1, 4]
        assert selector.n_iter_ >= 1
        K = kernel(X)
        assert selector.objective_ == pytest.approx(J(K, [1, 4]))
        assert selector.objective_ > J(K, [2, 5])


def test_budget_greedy_hand_computed():
    # Model 0 and 1 are alike; 1 is expensive; 2 is far from both.
    D = np.array([[0.0, 0.5, 3.0], [0.5, 0.0, 3.0], [3.0, 3.0, 0.0]])
    costs = [1.0, 10.0, 1.0]
    fit = BudgetGreedySelector(2.0, metric="precomputed", bandwidth=1.0).fit
    selector = fit(D, costs=costs)
    assert selector.selected_indices_.tolist() == [0, 2]
    assert selector.total_cost_ == 2.0
    K = np.exp(-(D**2))
    assert selector.objective_ == pytest.approx(J(K, [0, 2]))
    assert fit(D, costs=[1.0, 10.0, 1.0]).selected_indices_.tolist() == [0, 2]
    big = BudgetGreedySelector(12.0, metric="precomputed", bandwidth=1.0)
    assert big.fit(D, costs=costs).selected_indices_.tolist() == [0, 2, 1]
    # Unit costs by default: the budget counts models.
    assert BudgetGreedySelector(1.0).fit(D[:, :2]).selected_indices_.shape == (1,)


def test_functions_match_estimators():
    X = random_pool(1, 15)
    pairs = [
        (k_center_select(X, 4), KCenterSelector(4).fit(X)),
        (k_medoids_select(X, 4), KMedoidsSelector(4).fit(X)),
        (budget_greedy_select(X, 4.0), BudgetGreedySelector(4.0).fit(X)),
    ]
    for (selected, labels, objective), selector in pairs:
        np.testing.assert_array_equal(selected, selector.selected_indices_)
        np.testing.assert_array_equal(labels, selector.labels_)
        assert objective == pytest.approx(selector.objective_)
    *_, n_iter = k_medoids_select(X, 4, return_n_iter=True)
    assert n_iter == KMedoidsSelector(4).fit(X).n_iter_


def test_max_iter_reached_warns():
    X = random_pool(2, 60, d=2)
    with pytest.warns(ConvergenceWarning, match="max_iter=1") as record:
        KMedoidsSelector(6, max_iter=1, method="pam").fit(X)
    assert record[0].filename == __file__  # the caller's line


# ---------------------------------------------------------------- kernel underflow


def _family_and_outliers():
    # A family of 20 near-identical models (fine-tunes, within 0.01) and three
    # distinct ones at 1, 2 and 10: the median bandwidth is ~0.005, so every
    # model beyond ~0.14 of the selection has similarity exactly 0.
    rng = np.random.default_rng(0)
    return np.r_[rng.uniform(0, 0.01, 20), [1.0, 2.0, 10.0]][:, None]


def test_k_center_takes_the_farthest_model_where_the_kernel_underflows():
    # Similarity 0 tied every model far from the selection, and argmin took
    # the lowest row: 1.0 and 2.0 were chosen, 10.0 left 8.0 from any
    # selected model where 0.99 is optimal (Gonzalez: at most twice that).
    X = _family_and_outliers()
    D = pairwise_distances(X)
    for fit in (
        lambda: KCenterSelector(3, metric="euclidean").fit(X).selected_indices_,
        lambda: KMedoidsSelector(3, metric="euclidean").fit(X).initial_indices_,
        lambda: k_center_select(X, 3, metric="euclidean")[0],
        lambda: k_center_select(D, 3, metric="precomputed")[0],
    ):
        selected = fit()
        assert selected[1:].tolist() == [22, 21]  # 10.0, then 2.0
        radius = D[:, selected].min(axis=1).max()
        best = min(
            D[:, list(s)].min(axis=1).max()
            for s in itertools.combinations(range(len(X)), 3)
        )
        assert radius <= 2 * best
    # Selections stay nested.
    for k in range(1, 6):
        assert np.array_equal(
            KCenterSelector(k, metric="euclidean").fit(X).selected_indices_,
            KCenterSelector(k + 1, metric="euclidean").fit(X).selected_indices_[:k],
        )


def test_labels_and_predict_use_the_nearest_model_where_the_kernel_underflows():
    # A model at similarity 0 to every selected one (beyond ~27 bandwidths)
    # went to position 0, not to its nearest selected model.
    X = np.array([[0.0], [0.1], [1.0], [1.1], [60.0]])
    kw = dict(metric="euclidean", bandwidth=1.0)
    fitted = [
        KMedoidsSelector(2, **kw).fit(X),
        BudgetGreedySelector(2.0, **kw).fit(X),
        KCenterSelector(2, **kw).fit(X[:3]),
    ]
    for selector in fitted:
        assert selector.selected_indices_.tolist() == [1, 2]  # 0.1 and 1.0
        # 60.0 goes to 1.0, -50.0 to 0.1, 50.0 to 1.0.
        assert selector.predict([[-50.0], [50.0], [60.0]]).tolist() == [0, 1, 1]
        # transform still gives the kernel similarities.
        np.testing.assert_array_equal(selector.transform([[60.0]]), [[0.0, 0.0]])
    for selector in fitted[:2]:
        assert selector.coverage_[4] == 0.0  # the premise
        assert selector.labels_.tolist() == [0, 0, 1, 1, 1]
        np.testing.assert_array_equal(selector.predict(X), selector.labels_)
    assert k_medoids_select(X, 2, **kw)[1].tolist() == [0, 0, 1, 1, 1]
    assert budget_greedy_select(X, 2.0, **kw)[1].tolist() == [0, 0, 1, 1, 1]
    # The family of fine-tunes with a far outlier, at the median bandwidth.
    X = _family_and_outliers()
    selector = KCenterSelector(3, metric="euclidean").fit(X)
    nearest = np.argmin(pairwise_distances(X, X[selector.selected_indices_]), axis=1)
    np.testing.assert_array_equal(selector.labels_, nearest)
    _, labels, _ = k_center_select(X, 3, metric="euclidean")
    np.testing.assert_array_equal(labels, nearest)


@pytest.mark.parametrize("bandwidth", [1e-160, 1e-300, 5e-324])
def test_tiny_bandwidth_gives_no_nan(bandwidth):
    # -1 / sigma ** 2 overflowed to -inf (0 * -inf = NaN on the diagonal) and
    # raised ZeroDivisionError once sigma ** 2 underflowed to 0.
    X = np.arange(6.0)[:, None]
    kw = dict(metric="euclidean", bandwidth=bandwidth)
    fitted = [
        KCenterSelector(2, **kw).fit(X),
        KMedoidsSelector(2, **kw).fit(X),
        BudgetGreedySelector(2.0, **kw).fit(X),
    ]
    for selector in fitted:
        selected = selector.selected_indices_
        expected = np.zeros(6)
        expected[selected] = 1.0
        np.testing.assert_array_equal(selector.coverage_, expected)
        assert selector.objective_ == (0.0 if selector is fitted[0] else 2.0)
        np.testing.assert_array_equal(selector.transform(X), np.eye(6)[:, selected])
        nearest = np.argmin(np.abs(X - X[selected].T), axis=1)
        np.testing.assert_array_equal(selector.labels_, nearest)
    # Farthest-first on the distances: the medoid (row 0 on a tie), then 5.0.
    assert fitted[0].selected_indices_.tolist() == [0, 5]
    for function in (k_center_select, k_medoids_select):
        assert np.isfinite(function(X, 2, **kw)[2])
    # A huge bandwidth: every similarity is 1.
    huge = KCenterSelector(2, metric="euclidean", bandwidth=1e300).fit(X)
    np.testing.assert_array_equal(huge.coverage_, np.ones(6))


# ---------------------------------------------------------------- zero costs, ties


def test_budget_greedy_takes_free_models_first():
    # LocusRouter accepts model_costs >= 0 and the user guide passes its
    # model_costs_ on; a cost of 0 was refused ("finite and > 0").
    # Rows 0 and 4 are copies, 1 is near them, 2 and 3 far apart.
    X = np.array([[0.0], [0.5], [5.0], [10.0], [0.0]])
    costs = [0.0, 2.0, 0.0, 1.0, 0.0]
    selector = BudgetGreedySelector(1.5, metric="euclidean", bandwidth=1.0)
    selector.fit(X, costs=costs)
    # Free ones first, the larger gain first (0 and 4 tie: the lower row),
    # 4 gaining nothing after 0 but free; then 3 (gain 1 per unit cost);
    # 1 no longer fits.
    assert selector.selected_indices_.tolist() == [0, 2, 4, 3]
    assert selector.total_cost_ == 1.0
    K = np.exp(-(pairwise_distances(X) ** 2))
    assert selector.objective_ == pytest.approx(J(K, [0, 2, 3]))
    selected, _, _ = budget_greedy_select(X, 1.5, costs=costs, metric="euclidean")
    assert selected.tolist() == [0, 2, 4, 3]
    # Any budget takes every free model; all free: the gain order.
    assert BudgetGreedySelector(0.5, metric="euclidean", bandwidth=1.0).fit(
        X, costs=costs
    ).selected_indices_.tolist() == [0, 2, 4]
    free = BudgetGreedySelector(1.0, metric="euclidean", bandwidth=1.0)
    assert free.fit(X, costs=np.zeros(5)).selected_indices_.tolist() == [
        0,
        2,
        3,
        1,
        4,
    ]


def test_budget_greedy_ties_to_rounding_go_to_the_lower_row():
    # After row 6, rows 1, 4, 5 and 7 gain the same per unit cost in exact
    # arithmetic (mirrored positions), but 5 and 7 come out an ulp higher:
    # 5 was taken, though the user guide says ties go to the lower row.
    X = np.array(
        [[0, 0], [0, 2], [1, 0], [1, 1], [0, 2], [1, 2], [1, 0], [1, 2]], dtype=float
    )
    costs = np.array([1.0, 2.0, 3.0, 2.0, 2.0, 2.0, 1.0, 2.0])
    from locus_sklearn._selectors import _kernel_matrix

    selector = BudgetGreedySelector(6.0, metric="euclidean").fit(X, costs=costs)
    K, _ = _kernel_matrix(X, "euclidean", "median")
    rates = np.maximum(K - K[6], 0.0).sum(axis=1) / costs
    assert rates[5] > rates[1] and rates[5] == pytest.approx(rates[1], rel=1e-15)
    assert selector.selected_indices_.tolist()[:2] == [6, 1]
    assert _is_greedy_run(K, costs, 6.0, selector.selected_indices_.tolist())
    # Rows 1 and 5 swapped: the lower row is again taken, now model 5.
    order = [6, 5, 2, 3, 4, 1, 0, 7]  # row i of X[order] is model order[i]
    swapped = BudgetGreedySelector(6.0, metric="euclidean")
    swapped.fit(X[order], costs=costs[order])
    assert swapped.selected_indices_.tolist()[:2] == [0, 1]


# Three distinct models; with these costs the greedy takes 0, then 1 if it fits.
_THREE = np.array([[0.0], [5.0], [10.0]])


@pytest.mark.parametrize(
    "costs, budget", [([0.1, 0.2, 5.0], 0.3), ([1.1, 2.2, 9.0], 3.3)]
)
def test_budget_greedy_decimal_costs_that_add_up_to_the_budget_fit(costs, budget):
    # 0.1 + 0.2 is exactly 0.3000000000000000166 in binary, the float 0.3 is
    # 0.2999999999999999889: model 1, which completes the budget as written,
    # was silently left out ([0] only).
    assert math.fsum(costs[:2]) > budget  # over in binary, by rounding only
    selector = BudgetGreedySelector(budget, metric="euclidean").fit(_THREE, costs=costs)
    assert selector.selected_indices_.tolist() == [0, 1]
    assert selector.total_cost_ == math.fsum(costs[:2])
    selected, _, _ = budget_greedy_select(
        _THREE, budget, costs=costs, metric="euclidean"
    )
    assert selected.tolist() == [0, 1]
    # Over the budget by more than rounding (a relative 1e-9): still left out.
    over = [costs[0], (budget - costs[0]) + budget * 1e-9, costs[2]]
    assert BudgetGreedySelector(budget, metric="euclidean").fit(
        _THREE, costs=over
    ).selected_indices_.tolist() == [0]


def test_budget_within_rounding_of_the_cheapest_cost_fits():
    # The 'no model fits' check allows the same rounding as the greedy: a
    # model costing 0.1 + 0.2 fits a budget of 0.3 (it was refused).
    costs = [0.1 + 0.2, 5.0, 5.0]
    selector = BudgetGreedySelector(0.3, metric="euclidean").fit(_THREE, costs=costs)
    assert selector.selected_indices_.tolist() == [0]
    over = [0.3 * (1 + 1e-9), 5.0, 5.0]
    with pytest.raises(ValueError, match=r"budget=0.3 should be >= .*no model fits"):
        BudgetGreedySelector(0.3, metric="euclidean").fit(_THREE, costs=over)


def _float32_costs(form, costs):
    """``costs`` in float32 as a caller may hold them: by row (for _THREE),
    or by name (for _THREE indexed by "a", "b", "c")."""
    names = ["a", "b", "c"]
    if form == "tensor":
        return pytest.importorskip("torch").tensor(costs)  # float32 by default
    if form in ("float32", "Float32"):
        return pd.Series(costs, index=names, dtype=form)
    if form == "dict":
        return dict(zip(names, np.float32(costs), strict=True))
    if form == "object":  # float32 scalars in an object Series
        return pd.Series(list(np.float32(costs)), index=names, dtype=object)
    return np.asarray(costs, dtype=np.float32)


@pytest.mark.parametrize(
    "form", ["ndarray", "tensor", "float32", "Float32", "dict", "object"]
)
def test_budget_greedy_float32_costs_that_add_up_to_the_budget_fit(form):
    # float32 0.1 is 0.10000000149, 0.2 is 0.20000000298: 0.1 + 0.2 comes
    # out 0.30000000447, over the float 0.3 by a relative 1.5e-8, beyond
    # float64's slack (8 eps64, 1.8e-15), so model 1, which completes the
    # budget as written, was left out ([0] only) where float64 costs took it.
    def as_input(costs):
        return _float32_costs(form, costs)

    by_name = form not in ("ndarray", "tensor")
    X = pd.DataFrame(_THREE, index=["a", "b", "c"]) if by_name else _THREE
    costs = as_input([0.1, 0.2, 5.0])
    total = float(np.float32(0.1)) + float(np.float32(0.2))
    assert total == 0.30000000447034836  # exact: both are float32 values
    selector = BudgetGreedySelector(0.3, metric="euclidean").fit(X, costs=costs)
    assert selector.selected_indices_.tolist() == [0, 1]
    assert selector.total_cost_ == total  # the values as given, not rounded
    selected, _, _ = budget_greedy_select(X, 0.3, costs=costs, metric="euclidean")
    assert selected.tolist() == [0, 1]
    # The cheapest-cost check allows the same: float32 0.3 is 0.3000000119.
    alone = BudgetGreedySelector(0.3, metric="euclidean")
    alone.fit(X, costs=as_input([0.3, 5.0, 5.0]))
    assert alone.selected_indices_.tolist() == [0]
    assert alone.total_cost_ == float(np.float32(0.3)) == 0.30000001192092896
    # A float32 cost clearly over the budget is still refused: 0.1 + 0.21.
    over = BudgetGreedySelector(0.3, metric="euclidean")
    assert over.fit(X, costs=as_input([0.1, 0.21, 5.0])).selected_indices_.size == 1
    with pytest.raises(ValueError, match=r"budget=0.3 should be >= .*no model fits"):
        BudgetGreedySelector(0.3, metric="euclidean").fit(
            X, costs=as_input([0.31, 5.0, 5.0])
        )


def test_budget_slack_is_one_epsilon_of_the_costs_precision():
    # Costs of 0.5 and 0.5 + d against a budget of 1 (all exact in float32
    # and float64): over by a relative d. float32 costs are allowed one
    # float32 epsilon (2 ** -23 ~ 1.19e-7) beyond float64's 8 eps64, float64
    # costs float64's only. Model 1 (the middle one) is taken first.
    def selected(costs):
        selector = BudgetGreedySelector(1.0, metric="euclidean")
        return sorted(selector.fit(_THREE, costs=costs).selected_indices_.tolist())

    for d, fits32 in [(2.0**-24, True), (2.0**-22, False)]:
        costs = [0.5, 0.5 + d, 5.0]
        assert selected(np.array(costs, dtype=np.float32)) == (
            [0, 1] if fits32 else [1]
        )
        assert selected(np.array(costs, dtype=np.float64)) == [1]


def test_budget_greedy_costs_whose_sum_overflows_float64():
    # Two costs of 1e308 add up beyond the largest float64: math.fsum raised
    # OverflowError; such a total exceeds any budget, so one model is taken.
    selector = BudgetGreedySelector(1.5e308, metric="euclidean")
    selector.fit(_THREE, costs=[1e308, 1e308, 1e308])
    assert len(selector.selected_indices_) == 1
    assert selector.total_cost_ == 1e308


def test_budget_zero_selects_the_free_models_only():
    # Free models are allowed, yet budget=0 ("only my local models") was
    # refused as outside (0, inf).
    costs = [0.0, 0.0, 3.0]
    selector = BudgetGreedySelector(0.0, metric="euclidean").fit(_THREE, costs=costs)
    assert sorted(selector.selected_indices_.tolist()) == [0, 1]
    assert selector.total_cost_ == 0.0
    selected, _, _ = budget_greedy_select(_THREE, 0, costs=costs, metric="euclidean")
    assert sorted(selected.tolist()) == [0, 1]
    # No free model: the usual 'no model fits' error, not a parameter error.
    message = r"budget=0.0 should be >= the cheapest model's cost, costs\[1\]=1.0"
    with pytest.raises(ValueError, match=message):
        BudgetGreedySelector(0.0).fit(_THREE, costs=[2.0, 1.0, 3.0])
    with pytest.raises(ValueError, match="without costs every model costs 1"):
        BudgetGreedySelector(0.0).fit(_THREE)


# ---------------------------------------------------------------- validation


@pytest.mark.parametrize(
    "selector", [KCenterSelector(8), KMedoidsSelector(8)], ids=["kcenter", "kmedoids"]
)
def test_n_select_above_n_models(selector):
    with pytest.raises(ValueError, match=r"n_select=8 should be <= n_models=5"):
        selector.fit(np.eye(5))
    with pytest.raises(ValueError, match=r"n_select=8 should be <= n_models=5"):
        k_center_select(np.eye(5), 8)


@pytest.mark.parametrize(
    "costs, message",
    [
        (
            [1.0, -0.5, 1.0],
            r"costs must be finite and >= 0; 1 cost\(s\) are not: \[\(1, -0.5\)\]",
        ),
        ([1.0, np.nan, 1.0], r"costs must be finite and >= 0.*nan"),
        ([1.0, -2.0, np.inf], r"2 cost\(s\)"),
        ([1.0, 1.0], r"costs must have one cost per model, shape \(3,\); got shape"),
    ],
)
def test_bad_costs(costs, message):
    with pytest.raises(ValueError, match=message):
        BudgetGreedySelector(5.0).fit(np.eye(3), costs=costs)


def test_budget_below_cheapest_model():
    # The cheapest model named as the costs were given: by row position here.
    message = (
        r"budget=0.5 should be >= the cheapest model's cost, costs\[1\]=1.0; "
        r"no model fits"
    )
    with pytest.raises(ValueError, match=message):
        BudgetGreedySelector(0.5).fit(np.eye(3), costs=[2.0, 1.0, 3.0])
    with pytest.raises(ValueError, match=message):
        budget_greedy_select(np.eye(3), 0.5, costs=[2.0, 1.0, 3.0])


def test_budget_below_one_without_costs_says_each_model_costs_1():
    # It spoke of min(costs)=1.0, though no costs were given.
    message = (
        r"budget=0.5 selects no model: without costs every model costs 1, so "
        r"the budget counts models; pass budget >= 1"
    )
    with pytest.raises(ValueError, match=message):
        BudgetGreedySelector(0.5).fit(np.eye(3))
    with pytest.raises(ValueError, match=message):
        budget_greedy_select(np.eye(3), 0.5)


def test_cost_messages_name_the_model_when_costs_come_by_name():
    # Costs by name: the errors gave a row position (costs[1]=...) the user
    # never wrote.
    X, _ = _named_pool()  # rows a, b, c, d, e
    cheap_b = {"a": 3.0, "b": 2.0, "c": 4.0, "d": 5.0, "e": 6.0}
    message = r"budget=1.0 should be >= the cheapest model's cost, costs\['b'\]=2.0"
    for costs in (cheap_b, pd.Series(cheap_b)):
        with pytest.raises(ValueError, match=message):
            BudgetGreedySelector(1.0, metric="euclidean").fit(X, costs=costs)
        with pytest.raises(ValueError, match=message):
            budget_greedy_select(X, 1.0, costs=costs, metric="euclidean")
    tiny_c = {"a": 1.0, "b": 1.0, "c": 1e-300, "d": 1.0, "e": 1.0}
    with pytest.raises(ValueError, match=r"costs span too wide.*costs\['c'\]=1e-300"):
        BudgetGreedySelector(2.0, metric="euclidean").fit(X, costs=tiny_c)


def test_bad_parameters():
    with pytest.raises(InvalidParameterError, match="n_select"):
        KCenterSelector(0).fit(np.eye(3))
    with pytest.raises(InvalidParameterError, match="budget"):
        BudgetGreedySelector(-1.0).fit(np.eye(3))
    with pytest.raises(InvalidParameterError, match="metric"):
        KMedoidsSelector(2, metric="manhattan").fit(np.eye(3))
    with pytest.raises(InvalidParameterError, match="bandwidth"):
        KCenterSelector(2, bandwidth=0.0).fit(np.eye(3))
    with pytest.raises(InvalidParameterError, match="method"):
        KMedoidsSelector(2, method="clara").fit(np.eye(3))
    with pytest.raises(InvalidParameterError, match="n_select"):
        k_center_select(np.eye(3), 1.5)


@pytest.mark.parametrize(
    "fit",
    [
        lambda X: KCenterSelector(n_select=True).fit(X),
        lambda X: KMedoidsSelector(2, max_iter=True).fit(X),
        lambda X: BudgetGreedySelector(budget=True).fit(X),
        lambda X: KCenterSelector(2, bandwidth=True).fit(X),
        lambda X: k_center_select(X, True),
        lambda X: budget_greedy_select(X, True),
    ],
)
def test_bools_are_not_numbers(fit):
    # True is the int 1 to Python; it was taken as n_select=1, budget=1.0.
    with pytest.raises(
        InvalidParameterError, match=r"\(not a bool\)\. Got True instead"
    ):
        fit(np.eye(3))


@pytest.mark.parametrize("costs", [pd.Series([1.0, 1.0, 1.0]), {"a": 1.0}])
def test_costs_by_name_are_refused(costs):
    # check_model_costs read them by model name, naming rows 0, 1, 2 as such.
    message = r"costs is a (Series|dict), which names its models, but a selector"
    with pytest.raises(TypeError, match=message):
        BudgetGreedySelector(2.0).fit(np.eye(3), costs=costs)
    with pytest.raises(TypeError, match=message):
        budget_greedy_select(np.eye(3), 2.0, costs=costs)


def test_bad_precomputed_matrices():
    selector = KCenterSelector(1, metric="precomputed")
    with pytest.raises(
        ValueError, match=r"square distance matrix .* got shape \(3, 4\)"
    ):
        selector.fit(np.ones((3, 4)))
    with pytest.raises(ValueError, match="Negative values in data passed to X"):
        selector.fit(-np.ones((3, 3)))
    for scale in (1.0, 1e-9):  # in small units as asymmetric (atol ignored it)
        with pytest.raises(ValueError, match="not symmetric"):
            selector.fit(scale * np.array([[0.0, 1.0], [2.0, 0.0]]))
    fitted = selector.fit(pairwise_distances(np.eye(3)))
    with pytest.raises(ValueError, match="3 features"):
        fitted.transform(np.ones((2, 2)))


def test_precomputed_matrix_needs_a_zero_diagonal():
    # Cosine similarities (diagonal 1) passed as distances were accepted and
    # read backwards: the most alike models as the farthest apart.
    X = np.array([[1.0, 0.0], [0.99, 0.1], [0.0, 1.0], [0.1, 0.99]])
    unit = X / np.linalg.norm(X, axis=1, keepdims=True)
    similarity = unit @ unit.T
    message = (
        r"X has 4 non-zero value\(s\) on its diagonal, e.g. X\[\d, \d\] = (1\.0|0\.9).*"
        r"zero diagonal.*not similarities"
    )
    for selector in (KCenterSelector(2), KMedoidsSelector(2), BudgetGreedySelector(2)):
        with pytest.raises(ValueError, match=message):
            clone(selector).set_params(metric="precomputed").fit(similarity)
    with pytest.raises(ValueError, match="non-zero value.*on its diagonal"):
        k_center_select(similarity, 2, metric="precomputed")
    # Rounding on the diagonal passes, and the distances give the families.
    distance = np.clip(1.0 - similarity, 0.0, None)
    np.fill_diagonal(distance, 1e-17)
    selector = KCenterSelector(2, metric="precomputed").fit(distance)
    assert sorted(selector.labels_[[0, 2]].tolist()) == [0, 1]
    assert selector.labels_[0] == selector.labels_[1]
    # transform takes distances to the fitted models: no diagonal there.
    assert selector.transform(np.ones((1, 4))).shape == (1, 2)


# ---------------------------------------------------------------- sklearn integration


def test_pipeline_pickle_and_feature_names():
    X = random_pool(3, 20)
    costs = np.linspace(1, 3, 20)
    pipe = make_pipeline(StandardScaler(), BudgetGreedySelector(5.0))
    pipe.fit(X, budgetgreedyselector__costs=costs)
    selector = pipe[-1]
    assert math.fsum(costs[selector.selected_indices_]) <= 5.0
    out = pipe.transform(X)
    assert out.shape == (20, len(selector.selected_indices_))
    assert pipe.get_feature_names_out()[0] == "budgetgreedyselector0"
    restored = pickle.loads(pickle.dumps(pipe))
    np.testing.assert_array_equal(restored.predict(X), pipe.predict(X))
    np.testing.assert_array_equal(
        pipe.fit_predict(X, budgetgreedyselector__costs=costs), selector.labels_
    )


@pytest.mark.parametrize(
    "selector",
    [
        KCenterSelector(n_select=3),
        KMedoidsSelector(n_select=3),
        KMedoidsSelector(n_select=3, method="pam"),
        BudgetGreedySelector(budget=3.0),
    ],
    ids=repr,
)
def test_predict_agrees_with_labels(selector):
    X = random_pool(4, 25).astype(np.float32)
    fitted = clone(selector).fit(X)
    np.testing.assert_array_equal(fitted.predict(X), fitted.labels_)
    np.testing.assert_array_equal(clone(selector).fit_predict(X), fitted.labels_)
    np.testing.assert_array_equal(
        fitted.selected_embeddings_, X[fitted.selected_indices_].astype(np.float64)
    )
    # Each selected model is covered by itself.
    positions = np.arange(len(fitted.selected_indices_))
    np.testing.assert_array_equal(fitted.labels_[fitted.selected_indices_], positions)
    np.testing.assert_allclose(fitted.coverage_[fitted.selected_indices_], 1.0)


# ------------------------------------------------------------ invariants (hypothesis)

seeds = st.integers(0, 2**32 - 1)


@settings(max_examples=40, deadline=None)
@given(seed=seeds, n=st.integers(1, 12), data=st.data())
def test_selected_indices_distinct_and_valid(seed, n, data):
    X = np.random.default_rng(seed).integers(-2, 3, size=(n, 2)).astype(float)
    n_select = data.draw(st.integers(1, n))
    costs = np.random.default_rng(seed).uniform(0.5, 3.0, n)
    budget = data.draw(st.floats(float(costs.min()), 3.0 * n))
    for metric in ("cosine", "euclidean"):
        fitted = [
            KCenterSelector(n_select, metric=metric).fit(X),
            KMedoidsSelector(n_select, metric=metric).fit(X),
            KMedoidsSelector(n_select, metric=metric, method="pam").fit(X),
            BudgetGreedySelector(budget, metric=metric).fit(X, costs=costs),
        ]
        for selector in fitted:
            selected = selector.selected_indices_
            assert selected.dtype == np.int64
            assert len(set(selected.tolist())) == len(selected) >= 1
            assert ((0 <= selected) & (selected < n)).all()
            assert ((0 <= selector.labels_) & (selector.labels_ < len(selected))).all()
        assert all(len(s.selected_indices_) == n_select for s in fitted[:3])


@settings(max_examples=30, deadline=None)
@given(seed=seeds, n=st.integers(2, 15))
def test_greedy_objectives_never_decrease(seed, n):
    X = random_pool(seed, n)
    K = kernel(X, "cosine")
    previous_min, previous_j, previous_sel = -np.inf, -np.inf, []
    for k in range(1, n + 1):
        selector = KCenterSelector(k).fit(X)
        selected = selector.selected_indices_.tolist()
        assert selected[:-1] == previous_sel  # nested selections
        assert selector.objective_ >= previous_min - 1e-12
        assert J(K, selected) >= previous_j - 1e-9
        previous_min, previous_j, previous_sel = (
            selector.objective_,
            J(K, selected),
            selected,
        )
    # Unit costs: the budget counts models, and the greedy J grows with it.
    previous_j = -np.inf
    for budget in range(1, n + 1):
        objective = BudgetGreedySelector(float(budget)).fit(X).objective_
        assert objective >= previous_j - 1e-9
        previous_j = objective


@settings(max_examples=30, deadline=None)
@given(seed=seeds, n=st.integers(2, 15), data=st.data())
def test_pam_never_worse_than_its_k_center_start(seed, n, data):
    X = random_pool(seed, n)
    k = data.draw(st.integers(1, n))
    K = kernel(X, "cosine")
    for method in ("fasterpam", "pam"):
        selector = KMedoidsSelector(k, method=method).fit(X)
        assert selector.objective_ >= J(K, selector.initial_indices_) - 1e-9


@pytest.mark.parametrize("method", ["pam", "fasterpam"])
def test_swap_search_does_not_stop_on_a_tied_swap(method):
    # Models 4 and 7 are near twins. From the k-center start, FastPAM1's
    # second pass swaps one twin for the other (the loss unchanged to the last
    # bit, a rounding-negative change) and kmedoids then stops, on [9, 4, 8],
    # from which swapping 9 for 1 still raises J by 0.055; the confirming
    # pass finds that swap. FasterPAM, visiting the models in the order of
    # their sorted distances, ends on [9, 7, 8], the twin of [9, 4, 8] (the
    # same J to the last bit), from which no single swap raises J: another
    # local optimum, confirmed as such.
    X = np.random.default_rng(80).standard_normal((10, 4))
    K = kernel(X, "cosine")
    selector = KMedoidsSelector(3, method=method).fit(X)
    assert selector.initial_indices_.tolist() == [9, 7, 6]
    expected = [1, 4, 8] if method == "pam" else [7, 8, 9]
    assert sorted(selector.selected_indices_.tolist()) == expected
    np.testing.assert_allclose(selector.objective_, J(K, expected))
    assert J(K, [1, 4, 8]) > J(K, [9, 4, 8]) + 0.05
    assert _is_swap_optimum(K, selector.selected_indices_)


@settings(max_examples=40, deadline=None)
@given(seed=seeds, n=st.integers(1, 15), data=st.data())
def test_budget_is_never_exceeded_and_selection_is_maximal(seed, n, data):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 3))
    costs = rng.uniform(0.1, 10.0, n)
    budget = data.draw(st.floats(float(costs.min()), float(costs.sum()) + 1.0))
    selector = BudgetGreedySelector(budget).fit(X, costs=costs)
    selected = selector.selected_indices_
    # Within the budget up to rounding (a relative 4 eps per cost summed),
    # never beyond.
    assert _fits(costs[selected], budget)
    assert selector.total_cost_ == math.fsum(costs[selected])
    rest = np.setdiff1d(np.arange(n), selected)
    # Exact sums, as the selector's: with a budget equal to the pool's
    # numpy-summed cost, one float addition rounded a model that does not
    # fit (its exact total 1 ulp over) to one that does.
    assert not any(_fits([*costs[selected], costs[m]], budget) for m in rest)


def _fits(costs, budget):
    """The budget rule, written out: the exactly rounded total is at most
    ``budget`` times 1 + 4 machine epsilons per cost summed."""
    eps = np.finfo(np.float64).eps
    return math.fsum(costs) <= budget * (1 + 4 * eps * len(costs))


def _is_greedy_run(K, costs, budget, selected, tol=1e-9):
    """Every step took a largest gain of J per unit cost among the models
    that still fit (to rounding), and at the end no other model fits."""
    n = len(K)
    coverage, spent = np.zeros(n), []
    for m in selected:
        fits = [
            c
            for c in range(n)
            if c not in selected[: len(spent)] and _fits([*spent, costs[c]], budget)
        ]
        rates = np.maximum(K[fits] - coverage, 0.0).sum(axis=1) / costs[fits]
        rate = np.maximum(K[m] - coverage, 0.0).sum() / costs[m]
        if m not in fits or rate < rates.max() - tol * (1 + rates.max()):
            return False
        spent.append(costs[m])
        np.maximum(coverage, K[m], out=coverage)
    rest = np.setdiff1d(np.arange(n), selected)
    return not any(_fits([*spent, costs[m]], budget) for m in rest)


def _is_swap_optimum(K, medoids, tol=1e-9):
    """No swap of one medoid for one other model raises J (to rounding)."""
    value = J(K, medoids)
    others = np.setdiff1d(np.arange(len(K)), medoids)
    for i, o in itertools.product(range(len(medoids)), others):
        swapped = [*medoids[:i], o, *medoids[i + 1 :]]
        if J(K, swapped) > value + tol * (1 + value):
            return False
    return True


@settings(max_examples=30, deadline=None)
@given(seed=seeds, n=st.integers(3, 15), data=st.data())
def test_equivariant_to_row_permutation(seed, n, data):
    # n >= 3: two models are always tied (same row sums, same distance).
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 4))
    costs = rng.uniform(0.5, 2.0, n)
    perm = rng.permutation(n)  # row j of X[perm] is model perm[j]
    k = data.draw(st.integers(1, n))
    a = KCenterSelector(k).fit(X)
    b = KCenterSelector(k).fit(X[perm])
    assert perm[b.selected_indices_].tolist() == a.selected_indices_.tolist()
    # Greedy gains (and so k-medoids' k-center start) can tie exactly (two
    # models that only cover each other gain the same); ties go to the lowest
    # index, so the row order may choose among them, and the steps after
    # differ (objectives 0.1 % apart were seen). What holds in every order:
    # the run on the permuted rows, mapped back, is a valid run on the
    # original ones.
    K = kernel(X, "cosine")
    for method in ("pam", "fasterpam"):
        b = KMedoidsSelector(k, method=method).fit(X[perm])
        assert _is_swap_optimum(K, perm[b.selected_indices_])
    for budget, c in ((float(k), np.ones(n)), (2.0 * k, costs)):
        b = BudgetGreedySelector(budget).fit(X[perm], costs=c[perm])
        assert _is_greedy_run(K, c, budget, perm[b.selected_indices_].tolist())
        np.testing.assert_allclose(b.objective_, J(K, perm[b.selected_indices_]))


@pytest.mark.parametrize("method", ["fasterpam", "pam"])
def test_k_medoids_follows_the_models_not_their_rows(method):
    # FasterPAM applies the first improving swap it visits: run on the rows
    # as given, 30 orders of these 30 models gave 8 portfolios (J from 24.90
    # to 24.98). The swaps now visit the models in an order of their own, so
    # every row order selects the same models, in the same positions.
    rng = np.random.default_rng(0)
    X = rng.standard_normal((30, 8))
    D = pairwise_distances(X, metric="cosine")
    base = KMedoidsSelector(5, method=method).fit(X)
    for _ in range(30):
        perm = rng.permutation(len(X))  # row j of X[perm] is model perm[j]
        for selector, Xp in (
            (KMedoidsSelector(5, method=method), X[perm]),
            (
                KMedoidsSelector(5, method=method, metric="precomputed"),
                D[perm][:, perm],
            ),
        ):
            b = selector.fit(Xp)
            assert perm[b.selected_indices_].tolist() == base.selected_indices_.tolist()
            assert perm[b.initial_indices_].tolist() == base.initial_indices_.tolist()
            assert b.objective_ == pytest.approx(base.objective_, rel=1e-12)
        selected = k_medoids_select(X[perm], 5, method=method)[0]
        assert perm[selected].tolist() == base.selected_indices_.tolist()
    # Exact duplicates tie: each selected model is the lowest row of its
    # copies, in every row order.
    Y = np.concatenate([X[:10], X[:10], X[:4]])
    for _ in range(10):
        perm = rng.permutation(len(Y))
        Yp = Y[perm]
        selector = KMedoidsSelector(5, method=method).fit(Yp)
        for row in selector.selected_indices_:
            copies = np.flatnonzero((Yp == Yp[row]).all(axis=1))
            assert row == copies[0], (row, copies)


def test_greedy_exact_ties_go_to_the_lowest_index():
    # Two mirrored pairs: all four row sums are equal to the last bit, and
    # after the first pick the other pair's two models gain exactly the same
    # (1.2661 each; its partner 0.0018).
    X = np.array([[1.0, 0.0], [1.0, 0.1], [-1.0, 0.0], [-1.0, -0.1]])
    K = kernel(X, "cosine")
    first = BudgetGreedySelector(2.0).fit(X).selected_indices_
    swapped = BudgetGreedySelector(2.0).fit(X[[2, 3, 0, 1]]).selected_indices_
    assert len(set(K.sum(axis=1).tolist())) == 1  # the premise: exact ties
    assert first.tolist() == [0, 2]
    assert swapped.tolist() == [0, 2]  # models 2 and 0 of X: by row, not by model


# ---------------------------------------------------------------- brute force, n <= 8


def _best(K, k, score):
    return max(score(K, list(s)) for s in itertools.combinations(range(len(K)), k))


def test_k_medoids_reaches_the_optimum_on_most_tiny_pools():
    hits = {"fasterpam": 0, "pam": 0}
    n_instances = 40
    for seed in range(n_instances):
        rng = np.random.default_rng(seed)
        n = int(rng.integers(4, 9))
        k = int(rng.integers(2, n))
        X = rng.standard_normal((n, 2))
        K = kernel(X)
        optimum = _best(K, k, J)
        for method in hits:
            selector = KMedoidsSelector(k, metric="euclidean", method=method).fit(X)
            hits[method] += selector.objective_ >= optimum - 1e-9
            # Whatever it reaches is a local optimum under single swaps.
            selected = selector.selected_indices_.tolist()
            for out, into in itertools.product(range(k), set(range(n)) - set(selected)):
                swapped = selected[:out] + [into] + selected[out + 1 :]
                assert J(K, swapped) <= selector.objective_ + 1e-9
    assert hits["fasterpam"] >= 0.8 * n_instances
    assert hits["pam"] >= 0.8 * n_instances


def test_k_center_is_within_the_gonzalez_factor():
    # Farthest-first is a 2-approximation of the k-center radius in a metric
    # space, so the worst coverage is at least the optimal one to the power 4.
    for seed in range(40):
        rng = np.random.default_rng(seed)
        n = int(rng.integers(3, 9))
        k = int(rng.integers(1, n))
        X = rng.standard_normal((n, 2))
        D = pairwise_distances(X)
        selector = KCenterSelector(k, metric="euclidean").fit(X)
        radius = D[:, selector.selected_indices_].min(axis=1).max()
        best_radius = min(
            D[:, list(s)].min(axis=1).max() for s in itertools.combinations(range(n), k)
        )
        assert radius <= 2 * best_radius + 1e-9
        K = kernel(X)
        optimum = _best(K, k, lambda K, s: K[:, s].max(axis=1).min())
        assert selector.objective_ >= optimum**4 - 1e-12


# --------------------------------------------------------------------------------------
# ExpectedAccuracySelector: greedy facility location on predicted P(correct)


def test_expected_accuracy_hand_computed():
    from locus_sklearn import ExpectedAccuracySelector

    P = np.array([[0.9, 0.9, 0.1, 0.1], [0.8, 0.8, 0.2, 0.2], [0.3, 0.3, 0.9, 0.9]])
    # Means 0.5, 0.5, 0.6 -> model 2; then adding 0 gives 0.9, adding 1 0.85;
    # then model 1 adds nothing: a tie, said so.
    with pytest.warns(UserWarning, match="Selecting model 3 of n_select=3 .* 0.9000"):
        selector = ExpectedAccuracySelector(n_select=3).fit(P)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # two steps that each gain: no warning
        ExpectedAccuracySelector(n_select=2).fit(P)
    np.testing.assert_array_equal(selector.selected_indices_, [2, 0, 1])
    np.testing.assert_allclose(selector.objective_path_, [0.6, 0.9, 0.9])
    assert selector.objective_ == pytest.approx(0.9)
    assert selector.full_objective_ == pytest.approx(0.9)
    assert selector.n_features_in_ == 4


def test_expected_accuracy_tie_warning_is_a_sentence():
    # "Selecting model 2 of n_select=3 and after it raised ..." was no
    # sentence. Model 0 is best on every query: steps 2 and 3 gain nothing.
    from locus_sklearn import ExpectedAccuracySelector

    P = np.array([[0.9, 0.9], [0.5, 0.5], [0.4, 0.4], [0.3, 0.3]])
    message = (
        r"^Selecting model 2 of n_select=3, and every model after it, raised the "
        r"expected accuracy by nothing \(F stays 0\.9000\): the remaining models "
        r"all tied, and were taken in row order\. If X holds"
    )
    with pytest.warns(UserWarning, match=message):
        ExpectedAccuracySelector(n_select=3).fit(P)
    # Only the last step idle: no "every model after it".
    last = r"^Selecting model 2 of n_select=2 raised the expected accuracy by nothing"
    with pytest.warns(UserWarning, match=last):
        ExpectedAccuracySelector(n_select=2).fit(P)


def test_expected_accuracy_bound_for_negative_values_is_on_the_gain():
    # The documented (1 - 1/e) factor: of F itself for values >= 0, of the
    # gain over L = mean_q min_m P[m, q] for any values. Shifted by -1, the
    # greedy selection [0, 1] has F = -0.2 < (1 - 1/e) * F(opt) = 0, while
    # its gain, 0.8, is >= (1 - 1/e) * 1.0.
    from locus_sklearn import ExpectedAccuracySelector

    P = np.array([[0.6, 0.6], [1.0, 0.0], [0.0, 1.0]])
    factor = 1 - 1 / np.e
    for shift in (0.0, -1.0, -1.1):
        Q = P + shift
        selector = ExpectedAccuracySelector(n_select=2).fit(Q)
        assert selector.selected_indices_.tolist() == [0, 1]
        best = 1.0 + shift  # models 1 and 2
        L = shift  # mean over queries of the worst model, 0 + shift
        assert selector.objective_ == pytest.approx(0.8 + shift)
        assert selector.objective_ - L >= factor * (best - L)
        assert (selector.objective_ >= factor * best) == (shift == 0.0)


# Random P over one or a few queries: later steps often add nothing (warned).
@pytest.mark.filterwarnings(
    "ignore:Selecting model .* raised the expected accuracy by nothing:UserWarning"
)
@settings(max_examples=40, deadline=None)
@given(
    n_models=st.integers(2, 7),
    n_queries=st.integers(1, 12),
    seed=st.integers(0, 2**31 - 1),
    data=st.data(),
)
def test_expected_accuracy_greedy_guarantee_and_nesting(
    n_models, n_queries, seed, data
):
    """Within (1 - 1/e) of the best subset of its size (brute force), nested,
    and its path is non-decreasing up to the pool's value."""
    from locus_sklearn import ExpectedAccuracySelector

    P = np.random.default_rng(seed).random((n_models, n_queries))
    k = data.draw(st.integers(1, n_models))
    selector = ExpectedAccuracySelector(n_select=k).fit(P)
    best = max(
        P[list(subset)].max(axis=0).mean()
        for subset in itertools.combinations(range(n_models), k)
    )
    assert selector.objective_ >= (1 - 1 / np.e) * best - 1e-12
    assert selector.objective_ == pytest.approx(
        P[selector.selected_indices_].max(0).mean()
    )
    assert np.all(np.diff(selector.objective_path_) >= -1e-12)
    assert selector.objective_ <= selector.full_objective_ + 1e-12
    full = ExpectedAccuracySelector(n_select=n_models).fit(P)
    np.testing.assert_array_equal(
        full.selected_indices_[:k], selector.selected_indices_
    )
    assert full.objective_ == pytest.approx(full.full_objective_)


def test_expected_accuracy_errors():
    from locus_sklearn import ExpectedAccuracySelector

    with pytest.raises(ValueError, match=r"n_select=4 should be <= n_models=3"):
        ExpectedAccuracySelector(n_select=4).fit(np.zeros((3, 2)))
    with pytest.raises(ValueError, match="n_select"):
        ExpectedAccuracySelector(n_select=0).fit(np.zeros((3, 2)))
    with pytest.raises(ValueError, match="NaN"):
        ExpectedAccuracySelector(n_select=1).fit([[0.5, np.nan], [0.2, 0.1]])


def test_expected_accuracy_picks_the_specialists_in_portfolio_curve():
    """Two specialists and two generalists: the expected-accuracy selection
    takes both specialists, and portfolio_curve routes with it."""
    from locus_sklearn import ExpectedAccuracySelector
    from locus_sklearn.baselines import KNNRouter
    from locus_sklearn.inspection import portfolio_curve

    # Two topics; queries of a topic differ a little.
    encoder = {f"q{i}": [1.0, 0.01 * i] if i < 4 else [0.01 * i, 1.0] for i in range(8)}
    scores = {
        "math": [1, 1, 1, 1, 0, 0, 0, 0],
        "code": [0, 0, 0, 0, 1, 1, 1, 1],
        "gen1": [1, 0, 1, 0, 1, 0, 1, 0],
        "gen2": [1, 0, 1, 0, 1, 0, 0, 1],
    }
    evals = {
        "model": [m for m in scores for _ in range(8)],
        "query": [f"q{i}" for _ in scores for i in range(8)],
        "score": [y for m in scores for y in scores[m]],
    }
    router = KNNRouter(4, encoder=encoder).fit(evals)
    P = router.predict_proba([f"q{i}" for i in range(8)]).T
    selector = ExpectedAccuracySelector(n_select=2).fit(P)
    assert set(router.classes_[selector.selected_indices_]) == {"math", "code"}
    curve = portfolio_curve(
        router, evals, [1, 2], selector=ExpectedAccuracySelector(), embeddings=P,
        n_random=0,
    )  # fmt: skip
    assert curve["accuracy"].tolist() == [0.5, 1.0]
    assert curve["models"].iloc[1] == tuple(router.classes_[selector.selected_indices_])


def test_expected_accuracy_exact_ties_go_to_the_lower_row():
    # The same values in another query order: F is equal in exact arithmetic
    # (0.39), but the float means came out an ulp apart and row 1 was taken.
    from locus_sklearn import ExpectedAccuracySelector

    a = np.array([0.7, 0.7, 0.2, 0.2, 0.1, 0.1, 0.1, 0.2, 0.9, 0.7])
    b = np.array([0.2, 0.9, 0.2, 0.1, 0.7, 0.1, 0.2, 0.1, 0.7, 0.7])
    assert sorted(a) == sorted(b) and a.mean() != b.mean()
    for P, first in [(np.vstack([a, b]), 0), (np.vstack([b, a]), 0)]:
        selector = ExpectedAccuracySelector(n_select=2).fit(P)
        assert selector.selected_indices_.tolist() == [first, 1 - first]
    # A real difference is no tie, however small next to the values.
    P = np.vstack([a, a + 1e-9])
    assert ExpectedAccuracySelector(n_select=1).fit(P).selected_indices_.tolist() == [1]


@pytest.mark.parametrize("utility", [-1e9, -1e12, -1e100])
def test_expected_accuracy_a_huge_negative_row_does_not_make_ties(utility):
    # A prohibitively expensive model (utility P - cost_weight * cost of
    # -1e12) scaled the tolerance of every comparison: 0.5 and 0.6 over 1000
    # queries "tied" and row 0 was taken, with F = 0.5.
    from locus_sklearn import ExpectedAccuracySelector

    P = np.array([np.full(1000, 0.5), np.full(1000, 0.6), np.full(1000, utility)])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # one step that gains: no warning
        selector = ExpectedAccuracySelector(n_select=1).fit(P)
    assert selector.selected_indices_.tolist() == [1]
    assert selector.objective_ == pytest.approx(0.6, rel=1e-12)


def test_expected_accuracy_no_false_idle_warning_beside_a_huge_row():
    # A row of -1e13 never selected made the gains +0.15 and +0.08 count as
    # nothing: a false "raised the expected accuracy by nothing" warning.
    from locus_sklearn import ExpectedAccuracySelector

    P = np.array([[0.9, 0.1, 0.1, 0.5], [0.1, 0.9, 0.1, 0.5], [0.1, 0.1, 0.9, 0.5]])
    P = np.repeat(P, 250, axis=1)  # 1000 queries
    P = np.vstack([P, np.full(1000, -1e13)])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        selector = ExpectedAccuracySelector(n_select=3).fit(P)
    # F: 0.4 each; then 0.6 (rows 0 and 1 cover two quarters at 0.9); then 0.8.
    assert selector.selected_indices_.tolist() == [0, 1, 2]
    np.testing.assert_allclose(selector.objective_path_, [0.4, 0.6, 0.8], rtol=1e-12)
    # Selecting the huge row last gains nothing, and is said so.
    with pytest.warns(UserWarning, match="Selecting model 4 of n_select=4 raised"):
        ExpectedAccuracySelector(n_select=4).fit(P)


def _exact_greedy(values, n_select):
    """Greedy max of sum_q max_{s in sel} values[s, q] on Python ints, ties to
    the lower row: the reference without rounding."""
    selected, best = [], [min(min(row) for row in values) - 1] * len(values[0])
    for _ in range(n_select):
        gains = [
            sum(max(b, v) for b, v in zip(best, row, strict=True))
            if m not in selected
            else None
            for m, row in enumerate(values)
        ]
        top = max(g for g in gains if g is not None)
        m = gains.index(top)
        selected.append(m)
        best = [max(b, v) for b, v in zip(best, values[m], strict=True)]
    return selected


@settings(max_examples=200, deadline=None)
@given(
    values=st.integers(1, 7).flatmap(
        lambda n_models: st.integers(1, 30).flatmap(
            lambda n_queries: st.lists(
                st.lists(st.integers(-3, 6), min_size=n_queries, max_size=n_queries),
                min_size=n_models,
                max_size=n_models,
            )
        )
    ),
    scale=st.sampled_from([1 / 7, 2.0**-1000, 1e250]),
    huge_row=st.booleans(),
    data=st.data(),
)
def test_expected_accuracy_matches_the_exact_greedy(values, scale, huge_row, data):
    """Few distinct values, so many exact ties (in F and in the gains), at
    any scale and beside a row of huge magnitude: the selection is the exact
    greedy's, ties to the lower row."""
    from locus_sklearn import ExpectedAccuracySelector

    values = list(values)
    if huge_row:  # never a candidate that ties: last, whatever its position
        values.insert(
            data.draw(st.integers(0, len(values))), [-(2**50)] * len(values[0])
        )
    n_select = data.draw(st.integers(1, len(values)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # later steps may tie
        selector = ExpectedAccuracySelector(n_select=n_select).fit(
            np.array(values, dtype=np.float64) * scale
        )
    assert selector.selected_indices_.tolist() == _exact_greedy(values, n_select)


# --------------------------------------------------------------------------------------
# Extreme magnitudes, saturated kernels and rounding ties


def _scaled_pool():
    return np.array([[0.0, 1.0], [0.1, 1.0], [5.0, 1.0], [5.1, 1.0], [10.0, 1.0]])


@pytest.mark.parametrize("exponent", [600, -660])
@pytest.mark.parametrize("metric", ["euclidean", "cosine"])
def test_selectors_are_unchanged_by_extreme_scale(metric, exponent):
    # Embeddings of ~1e180 squared to inf inside euclidean_distances (NaN
    # objective_ and transform) and, under the cosine metric, normalised to
    # zero vectors; embeddings of ~1e-199 put every model at distance 0.
    # A power of two scales exactly, so the selection must be the same.
    X = _scaled_pool()
    scale = 2.0**exponent
    for make in (
        lambda: KCenterSelector(2, metric=metric),
        lambda: KMedoidsSelector(2, metric=metric),
        lambda: BudgetGreedySelector(2.0, metric=metric),
    ):
        ref, big = make().fit(X), make().fit(X * scale)
        np.testing.assert_array_equal(big.selected_indices_, ref.selected_indices_)
        np.testing.assert_array_equal(big.labels_, ref.labels_)
        assert big.objective_ == pytest.approx(ref.objective_, rel=1e-12)
        # bandwidth_ is a distance, in the embeddings' own units.
        units = scale if metric == "euclidean" else 1.0
        assert big.bandwidth_ == pytest.approx(ref.bandwidth_ * units, rel=1e-12)
        similarity = big.transform(X * scale)
        assert not np.isnan(similarity).any()
        np.testing.assert_allclose(similarity, ref.transform(X), rtol=1e-12)
    # A numeric bandwidth is read in the embeddings' units too.
    ref = KCenterSelector(2, metric="euclidean", bandwidth=3.0).fit(X)
    big = KCenterSelector(2, metric="euclidean", bandwidth=3.0 * scale).fit(X * scale)
    np.testing.assert_array_equal(big.selected_indices_, ref.selected_indices_)
    np.testing.assert_allclose(big.coverage_, ref.coverage_, rtol=1e-12)


def test_cosine_ignores_rows_of_extreme_length():
    # The cosine metric ignores each row's length: rows of ~1e300 and ~1e-290
    # beside ordinary ones select as the ordinary rows do (the cosine
    # distances, computed on rows brought into range by powers of two, are
    # bit-identical).
    X = _scaled_pool()
    lengths = 2.0 ** np.array([1000, -960, 0, 300, -700])[:, None]
    for make in (lambda: KCenterSelector(2), lambda: KMedoidsSelector(3)):
        ref, odd = make().fit(X), make().fit(X * lengths)
        np.testing.assert_array_equal(odd.selected_indices_, ref.selected_indices_)
        assert odd.objective_ == ref.objective_
        assert odd.bandwidth_ == ref.bandwidth_


def test_euclidean_distances_that_overflow_are_refused():
    # 2e308 is past float64: the distances were inf and the kernel NaN.
    X = [[1e308], [-1e308], [0.0]]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match=r"X has values up to 1e\+308 .* exceed"):
            KCenterSelector(1, metric="euclidean").fit(X)
        with pytest.raises(ValueError, match=r"X has values up to 1e\+308"):
            k_medoids_select(X, 1, metric="euclidean")
        # Distances of up to 1.8e308 are computed (a median of two such
        # distances overflowed): the farthest pair is 1.6e308 apart.
        X = [[8e307], [-8e307], [0.0]]
        selector = KCenterSelector(2, metric="euclidean").fit(X)
        assert selector.bandwidth_ == pytest.approx(8e307)
        assert selector.selected_indices_.tolist() == [2, 0]
        assert np.isfinite(selector.coverage_).all()


def test_k_center_medoid_ties_to_rounding_go_to_the_lower_row():
    # Rows 3 and 8 are mirror images (the same distances to the rest, in
    # another order): their kernel row sums are equal in exact arithmetic but
    # came out 8.9e-16 apart, and the higher row was taken as the medoid.
    X = np.array(
        [
            [0.7409738171791774, -0.2824272472716989],
            [0.5773959336763955, -2.0322793065134026],
            [0.3098646874168553, 0.8664070590018645],
            [-0.17895251107592874, -0.7102141913075584],
            [0.5658334533735658, 1.9586147276154673],
        ]
    )
    X = np.concatenate([X, -X])
    assert KCenterSelector(1, metric="euclidean").fit(X).selected_indices_[0] == 3
    assert KMedoidsSelector(1, metric="euclidean").fit(X).initial_indices_[0] == 3
    assert k_center_select(X, 1, metric="euclidean")[0].tolist() == [3]
    # Every mirrored pool: the medoid is in the first half (a row of it, or
    # the lower row of a mirrored pair), for both metrics.
    for seed in range(150):
        rng = np.random.default_rng(seed)
        A = rng.standard_normal((int(rng.integers(2, 7)), 2))
        for metric in ("euclidean", "cosine"):
            first = KCenterSelector(1, metric=metric).fit(np.concatenate([A, -A]))
            assert first.selected_indices_[0] < len(A), (seed, metric)


@pytest.mark.parametrize("bandwidth", [1e9, 1e12, 1e300])
def test_k_center_takes_the_farthest_model_where_the_kernel_saturates_at_one(
    bandwidth,
):
    # With a bandwidth far above the distances every similarity rounds to 1:
    # the lowest row was taken, [0, 1], leaving 100.0 at distance 99 from the
    # selection where the optimum is 1 (the factor 2 of farthest-first).
    X = np.array([[0.0], [1.0], [100.0]])
    kw = dict(metric="euclidean", bandwidth=bandwidth)
    selector = KCenterSelector(2, **kw).fit(X)
    assert selector.selected_indices_.tolist() == [0, 2]
    assert k_center_select(X, 2, **kw)[0].tolist() == [0, 2]
    assert KMedoidsSelector(2, **kw).fit(X).initial_indices_.tolist() == [0, 2]
    # Each model goes to its nearest selected model (100.0 to itself, not to
    # position 0, where every similarity is 1).
    np.testing.assert_array_equal(selector.coverage_, [1.0, 1.0, 1.0])
    assert selector.labels_.tolist() == [0, 0, 1]
    assert selector.predict([[90.0], [2.0]]).tolist() == [1, 0]


@pytest.mark.parametrize("exponent", [-1070, -600, 0, 600, 1000])
def test_budget_greedy_is_unchanged_by_the_scale_of_the_costs(exponent):
    # Costs of 1e-320 (subnormal): gain / cost overflowed to inf, the tie
    # floor to NaN, picks went by row order, with RuntimeWarnings. Integer
    # costs times a power of two are exact even as subnormals.
    X = random_pool(3, 8, d=2)
    costs = np.array([1.0, 3.0, 2.0, 1.0, 4.0, 2.0, 1.0, 3.0])
    scale = 2.0**exponent
    ref = BudgetGreedySelector(5.0, metric="euclidean").fit(X, costs=costs)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        scaled = BudgetGreedySelector(5.0 * scale, metric="euclidean")
        scaled.fit(X, costs=costs * scale)
    np.testing.assert_array_equal(scaled.selected_indices_, ref.selected_indices_)
    assert scaled.total_cost_ == ref.total_cost_ * scale  # in the costs' units
    assert scaled.objective_ == ref.objective_
    selected, _, _ = budget_greedy_select(
        X, 5.0 * scale, costs=costs * scale, metric="euclidean"
    )
    np.testing.assert_array_equal(selected, ref.selected_indices_)


@pytest.mark.parametrize(
    "largest, cheap", [(1e-77, 1e-320), (1e-60, 1e-320), (1e-77, 1e-310)]
)
def test_budget_greedy_subnormal_costs_beside_a_small_largest_cost(largest, cheap):
    """Only a largest cost outside 2 ** +-256 was rescaled: beside 1e-77,
    costs of 1e-320 stayed as they were, gain / cost overflowed to inf and
    the far outlier (row 1) was taken first by row order."""
    X = np.array([[0.0], [50.0], [1.0], [1.1], [1.2]])
    ref = BudgetGreedySelector(2.0, metric="euclidean")
    ref.fit(X, costs=[2.0**40, 1.0, 1.0, 1.0, 1.0])
    assert ref.selected_indices_.tolist() == [2, 1]  # the cluster's centre first
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tiny = BudgetGreedySelector(2 * cheap, metric="euclidean")
        tiny.fit(X, costs=[largest, cheap, cheap, cheap, cheap])
    np.testing.assert_array_equal(tiny.selected_indices_, ref.selected_indices_)


def test_budget_greedy_same_subnormal_costs_as_unit_costs():
    X = np.array([[0.0], [0.1], [0.2], [5.0], [9.0]])
    unit = BudgetGreedySelector(2.0, metric="euclidean").fit(X)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tiny = BudgetGreedySelector(2e-320, metric="euclidean").fit(
            X, costs=[1e-320] * 5
        )
    assert unit.selected_indices_.tolist() == [2, 3]
    assert tiny.selected_indices_.tolist() == [2, 3]
    assert tiny.total_cost_ == 2e-320


def test_budget_greedy_refuses_costs_too_far_apart():
    # 1 / 1e-300 next to 1.0: no common unit keeps gain per unit cost finite.
    costs = [1.0, 1e-300, 2.0]
    for fit in (
        lambda: BudgetGreedySelector(3.0).fit(np.eye(3), costs=costs),
        lambda: budget_greedy_select(np.eye(3), 3.0, costs=costs),
    ):
        with pytest.raises(ValueError, match=r"costs span too wide.*costs\[1\]=1e-300"):
            fit()


def _power_of_two_values(k):
    # P(correct) on 20 queries, 0 or at least 1e-3 (no subnormal when scaled).
    rng = np.random.default_rng(k + 2000)
    P = rng.uniform(1e-3, 1.0, (5, 20))
    P[rng.random(P.shape) < 0.2] = 0.0
    return P


@pytest.mark.filterwarnings(
    "ignore:Selecting model .* raised the expected accuracy by nothing:UserWarning"
)
@pytest.mark.parametrize("exponent", [-1000, -300, 0, 300, 1022])
def test_expected_accuracy_is_unchanged_by_the_scale_of_the_values(exponent):
    # Values of ~4e307: the mean of 20 overflowed to inf, the tie tolerance
    # to NaN, and an already selected row was taken again. A power of two
    # scales every mean exactly, so the path scales with the values.
    from locus_sklearn import ExpectedAccuracySelector

    P = _power_of_two_values(exponent)
    scale = 2.0**exponent
    ref = ExpectedAccuracySelector(n_select=4).fit(P)
    scaled = ExpectedAccuracySelector(n_select=4).fit(P * scale)
    np.testing.assert_array_equal(scaled.selected_indices_, ref.selected_indices_)
    np.testing.assert_array_equal(scaled.objective_path_, ref.objective_path_ * scale)
    assert scaled.full_objective_ == ref.full_objective_ * scale


def test_expected_accuracy_never_selects_a_model_twice():
    # Finite utilities whose means overflowed: selected [0, 0], path [inf, -inf].
    from locus_sklearn import ExpectedAccuracySelector

    P = np.array([[1e308, 1e308], [1e307, 0.0], [0.0, 1e307]])
    with pytest.warns(UserWarning, match=r"Selecting model 2 .*\(F stays 1e\+308\)"):
        selector = ExpectedAccuracySelector(n_select=2).fit(P)
    # Model 0 is best on both queries; 1 and 2 then tie (they add nothing).
    assert selector.selected_indices_.tolist() == [0, 1]
    np.testing.assert_array_equal(selector.objective_path_, [1e308, 1e308])
    assert selector.full_objective_ == 1e308


# --------------------------------------------------------------------------------------
# portfolio_curve and router_embeddings (the pool of conftest's three_model_knn)

# Embeddings of a, b, c.
_CURVE_Z = np.array([[0.9, 0.1], [1.0, 0.0], [0.0, 1.0]])


@pytest.mark.parametrize("costs", [{"zzz": -5.0}, [1.0, 2.0, 3.0]])
def test_portfolio_curve_refuses_costs_with_a_count_selector(costs, three_model_knn):
    # A count selector never reads costs: an unknown model and a negative
    # cost went through unchecked, and the curve had no cost column.
    from locus_sklearn.inspection import portfolio_curve

    (router, evals), Z = three_model_knn, _CURVE_Z
    for selector in (None, KCenterSelector()):
        with pytest.raises(ValueError, match="costs applies to budgeted selectors"):
            portfolio_curve(
                router, evals, [1], selector=selector, costs=costs, embeddings=Z
            )


def test_portfolio_curve_refuses_a_selector_class(three_model_knn):
    from locus_sklearn.inspection import portfolio_curve

    (router, evals), Z = three_model_knn, _CURVE_Z
    message = (
        r"selector must be an estimator instance, e\.g\. KMedoidsSelector\(\); "
        "got the class KMedoidsSelector"
    )
    with pytest.raises(TypeError, match=message):
        portfolio_curve(router, evals, [1], selector=KMedoidsSelector, embeddings=Z)


def test_portfolio_curve_refuses_expected_accuracy_without_probabilities(
    three_model_knn,
):
    # Without embeddings=, ExpectedAccuracySelector was fitted on the router's
    # model_embeddings_, read as P(correct) on d "queries": a curve came back
    # for a portfolio chosen by the largest embedding coordinates.
    from locus_sklearn import ExpectedAccuracySelector
    from locus_sklearn.inspection import portfolio_curve

    (router, evals), Z = three_model_knn, _CURVE_Z
    router.model_embeddings_ = Z  # as a LocusRouter has them
    message = (
        r"selector=ExpectedAccuracySelector\(\) selects by the models' predicted "
        r"P\(correct\), so embeddings must hold them; got embeddings=None.*Pass "
        r"embeddings=router\.predict_proba\(queries\)\.T"
    )
    with pytest.raises(ValueError, match=message):
        portfolio_curve(
            router, evals, [1, 2], selector=ExpectedAccuracySelector(), n_random=0
        )
    # The kernel selectors read the embeddings, which they default to.
    curve = portfolio_curve(router, evals, [1, 2], n_random=0)
    assert curve["models"].tolist() == [("a",), ("a", "c")]
    # Given P(correct) (KNNRouter(1) on its own queries: their scores), it
    # selects from them: a (F = 2/3, b's and c's 1/3), then c (F = 1).
    P = router.predict_proba(["q1", "q2", "q3"]).T
    curve = portfolio_curve(
        router, evals, [2], selector=ExpectedAccuracySelector(), embeddings=P,
        n_random=0,
    )  # fmt: skip
    assert curve["models"].tolist() == [("a", "c")]
    assert curve["accuracy"].tolist() == [1.0]


def test_portfolio_curve_warns_of_a_portfolio_without_scores(three_model_knn, rows_of):
    # Held-out scores of c alone: the portfolio (a,) counts no query, and its
    # accuracy came back NaN without a word.
    from locus_sklearn.inspection import portfolio_curve

    (router, evals), Z = three_model_knn, _CURVE_Z
    held = rows_of(pd.DataFrame(evals), ["c"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        curve = portfolio_curve(router, held, [1, 2], embeddings=Z, n_random=0)
    assert [str(w.message) for w in caught] == [
        "The portfolio of n_select=1, ['a'], has accuracy NaN: no held-out query "
        "of evals has a score of those models (n_queries=0). Pass evals with "
        "scores of every model of the pool."
    ]
    assert caught[0].filename == __file__
    assert curve["models"].tolist() == [("a",), ("a", "c")]
    assert curve["n_queries"].tolist() == [0, 3]
    # (a, c) and the full pool route every query to c, which answers q3 alone.
    np.testing.assert_array_equal(curve["accuracy"], [np.nan, 1 / 3])
    assert curve["full_pool_accuracy"].tolist() == [1 / 3, 1 / 3]


def test_precomputed_distance_frame_in_any_model_order(three_model_knn):
    # A valid symmetric distance DataFrame in another model order had only its
    # rows reordered to classes_: "X is not symmetric".
    from locus_sklearn.inspection import portfolio_curve
    from locus_sklearn.inspection._common import router_embeddings

    (router, evals), Z = three_model_knn, _CURVE_Z
    names = list("abc")
    D = pd.DataFrame(pairwise_distances(Z), index=names, columns=names)
    shuffled = D.loc[list("cab"), list("bca")]
    # With a model outside the router, whose row and column are left out.
    extra = pd.DataFrame(
        pairwise_distances(np.vstack([Z, [[5.0, 5.0]]])),
        index=list("abcx"),
        columns=list("abcx"),
    ).loc[list("xcba"), list("bxac")]
    for frame in (shuffled, extra):
        matrix, classes = router_embeddings(router, frame)
        assert classes.tolist() == names
        np.testing.assert_array_equal(matrix, D.to_numpy())
    selector = KMedoidsSelector(metric="precomputed")
    curves = [
        portfolio_curve(
            router, evals, [1, 2], selector=selector, embeddings=frame, n_random=0
        )
        for frame in (D, shuffled, extra)
    ]
    for curve in curves[1:]:
        pd.testing.assert_frame_equal(curve, curves[0])
    assert curves[0]["models"].tolist() == [("a",), ("a", "c")]
    # Columns naming some models, but not those of the index: refused.
    partial = pd.DataFrame(pairwise_distances(Z), index=names, columns=["b", "a", "z"])
    with pytest.raises(ValueError, match="same models as index and columns"):
        router_embeddings(router, partial)


# ------------------------------------------- costs by model name (a named X's rows)


def _named_pool():
    """Five models on a line, rows named in reverse name order, and costs in
    that row order that give another selection when read in name order."""
    names = ["e", "d", "c", "b", "a"]
    X = pd.DataFrame(
        [[0.0], [0.1], [5.0], [5.1], [10.0]],
        index=pd.Index(names, name="model"),
        columns=["x"],
    )
    return X, np.array([3.0, 1.0, 1.0, 3.0, 3.0])


def test_costs_by_name_follow_a_dataframe_index_of_model_names():
    # Pipeline(LocusEmbedder, BudgetGreedySelector).set_output("pandas")
    # gives the selector X indexed by model name, yet a costs Series indexed
    # by model name was refused as if the rows had no names.
    X, row_costs = _named_pool()
    by_name = pd.Series(row_costs, index=X.index).sort_index()  # a, b, ..., e
    selector = BudgetGreedySelector(2.0, metric="euclidean")
    expected = selector.fit(X, costs=row_costs).selected_indices_.tolist()
    # Read by position, the name-ordered values select otherwise.
    assert selector.fit(X, costs=by_name.to_numpy()).selected_indices_.tolist() != (
        expected
    )
    for costs in (by_name, by_name.to_dict()):
        selector.fit(X, costs=costs)
        assert selector.selected_indices_.tolist() == expected
        assert selector.total_cost_ == math.fsum(row_costs[expected])
        selected, _, _ = budget_greedy_select(X, 2.0, costs=costs, metric="euclidean")
        assert selected.tolist() == expected
    # fit_predict and fit_transform pass costs on to fit.
    labels = BudgetGreedySelector(2.0, metric="euclidean").fit_predict(X, costs=by_name)
    np.testing.assert_array_equal(labels, selector.labels_)
    similarity = BudgetGreedySelector(2.0, metric="euclidean").fit_transform(
        X, costs=by_name
    )
    np.testing.assert_allclose(similarity, selector.transform(X))


@pytest.mark.parametrize(
    "costs, message",
    [
        (
            {"a": 1.0, "b": 1.0, "c": 1.0, "d": 1.0},
            r"no cost for 1 model\(s\) of X's index: \['e'\]",
        ),
        (
            {"a": 1.0, "b": 1.0, "c": 1.0, "d": 1.0, "e": 1.0, "z": 1.0},
            r"costs for 1 model\(s\) that are not in X's index: \['z'\]",
        ),
        (
            pd.Series(1.0, index=["a", "b", "c", "d", "f"]),
            r"no cost for 1 model\(s\) of X's index: \['e'\] and costs for 1 "
            r"model\(s\) that are not in X's index: \['f'\]",
        ),
        (
            pd.Series(1.0, index=range(5)),
            r"5 index label\(s\) are not model names: \[0, 1, 2, 3, 4\]\. Index it "
            r"by the model names of X's index, or pass costs.to_numpy\(\) for "
            r"costs in the row order of X",
        ),
        (
            pd.Series([1.0, -1.0, 1.0, 1.0, 1.0], index=["a", "b", "c", "d", "e"]),
            r"costs must be finite and >= 0; 1 cost\(s\) are not: \[\('b', -1.0\)\]",
        ),
    ],
)
def test_costs_by_name_must_name_exactly_the_models_of_x(costs, message):
    X, _ = _named_pool()
    with pytest.raises(ValueError, match=message):
        BudgetGreedySelector(5.0, metric="euclidean").fit(X, costs=costs)
    with pytest.raises(ValueError, match=message):
        budget_greedy_select(X, 5.0, costs=costs, metric="euclidean")


@pytest.mark.parametrize(
    "index, reason",
    [
        (
            range(5),
            r"X's index does not hold model names: 5 label\(s\) are not str, "
            r"e\.g\. \[0, 1, 2, 3, 4\]",
        ),
        (["a", "a", "b", "c", "d"], r"X's index repeats 1 model name\(s\), \['a'\]"),
    ],
)
def test_costs_by_name_refused_where_x_index_is_not_model_names(index, reason):
    # Refused as before, without claiming that X's rows have no names.
    X, row_costs = _named_pool()
    X = X.set_axis(list(index))
    costs = pd.Series(row_costs, index=["a", "b", "c", "d", "e"])
    message = r"costs is a Series, which names its models, but a selector's "
    for fit in (
        lambda: BudgetGreedySelector(5.0).fit(X, costs=costs),
        lambda: budget_greedy_select(X, 5.0, costs=costs),
    ):
        with pytest.raises(TypeError, match=message + r".*" + reason) as info:
            fit()
        assert "have no names" not in str(info.value)


def test_costs_by_name_through_a_pandas_pipeline_and_metadata_routing():
    import sklearn

    X, row_costs = _named_pool()
    by_name = pd.Series(row_costs, index=X.index).sort_index()
    expected = (
        BudgetGreedySelector(2.0).fit(
            StandardScaler().fit_transform(X), costs=row_costs
        )
    ).selected_indices_.tolist()
    pipe = make_pipeline(StandardScaler(), BudgetGreedySelector(2.0)).set_output(
        transform="pandas"
    )
    pipe.fit(X, budgetgreedyselector__costs=by_name)
    assert pipe[-1].selected_indices_.tolist() == expected
    with sklearn.config_context(enable_metadata_routing=True):
        routed = make_pipeline(
            StandardScaler(), BudgetGreedySelector(2.0).set_fit_request(costs=True)
        ).set_output(transform="pandas")
        routed.fit(X, costs=by_name)
        assert routed[-1].selected_indices_.tolist() == expected
        labels = routed.fit_predict(X, costs=by_name)
        np.testing.assert_array_equal(labels, routed[-1].labels_)


def test_costs_series_with_a_pandas_locus_embedder_pipeline(tiny_embedder):
    # The reported case: the embedder's pandas output is indexed by model name.
    from locus_sklearn.datasets import make_model_pool

    small = make_model_pool(
        n_models=6, n_queries=60, n_families=2, evals_per_model=40, random_state=0
    )
    models = sorted(small.evals["model"].unique())
    costs = pd.Series(np.arange(1.0, 7.0), index=models)
    pipe = make_pipeline(
        tiny_embedder(small.encodings, max_epochs=1), BudgetGreedySelector(3.0)
    ).set_output(transform="pandas")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # few evaluations: not the point here
        pipe.fit(small.evals, budgetgreedyselector__costs=costs[::-1])
        Z = pipe[0].transform(small.evals)
    assert Z.index.tolist() == models
    selector = pipe[-1]
    assert selector.total_cost_ == costs.iloc[selector.selected_indices_].sum() <= 3.0
    reference = BudgetGreedySelector(3.0).fit(Z.to_numpy(), costs=costs.to_numpy())
    assert selector.selected_indices_.tolist() == reference.selected_indices_.tolist()


@pytest.mark.parametrize(
    "select, kwargs, name, message",
    [
        (k_medoids_select, {"n_select": 2, "max_iter": 10**30}, "max_iter",
         "an int beyond int64"),
        (k_medoids_select, {"n_select": 2, "max_iter": 2**63}, "max_iter",
         "an int beyond int64"),
        (k_center_select, {"n_select": 2, "bandwidth": 10**400}, "bandwidth",
         "an int too large for a float"),
        (budget_greedy_select, {"budget": 10**400}, "budget",
         "an int too large for a float"),
    ],
)  # fmt: skip
def test_functions_refuse_ints_no_float_or_int64_holds_by_name(
    select, kwargs, name, message
):
    # The estimators refused these by name; their function twins passed them
    # on: k_medoids_select(max_iter=10**30) raised a bare OverflowError in
    # the kmedoids package (2**63 was taken), the others one in numpy.
    expected = f"The '{name}' parameter of {select.__name__} must be .*{message}"
    with pytest.raises(InvalidParameterError, match=expected):
        select(np.eye(4), **kwargs)


@pytest.mark.parametrize(
    "selector, fit_params, name, why",
    [
        (BudgetGreedySelector(budget=10**400), {"costs": np.ones(4)}, "budget",
         "float"),
        (KCenterSelector(n_select=2**63), {}, "n_select", "int64"),
        (KMedoidsSelector(n_select=2**64), {}, "n_select", "int64"),
    ],
)  # fmt: skip
def test_ints_no_float_or_int64_holds_are_refused_by_name(
    selector, fit_params, name, why
):
    # scikit-learn's Interval compares a Python int without converting it:
    # budget=10**400 passed and failed as a bare OverflowError inside the
    # greedy step.
    message = {
        "float": "an int too large for a float",
        "int64": "an int beyond int64",
    }[why]
    with pytest.raises(
        InvalidParameterError, match=f"The '{name}' parameter.*{message}"
    ):
        selector.fit(np.eye(4), **fit_params)
