import errno
import json
import os
import sys
import tempfile
import warnings
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from locus_sklearn._evals import check_evals
from locus_sklearn.datasets import (
    from_lm_eval,
    from_wide,
    load_evals,
    load_mmlu_pro,
    make_model_pool,
)

LM_EVAL = os.path.join(os.path.dirname(__file__), "data", "lm_eval")
ARC_FILE = "samples_arc_easy_2024-06-01T10-15-42.123456.jsonl"
DATA_DIR = os.path.join(
    os.path.dirname(__file__), "..", "locus_sklearn", "datasets", "data"
)


# --------------------------------------------------------------------- from_wide


def test_from_wide_hand_computed():
    scores = np.array([[1.0, np.nan, 0.5], [0.0, 1.0, np.nan]])
    evals = from_wide(scores, ["a", "b", "c"], ["q1", "q2"], tasks=["x", "y"])
    expected = pd.DataFrame(
        {
            "model": ["a", "a", "b", "c"],
            "query": ["q1", "q2", "q2", "q1"],
            "score": [1.0, 0.0, 1.0, 0.5],
            "task": ["x", "y", "y", "x"],
        }
    )
    pd.testing.assert_frame_equal(evals, expected, check_dtype=False)
    assert evals["model"].map(type).eq(str).all()


def test_from_wide_dataframe_labels_and_task_mapping():
    frame = pd.DataFrame(
        {"m1": [0.0, np.nan], "m2": [1.0, 1.0]}, index=["what?", "why?"]
    )
    evals = from_wide(frame, tasks={"what?": "t1", "why?": "t2"})
    assert evals.to_dict("list") == {
        "model": ["m1", "m2", "m2"],
        "query": ["what?", "what?", "why?"],
        "score": [0.0, 1.0, 1.0],
        "task": ["t1", "t1", "t2"],
    }


def test_from_wide_default_names_sort_in_order():
    evals = from_wide(np.ones((11, 2)))
    table = check_evals(evals)
    assert table.models.tolist() == ["model0", "model1"]
    assert table.queries.tolist() == [f"query{i:02d}" for i in range(11)]


def test_from_wide_queries_without_scores_do_not_appear():
    evals = from_wide([[np.nan, np.nan], [1.0, 0.0]], ["a", "b"], ["q1", "q2"])
    assert evals["query"].tolist() == ["q2", "q2"]


def test_from_wide_reads_masked_cells_as_missing():
    """np.asarray dropped the mask: a masked cell became an evaluation scored
    with whatever value lay under the mask."""
    scores = np.ma.masked_array([[1, 0.123], [0, 1]], mask=[[0, 1], [0, 0]])
    evals = from_wide(scores, models=["a", "b"], queries=["q1", "q2"])
    assert evals.to_dict("list") == {
        "model": ["a", "a", "b"],
        "query": ["q1", "q2", "q2"],
        "score": [1.0, 0.0, 1.0],
    }
    # As the same matrix with NaN where masked, and as through pandas.
    assert evals.equals(from_wide(scores.filled(np.nan), ["a", "b"], ["q1", "q2"]))
    frame = pd.DataFrame(scores, index=["q1", "q2"], columns=["a", "b"])
    assert evals.equals(from_wide(frame))
    # An integer masked array too; a fully masked model is a model without score.
    ints = np.ma.masked_array([[1, 0], [0, 1]], mask=[[0, 1], [0, 1]])
    with pytest.raises(ValueError, match=r"1 model\(s\) have no score at all"):
        from_wide(ints, models=["a", "b"], queries=["q1", "q2"])


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"scores": [[np.nan], [np.nan]]}, ValueError, "no score at all"),
        ({"scores": [[np.inf]]}, ValueError, "infinite"),
        ({"scores": [[1.5]]}, ValueError, "outside"),
        ({"scores": [[True]]}, TypeError, "numbers"),
        ({"scores": [1.0, 0.0]}, ValueError, "2-D"),
        ({"scores": [[1.0, 0.0]], "models": ["a"]}, ValueError, "2 entries"),
        ({"scores": [[1.0, 0.0]], "models": ["a", "a"]}, ValueError, "unique"),
        ({"scores": pd.DataFrame([[1.0]])}, TypeError, "strings"),
        ({"scores": [[1.0]], "tasks": ["t", "u"]}, ValueError, "one entry"),
        ({"scores": [[1.0]], "tasks": {"other": "t"}}, ValueError, "no entry"),
    ],
)
def test_from_wide_errors(kwargs, error, match):
    with pytest.raises(error, match=match):
        from_wide(**kwargs)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        # A set iterates in hash order (for str, changed by PYTHONHASHSEED):
        # which column got which model name was chosen by nobody.
        (
            {"models": {"llama", "qwen"}},
            r"models must be a sequence of str; got a set \[.*\], which has no",
        ),
        ({"queries": frozenset({"q1", "q2"})}, r"queries must .*got a frozenset"),
        ({"tasks": {"math", "law"}}, r"tasks must .*got a set .*no order"),
        # list() of a mapping gave its keys, where its values may be meant.
        (
            {"models": {"col0": "llama", "col1": "qwen"}},
            r"models must be .*columns; got a dict \['col0', 'col1'\], whose keys",
        ),
        ({"queries": {"a": "q1", "b": "q2"}}, r"queries must be .*rows; got a dict"),
    ],
)
def test_from_wide_refuses_sets_and_mappings_of_names(kwargs, match):
    with pytest.raises(TypeError, match=match):
        from_wide([[1.0, 0.0], [0.0, 1.0]], **kwargs)
    # A dict's keys keep their insertion order, and tasks may be a mapping.
    evals = from_wide(
        [[1.0, 0.0], [0.0, 1.0]],
        models={"b": 0, "a": 0}.keys(),
        queries=["q1", "q2"],
        tasks={"q2": "law", "q1": "math"},
    )
    assert evals.to_dict("list") == {
        "model": ["b", "b", "a", "a"],
        "query": ["q1", "q2", "q1", "q2"],
        "score": [1.0, 0.0, 0.0, 1.0],
        "task": ["math", "law", "math", "law"],
    }


def test_from_wide_reads_a_tasks_series_by_its_index():
    scores = pd.DataFrame({"m": [1.0, 0.0]}, index=["q1", "q2"])
    # In another order than the rows: read by position, q1 would get "law".
    tasks = pd.Series({"q2": "law", "q1": "math", "unused": "art"})
    evals = from_wide(scores, tasks=tasks)
    assert evals["task"].tolist() == ["math", "law"]
    assert evals.equals(from_wide(scores, tasks=tasks.to_dict()))
    with pytest.raises(ValueError, match=r"no entry for 1 of 2 queries.*'q2'"):
        from_wide(scores, tasks=pd.Series({"q1": "math"}))
    with pytest.raises(ValueError, match=r"index repeats 1 quer.*\['q1'\]"):
        from_wide(scores, tasks=pd.Series(["a", "b", "c"], index=["q1", "q1", "q2"]))


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        # Each was converted: the imaginary part dropped, booleans and
        # durations made numbers.
        ({"scores": [[0.5 + 0.9j]]}, TypeError, "dtype complex128"),
        ({"scores": pd.DataFrame({"a": [0.5 + 0.9j]})}, TypeError, "'a' .complex"),
        (
            {"scores": pd.DataFrame({"a": [True], "b": [0.5]}, index=["q"])},
            TypeError,
            r"1 column\(s\) do not: 'a' \(bool\)",
        ),
        ({"scores": np.array([[1]], dtype="m8[s]")}, TypeError, "timedelta64"),
        # A duration in an object array passed as a number (np.timedelta64 is
        # an np.integer), its unit dropped.
        (
            {"scores": np.array([[1.0, np.timedelta64(500, "ms")]], dtype=object)},
            TypeError,
            r"got datetime\.timedelta\(microseconds=500000\) in an array",
        ),
        # A str was split into its characters.
        ({"scores": [[1.0, 0.0]], "models": "ab"}, TypeError, "not a single string"),
        ({"scores": [[1.0], [0.0]], "queries": "ab"}, TypeError, "single string"),
        ({"scores": [[1.0], [0.0]], "tasks": "ab"}, TypeError, "single string"),
        ({"scores": [[1.0]], "models": 3}, TypeError, "models must be a sequence"),
        (
            {"scores": [[1.0]], "tasks": pd.DataFrame({"t": ["x"]})},
            TypeError,
            "got a DataFrame",
        ),
        # The real shape, not "must have 2 entries; got 2".
        ({"scores": [[1.0, 0.0]], "models": [["a", "b"]]}, ValueError, "got 1"),
        (
            {"scores": [[1.0], [0.0]], "tasks": [["a", "b"]]},
            ValueError,
            r"one entry per query \(2\); got 1",
        ),
        (
            {
                "scores": pd.DataFrame(
                    [[1.0, 0.0]],
                    columns=pd.MultiIndex.from_tuples([("x", "a"), ("x", "b")]),
                    index=["q"],
                )
            },
            TypeError,
            r"models must be strings; got \[\('x', 'a'\), \('x', 'b'\)\]",
        ),
    ],
)
def test_from_wide_refuses_what_it_used_to_convert(kwargs, error, match):
    with pytest.raises(error, match=match):
        from_wide(**kwargs)


def test_from_wide_reads_nullable_float_columns():
    frame = pd.DataFrame({"a": pd.array([0.5, None], "Float64")}, index=["q", "r"])
    assert from_wide(frame).to_dict("list") == {
        "model": ["a"],
        "query": ["q"],
        "score": [0.5],
    }


cells = st.one_of(st.just(np.nan), st.floats(0.0, 1.0, width=32))


@settings(max_examples=60, deadline=None)
@given(
    arrays(np.float64, st.tuples(st.integers(1, 7), st.integers(1, 5)), elements=cells)
)
def test_from_wide_round_trips_through_check_evals(matrix):
    present = ~np.isnan(matrix)
    if not present.any(axis=0).all():
        with pytest.raises(ValueError, match="no score at all"):
            from_wide(matrix)
        return
    models = [f"model {j}" for j in range(matrix.shape[1])][::-1]
    queries = [f"q{i}" for i in range(matrix.shape[0])]
    table = check_evals(from_wide(matrix, models, queries))
    assert len(table.score) == present.sum()
    kept = present.any(axis=1)
    order = np.argsort(np.array(queries, dtype=object)[kept])
    np.testing.assert_array_equal(
        table.to_dense(models=models), matrix[kept][order].astype(np.float32)
    )


# -------------------------------------------------------------------- load_evals

LONG = pd.DataFrame(
    {
        "model": ["m1", "m1", "m2"],
        "query": ["2+2?", "NA", "2+2?"],
        "score": [1.0, 0.0, 0.5],
        "task": ["math", "misc", "math"],
    }
)


@pytest.mark.parametrize("suffix", [".csv", ".csv.gz", ".tsv", ".parquet", ".jsonl"])
def test_load_evals_formats(tmp_path, suffix):
    path = tmp_path / f"evals{suffix}"
    if suffix == ".parquet":
        LONG.to_parquet(path)
    elif suffix == ".jsonl":
        LONG.to_json(path, orient="records", lines=True)
    else:
        LONG.to_csv(path, index=False, sep="\t" if suffix == ".tsv" else ",")
    evals = load_evals(path)
    pd.testing.assert_frame_equal(evals, LONG, check_dtype=False)


def test_load_evals_renames_columns_and_keeps_others(tmp_path):
    path = tmp_path / "runs.csv"
    pd.DataFrame(
        {"llm": ["a", "b"], "prompt": ["x", "y"], "correct": [1, 0], "cost": [2, 3]}
    ).to_csv(path, index=False)
    evals = load_evals(
        path, model_column="llm", query_column="prompt", score_column="correct"
    )
    assert evals.to_dict("list") == {
        "model": ["a", "b"],
        "query": ["x", "y"],
        "score": [1.0, 0.0],
        "cost": [2, 3],
    }


@pytest.mark.parametrize("as_frame", [True, False])
def test_load_evals_joins_query_table(tmp_path, as_frame):
    pd.DataFrame(
        {
            "model_id": [3, 3, 7],
            "question_id": [10, 20, 10],
            "label": [1, 0, 1],
        }
    ).to_parquet(tmp_path / "scores.parquet")
    texts = pd.DataFrame(
        {
            "question_id": [20, 10, 30],
            "prompt": ["Capital of France?", "2+2?", "unused"],
            "category": ["geo", "math", "misc"],
        }
    )
    texts.to_csv(tmp_path / "questions.csv", index=False)
    queries = (
        texts.astype({"question_id": str}) if as_frame else (tmp_path / "questions.csv")
    )
    evals = load_evals(
        tmp_path / "scores.parquet",
        queries=queries,
        query_id_column="question_id",
        model_column="model_id",
        query_column="prompt",
        score_column="label",
        task_column="category",
    )
    assert evals.to_dict("list") == {
        "model": ["3", "3", "7"],
        "query": ["2+2?", "Capital of France?", "2+2?"],
        "score": [1.0, 0.0, 1.0],
        "task": ["math", "geo", "math"],
        "question_id": ["10", "20", "10"],
    }


def test_load_evals_unmatched_ids_are_counted(tmp_path):
    path = tmp_path / "scores.csv"
    pd.DataFrame(
        {"model": ["a", "a", "b", "b"], "query_id": [1, 2, 9, 9], "score": 1.0}
    ).to_csv(path, index=False)
    queries = pd.DataFrame({"query_id": ["1", "2"], "query": ["x", "y"]})
    with pytest.raises(ValueError, match=r"2 of 4 rows .* \(1 distinct id"):
        load_evals(path, queries=queries)


