"""Score disagreement on shared queries: the duplicate finder that reads scores."""

from fractions import Fraction

import numpy as np
import pandas as pd
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from locus_sklearn.inspection import (
    _common,
    calibrate_score_threshold,
    fallback_order,
    match_models_by_scores,
    nearest_models,
    score_disagreement,
)


def _long(scores):
    """A long table from {model: {query: score}}."""
    return pd.DataFrame(
        [(m, q, s) for m, row in scores.items() for q, s in row.items()],
        columns=["model", "query", "score"],
    )


# ------------------------------------------------------------ hand-computed cases


def test_binary_pool_against_itself():
    evals = _long(
        {
            "b": {"q1": 1, "q2": 0, "q3": 1, "q4": 0},
            "a": {"q1": 1, "q2": 1, "q3": 0, "q4": 0},
            "c": {"q1": 1, "q2": 1, "q3": 0},  # no q4
        }
    )
    result = score_disagreement(evals, min_shared=3)
    assert result.distance.index.tolist() == ["a", "b", "c"]
    assert result.distance.columns.tolist() == ["a", "b", "c"]
    # a vs b differ on q2, q3 of 4; a vs c agree on q1-q3; b vs c differ on q2, q3 of 3.
    expected = [[0, 2 / 4, 0], [2 / 4, 0, 2 / 3], [0, 2 / 3, 0]]
    # Exact: 2/3 is the float nearest 2/3 (6-decimal rounding read 0.666667).
    np.testing.assert_array_equal(result.distance.to_numpy(), expected)
    np.testing.assert_array_equal(
        result.n_shared.to_numpy(), [[4, 4, 3], [4, 4, 3], [3, 3, 3]]
    )


def test_graded_scores_and_min_shared():
    evals = _long(
        {
            "a": {"q1": 0.5, "q2": 1.0, "q3": 0.0},
            "b": {"q1": 0.25, "q2": 0.5},
            "c": {"q1": 0.5, "q2": 1.0, "q3": 1.0},
        }
    )
    result = score_disagreement(evals, min_shared=2)
    assert result.distance.loc["a", "b"] == (0.25 + 0.5) / 2
    assert result.distance.loc["b", "b"] == 0.0
    # b's two queries are under min_shared=3: its pairs are not comparable.
    result = score_disagreement(evals, min_shared=3)
    assert np.isnan(result.distance.loc["a", "b"])
    assert np.isnan(result.distance.loc["b", "b"])
    assert result.distance.loc["a", "a"] == 0.0
    assert result.distance.loc["a", "c"] == 1 / 3
    assert result.n_shared.loc["a", "b"] == 2


def test_reference_pool_reads_only_shared_queries():
    known = _long({"k1": {"q1": 1, "q2": 1, "q3": 0, "q4": 0}, "k2": {"q3": 1}})
    probe = _long({"new": {"q3": 1, "q4": 0, "q5": 1, "q6": 1}})
    result = score_disagreement(probe, known, min_shared=1)
    assert result.distance.index.tolist() == ["new"]
    assert result.distance.columns.tolist() == ["k1", "k2"]
    np.testing.assert_array_equal(result.n_shared.to_numpy(), [[2, 1]])
    np.testing.assert_allclose(result.distance.to_numpy(), [[0.5, 0.0]])


def test_duplicate_rows_are_averaged_not_dropped():
    # Two runs of one query average into 0.5 (check_evals), which is then compared.
    evals = pd.DataFrame(
        {
            "model": ["a", "a", "a", "b", "b"],
            "query": ["q1", "q1", "q2", "q1", "q2"],
            "score": [1.0, 0.0, 1.0, 1.0, 1.0],
        }
    )
    result = score_disagreement(evals, min_shared=2)
    assert result.distance.loc["a", "b"] == pytest.approx(0.25)


# ------------------------------------------------------------------- properties


@st.composite
def _pools(draw):
    n_models = draw(st.integers(2, 5))
    n_queries = draw(st.integers(1, 8))
    binary = draw(st.booleans())
    values = st.sampled_from([0.0, 1.0]) if binary else st.floats(0, 1, width=32)
    scores = {}
    for m in range(n_models):
        row = {}
        for q in range(n_queries):
            if draw(st.booleans()):
                row[f"q{q}"] = draw(values)
        scores[f"m{m}"] = row
    return scores


