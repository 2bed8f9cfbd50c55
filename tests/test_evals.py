"""The evaluation table: validation, conversion and round trips."""

import re
import time

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from locus_sklearn import check_evals, check_queries


def frame(**columns):
    base = {"model": ["a", "b"], "query": ["q1", "q1"], "score": [1.0, 0.0]}
    base.update(columns)
    return pd.DataFrame(base)


def test_hand_computed_conversion():
    evals = pd.DataFrame(
        {
            "model": ["m2", "m1", "m1", "m2", "m1"],
            "query": ["x", "y", "x", "x", "y"],
            "score": [1.0, 0.0, 1.0, 0.0, 1.0],
            "task": ["t1", "t2", "t1", "t1", "t2"],
        }
    )
    table = check_evals(evals)
    assert table.models.tolist() == ["m1", "m2"]
    assert table.queries.tolist() == ["x", "y"]
    # (m1, y) appears twice with 0 and 1 -> 0.5; (m2, x) twice with 1 and 0 -> 0.5.
    assert table.model_index.tolist() == [0, 0, 1]
    assert table.query_index.tolist() == [0, 1, 0]
    assert table.score.tolist() == [1.0, 0.5, 0.5]
    assert table.score.dtype == np.float64
    assert table.query_task.tolist() == ["t1", "t2"]
    assert table.n_input_rows == 5 and table.n_rows == 3
    assert table.indptr.tolist() == [0, 2, 3]
    np.testing.assert_array_equal(table.to_dense(), [[1.0, 0.5], [0.5, np.nan]])
    np.testing.assert_array_equal(
        table.to_dense(["m2", "zz", "m1"]), [[0.5, np.nan, 1.0], [np.nan, np.nan, 0.5]]
    )
    back = table.to_frame()
    assert back.columns.tolist() == ["model", "query", "score", "task"]
    assert len(back) == 3


def test_tasks_by_query_on_a_hand_case():
    # Rows in no order, repeated (query, task) pairs: one task per query.
    evals = {
        "model": ["a", "b", "a", "b", "a", "b", "c"],
        "query": ["q3", "q1", "q1", "q3", "q2", "q2", "q3"],
        "score": [1.0] * 7,
        "task": ["math", "law", "law", "math", "law", "law", "math"],
    }
    table = check_evals(evals)
    assert table.queries.tolist() == ["q1", "q2", "q3"]
    assert table.query_task.tolist() == ["law", "law", "math"]
    # q4 and q2 are given two tasks (q4 twice over), q1 one task in three
    # rows, q3 one: 2 queries named, in sorted order.
    evals = {
        "model": ["a", "b", "c", "a", "b", "a", "b", "c", "a"],
        "query": ["q4", "q1", "q4", "q2", "q2", "q1", "q3", "q4", "q1"],
        "score": [1.0] * 9,
        "task": ["t1", "t1", "t2", "t2", "t1", "t1", "t3", "t1", "t1"],
    }
    with pytest.raises(
        ValueError,
        match=r"^evals\['task'\] gives 2 quer\(y/ies\) more than one task \(e\.g\. "
        r"\['q2', 'q4'\]\); each query belongs to one task\.$",
    ):
        check_evals(evals)
    # More than three conflicting queries: three named, then "...".
    evals = {
        "model": ["a", "b"] * 5,
        "query": [q for q in ["q5", "q2", "q4", "q1", "q3"] for _ in range(2)],
        "score": [1.0] * 10,
        "task": ["t1", "t2"] * 5,
    }
    with pytest.raises(
        ValueError, match=r"gives 5 quer\(y/ies\) .* \(e\.g\. \['q1', 'q2', 'q3'\]\)"
    ):
        check_evals(evals)


def test_a_task_column_costs_little():
    # tasks_by_query grouped the rows in Python, one call per query: a task
    # column made check_evals about 50 times slower (9 s for 100,000
    # queries). Loose bound, relative to the same table without the column.
    n = 200_000
    evals = pd.DataFrame(
        {
            "model": ["m"] * n,
            "query": [f"q{i}" for i in range(n)],
            "score": np.linspace(0.0, 1.0, n),
        }
    )
    start = time.perf_counter()
    check_evals(evals)
    without = time.perf_counter() - start
    evals["task"] = np.array(["A", "B"], dtype=object)[np.arange(n) % 2]
    start = time.perf_counter()
    table = check_evals(evals)
    with_task = time.perf_counter() - start
    assert with_task < 3 * without + 1.0, (with_task, without)
    assert table.query_task[table.queries == "q7"].tolist() == ["B"]


def test_mapping_of_columns_is_accepted():
    table = check_evals({"model": ["a"], "query": ["q"], "score": [1]})
    assert table.score.tolist() == [1.0]


def test_mapping_of_series_with_different_indexes_is_refused():
    """Series were read by position, their indexes ignored: a score Series in
    another row order paired each score with another row, silently."""
    base = pd.DataFrame({"model": ["a", "a", "b", "b"], "query": ["q1", "q2"] * 2})
    score = pd.Series([1.0, 0.0, 0.0, 1.0]).sort_values(kind="stable")
    mapping = {"model": base["model"], "query": base["query"], "score": score}
    with pytest.raises(
        ValueError,
        match=r"evals holds pandas Series whose indexes differ: the index of "
        r"column\(s\) \['score'\] is not that of 'model'",
    ):
        check_evals(mapping)
    # pandas pairs the rows by index, as the error says.
    aligned = check_evals(pd.DataFrame(mapping)).to_dense()
    np.testing.assert_array_equal(aligned, [[1.0, 0.0], [0.0, 1.0]])
    # One shared index (whatever it is), or lists beside it: read by position.
    shared = base.set_index(pd.Index([7, 3, 5, 1])).assign(score=[1.0, 0.0, 0.0, 1.0])
    table = check_evals({**{c: shared[c] for c in shared}, "task": ["t"] * 4})
    np.testing.assert_array_equal(table.to_dense(), [[1.0, 0.0], [0.0, 1.0]])


