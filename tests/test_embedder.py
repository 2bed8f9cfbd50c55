"""LocusEmbedder: embeddings (shape, order, determinism), hyper-parameter and
input errors, inference precision, and use as a Pipeline step.

The tiny settings and the fitted ``pool`` / ``router`` fixtures are in conftest.py.
"""

import pickle

import numpy as np
import pandas as pd
import pytest
import sklearn
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.exceptions import NotFittedError
from sklearn.pipeline import Pipeline
from sklearn.utils._param_validation import InvalidParameterError

from locus_sklearn import KCenterSelector


def test_embedder_transform_shape_order_and_determinism(router, pool, rows_of):
    embedder = router.embedder_
    z = embedder.transform(pool.evals)
    assert z.shape == (12, 16) and z.dtype == np.float32
    assert np.isfinite(z).all()
    shuffled = pool.evals.sample(frac=1.0, random_state=3)
    np.testing.assert_array_equal(embedder.transform(shuffled), z)
    # One row per model, in sorted model-name order, whatever the input order.
    sub = rows_of(pool.evals, ["fam2-m11", "fam0-m00"])
    z_sub = embedder.transform(sub)
    np.testing.assert_allclose(z_sub, z[[0, 11]], atol=1e-5)


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_embedding_invariant_to_row_order_hypothesis(router, pool, seed, rows_of):
    rows = rows_of(pool.evals, ["fam1-m05"])
    z = router.embedder_.transform(rows)
    perm = rows.sample(frac=1.0, random_state=seed)
    assert np.abs(router.embedder_.transform(perm) - z).max() < 1e-5


def test_batching_does_not_change_embeddings(router, pool, fitted_copy):
    # Tiny token budget -> one model per forward pass; must equal the batched run.
    embedder = fitted_copy(router.embedder_, transform_batch_tokens=1)
    np.testing.assert_allclose(
        embedder.transform(pool.evals),
        router.embedder_.transform(pool.evals),
        atol=1e-5,
    )


def test_global_pandas_output_reaches_the_user_only(
    router, pool, tiny_embedder, assert_reproduced
):
    """sklearn.set_config(transform_output="pandas") made the query encoder
    return a DataFrame to fit and transform, which failed on it."""
    from locus_sklearn import QueryEncoder

    models = sorted(pool.evals["model"].unique())
    rows = pool.evals.groupby("model").head(60)
    plain = tiny_embedder(pool.encodings, max_epochs=1).fit_transform(rows)
    # The library's own encoder and one the user passed in, also one set to
    # give pandas itself: the network reads arrays whatever they give.
    encoders = [
        pool.encodings,
        QueryEncoder(pool.encodings),
        QueryEncoder(pool.encodings).set_output(transform="pandas"),
    ]
    for encoder in encoders:
        with sklearn.config_context(transform_output="pandas"):
            fitted = tiny_embedder(encoder, max_epochs=1).fit(rows)
            frame = fitted.transform(rows)
            both = tiny_embedder(encoder, max_epochs=1).fit_transform(rows)
            served = router.embedder_.transform(pool.evals)
            own = QueryEncoder(pool.encodings).fit().transform(["q001", "q000"])
        for out in (frame, both, served):
            assert isinstance(out, pd.DataFrame) and out.columns[0] == "locus0"
        assert frame.index.tolist() == both.index.tolist() == models
        assert_reproduced(frame.to_numpy(), plain)
        assert_reproduced(both.to_numpy(), plain)
        np.testing.assert_array_equal(
            served.to_numpy(), router.embedder_.transform(pool.evals)
        )
        # What the user asks the encoder for still follows the setting.
        assert isinstance(own, pd.DataFrame) and own.shape[0] == 2
    assert isinstance(fitted.transform(rows), np.ndarray)


@pytest.mark.parametrize("method", ["pca", "mds", "tsne"])
def test_model_map_is_drawn_under_a_global_pandas_output(method):
    """sklearn.set_config(transform_output="pandas") made the PCA, KernelPCA
    (MDS) and t-SNE inside plot_model_map return DataFrames, which failed
    when indexed as points[:, 0] (InvalidIndexError)."""
    plt = pytest.importorskip("matplotlib.pyplot")
    from locus_sklearn.inspection import plot_model_map

    # Centred, widest along x: PCA and classical MDS place the models at
    # (+-2, 0) and (0, +-1), each axis up to its sign.
    Z = np.array([[2.0, 0.0], [-2.0, 0.0], [0.0, 1.0], [0.0, -1.0]])

    def points(**config):
        with sklearn.config_context(**config):
            ax = plot_model_map(Z, method=method, metric="euclidean", random_state=0)
        plt.close(ax.figure)
        return np.asarray(ax.collections[0].get_offsets())

    drawn = points(transform_output="pandas")
    np.testing.assert_allclose(drawn, points(transform_output="default"))
    if method != "tsne":
        expected = [[2.0, 0.0], [2.0, 0.0], [0.0, 1.0], [0.0, 1.0]]
        np.testing.assert_allclose(np.abs(drawn), expected, atol=1e-12)