def _units(score):
    """A score as stored (float32) and snapped to the 1e-7 grid, in units."""
    return round(Fraction(float(np.float32(score))) * 10**7)


@settings(max_examples=80, deadline=None)
@given(scores=_pools())
def test_equals_brute_force_and_is_symmetric(scores):
    evals = _long(scores)
    models = sorted(m for m, row in scores.items() if row)
    assume(models)  # an empty table is check_evals' error, tested there
    if len(models) < 2:
        with pytest.raises(ValueError, match="evals has only 1 model"):
            score_disagreement(evals, min_shared=1)
        return
    if not any(
        set(scores[a]) & set(scores[b]) for a in models for b in models if a < b
    ):
        with pytest.raises(ValueError, match="min_shared=1"):
            score_disagreement(evals, min_shared=1)
        return
    result = score_disagreement(evals, min_shared=1)
    D = result.distance.to_numpy()
    np.testing.assert_array_equal(D, D.T)
    for i, a in enumerate(models):
        for j, b in enumerate(models):
            common = sorted(set(scores[a]) & set(scores[b]))
            assert result.n_shared.iloc[i, j] == len(common)
            if not common:
                assert np.isnan(D[i, j])
                continue
            # The exact mean of the stored float32 scores' differences (a
            # float32 mean would add its own rounding, ~6e-8 near 0.8).
            stored = sum(
                abs(
                    Fraction(float(np.float32(scores[a][q])))
                    - Fraction(float(np.float32(scores[b][q])))
                )
                for q in common
            ) / len(common)
            # Each stored score snapped to the 1e-7 grid, summed exactly and
            # divided once: the float nearest the exact mean, and within
            # 5e-8 per score (1e-7 per difference) of the stored scores' mean.
            exact = Fraction(
                sum(abs(_units(scores[a][q]) - _units(scores[b][q])) for q in common),
                len(common) * 10**7,
            )
            assert D[i, j] == float(exact)
            assert abs(exact - stored) <= Fraction(1, 10**7)


@settings(max_examples=40, deadline=None)
@given(scores=_pools(), cut=st.integers(1, 4))
def test_cross_pools_equal_the_joint_pool(scores, cut):
    models = sorted(scores)
    cut = min(cut, len(models) - 1)
    new = _long({m: scores[m] for m in models[:cut]})
    known = _long({m: scores[m] for m in models[cut:]})
    if new.empty or known.empty:
        return
    joint = _long(scores)
    try:
        cross = score_disagreement(new, known, min_shared=1)
    except ValueError:
        assert not set(new["query"]) & set(known["query"])
        return
    whole = score_disagreement(joint, min_shared=1)
    expected = whole.distance.loc[cross.distance.index, cross.distance.columns]
    pd.testing.assert_frame_equal(cross.distance, expected)


def test_one_model_alone_is_said_to_be_alone():
    # The error said no pair shared min_shared queries ("at most 0"), not
    # that there is no pair at all.
    evals = _long({"a": {"q1": 1, "q2": 0}})
    with pytest.raises(ValueError, match=r"evals has only 1 model \('a'\).*no pair"):
        score_disagreement(evals, min_shared=1)
    # Against a reference pool one model is fine.
    other = _long({"b": {"q1": 1, "q2": 1}})
    result = score_disagreement(evals, other, min_shared=1)
    assert result.distance.loc["a", "b"] == 0.5


# ------------------------------------------------------------------------ matching


def test_disagreements_equal_by_hand_are_ties():
    # x disagrees with y by 0.3 / 3 and with z by 3 * 0.1 / 3: 0.1 each by
    # hand. Stored as float32 they read 0.1000000040 and 0.1000000015, so z
    # came first, against the documented rule (ties go to the first in
    # sorted order, the lowest row).
    q = ["q1", "q2", "q3"]
    probe = _long({"x": dict.fromkeys(q, 0.0)})
    known = _long({"y": {"q1": 0.3, "q2": 0.0, "q3": 0.0}, "z": dict.fromkeys(q, 0.1)})
    distance = score_disagreement(probe, known, min_shared=3).distance
    assert distance.loc["x", "y"] == distance.loc["x", "z"] == 0.1
    matches = match_models_by_scores(probe, known, threshold=0.1, min_shared=3)
    assert matches.loc["x"].tolist() == ["y", 0.1, 3, True]
    D = score_disagreement(pd.concat([probe, known]), min_shared=3).distance
    # |0.3 - 0.1| + 2 * 0.1 over 3 queries: 0.4 / 3 = 2 / 15 exactly (the
    # nearest float; 6-decimal rounding read 0.133333).
    assert D.loc["y", "z"] == 2 / 15
    assert fallback_order(D, metric="precomputed").loc["x"].tolist() == ["y", "z"]
    nearest = nearest_models(D, "x", k=2, metric="precomputed")
    assert nearest["model"].tolist() == ["y", "z"]