def test_load_evals_repeated_query_ids(tmp_path):
    path = tmp_path / "scores.csv"
    LONG.assign(query_id="1").to_csv(path, index=False)
    queries = pd.DataFrame({"query_id": ["1", "1"], "query": ["x", "y"]})
    with pytest.raises(ValueError, match="repeated id"):
        load_evals(
            path, queries=queries.rename(columns={"query": "text"}), query_column="text"
        )


def test_load_evals_errors(tmp_path):
    with pytest.raises(ValueError, match=r"unknown suffix.*\.parquet"):
        load_evals(tmp_path / "evals.xlsx")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_evals(tmp_path / "absent.csv")
    path = tmp_path / "evals.csv"
    LONG.to_csv(path, index=False)
    with pytest.raises(ValueError, match=r"no column\(s\) \['correct'\]"):
        load_evals(path, score_column="correct")
    with pytest.raises(ValueError, match="task_column='subject' is in neither"):
        load_evals(path, task_column="subject")
    with pytest.raises(ValueError, match=r"column\(s\) \['query'\] besides"):
        load_evals(path, query_column="task")
    LONG.assign(score=["1", "", "0"]).to_csv(path, index=False)
    with pytest.raises(ValueError, match=r"1 missing value\(s\).*drop or fill"):
        load_evals(path)


def _write(path, text):
    with open(path, "w", encoding="utf-8", newline="") as handle:
        handle.write(text)
    return path


def test_load_evals_says_a_folder_is_a_folder(tmp_path):
    """A folder of parquet parts (as Spark writes 'x.parquet/') was said not
    to exist."""
    folder = tmp_path / "evals.parquet"
    folder.mkdir()
    LONG.to_parquet(folder / "part-0.parquet")
    with pytest.raises(IsADirectoryError, match=r"evals\.parquet' is a folder; give"):
        load_evals(folder)
    path = tmp_path / "evals.csv"
    LONG.to_csv(path, index=False)
    with pytest.raises(IsADirectoryError, match=r"queries='.*' is a folder"):
        load_evals(path, queries=tmp_path)


def _reads_any_file():
    """Whether this process reads a file whatever its mode (root, with its
    capability to override file permissions): permission cases are then
    untestable for real."""
    with tempfile.TemporaryDirectory() as folder:
        probe = os.path.join(folder, "mode0")
        with open(probe, "w") as handle:
            handle.write("x")
        os.chmod(probe, 0)
        try:
            with open(probe) as handle:
                handle.read()
        except PermissionError:
            return False
        finally:
            os.chmod(probe, 0o600)
    return True


def _refuse_stat(monkeypatch, target, error):
    """os.stat raising ``error`` (an errno) for ``target``, as the kernel does
    for a file in a folder without search permission (which root, who
    passes every permission check, never meets)."""
    real_stat = os.stat

    def fake_stat(path, *args, **kwargs):
        if os.fspath(path) == os.fspath(target):
            raise OSError(error, os.strerror(error), os.fspath(path))
        return real_stat(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", fake_stat)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes here")
def test_load_evals_names_paths_it_cannot_read(tmp_path, monkeypatch):
    """A named pipe, a loop of symbolic links and a file behind a folder without
    search permission were all said not to exist (os.path.isfile is False)."""
    os.mkfifo(tmp_path / "fifo.csv")
    with pytest.raises(OSError, match=r"path='.*fifo\.csv' is a named pipe \(FIFO\)"):
        load_evals(tmp_path / "fifo.csv")
    LONG.to_csv(tmp_path / "evals.csv", index=False)
    with pytest.raises(OSError, match=r"queries='.*fifo\.csv' is a named pipe"):
        load_evals(tmp_path / "evals.csv", queries=tmp_path / "fifo.csv")
    os.symlink("loop2.csv", tmp_path / "loop1.csv")
    os.symlink("loop1.csv", tmp_path / "loop2.csv")
    with pytest.raises(OSError, match=r"loop1\.csv' cannot be read: Too many") as info:
        load_evals(tmp_path / "loop1.csv")
    assert info.value.errno == errno.ELOOP
    assert not isinstance(info.value, FileNotFoundError)
    locked = tmp_path / "locked" / "evals.csv"
    _refuse_stat(monkeypatch, locked, errno.EACCES)
    with pytest.raises(
        PermissionError, match=r"path='.*evals\.csv' cannot be read: pe"
    ):
        load_evals(locked)


@pytest.mark.skipif(_reads_any_file(), reason="this process reads any file")
def test_load_evals_names_a_file_in_a_folder_without_search_permission(tmp_path):
    folder = tmp_path / "locked"
    folder.mkdir()
    LONG.to_csv(folder / "evals.csv", index=False)
    folder.chmod(0o600)
    try:
        with pytest.raises(PermissionError, match="permission denied"):
            load_evals(folder / "evals.csv")
    finally:
        folder.chmod(0o755)


def test_load_evals_names_the_parquet_extra_without_pyarrow(tmp_path, monkeypatch):
    """pandas' "Unable to find a usable engine" named no way to install one."""
    path = tmp_path / "evals.parquet"
    LONG.to_parquet(path)
    # None in sys.modules makes an import fail as if the package were absent.
    for module in ("pyarrow", "pyarrow.parquet", "fastparquet"):
        monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(
        ImportError, match=r"evals\.parquet' from Parquet needs"
    ) as info:
        load_evals(path)
    assert 'pip install "locus_sklearn[parquet]"' in str(info.value)
    # pandas' own error was the cause: its engine lookup was the path taken.
    assert "Unable to find a usable engine" in str(info.value.__cause__)


def test_load_evals_keeps_other_columns_as_read(tmp_path):
    """Other columns went through NumPy: a nullable Int64 column with a missing
    value became float64 (ids past 2**53 rounded), a categorical one text."""
    ids = pd.array([2**53 + 1, None, 12345678901234567], dtype="Int64")
    split = pd.Categorical(["train", "test", "train"])
    path = tmp_path / "evals.parquet"
    # A stored index of its own: the columns still go by position.
    LONG.assign(question_hash=ids, split=split).set_axis([5, 3, 1]).to_parquet(path)
    evals = load_evals(path)
    pd.testing.assert_series_equal(
        evals["question_hash"], pd.Series(ids, name="question_hash")
    )
    pd.testing.assert_series_equal(evals["split"], pd.Series(split, name="split"))
    assert evals.index.equals(pd.RangeIndex(3))


@pytest.mark.parametrize("suffix, sep", [(".csv", ","), (".tsv.gz", "\t")])
def test_load_evals_refuses_a_header_naming_a_column_twice(tmp_path, suffix, sep):
    """pandas renamed the second 'score' to 'score.1' and the first was used,
    silently; check_evals refuses the same table as a DataFrame."""
    text = f"model{sep}query{sep}score{sep}score\nm1{sep}q1{sep}0{sep}1\n"
    path = tmp_path / f"evals{suffix}"
    if suffix.endswith(".gz"):
        import gzip

        path.write_bytes(gzip.compress(("\ufeff" + text).encode()))
    else:
        _write(path, text)
    with pytest.raises(
        ValueError,
        match=rf"evals{suffix}' has column\(s\) \['score'\] more than once in "
        r"its header line; pandas would rename the repeats \('score\.1'",
    ):
        load_evals(path)
    # The same goes for a query table.
    queries = _write(tmp_path / "q.csv", "query_id,query,query\n1,x,y\n")
    ids = _write(tmp_path / "ids.csv", "model,query_id,score\nm1,1,0\n")
    with pytest.raises(ValueError, match=r"q\.csv' has column\(s\) \['query'\]"):
        load_evals(ids, queries=queries)
    # A column really named 'score.1' is no repeat, nor are unnamed columns.
    path = _write(tmp_path / "named.csv", "model,query,score,score.1,,\nm,q,0,1,,\n")
    assert load_evals(path).columns.tolist() == [
        "model", "query", "score", "score.1", "Unnamed: 4", "Unnamed: 5"
    ]  # fmt: skip


def test_load_evals_warns_where_query_ids_share_one_text(tmp_path):
    """Two ids with one text became one query, their scores averaged, without
    a word (from_lm_eval warns in the same case)."""
    path = tmp_path / "scores.csv"
    pd.DataFrame(
        {"model": ["a", "a", "b", "b", "a"], "question_id": [1, 2, 1, 2, 3],
         "score": [1, 0, 0, 1, 1]}
    ).to_csv(path, index=False)  # fmt: skip
    texts = pd.DataFrame(
        {"question_id": ["1", "2", "3", "4"],
         "prompt": ["Which is right?", "Which is right?", "2+2?", "2+2?"]}
    )  # fmt: skip
    kwargs = dict(queries=texts, query_id_column="question_id", query_column="prompt")
    # '4' is never evaluated: only '1' and '2' become one query.
    with pytest.warns(
        UserWarning,
        match=r"^1 text\(s\) in column 'prompt' of queries belong to several ids "
        r"of 'question_id' \(e\.g\. \['1', '2'\]\): each becomes one query, the "
        r"ids' scores averaged\..*query_column='question_id'",
    ):
        evals = load_evals(path, **kwargs)
    assert check_evals(evals).n_queries == 2  # as documented: one query
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        texts.loc[1, "prompt"] = "Which is wrong?"
        assert check_evals(load_evals(path, **kwargs)).n_queries == 3
        by_id = load_evals(path, query_column="question_id")
        assert check_evals(by_id).n_queries == 3


@pytest.mark.parametrize(
    "name, content, error, match",
    [
        # check_evals refuses booleans and text as scores; the loader used to
        # cast them to numbers before it looked.
        ("flags.parquet", [True, False], TypeError, r"True \(row 1\).*Booleans"),
        ("text.parquet", ["1", "0"], TypeError, r"'1' \(row 1\)"),
        (
            "flags.jsonl",
            '{"model": "a", "query": "q", "score": 1}\n\n'
            '{"model": "b", "query": "q", "score": true}\n',
            TypeError,
            r"1 of 2 values .* True \(line 3\).*Booleans",
        ),
        (
            "text.jsonl",
            '{"model": "a", "query": "q", "score": "0.5"}\n',
            TypeError,
            r"'0\.5' \(line 1\)",
        ),
        # pandas parses a csv column of True/false as booleans.
        (
            "flags.csv",
            "model,query,score\na,q,True\nb,q,false\n",
            ValueError,
            r"2 of 2 cells .* True \(row 1\), False \(row 2\).*Booleans",
        ),
        # One cell that is not a number leaves the whole column as text; only
        # that cell is reported.
        (
            "words.csv",
            "model,query,score\na,q,1\nb,q,yes\nc,q,\n",
            ValueError,
            r"1 of 3 cells are not numbers, e\.g\. 'yes' \(row 2\)",
        ),
        (
            "comma.csv",
            'model,query,score\na,q,"0,5"\n',
            ValueError,
            r"'0,5' \(row 1\).*'\.' decimal point",
        ),
    ],
)
def test_load_evals_refuses_scores_check_evals_refuses(
    tmp_path, name, content, error, match
):
    path = tmp_path / name
    if name.endswith(".parquet"):
        pd.DataFrame({"model": ["a", "b"], "query": "q", "score": content}).to_parquet(
            path
        )
    else:
        _write(path, content)
    with pytest.raises(
        error, match=rf"^path='.*{name}', column 'score', must hold .*{match}"
    ):
        load_evals(path)


def test_load_evals_reads_numeric_score_columns_of_every_kind(tmp_path):
    # Integer and float columns, an integer column with an empty cell (float
    # in pandas), nullable integers in parquet: numbers, read as they are.
    _write(tmp_path / "ints.csv", "model,query,score\na,q,1\nb,q,0\n")
    assert load_evals(tmp_path / "ints.csv")["score"].tolist() == [1.0, 0.0]
    _write(tmp_path / "floats.tsv", "model\tquery\tscore\na\tq\t0.25\nb\tq\t 1\n")
    assert load_evals(tmp_path / "floats.tsv")["score"].tolist() == [0.25, 1.0]
    pd.DataFrame(
        {"model": ["a", "b"], "query": "q", "score": pd.array([1, 0], "Int64")}
    ).to_parquet(tmp_path / "nullable.parquet")
    evals = load_evals(tmp_path / "nullable.parquet")
    assert evals["score"].tolist() == [1.0, 0.0]
    assert evals["score"].dtype == np.float64
    _write(
        tmp_path / "mixed.jsonl",
        '{"model": "a", "query": "q", "score": 1}\n'
        '{"model": "b", "query": "q", "score": 0.1}\n',
    )
    # Parsed exactly (pandas.read_json's default parser is not).
    assert load_evals(tmp_path / "mixed.jsonl")["score"].tolist() == [1.0, 0.1]