def test_auto_batch_tokens_follow_the_networks_device(router, fitted_copy):
    import copy

    embedder = fitted_copy(router.embedder_)
    assert embedder.transform_batch_tokens == "auto"
    device = next(embedder.net_.module_.parameters()).device.type
    assert embedder._batch_tokens() == (16384 if device == "cpu" else 262144)
    assert fitted_copy(embedder, transform_batch_tokens=300)._batch_tokens() == 300
    # Any device but the CPU takes the accelerator's size (the meta device
    # allocates nothing; the network is a copy).
    embedder.net_ = copy.deepcopy(embedder.net_)
    embedder.net_.module_.to("meta")
    assert embedder._batch_tokens() == 262144
    with pytest.raises(InvalidParameterError, match="transform_batch_tokens.*'big'"):
        fitted_copy(router.embedder_, transform_batch_tokens="big").transform(
            pd.DataFrame({"model": ["a"], "query": ["q"], "score": [1.0]})
        )


def test_same_random_state_gives_identical_fit(
    pool, tiny_embedder, model_names, rows_of, assert_reproduced
):
    evals = rows_of(pool.evals, model_names[:6])
    a = tiny_embedder(pool.encodings, max_epochs=2).fit(evals).transform(evals)
    b = tiny_embedder(pool.encodings, max_epochs=2).fit(evals).transform(evals)
    assert_reproduced(a, b)
    c = tiny_embedder(pool.encodings, max_epochs=2, random_state=1).fit(evals)
    assert not np.array_equal(a, c.transform(evals))


def test_numpy_integer_params_train(
    pool, tiny_embedder, model_names, rows_of, tmp_path
):
    # GridSearchCV draws NumPy integers from an array grid: they passed the
    # parameter checks, then torch's DataLoader refused batch_size=np.int64(8)
    # as "batch_size should be a positive integer value, but got batch_size=8".
    evals = rows_of(pool.evals, model_names[:4])
    ints = dict(batch_size=8, max_epochs=2, episodes_per_epoch=16, dec_size=32)
    ints.update(patience=1, enc_size=(8, 64))
    expected = tiny_embedder(pool.encodings, **ints).fit(evals)
    numpy_ints = {
        name: tuple(map(np.int64, v)) if isinstance(v, tuple) else np.int64(v)
        for name, v in ints.items()
    }
    emb = tiny_embedder(pool.encodings, **numpy_ints).fit(evals)
    assert emb.n_epochs_ == expected.n_epochs_
    np.testing.assert_array_equal(emb.transform(evals), expected.transform(evals))
    # The parameters are left as given (fit converts its own copy).
    assert type(emb.batch_size) is np.int64


def test_fit_leaves_global_torch_rng_alone(pool, tiny_embedder, model_names, rows_of):
    import torch

    evals = rows_of(pool.evals, model_names[:4])
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    tiny_embedder(pool.encodings, max_epochs=1).fit(evals)
    assert torch.equal(torch.rand(3), expected)


def test_fit_rejects_models_with_one_evaluation(pool, tiny_embedder):
    evals = pd.concat([pool.evals, pool.evals.iloc[:1].assign(model="lonely")])
    with pytest.raises(ValueError, match="at least 2 evaluations per model.*'lonely'"):
        tiny_embedder(pool.encodings).fit(evals)


@pytest.mark.parametrize(
    "params, match",
    [
        ({"embedding_dim": 0}, "embedding_dim"),
        # Zero blocks trained, then failed with an IndexError at prediction.
        ({"n_blocks": 0}, "'n_blocks' parameter .* range \\[1, inf\\)"),
        ({"n_heads": 3}, "n_heads=3 must divide embedding_dim=16"),
        ({"enc_size": (10, 5)}, "enc_size"),
        ({"early_stopping": "valid_acc"}, "early_stopping"),
        ({"inference_dtype": "float16"}, "inference_dtype"),
        # A bool is an int to Python, not a count to the embedder.
        ({"max_epochs": True}, "'max_epochs' parameter .* Got True, a bool"),
        ({"dropout": False}, "'dropout' parameter .* Got False, a bool"),
        ({"random_state": True}, "'random_state' parameter .* Got True, a bool"),
        ({"enc_size": (True, 64)}, r"enc_size=\(True, 64\) must be a pair of ints"),
    ],
)
def test_invalid_hyper_parameters(pool, params, match, tiny_embedder):
    with pytest.raises((ValueError, InvalidParameterError), match=match):
        tiny_embedder(pool.encodings, **params).fit(pool.evals)


