"""Inputs of the inspection toolkit: distance matrices given as embeddings,
pools that share no query, close embeddings and tuple model names."""

import re
import threading
import warnings

import numpy as np
import pandas as pd
import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from locus_sklearn import FewEvaluationsWarning
from locus_sklearn._warnings import FILTERS_LOCK
from locus_sklearn.baselines import SingleBestRouter
from locus_sklearn.inspection import (
    calibrate_fingerprint_threshold,
    distance_disagreement_correlation,
    embed_profile,
    embedding_dimensionality,
    fallback_order,
    fallback_routing_accuracy,
    model_linkage,
    nearest_models,
    neighbor_agreement,
    plot_model_dendrogram,
    plot_model_map,
    plot_portfolio_curve,
    profile_recall_at_k,
    score_disagreement,
    task_profiles,
)
from locus_sklearn.inspection._common import router_embeddings

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    import matplotlib.pyplot as plt

    plt.close("all")


@pytest.fixture(scope="module")
def evals():
    """Six models scored 0/1 on the same 40 queries, at different rates."""
    rng = np.random.default_rng(0)
    models = list("abcdef")
    p = rng.random(len(models))
    scores = (rng.random((len(models), 40)) < p[:, None]).astype(np.float64)
    return pd.DataFrame(
        {
            "model": np.repeat(models, 40),
            "query": [f"q{i}" for i in range(40)] * len(models),
            "score": scores.ravel(),
        }
    )


@pytest.fixture(scope="module")
def distances(evals):
    return score_disagreement(evals, min_shared=1).distance


# ------------------------------------------- a distance matrix as embeddings

_CALLS = {
    "nearest_models": lambda D, evals, **kw: nearest_models(D, "a", k=1, **kw),
    "fallback_order": lambda D, evals, **kw: fallback_order(D, **kw),
    "neighbor_agreement": lambda D, evals, **kw: neighbor_agreement(D, evals, **kw),
    "distance_disagreement_correlation": (
        lambda D, evals, **kw: distance_disagreement_correlation(D, evals, **kw)
    ),
    "model_linkage": lambda D, evals, **kw: model_linkage(D, **kw),
    "fallback_routing_accuracy": lambda D, evals, **kw: fallback_routing_accuracy(
        SingleBestRouter().fit(evals), evals, embeddings=D, **kw
    ),
    "plot_model_map": lambda D, evals, **kw: plot_model_map(D, method="mds", **kw),
    "plot_model_map_tsne": (
        lambda D, evals, **kw: plot_model_map(D, method="tsne", random_state=0, **kw)
    ),
    "plot_model_dendrogram": lambda D, evals, **kw: plot_model_dendrogram(D, **kw),
}

_LOOKS_LIKE = (
    r"^embeddings is a square DataFrame with the same models as index and "
    r"columns .* it looks like a distance matrix .* read as embeddings with "
    r"metric='(cosine|euclidean)'\. Pass metric=\"precomputed\""
)


@pytest.mark.parametrize("function", list(_CALLS))
def test_distance_frame_without_precomputed_warns_once(function, evals, distances):
    # Only nearest_models and fallback_order warned; the other six read the
    # distances as embeddings silently, with plausible but other results.
    call = _CALLS[function]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call(distances, evals)
    looks_like = [w for w in caught if re.search(_LOOKS_LIKE, str(w.message))]
    assert len(looks_like) == 1, [str(w.message) for w in caught]
    assert looks_like[0].category is UserWarning
    assert looks_like[0].filename == __file__  # points at the caller's line
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        call(distances, evals, metric="precomputed")


def test_distance_frame_warns_in_a_pca_map(evals, distances):
    # method="pca" takes embeddings only (precomputed is refused), and read a
    # distance matrix as embeddings without a word.
    with pytest.warns(UserWarning, match=_LOOKS_LIKE):
        plot_model_map(distances, method="pca")