def test_score_too_large_for_a_float_is_a_value_error_naming_the_column():
    """A Python int beyond float64's range raised a bare OverflowError, then
    was called infinite: it is a finite number outside [0, 1], shown as
    given."""
    with pytest.raises(
        ValueError,
        match=r"evals\['score'\] has 1 value\(s\) outside \[0, 1\] \(e\.g\. "
        r"\[1000000000.*0000 \(401 characters\)\]\); scores must lie in \[0, 1\]",
    ):
        check_evals({"model": ["a", "b"], "query": ["q", "q"], "score": [10**400, 1]})
    with pytest.raises(
        ValueError,
        match=r"has 2 value\(s\) outside \[0, 1\] \(e\.g\. \[-1000.*\(402 characters\), 2\.0\]",
    ):
        check_evals(
            {
                "model": ["a", "b", "c"],
                "query": ["q"] * 3,
                "score": np.array([-(10**400), 2, 0], dtype=object),
            }
        )
    # A float infinity is still infinite, beside a huge int.
    with pytest.raises(ValueError, match=r"has 1 infinite value\(s\) out of 2 rows"):
        # A mapping: pandas 2's DataFrame constructor overflows on it first.
        check_evals(
            {"model": ["a", "b"], "query": ["q1", "q1"], "score": [10**400, np.inf]}
        )


@pytest.mark.parametrize(
    "score, error, message",
    [
        (
            (10**400, 1),
            ValueError,
            r"has 1 value\(s\) outside \[0, 1\] \(e\.g\. \[1000",
        ),
        ([0.5, 10**400], ValueError, r"has 1 value\(s\) outside \[0, 1\]"),
        ([10**400, None], ValueError, r"has 1 missing value\(s\) .* out of 2 rows"),
        ([10**400, True], TypeError, r"must hold .* 1 of 2 rows are not numbers"),
    ],
)
def test_score_too_large_for_a_float_beside_other_values(score, error, message):
    """pandas < 3 could not build a column of numbers holding such an int
    (check_evals said the mapping could not be read as a table); it is
    read as objects, as pandas 3 does, and each value checked."""
    with pytest.raises(error, match=rf"^evals\['score'\] {message}"):
        check_evals({"model": ["a", "b"], "query": ["q", "q"], "score": score})


@pytest.mark.parametrize(
    "column, message",
    [
        (
            (m for m in ["a", "b"]),
            r"evals\['model'\] is a generator, not a sequence of one value per "
            r"row; pass a list or an array of one value per row, in the order of "
            r"the rows\.",
        ),
        (
            iter(["a", "b"]),
            r"evals\['model'\] is a list_iterator, not a sequence of one value",
        ),
        (
            {"a", "b"},
            r"evals\['model'\] is a set, which has no row order; pass a list or "
            r"an array of one value per row",
        ),
        (frozenset({"a", "b"}), r"evals\['model'\] is a frozenset, which has no"),
        ({"a": 0, "b": 1}.keys(), r"evals\['model'\] is a dict_keys, not a"),
    ],
    ids=["generator", "iterator", "set", "frozenset", "dict_keys"],
)
def test_a_column_numpy_reads_as_one_value_is_named_by_its_type(column, message):
    # It was "must be one-dimensional; got a value of shape ()".
    with pytest.raises(TypeError, match=message):
        check_evals({"model": column, "query": ["q", "r"], "score": [1.0, 0.0]})
    # A scalar still gets the shape message.
    with pytest.raises(ValueError, match=r"must be one-dimensional; got a value of "):
        check_evals({"model": "a", "query": ["q", "r"], "score": [1.0, 0.0]})


@pytest.mark.parametrize(
    "to_tensor",
    [
        lambda t: t.bfloat16(),
        lambda t: t.clone().requires_grad_(),
        lambda t: t.half(),
    ],
    ids=["bfloat16", "requires_grad", "float16"],
)
def test_torch_scores_and_costs_of_any_float_dtype_are_read(to_tensor):
    # NumPy has no bfloat16 and cannot read a tensor that requires grad:
    # both failed with torch's "Got unsupported ScalarType BFloat16" (or
    # "Can't call numpy() on Tensor that requires grad").
    import torch

    from locus_sklearn import check_model_costs

    # Values exact in bfloat16 (8 significant bits).
    score = to_tensor(torch.tensor([1.0, 0.25, 0.5]))
    table = check_evals(
        {"model": ["b", "a", "a"], "query": ["q", "q", "r"], "score": score}
    )
    assert table.score.tolist() == [0.25, 0.5, 1.0]
    costs = to_tensor(torch.tensor([1.5, 3.0]))
    result = check_model_costs(costs, np.array(["a", "b"], dtype=object))
    assert result.dtype == np.float64 and result.tolist() == [1.5, 3.0]
    # The tensor is not changed (no grad taken, same dtype).
    assert costs.dtype == to_tensor(torch.zeros(1)).dtype
    # A bool tensor is still a flag, not a score.
    with pytest.raises(TypeError, match="boolean dtype"):
        check_evals(
            {
                "model": ["a", "b"],
                "query": ["q", "q"],
                "score": torch.tensor([1, 0]).bool(),
            }
        )


