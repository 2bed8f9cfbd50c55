"""What the estimators promise on bad input and on saved files (issue campaign):
costs and the cost weight, routing always inside the allowed set, devices,
pandas output, onboarding from few rows, and loading that checks a file whole."""

import json
import struct
import warnings

import numpy as np
import pandas as pd
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from locus_sklearn import LocusEmbedder, LocusRouter
from locus_sklearn._embedder import FewEvaluationsWarning
from locus_sklearn.datasets import make_model_pool
from locus_sklearn.metrics._routing import route

TINY = dict(
    embedding_dim=16, n_latents=4, n_blocks=1, n_heads=2, hidden_dim=16,
    enc_size=(16, 128), dec_size=64, episodes_per_epoch=16, batch_size=8,
    max_epochs=2, random_state=0,
)  # fmt: skip


@pytest.fixture(scope="module")
def pool():
    return make_model_pool(
        n_models=6, n_queries=200, evals_per_model=100, random_state=0
    )


@pytest.fixture(scope="module")
def costs(pool):
    names = sorted(pool.evals["model"].unique())
    return {m: float(i + 1) for i, m in enumerate(names)}


@pytest.fixture(scope="module")
def router(pool, costs):
    embedder = LocusEmbedder(pool.encodings, **TINY)
    return LocusRouter(embedder).fit(pool.evals, model_costs=costs)


@pytest.fixture
def saved(router, tmp_path):
    path = tmp_path / "router.locus"
    router.save(path)
    return path


def _queries(pool, n=20):
    return pool.evals["query"].unique()[:n]


# ------------------------------------------------------------- costs, routing
def test_refresh_without_costs_keeps_the_models_cost(router, pool):
    """Item 1: refreshing a model without model_costs kept NaN as its cost."""
    import copy

    r = copy.deepcopy(router)
    model = r.classes_[2]
    before = r.model_costs_.copy()
    r.add_models(pool.evals[pool.evals["model"] == model])
    np.testing.assert_array_equal(r.model_costs_, before)
    r.set_params(cost_weight=0.5)
    assert np.isfinite(r.decision_function(_queries(pool))).all()


@pytest.mark.parametrize(
    "cost_weight, error, match",
    [
        (float("nan"), ValueError, "finite and >= 0"),
        (-1.0, ValueError, "finite and >= 0"),
        ("a", TypeError, "real number"),
        (True, TypeError, "real number"),
    ],
)
def test_cost_weight_is_checked_where_it_is_used(
    router, pool, cost_weight, error, match
):
    """Item 2: set_params after fit skipped the check; routing went wrong."""
    import copy

    r = copy.deepcopy(router).set_params(cost_weight=cost_weight)
    # Checked first against the router's constraints (every setting is, at
    # prediction), in scikit-learn's words; the utility's own check behind.
    constraint = r"'cost_weight' parameter .* must be a float in the range \[0.0, inf\)"
    with pytest.raises(
        error, match=f"cost_weight.*{match}|{match}.*cost_weight|{constraint}"
    ):
        r.predict(_queries(pool))


def test_huge_cost_weight_routes_inside_the_allowed_subset(router, pool):
    """Item 4: utilities of -inf made argmax pick column 0, outside the subset."""
    import copy

    r = copy.deepcopy(router).set_params(cost_weight=1e308)
    allowed = list(r.classes_[3:5])
    routed = r.predict(_queries(pool), models=allowed)
    assert set(routed) <= set(allowed)


@settings(deadline=None)  # one stall of a shared CI runner is not a failure
@given(
    scores=st.lists(
        st.lists(
            st.sampled_from([0.1, 0.5, float("-inf"), float("nan"), 2.0]),
            min_size=4,
            max_size=4,
        ),
        min_size=1,
        max_size=6,
    ),
    allowed=st.lists(st.booleans(), min_size=4, max_size=4).filter(any),
)
def test_route_always_picks_an_available_model(scores, allowed):
    routed = route(np.array(scores), np.broadcast_to(allowed, (len(scores), 4)))
    assert np.asarray(allowed)[routed].all()
    for row, choice in zip(scores, routed, strict=True):
        best = max((s for s, a in zip(row, allowed, strict=True) if a and s == s),
                   default=None)  # fmt: skip
        if best is not None and best > float("-inf"):
            assert row[choice] == best


