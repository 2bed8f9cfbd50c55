"""Chunked reading, chunked and parallel embedding and scoring (locus_sklearn.parallel)."""

import copy
import os
import pickle
import sys
import time
import traceback
import tracemalloc
import types
import warnings
from collections import Counter
from contextlib import nullcontext

import joblib
import numpy as np
import pandas as pd
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from joblib._parallel_backends import AutoBatchingMixin, MultiprocessingBackend
from joblib.parallel import ThreadingBackend
from sklearn.exceptions import NotFittedError
from sklearn.frozen import FrozenEstimator
from sklearn.linear_model import LogisticRegression
from sklearn.utils._param_validation import InvalidParameterError
from sklearn.utils.parallel import Parallel, delayed

from locus_sklearn import FewEvaluationsWarning, LocusEmbedder, LocusRouter
from locus_sklearn.datasets import load_evals
from locus_sklearn.parallel import (
    _chunked,
    iter_model_chunks,
    predict_chunked,
    predict_proba_chunked,
    transform_chunked,
)
from locus_sklearn.parallel._sources import model_chunks

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
ds = pytest.importorskip("pyarrow.dataset")

TOL = dict(rtol=1e-5, atol=1e-6)


@pytest.fixture(scope="module")
def embedder(pool, tiny_embedder):
    return tiny_embedder(pool.encodings, max_epochs=1).fit(pool.evals)


@pytest.fixture(scope="module")
def whole(embedder, pool):
    return embedder.transform(pool.evals)


def _shuffled(evals, seed=0):
    return evals.sample(frac=1.0, random_state=seed).reset_index(drop=True)


def _write_parquet(frame, path, **kwargs):
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), path, **kwargs)
    return path


# ------------------------------------------------------------ equal to transform
@pytest.mark.parametrize("chunk_models", [1, 5, 12, 1000])
def test_chunked_frame_equals_transform(embedder, pool, whole, chunk_models):
    Z = transform_chunked(embedder, _shuffled(pool.evals), chunk_models=chunk_models)
    np.testing.assert_allclose(Z, whole, **TOL)


def test_chunked_mapping_of_columns(embedder, pool, whole):
    columns = {c: pool.evals[c].tolist() for c in ("model", "query", "score")}
    np.testing.assert_allclose(
        transform_chunked(embedder, columns, chunk_models=7), whole, **TOL
    )


@pytest.mark.parametrize("chunk_models", [1, 5, 12])
def test_chunked_parquet_any_row_order(embedder, pool, whole, chunk_models, tmp_path):
    path = _write_parquet(_shuffled(pool.evals), tmp_path / "evals.parquet")
    Z, models = transform_chunked(
        embedder, path, chunk_models=chunk_models, return_models=True
    )
    assert models.tolist() == sorted(pool.evals["model"].unique())
    np.testing.assert_allclose(Z, whole, **TOL)


def test_chunked_parquet_sorted_row_groups_and_folder(embedder, pool, whole, tmp_path):
    # A file sorted by model, in small row groups, read through str paths, and
    # a folder of several files, read as one dataset.
    ordered = pool.evals.sort_values("model", kind="stable")
    path = _write_parquet(ordered, tmp_path / "sorted.parquet", row_group_size=150)
    np.testing.assert_allclose(
        transform_chunked(embedder, str(path), chunk_models=5), whole, **TOL
    )
    folder = tmp_path / "parts"
    folder.mkdir()
    shuffled = _shuffled(pool.evals)
    for i in range(3):
        _write_parquet(shuffled.iloc[i * 800 : (i + 1) * 800], folder / f"p{i}.parquet")
    np.testing.assert_allclose(
        transform_chunked(embedder, folder, chunk_models=4), whole, **TOL
    )


def test_chunked_dataset_object_with_categorical_models(embedder, pool, whole):
    frame = pool.evals.astype({"model": "category"})
    dataset = ds.dataset(pa.Table.from_pandas(frame, preserve_index=False))
    np.testing.assert_allclose(
        transform_chunked(embedder, dataset, chunk_models=5), whole, **TOL
    )


def test_chunked_parquet_integer_ids_read_as_load_evals(embedder, pool, tmp_path):
    # Integer model and query ids become decimal strings, as in load_evals.
    codes = {q: i for i, q in enumerate(pool.evals["query"].unique())}
    models = {m: 100 + i for i, m in enumerate(pool.evals["model"].unique())}
    frame = pd.DataFrame(
        {
            "model": pool.evals["model"].map(models),
            "query": pool.evals["query"].map(codes),
            "score": pool.evals["score"],
        }
    )
    path = _write_parquet(frame, tmp_path / "ids.parquet")
    fitted = LocusEmbedder(
        {str(codes[q]): v for q, v in pool.encodings.items()},
        **{k: getattr(embedder, k) for k in ("embedding_dim", "n_latents")},
        n_blocks=embedder.n_blocks,
        n_heads=embedder.n_heads,
        hidden_dim=embedder.hidden_dim,
        enc_size=embedder.enc_size,
        max_epochs=1,
        episodes_per_epoch=16,
        random_state=0,
    ).fit(load_evals(path))
    Z, names = transform_chunked(fitted, path, chunk_models=5, return_models=True)
    assert names.tolist() == sorted(str(v) for v in models.values())
    np.testing.assert_allclose(Z, fitted.transform(load_evals(path)), **TOL)


def test_chunked_stream_of_frames(embedder, pool, whole):
    # Rows grouped by model but cut anywhere, as pd.read_csv(chunksize=) gives.
    ordered = pool.evals.sort_values("model", kind="stable")
    frames = (ordered.iloc[i : i + 170] for i in range(0, len(ordered), 170))
    np.testing.assert_allclose(
        transform_chunked(embedder, frames, chunk_models=5), whole, **TOL
    )


def test_chunked_pandas_output(embedder, pool):
    from sklearn.base import clone

    fitted = FrozenEstimator(embedder)
    with joblib.parallel_config(n_jobs=1):
        expected = embedder.set_output(transform="pandas").transform(pool.evals)
        try:
            got = transform_chunked(fitted, pool.evals, chunk_models=5)
        finally:
            embedder.set_output(transform="default")
    assert isinstance(got, pd.DataFrame)
    assert got.index.name == "model"
    pd.testing.assert_frame_equal(got, expected, **TOL)
    assert clone(embedder).get_params()  # the fixture is left as it was
    assert isinstance(transform_chunked(embedder, pool.evals), np.ndarray)


def test_chunked_polars_output(embedder, pool):
    """transform gives a polars DataFrame when set to; transform_chunked,
    documented to give transform's result, gave an ndarray."""
    pl = pytest.importorskip("polars")
    import sklearn

    with joblib.parallel_config(n_jobs=1):
        try:
            embedder.set_output(transform="polars")
            expected = embedder.transform(pool.evals)
            got = transform_chunked(embedder, pool.evals, chunk_models=5)
            frozen = transform_chunked(FrozenEstimator(embedder), pool.evals)
        finally:
            embedder.set_output(transform="default")
        # The global configuration too, as transform reads it, for an
        # embedder whose set_output was never called (any call, "default"
        # included, overrides the global setting).
        fresh = copy.deepcopy(embedder)
        vars(fresh).pop("_sklearn_output_config", None)
        with sklearn.config_context(transform_output="polars"):
            configured = transform_chunked(fresh, pool.evals, chunk_models=5)
    names = [f"locus{i}" for i in range(embedder.embedding_dim)]
    for out in (got, frozen, configured):
        assert isinstance(out, pl.DataFrame)
        assert out.columns == expected.columns == names
        np.testing.assert_allclose(out.to_numpy(), expected.to_numpy(), **TOL)
    assert isinstance(transform_chunked(embedder, pool.evals), np.ndarray)


def test_chunked_duplicates_averaged_like_transform(embedder, pool, whole):
    # A repeated (model, query) row in a chunk is averaged as transform does.
    doubled = pd.concat([pool.evals, pool.evals.iloc[:50]], ignore_index=True)
    np.testing.assert_allclose(
        transform_chunked(embedder, doubled, chunk_models=3),
        embedder.transform(doubled),
        **TOL,
    )


def test_chunked_warns_once_for_few_evaluations(embedder, pool):
    few = pool.evals.groupby("model").head(5)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        transform_chunked(embedder, few, chunk_models=2)
    warned = [w for w in caught if w.category is FewEvaluationsWarning]
    assert len(warned) == 1
    assert "12 model(s)" in str(warned[0].message)
    assert warned[0].filename == __file__


