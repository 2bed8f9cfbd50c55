"""pandas extension dtypes and Arrow containers at the entry points that read
a matrix, a table or a list of names: a missing value is reported as one, and
a table's column names are never silently dropped."""

import re

import numpy as np
import pandas as pd
import pytest

from locus_sklearn import QueryEncoder, check_evals
from locus_sklearn._base import check_model_subset
from locus_sklearn.datasets import from_wide, make_model_pool
from locus_sklearn.metrics import (
    correctness_accuracy,
    correctness_log_loss,
    oracle_accuracy,
    route,
    routing_accuracy,
    single_best_accuracy,
)
from locus_sklearn.parallel import iter_model_chunks, transform_chunked

pa = pytest.importorskip("pyarrow")

# check_evals' remedy for a table that is no pandas DataFrame.
TO_PANDAS = "Convert it with its .to_pandas() method."


@pytest.fixture(scope="module")
def small_pool():
    return make_model_pool(
        n_models=4,
        n_families=2,
        n_queries=40,
        evals_per_model=30,
        n_features=8,
        random_state=0,
    )


@pytest.fixture(scope="module")
def embedder(small_pool):
    from locus_sklearn import LocusEmbedder

    return LocusEmbedder(
        small_pool.encodings,
        embedding_dim=8,
        n_latents=2,
        n_blocks=1,
        n_heads=2,
        hidden_dim=8,
        enc_size=(8, 32),
        dec_size=16,
        max_epochs=1,
        episodes_per_epoch=4,
        batch_size=4,
        validation_fraction=0.0,
        early_stopping=None,
        random_state=0,
    ).fit(small_pool.evals)


# ------------------------------------------------------------ embeddings


@pytest.mark.parametrize("dtype", ["float64", "Float64", "double[pyarrow]"])
def test_predict_proba_names_a_missing_embedding_of_any_dtype(
    embedder, small_pool, dtype
):
    # A nullable or Arrow frame holds the gap as pd.NA, on which np.asarray
    # failed with a bare "float() argument ... 'NAType'"; float64's NaN got
    # the library's own message, naming the parameter and the row.
    Z = pd.DataFrame(embedder.transform(small_pool.evals)).astype(dtype)
    Z.iloc[2, 1] = None
    queries = list(small_pool.queries["query"][:3])
    with pytest.raises(
        ValueError,
        match=re.escape(
            "embeddings has NaN or infinite values in 1 row(s), e.g. row 2"
        ),
    ):
        embedder.predict_proba(Z, queries, evals=small_pool.evals)


def test_predict_proba_reads_nullable_embeddings_without_gaps(embedder, small_pool):
    Z = embedder.transform(small_pool.evals)
    queries = list(small_pool.queries["query"][:3])
    expected = embedder.predict_proba(Z, queries, evals=small_pool.evals)
    for dtype in ("Float64", "double[pyarrow]"):
        got = embedder.predict_proba(
            pd.DataFrame(Z).astype(dtype), queries, evals=small_pool.evals
        )
        np.testing.assert_array_equal(got, expected)


# ------------------------------------------- Arrow tables: names not lost


def _tables():
    frame = pd.DataFrame({"a": [1.0, 0.0], "b": [0.0, 1.0]})
    return [pa.Table.from_pandas(frame), pa.RecordBatch.from_pandas(frame)]


def test_check_evals_gives_the_to_pandas_remedy():
    # The message the checks below share.
    with pytest.raises(TypeError, match=re.escape(TO_PANDAS)):
        check_evals(pa.table({"model": ["a"], "query": ["q"], "score": [1.0]}))


@pytest.mark.parametrize("table", _tables(), ids=["Table", "RecordBatch"])
def test_from_wide_refuses_an_arrow_table(table):
    # Its column names were replaced by model0, model1, ...
    kind = f"{type(table).__module__}.{type(table).__qualname__}"
    with pytest.raises(TypeError, match=re.escape(kind)) as info:
        from_wide(table, queries=["q1", "q2"])
    assert "scores must be an array-like or a pandas DataFrame" in str(info.value)
    assert str(info.value).endswith(TO_PANDAS)
    # The remedy keeps the names.
    evals = from_wide(table.to_pandas(), queries=["q1", "q2"])
    assert evals["model"].tolist() == ["a", "a", "b", "b"]


class _FrameLike:
    """A table of named columns that NumPy reads (as a polars DataFrame is):
    the check is duck-typed, polars need not be installed."""

    columns = ["a", "b"]

    def __array__(self, dtype=None, copy=None):
        return np.array([[1.0, 0.0], [0.0, 1.0]], dtype=dtype)

    def to_pandas(self):
        return pd.DataFrame(np.asarray(self), columns=self.columns)


def test_a_table_like_with_to_pandas_is_refused():
    with pytest.raises(TypeError, match="_FrameLike, whose column names would be lost"):
        from_wide(_FrameLike())
    with pytest.raises(TypeError, match=re.escape(TO_PANDAS)):
        routing_accuracy(_FrameLike(), _FrameLike())