@pytest.mark.parametrize(
    "evals, error, match",
    [
        ([1, 2, 3], TypeError, "evals must be a pandas DataFrame or a mapping"),
        (
            {"model": ["a"], "query": ["q", "r"], "score": [1]},
            ValueError,
            "same length",
        ),
        (
            pd.DataFrame({"model": ["a"], "query": ["q"]}),
            ValueError,
            r"missing required column\(s\) \['score'\]",
        ),
        (frame().iloc[:0], ValueError, r"empty \(0 rows\)"),
        (
            frame(score=[np.nan, 1.0]),
            ValueError,
            r"1 missing value\(s\) \(NaN, None or pd\.NA\) out of 2 rows; every "
            r"row needs a score in \[0, 1\]: drop or fill those rows",
        ),
        (frame(score=[np.inf, -np.inf]), ValueError, r"2 infinite value\(s\)"),
        (frame(score=[1.5, 0.0]), ValueError, r"1 value\(s\) outside \[0, 1\]"),
        (frame(score=[True, False]), TypeError, "boolean dtype"),
        (frame(score=["1", 0.0]), TypeError, "1 of 2 rows are not numbers"),
        (
            frame(model=[1, "b"]),
            TypeError,
            r"evals\['model'\] must hold strings; 1 of 2",
        ),
        (
            frame(query=[None, None]),
            TypeError,
            r"evals\['query'\] must hold strings; 2 missing value\(s\) in 'query': "
            "drop or fill those rows",
        ),
        (frame(model=["", "b"]), ValueError, "1 empty string"),
        (frame(task=["t1", "t2"]), ValueError, "more than one task"),
    ],
)
def test_bad_tables_raise_clear_errors(evals, error, match):
    with pytest.raises(error, match=match):
        check_evals(evals)


@pytest.mark.parametrize(
    "score",
    [
        np.array([1 + 0.5j, 0j]),
        np.array([1 + 0j, 0j]),  # complex dtype even with no imaginary part
        np.array([1 + 0.5j, 0.0], dtype=object),
        pd.array([True, False], dtype="boolean"),
        np.array([True, False], dtype=object),
    ],
    ids=["complex", "complex-real-valued", "complex-object", "boolean", "bool-object"],
)
def test_complex_and_boolean_scores_are_refused_naming_the_column(score):
    # Complex scores would lose their imaginary part and booleans would pass as
    # 0/1: both are refused (convert explicitly if that is what is meant).
    with pytest.raises(TypeError, match=r"evals\['score'\]"):
        check_evals(frame(score=score))


def test_object_scores_that_are_numbers_are_accepted():
    table = check_evals(frame(score=np.array([1, 0.25], dtype=object)))
    assert sorted(table.score.tolist()) == [0.25, 1.0]


def test_name_appears_in_messages():
    with pytest.raises(ValueError, match="onboard_evals is empty"):
        check_evals(frame().iloc[:0], name="onboard_evals")


_ids = st.sampled_from(["a", "b", "c", "q1", "q2", "long query text?"])


@settings(max_examples=60, deadline=None)
@given(
    rows=st.lists(st.tuples(_ids, _ids, st.floats(0, 1)), min_size=1, max_size=30),
    seed=st.integers(0, 1000),
)
def test_valid_tables_round_trip_whatever_the_row_order(rows, seed):
    evals = pd.DataFrame(rows, columns=["model", "query", "score"])
    table = check_evals(evals)
    shuffled = check_evals(evals.sample(frac=1.0, random_state=seed))
    np.testing.assert_array_equal(table.models, shuffled.models)
    np.testing.assert_array_equal(table.queries, shuffled.queries)
    np.testing.assert_array_equal(table.model_index, shuffled.model_index)
    np.testing.assert_array_equal(table.query_index, shuffled.query_index)
    # Duplicates' means are summed in row order, which moves them by float64
    # ulps (the smallest normal float32 as atol, for subnormal means).
    np.testing.assert_allclose(table.score, shuffled.score, rtol=1e-6, atol=2**-126)
    # Averages of duplicates, computed by pandas.
    expected = evals.groupby(["model", "query"])["score"].mean()
    got = table.to_frame().set_index(["model", "query"])["score"]
    np.testing.assert_allclose(
        got.to_numpy(), expected.to_numpy(), rtol=1e-6, atol=1e-7
    )


_anything = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True),
    st.text(max_size=3),
    st.lists(st.integers(), max_size=2),
)


@settings(max_examples=150, deadline=None)
@given(
    columns=st.dictionaries(
        st.sampled_from(["model", "query", "score", "task", "other"]),
        st.lists(_anything, min_size=0, max_size=4),
        max_size=5,
    )
)
def test_malformed_tables_raise_value_or_type_error(columns):
    try:
        check_evals(columns)
    except (ValueError, TypeError) as exc:
        assert str(exc)
    # Valid by chance is fine too: then it must be a proper table.


def test_check_queries():
    assert check_queries(("a", "b")).tolist() == ["a", "b"]
    assert check_queries(pd.DataFrame({"query": ["x"]})).tolist() == ["x"]
    assert check_queries(pd.Series(["x", "x"])).tolist() == ["x", "x"]
    with pytest.raises(TypeError, match="not a single string"):
        check_queries("2+2?")
    with pytest.raises(ValueError, match="queries is empty"):
        check_queries([])
    with pytest.raises(TypeError, match="1 of 2 entries"):
        check_queries(["ok", 3])
    with pytest.raises(ValueError, match="without a 'query' column"):
        check_queries(pd.DataFrame({"text": ["x"]}))
    with pytest.raises(TypeError, match="got int"):
        check_queries(5)


@pytest.mark.parametrize(
    "queries, kind",
    [
        ({"What is 2+2?", "Capital of France?"}, "set"),
        (frozenset({"q1", "q2"}), "frozenset"),
        ({"q1": 0.1, "q2": 0.2}, "dict"),
    ],
)
def test_check_queries_refuses_sets_and_mappings(queries, kind):
    """A set was read in hash order (another order in each process) and a
    dict by its keys: predictions came back in an order nobody chose."""
    with pytest.raises(
        TypeError, match=rf"queries must be a sequence of str .*got a {kind}, which"
    ):
        check_queries(queries)