@pytest.mark.parametrize(
    "name, text, match",
    [
        (
            "bad.jsonl",
            '{"model": "a", "query": "q", "score": 1}\n{bad json\n',
            r"bad\.jsonl', line 2, is not valid JSON",
        ),
        ("list.jsonl", "\n[1, 2]\n", r"line 2, holds a JSON list \(\[1, 2\]\)"),
        ("blank.jsonl", "\n  \n", "holds no records"),
        ("empty.csv", "", r"empty\.csv' is empty: it has no header line"),
        (
            "ragged.csv",
            "model,query,score\na,q,1\nb,q,1,3,4\n",
            r"ragged\.csv' could not be read as csv: .*line 3",
        ),
        # pandas would make the first column the index and shift the others.
        ("wide.csv", "model,query,score\na,q,1,0\n", "more fields than its header"),
        # json.loads kept the last value of a repeated key, silently.
        (
            "twice.jsonl",
            '{"model": "a", "query": "q", "score": 1}\n'
            '{"model": "a", "query": "q", "score": 1, "score": 0}\n',
            r"twice\.jsonl', line 2, names the key 'score' twice in one object",
        ),
        # Python's json raised RecursionError, and a ValueError naming no file
        # or line for an int past its 4300-digit limit.
        (
            "deep.jsonl",
            '{"model": "a", "query": "q", "score": 1}\n'
            '{"model": "b", "query": "q", "score": 0, "x": '
            + "[" * 5000
            + "]" * 5000
            + "}\n",
            r"deep\.jsonl', line 2, could not be read as JSON: it is nested too "
            r"deeply .*; each line of a jsonl file must be one JSON object",
        ),
        (
            "bigint.jsonl",
            '{"model": "a", "query": "q", "score": 1}\n'
            '{"model": "b", "query": "q", "score": ' + "1" * 5000 + "}\n",
            r"bigint\.jsonl', line 2, could not be read as JSON: .*4300 digits.*; "
            "each line of a jsonl file",
        ),
    ],
)
def test_load_evals_unreadable_files_name_the_file_and_line(
    tmp_path, name, text, match
):
    with pytest.raises(ValueError, match=match):
        load_evals(_write(tmp_path / name, text))


def test_load_evals_reads_a_jsonl_file_with_a_byte_order_mark(tmp_path):
    # As for a csv: editors on Windows write one.
    for name in ("bom.jsonl", "bom.csv"):
        text = (
            '{"model": "a", "query": "q", "score": 1}\n'
            if name.endswith("jsonl")
            else "model,query,score\na,q,1\n"
        )
        path = _write(tmp_path / name, "\ufeff" + text)
        assert load_evals(path).to_dict("list") == {
            "model": ["a"],
            "query": ["q"],
            "score": [1.0],
        }


# ------------------------------------------------------------------ from_lm_eval


def test_from_lm_eval_fixture_exact_rows():
    evals = from_lm_eval(LM_EVAL, query_text=None)
    small, large = "EleutherAI/pythia-160m", "EleutherAI/pythia-410m"
    arc, algebra = "arc_easy", "mmlu_abstract_algebra"
    expected = pd.DataFrame(
        [
            (small, "arc_easy/0", 0.0, arc),
            (small, "arc_easy/1", 1.0, arc),
            (small, "arc_easy/2", 0.0, arc),
            (small, "mmlu_abstract_algebra/0", 0.0, algebra),
            (small, "mmlu_abstract_algebra/1", 1.0, algebra),
            (small, "mmlu_abstract_algebra/2", 0.0, algebra),
            (large, "arc_easy/0", 1.0, arc),
            (large, "arc_easy/1", 1.0, arc),
            (large, "arc_easy/2", 0.0, arc),
            (large, "mmlu_abstract_algebra/0", 1.0, algebra),
            (large, "mmlu_abstract_algebra/1", 0.0, algebra),
            (large, "mmlu_abstract_algebra/2", 0.0, algebra),
        ],
        columns=["model", "query", "score", "task"],
    )
    pd.testing.assert_frame_equal(evals, expected, check_dtype=False)
    assert evals["score"].dtype == np.float64


def test_from_lm_eval_gives_the_prompt_text_by_default():
    # Ids such as "arc_easy/0" would be embedded as text by a text encoder,
    # silently: the default is the prompt the harness sent to the model.
    evals = from_lm_eval(LM_EVAL)
    ids = from_lm_eval(LM_EVAL, query_text=None)
    assert evals[["model", "score", "task"]].equals(ids[["model", "score", "task"]])
    arc = evals.loc[evals["task"] == "arc_easy", "query"].tolist()
    assert arc[0] == (
        "Question: An astronomer observes that a planet rotates faster after a "
        "meteorite impact. Which is the most likely effect of this increase in "
        "rotation?\nAnswer:"
    )
    algebra = evals.loc[evals["task"] == "mmlu_abstract_algebra", "query"].iloc[0]
    assert algebra.startswith("The following are multiple choice questions")
    assert "Find all c in Z_3" in algebra
    # Both models saw the same prompts: one query per document.
    assert evals["query"].nunique() == ids["query"].nunique() == 6


def test_from_lm_eval_prompt_layouts_and_errors(tmp_path):
    # Older lm-eval writes a list of argument lists, newer a dict of dicts.
    old_layout = {"doc_id": 0, "doc": {}, "acc": 1.0, "arguments": [["Q: 1+1?", " 2"]]}
    new_layout = {
        "doc_id": 1,
        "doc": {},
        "acc": 0.0,
        "arguments": {"gen_args_0": {"arg_0": "Q: 2+2?", "arg_1": {"until": ["\n"]}}},
    }
    path = _write_samples(tmp_path / "a", "t", [old_layout, new_layout])
    assert from_lm_eval(path, model="m")["query"].tolist() == ["Q: 1+1?", "Q: 2+2?"]
    bare = _write_samples(
        tmp_path / "b", "t", [{"doc_id": 0, "doc": {"q": "x"}, "acc": 1}]
    )
    with pytest.raises(ValueError, match=r"t/0 .* no prompt text.*query_text=None"):
        from_lm_eval(bare, model="m")
    assert from_lm_eval(bare, model="m", query_text=None)["query"].tolist() == ["t/0"]


def test_from_lm_eval_prompts_that_differ_between_models_are_refused(tmp_path):
    # E.g. one model run with a chat template or few-shot examples: the same
    # document would become two unrelated queries.
    for model, prompt in [("m1", "Q: 1+1?"), ("m2", "<|user|>Q: 1+1?")]:
        _write_samples(
            tmp_path / model,
            "t",
            [{"doc_id": 0, "doc": {"q": "1+1?"}, "acc": 1.0, "arguments": [[prompt]]}],
        )
        results = tmp_path / model / "results_2024-01-02T03-04-05.000006.json"
        results.write_text(json.dumps({"model_name": model}))
    with pytest.raises(ValueError, match=r"1 document\(s\).*different prompts.*t/0"):
        from_lm_eval(tmp_path)
    assert from_lm_eval(tmp_path, query_text="q")["query"].tolist() == ["1+1?"] * 2


def test_from_lm_eval_warns_where_documents_share_one_text(tmp_path):
    """Two documents with one prompt (a zero-shot stem without its choices)
    became one query, their scores averaged, without a word."""
    records = [
        {"doc_id": i, "doc": {"q": "Which is a metal?", "choices": c}, "acc": a,
         "arguments": [["Which is a metal?"]]}
        for i, (c, a) in enumerate([(["iron", "wood"], 1.0), (["gold", "air"], 0.0)])
    ]  # fmt: skip
    path = _write_samples(tmp_path, "arc", records)
    with pytest.warns(
        UserWarning, match=r"1 text\(s\).*\['arc/0', 'arc/1'\].*averaged"
    ):
        evals = from_lm_eval(path, model="m")
    assert evals["query"].nunique() == 1  # as documented: one query
    # Telling them apart takes a text per document, or ids; no warning then.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        texts = from_lm_eval(
            path, model="m", query_text=lambda d: f"{d['q']} {d['choices']}"
        )
        assert texts["query"].nunique() == 2
        assert from_lm_eval(path, model="m", query_text=None)["query"].nunique() == 2


def test_from_lm_eval_metric_and_query_text():
    folder = os.path.join(LM_EVAL, "EleutherAI__pythia-160m")
    # acc_norm is logged for arc_easy only.
    with pytest.raises(ValueError, match="metric='acc_norm' is missing from 3 of 3"):
        from_lm_eval(folder, metric="acc_norm")
    evals = from_lm_eval(
        os.path.join(folder, ARC_FILE), metric="acc_norm", query_text="question"
    )
    assert evals["score"].tolist() == [1.0, 1.0, 0.0]
    assert evals["query"][0].startswith("An astronomer observes that a planet")
    assert evals["model"].unique().tolist() == ["EleutherAI/pythia-160m"]


def test_from_lm_eval_single_file_needs_model():
    folder = os.path.join(LM_EVAL, "EleutherAI__pythia-410m")
    file = os.path.join(folder, ARC_FILE)
    # The results file beside it names the model (from config.model_args here).
    assert from_lm_eval(file)["model"].unique().tolist() == ["EleutherAI/pythia-410m"]
    evals = from_lm_eval(file, model="pythia", query_text=lambda doc: doc["id"])
    assert evals["query"].tolist() == [
        "Mercury_7175875",
        "Mercury_SC_409171",
        "Mercury_SC_408547",
    ]
    assert evals["model"].unique().tolist() == ["pythia"]


def _write_samples(folder, task, records):
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"samples_{task}_2024-01-02T03-04-05.000006.jsonl")
    with open(path, "w") as handle:
        for record in records:
            handle.write(json.dumps(record) + "\n")
    return path


def test_from_lm_eval_filters(tmp_path):
    records = [
        {
            "doc_id": i,
            "doc": {},
            "filter": f,
            "metrics": ["exact_match"],
            "exact_match": float(i == 0 or f == "flexible-extract"),
        }
        for f in ["strict-match", "flexible-extract"]
        for i in range(2)
    ]
    path = _write_samples(tmp_path, "gsm8k", records)
    with pytest.raises(ValueError, match="choose one with filter_name="):
        from_lm_eval(path, model="m", metric="exact_match")
    with pytest.raises(ValueError, match="filter_name='none' is not in"):
        from_lm_eval(path, model="m", metric="exact_match", filter_name="none")
    evals = from_lm_eval(
        path,
        model="m",
        metric="exact_match",
        filter_name="strict-match",
        query_text=None,
    )
    assert evals["query"].tolist() == ["gsm8k/0", "gsm8k/1"]
    assert evals["score"].tolist() == [1.0, 0.0]


def test_from_lm_eval_errors(tmp_path):
    with pytest.raises(FileNotFoundError):
        from_lm_eval(tmp_path / "absent")
    with pytest.raises(ValueError, match="no samples"):
        from_lm_eval(tmp_path)
    with pytest.raises(ValueError, match="cannot tell which model"):
        from_lm_eval(_write_samples(tmp_path / "a", "t", [{"doc_id": 0, "acc": 1}]))
    _write_samples(tmp_path / "b", "t", [{"doc_id": 0, "acc": 1}])
    with pytest.raises(ValueError, match="2 folders"):
        from_lm_eval(tmp_path, model="m")
    with pytest.raises(ValueError, match=r"metric='bleu' is missing .* \['acc'"):
        from_lm_eval(LM_EVAL, metric="bleu")
    path = _write_samples(tmp_path / "c", "ppl", [{"doc_id": 0, "perplexity": 7.5}])
    with pytest.raises(ValueError, match="outside"):
        from_lm_eval(path, model="m", metric="perplexity")
    bad = tmp_path / "samples_t.jsonl"
    bad.write_text('{"doc_id": 0, "acc": 1}\n')
    with pytest.raises(ValueError, match="cannot read the task"):
        from_lm_eval(bad, model="m")
    with pytest.raises(ValueError, match="query_text='title' is not a key"):
        from_lm_eval(LM_EVAL, query_text="title")


def test_from_lm_eval_metric_too_large_for_a_float_is_named(tmp_path):
    """A JSON integer beyond float64's range raised a bare OverflowError
    naming neither the file nor the metric."""
    path = _write_samples(tmp_path, "arc", [dict(RECORD, acc=0)])
    with open(path, "a") as handle:
        handle.write('{"doc_id": 1, "doc": {"q": "y"}, "acc": 1' + "0" * 400 + "}\n")
    with pytest.raises(
        ValueError,
        match=r"metric='acc' has 1 value\(s\) outside \[0, 1\] in '.*samples_arc_"
        r".*' \(e\.g\. \[inf\]\)",
    ):
        from_lm_eval(path, model="m")


@pytest.mark.parametrize("query_text", [None, "prompt", "q"])
def test_from_lm_eval_records_without_doc_id_are_refused(tmp_path, query_text):
    # They all became the query "t/None", and their scores were averaged.
    records = [
        {"doc_id": 0, "doc": {"q": "x"}, "acc": 1.0, "arguments": [["Q: x"]]},
        {"doc": {"q": "y"}, "acc": 0.0, "arguments": [["Q: y"]]},
    ]
    path = _write_samples(tmp_path, "t", records)
    with pytest.raises(ValueError, match=r"samples_t_.*', line 2, has no 'doc_id'"):
        from_lm_eval(path, model="m", query_text=query_text)
    path = _write_samples(tmp_path, "t", [dict(records[0], doc_id=1.5)])
    with pytest.raises(ValueError, match=r"line 1, has doc_id=1\.5"):
        from_lm_eval(path, model="m", query_text=query_text)


RECORD = {"doc_id": 0, "doc": {"q": "x"}, "acc": 1.0, "arguments": [["Q: x"]]}