def test_distance_frame_in_another_column_order_warns(evals, distances):
    # fallback_routing_accuracy matches a distance matrix's columns to the
    # router's models by name, in any order: such a matrix warns too.
    shuffled = distances.loc[list("cabfed"), list("fedcba")]
    router = SingleBestRouter().fit(evals)
    with pytest.warns(UserWarning, match=_LOOKS_LIKE) as caught:
        fallback_routing_accuracy(router, evals, embeddings=shuffled)
    # Other functions take distances only in the index's order: the advice
    # says how, and following it works.
    advice = r"as embeddings\.loc\[:, embeddings\.index\]\.$"
    assert re.search(advice, str(caught[0].message))
    with pytest.warns(UserWarning, match=advice):
        nearest_models(shuffled, "a", k=1)
    aligned = shuffled.loc[:, shuffled.index]
    assert nearest_models(aligned, "a", k=1, metric="precomputed").equals(
        nearest_models(distances, "a", k=1, metric="precomputed")
    )


def test_only_a_distance_like_frame_warns(evals, distances):
    router = SingleBestRouter().fit(evals)
    embeddings = distances + np.eye(len(distances))  # no zero self-distance
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fallback_order(embeddings)
        neighbor_agreement(embeddings, evals)
        # A caller that hands the matrix on to a precomputed selector
        # (portfolio_curve) compares no embeddings: nothing to warn about.
        router_embeddings(router, distances)


# --------------------------------------------------------- undefined values


def test_neighbor_agreement_without_a_shared_query_raises():
    # It returned agreement NaN, random_agreement NaN and n_models 0 silently,
    # where distance_disagreement_correlation raises on the same input.
    Z = [[1.0, 0.0], [0.9, 0.2], [0.0, 1.0]]
    disjoint = {
        "model": ["a", "b", "c"],
        "query": ["q1", "q2", "q3"],
        "score": [1, 0, 1],
    }
    with pytest.raises(ValueError, match="No two of the 3 models share a query"):
        neighbor_agreement(Z, disjoint)
    with pytest.raises(ValueError, match="model pair"):
        distance_disagreement_correlation(Z, disjoint)


def test_neighbor_agreement_warns_of_a_k_without_shared_queries():
    # By cosine distance, a and b are each other's nearest and c is far from
    # both; c shares no query. k=1: a-b agree on q1 only, 1 - 1/2 = 0.5 for
    # a and b (c is not counted); k=2 pairs every model with one it shares
    # no query with, so that row has nothing to average. Random agreement:
    # 0.5 for a and b, none for c.
    Z = [[1.0, 0.0], [0.9, 0.2], [0.0, 1.0]]
    evals = {
        "model": ["a", "a", "b", "b", "c"],
        "query": ["q1", "q2", "q1", "q2", "q9"],
        "score": [1, 0, 1, 1, 0],
    }
    with pytest.warns(UserWarning, match=r"^For k=2, no model shares a query"):
        result = neighbor_agreement(Z, evals, k=[1, 2])
    expected = pd.DataFrame(
        {
            "k": [1, 2],
            "agreement": [0.5, np.nan],
            "random_agreement": [0.5, 0.5],
            "n_models": [2, 0],
        }
    )
    pd.testing.assert_frame_equal(result, expected)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        neighbor_agreement(Z, evals, k=1)


def test_retained_is_nan_with_a_warning_when_the_routed_model_scores_0():
    # Every score is 0: accuracy / no_outage_accuracy is 0 / 0.
    Z = [[1.0, 0.0], [0.9, 0.2], [0.0, 1.0]]
    zeros = {"model": list("aabbcc"), "query": ["q1", "q2"] * 3, "score": [0] * 6}
    router = SingleBestRouter().fit(zeros)
    with pytest.warns(UserWarning, match=r"^For k=1, the routed models score 0"):
        result = fallback_routing_accuracy(router, zeros, embeddings=Z)
    assert result[["accuracy", "no_outage_accuracy", "n_queries"]].iloc[0].tolist() == [
        0.0,
        0.0,
        2,
    ]
    assert np.isnan(result["retained"].iloc[0])


# --------------------------------------------------- close embeddings, exact