def test_check_queries_still_takes_ordered_containers():
    expected = ["b", "a", "b"]
    for queries in (
        expected,
        tuple(expected),
        np.array(expected),
        pd.Series(expected, index=[9, 3, 5]),
        pd.DataFrame({"query": expected}),
    ):
        assert check_queries(queries).tolist() == expected
    # A dict's keys keep the order they were inserted in.
    assert check_queries({"b": 1, "a": 2}.keys()).tolist() == ["b", "a"]


def test_check_queries_refuses_empty_ids_as_check_evals_does():
    # check_evals refuses an empty query id; a query at prediction time
    # follows the same rule, and so keeps blank strings as check_evals does.
    with pytest.raises(ValueError, match="non-empty id"):
        check_evals({"model": ["a"], "query": [""], "score": [1.0]})
    with pytest.raises(
        ValueError,
        match=r"queries has 2 empty string\(s\) '' at position\(s\) \[0, 2\]; "
        "every query needs a non-empty id",
    ):
        check_queries(["", "ok", ""])
    with pytest.raises(ValueError, match=r"X has 1 empty string\(s\) '' at position"):
        check_queries(pd.DataFrame({"query": ["ok", ""]}), name="X")
    with pytest.raises(ValueError, match=r"at position\(s\) \[1\]"):
        check_queries(np.array(["ok", ""]))
    assert check_evals({"model": ["a"], "query": ["   "], "score": [1.0]}).n_rows == 1
    assert check_queries(["   ", " q "]).tolist() == ["   ", " q "]


def test_messages_show_numpy_strings_as_plain_strings():
    from locus_sklearn._base import check_model_subset

    # Names held as NumPy strings (np.str_) read as 'zz' in the message, not
    # np.str_('zz'), in the unknown names and in the pool it lists.
    with pytest.raises(ValueError) as info:
        check_model_subset(np.array(["zz"]), np.array(["a", "b"]))
    assert str(info.value) == (
        "models has 1 model(s) that are not in the pool: ['zz']; the pool is "
        "['a', 'b']."
    )


# ------------------------------------------------------------- check_model_costs


def test_model_costs_series_is_read_by_index_not_position():
    from locus_sklearn._evals import check_model_costs

    classes = np.array(["a", "b", "c"], dtype=object)
    # Index in another order than the sorted pool: values follow the names.
    costs = pd.Series({"c": 3.0, "a": 1.0, "b": 2.0})
    assert check_model_costs(costs, classes).tolist() == [1.0, 2.0, 3.0]
    # Arrays and lists stay positional, in sorted pool order.
    assert check_model_costs(np.array([3.0, 1.0, 2.0]), classes).tolist() == [
        3.0,
        1.0,
        2.0,
    ]
    with pytest.raises(ValueError, match=r"no cost for 1 model.*\['c'\]"):
        check_model_costs(pd.Series({"a": 1.0, "b": 2.0}), classes)
    with pytest.raises(ValueError, match=r"not in the pool: \['zz'\]"):
        check_model_costs(pd.Series({"a": 1.0, "b": 2.0, "c": 3.0, "zz": 4.0}), classes)
    # A misspelt name is both missing and extra: one message names both.
    with pytest.raises(
        ValueError,
        match=r"has no cost for 1 model\(s\) of the pool: \['c'\] and costs for 1 "
        r"model\(s\) that are not in the pool: \['cc'\]; pass costs for exactly",
    ):
        check_model_costs({"a": 1.0, "b": 2.0, "cc": 3.0}, classes)
    # A default RangeIndex is not a set of model names: refused, with the fix.
    with pytest.raises(ValueError, match=r"index.*to_numpy\(\)"):
        check_model_costs(pd.Series([1.0, 2.0, 3.0]), classes)
    with pytest.raises(ValueError, match=r"repeats.*\['a'\]"):
        check_model_costs(pd.Series([1.0, 2.0, 3.0], index=["a", "a", "b"]), classes)


# Found by the campaign below; each raised a bare numpy/pandas error (or
# warned and changed the value) before.
@pytest.mark.parametrize(
    "evals, match",
    [
        ({"model": [], "query": [], "score": [None, []]}, "same length"),
        ({"model": ["a"], "query": ["q"], "score": [[1.0, [0.0]]]}, "score"),
        # Read as a Series (a list of its values made pandas fail): what is
        # wrong with it is then what is reported.
        ({"model": np.array(["NaT"], dtype="timedelta64[Y]")}, "missing required"),
    ],
)
def test_campaign_findings_check_evals(evals, match):
    with pytest.raises((TypeError, ValueError), match=match) as info:
        check_evals(evals, name="found")
    assert "found" in str(info.value)


@pytest.mark.parametrize(
    "costs",
    [
        np.array([1 + 0j, 2, 3], dtype=np.complex64),
        [1 + 1j, 2.0, 3.0],
        np.array([True, False, True]),
        [True, 2.0, 3.0],
        {"a": True, "b": 2.0, "c": 3.0},
        ["1.5", "2", "3"],
        {"a": np.timedelta64(200, "ms"), "b": 2.0, "c": 3.0},
    ],
    ids=[
        "complex",
        "complex-list",
        "bool",
        "bool-list",
        "bool-dict",
        "str",
        "duration",
    ],
)
def test_model_costs_must_be_real_numbers(costs):
    from locus_sklearn._evals import check_model_costs

    with pytest.raises(TypeError, match="model_costs must hold real numbers"):
        check_model_costs(costs, np.array(["a", "b", "c"], dtype=object))


@pytest.mark.parametrize(
    "costs",
    [np.ones(10, dtype=bool), np.array(["1"] * 10), [True] * 10],
    ids=["bool-array", "str-array", "bool-list"],
)
def test_model_costs_type_error_counts_every_bad_value(costs):
    # An array of a non-numeric dtype was reported as "5 value(s)", its
    # preview's length, whatever its size.
    from locus_sklearn._evals import check_model_costs

    message = r"got 10 value\(s\) that are not \(e\.g\. \[.*, \.\.\.\]"
    with pytest.raises(TypeError, match=message):
        check_model_costs(costs, np.array(list("abcdefghij"), dtype=object))