@pytest.mark.parametrize(
    "samples, results, match",
    [
        (
            [RECORD, dict(RECORD, doc_id=1), "{oops"],
            None,
            r"samples_t_.*', line 3, is not valid JSON",
        ),
        (
            [RECORD, "[1, 2]"],
            None,
            r"line 2, holds a JSON list \(\[1, 2\]\), not an object",
        ),
        ([RECORD, '"hello"'], None, r"line 2, holds a JSON str \('hello'\), not an"),
        # A repeated key lost one of its values silently, in a nested object too.
        (
            [RECORD, json.dumps(dict(RECORD, doc_id=1))[:-1] + ', "acc": 0.0}'],
            None,
            r"samples_t_.*', line 2, names the key 'acc' twice in one object",
        ),
        (
            ['{"doc_id": 0, "doc": {"q": "x", "q": "y"}, "acc": 1.0}'],
            None,
            r"line 1, names the key 'q' twice in one object",
        ),
        ([RECORD], "[1, 2]", r"results_.*\.json' holds a JSON list"),
        (
            [RECORD],
            '{"model_name": "x"',
            r"results_.*\.json' is not valid JSON: .*\(line 1, column 19\)",
        ),
        # RecursionError, and a ValueError naming no file, escaped from json.
        (
            [RECORD, '{"doc_id": 1, "acc": 1.0, "x": ' + "[" * 5000 + "]" * 5000 + "}"],
            None,
            r"samples_t_.*', line 2, could not be read as JSON: it is nested too "
            "deeply",
        ),
        (
            [RECORD],
            '{"model_name": "x", "x": ' + "[" * 5000 + "]" * 5000 + "}",
            r"results_.*\.json' could not be read as JSON: it is nested too deeply",
        ),
        (
            [RECORD],
            '{"model_name": "x", "n": ' + "1" * 5000 + "}",
            r"results_.*\.json' could not be read as JSON: .*4300 digits",
        ),
    ],
)
def test_from_lm_eval_malformed_files_name_the_file_and_line(
    tmp_path, samples, results, match
):
    folder = tmp_path / "run"
    folder.mkdir()
    file = folder / "samples_t_2024-01-02T03-04-05.000006.jsonl"
    lines = [json.dumps(s) if isinstance(s, dict) else s for s in samples]
    file.write_text("\n".join(lines) + "\n")
    if results is not None:
        (folder / "results_2024-01-02T03-04-05.000006.json").write_text(results)
    with pytest.raises(ValueError, match=match):
        if results is None:
            from_lm_eval(file, model="m")
        else:
            from_lm_eval(tmp_path)


D1, D2 = "2024-06-01T10-00-00.000001", "2024-06-02T10-00-00.000001"


def _mc(doc_id, question, acc, **extra):
    """A multiple-choice record as lm-eval 0.4 writes it."""
    return {
        "doc_id": doc_id,
        "doc": {"question": question, "choices": ["3", "4"], **extra},
        "arguments": {"gen_args_0": {"arg_0": f"Q: {question}", "arg_1": " 4"}},
        "filter": "none",
        "metrics": ["acc", "acc_norm"],
        "acc": acc,
        "acc_norm": acc,
    }


def _write_run(folder, date, model_args, tasks, model_name="", stem="results"):
    """One lm-eval run: its results file and a samples file per task."""
    os.makedirs(folder, exist_ok=True)
    results = {"config": {"model": "hf", "model_args": model_args}}
    results["model_name"] = model_name
    with open(os.path.join(folder, f"{stem}_{date}.json"), "w") as handle:
        json.dump(results, handle)
    for task, records in tasks.items():
        path = os.path.join(folder, f"samples_{task}_{date}.jsonl")
        with open(path, "w") as handle:
            handle.writelines(json.dumps(r) + "\n" for r in records)
    return folder


def _two_models(folder):
    """An lm-eval output folder of two models, one document each."""
    for name, acc in [("a", 1.0), ("b", 0.0)]:
        _write_run(
            folder / f"org__{name}",
            D1,
            f"pretrained=org/{name}",
            {"t": [_mc(0, "2+2?", acc)]},
            model_name=f"org/{name}",
        )


def test_from_lm_eval_refuses_a_model_folder_it_cannot_read(tmp_path, monkeypatch):
    """os.walk skipped a folder it could not list: the table lost a model
    without a word."""
    _two_models(tmp_path)
    evals = from_lm_eval(tmp_path, query_text=None)
    assert evals[["model", "score"]].values.tolist() == [
        ["org/a", 1.0],
        ["org/b", 0.0],
    ]
    real_scandir = os.scandir
    locked = str(tmp_path / "org__b")

    def fake_scandir(path="."):
        # A folder of mode 000, as the kernel refuses it to all but root.
        if os.fspath(path) == locked:
            raise PermissionError(errno.EACCES, "Permission denied", os.fspath(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", fake_scandir)
    with pytest.raises(
        PermissionError,
        match=rf"^path='{tmp_path}': the folder '{locked}' cannot be read "
        r"\(Permission denied\), and its samples files would be left out",
    ):
        from_lm_eval(tmp_path, query_text=None)


@pytest.mark.skipif(_reads_any_file(), reason="this process reads any file")
def test_from_lm_eval_refuses_a_folder_of_mode_000(tmp_path):
    _two_models(tmp_path)
    (tmp_path / "org__b").chmod(0)
    try:
        with pytest.raises(PermissionError, match=r"org__b' cannot be read"):
            from_lm_eval(tmp_path, query_text=None)
    finally:
        (tmp_path / "org__b").chmod(0o755)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes here")
def test_from_lm_eval_names_a_named_pipe(tmp_path):
    """It was said not to exist (Path.is_file() is False for a pipe)."""
    fifo = tmp_path / "samples_t_2024-01-02T03-04-05.000006.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match=r"path='.*\.jsonl' is a named pipe \(FIFO\)"):
        from_lm_eval(fifo, model="m")


def test_from_lm_eval_refuses_one_text_in_two_tasks(tmp_path):
    """One question in two tasks was announced as one query, scores averaged,
    then check_evals refused it with an error that did not say why."""
    tasks = {"arc_easy": [_mc(0, "2+2?", 1.0)], "arc_challenge": [_mc(0, "2+2?", 0.0)]}
    _write_run(tmp_path, D1, "pretrained=org/m", tasks, model_name="org/m")
    for query_text in ["prompt", "question"]:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # an error, not a warning and an error
            with pytest.raises(
                ValueError,
                match=r"1 text\(s\) .* documents of several tasks \(e\.g\. '(Q: )?"
                r"2\+2\?' in the tasks \['arc_challenge', 'arc_easy'\], documents "
                r"\['arc_challenge/0', 'arc_easy/0'\]\).*query_text=None.*unique per "
                r"task",
            ):
                from_lm_eval(tmp_path, query_text=query_text)
    ids = from_lm_eval(tmp_path, query_text=None)
    assert ids["query"].tolist() == ["arc_challenge/0", "arc_easy/0"]
    assert ids["score"].tolist() == [0.0, 1.0]


def test_from_lm_eval_runs_of_one_name_that_are_different_models(tmp_path):
    """Two checkpoints (revision=) of one model were merged under one name,
    their scores averaged, without a word."""
    folder = tmp_path / "org__m"
    _write_run(folder, D1, "pretrained=org/m,revision=step1", {"t": [_mc(0, "a", 0.0)]})
    _write_run(
        folder, D2, "pretrained=org/m, revision=step2", {"t": [_mc(0, "a", 1.0)]}
    )
    with pytest.raises(
        ValueError,
        match=rf"model name 'org/m' to runs whose model_args differ .*\(revision: "
        rf"'step1' in run\(s\) \['{D1}'\], 'step2' in run\(s\) \['{D2}'\]\).*"
        r"different models.*model=",
    ):
        from_lm_eval(folder)
    # An argument given in one run only differs too: the default may differ.
    other = tmp_path / "other"
    _write_run(other, D1, "pretrained=org/m", {"t": [_mc(0, "a", 0.0)]})
    _write_run(other, D2, "pretrained=org/m,dtype=float16", {"t": [_mc(0, "a", 1.0)]})
    with pytest.raises(ValueError, match=r"dtype: '\(not given\)' in .*'float16' in"):
        from_lm_eval(other)
    # Each run on its own, named by the user.
    file = folder / f"samples_t_{D1}.jsonl"
    assert from_lm_eval(file, model="org/m@step1")["score"].tolist() == [0.0]
    # How a model is run does not change it: one model, rows of both runs.
    same = tmp_path / "same"
    args = {"pretrained": "org/m", "load_in_8bit": True, "batch_size": 8}
    _write_run(same, D1, args, {"t": [_mc(0, "a", 0.0)]})
    args = "pretrained=org/m,load_in_8bit=true,batch_size=1,device=cuda:1"
    _write_run(same, D2, args, {"t": [_mc(0, "a", 1.0)]})
    evals = from_lm_eval(same, query_text=None)
    assert evals.to_dict("list") == {
        "model": ["org/m", "org/m"],
        "query": ["t/0", "t/0"],
        "score": [0.0, 1.0],
        "task": ["t", "t"],
    }


def test_from_lm_eval_model_is_refused_for_a_folder_of_several_models(tmp_path):
    """--output_path OUT/<stem>.json writes OUT/<stem>_<date>.json beside
    the samples files of every model; model= named them all one model."""
    stems = tmp_path / "stems"
    _write_run(stems, D1, "pretrained=org/a", {"t": [_mc(0, "a", 1.0)]}, "org/a", "a")
    _write_run(stems, D2, "pretrained=org/b", {"t": [_mc(0, "a", 0.0)]}, "org/b", "b")
    # Without model= each run is read from its <stem>_<date>.json.
    evals = from_lm_eval(stems, query_text=None)
    assert evals[["model", "score"]].to_dict("list") == {
        "model": ["org/a", "org/b"],
        "score": [1.0, 0.0],
    }
    with pytest.raises(
        ValueError,
        match=rf"model='mine' would name the samples of 2 runs in .* as one model, "
        rf"but their results files name different models \('org/a' for \['{D1}'\]; "
        rf"'org/b' for \['{D2}'\]\).*model=None",
    ):
        from_lm_eval(stems, model="mine")
    # The Python API with dict model_args: model_name "", one folder.
    api = tmp_path / "api"
    _write_run(api, D1, {"pretrained": "org/a"}, {"t": [_mc(0, "a", 1.0)]})
    _write_run(api, D2, {"pretrained": "org/b"}, {"t": [_mc(0, "a", 0.0)]})
    assert from_lm_eval(api)["model"].tolist() == ["org/a", "org/b"]
    with pytest.raises(ValueError, match="results files name different models"):
        from_lm_eval(api, model="mine")
    # Samples of two runs and no results file: nothing tells they are one model.
    bare = tmp_path / "bare"
    for date in [D1, D2]:
        _write_samples(bare, "t", [_mc(0, "a", 1.0)])
        os.replace(
            bare / "samples_t_2024-01-02T03-04-05.000006.jsonl",
            bare / f"samples_t_{date}.jsonl",
        )
    with pytest.raises(ValueError, match=r"2 runs .*no results file of the run\(s\)"):
        from_lm_eval(bare, model="mine")
    # One model's two runs (one task each) may be named together.
    one = tmp_path / "one"
    _write_run(one, D1, "pretrained=org/a", {"t": [_mc(0, "a", 1.0)]}, "org/a")
    _write_run(one, D2, "pretrained=org/a", {"u": [_mc(0, "b", 0.0)]}, "org/a")
    assert from_lm_eval(one, model="a")["model"].tolist() == ["a", "a"]


def test_from_lm_eval_filter_name_is_checked(tmp_path):
    """filter_name was not type-checked, and one that no file held was
    ignored on files with a single filter."""
    record = dict(_mc(0, "g", 1.0), filter="strict-match")
    path = _write_samples(tmp_path / "gsm8k", "gsm8k", [record])
    with pytest.raises(TypeError, match=r"filter_name must be a str or None; got \["):
        from_lm_eval(path, model="m", filter_name=["flexible-extract"])
    with pytest.raises(
        ValueError,
        match=r"filter_name='flexible-extract' is not a filter of any record read "
        r"from .*; their filters are \['strict-match'\]",
    ):
        from_lm_eval(path, model="m", filter_name="flexible-extract")
    # A file with one filter is still read whatever its filter's name, where
    # another file holds filter_name.
    two = [dict(record, filter=f, acc=float(f == "flexible-extract"))
           for f in ["strict-match", "flexible-extract"]]  # fmt: skip
    _write_samples(tmp_path / "gsm8k", "arc", [_mc(1, "x", 1.0)])
    _write_samples(tmp_path / "gsm8k", "gsm8k", two)
    evals = from_lm_eval(tmp_path / "gsm8k", model="m", filter_name="flexible-extract")
    assert evals[["query", "score"]].to_dict("list") == {
        "query": ["Q: x", "Q: g"],
        "score": [1.0, 1.0],
    }


def test_from_lm_eval_metric_must_be_one_the_records_list(tmp_path):
    """metric='doc_id' read the doc ids as scores; so would any numeric key
    the records hold beside their metrics."""
    records = [_mc(0, "a", 1.0), _mc(1, "b", 1.0)]
    for record in records:
        record["acc_stderr"] = 0.5
    path = _write_samples(tmp_path, "boolq", records)
    with pytest.raises(
        ValueError,
        match=r"metric='acc_stderr' is not a metric of 2 of 2 records of "
        r"'.*samples_boolq.*' \(task 'boolq'\): their 'metrics' list "
        r"\['acc', 'acc_norm'\]",
    ):
        from_lm_eval(path, model="m", metric="acc_stderr")
    with pytest.raises(ValueError, match=r"^metric='doc_id' is a key lm-eval"):
        from_lm_eval(path, model="m", metric="doc_id")
    assert from_lm_eval(path, model="m", metric="acc_norm")["score"].tolist() == [1, 1]


def test_from_lm_eval_reads_model_args_as_lm_eval_does(tmp_path):
    """'pretrained=x, peft=y' gave the key ' peft': every adapter was named
    after its base model; and commas inside a JSON value split it."""
    names = []
    for adapter in ["/ckpt/lora-math", "/ckpt/lora-code"]:
        folder = tmp_path / adapter.rsplit("/", 1)[1]
        _write_run(
            folder, D1, f"pretrained=meta-llama/Llama-2-7b-hf, peft={adapter}",
            {"t": [_mc(0, "a", 1.0)]},
        )  # fmt: skip
        names.append(from_lm_eval(folder)["model"].iloc[0])
    assert names == ["/ckpt/lora-math", "/ckpt/lora-code"]
    from locus_sklearn.datasets._lm_eval import _parse_model_args

    assert _parse_model_args(
        ' pretrained = org/m ,kw={"a": 1, "b": [2, 3]},stop="x,y",,flag'
    ) == {"pretrained": "org/m", "kw": '{"a": 1, "b": [2, 3]}', "stop": '"x,y"'}


def test_from_lm_eval_query_text_callable_errors_name_the_document(tmp_path):
    """A KeyError from the user's callable escaped without the file, task
    or document."""
    path = _write_samples(tmp_path, "hellaswag", [_mc(0, "a", 1.0)])
    with pytest.raises(
        ValueError,
        match=r"query_text=<function .*> raised KeyError: 'ctx' on the doc of "
        r"hellaswag/0 in '.*samples_hellaswag_.*'; its keys are \['choices', "
        r"'question'\]",
    ) as info:
        from_lm_eval(path, model="m", query_text=lambda doc: doc["ctx"])
    assert isinstance(info.value.__cause__, KeyError)


# --------------------------------------------------------------- make_model_pool


def test_make_model_pool_shapes_and_validity():
    data = make_model_pool(
        n_models=12,
        n_queries=300,
        n_tasks=4,
        n_families=3,
        evals_per_model=50,
        n_features=16,
        random_state=0,
    )
    assert data.evals.shape == (600, 4)
    assert data.evals.groupby("model").size().eq(50).all()
    assert not data.evals.duplicated(["model", "query"]).any()
    table = check_evals(data.evals)
    assert table.n_models == 12
    assert data.probabilities.shape == (300, 12)
    assert data.skills.shape == (12, 4)
    assert len(data.encodings) == 300
    assert set(data.evals["query"]) <= set(data.encodings)
    assert data.models["model"].tolist() == sorted(data.family)
    assert data.models["model"].is_monotonic_increasing
    assert data.queries["query"].is_monotonic_increasing
    assert data.tasks.tolist() == ["task0", "task1", "task2", "task3"]
    assert set(data.family.values()) == {"fam0", "fam1", "fam2"}
    assert all(name.startswith(data.family[name] + "-m") for name in data.family)
    sizes = np.array([data.n_params[m] for m in data.models["model"]])
    assert ((sizes >= 1) & (sizes <= 400)).all()
    vectors = np.stack(list(data.encodings.values()))
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)
    assert set(data.evals["score"]) <= {0.0, 1.0}


def test_make_model_pool_is_deterministic():
    a = make_model_pool(n_models=8, n_queries=100, evals_per_model=20, random_state=3)
    b = make_model_pool(n_models=8, n_queries=100, evals_per_model=20, random_state=3)
    c = make_model_pool(n_models=8, n_queries=100, evals_per_model=20, random_state=4)
    pd.testing.assert_frame_equal(a.evals, b.evals)
    pd.testing.assert_frame_equal(a.probabilities, b.probabilities)
    assert not a.evals.equals(c.evals)


def test_make_model_pool_dense_and_probabilities():
    data = make_model_pool(
        n_models=5,
        n_queries=40,
        n_families=2,
        evals_per_model="all",
        binary=False,
        random_state=0,
    )
    dense = check_evals(data.evals).to_dense(models=data.models["model"])
    np.testing.assert_allclose(dense, data.probabilities.to_numpy(), rtol=1e-6)


def test_make_model_pool_structure():
    data = make_model_pool(
        n_models=40, n_queries=2000, n_families=5, n_tasks=8, random_state=0
    )
    family = data.models["family"].to_numpy()
    distance = np.linalg.norm(data.skills[:, None] - data.skills[None], axis=-1)
    same = family[:, None] == family[None]
    off_diagonal = ~np.eye(len(family), dtype=bool)
    assert distance[same & off_diagonal].mean() < 0.5 * distance[~same].mean()

    # Encodings cluster by task: closer to their own task's mean than to others.
    X = np.stack([data.encodings[q] for q in data.queries["query"]])
    task = data.queries["task"].to_numpy()
    centres = np.stack([X[task == t].mean(0) for t in data.tasks])
    nearest = data.tasks[np.argmax(X @ centres.T, axis=1)]
    assert (nearest == task).mean() > 0.99

    # Routing has headroom: the oracle beats the best single model by a margin,
    # and the best model differs between tasks.
    P = data.probabilities.to_numpy()
    best_single = P.mean(axis=0).max()
    assert P.max(axis=1).mean() > best_single + 0.05
    # Knowing only the task (which the encoding reveals) already helps.
    per_task = np.array([P[task == t].mean(0) for t in data.tasks])
    weights = np.array([(task == t).mean() for t in data.tasks])
    assert weights @ per_task.max(axis=1) > best_single + 0.02
    assert len(set(per_task.argmax(axis=1))) > 1
    # Larger models are abler on average.
    sizes = np.log(data.models["n_params"].to_numpy())
    assert np.corrcoef(sizes, data.models["ability"])[0, 1] > 0.5


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"n_models": 3, "n_families": 4}, ValueError, "n_families=4 should be <="),
        ({"n_queries": 10, "evals_per_model": 11}, ValueError, "evals_per_model=11"),
        ({"n_queries": 3, "n_tasks": 4}, ValueError, "n_tasks=4 should be <="),
        ({"evals_per_model": "some"}, ValueError, "'all'"),
        ({"n_models": 0}, ValueError, "n_models=0 should be >= 1"),
        ({"n_features": 1}, ValueError, "n_features=1 should be >= 2"),
        ({"n_queries": 2.5}, TypeError, "n_queries must be an int"),
        ({"noise": -1}, ValueError, "noise must be"),
        ({"binary": 1}, TypeError, "binary must be a bool"),
        # Past int64 numpy failed on the index or the size, naming nothing.
        ({"n_models": 2**63}, ValueError, r"^n_models must be an int in \[1, "
         r"9223372036854775807\]; got 9223372036854775808, an int beyond int64"),
        ({"n_models": 10**30}, ValueError, r"^n_models must be an int in \[1, "
         r"9223372036854775807\]; got 1\.000e\+30 \(an int of about 31 digits\)"),
        ({"n_features": 10**30}, ValueError, r"^n_features must be an int in \[2, "),
        ({"n_queries": -(10**30)}, ValueError, r"^n_queries=-1\.000e\+30 .* >= 1"),
        # As the estimators refuse them; 'abc' and -1 failed inside numpy and
        # sklearn naming nothing, and True seeded with 1.
        *[
            ({"random_state": seed}, ValueError,
             r"^The 'random_state' parameter of make_model_pool must be an int in "
             rf"the range \[0, 4294967295\], .* Got {got} instead\.$")
            for seed, got in [("abc", "'abc'"), (-1, "-1"), (2**32, "4294967296"),
                              (True, "True, a bool,"), (2.5, "2.5")]
        ],
    ],
)  # fmt: skip
def test_make_model_pool_errors(kwargs, error, match):
    with pytest.raises(error, match=match):
        make_model_pool(**kwargs)