def test_memory_takes_a_path_and_refuses_a_file(pool, tiny_embedder, tmp_path):
    # A pathlib.Path was refused (InvalidParameterError), though every other
    # path parameter takes one; a file where the cache folder goes failed at
    # the first encoding with a bare NotADirectoryError on "afile/joblib".
    rows = pool.evals.groupby("model").head(30)
    embedder = tiny_embedder(pool.encodings, max_epochs=1, memory=tmp_path / "c")
    with pytest.warns(UserWarning, match="memory= has no effect"):  # a mapping
        embedder.fit(rows)
    assert embedder.get_params()["memory"] == tmp_path / "c"
    afile = tmp_path / "afile"
    afile.write_text("x")
    with pytest.raises(ValueError, match=rf"memory='{afile}' is a file .*a folder"):
        tiny_embedder(pool.encodings, max_epochs=1, memory=afile).fit(rows)


_HUGE = 10**400  # an int: in [0, inf) to scikit-learn, held by no float


@pytest.mark.parametrize(
    "params, match",
    [
        *(
            ({name: _HUGE}, rf"'{name}' parameter of LocusEmbedder must be a float "
             rf"in the range {bounds}.* Got 1\.000e\+400 \(an int of about 401 "
             r"digits\), an int too large for a float \(at most 1\.8e\+308\)")
            for name, bounds in [
                ("lr", r"\(0\.0, inf\)"),
                ("weight_decay", r"\[0\.0, inf\)"),
                ("query_noise", r"\[0\.0, inf\)"),
                ("gradient_clip", r"\(0\.0, inf\)"),
                ("agreement_weight", r"\[0\.0, inf\)"),
                ("profile_weight", r"\[0\.0, inf\)"),
                ("refine_prior", r"\[.*, inf\)"),
            ]
        ),
        ({"n_profile_regions": _HUGE}, r"'n_profile_regions' parameter .* range "
         r"\[0, inf\)\. Got 1\.000e\+400 .*, an int beyond int64"),
        ({"batch_size": 2**63}, r"'batch_size' parameter .* range \[1, inf\)\. Got "
         r"9223372036854775808, an int beyond int64 \(at most 9223372036854775807\)"),
        ({"enc_size": (4, _HUGE)}, r"enc_size=\(4, 1\.000e\+400 \(an int of about "
         r"401 digits\)\) must be a pair of ints \(low, high\) with 1 <= low <= "
         r"high; got 1\.000e\+400 .*, an int beyond int64"),
        ({"enc_size": (2**63, 2**64)}, r"got 9223372036854775808, an int beyond int64"),
    ],
)  # fmt: skip
def test_ints_no_float_or_int64_holds_are_refused_by_name(
    pool, params, match, tiny_embedder
):
    # They passed scikit-learn's Interval, which compares a Python int as it
    # is, and failed in torch or numpy (an OverflowError, a TypeError from
    # torch.empty, islice's ValueError) naming no parameter, some in training.
    with pytest.raises(ValueError, match=match):
        tiny_embedder(pool.encodings, **params).fit(pool.evals)


def test_large_numbers_a_float_or_int64_holds_pass_validation(tiny_embedder):
    embedder = tiny_embedder(
        lr=1e300, query_noise=10**300, weight_decay=0, refine_prior=2**1000,
        batch_size=2**62, n_profile_regions=np.int64(2**63 - 1),
        enc_size=(4, 2**63 - 1),
    )  # fmt: skip
    embedder._validate_params()
    embedder._check_structure()


def test_flags_stay_bools(pool, tiny_embedder, model_names, rows_of):
    # Parameters that are flags (or verbosity) still take True and False.
    evals = rows_of(pool.evals, model_names[:3])
    embedder = tiny_embedder(pool.encodings, max_epochs=1, verbose=False)
    embedder.set_params(disjoint=False, standardize_embedding=True).fit(evals)
    assert embedder.transform(evals).shape == (3, 16)


