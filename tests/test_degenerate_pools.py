"""Degenerate but valid pools: a model with a single evaluation (LocusRouter
fits it as add_models adds it), cross-validation folds that leave a model one
training row, known models that cannot be told apart, and model names that
look like numbers."""

import warnings

import numpy as np
import pandas as pd
import pytest
from sklearn.frozen import FrozenEstimator
from sklearn.model_selection import GroupKFold, cross_val_score

from locus_sklearn import FewEvaluationsWarning, LocusRouter
from locus_sklearn.baselines import SingleBestRouter
from locus_sklearn.datasets import make_model_pool
from locus_sklearn.inspection import calibrate_score_threshold, nearest_models


@pytest.fixture(scope="module")
def small_pool():
    return make_model_pool(
        n_models=4, n_families=2, n_queries=60, evals_per_model=40, random_state=0
    )


def _with_lonely(pool, name="fam0-lonely", score=1.0):
    """The pool's evaluations plus ``name`` scored on one query (sorting
    between the pool's models, so that its column is not simply last)."""
    first = pool.evals.iloc[0]
    lonely = pd.DataFrame(
        {"model": [name], "query": [first["query"]], "score": [score],
         "task": [first["task"]]}
    )  # fmt: skip
    return pd.concat([pool.evals, lonely], ignore_index=True), lonely