# ----------------------------------------------------------------- load_mmlu_pro


@pytest.fixture(scope="module")
def mmlu():
    return load_mmlu_pro()


def test_load_mmlu_pro(mmlu):
    assert mmlu.scores.shape == (3000, 32)
    assert len(mmlu.models) == 32 and len(mmlu.family) == 32
    assert mmlu.evals.columns.tolist() == ["model", "query", "score", "task"]
    table = check_evals(mmlu.evals)
    assert table.n_models == 32 and table.n_queries == 3000
    assert table.n_input_rows == table.n_rows == np.isfinite(mmlu.scores).sum().sum()
    assert set(mmlu.evals["score"]) == {0.0, 1.0}
    assert len(mmlu.tasks) == 14
    assert mmlu.queries["query"].is_unique
    vectors = np.stack([mmlu.encodings[q] for q in mmlu.queries["query"]])
    assert vectors.shape == (3000, 384) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-3)
    assert mmlu.models["open_weights"].sum() == 27
    assert np.isnan(mmlu.n_params["gpt-4o"]) and mmlu.n_params["Yi-34B"] == 34.4
    assert mmlu.family["Mixtral-8x7B-v0.1"] == "Mistral"
    # Plain Python strings, as a user's own table would hold: a router fitted
    # on them reports and routes to 'gpt-4o', not np.str_('gpt-4o').
    for column in ("model", "query", "task"):
        assert {type(v) for v in mmlu.evals[column]} == {str}
    # Tasks too (they were np.str_, shown as np.str_('biology')).
    assert {type(v) for v in mmlu.tasks} == {str}
    assert list(mmlu.tasks) == sorted(mmlu.queries["task"].unique())
    # Rows go by model, then by question_id (the order of queries), as documented.
    assert mmlu.queries["question_id"].is_monotonic_increasing
    position = pd.Series(range(3000), index=mmlu.queries["query"])
    order = pd.DataFrame(
        {"model": mmlu.evals["model"], "row": position[mmlu.evals["query"]].to_numpy()}
    )
    assert order.equals(order.sort_values(["model", "row"]).reset_index(drop=True))
    # Categories are stratified: each is within one question of its share.
    share = mmlu.queries["task"].value_counts(normalize=True)
    assert share.max() < 0.12 and share.min() > 0.03


def test_load_mmlu_pro_open_weights_only(mmlu):
    data = load_mmlu_pro(open_weights_only=True)
    closed = {
        "gemini-1.5-flash-002",
        "gemini-1.5-pro-002",
        "gemini-3.1-pro-preview",
        "gpt-4o",
        "deepseek-chat",
    }
    assert sorted(data.family) == sorted(set(mmlu.family) - closed)
    assert data.scores.shape == (3000, 27)
    assert data.models["open_weights"].all()
    # The same rows as the full table restricted to the open models (which
    # passes check_evals in test_load_mmlu_pro).
    expected = mmlu.evals[mmlu.evals["model"].isin(data.family)]
    pd.testing.assert_frame_equal(data.evals, expected.reset_index(drop=True))
    pd.testing.assert_frame_equal(data.scores, mmlu.scores[data.scores.columns])
    with pytest.raises(TypeError, match="open_weights_only must be a bool"):
        load_mmlu_pro(open_weights_only="yes")


def test_mmlu_pro_descr_names_the_models_with_missing_cells(mmlu):
    # It said "DeepSeek-Coder-V2, the Gemini models and deepseek-chat"; two of
    # the three Gemini models have every cell.
    descr = " ".join(mmlu.DESCR.split())
    start = descr.index("Missing cells")
    sentence = descr[start : descr.index("not zeros", start)]
    missing = mmlu.scores.isna().sum()
    assert f"{int(missing.sum())} of the {mmlu.scores.size:,} cells" in sentence
    for model, count in missing.items():
        assert (f"{model} {count}" in sentence) == (count > 0), model
    assert "every other model none" in sentence


def test_mmlu_pro_package_data_is_small_and_attributed():
    files = os.listdir(DATA_DIR)
    assert "MMLU_PRO_LICENSE_NOTICE.txt" in files
    total = sum(os.path.getsize(os.path.join(DATA_DIR, f)) for f in files)
    assert total < 5_000_000
    with open(os.path.join(DATA_DIR, "MMLU_PRO_LICENSE_NOTICE.txt")) as handle:
        notice = handle.read()
    assert "Apache" in notice and "f418b116db00b065c2aea046518d8fcf74d39872" in notice


def test_mmlu_pro_matches_shared_data(mmlu, shared_data):
    folder = os.path.join(shared_data, "mmlu_pro_32models")
    source = np.load(os.path.join(folder, "correctness.npz"), allow_pickle=False)
    queries = pd.read_csv(os.path.join(folder, "queries.csv.gz"), keep_default_na=False)
    row = pd.Series(np.arange(len(queries)), index=queries["question_id"])
    rows = row.loc[mmlu.queries["question_id"]].to_numpy()
    column = {m: j for j, m in enumerate(source["models"].astype(str))}
    columns = [column[m] for m in mmlu.scores.columns]
    np.testing.assert_array_equal(
        mmlu.scores.to_numpy(), source["Y"][rows][:, columns].astype(np.float64)
    )
    assert (queries["prompt"].to_numpy()[rows] == mmlu.queries["query"]).all()
    assert (
        queries["category"].to_numpy()[rows] == mmlu.queries["task"].to_numpy()
    ).all()


def test_make_model_pool_planted_specialists_hand_checked_skills():
    pool = make_model_pool(
        n_models=6, n_queries=60, n_tasks=4, n_families=2, n_specialties=2,
        specialist_boost=2.0, evals_per_model="all", random_state=0,
    )  # fmt: skip
    # Tasks {0, 1} are specialty 0 and {2, 3} specialty 1; model i has i % 2.
    assert pool.models["specialty"].tolist() == [0, 1, 0, 1, 0, 1]
    expected = np.array([[2.0, 2.0, -2.0, -2.0], [-2.0, -2.0, 2.0, 2.0]] * 3)
    np.testing.assert_allclose(pool.skills, expected)
    np.testing.assert_allclose(pool.models["ability"], 0.0)
    task_spec = dict(zip(pool.queries["task"], pool.queries["specialty"], strict=True))
    assert task_spec == {"task0": 0, "task1": 0, "task2": 1, "task3": 1}
    assert pool.specialty == dict(zip(pool.models["model"], [0, 1] * 3, strict=True))