@pytest.mark.parametrize(
    "params",
    [{"refine_steps": -1}, {"readout_neighbors": 0}, {"transform_batch_tokens": 0}],
)
def test_save_refuses_settings_that_load_would_refuse(
    router, tmp_path, fitted_copy, params
):
    (name,) = params
    embedder = fitted_copy(router.embedder_, **params)
    with pytest.raises(ValueError, match=f"'{name}' parameter of LocusEmbedder"):
        embedder.save(tmp_path / "embedder.safetensors")
    assert not (tmp_path / "embedder.safetensors").exists()


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_predict_proba_refuses_non_finite_embeddings(router, pool, query_texts, bad):
    embedder = router.embedder_
    Z = embedder.transform(pool.evals)
    Z[3, 5] = bad
    with pytest.raises(
        ValueError, match=r"NaN or infinite values in 1 row\(s\), e\.g\. row 3"
    ):
        embedder.predict_proba(Z, query_texts[:2], evals=pool.evals)


def test_predict_proba_takes_embeddings_with_negative_strides(
    router, pool, query_texts, tiny_embedder
):
    # torch.as_tensor refuses a reversed view: Z[::-1], or the values of a
    # pandas output reordered with .iloc[::-1], were a ValueError from torch.
    embedder = tiny_embedder(pool.encodings, kernel_readout=False, max_epochs=1)
    embedder.fit(pool.evals)
    Z = embedder.transform(pool.evals)
    queries = query_texts[:3]
    reversed_view = Z[::-1]
    assert reversed_view.strides[0] < 0
    expected = embedder.predict_proba(Z, queries)[:, ::-1]
    np.testing.assert_array_equal(
        embedder.predict_proba(reversed_view, queries), expected
    )
    frame = embedder.set_output(transform="pandas").transform(pool.evals)
    np.testing.assert_array_equal(
        embedder.predict_proba(frame.iloc[::-1], queries), expected
    )
    # With the kernel readout: a view of one model's rows, reversed.
    readout = router.embedder_
    one = pool.evals[pool.evals["model"] == pool.evals["model"].iloc[0]]
    Z1 = np.repeat(readout.transform(one), 2, axis=0)[::-2]
    assert Z1.strides[0] < 0
    np.testing.assert_array_equal(
        readout.predict_proba(Z1, queries, evals=one),
        readout.predict_proba(Z1.copy(), queries, evals=one),
    )


def test_predict_proba_pairs_indexed_embeddings_with_evals_by_model(
    router, pool, query_texts, fitted_copy, model_names, rows_of
):
    # Only the number of models was compared: embeddings of models A, B, C
    # were read silently with the evaluations of D, E, F, or of C, B, A.
    embedder = fitted_copy(router.embedder_).set_output(transform="pandas")
    first = rows_of(pool.evals, model_names[:3])
    last = rows_of(pool.evals, model_names[3:6])
    Z = embedder.transform(first)
    queries = query_texts[:3]
    with pytest.raises(
        ValueError,
        match=r"indexed by models \['fam0-m00', .*\(other models: row 0 is "
        r"'fam0-m00', read with the evaluations of 'fam0-m03'\)",
    ):
        embedder.predict_proba(Z, queries, evals=last)
    with pytest.raises(
        ValueError,
        match=r"the same models in another order: row 0 is 'fam0-m02', read with "
        r"the evaluations of 'fam0-m00'\); pass embeddings.sort_index\(\)",
    ):
        embedder.predict_proba(Z.iloc[::-1], queries, evals=first)
    # The index in evals' sorted order, or none (a RangeIndex): as the array.
    expected = embedder.predict_proba(Z.to_numpy(), queries, evals=first)
    np.testing.assert_array_equal(
        embedder.predict_proba(Z, queries, evals=first), expected
    )
    np.testing.assert_array_equal(
        embedder.predict_proba(pd.DataFrame(Z.to_numpy()), queries, evals=first),
        expected,
    )


def test_wrong_encoder_dimension(router, pool):
    from locus_sklearn import QueryEncoder

    other = {q: np.ones(5, dtype=np.float32) for q in pool.encodings}
    broken = pickle.loads(pickle.dumps(router))
    broken.embedder_.encoder_ = QueryEncoder(other).fit()
    with pytest.raises(
        ValueError, match="5-dimensional query encodings.*32-dimensional"
    ):
        broken.embedder_.transform(pool.evals)