def test_euclidean_distances_of_close_embeddings_are_exact():
    # [1, 0], [1, 1e-7], [1, 3e-7]: the differences are exact, so are the
    # distances 1e-7, 3e-7 (a-c) and 2e-7 (b-c); the expansion
    # |x|^2 - 2 x.y + |y|^2 gave 9.996e-08, 2.9988e-07 and 1.9992e-07.
    evals = {
        "model": ["a"] * 4 + ["b"] * 4 + ["c"] * 4,
        "query": ["q1", "q2", "q3", "q4"] * 3,
        "score": [1, 1, 0, 0, 1, 1, 0, 1, 0, 0, 1, 1],
    }
    Z = [[1.0, 0.0], [1.0, 1e-7], [1.0, 3e-7]]
    result = distance_disagreement_correlation(Z, evals, metric="euclidean")
    np.testing.assert_allclose(result.pairs["distance"], [1e-7, 3e-7, 2e-7], rtol=1e-12)
    # At any scale, by a power of two exactly.
    for scale in (2.0**-700, 2.0**600):
        scaled = distance_disagreement_correlation(
            np.multiply(Z, scale), evals, metric="euclidean"
        )
        np.testing.assert_allclose(
            scaled.pairs["distance"], np.array([1e-7, 3e-7, 2e-7]) * scale, rtol=1e-12
        )


def test_nearest_models_and_fallback_order_agree_on_close_embeddings():
    # Row 0 is 1.0e-7 from row 1 and 9.948e-8 from row 2 (the differences
    # are exact): nearest_models ranked row 1 first, at the same rounded
    # distance as row 2, while fallback_order put row 2 first.
    Z = np.array(
        [
            [
                1.4934311452207607,
                -1.2590655321041202,
                1.5139237747390626,
                1.3458754237823045,
            ],
            [
                1.4934311910633693,
                -1.2590655165874696,
                1.513923756319978,
                1.3458755093301047,
            ],
            [
                1.4934312104190104,
                -1.259065472181691,
                1.5139238184794528,
                1.3458754356687876,
            ],
        ]
    )
    exact = np.sqrt(np.sum(np.square(Z[1:] - Z[0]), axis=1))
    assert exact[1] < exact[0]
    nearest = nearest_models(Z, 0, k=2, metric="euclidean")
    assert nearest["model"].tolist() == [2, 1]
    np.testing.assert_allclose(nearest["distance"], exact[::-1], rtol=1e-12)
    order = fallback_order(Z, metric="euclidean")
    assert order.loc[0].tolist() == [2, 1]
    for i in range(3):
        assert (
            order.loc[i].tolist()
            == nearest_models(Z, i, k=2, metric="euclidean")["model"].tolist()
        )


# --------------------------------------------------------- tuple model names

_TUPLES = [("f1", "a"), ("f1", "b"), ("f2", "c")]
_Z = np.array([[1.0, 0.0], [0.9, 0.2], [0.0, 1.0]])


def test_tuple_model_names_name_the_models():
    # A MultiIndex's rows (or names= of tuples) were read as a second axis:
    # "names must have one name per row of embeddings, shape (3,); got shape
    # (3, 2)".
    frame = pd.DataFrame(_Z, index=pd.MultiIndex.from_tuples(_TUPLES))
    expected = [
        [("f1", "b"), ("f2", "c")],
        [("f1", "a"), ("f2", "c")],
        [("f1", "b"), ("f1", "a")],
    ]
    for order in (fallback_order(frame), fallback_order(_Z, names=_TUPLES)):
        assert order.index.tolist() == _TUPLES
        assert order.to_numpy().tolist() == expected
    for nearest in (
        nearest_models(frame, ("f1", "a"), k=2),
        nearest_models(_Z, ("f2", "c"), k=1, names=_TUPLES),
    ):
        assert all(isinstance(m, tuple) for m in nearest["model"])
    assert nearest_models(frame, ("f1", "a"), k=2)["model"].tolist() == expected[0]
    assert nearest_models(_Z, ("f2", "c"), k=1, names=_TUPLES)["model"].tolist() == [
        ("f1", "b")
    ]
    D = pd.DataFrame(
        np.array([[0.0, 0.1, 0.6], [0.1, 0.0, 0.5], [0.6, 0.5, 0.0]]),
        index=pd.MultiIndex.from_tuples(_TUPLES),
        columns=pd.MultiIndex.from_tuples(_TUPLES),
    )
    nearest = nearest_models(D, ("f2", "c"), k=1, metric="precomputed")
    assert nearest["model"].tolist() == [("f1", "b")]