def test_make_model_pool_specialists_have_equal_overall_accuracy():
    pool = make_model_pool(
        n_models=8, n_queries=4000, n_tasks=4, n_specialties=4, noise=0.0,
        evals_per_model="all", binary=False, random_state=1,
    )  # fmt: skip
    p = pool.probabilities
    overall = p.mean(axis=0).to_numpy()
    # Same ability, skills averaging 0 over balanced tasks: nearly equal means.
    assert np.ptp(overall) < 0.02
    # ...but each model is clearly best on its own specialty's queries.
    spec = pool.queries.set_index("query")["specialty"]
    by_spec = p.groupby(spec.reindex(p.index).to_numpy()).mean()
    for model, s in pool.specialty.items():
        assert by_spec[model].idxmax() == s
        assert by_spec[model].max() - by_spec[model].drop(s).max() > 0.3


def test_make_model_pool_default_output_unchanged_by_new_options():
    a = make_model_pool(n_models=5, n_queries=40, evals_per_model=10, random_state=4)
    b = make_model_pool(
        n_models=5, n_queries=40, evals_per_model=10, random_state=4,
        specialist_boost=9.0,  # ignored without n_specialties
    )  # fmt: skip
    pd.testing.assert_frame_equal(a.evals, b.evals)
    pd.testing.assert_frame_equal(a.probabilities, b.probabilities)
    assert "specialty" not in a and "specialty" not in a.models


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(n_specialties=1), ValueError, "n_specialties=1 should be >= 2"),
        (dict(n_specialties=9), ValueError, "n_specialties=9 should be <= n_tasks=8"),
        # Specialties of 3, 3 and 2 tasks: the specialists were not equally good.
        (dict(n_specialties=3), ValueError, "n_specialties=3 should divide n_tasks=8"),
        (
            dict(n_tasks=3, n_specialties=2),
            ValueError,
            "n_specialties=2 should divide n_tasks=3",
        ),
        (dict(n_specialties=2.0), TypeError, "n_specialties must be an int"),
        (dict(n_specialties=2, specialist_boost=-1), ValueError, "specialist_boost"),
        (dict(n_specialties=2, specialist_boost=np.nan), ValueError, "finite"),
    ],
)
def test_make_model_pool_specialist_errors(kwargs, error, match):
    with pytest.raises(error, match=match):
        make_model_pool(
            n_models=4, n_queries=40, n_families=2, evals_per_model=10, **kwargs
        )


SMALL_POOL = dict(
    n_models=4, n_queries=20, n_tasks=2, n_families=2, evals_per_model=5,
    n_features=4, random_state=0,
)  # fmt: skip


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        # Wrong kinds were ValueErrors; a bool is not a number.
        ({"noise": "0.5"}, TypeError, r"noise must be a real number .*str '0\.5'"),
        ({"noise": True}, TypeError, "noise must be a real number .*bool True"),
        ({"noise": None}, TypeError, "noise must be a real number"),
        (
            {"n_specialties": 2, "specialist_boost": "1"},
            TypeError,
            "specialist_boost must be a real number",
        ),
        # noise times a float32 draw overflowed float32 (a RuntimeWarning).
        ({"noise": 1e39}, ValueError, r"noise must be a finite number in \[0, 1e6\]"),
        (
            {"n_specialties": 2, "specialist_boost": 1e300},
            ValueError,
            r"specialist_boost must be a finite number in \[0, 1e6\]",
        ),
        # Without n_specialties any specialist_boost was accepted silently.
        ({"specialist_boost": "1.5"}, TypeError, "specialist_boost must be a real"),
        ({"specialist_boost": None}, TypeError, "specialist_boost must be a real"),
        ({"specialist_boost": np.nan}, ValueError, "specialist_boost must be a fin"),
        ({"specialist_boost": -3.0}, ValueError, "specialist_boost must be a fin"),
        # Ints past int64 gave NumPy's isfinite TypeError, naming no parameter.
        (
            {"noise": 2**70},
            ValueError,
            r"noise must be a finite number in \[0, 1e6\]; "
            r"got 1180591620717411303424\.",
        ),
        (
            {"specialist_boost": 10**400},
            ValueError,
            r"specialist_boost must be a finite number in \[0, 1e6\]; got int "
            r"beyond the float range \(over 1\.8e308\)\.",
        ),
        (
            {"noise": Fraction(10**400, 3)},
            ValueError,
            r"noise must be .*; got Fraction beyond the float range",
        ),
        ({"noise": Fraction(-1, 2)}, ValueError, r"noise .*got Fraction\(-1, 2\)\."),
    ],
)
def test_make_model_pool_noise_and_boost_errors(kwargs, error, match):
    with pytest.raises(error, match=match):
        make_model_pool(**SMALL_POOL, **kwargs)


@pytest.mark.filterwarnings("error")
def test_make_model_pool_largest_noise_and_boost_do_not_overflow():
    pool = make_model_pool(
        **SMALL_POOL, noise=1e6, n_specialties=2, specialist_boost=1e6, binary=False
    )
    p = pool.probabilities.to_numpy()
    assert np.isfinite(p).all() and ((p >= 0) & (p <= 1)).all()
    check_evals(pool.evals)


@pytest.mark.filterwarnings("error")
@pytest.mark.parametrize(
    "name, value, same",
    [
        # np.isfinite refused a Fraction (a numbers.Real) with its own TypeError.
        ("noise", Fraction(1, 2), 0.5),
        ("specialist_boost", Fraction(3, 2), 1.5),
        # 1e6 compared with a float16 overflowed in the cast (a RuntimeWarning).
        ("noise", np.float16(0.5), 0.5),
        ("specialist_boost", np.float16(1.5), 1.5),
        # noise as a float64 scalar made the noise term float64, a Python
        # float kept it float32: pools 1e-8 apart for the same noise.
        ("noise", np.float64(0.3), 0.3),
    ],
)
def test_make_model_pool_takes_any_real_noise_and_boost_as_its_float(name, value, same):
    params = dict(SMALL_POOL, n_specialties=2, binary=False)
    pool = make_model_pool(**params, **{name: value})
    expected = make_model_pool(**params, **{name: same})
    np.testing.assert_array_equal(pool.probabilities, expected.probabilities)
    pd.testing.assert_frame_equal(pool.evals, expected.evals)


def test_load_evals_names_a_damaged_gzip_file(tmp_path):
    """A .csv.gz that is not gzip, or cut short, raised gzip's own error
    without the file's name."""
    import gzip

    plain = tmp_path / "plain.csv.gz"
    plain.write_text("model,query,score\nm1,q1,1\n")
    cut = tmp_path / "cut.csv.gz"
    cut.write_bytes(gzip.compress(b"model,query,score\n" + b"m1,q1,1\n" * 200)[:40])
    # Corrupt deflate data raises zlib.error, which escaped as it was.
    corrupt = bytearray(gzip.compress(b"model,query,score\n" + b"m1,q1,1\n" * 200))
    corrupt[30:40] = b"\xff" * 10
    (tmp_path / "corrupt.csv.gz").write_bytes(bytes(corrupt))
    (tmp_path / "corrupt.jsonl.gz").write_bytes(bytes(corrupt))
    for path in (
        plain,
        cut,
        tmp_path / "corrupt.csv.gz",
        tmp_path / "corrupt.jsonl.gz",
    ):
        with pytest.raises(ValueError, match=f"{path.name}.*could not be read as gzip"):
            load_evals(path)


@pytest.mark.parametrize("cell", ["1_0", "\u0661"])
def test_load_evals_names_cells_python_but_not_pandas_reads_as_numbers(tmp_path, cell):
    """float() takes "1_0" and Arabic-Indic digits, pandas does not: the
    file was refused with "0 of 2 cells are not numbers" naming no cell."""
    path = tmp_path / "evals.csv"
    path.write_text(f"model,query,score\nm1,q1,{cell}\nm2,q1,0\n", encoding="utf-8")
    with pytest.raises(
        ValueError, match=rf"1 of 2 cells are not numbers, e\.g\. '{cell}'"
    ):
        load_evals(path)


def test_from_wide_refuses_ragged_rows():
    # np.asarray raised numpy's own "inhomogeneous shape" error.
    with pytest.raises(ValueError, match="2-D.*rows have different lengths"):
        from_wide([[0.5], [0.5, 1.0]])


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"tasks": [1, 2]}, TypeError, r"tasks must be strings.*\[1, 2\]"),
        ({"tasks": ["t", None]}, TypeError, r"tasks must be strings.*1 missing"),
        ({"tasks": {"q1": "t", "q2": ""}}, ValueError, r"tasks has 1 empty.*'q2'"),
        ({"queries": ["q1", ""]}, ValueError, r"queries must be non-empty.*\[1\]"),
        ({"models": [""]}, ValueError, r"models must be non-empty.*\[0\]"),
    ],
)
def test_from_wide_names_the_parameter_of_a_bad_name(kwargs, error, match):
    # These were reported as "evals built from scores['task'] ...".
    kwargs = {"models": ["m"], "queries": ["q1", "q2"]} | kwargs
    with pytest.raises(error, match=match):
        from_wide([[0.5], [1.0]], **kwargs)


def test_from_wide_reads_object_and_categorical_columns_of_numbers():
    wide = pd.DataFrame(
        {
            "m1": pd.array([0.5, 1], dtype=object),
            "m2": pd.array([None, 0.25], dtype=object),
            "m3": pd.Categorical([0.75, None]),
        },
        index=["q1", "q2"],
    )
    evals = from_wide(wide)
    assert evals["score"].tolist() == [0.5, 1.0, 0.25, 0.75]
    assert evals["query"].tolist() == ["q1", "q2", "q2", "q1"]
    for column in (pd.array([0.5, True], dtype=object), pd.Categorical(["a", "b"])):
        with pytest.raises(TypeError, match="'m' "):
            from_wide(pd.DataFrame({"m": column}, index=["q1", "q2"]))


def test_from_wide_refuses_arrow_decimals():
    from decimal import Decimal

    pa = pytest.importorskip("pyarrow")
    wide = pd.DataFrame(
        {"m": pd.array([Decimal("0.5")], dtype=pd.ArrowDtype(pa.decimal128(3, 2)))}
    )
    with pytest.raises(TypeError, match="decimals"):
        from_wide(wide)


def test_load_evals_names_decimal_scores(tmp_path):
    from decimal import Decimal

    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    path = tmp_path / "d.parquet"
    score = pa.array([Decimal("0.5")], pa.decimal128(3, 2))
    pq.write_table(pa.table({"model": ["a"], "query": ["q"], "score": score}), path)
    with pytest.raises(TypeError, match="Decimals are refused.*floats"):
        load_evals(path)


def test_load_evals_reads_other_csv_columns_as_pandas_does(tmp_path):
    # keep_default_na=False applied to every column: a numeric column with
    # an empty cell was read as text.
    path = tmp_path / "e.csv"
    path.write_text("model,query,score,latency,note\na,NA,1,0.5,x\na,q2,0,,NA\n")
    evals = load_evals(path)
    assert evals["latency"].dtype == np.float64
    assert np.isnan(evals["latency"][1])
    assert evals["note"].isna().tolist() == [False, True]
    assert evals["query"].tolist() == ["NA", "q2"]  # ids stay as written


@pytest.mark.parametrize(
    "columns",
    [
        ["query_id", "query", "query"],
        pd.MultiIndex.from_tuples([("query_id", ""), ("query", "a"), ("query", "b")]),
    ],
)
def test_load_evals_refuses_a_queries_column_given_twice(tmp_path, columns):
    path = tmp_path / "s.csv"
    pd.DataFrame({"model": ["a", "a"], "query_id": ["1", "2"], "score": [1, 0]}).to_csv(
        path, index=False
    )
    queries = pd.DataFrame([["1", "t1", "x"], ["2", "t2", "y"]], columns=columns)
    with pytest.raises(ValueError, match=r"queries\['query'\] is not one column"):
        load_evals(path, queries=queries)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"model_column": "id", "query_column": "id"}, "model_column='id' and query"),
        ({"model_column": "score", "query_column": "id"}, "score_column='score'"),
        ({"query_column": "id", "task_column": "id"}, "task_column='id'"),
        ({"queries": "q.csv", "query_column": "query_id"}, "query_column="),
    ],
)
def test_load_evals_refuses_one_column_for_two_roles(tmp_path, kwargs, match):
    path = tmp_path / "same.csv"
    pd.DataFrame({"model": ["a"], "id": ["b"], "score": [0.5]}).to_csv(
        path, index=False
    )
    with pytest.raises(ValueError, match=match):
        load_evals(path, **kwargs)


def test_load_evals_queries_of_the_wrong_type_says_what_is_accepted(tmp_path):
    path = tmp_path / "s.csv"
    pd.DataFrame({"model": ["a"], "query_id": ["1"], "score": [1]}).to_csv(
        path, index=False
    )
    with pytest.raises(TypeError, match=r"path.*or a pandas DataFrame; got a dict"):
        load_evals(path, queries={"query_id": ["1"], "query": ["t1"]})


# ------------------------------------------- query ids, '~' paths, None in rows