def _fit_quietly(router, evals, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return router.fit(evals, **kwargs)


def _assert_same_router(got, expected):
    assert got.classes_.tolist() == expected.classes_.tolist()
    # Embedded in other padded batches: equal to float32 rounding.
    np.testing.assert_allclose(
        got.model_embeddings_, expected.model_embeddings_, rtol=0, atol=1e-6
    )
    np.testing.assert_array_equal(got.model_mean_scores_, expected.model_mean_scores_)
    assert got.shrinkage_ == expected.shrinkage_
    assert got.shrinkage_scores_ == expected.shrinkage_scores_
    if expected.model_costs_ is None:
        assert got.model_costs_ is None
    else:
        np.testing.assert_array_equal(got.model_costs_, expected.model_costs_)
    frame, other = got.pool_evals_[1].to_frame(), expected.pool_evals_[1].to_frame()
    pd.testing.assert_frame_equal(frame, other)


@pytest.mark.parametrize("with_costs", [False, True], ids=["no_costs", "costs"])
def test_router_fit_adds_a_model_with_one_evaluation(
    small_pool, tiny_embedder, with_costs
):
    # Every peer router fits this table; LocusRouter.fit refused it, advising
    # transform(), which it lacks.
    evals, lonely = _with_lonely(small_pool)
    others = sorted(small_pool.evals["model"].unique())
    costs = dict(zip(others, np.linspace(1.0, 2.0, len(others)), strict=True))
    costs["fam0-lonely"] = 0.5
    fit_costs = {"model_costs": costs} if with_costs else {}
    embedder = tiny_embedder(small_pool.encodings, max_epochs=1)
    with pytest.warns(FewEvaluationsWarning, match=r"\['fam0-lonely'\] with 1\b"):
        router = LocusRouter(embedder).fit(evals, **fit_costs)
    assert router.classes_.tolist() == sorted([*others, "fam0-lonely"])
    assert router.model_mean_scores_[router.classes_.tolist().index("fam0-lonely")] == 1

    # The same as fitting without it, then add_models (same random_state).
    expected = _fit_quietly(
        LocusRouter(embedder),
        small_pool.evals,
        **({"model_costs": {m: costs[m] for m in others}} if with_costs else {}),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected.add_models(
            lonely, **({"model_costs": {"fam0-lonely": 0.5}} if with_costs else {})
        )
    _assert_same_router(router, expected)

    queries = small_pool.evals["query"].unique()[:10]
    proba = router.predict_proba(queries)
    assert proba.shape == (10, len(others) + 1) and np.isfinite(proba).all()
    np.testing.assert_allclose(proba, expected.predict_proba(queries), atol=1e-6)
    assert set(router.predict(queries)) <= set(router.classes_)


def test_frozen_embedder_treats_a_model_with_one_evaluation_as_added(
    small_pool, tiny_embedder
):
    # With a frozen embedder nothing is trained, but shrinkage_ is chosen on
    # held-out evidence: the lonely model's one row is none, and it had taken
    # part in the choice as if it were.
    evals, lonely = _with_lonely(small_pool)
    fitted = _fit_quietly(
        tiny_embedder(small_pool.encodings, max_epochs=1), small_pool.evals
    )
    router = _fit_quietly(LocusRouter(FrozenEstimator(fitted)), evals)
    expected = _fit_quietly(LocusRouter(FrozenEstimator(fitted)), small_pool.evals)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected.add_models(lonely)
    _assert_same_router(router, expected)


def test_router_fit_refuses_a_table_where_no_model_has_two_evaluations(
    tiny_embedder,
):
    evals = pd.DataFrame(
        {"model": ["a", "b", "b"], "query": ["q0", "q1", "q1"], "score": [1.0, 0, 1]}
    )
    encodings = {"q0": [1.0, 0.0], "q1": [0.0, 1.0]}
    router = LocusRouter(tiny_embedder(encodings, embedding_dim=4, max_epochs=1))
    with pytest.raises(ValueError) as info:
        router.fit(evals)
    assert str(info.value) == (
        "LocusRouter needs at least one model with 2 or more evaluations (one to "
        "encode, one to predict) to fit on; models with 1 are added to that pool "
        "as add_models adds them. All 2 model(s) of evals have 1: ['a', 'b']. "
        "Give at least one model evaluations on 2 distinct queries. evals has 3 "
        "rows but 2 distinct (model, query) pairs: the rows of a repeated pair are "
        "averaged into one evaluation, so a model needs 2 distinct queries."
    )
    assert not hasattr(router, "classes_")


def test_group_cv_by_query_scores_every_fold_that_leaves_a_model_one_row(
    small_pool, tiny_embedder
):
    # "thin" has 2 evaluations, on queries of two different folds: each fold
    # leaves it one training row, and fit refused it (a NaN fold).
    evals = small_pool.evals
    cv = GroupKFold(n_splits=3)
    fold_of = {}
    for fold, (_, test) in enumerate(cv.split(evals, groups=evals["query"])):
        fold_of.update(dict.fromkeys(evals["query"].iloc[test], fold))
    first = evals["query"].iloc[0]
    second = next(q for q in evals["query"] if fold_of[q] != fold_of[first])
    task_of = dict(zip(evals["query"], evals["task"], strict=True))
    thin = pd.DataFrame(
        {"model": ["thin", "thin"], "query": [first, second], "score": [1.0, 0.0],
         "task": [task_of[first], task_of[second]]}
    )  # fmt: skip
    evals = pd.concat([evals, thin], ignore_index=True)
    # Folds are by query: every fold leaves "thin" a training row, two of
    # them a single one.
    left = [
        len({first, second} - set(evals["query"].iloc[test]))
        for _, test in cv.split(evals, groups=evals["query"])
    ]
    assert sorted(left) == [1, 1, 2]
    router = LocusRouter(tiny_embedder(small_pool.encodings, max_epochs=1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scores = cross_val_score(
            router, evals, groups=evals["query"], cv=cv, error_score="raise"
        )
    assert scores.shape == (3,) and np.isfinite(scores).all()


def _identical_known(n_models=3):
    rng = np.random.default_rng(0)
    base = pd.DataFrame(
        {"query": [f"q{i}" for i in range(40)], "score": (rng.random(40) < 0.5) * 1.0}
    )
    return pd.concat(
        [base.assign(model=m) for m in "ABC"[:n_models]], ignore_index=True
    )


def test_calibration_on_indistinguishable_models_says_so_and_offers_a_threshold():
    # The message asked for a false_match_rate of at least 60 / 60 (which is
    # refused: the rate is in (0, 1)) or a larger n_evals, which cannot tell
    # identical answers apart.
    known = _identical_known()
    with pytest.raises(ValueError) as info:
        calibrate_score_threshold(known, n_evals=20, min_shared=5, random_state=0)
    assert str(info.value) == (
        "false_match_rate=0.01 cannot be met: all 60 compared pairs of different "
        "models are at distance 0, as alike as a model is to itself: the models of "
        "evals cannot be told apart (they may be duplicates, one model under "
        "several names), and no false_match_rate below 1 keeps such pairs out. "
        "Remove the duplicates from evals, or pass an explicit threshold= to the "
        "matching function (match_models_by_scores, or match_models for "
        "embeddings)."
    )


def _known_with_a_duplicate():
    """Known models A and A2, which agree on all 40 queries, and C, which
    differs from them."""
    rng = np.random.default_rng(1)
    queries = [f"q{i}" for i in range(40)]
    a, c = (rng.random(40) < 0.5) * 1.0, (rng.random(40) < 0.5) * 1.0
    return pd.concat(
        [
            pd.DataFrame({"model": m, "query": queries, "score": s})
            for m, s in (("A", a), ("A2", a), ("C", c))
        ],
        ignore_index=True,
    )


def test_calibration_with_some_pairs_at_zero_still_gives_the_rate():
    # A and A2 agree everywhere, C differs: the rate of 1/3 can be asked for;
    # the duplicates' way out is named too.
    known = _known_with_a_duplicate()
    kwargs = {"n_evals": 20, "min_shared": 5, "random_state": 0}
    with pytest.raises(ValueError) as info:
        calibrate_score_threshold(known, false_match_rate=0.1, **kwargs)
    message = str(info.value)
    assert "20 of the 60 pairs of different models are at distance 0" in message
    assert "at least 20 / 60, or tell the models apart on more queries" in message
    assert message.endswith(
        "Models that agree on every query (duplicates) stay at 0 whatever the "
        "queries: remove them, or pass an explicit threshold= to the matching "
        "function (match_models_by_scores, or match_models for embeddings)."
    )
    calibrate_score_threshold(known, false_match_rate=0.34, **kwargs)


@pytest.fixture
def cli(capsys):
    """Run ``locus ARGS`` in this process; return (status, stdout, stderr)."""
    from locus_sklearn._cli import main

    def run(*args):
        capsys.readouterr()
        try:
            status = main([str(a) for a in args])
        except SystemExit as exc:
            status = exc.code
        out, err = capsys.readouterr()
        return status, out, err

    return run


def test_locus_match_on_indistinguishable_models_names_its_options(tmp_path, cli):
    known = _identical_known()
    known.to_csv(tmp_path / "known.csv", index=False)
    endpoint = known[known["model"] == "A"].assign(model="X")
    endpoint.to_csv(tmp_path / "x.csv", index=False)
    status, _, err = cli(
        "match", tmp_path / "known.csv", tmp_path / "x.csv", "--min-shared", "5"
    )
    assert status == 1
    assert err.strip() == (
        "locus match: error: --false-match-rate 0.01 cannot be met: all 60 compared "
        "pairs of different models are at distance 0, as alike as a model is to "
        "itself: the models of KNOWN cannot be told apart (they may be duplicates, "
        "one model under several names), and no --false-match-rate below 1 keeps "
        "such pairs out. Remove the duplicates from KNOWN, or pass an explicit "
        "--threshold."
    )
    # The way out it names works.
    status, out, _ = cli(
        "match", tmp_path / "known.csv", tmp_path / "x.csv", "--min-shared", "5",
        "--threshold", "0", "--tsv",
    )  # fmt: skip
    assert status == 0 and "\tyes" in out


def test_locus_match_with_some_pairs_at_zero_names_its_options(tmp_path, cli):
    known = _known_with_a_duplicate()
    known.to_csv(tmp_path / "known.csv", index=False)
    known[known["model"] == "C"].assign(model="X").to_csv(tmp_path / "x.csv")
    status, _, err = cli(
        "match", tmp_path / "known.csv", tmp_path / "x.csv", "--min-shared", "5",
        "--false-match-rate", "0.1",
    )  # fmt: skip
    assert status == 1
    # 3 pairs x 20 sets of all 40 queries; A and A2 at 0 in each.
    assert "Ask for a --false-match-rate of at least 20 / 60, or" in err, err
    assert "(score the endpoints on more of KNOWN's queries)" in err
    assert err.rstrip().endswith("remove them, or pass an explicit --threshold.")
    assert (
        "n_evals" not in err and "threshold=" not in err and "match_models" not in err
    )


def test_locus_fit_refuses_a_table_where_no_model_has_two_evaluations(tmp_path, cli):
    evals = pd.DataFrame(
        {"model": ["a", "b"], "query": ["q0", "q1"], "score": [1, 0.0]}
    )
    evals.to_csv(tmp_path / "evals.csv", index=False)
    np.savez(
        tmp_path / "enc.npz",
        queries=np.array(["q0", "q1"]),
        vectors=np.eye(2, dtype=np.float32),
    )
    status, _, err = cli(
        "fit", tmp_path / "evals.csv", "--encodings", tmp_path / "enc.npz",
        "-o", tmp_path / "r.locus", "-q", "--epochs", "1",
    )  # fmt: skip
    assert status == 1, err
    assert "models with 1 are added to that pool as `locus onboard` adds them" in err
    assert "add_models" not in err


# --------------------------------------------------------- number-like names
@pytest.fixture(scope="module")
def numbered():
    evals = pd.DataFrame(
        {
            "model": ["0", "0", "1", "1", "2", "2"],
            "query": ["a", "b"] * 3,
            "score": [1.0, 0.0, 1.0, 1.0, 0.0, 0.0],
        }
    )
    return SingleBestRouter().fit(evals)


@pytest.mark.parametrize(
    "call, shown",
    [
        (lambda r: r.predict(["a"], models=[0]), "'0'"),
        (lambda r: r.predict(["a"], models=[np.int64(1), "2"]), "'1'"),
        (lambda r: r.remove_models([1, 2]), "['1', '2']"),
    ],
    ids=["predict", "numpy_int", "remove_models"],
)
def test_a_number_naming_a_model_is_told_names_are_strings(numbered, call, shown):
    with pytest.raises(TypeError) as info:
        call(numbered)
    message = str(info.value)
    assert message.endswith(f"Model names are strings: pass {shown}.")
    assert "nested list" not in message


def test_nested_lists_and_other_numbers_keep_the_flatten_hint(numbered):
    flatten = "A nested list or a 2-D array gives one entry per row: flatten it."
    with pytest.raises(TypeError) as info:
        numbered.predict(["a"], models=[["0"]])
    assert str(info.value).endswith(f"are not: [['0']]. {flatten}")
    # A number that names no model: no name to suggest.
    with pytest.raises(TypeError) as info:
        numbered.predict(["a"], models=[7])
    assert str(info.value).endswith(f"are not: [7]. {flatten}")
    # Both kinds: each hint.
    with pytest.raises(TypeError) as info:
        numbered.predict(["a"], models=[0, ["1"]])
    assert str(info.value).endswith(
        f"are not: [0, ['1']]. Model names are strings: pass '0'. {flatten}"
    )


def test_nearest_models_says_a_number_names_a_model_as_a_string():
    embeddings = pd.DataFrame(
        [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], index=["0", "1", "2"]
    )
    with pytest.raises(ValueError) as info:
        nearest_models(embeddings, 0, k=1)
    assert str(info.value) == (
        "model=0 is not a model of the pool; the pool is ['0', '1', '2']. Model "
        "names are strings: pass '0'."
    )
    assert nearest_models(embeddings, "0", k=1)["model"].tolist() == ["2"]