def test_tuples_that_are_not_names_are_still_refused():
    with pytest.raises(TypeError, match=r"model must be one model name.*one name"):
        nearest_models(_Z, ("f1", "x"), k=1, names=_TUPLES)
    with pytest.raises(ValueError, match=r"names must have one name per row.*\(3, 1\)"):
        fallback_order(_Z, names=np.array([["a"], ["b"], ["c"]]))
    with pytest.raises(TypeError, match="names must hold hashable model names"):
        fallback_order(_Z, names=[["a"], ["b"], ["c"]])


# ------------------------------------------- hypothetical models (profiles)


def _few(caught):
    return [w for w in caught if issubclass(w.category, FewEvaluationsWarning)]


def test_profile_recall_warns_of_few_evaluations_by_n_evals(router, pool):
    # The embedder's warning came through as it was: "12 model(s) have fewer
    # than enc_size[0]=16 evaluations ..., e.g. ['profile00', 'profile01',
    # ...] with 8 ... give each model at least 16 scored queries", naming
    # internal models, though each real model has 200 evaluations.
    kwargs = {"k": 1, "n_evals": 8, "random_state": 0}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        profile_recall_at_k(router, pool.evals, **kwargs)
    few = _few(caught)
    assert len(few) == 1
    assert str(few[0].message) == (
        "n_evals=8 is fewer evaluations than the embedder's enc_size[0]=16: a "
        "profile is embedded from that many evaluations, so its embedding is less "
        "reliable (as a real model's from as few would be). To embed profiles as "
        "the embedder was trained, raise n_evals to at least 16."
    )
    assert few[0].filename == __file__
    with warnings.catch_warnings():
        warnings.simplefilter("error", FewEvaluationsWarning)
        with pytest.raises(FewEvaluationsWarning, match=r"^n_evals=8 is fewer"):
            profile_recall_at_k(router, pool.evals, **kwargs)
        # 16 evaluations per profile: no warning.
        profile_recall_at_k(router, pool.evals, k=1, n_evals=16, random_state=0)