def _scores_file(tmp_path, ids, name="scores.csv"):
    path = tmp_path / name
    frame = pd.DataFrame({"model": ["a"] * len(ids), "qid": ids, "score": 1.0})
    if name.endswith(".parquet"):
        frame.to_parquet(path)
    else:
        frame.to_csv(path, index=False)
    return path


@pytest.mark.parametrize(
    "queries_ids",
    [
        # An int id column with one missing id, as pandas stores it.
        [2.0, np.nan, 1.0],
        pd.Series([2, None, 1], dtype=object),  # Python ints, built by hand
    ],
)
def test_load_evals_matches_integer_ids_stored_as_float_or_object(
    tmp_path, queries_ids
):
    # No id ever matched: 1.0 against the csv's "1", reported as "not in
    # queries" although the ids were there.
    path = _scores_file(tmp_path, ["1", "2", "1"])
    queries = pd.DataFrame({"qid": queries_ids, "query": ["two", "orphan", "one"]})
    evals = load_evals(path, queries=queries, query_id_column="qid")
    assert evals["query"].tolist() == ["one", "two", "one"]
    assert evals["qid"].tolist() == ["1", "2", "1"]


def test_load_evals_matches_float_ids_of_a_jsonl_and_parquet(tmp_path):
    # The jsonl query table of the report: one record without its id makes
    # the column float; and float ids in the evaluation file itself.
    queries = _write(
        tmp_path / "q.jsonl",
        '{"qid": 1, "query": "one"}\n{"qid": 2, "query": "two"}\n'
        '{"qid": null, "query": "orphan"}\n{"qid": null, "query": "orphan 2"}\n',
    )
    path = _scores_file(tmp_path, [2.0, 1.0], "scores.parquet")
    evals = load_evals(path, queries=queries, query_id_column="qid")
    assert evals["query"].tolist() == ["two", "one"]
    assert evals["qid"].tolist() == ["2", "1"]


@pytest.mark.parametrize(
    "queries_ids, reason",
    [
        ([1.0, 1.5], r"1\.5 is not a whole number"),
        ([1.0, 2.0**53], r"9007199254740992\.0 is past 2\*\*53"),
    ],
)
def test_load_evals_never_matches_other_float_ids_to_text(
    tmp_path, queries_ids, reason
):
    path = _scores_file(tmp_path, ["1", "2"])
    queries = pd.DataFrame({"qid": queries_ids, "query": ["one", "x"]})
    with pytest.raises(
        TypeError,
        # pandas 2 reads a csv text column as object, pandas 3 as str.
        match=rf"path\['qid'\] has dtype (str|object) .*queries\['qid'\] has "
        rf"dtype float64 .*{reason}",
    ):
        load_evals(path, queries=queries, query_id_column="qid")
    # Numbers are still matched with numbers: 2.0 finds 2.0 beside 2.5.
    path = _scores_file(tmp_path, [2.0, 1.0], "scores.parquet")
    queries = pd.DataFrame({"qid": [1.0, 2.0, 2.5], "query": ["one", "two", "x"]})
    evals = load_evals(path, queries=queries, query_id_column="qid")
    assert evals["query"].tolist() == ["two", "one"]
    assert evals["qid"].tolist() == [2.0, 1.0]


def _jsonl_ids(tmp_path, ids):
    lines = [json.dumps({"model": "a", "qid": q, "score": 1.0}) for q in ids]
    return _write(tmp_path / "scores.jsonl", "\n".join(lines) + "\n")


@pytest.mark.parametrize(
    "queries_ids",
    [["1", "2"], [1, 2], pd.Series([1, "2"], dtype=object)],
    ids=["text", "int", "mixed"],
)
def test_load_evals_matches_ids_mixing_ints_and_text(tmp_path, queries_ids):
    # A jsonl with 1 on one line and "2" on another: the int was never
    # matched, and reported as "not in queries" although it was there.
    path = _jsonl_ids(tmp_path, [1, "2", 2.0])
    queries = pd.DataFrame({"qid": queries_ids, "query": ["one", "two"]})
    evals = load_evals(path, queries=queries, query_id_column="qid")
    assert evals["query"].tolist() == ["one", "two", "two"]
    assert evals["qid"].tolist() == ["1", "2", "2"]


@pytest.mark.parametrize("other", [1.5, True])
def test_load_evals_refuses_ids_mixing_text_with_other_numbers(tmp_path, other):
    # 1.5 (or True) can match no text id: it was counted "not in queries".
    path = _jsonl_ids(tmp_path, [1, "2", other])
    queries = pd.DataFrame({"qid": ["1", "2"], "query": ["one", "two"]})
    with pytest.raises(
        TypeError,
        match=rf"path\['qid'\] mixes integer ids and text ids with 1 value\(s\) "
        rf"that are neither \(e\.g\. \[{other}\]\)",
    ):
        load_evals(path, queries=queries, query_id_column="qid")


@pytest.mark.parametrize(
    "categories",
    [pd.Categorical([2, 1]), pd.Categorical([2, 1, None]), pd.Categorical(["2", "1"])],
    ids=["int", "int-with-missing", "text"],
)
def test_load_evals_matches_categorical_query_ids(tmp_path, categories):
    # Integer categories were refused: "dtype category (e.g. [1, 2]) ...
    # integer ids are matched as decimal strings".
    path = _scores_file(tmp_path, ["1", "2", "1"])
    texts = ["two", "one", "orphan"][: len(categories)]
    queries = pd.DataFrame({"qid": categories, "query": texts})
    evals = load_evals(path, queries=queries, query_id_column="qid")
    assert evals["query"].tolist() == ["one", "two", "one"]
    assert evals["qid"].tolist() == ["1", "2", "1"]


def test_load_evals_reports_a_null_score_as_missing(tmp_path):
    # A jsonl null beside a bool was listed among the values that are not
    # numbers; alone it is reported as missing, as an empty csv cell is.
    lines = [
        json.dumps({"model": "a", "query": q, "score": s})
        for q, s in [("q1", None), ("q2", True)]
    ]
    path = _write(tmp_path / "scores.jsonl", "\n".join(lines) + "\n")
    with pytest.raises(TypeError, match=r"1 of 2 values are not numbers, e\.g\. True"):
        load_evals(path)
    path = _write(tmp_path / "scores.jsonl", lines[0] + "\n")
    with pytest.raises(ValueError, match=r"1 missing value\(s\).*drop or fill"):
        load_evals(path)


def test_load_evals_a_missing_query_id_is_not_matched(tmp_path):
    # pandas matches NA to NA: the evaluation without an id was given the
    # text of the query without one, silently.
    path = _scores_file(tmp_path, pd.array([1, None], dtype="Int64"), "scores.parquet")
    queries = pd.DataFrame(
        {"qid": pd.array([1, None], dtype="Int64"), "query": ["one", "orphan"]}
    )
    with pytest.raises(ValueError, match=r"1 of 2 rows of path have no 'qid'"):
        load_evals(path, queries=queries, query_id_column="qid")


@pytest.mark.parametrize("column", ["model", "query", "task"])
def test_load_evals_a_missing_integer_id_stays_missing(tmp_path, column):
    # pandas < 3 wrote a nullable Int64 column's <NA> as the text "<NA>":
    # the row loaded, named after a model, query or task called "<NA>".
    frame = pd.DataFrame({"model": ["a", "b"], "query": ["q", "q"], "score": 1.0})
    frame[column] = pd.array([1, None], dtype="Int64")
    frame.to_parquet(tmp_path / "scores.parquet")
    with pytest.raises(
        TypeError, match=rf"\['{column}'\] must hold strings; 1 missing value"
    ):
        load_evals(tmp_path / "scores.parquet")


def test_load_evals_a_missing_integer_task_of_queries_stays_missing(tmp_path):
    path = _scores_file(tmp_path, ["1", "2"])
    queries = pd.DataFrame(
        {
            "qid": ["1", "2"],
            "query": ["one", "two"],
            "task": pd.array([7, None], dtype="Int64"),
        }
    )
    with pytest.raises(TypeError, match=r"\['task'\] must hold strings; 1 missing"):
        load_evals(path, queries=queries, query_id_column="qid", task_column="task")
    # Without the missing task, the integer tasks are their decimal strings.
    queries["task"] = pd.array([7, 8], dtype="Int64")
    evals = load_evals(path, queries=queries, query_id_column="qid", task_column="task")
    assert evals["task"].tolist() == ["7", "8"]


def test_load_evals_jsonl_score_too_large_for_a_float_is_a_value_error(tmp_path):
    # pandas < 3 failed to build the table with a bare OverflowError.
    path = tmp_path / "huge.jsonl"
    path.write_text(
        '{"model": "a", "query": "q", "score": 1' + "0" * 400 + "}\n"
        '{"model": "b", "query": "q", "score": 1}\n'
    )
    with pytest.raises(ValueError, match=r"huge\.jsonl'\['score'\] has 1 "):
        load_evals(path)


def test_load_evals_expands_the_home_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    _scores_file(tmp_path, ["1"])
    pd.DataFrame({"qid": ["1"], "query": ["one"]}).to_csv(
        tmp_path / "q.csv", index=False
    )
    evals = load_evals("~/scores.csv", queries="~/q.csv", query_id_column="qid")
    assert evals["query"].tolist() == ["one"]
    with pytest.raises(FileNotFoundError, match=r"path='~/absent\.csv' does not"):
        load_evals("~/absent.csv")


def test_from_lm_eval_expands_the_home_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    _write_samples(tmp_path / "out", "t", [_mc(0, "2+2?", 1.0)])
    evals = from_lm_eval("~/out", model="m", query_text="question")
    assert evals["query"].tolist() == ["2+2?"]
    with pytest.raises(FileNotFoundError, match=r"path='~/absent' does not"):
        from_lm_eval("~/absent")


def _question(doc):
    return doc["question"]


@pytest.mark.parametrize(
    "query_text, source",
    [("question", "the doc key 'question'"), (_question, "query_text=<function")],
)
def test_from_lm_eval_a_doc_text_that_differs_between_runs_says_so(
    tmp_path, query_text, source
):
    # The message said the prompts differed and to pass query_text= a doc
    # key, which the caller had done: the dataset changed between the runs.
    for model, question in [("m1", "2+2?"), ("m2", "2 + 2?")]:
        _write_run(
            tmp_path / model,
            "2024-01-02T03-04-05",
            f"pretrained={model}",
            {"t": [_mc(0, question, 1.0)]},
        )
    with pytest.raises(ValueError) as error:
        from_lm_eval(tmp_path, query_text=query_text)
    message = str(error.value)
    assert f"different text in different runs, read from {source}" in message
    assert "t/0" in message and "dataset changed" in message
    assert "query_text=None" in message and "normalises" in message
    assert "different prompts" not in message
    evals = from_lm_eval(tmp_path, query_text=lambda doc: doc["question"][0])
    assert evals["query"].tolist() == ["2", "2"]


def test_from_wide_reads_none_in_rows_as_missing():
    # The DataFrame route read None as missing; rows of numbers were refused
    # with "dtype object".
    rows = [[1.0, None], [0.0, pd.NA]]
    evals = from_wide(rows + [[None, 0.5]], models=["a", "b"])
    assert evals.to_dict("list") == {
        "model": ["a", "a", "b"],
        "query": ["query0", "query1", "query2"],
        "score": [1.0, 0.0, 0.5],
    }
    frame = pd.DataFrame(rows + [[None, 0.5]], columns=["a", "b"], dtype=object)
    assert evals.equals(from_wide(frame, queries=evals["query"].unique()))
    with pytest.raises(TypeError, match=r"got 'x' in an array of dtype object"):
        from_wide([[1.0, "x"], [None, 0.5]])


def test_from_lm_eval_follows_symlinked_model_folders(tmp_path):
    # Path.rglob does not enter a folder that is a symlink: the model linked
    # into the output folder was left out without a word.
    _write_run(tmp_path / "disk" / "org__m1", D1, "pretrained=org/m1",
               {"t": [_mc(0, "a", 1.0), _mc(1, "b", 0.0)]}, model_name="org/m1")  # fmt: skip
    out = tmp_path / "out"
    _write_run(out / "org__m2", D2, "pretrained=org/m2",
               {"t": [_mc(0, "a", 0.0), _mc(1, "b", 1.0)]}, model_name="org/m2")  # fmt: skip
    (out / "org__m1").symlink_to(tmp_path / "disk" / "org__m1")
    # A second link to one folder is read once, and a link back up the tree
    # is no loop.
    (out / "z_again").symlink_to(tmp_path / "disk" / "org__m1")
    (out / "org__m2" / "up").symlink_to(out)
    evals = from_lm_eval(out, query_text=None)
    assert evals.to_dict("list") == {
        "model": ["org/m1", "org/m1", "org/m2", "org/m2"],
        "query": ["t/0", "t/1", "t/0", "t/1"],
        "score": [1.0, 0.0, 0.0, 1.0],
        "task": ["t", "t", "t", "t"],
    }