# --------------------------------------------------- bad-input campaign (marked)
# Any input to check_evals or check_model_costs gives either a valid result or
# a TypeError / ValueError naming the parameter; never another exception,
# never a warning (a warning means a value was silently changed: a complex
# number cast to float, an overflow). Example counts come from the "campaign"
# hypothesis profile (tests/conftest.py, LOCUS_CAMPAIGN_EXAMPLES).

import warnings  # noqa: E402
from datetime import datetime, timedelta  # noqa: E402

from hypothesis.extra import numpy as hnp  # noqa: E402

_atoms = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(0, 1),
    st.complex_numbers(allow_nan=True),
    st.text(max_size=4),
    st.sampled_from(["a", "b", "q1", "q2", "", " "]),
    st.binary(max_size=3),
    st.decimals(allow_nan=True),
    st.fractions(),
    st.just(pd.NA),
    st.just(pd.NaT),
    st.just(np.float16(0.5)),
    st.just(np.int64(1)),
    st.just(np.bool_(True)),
    st.just(datetime(2024, 1, 1)),
    st.just(timedelta(seconds=1)),
    st.lists(st.integers(0, 1), max_size=2),
    st.tuples(st.integers(0, 1)),
    st.dictionaries(st.text(max_size=1), st.integers(), max_size=1),
)
_dtypes = st.one_of(
    hnp.floating_dtypes(),
    hnp.integer_dtypes(),
    hnp.unsigned_integer_dtypes(),
    hnp.complex_number_dtypes(),
    hnp.boolean_dtypes(),
    hnp.datetime64_dtypes(),
    hnp.timedelta64_dtypes(),
    hnp.unicode_string_dtypes(max_len=3),
    hnp.byte_string_dtypes(max_len=3),
)
_extension_dtypes = st.sampled_from(
    ["Int64", "UInt8", "Float64", "Float32", "boolean", "string", "category"]
)


@st.composite
def _column(draw, n):
    kind = draw(st.sampled_from(["atoms", "numpy", "extension", "names", "scores"]))
    if kind == "atoms":
        return draw(st.lists(_atoms, min_size=n, max_size=n))
    if kind == "numpy":
        return draw(hnp.arrays(draw(_dtypes), n))
    if kind == "names":
        return draw(
            st.lists(st.sampled_from(["a", "b", "q1", "q2"]), min_size=n, max_size=n)
        )
    if kind == "scores":
        return draw(st.lists(st.floats(0, 1), min_size=n, max_size=n))
    values = draw(
        st.lists(
            st.one_of(st.none(), st.integers(0, 1), st.floats(0, 1)),
            min_size=n,
            max_size=n,
        )
    )
    dtype = draw(_extension_dtypes)
    try:
        return pd.array(values, dtype=dtype)
    except (TypeError, ValueError):
        return pd.array([str(v) for v in values], dtype="string")


@st.composite
def _evals_inputs(draw):
    shape = draw(st.sampled_from(["frame", "mapping", "ragged", "other"]))
    if shape == "other":
        return draw(
            st.one_of(
                _atoms, st.lists(_atoms, max_size=3), hnp.arrays(np.float64, (2, 3))
            )
        )
    n = draw(st.integers(0, 5))
    names = draw(
        st.lists(
            st.sampled_from(["model", "query", "score", "task", "other", 0, None]),
            unique=True,
            max_size=5,
        )
    )
    if draw(st.booleans()):
        names = list(dict.fromkeys(["model", "query", "score", *names]))
    if shape == "ragged":
        return {k: draw(st.lists(_atoms, max_size=4)) for k in names}
    columns = {k: draw(_column(n)) for k in names}
    if shape == "mapping":
        return columns
    try:
        return pd.DataFrame(columns, index=range(n)) if columns else pd.DataFrame()
    except (TypeError, ValueError, OverflowError):
        return columns  # pandas refused these columns; check_evals gets them raw