def test_embed_profile_warns_of_a_profile_short_of_queries(router, pool):
    # n_evals=20 is enough, but the tasks of profile 'x' have 10 queries, all
    # drawn: that, not n_evals, is the cause, and 'x' is named.
    queries = pool.queries["query"].tolist()
    by_task = {"few": queries[:10], "many": queries[10:110]}
    profiles = pd.DataFrame(
        {"few": [0.5, np.nan], "many": [np.nan, 0.5]}, index=["x", "y"]
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        embed_profile(router, profiles, by_task, n_evals=20, random_state=0)
    few = _few(caught)
    assert len(few) == 1
    assert str(few[0].message).startswith(
        "The tasks of 1 profile(s) ['x'] have fewer queries than n_evals=20 and "
        "the embedder's enc_size[0]=16 ([10]), all of which are drawn: "
    )
    assert str(few[0].message).endswith("give those tasks more queries.")
    assert few[0].filename == __file__


class _WarnsFew:
    """A stand-in embedder (no enc_size) that warns of few evaluations, and
    notes whether another thread could take the library's filters lock
    meanwhile."""

    def __init__(self):
        self.lock_free = []

    def transform(self, evals):
        def probe():
            got = FILTERS_LOCK.acquire(blocking=False)
            if got:
                FILTERS_LOCK.release()
            self.lock_free.append(got)

        thread = threading.Thread(target=probe)
        thread.start()
        thread.join()
        warnings.warn(
            "model(s) 'profile0' have few evaluations",
            FewEvaluationsWarning,
            stacklevel=1,
        )
        n = evals["model"].nunique()
        return np.column_stack([np.arange(1.0, n + 1), np.ones(n)])  # distinct


def test_embed_profile_records_the_warning_under_the_filters_lock():
    # The embedder's warning is recorded, to be said again in terms of
    # n_evals, by a block that swaps the process-wide filters: under the
    # library's lock, so that two such blocks in two threads cannot leave
    # each other's filters in place.
    embedder = _WarnsFew()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        embed_profile(
            embedder,
            {"t": 0.5},
            {"t": [f"q{i}" for i in range(10)]},
            n_evals=4,
            random_state=0,
        )
    assert embedder.lock_free == [False]
    assert [str(w.message) for w in _few(caught)] == [
        "n_evals=4 is fewer evaluations than the embedder's smallest training "
        "set: a profile is embedded from that many evaluations, so its embedding "
        "is less reliable (as a real model's from as few would be). To embed "
        "profiles as the embedder was trained, raise n_evals."
    ]
    assert _few(caught)[0].filename == __file__


def test_fingerprint_calibration_records_the_warning_under_the_filters_lock():
    # It shares embed_profile's recording; it was not under the lock.
    embedder = _WarnsFew()
    evals = pd.DataFrame(
        {
            "model": np.repeat(["a", "b"], 10),
            "query": [f"q{i}" for i in range(10)] * 2,
            "score": np.tile([1.0, 0.0], 10),
        }
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        calibrate_fingerprint_threshold(
            embedder, evals, n_evals=4, n_resamples=2, random_state=0
        )
    assert embedder.lock_free == [False]
    assert [str(w.message)[:62] for w in _few(caught)] == [
        "n_evals=4 is fewer evaluations than the embedder's smallest tr"
    ]


class _TaskAccuracy:
    def transform(self, evals):
        return evals.groupby(["model", "task"])["score"].mean().unstack().to_numpy()


def test_embed_profile_needs_no_queries_for_a_task_no_profile_gives():
    # A task_profiles row of a model never scored on 'law' (NaN there), with
    # the model's own queries, was refused: "task_accuracies has task(s)
    # ['law'] with no queries in queries_by_task".
    evals = pd.DataFrame(
        {
            "model": ["a"] * 4 + ["b"] * 2,
            "query": ["m1", "m2", "c1", "c2", "l1", "l2"],
            "score": [1, 0, 1, 1, 1, 0],
            "task": ["math", "math", "code", "code", "law", "law"],
        }
    )
    profiles = task_profiles(evals).loc[["a"]]
    assert np.isnan(profiles.loc["a", "law"])
    own = evals[evals["model"] == "a"]
    got = embed_profile(_TaskAccuracy(), profiles, own, n_evals=4, scores="exact")
    np.testing.assert_array_equal(got, [[1.0, 0.5]])  # code, math
    listed = {"math": ["m1", "m2"], "code": ["c1", "c2"], "law": []}
    np.testing.assert_array_equal(
        got,
        embed_profile(_TaskAccuracy(), profiles, listed, n_evals=4, scores="exact"),
    )
    # A task that a profile gives an accuracy still needs queries.
    with pytest.raises(ValueError, match=r"task\(s\) \['law'\] with no queries"):
        embed_profile(_TaskAccuracy(), task_profiles(evals), own, n_evals=4)


# ------------------------------------------------ models that coincide, plots


def test_pca_map_draws_parallel_rows_at_the_origin():
    # Positive multiples of one vector: every cosine distance is 0, and the
    # docstring promises the origin. Normalised, the rows differ by an ulp,
    # which the exact test (X == X[0]).all() missed: PCA drew the noise at
    # ~1e-16, autoscaled to look like a spread pool.
    X = [[0.1, 0.7, 0.3], [0.3, 2.1, 0.9], [0.7, 4.9, 2.1]]
    for method in ("pca", "mds"):
        ax = plot_model_map(X, names=["a", "b", "c"], method=method)
        np.testing.assert_array_equal(ax.collections[0].get_offsets(), np.zeros((3, 2)))
        assert [t.xy for t in ax.texts] == [(0.0, 0.0)] * 3


@settings(max_examples=50, deadline=None)
@given(
    t=st.lists(st.floats(-1e3, 1e3), min_size=2, max_size=8, unique=True),
    direction=st.lists(st.floats(-1.0, 1.0), min_size=2, max_size=5),
    offset=st.floats(-1e3, 1e3),
)
@example(t=[0.0, 1.0], direction=[1.0, 1.0, 1.0], offset=0.0)  # gave 1 - 2e-16
def test_participation_ratio_of_points_on_a_line_is_1(t, direction, offset):
    # (sum v)^2 / sum v^2 is documented in [1, min(n - 1, d)]; one component
    # gives 1, but total**2 (C pow) rounded otherwise than the squares summed
    # below it and gave 0.9999999999999998.
    u = np.asarray(direction)
    # A spread of at least 0.1 against entries of at most ~3e3: rows within
    # rounding of one another are one point (ratio 0), not a line.
    assume(np.ptp(t) >= 1.0 and np.linalg.norm(u) >= 0.1)
    Z = np.outer(t, u) + offset
    ratio = embedding_dimensionality(Z).participation_ratio
    assert ratio >= 1.0
    # The rounding of Z and of its centring leaves a second singular value
    # about sqrt(n d) eps |Z| / spread (< 1e-10 here) of the first: the exact ratio
    # is 1 + O(that squared), below eps. What is left is the rounding of the
    # ratio's own sum and division, an ulp per term.
    assert ratio <= 1.0 + len(Z) * np.finfo(np.float64).eps


def test_participation_ratio_stays_in_its_bounds():
    eps = np.finfo(np.float64).eps
    assert (
        embedding_dimensionality([[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]]).participation_ratio
        == 1.0
    )
    rng = np.random.RandomState(0)
    for _ in range(500):
        n, d = rng.randint(2, 7), rng.randint(1, 5)
        ratio = embedding_dimensionality(rng.randn(n, d)).participation_ratio
        assert 1.0 <= ratio <= min(n - 1, d)
        line = np.outer(rng.randn(n), rng.randn(d)) + rng.randn(d)
        ratio = embedding_dimensionality(line).participation_ratio
        assert 1.0 <= ratio <= 1.0 + n * eps


_CURVE = pd.DataFrame(
    {
        "value": [1, 2],
        "accuracy": [0.6, 0.8],
        "random_mean": [0.5, 0.7],
        "random_std": [0.1, 0.05],
        "full_pool_accuracy": [0.85, 0.85],
    }
)
_X = np.array([[0.0, 0.0], [5.0, 5.0], [0.1, 0.0], [5.1, 5.0]])
_PLOTS = {
    "plot_model_dendrogram": lambda **kw: plot_model_dendrogram(_X, **kw),
    "plot_model_map": lambda **kw: plot_model_map(_X, **kw),
    "plot_portfolio_curve": lambda **kw: plot_portfolio_curve(_CURVE, **kw),
}
_FLAGS = [
    ("plot_model_dendrogram", "heatmap"),
    ("plot_model_map", "annotate"),
    ("plot_portfolio_curve", "random"),
    ("plot_portfolio_curve", "full_pool"),
]


@pytest.mark.parametrize(("function", "flag"), _FLAGS)
@pytest.mark.parametrize("value", ["False", "no", 0, 1.0, None])
def test_plot_flags_must_be_bools(function, flag, value):
    # "False" and "no" are truthy: heatmap="False" drew the heatmap,
    # annotate="no" the names, random="False" the random baseline.
    import matplotlib.pyplot as plt

    before = plt.get_fignums()
    message = f"{flag} must be a bool (True or False); got {value!r}."
    with pytest.raises(TypeError, match=f"^{re.escape(message)}$"):
        _PLOTS[function](**{flag: value})
    assert plt.get_fignums() == before
    for ok in (False, np.True_):
        _PLOTS[function](**{flag: ok})


@pytest.mark.parametrize("function", ["plot_model_map", "plot_portfolio_curve"])
def test_plot_ax_must_be_axes(function):
    # A Figure failed with "'Figure' object has no attribute 'scatter'", a
    # string with "'str' object has no attribute 'plot'", naming no parameter.
    import matplotlib.pyplot as plt

    fig = plt.figure()
    before = plt.get_fignums()
    for bad, shown in ((fig, "Figure <Figure size"), ("left", "str 'left'")):
        with pytest.raises(
            TypeError,
            match=rf"^ax must be a matplotlib Axes .* or None; got {re.escape(shown)}",
        ):
            _PLOTS[function](ax=bad)
        assert plt.get_fignums() == before
    ax = fig.add_subplot()
    assert _PLOTS[function](ax=ax) is ax
    assert plt.get_fignums() == before


def test_portfolio_curve_dtype_hint_names_the_bad_column():
    # The hint said curve['value'].astype(float) whichever column was wrong.
    curve = _CURVE.assign(accuracy=[True, False])
    with pytest.raises(
        TypeError,
        match=re.escape(
            "curve column(s) 'accuracy' (bool) must hold numbers (int or float "
            "dtype); convert them, e.g. curve['accuracy'].astype(float)."
        ),
    ):
        plot_portfolio_curve(curve)


@pytest.mark.parametrize("kind", ["bfloat16", "requires_grad"])
def test_torch_embeddings_of_any_float_dtype_are_read(kind):
    """A bfloat16 tensor, or one that requires grad, was refused with NumPy's
    message ("Got unsupported ScalarType BFloat16"); it is read as the same
    values in an array are."""
    import torch

    from locus_sklearn.inspection import (
        embedding_dimensionality,
        model_linkage,
        nearest_models,
    )

    # Exact in bfloat16: the tensor holds the array's values.
    Z = np.array([[1.0, 0.5, 0.0], [0.25, 1.0, 2.0], [-1.0, 0.0, 0.5], [2.0, 1.0, 1.0]])
    T = torch.tensor(Z, dtype=torch.bfloat16)
    if kind == "requires_grad":
        T = torch.tensor(Z, dtype=torch.float32, requires_grad=True)
    expected = embedding_dimensionality(Z)
    got = embedding_dimensionality(T)
    assert got.participation_ratio == expected.participation_ratio
    np.testing.assert_array_equal(model_linkage(T), model_linkage(Z))
    names = ["a", "b", "c", "d"]
    pd.testing.assert_frame_equal(
        nearest_models(T, "a", k=2, names=names),
        nearest_models(Z, "a", k=2, names=names),
    )
    pd.testing.assert_frame_equal(
        nearest_models(Z, T[1], k=2, names=names),
        nearest_models(Z, Z[1], k=2, names=names),
    )


# ------------------------------------------------------------- random_state
_SEED_EVALS = pd.DataFrame(
    {
        "model": np.repeat(["a", "b", "c"], 20),
        "query": [f"q{i}" for i in range(20)] * 3,
        "task": ["math", "code"] * 30,
        "score": [1.0] * 15 + [0.0] * 5 + [1.0, 0.0] * 10 + [0.0] * 15 + [1.0] * 5,
    }
)


def _seeded_portfolio(random_state):
    from locus_sklearn.baselines import KNNRouter
    from locus_sklearn.inspection import portfolio_curve

    encoder = {f"q{i}": [1.0, i / 20] for i in range(20)}
    router = KNNRouter(1, encoder=encoder).fit(_SEED_EVALS)
    Z = [[1.0, 0.0], [0.9, 0.1], [0.0, 1.0]]
    return portfolio_curve(
        router, _SEED_EVALS, [1, 2], embeddings=Z, random_state=random_state
    )


def _seeded_score_threshold(random_state):
    from locus_sklearn.inspection import calibrate_score_threshold

    return calibrate_score_threshold(
        _SEED_EVALS, n_evals=10, n_resamples=2, min_shared=5, random_state=random_state
    )


_SEEDED = {
    "embed_profile": lambda rs: embed_profile(
        _TaskAccuracy(),
        {"math": 0.5},
        {"math": [f"q{i}" for i in range(10)]},
        n_evals=4,
        random_state=rs,
    ),
    "profile_recall_at_k": lambda rs: profile_recall_at_k(
        _TaskAccuracy(), _SEED_EVALS, k=1, n_evals=10, random_state=rs
    ),
    "calibrate_fingerprint_threshold": lambda rs: calibrate_fingerprint_threshold(
        _TaskAccuracy(),
        _SEED_EVALS,
        n_evals=10,
        n_resamples=2,
        false_match_rate=0.5,
        metric="euclidean",
        random_state=rs,
    ),
    "portfolio_curve": _seeded_portfolio,
    "calibrate_score_threshold": _seeded_score_threshold,
    "plot_model_map[pca]": lambda rs: plot_model_map(_X, random_state=rs),
    "plot_model_map[mds]": lambda rs: plot_model_map(_X, method="mds", random_state=rs),
    "plot_model_map[tsne]": lambda rs: plot_model_map(
        _X, method="tsne", random_state=rs
    ),
}


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("abc", "'abc'"),
        (-1, "-1"),
        (2**32, "4294967296"),
        (True, "True, a bool,"),
        (np.False_, "np.False_, a bool,"),
        (1.5, "1.5"),
    ],
)
@pytest.mark.parametrize("call", list(_SEEDED))
def test_random_state_of_functions_is_checked_by_name(call, value, shown):
    # 'abc' and -1 failed inside NumPy or scikit-learn naming no parameter,
    # True seeded with 1 (the estimators refuse it), and plot_model_map took
    # any value for "pca" and "mds".
    import matplotlib.pyplot as plt

    function = call.split("[")[0]
    before = plt.get_fignums()
    message = (
        f"The 'random_state' parameter of {function} must be an int in the range "
        "[0, 4294967295], an instance of 'numpy.random.mtrand.RandomState' or "
        f"None. Got {shown} instead."
    )
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        _SEEDED[call](value)
    assert plt.get_fignums() == before  # refused before any figure is made
    for ok in (0, np.int64(3), np.random.RandomState(0), None):
        _SEEDED[call](ok)