def test_bfloat16_inference_close_to_float32(router, pool):
    z32 = router.embedder_.transform(pool.evals)
    emb = pickle.loads(pickle.dumps(router.embedder_))
    emb.inference_dtype = "bfloat16"
    z16 = emb.transform(pool.evals)
    rel = np.linalg.norm(z16 - z32, axis=1) / np.linalg.norm(z32, axis=1)
    assert rel.max() < 0.05
    # P(correct) moves by under 2e-3 (4e-4 measured); the routing decision
    # changes only on near-ties of this barely trained router (float32 margin
    # under 2e-3: 5 of 400 queries, all under 3e-4).
    queries = pool.evals["query"].unique()
    p32 = emb.predict_proba(z32, queries, evals=pool.evals)
    p16 = emb.predict_proba(z16, queries, evals=pool.evals)
    top2 = np.sort(p32, axis=1)[:, -2:]
    changed = p16.argmax(axis=1) != p32.argmax(axis=1)
    assert np.abs(p16 - p32).max() < 2e-3
    assert (top2[changed, 1] - top2[changed, 0]).max(initial=0) < 2e-3


def test_pipeline_with_selector(pool, tiny_embedder):
    pipe = Pipeline(
        [
            ("embed", tiny_embedder(pool.encodings, max_epochs=1)),
            ("select", KCenterSelector(3)),
        ]
    )
    pipe.fit(pool.evals)
    assert len(pipe[-1].selected_indices_) == 3
    assert pipe.transform(pool.evals).shape == (12, 3)


def test_tags_say_transform_keeps_no_input_dtype(router, pool):
    from sklearn.utils.estimator_checks import check_valid_tag_types

    from locus_sklearn import LocusEmbedder

    # transform gives float32 from a table of scores, whatever the input.
    tags = LocusEmbedder().__sklearn_tags__()
    assert tags.transformer_tags.preserves_dtype == []
    assert router.embedder_.transform(pool.evals).dtype == np.float32
    check_valid_tag_types("LocusEmbedder", LocusEmbedder())


def test_unfitted_embedder_raises(pool, tiny_embedder):
    with pytest.raises(NotFittedError):
        tiny_embedder(pool.encodings).transform(pool.evals)


def test_embedding_spread_hand_computed():
    from locus_sklearn._embedder import embedding_spread

    # Coordinates' std (ddof 1): sqrt(2) and 0, mean sqrt(2)/2; mean embedding
    # (2, 0), norm 2.
    Z = np.array([[1.0, 0.0], [3.0, 0.0]])
    assert embedding_spread(Z) == pytest.approx(np.sqrt(2) / 4)
    assert embedding_spread(np.ones((3, 4))) == 0.0
    assert embedding_spread(np.zeros((3, 4))) == 0.0  # identical, at the origin
    assert embedding_spread(np.array([[1.0], [-1.0]])) == np.inf


@pytest.mark.parametrize("kernel_readout", [True, False])
def test_warn_if_collapsed_below_the_threshold_only(kernel_readout, recwarn):
    from locus_sklearn import CollapsedEmbeddingWarning
    from locus_sklearn._embedder import COLLAPSE_SPREAD, warn_if_collapsed

    rng = np.random.default_rng(0)
    base = np.full((5, 8), 10.0)
    for relative, warns in (
        (0.1 * COLLAPSE_SPREAD, True),
        (10 * COLLAPSE_SPREAD, False),
    ):
        # Unit-variance noise scaled to the wanted spread of a norm-28 mean.
        noise = rng.normal(size=base.shape)
        noise /= noise.std(axis=0, ddof=1).mean()
        Z = base + relative * np.linalg.norm(base[0]) * noise
        recwarn.clear()
        warn_if_collapsed(Z, kernel_readout)
        caught = [w for w in recwarn if w.category is CollapsedEmbeddingWarning]
        assert len(caught) == warns
    with pytest.warns(CollapsedEmbeddingWarning) as caught:
        warn_if_collapsed(base, kernel_readout)
    message = str(caught[0].message)
    assert "spread by 0.0e+00" in message
    assert ("kernel readout" in message) is kernel_readout
    recwarn.clear()
    warn_if_collapsed(base[:1], kernel_readout)  # one model: no spread
    assert not [w for w in recwarn if w.category is CollapsedEmbeddingWarning]


