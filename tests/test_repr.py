"""Text and HTML reprs of estimators holding large precomputed encodings.

scikit-learn's repr formatted every vector of a mapping ``encoder=`` several
times: minutes for the 3,000 x 384 encodings of ``load_mmlu_pro``.
"""

import copy
import pickle
import time

import joblib
import numpy as np
import pytest
import torch
from sklearn.frozen import FrozenEstimator
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.utils import estimator_html_repr

from locus_sklearn import KCenterSelector, LocusEmbedder, LocusRouter, QueryEncoder
from locus_sklearn.baselines import KNNRouter, MatrixFactorizationRouter
from locus_sklearn.datasets import load_mmlu_pro, make_model_pool

# scikit-learn's repr of one estimator holding this took about 30 s (its HTML
# repr about a minute); the summary takes milliseconds.
N_QUERIES, N_FEATURES = 20_000, 64
LARGE = {
    f"q{i}": vector
    for i, vector in enumerate(
        np.random.default_rng(0).standard_normal((N_QUERIES, N_FEATURES))
    )
}
# Without its angle brackets, which the HTML repr escapes.
SUMMARY = f"dict of {N_QUERIES} queries x {N_FEATURES}"


def _seconds(function, *args):
    start = time.perf_counter()
    result = function(*args)
    return time.perf_counter() - start, result


@pytest.mark.parametrize(
    "make",
    [
        lambda: LocusEmbedder(LARGE),
        lambda: LocusRouter(LocusEmbedder(LARGE)),
        lambda: LocusRouter(FrozenEstimator(LocusEmbedder(LARGE))),
        lambda: QueryEncoder(LARGE),
        lambda: KNNRouter(encoder=LARGE),
        lambda: MatrixFactorizationRouter(encoder=LARGE),
    ],
    ids=["embedder", "router", "frozen", "query_encoder", "knn", "mf"],
)
def test_large_mapping_prints_as_a_summary_quickly(make):
    estimator = make()
    # Loose bounds: each took well over the bound before, far under it now.
    elapsed, text = _seconds(repr, estimator)
    assert elapsed < 5, elapsed
    assert SUMMARY in text and "array(" not in text
    # What Jupyter calls.
    elapsed, html = _seconds(estimator._repr_html_)
    assert elapsed < 5, elapsed
    assert SUMMARY in html and "array(" not in html
    elapsed, bundle = _seconds(estimator._repr_mimebundle_)
    assert elapsed < 5, elapsed
    assert SUMMARY in bundle["text/plain"] and SUMMARY in bundle["text/html"]
    # What was printed is a copy: the estimator still holds the mapping.
    assert _holds_large(estimator)


def _holds_large(estimator):
    """Whether ``estimator`` or one nested in it has LARGE as a parameter."""
    return _holds(estimator, LARGE)


def _holds(estimator, mapping):
    """Whether ``estimator`` or one nested in it (a Pipeline's steps too) has
    ``mapping`` as a parameter."""
    return any(
        value is mapping or (hasattr(value, "get_params") and _holds(value, mapping))
        for value in estimator.get_params(deep=True).values()
    )


def test_ordinary_estimators_print_as_scikit_learn_prints_them():
    # Printed by scikit-learn's repr before the summary existed. Inside a
    # Pipeline, scikit-learn lays a nested estimator out over several lines
    # only if it recognises its __repr__.
    small = {"q1": [3.0, 4.0]}
    router = LocusRouter(
        LocusEmbedder(small, embedding_dim=8, n_latents=4, max_epochs=2, lr=0.02),
        cost_weight=0.5,
    )
    assert repr(Pipeline([("router", router)])) == (
        "Pipeline(steps=[('router',\n"
        "                 LocusRouter(cost_weight=0.5,\n"
        "                             embedder=LocusEmbedder(embedding_dim=8,\n"
        "                                                    encoder={'q1': [3.0, 4.0]},\n"
        "                                                    lr=0.02, max_epochs=2,\n"
        "                                                    n_latents=4)))])"
    )
    assert repr(router) == (
        "LocusRouter(cost_weight=0.5,\n"
        "            embedder=LocusEmbedder(embedding_dim=8, encoder={'q1': [3.0, 4.0]},\n"
        "                                   lr=0.02, max_epochs=2, n_latents=4))"
    )
    assert repr(KNNRouter(k=3, encoder=small)) == (
        "KNNRouter(encoder={'q1': [3.0, 4.0]}, k=3)"
    )
    # Up to 30 entries (what scikit-learn shows of a mapping), as before.
    thirty = {f"q{i}": np.ones(2) for i in range(30)}
    assert "array([1., 1.])" in repr(QueryEncoder(thirty))


# A user's own dict of more than 30 vectors (not a QueryEncodings), small
# enough that scikit-learn's full print of it fails fast rather than slowly.
OWN = {f"q{i}": np.full(16, i / 40) for i in range(40)}


