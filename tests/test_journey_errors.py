"""Error messages met on a user's journey: each names the parameter, the bad
value and the remedy (probe 46)."""

import warnings

import numpy as np
import pandas as pd
import pytest

from locus_sklearn import check_evals
from locus_sklearn._cli._io import costs_for
from locus_sklearn.datasets import load_evals, make_model_pool
from locus_sklearn.inspection import (
    calibrate_score_threshold,
    fallback_order,
    match_models,
    match_models_by_scores,
    nearest_models,
    score_disagreement,
)
from locus_sklearn.metrics import oracle_accuracy, single_best_accuracy


@pytest.fixture(scope="module")
def pool_evals():
    return make_model_pool(
        n_models=6, n_queries=300, n_families=2, evals_per_model=300, random_state=0
    ).evals


# 1. nearest_models with a list of names
@pytest.mark.parametrize("model", [["a"], ["a", "b"], np.array(["a"])])
def test_nearest_models_refuses_a_sequence_of_names(model):
    Z = [[1.0, 0.0], [0.9, 0.2], [0.0, 1.0]]
    with pytest.raises(TypeError, match=r"model must be one model name.*one name"):
        nearest_models(Z, model, k=1, names=["a", "b", "c"])


def test_nearest_models_still_takes_a_point_and_a_name():
    Z = [[1.0, 0.0], [0.9, 0.2], [0.0, 1.0]]
    names = ["a", "b", "c"]
    assert nearest_models(Z, [0.1, 1.0], k=1, names=names)["model"].tolist() == ["c"]
    assert nearest_models(Z, "a", k=1, names=names)["model"].tolist() == ["b"]


# 2. a distance matrix read as embeddings
def test_distance_frame_without_precomputed_warns(pool_evals):
    D = score_disagreement(pool_evals, min_shared=10).distance
    model = D.index[0]
    with pytest.warns(UserWarning, match='metric="precomputed"'):
        nearest_models(D, model, k=2)
    with pytest.warns(UserWarning, match='metric="precomputed"'):
        fallback_order(D)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        nearest_models(D, model, k=2, metric="precomputed")
        fallback_order(D, metric="precomputed")


def test_square_embeddings_with_nonzero_diagonal_do_not_warn():
    names = ["a", "b"]
    Z = pd.DataFrame([[1.0, 0.0], [0.0, 1.0]], index=names, columns=names)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        nearest_models(Z, "a", k=1)


# 3. missing query or task ids
@pytest.mark.parametrize("missing", [np.nan, None, pd.NA])
@pytest.mark.parametrize("column", ["query", "task"])
def test_missing_ids_say_drop_or_fill(missing, column):
    evals = pd.DataFrame(
        {
            "model": ["a", "a", "b"],
            "query": ["q1", "q2", "q1"],
            "task": ["t", "t", "t"],
            "score": [1.0, 0.0, 1.0],
        }
    )
    evals[column] = evals[column].astype(object)
    evals.loc[1, column] = missing
    with pytest.raises(TypeError, match="1 missing value") as info:
        check_evals(evals)
    assert "drop or fill those rows" in str(info.value)
    assert "astype(str)" not in str(info.value)


def test_numeric_ids_keep_the_astype_hint():
    evals = pd.DataFrame({"model": ["a", "a"], "query": [1, 2], "score": [1.0, 0.0]})
    with pytest.raises(TypeError, match=r"astype\(str\)"):
        check_evals(evals)


# 4. threshold of the wrong kind
def test_threshold_bunch_points_at_its_threshold(pool_evals):
    known = pool_evals[pool_evals.model != "fam0-m00"]
    probe = pool_evals[pool_evals.model == "fam0-m00"]
    result = calibrate_score_threshold(known, n_evals=100, random_state=0)
    with pytest.raises(TypeError, match=r"pass result\.threshold") as info:
        match_models_by_scores(probe, known, threshold=result)
    assert len(str(info.value)) < 300
    # The advertised fix works.
    match_models_by_scores(probe, known, threshold=result.threshold)


@pytest.mark.parametrize("threshold", ["0.1", True, None])
def test_threshold_of_wrong_kind_is_a_type_error(threshold):
    evals = pd.DataFrame(
        {"model": ["a", "a"], "query": ["q1", "q2"], "score": [1.0, 0.0]}
    )
    with pytest.raises(TypeError, match="threshold must be a number"):
        match_models_by_scores(evals.assign(model="x"), evals, threshold=threshold)
    with pytest.raises(TypeError, match="threshold must be a number"):
        match_models([[1.0, 0.0]], [[1.0, 0.0]], threshold=threshold)


def test_match_models_threshold_mapping_names_threshold():
    with pytest.raises(
        TypeError, match=r"calibrate_fingerprint_threshold.*result\.threshold"
    ):
        match_models([[1.0, 0.0]], [[1.0, 0.0]], threshold={"threshold": 0.1})


def test_threshold_out_of_range_is_still_a_value_error():
    with pytest.raises(ValueError, match="should be a number >= 0"):
        match_models([[1.0, 0.0]], [[1.0, 0.0]], threshold=-1.0)


# 5. load_evals: missing columns at once, naming the file
def test_load_evals_names_every_missing_column_and_the_file(tmp_path):
    path = tmp_path / "scores.csv"
    pd.DataFrame({"llm": ["a"], "prompt": ["q"], "correct": [1]}).to_csv(
        path, index=False
    )
    with pytest.raises(ValueError) as info:
        load_evals(path)
    message = str(info.value)
    assert "['model', 'query', 'score']" in message
    assert str(path) in message
    with pytest.raises(ValueError, match=r"no column\(s\) \['query'\]") as info:
        load_evals(path, model_column="llm", score_column="correct")
    assert str(path) in str(info.value)


# 6. metrics given the long table
@pytest.mark.parametrize("metric", [oracle_accuracy, single_best_accuracy])
def test_metrics_explain_the_long_table(pool_evals, metric):
    with pytest.raises(TypeError, match=r"long evaluation table.*to_dense\(\)"):
        metric(pool_evals)
    # The advertised conversion is accepted.
    assert 0 <= metric(check_evals(pool_evals).to_dense()) <= 1


def test_oracle_accuracy_documents_its_parameters():
    assert "Parameters" in oracle_accuracy.__doc__
    assert "y_true" in oracle_accuracy.__doc__


# 7. CLI costs file missing models
def test_cli_costs_file_missing_models_says_every_model_of_the_pool():
    with pytest.raises(ValueError) as info:
        costs_for({"a": 1.0, "extra": 2.0}, ["a", "b"], "costs.csv")
    message = str(info.value)
    assert "'costs.csv'" in message and "['b']" in message
    assert "list a cost for every model of the pool (other rows are ignored)" in message
    assert "exactly" not in message