def test_disagreements_equal_by_hand_halfway_on_a_decimal_grid_are_ties():
    # A 128-query probe with scores in tenths: x differs from a by 0.1 on two
    # queries (0.4 vs 0.3), and from b by 0.1 on two (0.2 vs 0.3), 0.2 / 128
    # = 1 / 640 = 0.0015625 each by hand. Rounded to 6 decimals, float32
    # noise (0.00156249990 and 0.00156250037) put them at 0.001562 and
    # 0.001563, so the tie went to whichever was a hair smaller.
    n = 128
    x, a, b = np.full(n, 0.5), np.full(n, 0.5), np.full(n, 0.5)
    x[:2], a[:2], b[:2] = 0.3, 0.4, 0.2
    queries = [f"q{i:03d}" for i in range(n)]

    def pool(name_a, name_b):
        return pd.DataFrame(
            {
                "model": np.repeat([name_a, name_b, "x"], n),
                "query": queries * 3,
                "score": np.concatenate([a, b, x]),
            }
        )

    for name_a, name_b in [("a", "b"), ("b", "a")]:  # either may sort first
        evals = pool(name_a, name_b)
        D = score_disagreement(evals, min_shared=10).distance
        assert D.loc["x", "a"] == D.loc["x", "b"] == 1 / 640
        assert D.loc["a", "b"] == 2 * 0.2 / n
        nearest = nearest_models(D, "x", k=2, metric="precomputed")
        assert nearest["model"].tolist() == ["a", "b"]
        assert fallback_order(D, metric="precomputed").loc["x"].tolist() == ["a", "b"]
        probe = evals[evals.model == "x"].assign(model="endpoint")
        matches = match_models_by_scores(
            probe, evals[evals.model != "x"], threshold=1 / 640, min_shared=10
        )
        assert matches.loc["endpoint"].tolist() == ["a", 1 / 640, n, True]


def test_difference_of_decimals_is_the_decimal_exactly():
    # float32(0.3) - float32(0.1) is 0.2000000104; read as written, it is 0.2.
    probe = _long({"p": {"q": 0.3}})
    known = _long({"k": {"q": 0.1}})
    assert score_disagreement(probe, known, min_shared=1).distance.loc["p", "k"] == 0.2
    # And with more levels than the level-by-level products handle (one pass
    # per model): the same exact values.
    levels = [i / 100 for i in range(100)]
    wide = _long({"p": {f"q{i}": v for i, v in enumerate(levels)}})
    shifted = _long({"k": {f"q{i}": v + 0.2 for i, v in enumerate(levels[:80])}})
    D = score_disagreement(wide, shifted, min_shared=1).distance
    assert D.loc["p", "k"] == 0.2


def test_scores_past_seven_decimals_are_snapped_to_the_1e7_grid():
    # 0.12345678 (stored as float32 0.1234567836) reads 0.1234568: within
    # 5e-8 of the value written (6-decimal rounding gave 0.123457).
    evals = _long({"a": {"q": 0.12345678}, "b": {"q": 0.0}})
    D = score_disagreement(evals, min_shared=1).distance
    assert D.loc["a", "b"] == 0.1234568
    assert abs(D.loc["a", "b"] - 0.12345678) <= 5e-8
    # Two float32 scores apart by less than the grid read as one: 1/3 (the
    # mean of duplicate rows 1, 0, 0: float32 0.3333333433) and 0.33333331
    # (float32 0.3333333135) are both 0.3333333.
    evals = pd.DataFrame(
        {
            "model": ["a", "a", "a", "b", "c"],
            "query": ["q"] * 5,
            "score": [1.0, 0.0, 0.0, 0.33333331, 0.0],
        }
    )
    D = score_disagreement(evals, min_shared=1).distance
    assert D.loc["a", "b"] == 0.0
    assert D.loc["a", "c"] == D.loc["b", "c"] == 0.3333333