# ------------------------------------------------------------------- parallel
@pytest.mark.slow  # starting two loky workers (each imports torch) takes seconds
def test_parallel_workers_equal_sequential(embedder, pool, whole, router, tmp_path):
    evals = _shuffled(pool.evals)
    Z = transform_chunked(embedder, evals, chunk_models=3, n_jobs=2)
    np.testing.assert_allclose(Z, whole, **TOL)
    # Parquet chunks travel to the workers as filters; each reads its rows.
    path = _write_parquet(evals, tmp_path / "evals.parquet")
    Z = transform_chunked(embedder, path, chunk_models=5, n_jobs=2)
    np.testing.assert_allclose(Z, whole, **TOL)
    queries = pool.queries["query"]
    proba = predict_proba_chunked(router, queries, chunk_queries=97, n_jobs=2)
    np.testing.assert_allclose(proba, router.predict_proba(queries), **TOL)
    subset = router.classes_[:4]
    routed = predict_chunked(router, queries, models=subset, chunk_queries=97, n_jobs=2)
    np.testing.assert_array_equal(routed, router.predict(queries, models=subset))
    # A generator of models did not pickle (PicklingError): it is a list now.
    routed = predict_chunked(
        router, queries, models=iter(subset), chunk_queries=97, n_jobs=2
    )
    np.testing.assert_array_equal(routed, router.predict(queries, models=subset))
    # A dataset of a table in memory did not pickle: its chunks are read here.
    dataset = ds.dataset(pa.Table.from_pandas(evals, preserve_index=False))
    Z = transform_chunked(embedder, dataset, chunk_models=5, n_jobs=2)
    np.testing.assert_allclose(Z, whole, **TOL)


def test_multiprocessing_backend(embedder, pool, whole):
    # joblib's multiprocessing backend (and Ray's, a subclass of it) refused
    # return_as="generator_unordered" before any chunk was embedded.
    with joblib.parallel_config(backend="multiprocessing"):
        Z = transform_chunked(embedder, pool.evals, chunk_models=5, n_jobs=2)
    np.testing.assert_allclose(Z, whole, **TOL)


def test_threading_backend_leaves_torch_threads(embedder, pool, whole):
    before = torch.get_num_threads()
    with joblib.parallel_config(backend="threading"):
        Z = transform_chunked(embedder, pool.evals, chunk_models=4, n_jobs=2)
    assert torch.get_num_threads() == before
    np.testing.assert_allclose(Z, whole, **TOL)


def test_chunked_scoring_needs_a_locus_sklearn_router(embedder, router, pool):
    # Only a predict_proba method was required: a LocusEmbedder (whose
    # predict_proba takes embeddings and queries) or a scikit-learn
    # classifier was sent to the workers and failed there with an error
    # that did not name router.
    classifier = LogisticRegression().fit([[0.0], [1.0]], [0, 1])
    queries = pool.queries["query"][:20]
    for bad, described in [
        (embedder, "LocusEmbedder"),
        (classifier, "LogisticRegression"),
        (FrozenEstimator(embedder), "a FrozenEstimator wrapping LocusEmbedder"),
    ]:
        message = (
            r"router must be a fitted router of locus_sklearn \(a BaseRouter: "
            r"LocusRouter or any router of locus_sklearn\.baselines, or a "
            rf"FrozenEstimator wrapping one\); got {described}\.$"
        )
        with pytest.raises(TypeError, match=message):
            predict_proba_chunked(bad, queries, n_jobs=2)
        with pytest.raises(TypeError, match=message):
            predict_chunked(bad, queries, n_jobs=2)
        with pytest.raises(TypeError, match=message):
            predict_chunked(bad, queries, models=["fam0-m00"])
    # A frozen router is still a router (FrozenEstimator delegates to it).
    frozen = FrozenEstimator(router)
    np.testing.assert_allclose(
        predict_proba_chunked(frozen, queries, chunk_queries=7),
        router.predict_proba(queries),
        **TOL,
    )
    subset = router.classes_[:3]
    np.testing.assert_array_equal(
        predict_chunked(frozen, queries, models=subset, chunk_queries=7),
        router.predict(queries, models=subset),
    )


def test_predict_chunked_sequential_matches(router, pool):
    queries = list(pool.queries["query"][:50]) * 2  # repeats are allowed
    np.testing.assert_array_equal(
        predict_chunked(router, queries, chunk_queries=7), router.predict(queries)
    )


def test_predict_chunked_models_checked_once(router, pool):
    # A generator of models was used up by the first chunk: the second one
    # raised "models is empty".
    queries = list(pool.queries["query"][:50])
    subset = list(router.classes_[[5, 1, 3]])
    np.testing.assert_array_equal(
        predict_chunked(router, queries, models=(m for m in subset), chunk_queries=7),
        router.predict(queries, models=subset),
    )
    with pytest.raises(ValueError, match=r"models has 1 model\(s\) that are not in"):
        predict_chunked(router, queries, models=iter([*subset, "nope"]))
    with pytest.raises(TypeError, match="models must be a list of model names"):
        predict_chunked(router, queries, models=subset[0])


