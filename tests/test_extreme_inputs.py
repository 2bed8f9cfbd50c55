"""Inputs at the edges of what is accepted: Fraction scores, encodings past
float32's range, and a model whose many rows are one evaluation."""

import re
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

from locus_sklearn import QueryEncoder, check_evals, check_model_costs
from locus_sklearn.baselines import SingleBestRouter


def test_fraction_scores_are_real_numbers():
    # A Fraction is a numbers.Real, as check_model_costs already read it;
    # check_evals refused it as "not numbers".
    evals = pd.DataFrame(
        {
            "model": ["a", "a", "a", "b"],
            "query": ["q1", "q1", "q2", "q1"],
            "score": [Fraction(1, 3), Fraction(2, 3), 1, Fraction(1, 7)],
        }
    )
    table = check_evals(evals)
    # By hand: a on q1 is the mean of 1/3 and 2/3, 1/2; a on q2 is 1; b 1/7.
    assert table.score.tolist() == [0.5, 1.0, 1 / 7]
    router = SingleBestRouter().fit(evals)
    np.testing.assert_array_equal(router.predict_proba(["q9"]), [[0.75, 1 / 7]])
    costs = check_model_costs({"a": Fraction(1, 2), "b": 2}, table.models)
    assert costs.tolist() == [0.5, 2.0]


def test_a_huge_fraction_is_outside_not_infinite_and_decimals_stay_refused():
    huge = {"model": ["a"], "query": ["q"], "score": [Fraction(10**400, 3)]}
    with pytest.raises(ValueError, match=r"1 value\(s\) outside \[0, 1\]"):
        check_evals(huge)
    # Decimals are no numbers.Real: refused rather than converted, as documented.
    with pytest.raises(TypeError, match="Decimals are refused"):
        check_evals({"model": ["a"], "query": ["q"], "score": [Decimal("0.5")]})
    with pytest.raises(TypeError, match=r"not numbers \(e.g. \[True\]\)"):
        check_evals({"model": ["a", "a"], "query": ["q", "r"], "score": [True, 0.5]})


def test_a_mapping_vector_past_float32s_range_is_not_called_nan():
    # Finite in float64, but not storable as float32.
    with pytest.raises(ValueError) as info:
        QueryEncoder({"q1": [1e300, 0.0], "q2": [0.0, 1.0]}).fit()
    message = str(info.value)
    assert "beyond float32's range (|x| > 3.40e+38) in 1 of its 2 vectors" in message
    assert "['q1']" in message and "divide each of those vectors" in message
    assert "NaN" not in message and "infinite" not in message
    # NaN and inf keep their own message, before any range question.
    with pytest.raises(ValueError, match=r"NaN or infinite values in 1 of its 2"):
        QueryEncoder({"q1": [1e300, 0.0], "q2": [np.nan, 1.0]}).fit()


def test_one_evaluation_error_says_duplicate_rows_were_averaged(tiny_embedder):
    # 50 rows of "a", all on q0: one evaluation once averaged.
    evals = pd.DataFrame(
        {
            "model": ["a"] * 50 + ["b", "b"],
            "query": ["q0"] * 50 + ["q0", "q1"],
            "score": [1.0] * 50 + [0.0, 1.0],
        }
    )
    embedder = tiny_embedder(
        {"q0": [1.0, 0.0], "q1": [0.0, 1.0]}, embedding_dim=4, max_epochs=1
    )
    with pytest.raises(ValueError) as info:
        embedder.fit(evals)
    assert (
        "1 model(s) have 1: ['a']. Embed such models with transform() instead. "
        "evals has 52 rows but 3 distinct (model, query) pairs: the rows of a "
        "repeated pair are averaged into one evaluation, so a model needs 2 "
        "distinct queries."
    ) in str(info.value)
    # Without duplicates, no word of them.
    with pytest.raises(ValueError, match=r"have 1: \['a'\]\. Embed") as info:
        embedder.fit(evals.drop_duplicates(["model", "query"]))
    assert not re.search("distinct .model, query. pairs", str(info.value))


@pytest.mark.parametrize(
    "device, shown",
    [(2**63, "9223372036854775808"), (10**30, r"1\.000e\+30 \(an int of about 31 "
     r"digits\)"), (10**5000, r"1\.000e\+5000 \(an int of about 5001 digits\)")],
    ids=["2**63", "10**30", "10**5000"],  # the digits of 10**5000 have no str
)  # fmt: skip
def test_a_device_index_past_int64_is_named(device, shown):
    # torch raised "ValueError: Overflow when unpacking long long", naming
    # neither the parameter nor what it takes (serve.create_app(device=)
    # takes an int index).
    from locus_sklearn._device import parse_device, resolve_device

    match = rf"^device={shown} is not a torch device \(.*\); use 'cpu', 'cuda', "
    for check in (parse_device, resolve_device):
        with pytest.raises(ValueError, match=match):
            check(device)