def _call_checked(function, name, *args, **kwargs):
    """``function(*args)``, or None after a TypeError/ValueError naming ``name``;
    any other exception or any warning fails the test."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            return function(*args, name=name, **kwargs)
        except (TypeError, ValueError) as exc:
            if isinstance(exc, Warning):
                raise
            assert name in str(exc), f"message does not name {name!r}: {exc}"
            return None


@pytest.mark.campaign
@settings(settings.get_profile("campaign"))
@given(evals=_evals_inputs())
def test_campaign_check_evals_any_input(evals):
    table = _call_checked(check_evals, "fuzzed_evals", evals)
    if table is None:
        return
    for ids in (table.models, table.queries):
        assert all(isinstance(v, str) and v for v in ids)
        assert list(ids) == sorted(set(ids))
    assert table.score.dtype == np.float64
    assert np.isfinite(table.score).all()
    assert ((table.score >= 0) & (table.score <= 1)).all()
    assert (0 <= table.model_index).all() and (table.model_index < table.n_models).all()
    assert (0 <= table.query_index).all() and (
        table.query_index < table.n_queries
    ).all()
    key = table.model_index * table.n_queries + table.query_index
    assert (np.diff(key) > 0).all()  # sorted, no duplicate (model, query) rows
    assert table.n_input_rows >= table.n_rows >= 1


_CLASSES = np.array(["a", "b", "c"], dtype=object)
_cost_values = st.one_of(_atoms, st.floats(0, 1e6))


@st.composite
def _cost_inputs(draw):
    kind = draw(st.sampled_from(["mapping", "series", "list", "numpy", "other"]))
    keys = st.one_of(
        st.sampled_from(["a", "b", "c", "d", ""]), st.integers(0, 3), st.none()
    )
    if kind == "mapping":
        return draw(st.dictionaries(keys, _cost_values, max_size=5))
    if kind == "series":
        index = draw(st.lists(keys, max_size=5))
        values = draw(st.lists(_cost_values, min_size=len(index), max_size=len(index)))
        return pd.Series(values, index=index, dtype=object if values else float)
    if kind == "list":
        return draw(st.lists(_cost_values, max_size=5))
    if kind == "numpy":
        return draw(
            hnp.arrays(draw(_dtypes), draw(st.sampled_from([(3,), (2,), (3, 1)])))
        )
    return draw(_atoms)


@pytest.mark.campaign
@settings(settings.get_profile("campaign"))
@given(costs=_cost_inputs())
def test_campaign_check_model_costs_any_input(costs):
    from locus_sklearn._evals import check_model_costs

    result = _call_checked(check_model_costs, "fuzzed_costs", costs, _CLASSES)
    if result is None:
        return
    assert result.dtype == np.float64 and result.shape == (3,)
    assert np.isfinite(result).all() and (result >= 0).all()
    if isinstance(costs, (dict, pd.Series)):
        expected = [float(costs[m]) for m in _CLASSES]
        np.testing.assert_array_equal(result, expected)


@settings(deadline=None)  # one stall of a shared CI runner is not a failure
@given(st.lists(st.text(min_size=1, max_size=6), min_size=1, max_size=40))
def test_sorted_codes_match_numpy_unique(values):
    # check_evals hashes the id columns instead of sorting every row; the ids
    # and the row -> id index must be exactly np.unique's (Python str order).
    from locus_sklearn._evals import _sorted_codes

    array = np.array(values, dtype=object)
    uniques, codes = _sorted_codes(array)
    expected, inverse = np.unique(array, return_inverse=True)
    assert uniques.dtype == object and uniques.tolist() == expected.tolist()
    np.testing.assert_array_equal(codes, inverse)
    assert codes.dtype == np.intp


def test_string_column_check_still_names_non_strings():
    frame = pd.DataFrame(
        {"model": ["a", "b", 3], "query": ["q", "q", "r"], "score": [1.0, 0.0, 1.0]}
    )
    with pytest.raises(TypeError, match=r"evals\['model'\] must hold strings; 1 of 3"):
        check_evals(frame)


@pytest.mark.parametrize(
    "columns, rows, repeated",
    [
        (["model", "query", "score", "score"], [["a", "q", 1.0, 0.0]], "score"),
        (["model", "model", "query", "score"], [["a", "b", "q", 1.0]], "model"),
        (["model", "query", "query", "score"], [["a", "q1", "q2", 1.0]], "query"),
        (
            ["model", "query", "score", "task", "task"],
            [["a", "q", 1, "t", "u"]],
            "task",
        ),
    ],
)
def test_repeated_standard_columns_are_refused_naming_them(columns, rows, repeated):
    # frame["score"] of such a table is a DataFrame: pandas failed with
    # "Cannot construct a Series from a DataFrame" or a buffer-dimension error.
    with pytest.raises(
        ValueError, match=rf"column\(s\) \['{repeated}'\] more than once"
    ):
        check_evals(pd.DataFrame(rows, columns=columns))


def test_other_repeated_columns_are_ignored():
    columns = ["model", "query", "score", "cost", "cost"]
    evals = pd.DataFrame([["a", "q", 1.0, 2, 3]], columns=columns)
    assert check_evals(evals).score.tolist() == [1.0]


def test_a_mappings_other_entries_are_ignored():
    # Documented ("Other columns are ignored"), as a DataFrame's are: a 2-D
    # column (per-row vectors), a scalar of metadata and a column of another
    # length were validated, and the whole call refused.
    columns = {
        "model": ["b", "a", "a"],
        "query": ["q1", "q1", "q2"],
        "score": [1.0, 0.0, 0.5],
        "task": ["t", "t", "u"],
    }
    extras = {
        "vectors": np.zeros((3, 2)),
        "source": "mmlu",
        "notes": ["only one"],
        "judge": {"x", "y"},
        7: [1, 2, 3],
    }
    table = check_evals({**columns, **extras})
    expected = check_evals(columns)
    assert table.models.tolist() == ["a", "b"]
    assert table.score.tolist() == [0.0, 0.5, 1.0] == expected.score.tolist()
    assert table.query_task.tolist() == ["t", "u"]
    assert table.n_input_rows == 3
    # A missing column still lists every key the mapping has.
    with pytest.raises(
        ValueError,
        match=r"missing required column\(s\) \['score'\]; it has columns "
        r"\['model', 'query', 'Score', 'vectors'\]",
    ):
        check_evals(
            {
                "model": ["a"],
                "query": ["q"],
                "Score": [1.0],
                "vectors": np.zeros((1, 2)),
            }
        )


def test_numpy_str_ids_are_stored_as_plain_str():
    # list() of a '<U' array gives np.str_ items, which reached the table
    # (and from it a router's classes_ and predictions) as np.str_('m1').
    evals = {
        "model": list(np.array(["m2", "m1", "m1"])),
        "query": list(np.array(["q1", "q1", "q2"])),
        "score": [1.0, 0.0, 1.0],
        "task": list(np.array(["t", "t", "u"])),
    }
    assert type(evals["model"][0]) is np.str_
    table = check_evals(evals)
    for values in (table.models, table.queries, table.query_task):
        assert {type(v) for v in values} == {str}
    assert table.models.tolist() == ["m1", "m2"]
    assert table.queries.tolist() == ["q1", "q2"]
    assert table.query_task.tolist() == ["t", "u"]

    # Any str subclass keeps its text.
    class Name(str):
        def __str__(self):
            return "changed"

    table = check_evals({"model": [Name("m")], "query": ["q"], "score": [1.0]})
    assert table.models.tolist() == ["m"] and type(table.models[0]) is str


DENSE = check_evals(
    {"model": ["b", "a", "a"], "query": ["q1", "q1", "q2"], "score": [1.0, 0.0, 1.0]}
)


@pytest.mark.parametrize(
    "models, error, match",
    [
        # A dict of positions kept the last "a": the first column was all-NaN.
        (["a", "b", "a"], ValueError, r"models repeats 1 model name\(s\): \['a'\]"),
        ("ab", TypeError, "models must be a sequence of model names, not a single"),
        ([["a", "b"]], TypeError, r"one-dimensional .* shape \(1, 2\)"),
        (["a", "b", 3], TypeError, r"models must hold model names .* \[3\]"),
        ({"a", "b"}, TypeError, "models must be a one-dimensional sequence"),
    ],
)
def test_to_dense_refuses_repeated_and_malformed_model_names(models, error, match):
    with pytest.raises(error, match=match):
        DENSE.to_dense(models)


def test_to_dense_models_in_any_order_with_extra_names():
    # Documented: an extra model gets an all-NaN column.
    dense = DENSE.to_dense(pd.Series(["b", "extra", "a"]))
    np.testing.assert_array_equal(dense, [[1.0, np.nan, 0.0], [np.nan, np.nan, 1.0]])
    with pytest.raises(ValueError, match=r"1 model\(s\) that are not in models"):
        DENSE.to_dense(["a"])


@pytest.mark.parametrize(
    "columns",
    [
        ["query", "query"],
        pd.MultiIndex.from_tuples([("query", "text")]),
        pd.MultiIndex.from_tuples([("query", "text"), ("query", "note")]),
    ],
)
def test_check_queries_refuses_a_query_selection_of_several_columns(columns):
    # queries["query"] was a DataFrame, and list() of it gave its column
    # labels as the queries.
    queries = pd.DataFrame([["2+2?"] * len(columns)], columns=columns)
    with pytest.raises(ValueError, match=r"queries\['query'\] is not one column"):
        check_queries(queries)


def test_check_queries_reads_a_pyarrow_array():
    pa = pytest.importorskip("pyarrow")
    assert check_queries(pa.array(["a", "b"])).tolist() == ["a", "b"]
    assert check_queries(pa.chunked_array([["a"], ["b"]])).tolist() == ["a", "b"]
    with pytest.raises(TypeError, match=r"1 missing value\(s\): drop or fill"):
        check_queries(pa.array(["a", None]))


def test_multiindex_columns_are_refused_naming_evals():
    evals = frame(model=["a"], query=["q"], score=[0.5])
    evals.columns = pd.MultiIndex.from_tuples(
        [("model", "x"), ("query", "y"), ("score", "z")]
    )
    with pytest.raises(ValueError, match=r"evals has MultiIndex columns.*Flatten"):
        check_evals(evals)


def test_mapping_columns_keep_their_dtype():
    # list() of each column turned pyarrow arrays into Arrow scalars (refused
    # as not strings) and a nullable float's pd.NA into a non-number.
    pa = pytest.importorskip("pyarrow")
    mapping = {
        "model": pa.array(["a", "b"]),
        "query": pa.chunked_array([["q"], ["q"]]),
        "score": pa.array([0.5, 1.0]),
    }
    assert check_evals(mapping).score.tolist() == [0.5, 1.0]
    score = pd.Series([0.5, None], dtype="Float64")
    columns = {"model": ["a", "b"], "query": ["q", "q"], "score": score}
    for evals in (columns, pd.DataFrame(columns)):
        with pytest.raises(ValueError, match=r"1 missing value\(s\)"):
            check_evals(evals)
    # Read by position, as before: a Series' index does not pair the rows.
    shifted = {
        "model": pd.Series(["a", "b"], index=[5, 6]),
        "query": ["q", "r"],
        "score": [0.5, 1.0],
    }
    assert check_evals(shifted).to_frame()["query"].tolist() == ["q", "r"]


def test_decimal_scores_are_refused_whatever_their_dtype():
    from decimal import Decimal

    pa = pytest.importorskip("pyarrow")
    decimals = pd.Series([Decimal("0.5")], dtype=pd.ArrowDtype(pa.decimal128(3, 2)))
    with pytest.raises(TypeError, match=r"decimal128.*Decimals are refused"):
        check_evals({"model": ["a"], "query": ["q"], "score": decimals})
    with pytest.raises(TypeError, match="Decimals are refused"):
        check_evals({"model": ["a"], "query": ["q"], "score": [Decimal("0.5")]})


def test_durations_are_refused_as_scores_and_costs():
    # np.timedelta64 is an np.integer to NumPy: 200 ms and 2 s passed as the
    # costs 200 and 2 (the slow model 100 times cheaper), and durations as
    # scores, their unit dropped.
    from locus_sklearn._evals import _is_real_number, check_model_costs

    assert not _is_real_number(np.timedelta64(1, "ms"))
    assert not _is_real_number(np.datetime64("2024-01-01"))
    durations = np.array([np.timedelta64(1, "s"), np.timedelta64(0, "s")], dtype=object)
    with pytest.raises(TypeError, match=r"2 of 2 rows are not numbers"):
        check_evals(frame(score=durations))
    costs = {"fast": np.timedelta64(200, "ms"), "slow": np.timedelta64(2, "s")}
    with pytest.raises(TypeError, match=r"got 2 value\(s\).*Durations are refused"):
        check_model_costs(costs, np.array(["fast", "slow"], dtype=object))


@pytest.mark.parametrize(
    "score, n_missing",
    [
        ([1.0, None], 1),  # a list: pandas makes None NaN
        (pd.Series([1.0, pd.NA], dtype=object), 1),
        ([None, None], 2),  # all None: object dtype
        (pd.array([1.0, None], dtype="Float64"), 1),
        (np.array([np.nan, 1.0]), 1),
    ],
    ids=["none-in-list", "na-object", "all-none", "nullable-float", "nan"],
)
def test_missing_scores_are_reported_as_missing_whatever_the_container(
    score, n_missing
):
    # None in a list was "NaN or infinite", pd.NA in an object column "not
    # numbers (e.g. [<NA>])": one cause, told three ways.
    message = (
        rf"evals\['score'\] has {n_missing} missing value\(s\) \(NaN, None or "
        r"pd\.NA\) out of 2 rows; every row needs a score in \[0, 1\]: drop or "
        "fill those rows"
    )
    with pytest.raises(ValueError, match=message):
        check_evals(frame(score=score))


def test_missing_scores_beside_bad_values_name_the_bad_values():
    score = pd.Series([pd.NA, "x"], dtype=object)
    with pytest.raises(
        TypeError, match=r"1 of 2 rows are not numbers \(e\.g\. \['x'\]"
    ):
        check_evals(frame(score=score))


@pytest.mark.parametrize(
    "costs",
    [
        pd.Series({"a": 1.0, "b": None, "c": 3.0}, dtype="Float64"),
        pd.array([1.0, None, 3.0], dtype="Float64"),
        (1.0, None, 3.0),
        {"a": 1.0, "b": np.nan, "c": 3.0},
        {"a": 1.0, "b": pd.NA, "c": 3.0},
    ],
    ids=["nullable-series", "nullable-array", "none-in-tuple", "nan", "na"],
)
def test_missing_costs_are_reported_as_missing_naming_the_model(costs):
    # A nullable Series' NA was shown as [None] ("not real numbers"), None in
    # a tuple as a type error, NaN as "not finite" with no remedy: one cause,
    # one message.
    from locus_sklearn._evals import check_model_costs

    message = (
        r"model_costs must be finite and >= 0; 1 cost\(s\) are not: \[\('b', nan\)\]; "
        r"1 missing value\(s\) \(NaN, None or pd\.NA\): every model needs a cost"
    )
    with pytest.raises(ValueError, match=message):
        check_model_costs(costs, np.array(["a", "b", "c"], dtype=object))


def test_check_queries_reports_missing_queries_as_check_evals_does():
    # It said "must hold strings (e.g. [nan])", with no remedy.
    with pytest.raises(
        TypeError,
        match=r"queries must hold strings; 1 missing value\(s\): drop or fill "
        r"those entries\.$",
    ):
        check_queries(pd.Series(["a", None]))
    with pytest.raises(
        TypeError,
        match=r"1 of 3 entries do not \(e\.g\. \[3\]\) \(1 missing value\(s\)",
    ):
        check_queries(["a", None, 3])


def test_messages_cut_long_values_keeping_both_ends():
    # A task conflict between MMLU-Pro-sized prompts gave a message of
    # 180,000 characters.
    from locus_sklearn._evals import _preview

    texts = [f"Question {i}: " + "lorem ipsum " * 1000 + f"end {i}" for i in range(3)]
    evals = pd.DataFrame(
        {
            "model": ["a"] * 6,
            "query": texts * 2,
            "score": [1.0] * 6,
            "task": ["t1"] * 3 + ["t2"] * 3,
        }
    )
    with pytest.raises(ValueError, match="more than one task") as info:
        check_evals(evals)
    message = str(info.value)
    assert len(message) < 600
    assert (
        "'Question 0: lorem ipsum" in message
        and "end 0' (12,017 characters)" in message
    )
    # The cut: 60 characters of the repr, "...", its last 17, the length.
    shown = _preview([texts[0]])[1:-1]
    assert shown == repr(texts[0])[:60] + "..." + repr(texts[0])[-17:] + (
        " (12,017 characters)"
    )
    # Values up to 100 characters (ids, paths) are shown whole, as before.
    assert _preview(["x" * 98, 1.5]) == f"['{'x' * 98}', 1.5]"


def test_graded_scores_are_kept_as_given():
    # Scores were held in float32: a grade of 0.7 read 0.699999988, so a
    # router's score() said 0.699999988 for a routing whose grades are all 0.7
    # and a threshold of 0.7 put those cells below it.
    evals = pd.DataFrame(
        {
            "model": ["a", "a", "a", "b"],
            "query": ["x", "y", "y", "x"],
            "score": [0.7, 0.1, 0.2, 0.3],
        }
    )
    table = check_evals(evals)
    assert table.score.tolist() == [0.7, (0.1 + 0.2) / 2, 0.3]
    dense = table.to_dense()
    assert dense[0, 0] == 0.7 and (dense >= 0.7).sum() == 1


def test_polars_evals_are_refused_naming_their_type_and_the_conversion():
    """The message said "must be a pandas DataFrame ... got DataFrame"."""
    pl = pytest.importorskip("polars")
    evals = pl.DataFrame(
        {"model": ["a", "a"], "query": ["q1", "q2"], "score": [1.0, 0.0]}
    )
    name = f"{type(evals).__module__}.DataFrame"
    assert name.startswith("polars.")
    with pytest.raises(
        TypeError,
        match=re.escape(f"got {name}. Convert it with its .to_pandas() method."),
    ):
        check_evals(evals)


def test_an_evals_of_a_builtin_type_is_named_bare_without_a_conversion():
    with pytest.raises(TypeError, match=r"\(optionally 'task'\); got int\.$"):
        check_evals(7)


def test_check_queries_reads_a_polars_frame_query_column():
    pl = pytest.importorskip("polars")
    frame = pl.DataFrame({"query": ["q2", "q1", "q2"], "x": [1, 2, 3]})
    assert check_queries(frame).tolist() == ["q2", "q1", "q2"]