def test_too_many_shared_queries_for_exact_sums_is_refused(monkeypatch):
    # Past (2**53 - 1) // 1e7 shared queries the sums would no longer be exact
    # in float64; too many to build here, so the bound is lowered.
    monkeypatch.setattr(_common, "_MAX_SHARED", 3)
    evals = _long({m: {f"q{i}": 1.0 for i in range(4)} for m in "ab"})
    with pytest.raises(ValueError, match="at most 3 shared queries.*got 4"):
        score_disagreement(evals, min_shared=1)
    assert (
        score_disagreement(evals.query("query != 'q3'"), min_shared=1).distance.loc[
            "a", "b"
        ]
        == 0.0
    )


def test_match_picks_the_nearest_and_applies_the_threshold():
    known = _long(
        {
            "k1": {f"q{i}": float(i % 2) for i in range(10)},
            "k2": {f"q{i}": float(i % 3 == 0) for i in range(10)},
        }
    )
    copy = {f"q{i}": float(i % 2) for i in range(10)}
    copy["q0"] = 1.0  # one answer in ten differs from k1
    probe = _long({"copy": copy, "other": {f"q{i}": 1.0 for i in range(6)}})
    matches = match_models_by_scores(probe, known, threshold=0.1, min_shared=5)
    assert matches.index.tolist() == ["copy", "other"]
    assert matches.columns.tolist() == ["nearest", "distance", "n_shared", "is_match"]
    assert matches.loc["copy", "nearest"] == "k1"
    assert matches.loc["copy", "distance"] == pytest.approx(0.1)
    assert matches.loc["copy", "n_shared"] == 10
    assert bool(matches.loc["copy", "is_match"])
    # "other" (all correct on q0-q5): k1 differs on q0, q2, q4; k2 on q1, q2, q4, q5.
    assert matches.loc["other", "nearest"] == "k1"
    assert matches.loc["other", "distance"] == pytest.approx(3 / 6)
    assert not matches.loc["other", "is_match"]
    stricter = match_models_by_scores(probe, known, threshold=0.05, min_shared=5)
    assert not stricter["is_match"].any()


def test_match_is_not_undone_by_float32_storage_of_the_scores():
    # Scores are stored as float32: |0.3 - 0.1| reads 0.2000000104, and a
    # threshold of 0.2 refused the distance printed as 0.2.
    probe = _long({"a": {q: 0.3 for q in "wxyz"}})
    known = _long({"b": {q: 0.1 for q in "wxyz"}})
    matches = match_models_by_scores(probe, known, threshold=0.2, min_shared=4)
    assert matches.loc["a", "distance"] == 0.2  # exactly, not 0.2000000104
    assert bool(matches.loc["a", "is_match"])
    below = match_models_by_scores(probe, known, threshold=0.199, min_shared=4)
    assert not below.loc["a", "is_match"]


def test_calibration_judges_pairs_as_matching_does():
    # Cross distances on the 5 queries: b-d 0.1, c-d 0.2 (0/1 scores, exact),
    # a-b 0.2 (0.3 vs 0.1, stored as float32: 0.2000000104), b-c 0.26, a-d
    # 0.3, a-c 0.38. c-d and a-b are both 0.2 to matching, so a threshold
    # letting a third of the pairs through cannot sit between them (it sat
    # at 0.2000000052, and a-b matched too: half the pairs).
    evals = _long(
        {
            "a": {f"q{i}": 0.3 for i in range(5)},
            "b": {f"q{i}": 0.1 for i in range(5)},
            "c": {f"q{i}": float(i == 0) for i in range(5)},
            "d": {f"q{i}": 0.0 for i in range(5)},
        }
    )
    kwargs = {"n_evals": 5, "n_resamples": 1, "min_shared": 5}
    result = calibrate_score_threshold(evals, false_match_rate=0.34, **kwargs)
    np.testing.assert_array_equal(
        np.sort(result.cross_distances), [0.1, 0.2, 0.2, 0.26, 0.3, 0.38]
    )
    assert result.threshold == (0.1 + 0.2) / 2
    assert result.false_match_rate == pytest.approx(1 / 6)
    result = calibrate_score_threshold(evals, false_match_rate=0.5, **kwargs)
    assert result.threshold == pytest.approx((0.2 + 0.26) / 2)
    assert result.false_match_rate == pytest.approx(3 / 6)
    # Matching gives the realised rate: a and c are each matched to a model
    # at the pairs' distances (a-b 0.2 and c-d 0.2 both under 0.23).
    matches = match_models_by_scores(
        evals,
        evals.query("model in ['b', 'd']"),
        threshold=result.threshold,
        min_shared=5,
    )
    assert matches.loc[["a", "c"], "is_match"].tolist() == [True, True]