def test_fit_warns_at_the_callers_line_when_embeddings_collapse(
    pool, tiny_embedder, monkeypatch
):
    import warnings

    from sklearn.model_selection import GroupKFold, cross_validate

    from locus_sklearn import CollapsedEmbeddingWarning, LocusEmbedder, LocusRouter

    # Every model embedded alike: what a collapsed fit returns.
    monkeypatch.setattr(
        LocusEmbedder,
        "_encoder_embeddings",
        lambda self, table, X: np.ones(
            (table.n_models, self.embedding_dim), np.float32
        ),
    )
    rows = pool.evals.groupby("model").head(40)
    # fit_transform has one wrapper more than fit (set_output's); a Pipeline
    # and cross_validate call through scikit-learn's and joblib's frames.
    for estimator, method in (
        (tiny_embedder(pool.encodings, max_epochs=1), "fit"),
        (tiny_embedder(pool.encodings, max_epochs=1), "fit_transform"),
        (LocusRouter(tiny_embedder(pool.encodings, max_epochs=1)), "fit"),
        (Pipeline([("embed", tiny_embedder(pool.encodings, max_epochs=1))]), "fit"),
        (LocusRouter(tiny_embedder(pool.encodings, max_epochs=1)), cross_validate),
    ):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if method is cross_validate:
                cross_validate(estimator, rows, cv=GroupKFold(2), groups=rows["query"])
            else:
                getattr(estimator, method)(rows)
        collapsed = [w for w in caught if w.category is CollapsedEmbeddingWarning]
        assert len(collapsed) == (2 if method is cross_validate else 1), method
        assert {w.filename for w in collapsed} == {__file__}
        assert "training models" in str(collapsed[0].message)
        assert "agreement_weight=0.3" in str(collapsed[0].message)
        # ... and the configuration the training guide gives for identity work.
        assert "agreement_weight=0.1, refine_steps=10" in str(collapsed[0].message)


# ------------------------------------------ network parameters set after fit
@pytest.mark.parametrize(
    "name, value",
    [
        ("embedding_dim", 32),
        ("n_latents", 8),
        ("n_blocks", 2),
        ("n_heads", 4),
        ("hidden_dim", 32),
        ("kernel_readout", False),
        ("n_profile_regions", 2),
        ("standardize_embedding", True),
    ],
)
def test_network_params_set_after_fit_are_refused(
    router, pool, query_texts, fitted_copy, tmp_path, name, value
):
    """set_params(embedding_dim=32) after fit gave 16 columns but 32 feature
    names, and a file load refused; kernel_readout=False named the wrong value."""
    fitted = getattr(router.embedder_, name)
    embedder = fitted_copy(router.embedder_, **{name: value})
    match = (
        f"{name}={value!r} was set after fit, but the fitted network was built "
        f"with {name}={fitted!r}; refit, or set it back"
    )
    Z = router.embedder_.transform(pool.evals)
    calls = [
        lambda: embedder.transform(pool.evals),
        lambda: embedder.predict_proba(Z, query_texts[:3], evals=pool.evals),
        embedder.get_feature_names_out,
        lambda: embedder.save(tmp_path / "embedder.safetensors"),
    ]
    for call in calls:
        with pytest.raises(ValueError, match=match):
            call()
    assert not (tmp_path / "embedder.safetensors").exists()
    # Set back, the embedder is what it was.
    embedder.set_params(**{name: fitted})
    np.testing.assert_array_equal(embedder.transform(pool.evals), Z)


def test_training_only_params_may_change_after_fit(router, pool, fitted_copy, tmp_path):
    """lr, max_epochs, dropout and query_noise do not shape the fitted
    network: changed after fit, the embedder still embeds, saves and loads."""
    from locus_sklearn import LocusEmbedder

    params = dict(lr=0.01, max_epochs=9, dropout=0.3, query_noise=0.2)
    embedder = fitted_copy(router.embedder_, **params)
    Z = router.embedder_.transform(pool.evals)
    np.testing.assert_array_equal(embedder.transform(pool.evals), Z)
    assert len(embedder.get_feature_names_out()) == Z.shape[1]
    embedder.save(tmp_path / "embedder.safetensors")
    loaded = LocusEmbedder.load(tmp_path / "embedder.safetensors", device="cpu")
    assert {k: loaded.get_params()[k] for k in params} == params
    np.testing.assert_array_equal(loaded.transform(pool.evals), Z)


# ---------------------------------------------------------------- devices
@pytest.mark.parametrize("device", ["xpu", "hpu", "lazy"])
def test_devices_of_other_backends_are_checked_by_name(device):
    # Passed as valid, then failed inside torch (AssertionError "not compiled
    # with XPU", a missing torch.hpu module) with no word of device=.
    from locus_sklearn._device import resolve_device

    try:
        torch.empty(0, device=device)
    except Exception:  # noqa: BLE001 - the backend is not usable here
        with pytest.raises(ValueError, match=f"device='{device}' is not usable"):
            resolve_device(device)
    else:
        pytest.skip(f"this torch can use {device}")