# ------------------------------------------------------------- chunk reading
@settings(max_examples=40, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 6), min_size=1, max_size=8),
    cuts=st.lists(st.integers(1, 40), max_size=6),
    chunk_models=st.integers(1, 4),
)
def test_stream_regrouping_keeps_every_row_once(sizes, cuts, chunk_models):
    models = np.repeat([f"m{i}" for i in range(len(sizes))], sizes)
    frame = pd.DataFrame(
        {"model": models, "query": [f"q{i}" for i in range(len(models))]}
    ).assign(score=1.0)
    bounds = sorted({0, len(frame), *[c for c in cuts if c < len(frame)]})
    frames = [frame.iloc[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    chunks = list(iter_model_chunks(iter(frames), chunk_models=chunk_models))
    seen = [set(c["model"]) for c in chunks]
    assert all(len(s) <= chunk_models for s in seen)
    assert sum(len(s) for s in seen) == len(sizes)  # no model in two chunks
    rows = pd.concat(chunks).sort_values("query")
    pd.testing.assert_frame_equal(
        rows.reset_index(drop=True),
        frame.sort_values("query").reset_index(drop=True),
    )


def test_iter_model_chunks_frame_sorted_and_complete(pool):
    chunks = list(iter_model_chunks(_shuffled(pool.evals), chunk_models=5))
    assert [c["model"].nunique() for c in chunks] == [5, 5, 2]
    names = [sorted(c["model"].unique()) for c in chunks]
    assert sum(names, []) == sorted(pool.evals["model"].unique())
    assert sum(len(c) for c in chunks) == len(pool.evals)


# --------------------------------------------------------------------- errors
@pytest.mark.parametrize("bad", [0, -3])
def test_bad_chunk_models(embedder, pool, bad):
    with pytest.raises(
        ValueError, match=f"chunk_models must be an int >= 1; got {bad}"
    ):
        transform_chunked(embedder, pool.evals, chunk_models=bad)


@pytest.mark.parametrize("bad", [2.5, True, "10"])
def test_chunk_models_not_int(pool, bad):
    with pytest.raises(TypeError, match="chunk_models must be an int >= 1"):
        iter_model_chunks(pool.evals, chunk_models=bad)


@pytest.mark.parametrize("bad", [0, -2])
def test_bad_n_jobs_and_chunk_queries(embedder, router, pool, bad):
    if bad == 0:
        with pytest.raises(ValueError, match="n_jobs must be None or a non-zero int"):
            transform_chunked(embedder, pool.evals, n_jobs=bad)
    with pytest.raises(
        ValueError, match=f"chunk_queries must be an int >= 1; got {bad}"
    ):
        predict_proba_chunked(router, ["q"], chunk_queries=bad)


@pytest.mark.parametrize("bad", [1.5, 10.0, "2", True, None])
def test_n_jobs_and_chunk_queries_not_int(embedder, router, pool, bad):
    # A wrong kind is a TypeError, as for chunk_models; bools are not ints here.
    if bad is not None:  # n_jobs=None means 1
        with pytest.raises(TypeError, match="n_jobs must be None or a non-zero int"):
            transform_chunked(embedder, pool.evals, n_jobs=bad)
        with pytest.raises(TypeError, match="n_jobs must be None or a non-zero int"):
            predict_chunked(router, ["q"], n_jobs=bad)
    with pytest.raises(TypeError, match=r"chunk_queries must be an int >= 1; got"):
        predict_proba_chunked(router, ["q"], chunk_queries=bad)
    with pytest.raises(TypeError, match=r"chunk_queries must be an int >= 1; got"):
        predict_chunked(router, ["q"], chunk_queries=bad)


@pytest.mark.parametrize("bad", ["yes", "no", 1, None, [True]])
def test_return_models_must_be_a_bool(embedder, pool, bad):
    # A truthy "yes" returned a tuple where an array was expected.
    with pytest.raises(TypeError, match=r"return_models must be a bool .*; got"):
        transform_chunked(embedder, pool.evals, return_models=bad)
    Z, models = transform_chunked(embedder, pool.evals, return_models=np.True_)
    assert list(models) == sorted(pool.evals["model"].unique())


@pytest.mark.parametrize("source", [5, b"evals.parquet", np.zeros((3, 3))])
def test_bad_source_type(embedder, source):
    with pytest.raises(TypeError, match="evals must be a DataFrame"):
        transform_chunked(embedder, source)


def test_missing_path(embedder, tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        transform_chunked(embedder, tmp_path / "nope.parquet")


def test_a_leading_tilde_is_the_home_folder(pool, tmp_path, monkeypatch):
    # '~/e.parquet' was read as a folder named '~' of the working folder.
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)  # no folder '~' here
    (tmp_path / "parts").mkdir()
    _write_parquet(pool.evals.iloc[:1200], tmp_path / "e.parquet")
    _write_parquet(pool.evals.iloc[1200:], tmp_path / "parts" / "b.parquet")
    for source, rows in (("~/e.parquet", 1200), ("~/parts", len(pool.evals) - 1200)):
        chunks = list(iter_model_chunks(source, chunk_models=5))
        assert sum(len(chunk) for chunk in chunks) == rows
    # The message keeps the user's text.
    with pytest.raises(FileNotFoundError, match=r"evals='~/nope.parquet' does not"):
        list(iter_model_chunks("~/nope.parquet"))


def test_missing_columns_everywhere(embedder, pool, tmp_path):
    frame = pool.evals.drop(columns="score")
    message = r"evals is missing required column\(s\) \['score'\]"
    with pytest.raises(ValueError, match=message):
        transform_chunked(embedder, frame)
    with pytest.raises(ValueError, match=message):
        transform_chunked(embedder, _write_parquet(frame, tmp_path / "e.parquet"))
    with pytest.raises(ValueError, match=r"evals \(frame 0\) is missing"):
        transform_chunked(embedder, [frame])


# How the prefix of a chunk's input error ends, before transform's own text.
_COUNTS = "the counts that follow are this chunk's"


def test_chunk_errors_are_transform_errors(embedder, pool, tmp_path):
    bad = pool.evals.copy()
    bad.loc[bad.index[-1], "score"] = 1.5  # a row of fam2-m11, the last model
    with pytest.raises(ValueError) as from_transform:
        embedder.transform(bad)
    with pytest.raises(ValueError) as from_frame:
        transform_chunked(embedder, bad, chunk_models=3)
    with pytest.raises(ValueError) as from_parquet:
        transform_chunked(embedder, _write_parquet(bad, tmp_path / "b.parquet"))
    # transform's type and text, after the chunk's name: of 12 sorted models,
    # chunks of 3 put fam2-m11 in chunk 4, with fam2-m09 and fam2-m10; the
    # default chunk_models=1000 makes one chunk of all 12.
    assert str(from_frame.value) == (
        f"In chunk 4 of the pool (models 'fam2-m09' .. 'fam2-m11', 3 models; "
        f"{_COUNTS}): {from_transform.value}"
    )
    assert str(from_parquet.value) == (
        f"In chunk 1 of the pool (models 'fam0-m00' .. 'fam2-m11', 12 models; "
        f"{_COUNTS}): {from_transform.value}"
    )
    # A query unknown to the precomputed encoder is not dropped either.
    unknown = pd.concat(
        [
            pool.evals,
            pd.DataFrame(
                {"model": ["new"], "query": ["??"], "score": [1.0], "task": ["t"]}
            ),
        ]
    )
    with pytest.raises(ValueError, match="'\\?\\?'") as from_unknown:
        transform_chunked(embedder, unknown, chunk_models=5)
    # "new" sorts after the 12 pool models: chunk 3 holds the last two and it.
    assert str(from_unknown.value).startswith(
        f"In chunk 3 of the pool (models 'fam2-m10' .. 'new', 3 models; {_COUNTS}): "
        "encoder (a mapping of precomputed encodings) has no vector for 1 of the "
    )


@pytest.mark.parametrize("n_jobs", [1, 2])
def test_chunk_errors_name_the_chunk_their_counts_come_from(embedder, pool, n_jobs):
    # Unknown queries in the first and the last model: transform counts both
    # among the pool's distinct queries; a chunk counted its own only, which
    # the message read as the pool's, without saying which chunk it was.
    evals = pool.evals.copy()
    first = evals.groupby("model").head(1).index
    evals.loc[first[0], "query"] = "unknown-A"  # fam0-m00, chunk 1 of 4
    evals.loc[first[-1], "query"] = "unknown-B"  # fam2-m11, chunk 4 of 4
    with pytest.raises(ValueError) as from_transform:
        embedder.transform(evals)
    assert "has no vector for 2 of the " in str(from_transform.value)
    # Each bad chunk's message: the chunk's name, then transform's own text
    # for the chunk's rows, which counts the chunk's distinct queries.
    expected = {}
    for index, models in [(1, ("fam0-m00", "fam0-m02")), (4, ("fam2-m09", "fam2-m11"))]:
        chunk = evals[evals["model"].between(*models)]
        n_distinct = chunk["query"].nunique()
        assert n_distinct < evals["query"].nunique()
        with pytest.raises(ValueError) as from_chunk_alone:
            embedder.transform(chunk)
        text = str(from_chunk_alone.value)
        assert f"has no vector for 1 of the {n_distinct} distinct queries" in text
        expected[index] = (
            f"In chunk {index} of the pool (models '{models[0]}' .. "
            f"'{models[1]}', 3 models; {_COUNTS}): {text}"
        )
    with pytest.raises(ValueError) as from_chunked:
        transform_chunked(embedder, evals, chunk_models=3, n_jobs=n_jobs)
    assert type(from_chunked.value) is ValueError
    if n_jobs == 1:  # chunks run in order: the first bad one is reported
        assert str(from_chunked.value) == expected[1]
    else:  # in workers, whichever bad chunk fails first
        assert str(from_chunked.value) in expected.values()
    # One model alone in its chunk is named once.
    alone = (
        r"^In chunk (1 of the pool \(model 'fam0-m00'"
        r"|12 of the pool \(model 'fam2-m11'); "
    )
    with pytest.raises(ValueError, match=alone):
        transform_chunked(embedder, evals, chunk_models=1, n_jobs=n_jobs)


@pytest.mark.parametrize("n_jobs", [1, 2])
def test_query_chunk_errors_name_the_chunk_and_positions(router, pool, n_jobs):
    queries = pool.queries["query"].tolist()
    queries[120] = "unknown-X"
    # Queries 100 to 149 make chunk 3 of chunks of 50.
    with pytest.raises(ValueError) as from_chunk_alone:
        router.predict_proba(queries[100:150])
    assert "has no vector for 1 of the 50 distinct queries" in str(
        from_chunk_alone.value
    )
    prefix = f"In chunk 3 of the queries (queries[100:150], 50 queries; {_COUNTS}): "
    for call in (predict_proba_chunked, predict_chunked):
        with pytest.raises(ValueError) as from_chunked:
            call(router, queries, chunk_queries=50, n_jobs=n_jobs)
        assert type(from_chunked.value) is ValueError
        assert str(from_chunked.value) == prefix + str(from_chunk_alone.value)


@pytest.mark.parametrize("n_jobs", [1, 2])
def test_the_sources_own_error_passes_through(embedder, pool, n_jobs):
    # The user's own source raising: its error, unchanged, not a chunk's.
    def frames():
        yield pool.evals[pool.evals["model"] == "fam0-m00"]
        raise RuntimeError("the source broke")

    with pytest.raises(RuntimeError) as raised:
        transform_chunked(embedder, frames(), chunk_models=1, n_jobs=n_jobs)
    assert str(raised.value) == "the source broke"


@pytest.mark.parametrize(
    "error, prefixed",
    [
        (MemoryError("out of memory"), False),
        # A ValueError whose type takes other arguments than a message.
        (UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"), False),
        (KeyError("q1"), True),
        (TypeError("not a string"), True),
    ],
)
def test_which_chunk_errors_carry_the_prefix(
    embedder, pool, monkeypatch, error, prefixed
):
    def encode(self, queries):
        raise error

    # n_jobs=1: the chunks run in this process, with the patched encoder.
    monkeypatch.setattr(LocusEmbedder, "_encode", encode)
    with pytest.raises(type(error)) as raised:
        transform_chunked(embedder, pool.evals, chunk_models=6, n_jobs=1)
    assert type(raised.value) is type(error)
    if not prefixed:
        assert raised.value is error
        return
    # A KeyError's text is its key's: the prefix goes before it, not its repr.
    text = error.args[0]
    assert raised.value.args == (
        f"In chunk 1 of the pool (models 'fam0-m00' .. 'fam1-m05', 6 models; "
        f"{_COUNTS}): {text}",
    )
    # The frames down to where it was raised are kept (a bug deep in torch
    # or numpy shows where it happened): the traceback ended at the prefix.
    frames = [f.name for f in traceback.extract_tb(raised.value.__traceback__)]
    assert frames[-1] == "encode", frames


def test_empty_and_model_type_errors(embedder, pool, tmp_path):
    with pytest.raises(ValueError, match="evals is empty"):
        transform_chunked(embedder, pool.evals.iloc[:0])
    with pytest.raises(ValueError, match="evals is empty"):
        transform_chunked(embedder, [pool.evals.iloc[:0]])
    with pytest.raises(ValueError, match="evals is empty"):
        transform_chunked(
            embedder, _write_parquet(pool.evals.iloc[:0], tmp_path / "0.pq")
        )
    numbers = pool.evals.assign(model=pool.evals["model"].str.len().astype(float))
    with pytest.raises(TypeError, match=r"evals\['model'\] must hold strings"):
        transform_chunked(embedder, numbers)
    with pytest.raises(TypeError, match="Arrow type double"):
        transform_chunked(embedder, _write_parquet(numbers, tmp_path / "f.parquet"))
    missing = pool.evals.astype({"model": object})
    missing.loc[missing.index[3], "model"] = None
    with pytest.raises(TypeError, match=r"1 of 2400 rows do not"):
        transform_chunked(embedder, _write_parquet(missing, tmp_path / "n.parquet"))


def _folder(tmp_path, first, second):
    folder = tmp_path / "parts"
    folder.mkdir(parents=True)
    _write_parquet(first, folder / "a.parquet")
    _write_parquet(second, folder / "b.parquet")
    return folder


@pytest.mark.parametrize(
    "strings",
    [{1.0: "1.0", 0.0: "0.0"}, {1.0: "yes", 0.0: "no"}, {1.0: " 1", 0.0: "0e0"}],
)
def test_parquet_folder_checks_every_file_types(embedder, pool, tmp_path, strings):
    # pyarrow reads a folder with the first file's schema: the second file's
    # string scores were cast to numbers ("1.0") or raised a bare ArrowInvalid.
    first, second = pool.evals.iloc[:1200], pool.evals.iloc[1200:]
    folder = _folder(tmp_path, first, second.assign(score=second.score.map(strings)))
    message = (
        r"evals\['score'\] must hold numbers in \[0, 1\]; file '.*b\.parquet' "
        "stores it as Arrow type"
    )
    with pytest.raises(TypeError, match=message):
        transform_chunked(embedder, folder, chunk_models=4)
    with pytest.raises(TypeError, match=message):
        iter_model_chunks(folder)
    # A single file with string scores: the same error, naming the file.
    single = _write_parquet(
        second.assign(score=second.score.map(strings)), tmp_path / "s.parquet"
    )
    with pytest.raises(TypeError, match=message.replace("b\\.parquet", "s\\.parquet")):
        transform_chunked(embedder, single)


def test_parquet_folder_checks_every_file_ids_and_columns(embedder, pool, tmp_path):
    first, second = pool.evals.iloc[:1200], pool.evals.iloc[1200:]
    folder = _folder(tmp_path, first, second.assign(query=1.5))
    with pytest.raises(
        TypeError,
        match=r"evals\['query'\] must hold strings; file '.*b\.parquet' stores it "
        "as Arrow type double",
    ):
        transform_chunked(embedder, folder)
    folder = _folder(tmp_path / "x", first, second.drop(columns="score"))
    with pytest.raises(
        ValueError,
        match=r"evals file '.*b\.parquet' is missing required column\(s\) \['score'\]",
    ):
        transform_chunked(embedder, folder)
    # An empty file written from pandas stores Arrow type null: no value to check.
    folder = _folder(tmp_path / "y", pool.evals, pool.evals.iloc[:0])
    np.testing.assert_allclose(
        transform_chunked(embedder, folder), embedder.transform(pool.evals), **TOL
    )


@pytest.mark.parametrize("empty_name", ["a.parquet", "z.parquet"])
def test_parquet_folder_reads_a_header_only_file_in_any_order(
    embedder, pool, whole, tmp_path, empty_name
):
    # A header-only file (0 rows, columns of Arrow type null) sorting first
    # gave the folder its schema: the other file failed to cast string to
    # null, in an error naming that other file.
    folder = tmp_path / "parts"
    folder.mkdir()
    pool.evals.to_parquet(folder / "m.parquet")
    pool.evals.iloc[:0].to_parquet(folder / empty_name)
    assert pq.read_schema(folder / empty_name).field("model").type == pa.null()
    np.testing.assert_allclose(
        transform_chunked(embedder, folder, chunk_models=5), whole, **TOL
    )
    chunks = list(iter_model_chunks(folder, chunk_models=5))
    read = pd.concat(chunks, ignore_index=True)
    assert len(read) == len(pool.evals)
    assert read["model"].map(type).eq(str).all()
    # The null-typed file still adds no rows nor errors when given as a dataset.
    dataset = ds.dataset(folder, format="parquet")
    np.testing.assert_allclose(transform_chunked(embedder, dataset), whole, **TOL)


def test_hive_partitioned_folder_reads_its_partition_columns(
    embedder, pool, whole, tmp_path
):
    # pandas' partitioned write keeps the model in the folder names only:
    # the folder was refused as missing its model column.
    folder = tmp_path / "hive"
    pool.evals.to_parquet(folder, partition_cols=["model"])
    assert "model" not in pq.read_schema(next(folder.rglob("*.parquet"))).names
    np.testing.assert_allclose(
        transform_chunked(embedder, folder, chunk_models=5), whole, **TOL
    )
    chunks = list(iter_model_chunks(folder, chunk_models=5))
    assert [len(c["model"].unique()) for c in chunks] == [5, 5, 2]
    # Two levels, an id that looks like a number kept as written.
    renamed = pool.evals.assign(task="007")
    nested = tmp_path / "nested"
    renamed.to_parquet(nested, partition_cols=["task", "model"])
    read = pd.concat(iter_model_chunks(nested), ignore_index=True)
    assert set(read["task"]) == {"007"} and len(read) == len(pool.evals)
    np.testing.assert_allclose(transform_chunked(embedder, nested), whole, **TOL)


def test_plain_folder_with_key_value_names_reads_as_before(embedder, pool, tmp_path):
    # A subfolder named like a partition of a column its files hold: the
    # files' own column is read, not one from the path.
    folder = tmp_path / "plain"
    (folder / "task=other").mkdir(parents=True)
    pool.evals.to_parquet(folder / "task=other" / "part.parquet")
    read = pd.concat(iter_model_chunks(folder), ignore_index=True)
    assert set(read["task"]) == set(pool.evals["task"])
    assert list(read.columns) == list(pool.evals.columns)


def test_parquet_folder_read_errors_name_the_file(embedder, pool, tmp_path):
    # Each file valid alone, but the second holds a score the folder's type
    # (float64, for scores stored as floats and integers) cannot take exactly.
    first = pd.DataFrame({"model": ["a", "b"], "query": ["q1", "q2"], "score": 1.0})
    second = first.assign(model=["c", "d"], score=[2**53 + 1, 1])
    folder = _folder(tmp_path, first, second)
    with pytest.raises(
        ValueError,
        match=r"evals could not be read: file '.*b\.parquet' fails with ArrowInvalid: "
        r".*score: double.*; store each column with the same type in every file",
    ):
        list(iter_model_chunks(folder))
    (folder / "b.parquet").write_text("not parquet")
    with pytest.raises(
        ValueError, match=r"file '.*b\.parquet' fails with ArrowInvalid"
    ):
        transform_chunked(embedder, folder)


@pytest.mark.parametrize("swap", [False, True])
def test_parquet_folder_read_with_a_schema_that_fits_every_file(pool, tmp_path, swap):
    # pyarrow read a folder with its first file's schema, so the outcome
    # depended on the order of the file names: the task column was dropped
    # when the first file lacked it, integer scores first made a later 0.5
    # fail, integer query ids first turned a later "007" into "7".
    def folder(name, a, b):
        return _folder(tmp_path / name, *((b, a) if swap else (a, b)))

    def read(path):
        frame = pd.concat(iter_model_chunks(path), ignore_index=True)
        return frame.sort_values(["model", "query"], ignore_index=True)

    first, second = pool.evals.iloc[:1200], pool.evals.iloc[1200:]
    ints = first.assign(score=first["score"].round().astype(np.int64))
    got = read(folder("score", ints, second.assign(score=0.5)))
    assert got["score"].dtype == np.float64
    expected = pd.concat([ints, second.assign(score=0.5)]).astype({"score": float})
    pd.testing.assert_frame_equal(
        got,
        expected.sort_values(["model", "query"], ignore_index=True),
        check_dtype=False,
    )

    names = ("b", "a") if swap else ("a", "b")
    with pytest.raises(
        ValueError,
        match=rf"evals has a 'task' column in 1 file\(s\) \(e\.g\. '.*{names[0]}"
        rf"\.parquet'\) but not in 1 file\(s\) with rows \(e\.g\. "
        rf"'.*{names[1]}\.parquet'\); .*give every file the 'task' column, or none",
    ):
        iter_model_chunks(folder("task", first, second.drop(columns="task")))
    # A file without rows does not count, with or without the column.
    got = read(folder("empty1", pool.evals, first.iloc[:0].drop(columns="task")))
    assert (
        got["task"].tolist()
        == pool.evals.sort_values(["model", "query"])["task"].tolist()
    )
    got = read(folder("empty2", pool.evals.drop(columns="task"), first.iloc[:0]))
    assert "task" not in got.columns and len(got) == len(pool.evals)

    tiny = pd.DataFrame({"model": ["m1", "m2"], "query": [7, 8], "score": 1.0})
    with pytest.raises(
        TypeError,
        match=rf"evals\['query'\] is stored as integers in 1 file\(s\) \(e\.g\. "
        rf"'.*{names[0]}\.parquet'\) and as strings in 1 file\(s\) \(e\.g\. "
        rf"'.*{names[1]}\.parquet'\)\. .*store the ids as strings in every file",
    ):
        iter_model_chunks(folder("ids", tiny, tiny.assign(query=["007", "8"])))


def test_csv_dataset_reads_ids_as_written(tmp_path):
    # pyarrow infers a csv's column types: "007" and "7" both became the
    # integer 7, then the string "7", merging two models and two queries;
    # query ids "true"/"false" were refused as booleans; integer scores in
    # the first file made a 0.5 in the second fail.
    folder = tmp_path / "csv"
    folder.mkdir()
    (folder / "a.csv").write_text("model,query,score\n007,001,1\n7,1,0\n")
    (folder / "b.csv").write_text("model,query,score\nm2,true,0.5\nm2,false,1.0\n")
    got = pd.concat(
        iter_model_chunks(ds.dataset(folder, format="csv"), chunk_models=2),
        ignore_index=True,
    )
    expected = pd.concat([load_evals(folder / "a.csv"), load_evals(folder / "b.csv")])
    assert got["model"].tolist() == ["007", "7", "m2", "m2"]
    pd.testing.assert_frame_equal(
        got.sort_values(["model", "query"], ignore_index=True),
        expected.sort_values(["model", "query"], ignore_index=True),
        check_dtype=False,
    )


def test_paths_that_are_not_parquet_folders(pool, tmp_path):
    # pyarrow's bare ArrowInvalid named neither evals nor what to do; an
    # empty folder was "missing required column(s) ... it has columns []".
    small = pool.evals.iloc[:10]
    small.to_csv(tmp_path / "evals.csv", index=False)
    with pytest.raises(
        ValueError,
        match=r"evals='.*evals\.csv' could not be opened as Parquet: ArrowInvalid: "
        r".*format='csv'",
    ):
        iter_model_chunks(tmp_path / "evals.csv")
    folder = tmp_path / "folder"
    folder.mkdir()
    small.to_parquet(folder / "part-0.parquet")
    (folder / "NOTES.txt").write_text("written by hand\n")
    with pytest.raises(
        ValueError,
        match=r"evals='.*folder' could not be opened as Parquet: .*NOTES\.txt.* a "
        "folder of Parquet files only",
    ):
        iter_model_chunks(folder)
    (tmp_path / "empty").mkdir()
    with pytest.raises(
        ValueError, match=r"evals='.*empty' is a folder with no Parquet files"
    ):
        iter_model_chunks(tmp_path / "empty")


@pytest.mark.parametrize("source", ["frame", "parquet"])
@pytest.mark.parametrize("chunk_models", [1, 5])
def test_query_tasks_checked_across_chunks(
    embedder, pool, tmp_path, source, chunk_models
):
    # A query given another task by a model of another chunk: each chunk
    # alone was consistent, so transform_chunked accepted what transform
    # refuses.
    evals = pool.evals.copy()
    models = sorted(evals["model"].unique())
    queries = [set(evals.loc[evals["model"] == m, "query"]) for m in models]
    query = sorted(queries[0] & queries[-1])[0]
    evals.loc[(evals["model"] == models[-1]) & (evals["query"] == query), "task"] = "x"
    with pytest.raises(ValueError, match="more than one task") as from_transform:
        embedder.transform(evals)
    if source == "parquet":
        evals = _write_parquet(evals, tmp_path / "evals.parquet")
    with pytest.raises(ValueError) as from_chunked:
        transform_chunked(embedder, evals, chunk_models=chunk_models)
    assert str(from_chunked.value) == str(from_transform.value)


def _conflict_in_second_chunk(pool):
    """pool.evals with a query that the first and second models (chunks of
    chunk_models=1) give different tasks; the ten chunks after agree."""
    evals = pool.evals.copy()
    first, second = sorted(evals["model"].unique())[:2]
    shared = set(evals.loc[evals["model"] == first, "query"])
    shared &= set(evals.loc[evals["model"] == second, "query"])
    query = sorted(shared)[0]
    evals.loc[(evals["model"] == second) & (evals["query"] == query), "task"] = "x"
    return evals


class _NoGeneratorThreading(ThreadingBackend):
    """Threads, refusing return_as="generator" as joblib's multiprocessing
    backend and Ray's do (processes could not count the chunks run here)."""

    supports_return_generator = False


@pytest.mark.parametrize(
    "backend, n_jobs, most_chunks",
    [
        (None, None, 2),  # sequential: the conflicting chunk is the last run
        # A backend without generators runs groups of 2 * n_jobs chunks.
        ("no_generator_threading", 2, 4),
    ],
)
def test_query_task_conflict_stops_the_chunks_after_it(
    embedder, pool, monkeypatch, backend, n_jobs, most_chunks
):
    # Every chunk's query list was kept until all chunks had run, and only
    # then checked: 12 chunks embedded to refuse what chunk 2 contradicts.
    # Each result is folded into the query -> task map as it arrives now.
    joblib.register_parallel_backend("no_generator_threading", _NoGeneratorThreading)
    embedded = []

    def counted(*args, **kwargs):
        embedded.append(1)
        return embed_chunk(*args, **kwargs)

    embed_chunk = _chunked._embed_chunk
    monkeypatch.setattr(_chunked, "_embed_chunk", counted)
    evals = _conflict_in_second_chunk(pool)
    with pytest.raises(ValueError, match="more than one task") as from_transform:
        embedder.transform(evals)
    # backend None: joblib's default, sequential for n_jobs=None.
    config = joblib.parallel_config(backend=backend) if backend else nullcontext()
    with config, warnings.catch_warnings():
        # No warning from joblib that the chunks in flight were dropped.
        warnings.simplefilter("error")
        with pytest.raises(ValueError) as from_chunked:
            transform_chunked(embedder, evals, chunk_models=1, n_jobs=n_jobs)
    assert str(from_chunked.value) == str(from_transform.value)
    assert 2 <= len(embedded) <= most_chunks
    # Without a conflict, that backend still embeds every chunk, in order.
    embedded.clear()
    config = joblib.parallel_config(backend=backend) if backend else nullcontext()
    with config:
        Z = transform_chunked(embedder, pool.evals, chunk_models=1, n_jobs=n_jobs)
    assert len(embedded) == pool.evals["model"].nunique()
    np.testing.assert_allclose(Z, embedder.transform(pool.evals), **TOL)


def test_query_tasks_held_once_per_distinct_query(tiny_embedder, tmp_path):
    # Every model is scored on the same 20 long queries and each chunk holds
    # one model: the (query, task) lists of all 40 chunks were kept until the
    # end (about 40 x 20 x 4,000 characters, 3 MB and more with their
    # copies), so memory grew with the pool. The query -> task map holds
    # each of the 20 queries once (80 kB).
    n_models, n_queries, length = 40, 20, 4_000
    rng = np.random.default_rng(0)
    queries = [f"q{j:02d}-" + "x" * length for j in range(n_queries)]
    evals = pd.DataFrame(
        {
            "model": np.repeat([f"m{i:02d}" for i in range(n_models)], n_queries),
            "query": queries * n_models,
            "score": rng.integers(0, 2, n_models * n_queries).astype(float),
            "task": [f"t{j % 3}" for j in range(n_queries)] * n_models,
        }
    )
    encodings = {q: rng.normal(size=8).astype(np.float32) for q in queries}
    embedder = tiny_embedder(encodings, max_epochs=1).fit(evals.iloc[:200])
    peaks = {}
    for label, frame in [("task", evals), ("no task", evals.drop(columns="task"))]:
        # Parquet: each chunk's queries are read as new strings, as in a
        # worker process, rather than shared with a frame in memory.
        path = _write_parquet(frame, tmp_path / f"{label}.parquet")
        transform_chunked(embedder, path, chunk_models=1)  # warm caches
        tracemalloc.start()
        try:
            transform_chunked(embedder, path, chunk_models=1)
            peaks[label] = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    one_chunk = n_queries * length
    # Generous: the map and the chunk being folded measure about 2.3 chunks
    # of query texts; the lists of every chunk measured 40.
    assert peaks["task"] - peaks["no task"] < 8 * one_chunk, peaks


def test_stream_not_grouped_by_model(embedder, pool):
    # fam0-m00 comes back in frame 2 after frame 1 went without it.
    ordered = pool.evals.sort_values("model", kind="stable")
    frames = [ordered.iloc[:300], ordered.iloc[300:600], ordered.iloc[:10]]
    with pytest.raises(ValueError, match=r"evals is not grouped by model: 1 model"):
        transform_chunked(embedder, frames)
    # A stream in which every frame holds every model is buffered whole (each
    # model is complete only at the end) and still embedded correctly.
    shuffled = _shuffled(pool.evals)
    frames = [shuffled.iloc[i : i + 300] for i in range(0, len(shuffled), 300)]
    np.testing.assert_allclose(
        transform_chunked(embedder, frames, chunk_models=5),
        embedder.transform(pool.evals),
        **TOL,
    )


@pytest.mark.parametrize(
    "bad",
    [
        {"refine_steps": -1},
        {"inference_dtype": "float16"},
        {"transform_batch_tokens": -5},
    ],
)
def test_runtime_params_checked_as_transform_checks_them(embedder, pool, bad):
    # Set after fit: transform refuses them, and so must the chunked path
    # (before any chunk reaches a worker).
    changed = copy.deepcopy(embedder).set_params(**bad)
    (param,) = bad
    with pytest.raises(InvalidParameterError, match=param) as from_transform:
        changed.transform(pool.evals)
    for fitted in (changed, FrozenEstimator(changed)):
        with pytest.raises(InvalidParameterError, match=param) as from_chunked:
            transform_chunked(fitted, pool.evals, chunk_models=5)
        assert str(from_chunked.value) == str(from_transform.value)


def test_not_fitted_and_wrong_estimators(pool, router):
    with pytest.raises(NotFittedError):
        transform_chunked(LocusEmbedder(pool.encodings), pool.evals)
    with pytest.raises(TypeError, match="embedder must be a fitted LocusEmbedder"):
        transform_chunked(router, pool.evals)
    with pytest.raises(NotFittedError):
        predict_proba_chunked(type(router)(), ["q"])
    with pytest.raises(TypeError, match="router must be a fitted router"):
        predict_chunked(LocusEmbedder(), ["q"])


@pytest.mark.parametrize("dtype", ["bool", "boolean", "bool[pyarrow]"])
@pytest.mark.parametrize("other", ["int64", "uint8", "Int64", "float64"])
def test_stream_refuses_boolean_scores_before_concatenating(dtype, other):
    # pandas concatenates booleans with integers as 1/0: the chunk passed
    # check_evals, where the same rows in one DataFrame are refused.
    flags = pd.DataFrame({"model": ["a"], "query": ["q"], "score": [True]})
    flags["score"] = flags["score"].astype(dtype)
    numbers = pd.DataFrame({"model": ["b"], "query": ["q"], "score": [1]})
    numbers["score"] = numbers["score"].astype(other)
    with pytest.raises(TypeError, match=r"evals \(frame 0\)\['score'\] has boolean"):
        list(iter_model_chunks([flags, numbers], chunk_models=1))


def _parquet_takes_string_view():
    """Whether this pyarrow writes string_view columns to Parquet (the type
    came in pyarrow 16, which cannot write it yet)."""
    if not hasattr(pa, "string_view"):
        return False
    try:
        pq.write_table(
            pa.table({"a": pa.array(["x"], pa.string_view())}), pa.BufferOutputStream()
        )
    except (pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return False
    return True


@pytest.mark.skipif(
    not _parquet_takes_string_view(),
    reason="this pyarrow has no string_view type or cannot write it to Parquet",
)
def test_string_view_ids_are_read_as_strings(tmp_path):
    view = pa.string_view()
    table = pa.table(
        {
            "model": pa.array(["b", "a", "c"], view),
            "query": pa.array(["q1", "q2", "q1"], view),
            "score": [0.5, 1.0, 0.0],
        }
    )
    path = tmp_path / "parts"
    path.mkdir()
    pq.write_table(table, path / "a.parquet")
    pq.write_table(
        pa.table({"model": ["d"], "query": ["q3"], "score": [1.0]}), path / "b.parquet"
    )
    expected = load_evals(path / "a.parquet")
    for source, n_models in [
        (path / "a.parquet", 3),
        (path, 4),
        (ds.dataset(table), 3),
    ]:
        chunks = list(iter_model_chunks(source, chunk_models=2))
        read = pd.concat(chunks, ignore_index=True)
        assert sorted(read["model"]) == sorted(["a", "b", "c", "d"][:n_models])
        first = read[read["model"] != "d"].sort_values("model", ignore_index=True)
        pd.testing.assert_frame_equal(
            first.astype({"model": object, "query": object}),
            expected.sort_values("model", ignore_index=True),
            check_dtype=False,
        )


class _PyarrowWithoutStringView(types.ModuleType):
    """pyarrow as the package sees it (it imports pyarrow where used) on
    pyarrow 14 and 15: no pa.types.is_string_view. pyarrow's own modules keep
    the real one."""

    def __init__(self):
        super().__init__("pyarrow")
        self.types = types.ModuleType("pyarrow.types")
        vars(self.types).update(
            (name, value)
            for name, value in vars(pa.types).items()
            if name not in ("is_string_view", "__name__")
        )

    def __getattr__(self, name):
        return getattr(pa, name)


def test_sources_are_read_without_pyarrow_16s_string_view(tmp_path, monkeypatch):
    """pyarrow 14 and 15 (supported) have no pa.types.is_string_view: every
    Parquet file, folder and dataset in memory was an AttributeError."""
    path = tmp_path / "parts"
    path.mkdir()
    pq.write_table(
        pa.table({"model": ["b", "a"], "query": ["q1", "q2"], "score": [0.5, 1.0]}),
        path / "a.parquet",
    )
    # Strings in one file and large strings in the other: the id types unify.
    pq.write_table(
        pa.table(
            {
                "model": pa.array(["c"], pa.large_string()),
                "query": pa.array(["q1"], pa.large_string()),
                "score": [0.0],
            }
        ),
        path / "b.parquet",
    )
    # Integer ids, read as their decimal strings.
    integers = tmp_path / "integers.parquet"
    pq.write_table(
        pa.table({"model": ["b", "a"], "query": [1, 2], "score": [0.5, 1.0]}),
        integers,
    )
    in_memory = ds.dataset(pq.read_table(path / "a.parquet"))
    monkeypatch.setitem(sys.modules, "pyarrow", _PyarrowWithoutStringView())
    for source, models, queries in [
        (path / "a.parquet", ["a", "b"], ["q2", "q1"]),
        (path, ["a", "b", "c"], ["q2", "q1", "q1"]),
        (in_memory, ["a", "b"], ["q2", "q1"]),
        (integers, ["a", "b"], ["2", "1"]),
    ]:
        read = pd.concat(iter_model_chunks(source, chunk_models=2), ignore_index=True)
        read = read.sort_values("model", ignore_index=True)
        assert read["model"].tolist() == models
        assert read["query"].tolist() == queries
        assert read["score"].tolist() == [1.0, 0.5, 0.0][: len(models)]


def test_multiindex_columns_are_refused_naming_evals():
    evals = pd.DataFrame(
        [["a", "q", 0.5]],
        columns=pd.MultiIndex.from_tuples(
            [("model", "x"), ("query", "y"), ("score", "z")]
        ),
    )
    for source in (evals, [evals]):
        with pytest.raises(ValueError, match=r"MultiIndex columns.*Flatten"):
            list(iter_model_chunks(source))


def test_ids_stored_as_different_integer_types_are_read_as_strings(tmp_path):
    # int64 and uint64 have no common integer type: the folder failed with
    # ArrowInvalid, where each file reads alone.
    first = pd.DataFrame(
        {
            "model": np.array([1, 2], np.int32),
            "query": np.array([2**63, 1], np.uint64),
            "score": 1.0,
        }
    )
    second = pd.DataFrame(
        {"model": np.array([2**63, 3], np.uint64), "query": [2, 3], "score": 0.5}
    )
    # One model per chunk: each is read with a filter on its name.
    chunks = list(iter_model_chunks(_folder(tmp_path, first, second), chunk_models=1))
    assert [chunk["model"].tolist() for chunk in chunks] == [
        ["1"],
        ["2"],
        ["3"],
        [str(2**63)],
    ]
    assert [chunk["query"].tolist() for chunk in chunks] == [
        [str(2**63)],
        ["1"],
        ["3"],
        ["2"],
    ]


def test_decimal_scores_in_a_file_are_refused_with_the_fix(tmp_path):
    from decimal import Decimal

    score = pa.array([Decimal("0.5")], pa.decimal128(3, 2))
    path = tmp_path / "d.parquet"
    pq.write_table(pa.table({"model": ["a"], "query": ["q"], "score": score}), path)
    with pytest.raises(TypeError, match=r"decimal128.*decimals are not converted"):
        list(iter_model_chunks(path))


# ------------------------------------------------- bounded, once-per-worker work
class _AutoBatchingThreading(AutoBatchingMixin, ThreadingBackend):
    """Threads that batch fast tasks as loky and dask do (batch_size="auto"),
    without starting processes."""


def test_chunks_drawn_and_not_embedded_stay_bounded(embedder, monkeypatch):
    # With joblib's batch_size="auto", loky sent fast chunks in ever larger
    # batches: 224 chunks drawn from the source at once for n_jobs=2, where
    # the docs promised about 2 * n_jobs. One chunk per batch now: 2 * n_jobs
    # handed to the workers and up to n_jobs - 1 drawn ahead by joblib.
    joblib.register_parallel_backend("auto_batching_threading", _AutoBatchingThreading)
    n_jobs, n_models = 2, 300
    drawn, finished, peak = [0], [0], [0]

    def frames():  # one model per frame: chunk k is cut when frame k + 1 comes
        for i in range(n_models):
            drawn[0] += 1
            peak[0] = max(peak[0], drawn[0] - finished[0])
            yield pd.DataFrame({"model": [f"m{i:03d}"], "query": ["q"], "score": 1.0})

    def embed(shared, chunk, index, n_threads, parent_pid):  # a fast chunk
        models = chunk.read()["model"].to_numpy(dtype=object)
        time.sleep(0.001)
        result = (models, np.ones(1, np.int64), np.zeros((1, 16), np.float32), 1, None)
        finished[0] += 1
        return result

    monkeypatch.setattr(_chunked, "_embed_chunk", embed)
    with joblib.parallel_config(backend="auto_batching_threading"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FewEvaluationsWarning)
            Z, models = transform_chunked(
                embedder, frames(), chunk_models=1, n_jobs=n_jobs, return_models=True
            )
    assert models.tolist() == [f"m{i:03d}" for i in range(n_models)]
    assert Z.shape == (n_models, 16)
    # The stream reads one frame more than the chunks it cut (a model is
    # complete once the next frame comes without it).
    assert peak[0] <= 3 * n_jobs + 1, peak[0]


def test_dictionary_encoded_integer_ids_are_read_as_strings(embedder, pool, tmp_path):
    # Arrow IPC (Feather) files and ds.dataset(table) keep an id column as a
    # dictionary of integers: it passed the type check, then became a pandas
    # categorical of ints, not strings, and every chunk was refused.
    number = {m: 100 + i for i, m in enumerate(sorted(pool.evals["model"].unique()))}
    table = pa.table(
        {
            "model": pa.array(pool.evals["model"].map(number)).dictionary_encode(),
            "query": pool.evals["query"].to_numpy(),
            "score": pool.evals["score"].to_numpy(),
        }
    )
    path = tmp_path / "evals.arrow"
    pytest.importorskip("pyarrow.feather").write_feather(table, path)
    as_strings = pool.evals[["model", "query", "score"]].assign(
        model=pool.evals["model"].map(number).astype(str)
    )
    expected = embedder.transform(as_strings)
    for source in (ds.dataset(table), ds.dataset(path, format="ipc")):
        assert pa.types.is_dictionary(source.schema.field("model").type)
        Z, models = transform_chunked(
            embedder, source, chunk_models=5, return_models=True
        )
        assert models.tolist() == [str(100 + i) for i in range(12)]
        np.testing.assert_allclose(Z, expected, **TOL)
    # Queries too; a missing id stays missing (not the string "nan").
    queries = pa.array([7, None, 7, -3], pa.int64()).dictionary_encode()
    table = pa.table({"model": list("aabb"), "query": queries, "score": [1.0] * 4})
    chunks = list(iter_model_chunks(ds.dataset(table), chunk_models=1))
    assert chunks[0]["query"].iloc[0] == "7" and chunks[0]["query"].isna().iloc[1]
    assert chunks[1]["query"].tolist() == ["7", "-3"]
    with pytest.raises(TypeError, match=r"1 missing value\(s\) in 'query'"):
        transform_chunked(embedder, ds.dataset(table), chunk_models=1)


class _CountsPickles:
    """An estimator-like object that counts how often it is pickled."""

    pickled = 0

    def __init__(self):
        self.big = np.arange(300_000, dtype=np.float64)  # 2.4 MB: memory-mapped
        self.small = [np.ones(3, np.float32) for _ in range(5)]

    def __getstate__(self):
        type(self).pickled += 1
        return self.__dict__


def _where_shared(shared, i):
    estimator = shared.estimator
    return os.getpid(), id(estimator), type(estimator.big).__name__, i


def test_worker_processes_unpickle_the_estimator_once_per_call():
    # The estimator was an argument of every task: pickled again for every
    # chunk (0.6 s for 60,000 precomputed encodings) and unpickled again in
    # the worker. It is pickled once per call now, and unpickled once per
    # worker process, large arrays still memory-mapped by joblib.
    _CountsPickles.pickled = 0
    shared = _chunked._Shared(_CountsPickles())
    with joblib.parallel_config(backend="multiprocessing", max_nbytes="1M"):
        runs = Parallel(n_jobs=2, batch_size=1)(
            delayed(_where_shared)(shared, i) for i in range(12)
        )
    assert _CountsPickles.pickled == 1
    assert [i for *_, i in runs] == list(range(12))
    copies = {}
    for pid, copy_id, kind, _ in runs:
        copies.setdefault(pid, set()).add(copy_id)
        assert kind == "memmap"
    assert all(len(ids) == 1 for ids in copies.values()), copies
    # Another call (another wrapper) is unpickled again, never served the
    # copy of an earlier call, which may have changed since.
    first = pickle.loads(pickle.dumps(shared))
    assert pickle.loads(pickle.dumps(shared)).estimator is first.estimator
    again = pickle.loads(pickle.dumps(_chunked._Shared(shared.estimator)))
    assert again.estimator is not first.estimator
    np.testing.assert_array_equal(again.estimator.big, shared.estimator.big)


def test_multiprocessing_fallback_pickles_once_in_one_pool(
    embedder, router, pool, whole, monkeypatch
):
    # Under the multiprocessing backend (and Ray's), a new process pool was
    # started for every group of 2 * n_jobs chunks, and the embedder (or
    # router) was pickled again for every chunk.
    pickled, pools = Counter(), [0]
    for cls in (LocusEmbedder, LocusRouter):

        def counting(self, _original=cls.__getstate__, _name=cls.__name__):
            pickled[_name] += 1
            return _original(self)

        monkeypatch.setattr(cls, "__getstate__", counting)
    configure = MultiprocessingBackend.configure

    def counting_configure(self, *args, **kwargs):
        pools[0] += 1
        return configure(self, *args, **kwargs)

    monkeypatch.setattr(MultiprocessingBackend, "configure", counting_configure)
    queries = pool.queries["query"]
    with joblib.parallel_config(backend="multiprocessing"):
        Z = transform_chunked(embedder, pool.evals, chunk_models=1, n_jobs=2)
        assert pools[0] == 1  # 12 chunks, in groups of 4
        assert pickled == {"LocusEmbedder": 1}
        pickled.clear()
        proba = predict_proba_chunked(router, queries, chunk_queries=50, n_jobs=2)
    np.testing.assert_allclose(Z, whole, **TOL)
    np.testing.assert_allclose(proba, router.predict_proba(queries), **TOL)
    assert pickled["LocusRouter"] == 1  # 8 chunks


def test_stream_regrouping_cuts_chunks_as_a_mask_would():
    # Regrouping re-concatenated and re-masked every pending row for each
    # chunk (quadratic); the pending rows are now ranked once per frame.
    # The chunks are the same rows, in the same order, with the same index.
    frames = [
        pd.DataFrame({"model": ["m0", "m0", "m1"], "query": ["a", "b", "a"]}),
        pd.DataFrame({"model": ["m1", "m2", "m3"], "query": ["b", "a", "a"]}),
        pd.DataFrame({"model": ["m3", "m4"], "query": ["b", "a"]}),
    ]
    frames = [frame.assign(score=0.5) for frame in frames]
    chunks = list(iter_model_chunks(iter(frames), chunk_models=2))
    # m0 is complete at frame 1, m1 and m2 at frame 2: the three frames are
    # concatenated (index 0-7) and the first chunk cut; the rest (index 4-7)
    # stays pending, and is cut at the end, m3 and m4 being complete then.
    expected = [
        (["m0", "m0", "m1", "m1"], ["a", "b", "a", "b"], [0, 1, 2, 3]),
        (["m2", "m3", "m3"], ["a", "a", "b"], [4, 5, 6]),
        (["m4"], ["a"], [7]),
    ]
    assert len(chunks) == len(expected)
    for chunk, (models, queries, index) in zip(chunks, expected, strict=True):
        assert chunk["model"].tolist() == models
        assert chunk["query"].tolist() == queries
        assert chunk.index.tolist() == index


def test_stream_frames_disagreeing_on_task_are_refused_naming_them(embedder, pool):
    # A frame without the task column was concatenated with frames that have
    # it: "evals['task'] must hold strings; 200 missing value(s)", naming
    # neither the frame nor the column.
    ordered = pool.evals.sort_values("model", kind="stable")
    with_task = ordered.iloc[:200]
    without = ordered.iloc[200:400].drop(columns="task")
    empty = ordered.iloc[:0].drop(columns="task")  # no rows: does not count
    for frames, message in [
        ([with_task, empty, without], "in frame 0 but not in frame 2"),
        ([without, with_task], "in frame 1 but not in frame 0"),
    ]:
        with pytest.raises(ValueError, match=rf"evals has a 'task' column {message};"):
            transform_chunked(embedder, frames, chunk_models=1)


@pytest.mark.slow  # starting two loky workers (each imports torch) takes seconds
def test_relative_path_read_in_workers_after_chdir(
    embedder, pool, tmp_path, monkeypatch
):
    # loky workers keep the working folder they started in: after os.chdir a
    # relative path sent to them read the old folder's file of the same name
    # (same models and rows, so no check fired), or failed to find it.
    for run, scores in [("run1", pool.evals.score), ("run2", 1.0 - pool.evals.score)]:
        (tmp_path / run).mkdir()
        _write_parquet(pool.evals.assign(score=scores), tmp_path / run / "e.parquet")
    for run in ("run1", "run2"):
        monkeypatch.chdir(tmp_path / run)
        expected = transform_chunked(embedder, "e.parquet", chunk_models=4)
        for source in ("e.parquet", ds.dataset("e.parquet", format="parquet")):
            Z = transform_chunked(embedder, source, chunk_models=4, n_jobs=2)
            np.testing.assert_array_equal(Z, expected)


def test_chunks_of_relative_paths_carry_absolute_paths(pool, tmp_path, monkeypatch):
    # A chunk travels to a worker as its files' paths: relative ones would
    # be resolved against the worker's own working folder.
    (tmp_path / "parts").mkdir()
    first = tmp_path / "parts" / "a.parquet"
    _write_parquet(pool.evals.iloc[:1200], first, row_group_size=300)
    _write_parquet(pool.evals.iloc[1200:], tmp_path / "parts" / "b.parquet")
    monkeypatch.chdir(tmp_path)
    dataset = ds.dataset("parts", format="parquet")
    # A fragment of some row groups only keeps them.
    row_groups = next(
        ds.dataset("parts/a.parquet", format="parquet").get_fragments()
    ).split_by_row_group()
    subset = ds.FileSystemDataset(
        row_groups[:1], dataset.schema, dataset.format, dataset.filesystem
    )
    for source in ("parts", "parts/a.parquet", dataset, subset):
        chunks, _ = model_chunks(source, 5)
        for chunk in chunks:
            assert all(os.path.isabs(f) for f in chunk.dataset.files)
    chunks, n_rows = model_chunks(subset, 1000)
    assert n_rows == 300
    assert len(pd.concat(chunk.read() for chunk in chunks)) == 300


def _flip_page(path, column):
    """Flip 38 bytes of the first data page of ``column`` (its page header)."""
    metadata = pq.ParquetFile(path).metadata.row_group(0)
    names = [metadata.column(i).path_in_schema for i in range(metadata.num_columns)]
    offset = metadata.column(names.index(column)).data_page_offset
    data = bytearray(path.read_bytes())
    for i in range(offset + 2, offset + 40):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("column", ["model", "score"])
def test_corrupt_page_is_an_error_naming_the_file(embedder, pool, tmp_path, column):
    # pyarrow raises a bare OSError ("Couldn't deserialize thrift ...") for a
    # page it cannot decode, naming no file: it escaped as it was, from the
    # scan of the model column or from the read of a chunk.
    folder = tmp_path / "parts"
    folder.mkdir()
    ordered = pool.evals.sort_values("model")
    for k, (_, rows) in enumerate(ordered.groupby("model")):
        _write_parquet(rows, folder / f"part-{k:02d}.parquet")
    _flip_page(folder / "part-05.parquet", column)
    message = (
        r"(?s)evals could not be read: file '.*part-05\.parquet' fails with OSError: "
        r".*The file is damaged, or was changed while it was read"
    )
    with pytest.raises(ValueError, match=message):
        list(iter_model_chunks(folder, chunk_models=2))
    with pytest.raises(ValueError, match=message):
        transform_chunked(embedder, folder, chunk_models=2)


def test_file_deleted_after_the_scan_names_its_path(pool, tmp_path):
    # A missing file's own error names it: raised as it is.
    folder = _folder(tmp_path, pool.evals.iloc[:1200], pool.evals.iloc[1200:])
    chunks, _ = model_chunks(folder, 1000)
    (folder / "b.parquet").unlink()
    with pytest.raises(FileNotFoundError, match=r"b\.parquet"):
        next(iter(chunks)).read()


def test_empty_file_with_integer_ids_beside_string_ids(embedder, pool, whole, tmp_path):
    # An empty partition written from pandas with int64 id columns holds no
    # id, yet it refused the folder: "stored as integers in 1 file(s) ...".
    empty = pd.DataFrame(
        {
            "model": pd.Series([], dtype="int64"),
            "query": pd.Series([], dtype="int64"),
            "score": pd.Series([], dtype="float64"),
            "task": pd.Series([], dtype="int64"),
        }
    )
    for name in ("0.parquet", "z.parquet"):  # sorting first and last
        folder = tmp_path / name.split(".")[0]
        folder.mkdir()
        _write_parquet(pool.evals, folder / "m.parquet")
        empty.to_parquet(folder / name)
        np.testing.assert_allclose(
            transform_chunked(embedder, folder, chunk_models=5), whole, **TOL
        )
        read = pd.concat(iter_model_chunks(folder, chunk_models=5), ignore_index=True)
        assert len(read) == len(pool.evals)
        assert read["model"].map(type).eq(str).all()
    # A file with rows still refuses the mix.
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    _write_parquet(pool.evals, mixed / "m.parquet")
    with_rows = pd.DataFrame({"model": [7], "query": [1], "score": [1.0], "task": [1]})
    _write_parquet(with_rows, mixed / "n.parquet")
    with pytest.raises(TypeError, match=r"is stored as integers in 1 file\(s\)"):
        list(iter_model_chunks(mixed))


def test_stream_of_arrow_record_batches_and_tables(embedder, pool, whole, tmp_path):
    # ParquetFile.iter_batches() yields RecordBatches, refused as frames:
    # "must be a pandas DataFrame ...; got RecordBatch".
    ordered = pool.evals.sort_values("model", kind="stable").reset_index(drop=True)
    path = _write_parquet(ordered, tmp_path / "sorted.parquet")
    batches = pq.ParquetFile(path).iter_batches(batch_size=500)
    chunks = list(iter_model_chunks(batches, chunk_models=4))
    frames = [ordered.iloc[i : i + 500] for i in range(0, len(ordered), 500)]
    expected = list(iter_model_chunks(frames, chunk_models=4))
    assert len(chunks) == len(expected) == 3
    for chunk, frame in zip(chunks, expected, strict=True):
        pd.testing.assert_frame_equal(  # Arrow strings or object strings
            chunk.reset_index(drop=True),
            frame.reset_index(drop=True),
            check_dtype=False,
        )
    batches = pq.ParquetFile(path).iter_batches(batch_size=500)
    np.testing.assert_allclose(
        transform_chunked(embedder, batches, chunk_models=5), whole, **TOL
    )
    # Tables too; integer ids are their decimal strings, as from Parquet.
    tables = [
        pa.table({"model": [7, 7], "query": [1, 2], "score": [1.0, 0.0]}),
        pa.table({"model": [8], "query": [1], "score": [0.5]}),
    ]
    (chunk,) = iter_model_chunks(iter(tables), chunk_models=2)
    assert chunk["model"].tolist() == ["7", "7", "8"]
    assert chunk["query"].tolist() == ["1", "2", "1"]
    # A list of paths is not a stream of frames: said so, with the way.
    with pytest.raises(TypeError, match=r"got the path 'a\.parquet'.*dataset\(paths"):
        list(iter_model_chunks(["a.parquet", "b.parquet"]))


def test_each_chunk_reads_only_the_files_holding_its_models(pool, tmp_path):
    # Every chunk carried every file of a folder and opened each to read its
    # rows: a folder of one file per model cost files x chunks.
    folder = tmp_path / "per_model"
    folder.mkdir()
    for model, rows in _shuffled(pool.evals).groupby("model"):
        _write_parquet(rows, folder / f"{model}.parquet")
    pool.evals.iloc[:0].to_parquet(folder / "0-header-only.parquet")  # no rows
    models = sorted(pool.evals["model"].unique())
    chunks, n_rows = model_chunks(folder, 5)
    chunks = list(chunks)
    assert n_rows == len(pool.evals)
    for k, chunk in enumerate(chunks):
        held = models[5 * k : 5 * k + 5]
        assert chunk.values == held
        assert sorted(os.path.basename(f) for f in chunk.dataset.files) == [
            f"{m}.parquet" for m in held
        ]
        read = chunk.read()
        expected = pool.evals[pool.evals["model"].isin(held)]
        assert len(read) == len(expected)
        columns = ["model", "query", "score"]
        assert Counter(read[columns].itertuples(index=False)) == Counter(
            expected[columns].itertuples(index=False)
        )
    # Files each spanning a range of names: those that meet the chunk's.
    ordered = pool.evals.sort_values("model", kind="stable")
    spans = tmp_path / "spans"
    spans.mkdir()
    split = ordered[ordered["model"] == models[5]]  # in both files
    first = ordered[ordered["model"].isin(models[:5])]
    second = ordered[ordered["model"].isin(models[6:])]
    _write_parquet(pd.concat([first, split.iloc[:100]]), spans / "a.parquet")
    _write_parquet(pd.concat([split.iloc[100:], second]), spans / "b.parquet")
    chunks, _ = model_chunks(spans, 4)
    chunks = list(chunks)
    files = [sorted(os.path.basename(f) for f in c.dataset.files) for c in chunks]
    # Models 0-5 in a, 5-11 in b: chunk 0-3 reads a, 4-7 both, 8-11 b.
    assert files == [["a.parquet"], ["a.parquet", "b.parquet"], ["b.parquet"]]
    assert len(chunks[1].read()) == 4 * 200