def test_match_ties_go_to_the_first_reference_in_sorted_order():
    known = _long({"z": {"q1": 1, "q2": 0}, "y": {"q1": 1, "q2": 0}})
    probe = _long({"p": {"q1": 1, "q2": 0}})
    matches = match_models_by_scores(probe, known, threshold=0.0, min_shared=2)
    assert matches.loc["p", "nearest"] == "y"


def test_match_names_models_without_enough_shared_queries():
    known = _long({"k": {f"q{i}": 1.0 for i in range(40)}})
    probe = _long(
        {
            "ok": {f"q{i}": 1.0 for i in range(40)},
            "short": {f"q{i}": 1.0 for i in range(5)},
        }
    )
    with pytest.raises(ValueError, match=r"'short \(5 shared at most\)'.*min_shared"):
        match_models_by_scores(probe, known, threshold=0.1)


def test_match_names_every_model_when_none_shares_enough():
    # The usual single probe: no model of evals is comparable, and each is
    # still named with the most it shares (20 of k1's 40 queries, 5 of k2's
    # 20 for p2), not only the pairs' overall maximum.
    known = _long(
        {
            "k1": {f"q{i}": 1.0 for i in range(40)},
            "k2": {f"q{i}": 0.0 for i in range(20)},
        }
    )
    probe = _long({"p1": {f"q{i}": 1.0 for i in range(20)}})
    with pytest.raises(
        ValueError,
        match=r"1 model\(s\) of evals share fewer than min_shared=32 queries "
        r"with every reference model: \['p1 \(20 shared at most\)'\]\. No pair "
        r"between evals and reference_evals .* 20 queries appear on both sides",
    ):
        match_models_by_scores(probe, known, threshold=0.1)
    two = _long(
        {
            "p1": {f"q{i}": 1.0 for i in range(20)},
            "p2": {f"q{i}": 1.0 for i in range(35, 45)},
        }
    )
    with pytest.raises(
        ValueError, match=r"'p1 \(20 shared at most\)', 'p2 \(5 shared at most\)'"
    ):
        match_models_by_scores(two, known, threshold=0.1)


def test_match_refuses_reference_evals_none():
    # None would compare evals with itself: each model its own match at 0.
    evals = _long({"a": {"q1": 1.0}, "b": {"q1": 0.0}})
    with pytest.raises(
        TypeError, match=r"reference_evals=None.*score_disagreement\(evals\)"
    ):
        match_models_by_scores(evals, None, threshold=0.1, min_shared=1)


def test_no_shared_queries_at_all_is_an_error():
    known = _long({"k": {"q1": 1.0}})
    probe = _long({"p": {"q2": 1.0}})
    with pytest.raises(ValueError, match="0 queries appear on both sides"):
        score_disagreement(probe, known, min_shared=1)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "32", None])
def test_min_shared_is_validated(bad):
    evals = _long({"a": {"q1": 1.0}, "b": {"q1": 0.0}})
    with pytest.raises(ValueError, match=f"min_shared={bad!r} should be an int >= 1"):
        score_disagreement(evals, min_shared=bad)
    with pytest.raises(ValueError, match="min_shared="):
        match_models_by_scores(evals, evals, threshold=0.1, min_shared=bad)


@pytest.mark.parametrize("bad", [-0.1, 1.5, float("nan")])
def test_threshold_is_validated(bad):
    evals = _long({"a": {"q1": 1.0}, "b": {"q1": 0.0}})
    with pytest.raises(
        ValueError, match=r"threshold=.* should be a number in \[0, 1\]"
    ):
        match_models_by_scores(evals, evals, threshold=bad, min_shared=1)