def test_a_cuda_index_past_the_machines_gpus_is_refused(monkeypatch):
    from locus_sklearn._device import resolve_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert resolve_device("cuda:0") == "cuda:0"
    with pytest.raises(ValueError, match=r"has 1 CUDA device\(s\), cuda:0 to cuda:0"):
        resolve_device("cuda:3")


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a CPU-only torch")
def test_unusable_device_fails_before_the_encoder_is_built(pool, monkeypatch):
    """device='cuda' with the default encoder failed inside the model's
    loading (torch's AssertionError); any encoder fails before encoding."""
    from locus_sklearn import LocusEmbedder, LocusRouter, QueryEncoder, _encoders

    def never(*args, **kwargs):
        raise AssertionError("the encoder model was loaded")

    monkeypatch.setattr(_encoders, "_load_sentence_transformer", never)
    encoded = []

    class Encoder:
        def encode(self, texts):
            encoded.append(len(texts))
            return np.ones((len(texts), 4))

    rows = pool.evals.groupby("model").head(20)
    for encoder in (None, Encoder()):
        for estimator in (
            LocusEmbedder(encoder, device="cuda"),
            LocusRouter(LocusEmbedder(encoder, device="cuda")),
        ):
            with pytest.raises(ValueError, match="device='cuda' needs CUDA"):
                estimator.fit(rows)
    with pytest.raises(ValueError, match="device='cuda' needs CUDA"):
        QueryEncoder(device="cuda").fit()
    with pytest.raises(ValueError, match="device='gpu' is not a torch device"):
        QueryEncoder(device="gpu").fit()
    assert not encoded
    # Mappings and objects do not run on a device: QueryEncoder ignores it.
    QueryEncoder({"q": [1.0]}, device="cuda").fit()


def test_few_evaluations_warning_says_what_enc_size_bounds(router, pool):
    """The warning called enc_size[0] the smallest set the encoder trained
    on, but a training model with few rows gives smaller sets."""
    from locus_sklearn import FewEvaluationsWarning

    few = pool.evals.groupby("model").head(5)
    with pytest.warns(FewEvaluationsWarning) as record:
        router.embedder_.transform(few)
    message = str(record[0].message)
    assert "the smallest set training draws from a model with enough" in message
    assert "trained on" not in message


def test_fit_transform_warns_of_few_evaluations_once_as_transform_does(
    tiny_embedder,
):
    """fit_transform (what a Pipeline calls) embedded models from fewer than
    enc_size[0] evaluations without the warning fit().transform() gives."""
    import warnings

    from locus_sklearn import FewEvaluationsWarning
    from locus_sklearn.datasets import make_model_pool

    small = make_model_pool(
        n_models=6, n_queries=60, evals_per_model=30, random_state=0
    )

    def few_evaluations_warnings(method, *args):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            method(*args)
        return [w for w in caught if issubclass(w.category, FewEvaluationsWarning)]

    embedder = tiny_embedder(small.encodings, max_epochs=1, enc_size=(40, 128))
    (caught,) = few_evaluations_warnings(embedder.fit_transform, small.evals)
    assert "6 model(s) have fewer than enc_size[0]=40" in str(caught.message)
    assert caught.filename == __file__
    # fit alone returns no embedding (and training caps its sets to a
    # model's rows): it does not warn; transform and a Pipeline's fit do.
    assert few_evaluations_warnings(embedder.fit, small.evals) == []
    assert len(few_evaluations_warnings(embedder.transform, small.evals)) == 1
    pipeline = Pipeline([("embed", embedder), ("select", KCenterSelector(2))])
    assert len(few_evaluations_warnings(pipeline.fit, small.evals)) == 1


def test_few_evaluations_warning_names_the_fewest_with_their_counts(tiny_embedder):
    """The models named are those with the count given: it named the first
    three by name (10 evaluations each) beside the smallest count (1, another
    model's)."""
    from locus_sklearn import FewEvaluationsWarning
    from locus_sklearn.datasets import make_model_pool

    pool = make_model_pool(n_models=6, n_queries=40, evals_per_model=12, random_state=0)
    evals = pool.evals
    names = sorted(evals["model"].unique())
    counts = {name: 10 for name in names}
    counts[names[-1]], counts[names[2]] = 1, 3
    evals = pd.concat([evals[evals["model"] == m].head(k) for m, k in counts.items()])
    embedder = tiny_embedder(pool.encodings, max_epochs=1, enc_size=(20, 64))
    embedder.fit(pool.evals)
    with pytest.warns(FewEvaluationsWarning) as caught:
        embedder.transform(evals)
    message = str(caught[0].message)
    assert (
        "6 model(s) have fewer than enc_size[0]=20 evaluations (the smallest set "
        "training draws from a model with enough evaluations), fewest first: "
        f"[{names[-1]!r}, {names[2]!r}, {names[0]!r}, ...] with 1, 3, 10: " in message
    )