def test_route_refuses_a_query_with_no_available_model():
    with pytest.raises(ValueError, match="at least one model"):
        route([[0.1, 0.2]], [[False, False]])


# -------------------------------------------------------- devices and outputs
@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a CPU-only torch")
@pytest.mark.parametrize("device", ["cuda", "gpu", "cuda:3"])
def test_unavailable_device_is_a_clear_error_before_work(pool, device):
    """Item 13: device='cuda' on a CPU-only torch failed deep in torch."""
    with pytest.raises(ValueError, match=f"device={device!r}"):
        LocusEmbedder(pool.encodings, device=device, **TINY).fit(pool.evals)


def test_set_output_pandas_is_indexed_by_model(router, pool):
    """Item 14: the pandas index was the evaluation rows'."""
    embedder = router.embedder_
    embedder.set_output(transform="pandas")
    try:
        frame = embedder.transform(pool.evals)
    finally:
        embedder.set_output(transform="default")
    assert isinstance(frame, pd.DataFrame)
    assert frame.index.tolist() == sorted(pool.evals["model"].unique())
    assert frame.columns[0] == "locus0"
    np.testing.assert_array_equal(frame.to_numpy(), embedder.transform(pool.evals))


def test_set_output_pandas_in_a_pipeline(pool):
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    pipe = make_pipeline(LocusEmbedder(pool.encodings, **TINY), StandardScaler())
    pipe.set_output(transform="pandas")
    frame = pipe.fit_transform(pool.evals)
    assert frame.index.tolist() == sorted(pool.evals["model"].unique())


def test_onboarding_from_fewer_rows_than_training_warns(router, pool):
    """Item 17: an embedding from fewer rows than enc_size[0] was silent."""
    model = router.classes_[0]
    few = pool.evals[pool.evals["model"] == model].head(5)
    with pytest.warns(FewEvaluationsWarning, match="enc_size\\[0\\]=16") as record:
        router.embed(few)
    assert record[0].filename == __file__  # the caller's line
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        router.embed(pool.evals[pool.evals["model"] == model])


# ----------------------------------------------------------------- saved files
def _header(path):
    data = path.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8 : 8 + n]), data[8 + n :]


def _write_header(path, header, rest):
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + rest)


def _edit(path, field, value):
    header, rest = _header(path)
    meta = header["__metadata__"]
    meta[field] = json.dumps(value)
    _write_header(path, header, rest)


def _edit_params(path, **params):
    header, rest = _header(path)
    meta = header["__metadata__"]
    saved = json.loads(meta["params"])
    saved.update(params)
    meta["params"] = json.dumps(saved)
    _write_header(path, header, rest)


def test_saved_router_round_trip_is_identical(router, saved, pool):
    loaded = LocusRouter.load(saved)
    q = _queries(pool)
    np.testing.assert_array_equal(loaded.predict_proba(q), router.predict_proba(q))
    np.testing.assert_array_equal(loaded.model_costs_, router.model_costs_)


@pytest.mark.parametrize(
    "edit, match",
    [
        (lambda p: _edit_params(p, n_heads=3), "params.*n_heads=3"),
        (lambda p: _edit_params(p, inference_dtype="float16"), "inference_dtype"),
        (lambda p: _edit(p, "pool", ["a", "a", "b", "c", "d", "e"]), "'pool'.*repeats"),
        (lambda p: _edit(p, "pool", [1, 2, 3, 4, 5, 6]), "'pool'.*type names"),
        (lambda p: _edit(p, "cost_weight", -1.0), "'cost_weight'"),
        (lambda p: _edit(p, "n_query_features", "x"), "'n_query_features'"),
        (lambda p: _edit(p, "classes", None), "'classes'"),
        (lambda p: _edit(p, "encoder", {"kind": "pickle"}), "'encoder'.*unknown"),
        (lambda p: _edit(p, "memory_queries", ["q"]), "memory.encodings.*shape"),
    ],
)
def test_edited_header_fields_are_named(saved, edit, match):
    """Item 7: edited files loaded silently or failed with KeyError deep inside."""
    edit(saved)
    with pytest.raises(ValueError, match=match):
        LocusRouter.load(saved)