@pytest.mark.parametrize("bad", [True, "0.1", None])
def test_threshold_of_the_wrong_kind_is_a_type_error(bad):
    evals = _long({"a": {"q1": 1.0}, "b": {"q1": 0.0}})
    with pytest.raises(TypeError, match=r"threshold must be a number"):
        match_models_by_scores(evals, evals, threshold=bad, min_shared=1)


def test_bad_reference_table_is_named():
    evals = _long({"a": {"q1": 1.0}, "b": {"q1": 0.0}})
    with pytest.raises(ValueError, match="reference_evals is missing required column"):
        score_disagreement(evals, {"model": ["a"], "score": [1.0]})


# --------------------------------------------------------------------- calibration


def test_calibration_on_every_query_is_the_pools_own_disagreement():
    # Probes of all four queries: each resample sees the whole pool, whose
    # pairs disagree on 1/4 (a-b), 3/4 (a-c) and 2/4 (b-c) of the queries.
    evals = _long(
        {
            "a": {"q1": 1, "q2": 1, "q3": 1, "q4": 1},
            "b": {"q1": 1, "q2": 1, "q3": 1, "q4": 0},
            "c": {"q1": 1, "q2": 0, "q3": 0, "q4": 0},
        }
    )
    result = calibrate_score_threshold(
        evals, n_evals=4, n_resamples=2, false_match_rate=0.4, min_shared=4
    )
    np.testing.assert_allclose(
        np.sort(result.cross_distances), [0.25, 0.25, 0.5, 0.5, 0.75, 0.75]
    )
    # floor(0.4 * 6) = 2: midway between the 2nd and 3rd smallest.
    assert result.threshold == pytest.approx((0.25 + 0.5) / 2)
    assert result.false_match_rate == pytest.approx(2 / 6)
    assert result.models.tolist() == ["a", "b", "c"]


def test_calibration_refuses_a_rate_that_pairs_at_distance_zero_exceed():
    # a and a2 agree on every query: 1 of the 3 pairs is at distance 0, which
    # the threshold 0 matched (distance <= threshold), a rate of 1/3 for 0.2.
    evals = _long(
        {
            "a": {"q1": 1, "q2": 1, "q3": 0, "q4": 0},
            "a2": {"q1": 1, "q2": 1, "q3": 0, "q4": 0},
            "c": {"q1": 0, "q2": 1, "q3": 1, "q4": 1},
        }
    )
    kwargs = {"n_evals": 4, "n_resamples": 1, "min_shared": 4}
    message = (
        r"false_match_rate=0.2 cannot be met: 1 of the 3 pairs of different "
        r"models are at distance 0.* at least 1 / 3"
    )
    with pytest.raises(ValueError, match=message):
        calibrate_score_threshold(evals, false_match_rate=0.2, **kwargs)
    # At 1/3 the pair at 0 may match: midway to the next distance, 3/4.
    result = calibrate_score_threshold(evals, false_match_rate=0.34, **kwargs)
    assert result.threshold == 0.375
    assert result.false_match_rate == pytest.approx(1 / 3)


def test_calibration_skips_pairs_under_min_shared_and_is_seeded():
    # b answered only q0-q2, so it shares 3 queries with a and with c.
    evals = _long(
        {
            "a": {f"q{i}": 1 for i in range(6)},
            "b": {"q0": 0, "q1": 0, "q2": 0},
            "c": {f"q{i}": float(i % 2) for i in range(6)},
        }
    )
    strict = calibrate_score_threshold(evals, n_evals=6, n_resamples=2, min_shared=4)
    np.testing.assert_allclose(strict.cross_distances, [0.5, 0.5])  # a-c only
    loose = calibrate_score_threshold(evals, n_evals=6, n_resamples=2, min_shared=3)
    # a-b disagree on all 3, a-c on 3 of 6, b-c on q1 of 3.
    np.testing.assert_allclose(
        np.sort(loose.cross_distances), [1 / 3, 1 / 3, 0.5, 0.5, 1.0, 1.0]
    )
    # Probes of 3 of the 6 queries: seeded, and on levels of thirds. A probe
    # of q1, q3 and q5 finds a and c agreeing (distance 0), so the rate asked
    # for must allow those pairs.
    kwargs = {"n_evals": 3, "n_resamples": 30, "min_shared": 3, "random_state": 0}
    first = calibrate_score_threshold(evals, false_match_rate=0.1, **kwargs)
    again = calibrate_score_threshold(evals, false_match_rate=0.1, **kwargs)
    np.testing.assert_array_equal(first.cross_distances, again.cross_distances)
    assert len(first.cross_distances) >= 30  # a-c on every set
    assert np.isin(np.round(first.cross_distances * 3), [0, 1, 2, 3]).all()