@pytest.mark.parametrize("embedding_dim", [1, 2])
def test_embedding_dims_a_layer_norm_collapses_are_refused(
    pool, tiny_embedder, model_names, rows_of, embedding_dim
):
    """z is the output of a LayerNorm over d values (d − 2 degrees of
    freedom): at d = 1 every model got the LayerNorm's bias, at d = 2 one of
    two points. Both trained and returned such embeddings."""
    evals = rows_of(pool.evals, model_names[:4])
    embedder = tiny_embedder(
        pool.encodings, embedding_dim=embedding_dim, n_heads=1, max_epochs=1
    )
    with pytest.raises(
        InvalidParameterError,
        match=rf"'embedding_dim' parameter .* range \[3, inf\)\. Got {embedding_dim}",
    ):
        embedder.fit(evals)
    # The smallest accepted size fits.
    embedder.set_params(embedding_dim=3).fit(evals)
    assert embedder.transform(evals).shape == (4, 3)


# A 2-dimensional LayerNorm output collapses, as the test shows.
@pytest.mark.filterwarnings("ignore::locus_sklearn.CollapsedEmbeddingWarning")
def test_load_refuses_a_saved_embedding_dim_below_3(
    pool, tiny_embedder, model_names, rows_of, tmp_path, monkeypatch
):
    """A file saved by a version that accepted embedding_dim=2 is refused
    at load, naming the file and the parameter (load checks the saved
    hyper-parameters against the estimator's constraints)."""
    from numbers import Integral

    from sklearn.utils._param_validation import Interval

    from locus_sklearn import LocusEmbedder

    constraints = dict(LocusEmbedder._parameter_constraints)
    constraints["embedding_dim"] = [Interval(Integral, 1, None, closed="left")]
    monkeypatch.setattr(LocusEmbedder, "_parameter_constraints", constraints)
    path = tmp_path / "tiny.safetensors"
    evals = rows_of(pool.evals, model_names[:4])
    tiny_embedder(pool.encodings, embedding_dim=2, n_heads=1, max_epochs=1).fit(
        evals
    ).save(path)
    monkeypatch.undo()
    with pytest.raises(
        ValueError, match=rf"{path.name}.*'embedding_dim' parameter .* Got 2"
    ):
        LocusEmbedder.load(path)


def test_predict_proba_ignores_evals_without_the_kernel_readout(
    pool, query_texts, tiny_embedder
):
    """Documented as ignored, evals were validated and every query encoded:
    one missing from a mapping encoder was a ValueError."""
    embedder = tiny_embedder(pool.encodings, kernel_readout=False, max_epochs=1)
    embedder.fit(pool.evals)
    Z = embedder.transform(pool.evals)
    evals = pool.evals.copy()
    evals.loc[evals.index[0], "query"] = "a query the encoder lacks"
    queries = query_texts[:3]
    np.testing.assert_array_equal(
        embedder.predict_proba(Z, queries, evals=evals),
        embedder.predict_proba(Z, queries),
    )


def test_an_accelerator_lacking_what_training_reads_is_named(pool, tiny_embedder):
    # The constraint asks for prepare and reduce: an object with only those
    # failed deep inside training with an AttributeError.
    class NotAnAccelerator:
        def prepare(self, *args):
            return args

        def reduce(self, *args):
            return args

    embedder = tiny_embedder(pool.encodings, accelerator=NotAnAccelerator())
    with pytest.raises(TypeError, match="accelerator=.* has no unwrap_model, "):
        embedder.fit(pool.evals)


def test_a_model_fitted_on_cpu_0_pickles_and_loads_back(pool, tiny_embedder):
    # torch cannot restore storages tagged "cpu:0": the model pickled (joblib,
    # n_jobs workers) but never loaded back. Any CPU device is "cpu".
    import torch

    from locus_sklearn._device import resolve_device

    assert resolve_device("cpu:0") == resolve_device(torch.device("cpu", 1)) == "cpu"
    emb = tiny_embedder(pool.encodings, device="cpu:0").fit(pool.evals)
    loaded = pickle.loads(pickle.dumps(emb))
    np.testing.assert_array_equal(
        loaded.transform(pool.evals), emb.transform(pool.evals)
    )
    assert emb.device == "cpu:0"  # the parameter as given