@pytest.mark.parametrize(
    "make",
    [
        lambda: make_pipeline(LocusEmbedder(OWN), KCenterSelector()),
        lambda: FrozenEstimator(LocusEmbedder(OWN)),
        lambda: GridSearchCV(
            LocusRouter(LocusEmbedder(OWN)), {"cost_weight": [0.0, 1.0]}
        ),
    ],
    ids=["pipeline", "frozen", "grid_search"],
)
def test_large_mapping_inside_a_scikit_learn_meta_estimator_prints_as_a_summary(
    make,
):
    # scikit-learn prints its meta-estimators itself, reading each step's
    # get_params() directly: it printed every vector (five minutes for 3,000
    # vectors of 384 floats in a Pipeline).
    estimator = make()
    text = repr(estimator)
    assert "LocusEmbedder(encoder=<dict of 40 queries x 16>)" in text
    assert "array(" not in text and "0.025" not in text
    html = estimator._repr_html_()
    assert "dict of 40 queries x 16" in html
    assert "array(" not in html and "0.025" not in html
    # The layout is scikit-learn's: a Pipeline step over several lines, the
    # frozen estimator as its parameter (it was printed as a tuple).
    if isinstance(estimator, Pipeline):
        assert text == (
            "Pipeline(steps=[('locusembedder',\n"
            "                 LocusEmbedder(encoder=<dict of 40 queries x 16>)),\n"
            "                ('kcenterselector', KCenterSelector())])"
        )
    if isinstance(estimator, FrozenEstimator):
        assert text == (
            "FrozenEstimator(estimator=LocusEmbedder(encoder=<dict of 40 queries x 16>))"
        )
    assert _holds(estimator, OWN)


def test_few_large_vectors_print_as_a_summary():
    # 30 entries or fewer were printed in full however long their vectors:
    # 30 vectors of 384 floats took seconds. More than 10 numbers in a value
    # is an encoding; up to 10, a worked example, printed as before.
    eleven = {"q1": np.ones(11), "q2": np.ones(2)}
    assert repr(QueryEncoder(eleven)) == (
        "QueryEncoder(encoder=<dict of 2 queries x 11>)"
    )
    # Any value counts, not only the first; lists and tensors too.
    assert "<dict of 2 queries x 2>" in repr(
        QueryEncoder({"a": [0.0, 1.0], "b": [0.5] * 11})
    )
    assert "<dict of 1 queries x 384>" in repr(QueryEncoder({"q": torch.ones(384)}))
    matrix = {"q": np.ones((2, 6))}  # 12 numbers
    assert "<dict of 1 queries x 2 x 6>" in repr(QueryEncoder(matrix))
    thirty = {f"q{i}": np.ones(384) for i in range(30)}
    assert "<dict of 30 queries x 384>" in QueryEncoder(thirty)._repr_html_().replace(
        "&lt;", "<"
    ).replace("&gt;", ">")
    # At most 10 numbers, or not numbers at all: printed in full.
    ten = {"q1": np.ones(10)}
    assert "array([1., 1., 1., 1., 1., 1., 1., 1., 1., 1.])" in repr(QueryEncoder(ten))
    texts = {"q1": "a query text longer than ten characters"}
    assert repr(QueryEncoder(texts)) == f"QueryEncoder(encoder={texts!r})"


def test_dataset_encodings_print_as_their_size_and_act_as_a_dict():
    pool = make_model_pool(
        n_models=4, n_queries=50, n_families=2, evals_per_model=10, random_state=0
    )
    encodings = pool.encodings
    assert repr(encodings) == "QueryEncodings(50 queries x 32)"
    assert isinstance(encodings, dict)
    plain = dict(encodings)
    for same in [
        pickle.loads(pickle.dumps(encodings)),
        copy.copy(encodings),
        copy.deepcopy(encodings),
    ]:
        assert type(same) is type(encodings)
        assert list(same) == list(plain)
        assert all(np.array_equal(same[q], plain[q]) for q in plain)
    # Pipeline(memory=) keys its cache on joblib's hash, equal for equal data.
    assert joblib.hash(encodings) == joblib.hash(copy.deepcopy(encodings))
    queries = list(plain)[:3]
    np.testing.assert_array_equal(
        QueryEncoder(encodings).fit().transform(queries),
        QueryEncoder(plain).fit().transform(queries),
    )
    # In a Pipeline, whose repr is scikit-learn's own, it prints as its size.
    pipe = make_pipeline(QueryEncoder(encodings))
    assert "QueryEncodings(50 queries x 32)" in repr(pipe)


def test_mmlu_pro_encodings_in_a_pipeline_print_quickly():
    encodings = load_mmlu_pro().encodings
    assert repr(encodings) == "QueryEncodings(3000 queries x 384)"
    pipe = make_pipeline(LocusEmbedder(encodings, max_epochs=2))
    elapsed, text = _seconds(repr, pipe)
    assert elapsed < 5, elapsed
    assert "QueryEncodings(3000 queries x 384)" in text
    elapsed, html = _seconds(estimator_html_repr, pipe)
    assert elapsed < 5, elapsed
    assert "QueryEncodings(3000 queries x 384)" in html


def test_repr_of_an_invalid_mapping_still_prints():
    # A ragged first vector (refused at fit) made repr raise, hiding the real
    # error in tracebacks and logs; an empty mapping has no vector length.
    from locus_sklearn._repr import summarize_mapping

    ragged = {f"q{i}": [[1.0, 2.0], [3.0]] for i in range(31)}
    assert summarize_mapping(ragged) == "31 queries x ?"
    assert "31 queries x ?" in repr(LocusEmbedder(ragged))
    assert summarize_mapping({}) == "0 queries x ?"