# ------------------------------------------------------ model names as text
_ODD_NAMES = ["m$1$2", "x$\\bad{$", "mod\udce8le", "tab\there"]
# What each is drawn as: the name, a character that is not printable as its
# escape.
_DRAWN = ["m$1$2", "x$\\bad{$", "mod\\udce8le", "tab\\there"]


def _drawn(text):
    """The string matplotlib draws for a Text, and whether as mathtext."""
    return text._preprocess_math(text.get_text())


@pytest.mark.parametrize("plot", ["map", "dendrogram", "tree"])
def test_model_names_are_drawn_as_written(plot):
    # "m$1$2" was drawn as mathtext (m, italic 1, 2), "x$\bad{$" failed to
    # draw with a ValueError, and a lone surrogate failed at savefig with a
    # TypeError from matplotlib's font code.
    import io

    X = np.array([[0.0, 0.0], [0.1, 0.0], [5.0, 5.0], [5.1, 5.2]])
    if plot == "map":
        fig = plot_model_map(X, names=_ODD_NAMES, metric="euclidean").figure
        texts = fig.axes[0].texts
        # Annotations hold the (printable) name itself, never parsed.
        assert sorted(t.get_text() for t in texts) == sorted(_DRAWN)
    else:
        fig = plot_model_dendrogram(X, names=_ODD_NAMES, heatmap=plot == "dendrogram")
        ax = fig.axes[1] if plot == "dendrogram" else fig.axes[0]
        texts = ax.get_xticklabels()
        if plot == "dendrogram":
            texts += ax.get_yticklabels()
        # Tick labels hold the name with each $ escaped, as documented.
        assert sorted(t.get_text() for t in ax.get_xticklabels()) == sorted(
            n.replace("$", "\\$") for n in _DRAWN
        )
    assert sorted(_drawn(t) for t in texts) == sorted(
        (n, False) for n in _DRAWN * (len(texts) // len(_DRAWN))
    )
    fig.savefig(io.BytesIO(), format="png")


def test_group_names_are_drawn_as_written_in_the_legend():
    # A group is drawn as its legend label: "$" was read as mathtext there too.
    import io

    X = np.array([[0.0, 0.0], [0.1, 0.0], [5.0, 5.0], [5.1, 5.2]])
    fig = plot_model_map(
        X, names=list("abcd"), groups=_ODD_NAMES, metric="euclidean"
    ).figure
    texts = fig.axes[0].get_legend().get_texts()
    assert sorted(_drawn(t) for t in texts) == sorted((n, False) for n in _DRAWN)
    fig.savefig(io.BytesIO(), format="png")