def test_calibrated_threshold_finds_a_copy_and_not_a_stranger():
    rng = np.random.default_rng(1)
    queries = [f"q{i}" for i in range(400)]
    answers = {f"m{i}": rng.random(400) < rng.uniform(0.4, 0.8) for i in range(8)}
    known = pd.DataFrame(
        {
            "model": np.repeat(list(answers), 400),
            "query": queries * 8,
            "score": np.concatenate(list(answers.values())) * 1.0,
        }
    )
    result = calibrate_score_threshold(
        known, n_evals=128, false_match_rate=0.01, random_state=0
    )
    assert result.false_match_rate <= 0.01
    picked = rng.choice(400, 128, replace=False)
    copy = answers["m3"][picked] ^ (rng.random(128) < 0.03)  # 3 % changed
    stranger = rng.random(128) < 0.6
    probes = pd.DataFrame(
        {
            "model": np.repeat(["copy", "stranger"], 128),
            "query": np.array(queries, dtype=object)[np.concatenate([picked, picked])],
            "score": np.concatenate([copy, stranger]) * 1.0,
        }
    )
    matches = match_models_by_scores(probes, known, threshold=result.threshold)
    assert matches.loc["copy", "nearest"] == "m3"
    assert matches["is_match"].tolist() == [True, False]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"n_evals": 0}, "n_evals=0 should be an int >= 1"),
        ({"n_evals": 2.0}, "n_evals=2.0 should be an int >= 1"),
        ({"n_resamples": 0}, "n_resamples=0 should be an int >= 1"),
        (
            {"false_match_rate": 0.0},
            r"false_match_rate=0.0 should be a number in \(0, 1\)",
        ),
        ({"false_match_rate": True}, "false_match_rate=True"),
        ({"min_shared": 0}, "min_shared=0 should be an int >= 1"),
        ({"n_evals": 4, "min_shared": 5}, "min_shared=5 exceeds n_evals=4"),
        ({"n_evals": 7, "min_shared": 1}, "n_evals=7 exceeds the 6 queries of evals"),
    ],
)
def test_calibration_validates(kwargs, message):
    evals = _long({m: {f"q{i}": float(i % 2) for i in range(6)} for m in "ab"})
    with pytest.raises(ValueError, match=message):
        calibrate_score_threshold(evals, **kwargs)


def test_calibration_needs_two_models_sharing_queries():
    one = _long({"a": {f"q{i}": 1.0 for i in range(6)}})
    with pytest.raises(ValueError, match="evals has 1 model"):
        calibrate_score_threshold(one, n_evals=3, min_shared=1)
    apart = _long({"a": {"q0": 1.0, "q1": 1.0}, "b": {"q2": 1.0, "q3": 0.0}})
    with pytest.raises(ValueError, match="No pair of models answered min_shared=1"):
        calibrate_score_threshold(apart, n_evals=4, min_shared=1)


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    n_evals=st.integers(32, 60),
    false_match_rate=st.sampled_from([0.01, 0.05, 0.1, 0.3]),
)
def test_calibrated_threshold_never_lets_more_pairs_through_than_asked(
    seed, n_evals, false_match_rate
):
    # Binary scores on a few dozen queries: rates k / n tie a lot. A
    # threshold on a tied value would let every tied pair through.
    rng = np.random.default_rng(seed)
    models, queries = 10, 80
    known = pd.DataFrame(
        {
            "model": np.repeat([f"m{i}" for i in range(models)], queries),
            "query": [f"q{j}" for j in range(queries)] * models,
            "score": (rng.random(models * queries) < 0.6) * 1.0,
        }
    )
    result = calibrate_score_threshold(
        known,
        n_evals=n_evals,
        n_resamples=3,
        false_match_rate=false_match_rate,
        random_state=seed,
    )
    assert result.false_match_rate <= false_match_rate
    assert not np.isin(result.threshold, result.cross_distances)