def _replace_tensor(path, name, array):
    from safetensors.numpy import load_file, save_file

    header, _ = _header(path)
    tensors = load_file(str(path))
    tensors[name] = array
    save_file(tensors, str(path), metadata=header["__metadata__"])


@pytest.mark.parametrize(
    "name, value, match",
    [
        ("net.predictor.output.bias", np.array([np.nan], np.float32), "NaN"),
        ("pool.costs", -np.arange(6, dtype=np.float64), "pool.costs"),
        ("pool.embeddings", np.zeros((5, 16), np.float32), "pool.embeddings.*shape"),
        ("memory.score", np.full(600, 2.0, np.float32), "memory.score.*\\[0, 1\\]"),
        ("memory.query_index", np.full(600, 10**6), "memory.query_index.*outside"),
        ("net.encoder.seed", np.zeros((1, 1, 16), np.float64), "dtype"),
    ],
)
def test_corrupt_tensors_are_named(saved, name, value, match):
    _replace_tensor(saved, name, value)
    with pytest.raises(ValueError, match=match):
        LocusRouter.load(saved)


def test_a_changed_valid_value_fails_the_checksum(saved):
    _edit(saved, "cost_weight", 0.25)
    with pytest.raises(ValueError, match="checksum"):
        LocusRouter.load(saved)


def test_file_from_another_network_layout_names_both_versions(saved):
    _edit(saved, "network_layout", 99)
    with pytest.raises(ValueError, match="layout version 99.*builds layout version 1"):
        LocusRouter.load(saved)


def test_load_none_is_a_clear_error():
    with pytest.raises(TypeError, match="path"):
        LocusRouter.load(None)


def test_saving_without_query_text(router, pool, tmp_path):
    """Item 9: saved routers held every training prompt in plain text."""
    path = tmp_path / "private.locus"
    router.save(path, include_query_text=False)
    raw = path.read_bytes()
    assert all(q.encode() not in raw for q in pool.evals["query"].unique()[:50])
    with pytest.raises(ValueError, match="encoder="):
        LocusRouter.load(path)
    loaded = LocusRouter.load(path, encoder=pool.encodings)
    q = _queries(pool)
    np.testing.assert_array_equal(loaded.predict_proba(q), router.predict_proba(q))
    with pytest.raises(TypeError, match="include_query_text"):
        router.save(path, include_query_text="no")


@pytest.mark.campaign
@settings(
    settings.get_profile("campaign"),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_corrupted_files_load_identically_or_raise_value_error(
    router, pool, tmp_path_factory, data
):
    """Random header edits and byte flips: an identical router or ValueError."""
    path = tmp_path_factory.mktemp("campaign") / "router.locus"
    router.save(path)
    raw = bytearray(path.read_bytes())
    if data.draw(st.booleans(), label="flip a byte"):
        at = data.draw(st.integers(0, len(raw) - 1), label="offset")
        raw[at] ^= 1 << data.draw(st.integers(0, 7), label="bit")
        path.write_bytes(bytes(raw))
    else:
        header, rest = _header(path)
        meta = header["__metadata__"]
        field = data.draw(st.sampled_from(sorted(meta)), label="field")
        value = data.draw(
            st.one_of(
                st.none(),
                st.booleans(),
                st.integers(-3, 3),
                st.floats(allow_nan=True),
                st.text(max_size=5),
                st.lists(st.text(max_size=3), max_size=3),
            ),
            label="value",
        )
        meta[field] = json.dumps(value)
        _write_header(path, header, rest)
    try:
        loaded = LocusRouter.load(path)
    except ValueError:
        return
    q = _queries(pool, 5)
    np.testing.assert_array_equal(loaded.predict_proba(q), router.predict_proba(q))
    assert loaded.classes_.tolist() == router.classes_.tolist()
    np.testing.assert_array_equal(loaded.model_costs_, router.model_costs_)