def test_load_evals_reads_the_named_index_of_a_parquet_file(tmp_path):
    # pandas writes an index into the file as columns and reads them back as
    # the index: question_id was dropped, and model/query said to be missing.
    frame = LONG.assign(question_id=[11, 12, 11])
    frame.set_index("question_id").to_parquet(tmp_path / "one.parquet")
    evals = load_evals(tmp_path / "one.parquet")
    assert evals.columns.tolist() == ["model", "query", "score", "task", "question_id"]
    assert evals["question_id"].tolist() == [11, 12, 11]
    assert evals.index.equals(pd.RangeIndex(3))
    frame.set_index(["model", "query"]).to_parquet(tmp_path / "two.parquet")
    evals = load_evals(tmp_path / "two.parquet")
    pd.testing.assert_frame_equal(evals, frame, check_dtype=False)
    # An unnamed index (the default one, or __index_level_0__) is no data; a
    # level named like a column is left out, the column read as before.
    for name, stored in [
        ("range.parquet", frame),
        ("labels.parquet", frame.set_axis([5, 3, 1])),
        ("copy.parquet", frame.set_index("model", drop=False)),
    ]:
        stored.to_parquet(tmp_path / name)
        pd.testing.assert_frame_equal(
            load_evals(tmp_path / name), frame, check_dtype=False
        )
    # A queries= parquet file keyed by its index.
    pd.DataFrame({"model": ["a", "b"], "qid": [2, 1], "score": [1.0, 0.0]}).to_parquet(
        tmp_path / "ids.parquet"
    )
    queries = pd.DataFrame({"qid": [1, 2], "query": ["one", "two"]})
    queries.set_index("qid").to_parquet(tmp_path / "q.parquet")
    evals = load_evals(tmp_path / "ids.parquet", queries=tmp_path / "q.parquet",
                       query_id_column="qid")  # fmt: skip
    assert evals["query"].tolist() == ["two", "one"]


@pytest.mark.parametrize("task_in", ["queries", "path"])
def test_load_evals_names_ids_of_several_tasks_that_share_one_text(tmp_path, task_in):
    # The ids were merged into one query, which check_evals then refused as
    # "1 quer(y/ies) more than one task", never saying why.
    text = "Which is larger? " + "x" * 100
    scores = pd.DataFrame({"model": ["a", "a", "b"], "query_id": ["1", "2", "1"],
                           "score": [1.0, 0.0, 1.0]})  # fmt: skip
    queries = pd.DataFrame({"query_id": ["1", "2"], "query": [text, text]})
    if task_in == "queries":
        queries["task"] = ["math", "law"]
    else:
        scores["task"] = ["math", "law", "math"]
    scores.to_csv(tmp_path / "scores.csv", index=False)
    with pytest.raises(ValueError) as error:
        load_evals(tmp_path / "scores.csv", queries=queries)
    message = str(error.value)
    assert message.startswith(
        "1 text(s) in column 'query' of queries belong to ids of 'query_id' of "
        f"several tasks (e.g. {text[:77] + '...'!r} in the tasks ['law', 'math'], "
        "ids ['1', '2']); a query belongs to one task"
    )
    assert "query_column='query_id' for one query per id" in message
    assert "more than one task" not in message
    # An id given two tasks by itself is check_evals' to report.
    scores.assign(task=["math", "law", "law"], query_id="1").to_csv(
        tmp_path / "one.csv", index=False
    )
    with pytest.raises(ValueError, match=r"gives 1 quer\(y/ies\) more than one task"):
        load_evals(tmp_path / "one.csv", queries=queries[["query_id", "query"]])


def test_from_wide_gives_plain_str_labels():
    # NumPy string arrays (np.unique, .to_numpy(str)) kept np.str_ entries,
    # which reached a router's classes_ and showed as np.str_('a').
    scores = [[1.0, 0.0], [np.nan, 0.5]]
    evals = from_wide(scores, models=np.array(["a", "b"]),
                      queries=np.array(["q1", "q2"]), tasks=np.array(["t", "u"]))  # fmt: skip
    assert evals.to_dict("list") == {
        "model": ["a", "b", "b"],
        "query": ["q1", "q1", "q2"],
        "score": [1.0, 0.0, 0.5],
        "task": ["t", "t", "u"],
    }
    for column in ["model", "query", "task"]:
        assert evals[column].map(type).eq(str).all(), column
    assert [type(m) for m in check_evals(evals).models] == [str, str]
    frame = pd.DataFrame(
        scores, columns=np.array(["a", "b"]), index=np.array(["x", "y"])
    )
    frame.columns = pd.Index(np.array(["a", "b"]), dtype=object)
    evals = from_wide(frame, tasks={np.str_("x"): np.str_("t"), "y": "u"})
    for column in ["model", "query", "task"]:
        assert evals[column].map(type).eq(str).all(), column


def test_from_lm_eval_reports_a_nan_metric_as_missing(tmp_path):
    # It was "outside [0, 1]", with advice to choose a metric such as 'acc'
    # when the metric was 'acc'.
    path = _write_samples(
        tmp_path, "arc", [_mc(0, "a", 1.0), _mc(7, "b", float("nan"))]
    )
    with pytest.raises(ValueError) as error:
        from_lm_eval(path, model="m")
    message = str(error.value)
    assert message.startswith(
        f"metric='acc' has 1 missing value(s) (NaN) in {path!r}, for the "
        "document(s) ['arc/7']"
    )
    assert "outside" not in message and "choose" not in message


def test_from_lm_eval_refuses_a_doc_id_repeated_for_one_filter(tmp_path):
    """lm-eval versions that logged one record per document and filter
    without the filter's name (no 'filter', no 'metrics' key) gave each gsm8k
    document two rows, strict-match's and flexible-extract's, averaged."""
    old = [
        {"doc_id": i, "doc": {"question": f"{i}+{i}?"}, "target": str(2 * i),
         "doc_hash": "ab", "exact_match": score}
        for score in [0.0, 1.0]  # a block of documents per filter
        for i in range(2)
    ]  # fmt: skip
    path = _write_samples(tmp_path / "old", "gsm8k", old)
    read = {"model": "m", "metric": "exact_match", "query_text": None}
    for filter_name in [None, "strict-match"]:
        with pytest.raises(
            ValueError,
            match=r"samples_gsm8k_.*' holds doc_id=0 twice in records without a "
            r"'filter' key \(lines 1 and 3\);.*would average their scores\. "
            r"lm-eval versions that log one record per document and filter "
            r"without the filter's name .*Re-run the task with a newer lm-eval",
        ):
            from_lm_eval(path, filter_name=filter_name, **read)
    # Named filters: a doc_id repeated within one filter is refused too (two
    # runs' records joined), once per filter is not.
    joined = [_mc(0, "a", 1.0), _mc(1, "b", 1.0), _mc(0, "a", 0.0)]
    path = _write_samples(tmp_path / "joined", "arc", joined)
    with pytest.raises(
        ValueError,
        match=r"holds doc_id=0 twice for the filter 'none' \(lines 1 and 3\).*"
        r"joins the records of two runs",
    ):
        from_lm_eval(path, model="m")
    two = [dict(_mc(0, "a", float(f == "x")), filter=f) for f in ["x", "y"]]
    path = _write_samples(tmp_path / "two", "arc", two)
    evals = from_lm_eval(path, model="m", filter_name="y", query_text=None)
    assert evals[["query", "score"]].to_dict("list") == {
        "query": ["arc/0"],
        "score": [0.0],
    }


def test_from_lm_eval_a_run_without_results_file_in_a_shared_folder(tmp_path):
    """In the folder --output_path OUT/<stem>.json shares between models, a
    run whose results file is missing was named after another run's model."""
    shared = tmp_path / "shared"
    _write_run(
        shared, D1, "pretrained=org/a", {"t": [_mc(0, "a", 1.0)]}, "org/a", "res"
    )
    _write_run(
        shared, D2, "pretrained=org/b", {"t": [_mc(0, "a", 0.0)]}, "org/b", "res"
    )
    os.remove(shared / f"res_{D2}.json")
    with pytest.raises(
        ValueError,
        match=rf"cannot tell which model wrote '.*samples_t_{D2}\.jsonl': no "
        rf"results file in its folder has its date {D2}, and the folder 'shared' "
        r"is not the one lm-eval names after 'org/a', the model of the results "
        r"files there \('org__a'\).*Pass the file alone with model=",
    ):
        from_lm_eval(shared, query_text=None)
    lone = from_lm_eval(shared / f"samples_t_{D2}.jsonl", model="org/b")
    assert lone[["model", "score"]].to_dict("list") == {
        "model": ["org/b"],
        "score": [0.0],
    }
    # In OUT/<sanitized model name>/ (lm-eval's sanitize_model_name: "/" and
    # ":" become "__") the runs are one model's: the run is read as it.
    own = tmp_path / "org__m__v1"
    _write_run(own, D1, "pretrained=org/m:v1", {"t": [_mc(0, "a", 1.0)]}, "org/m:v1")
    _write_run(own, D2, "pretrained=org/m:v1", {"u": [_mc(0, "b", 0.0)]}, "org/m:v1")
    os.remove(own / f"results_{D2}.json")
    evals = from_lm_eval(own, query_text=None)
    assert evals.to_dict("list") == {
        "model": ["org/m:v1", "org/m:v1"],
        "query": ["t/0", "u/0"],
        "score": [1.0, 0.0],
        "task": ["t", "u"],
    }


def test_from_lm_eval_reads_gzipped_samples_files(tmp_path):
    """samples_*.jsonl.gz were left out of a folder ("no samples_*.jsonl
    file; run lm_eval with --log_samples") and refused on their own."""
    import gzip

    folder = tmp_path / "org__a"
    _write_run(folder, D1, "pretrained=org/a",
               {"t": [_mc(0, "a", 1.0), _mc(1, "b", 0.0)]}, "org/a")  # fmt: skip
    plain = folder / f"samples_t_{D1}.jsonl"
    packed = folder / f"samples_t_{D1}.jsonl.gz"
    with gzip.open(packed, "wb") as handle:
        handle.write(plain.read_bytes())
    # gzip -k keeps the plain file: both are one run, not two.
    with pytest.raises(
        ValueError,
        match=rf"holds both '.*samples_t_{D1}\.jsonl' and its gzipped copy "
        rf"'samples_t_{D1}\.jsonl\.gz'; reading both would count",
    ):
        from_lm_eval(tmp_path, query_text=None)
    os.remove(plain)
    expected = {
        "model": ["org/a", "org/a"],
        "query": ["t/0", "t/1"],
        "score": [1.0, 0.0],
        "task": ["t", "t"],
    }
    assert from_lm_eval(tmp_path, query_text=None).to_dict("list") == expected
    assert from_lm_eval(packed, query_text=None).to_dict("list") == expected


def test_from_lm_eval_skips_hidden_folders(tmp_path):
    """JupyterLab's copy .ipynb_checkpoints/samples_<task>_<date>-checkpoint
    .jsonl made the whole folder unreadable ("cannot read the task")."""
    folder = tmp_path / "org__a"
    _write_run(folder, D1, "pretrained=org/a", {"t": [_mc(0, "a", 1.0)]}, "org/a")
    (folder / ".ipynb_checkpoints").mkdir()
    (folder / ".ipynb_checkpoints" / f"samples_t_{D1}-checkpoint.jsonl").write_text(
        (folder / f"samples_t_{D1}.jsonl").read_text()
    )
    evals = from_lm_eval(tmp_path, query_text=None)
    assert evals.to_dict("list") == {
        "model": ["org/a"],
        "query": ["t/0"],
        "score": [1.0],
        "task": ["t"],
    }


def test_from_lm_eval_metric_messages_name_documents_and_real_metrics(tmp_path):
    """A value outside [0, 1] named neither document nor line, and advised
    'acc' when metric='acc'; without a 'metrics' list the metrics offered
    were every numeric key, doc_id included."""
    records = [_mc(0, "a", 1.0), _mc(1, "b", 0.0), _mc(2, "c", -1.0)]
    path = _write_samples(tmp_path / "a", "arc", records)
    with pytest.raises(ValueError) as error:
        from_lm_eval(path, model="m")
    message = str(error.value)
    assert message.startswith(
        f"metric='acc' has 1 value(s) outside [0, 1] in {path!r} (e.g. [-1.0]), "
        "for the document(s) ['arc/2'] (line(s) [3]);"
    )
    assert message.endswith("such as 'exact_match'.")
    assert "'acc' or" not in message
    old = [{"doc_id": 0, "doc": {}, "target": 2, "doc_hash": "ab",
            "prompt_hash": "cd", "exact_match": 1.0}]  # fmt: skip
    path = _write_samples(tmp_path / "b", "gsm8k", old)
    with pytest.raises(
        ValueError,
        match=r"metric='acc' is missing from 1 of 1 records .*; its metrics are "
        r"\['exact_match'\]\.$",
    ):
        from_lm_eval(path, model="m")
    # ...and doc_id itself, a number in every record, was read as scores.
    for key in ("doc_id", "doc_hash"):
        with pytest.raises(ValueError, match=rf"^metric='{key}' is a key lm-eval"):
            from_lm_eval(path, model="m", metric=key)


def test_load_evals_jsonl_parse_hint_names_the_keys_of_that_file(tmp_path):
    # A queries file got the hint of an evaluations file, whatever its keys.
    scores = _write(tmp_path / "scores.csv", "llm,qid,score\na,1,1\n")
    queries = _write(tmp_path / "q.jsonl", '{"qid": 1, "query": "x"}\n{oops\n')
    with pytest.raises(
        ValueError,
        match=r"queries='.*q\.jsonl', line 2, is not valid JSON: .*; each line "
        r'of a jsonl file must be one JSON object such as \{"qid": \.\.\., '
        r'"query": \.\.\.\}\.$',
    ):
        load_evals(scores, queries=queries, query_id_column="qid", model_column="llm")
    bad = _write(tmp_path / "scores.jsonl", "{oops\n")
    with pytest.raises(
        ValueError,
        match=r'such as \{"llm": \.\.\., "qid": \.\.\., "score": \.\.\.\}\.$',
    ):
        load_evals(bad, queries=queries, query_id_column="qid", model_column="llm")