def test_metrics_refuse_arrow_tables():
    # The same two models in another column order: as DataFrames they are
    # matched by label (routing to "b" on q1, "a" on q2, both scored 0),
    # where a Table, read by position, scored 1.0.
    y_true = pd.DataFrame({"a": [1.0, 0.0], "b": [0.0, 1.0]})
    y_score = pd.DataFrame({"b": [0.9, 0.1], "a": [0.1, 0.9]})
    assert routing_accuracy(y_true, y_score) == 0.0
    true_t, score_t = pa.Table.from_pandas(y_true), pa.Table.from_pandas(y_score)
    calls = {
        "y_true": [
            lambda: routing_accuracy(true_t, score_t),
            lambda: routing_accuracy(true_t, y_score),
            lambda: oracle_accuracy(true_t),
            lambda: single_best_accuracy(true_t, model="b"),
            lambda: correctness_accuracy(true_t, y_score),
        ],
        "y_score": [
            lambda: routing_accuracy(y_true, score_t),
            lambda: correctness_log_loss(y_true, score_t),
            lambda: route(score_t),
        ],
        "available": [
            lambda: route(y_score, available=pa.Table.from_pandas(y_true > 0)),
        ],
    }
    for name, fns in calls.items():
        for fn in fns:
            with pytest.raises(
                TypeError, match=f"^{name} must be an array-like"
            ) as info:
                fn()
            assert "pyarrow.lib.Table" in str(info.value)
            assert str(info.value).endswith(TO_PANDAS)


def test_metrics_still_take_arrow_arrays_and_dataframes():
    # Only tables with column names are refused: Arrow-backed DataFrames are
    # DataFrames, matched by label.
    y_true = pd.DataFrame({"a": [1.0, 0.0], "b": [0.0, 1.0]}).astype("double[pyarrow]")
    y_score = pd.DataFrame({"b": [0.9, 0.1], "a": [0.1, 0.9]})
    assert routing_accuracy(y_true, y_score) == 0.0
    assert route(y_score).tolist() == [0, 1]


# ------------------------------------------------------------------ encoder


def test_encoder_dataframe_names_the_conversion():
    ids = ["q1", "q2", "q3"]
    # Unit vectors: the encoder normalises its encodings.
    frame = pd.DataFrame([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]], index=ids)
    # Its repr (numbers, cut at 80 characters) was shown in place of a hint.
    with pytest.raises(TypeError) as info:
        QueryEncoder(encoder=frame).fit()
    message = str(info.value)
    assert message.startswith("encoder must be")
    assert message.endswith(
        "; got a 3 x 2 table of type DataFrame. For one row of precomputed "
        "encodings per query id (its index), pass dict(zip(frame.index, "
        "frame.to_numpy())), a mapping {query_id: vector}."
    )
    # The conversion it names works, each query encoded by its row.
    encoder = QueryEncoder(
        encoder=dict(zip(frame.index, frame.to_numpy(), strict=True))
    ).fit()
    np.testing.assert_allclose(
        encoder.transform(["q3", "q1"]), [[0.6, 0.8], [1, 0]], rtol=1e-6
    )


# ------------------------------------------------------- transform_chunked


def test_transform_chunked_names_the_forms_for_a_single_table(embedder, small_pool):
    import pyarrow.dataset as ds

    table = pa.Table.from_pandas(small_pool.evals, preserve_index=False)
    hint = "For a single Table, pass [evals] (a stream of one) or "
    hint += "pyarrow.dataset.dataset(evals)."
    with pytest.raises(TypeError, match=re.escape(hint)):
        transform_chunked(embedder, table, n_jobs=1)
    batch = table.to_batches()[0]
    with pytest.raises(TypeError, match=re.escape("For a single RecordBatch, pass")):
        list(iter_model_chunks(batch))
    # Both forms it names work, as the DataFrame does.
    expected = embedder.transform(small_pool.evals)
    for source in ([table], ds.dataset(table)):
        got = transform_chunked(embedder, source, n_jobs=1)
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6)


# ------------------------------------------------------------- models=


@pytest.mark.parametrize(
    "models",
    [
        pd.Series(["a", None], dtype="string"),
        pd.Series(["a", None], dtype="string[pyarrow]"),
        ["a", None],
        ["a", np.nan],
        np.array(["a", pd.NA], dtype=object),
    ],
)
def test_model_subset_reports_missing_names_as_missing(models):
    with pytest.raises(TypeError) as info:
        check_model_subset(models, np.array(["a", "b"]))
    message = str(info.value)
    assert message == (
        "models must hold model names (str); 1 of 2 entries are missing "
        "values: drop or fill those entries."
    )


def test_model_subset_with_other_entries_keeps_the_flatten_hint():
    with pytest.raises(TypeError) as info:
        check_model_subset(["a", None, 0], np.array(["a", "b"]))
    assert str(info.value) == (
        "models must be a one-dimensional list of model names (str); 1 of 3 "
        "entries are not: [0] (1 missing value(s): drop or fill those "
        "entries). A nested list or a 2-D array gives one entry per row: "
        "flatten it."
    )


def test_router_predict_reports_a_missing_model_name(three_model_knn):
    knn, _ = three_model_knn
    with pytest.raises(TypeError, match="1 of 2 entries are missing values"):
        knn.predict(["q1"], models=pd.Series(["a", None], dtype="string"))
