"""Routing and correctness metrics on hand-computed cases, and router scorers."""

import re

import numpy as np
import pytest

from locus_sklearn.metrics import (
    correctness_accuracy,
    correctness_log_loss,
    get_router_scorer,
    oracle_accuracy,
    route,
    routing_accuracy,
    single_best_accuracy,
)

NAN = np.nan
Y = np.array([[1.0, 0.0, 1.0], [0.0, 0.0, 1.0], [0.0, 1.0, NAN], [0.5, 0.0, 0.0]])


def test_route_ties_and_availability():
    assert route([[0.5, 0.5, 0.1]]).tolist() == [0]
    assert route([[0.9, 0.5, 0.1]], [[False, True, True]]).tolist() == [1]


@pytest.mark.parametrize("dtype", ["boolean", "bool[pyarrow]"])
def test_route_takes_pandas_boolean_masks(dtype):
    # np.asarray made a nullable or Arrow boolean mask dtype object, refused
    # as "no boolean mask".
    import pandas as pd

    pytest.importorskip("pyarrow")
    y_score = pd.DataFrame({"a": [0.9, 0.2], "b": [0.1, 0.8]})
    up = pd.Series({"a": True, "b": False}).astype(dtype)
    assert route(y_score, available=up).tolist() == [0, 0]
    mask = pd.DataFrame({"a": [False, True], "b": [True, True]}).astype(dtype)
    assert route(y_score, available=mask).tolist() == [1, 1]
    assert route(y_score.to_numpy(), available=up).tolist() == [0, 0]
    # A missing entry says neither True nor False: refused as such.
    with pytest.raises(
        ValueError, match=r"available has 1 missing entr\(y/ies\) \(pd.NA\)"
    ):
        route(y_score, available=mask.where(mask, pd.NA))


def test_routing_accuracy_hand_computed():
    scores = np.array(
        [[0.9, 0.1, 0.0], [0.9, 0.1, 0.0], [0.1, 0.1, 0.9], [0.2, 0.9, 0.1]]
    )
    # Routed: 0 (1.0), 0 (0.0), 2 is missing for query 3 -> best observed is 0 or 1
    # (0.1 each, tie -> model 0: 0.0), 1 (0.0).
    assert routing_accuracy(Y, scores) == pytest.approx((1 + 0 + 0 + 0) / 4)
    assert routing_accuracy(Y, np.nan_to_num(Y, nan=-1)) == pytest.approx(3.5 / 4)


def test_routing_accuracy_of_an_overflowed_utility():
    # A huge cost weight makes P - w * cost -inf; routing still picks the
    # first evaluated model of such a row, as route() documents.
    y_true = [[1.0, 0.0], [np.nan, 1.0], [0.0, 1.0]]
    utility = [[-np.inf, -np.inf], [-np.inf, -np.inf], [0.1, -np.inf]]
    assert routing_accuracy(y_true, utility) == pytest.approx((1 + 1 + 0) / 3)
    for bad in (np.nan, np.inf):
        with pytest.raises(ValueError, match="finite numbers or -inf"):
            routing_accuracy(y_true, [[bad, 0.0], [0.0, 0.0], [0.0, 0.0]])


def test_score_with_a_huge_cost_weight():
    from locus_sklearn._evals import check_evals
    from locus_sklearn.baselines import SingleBestRouter

    evals = check_evals(
        {"model": ["a", "a", "b", "b"], "query": ["q1", "q2", "q1", "q2"],
         "score": [1.0, 0.0, 0.0, 1.0]}
    ).to_frame()  # fmt: skip
    router = SingleBestRouter(cost_weight=1e308).fit(
        evals, model_costs={"a": 10.0, "b": 20.0}
    )
    # Every utility overflows to -inf: predict and score agree on model "a".
    assert router.predict(["q1", "q2"]).tolist() == ["a", "a"]
    assert router.score(evals) == pytest.approx(0.5)


def test_oracle_and_single_best():
    assert oracle_accuracy(Y) == pytest.approx((1 + 1 + 1 + 0.5) / 4)
    # Means: model 0 = 1.5/4, model 1 = 1/4, model 2 = 2/3 -> model 2, over its 3 rows.
    assert single_best_accuracy(Y) == pytest.approx(2 / 3)
    assert single_best_accuracy(Y, model=1) == pytest.approx(0.25)
    with pytest.raises(
        ValueError, match=r"model=3 should be a column position of y_true in \[0, 2\]"
    ):
        single_best_accuracy(Y, model=3)


def test_single_best_skips_models_without_scores():
    # nanmean of an all-NaN column is NaN, which argmax picked.
    assert single_best_accuracy([[NAN, 1.0], [NAN, 0.0]]) == 0.5
    assert single_best_accuracy([[1.0, NAN], [0.0, NAN]]) == 0.5
    with pytest.raises(ValueError, match="model=0 has no observed score in y_true"):
        single_best_accuracy([[NAN, 1.0], [NAN, 0.0]], model=0)


@pytest.mark.parametrize(
    "model, error, message",
    [
        (
            1.5,
            TypeError,
            r"model must be an int, a column position of y_true in \[0, 2\]; "
            r"got 1.5 \(float\)",
        ),
        (True, TypeError, r"got True \(bool\)"),
        (
            -1,
            ValueError,
            r"model=-1 should be a column position of y_true in \[0, 2\] "
            r"\(y_true has 3 models\)",
        ),
    ],
)
def test_single_best_bad_model(model, error, message):
    with pytest.raises(error, match=message):
        single_best_accuracy(Y, model=model)


def test_correctness_accuracy_and_log_loss():
    scores = np.full(Y.shape, 0.6)
    # Observed cells: 11. Predicted "correct" everywhere; true >= .5 in 5 cells.
    assert correctness_accuracy(Y, scores) == pytest.approx(5 / 11)
    assert correctness_log_loss([[1.0, 0.0]], [[0.5, 0.5]]) == pytest.approx(np.log(2))
    assert correctness_log_loss([[1.0]], [[1.0]]) < 1e-6


def test_correctness_accuracy_on_graded_scores_is_documented():
    # Thresholding a mean and a graded score at 0.5 rewards the median: the
    # calibrated P(correct) 0.6 scored 1/3, a miscalibrated 0.4 2/3, with no
    # word of it where it is the default.
    from locus_sklearn.model_selection import make_onboarding_scorer

    y_true = np.where(np.arange(300) % 3 == 0, 1.0, 0.4)[:, None]  # mean 0.6
    calibrated, low = np.full_like(y_true, 0.6), np.full_like(y_true, 0.4)
    assert correctness_accuracy(y_true, calibrated) == pytest.approx(1 / 3)
    assert correctness_accuracy(y_true, low) == pytest.approx(2 / 3)
    assert correctness_log_loss(y_true, calibrated) < correctness_log_loss(y_true, low)
    for documented in (correctness_accuracy, get_router_scorer, make_onboarding_scorer):
        doc = " ".join(documented.__doc__.split())
        assert "graded" in doc and "median" in doc and "neg_log_loss" in doc


def test_correctness_accuracy_threshold_at_a_grade():
    # check_evals held scores in float32, where the grade 0.7 is 0.69999999:
    # with threshold=0.7 the cells graded 0.7 counted as below it (0.25
    # where by hand it is 0.75). Scores given in float32 are compared with
    # the threshold in float32.
    import pandas as pd

    from locus_sklearn import check_evals

    evals = pd.DataFrame(
        {"model": ["a"] * 4, "query": list("wxyz"), "score": [0.7, 0.7, 0.9, 0.2]}
    )
    y_score = np.array([[0.8], [0.75], [0.95], [0.8]])  # the last cell is wrong
    y_true = check_evals(evals).to_dense()
    assert correctness_accuracy(y_true, y_score, threshold=0.7) == 0.75
    y_true = y_true.astype(np.float32)
    assert correctness_accuracy(y_true, y_score, threshold=0.7) == 0.75
    assert correctness_accuracy(y_true, y_true, threshold=0.7) == 1.0
    assert (
        correctness_accuracy(pd.DataFrame(y_true), pd.DataFrame(y_true), threshold=0.7)
        == 1.0
    )
    below = np.array([[0.7 - 1e-9]])
    assert correctness_accuracy([[0.7]], below, threshold=0.7) == 0.0


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_correctness_accuracy_threshold_in_a_tensor_precision(dtype):
    # A torch tensor read as float64 forgot its float32 precision: the grade
    # 0.7 in a float32 tensor fell below threshold=0.7 (0.5 here, where the
    # same values in a float32 ndarray gave 1.0, by hand).
    torch = pytest.importorskip("torch")
    dtype = getattr(torch, dtype)
    y_true = torch.tensor([[0.7, 0.2]], dtype=dtype)
    assert correctness_accuracy(y_true, [[0.9, 0.1]], threshold=0.7) == 1.0
    y_score = torch.tensor([[0.7, 0.1]], dtype=dtype)
    assert correctness_accuracy([[0.9, 0.2]], y_score, threshold=0.7) == 1.0
    # A float64 tensor keeps float64's threshold.
    y_true = torch.tensor([[0.7 - 1e-9]], dtype=torch.float64)
    assert correctness_accuracy(y_true, [[0.9]], threshold=0.7) == 0.0


def test_metrics_read_torch_tensors_as_numpy_does():
    # bfloat16 tensors and tensors that require grad failed with torch's own
    # message ("Got unsupported ScalarType BFloat16", "Can't call numpy() on
    # Tensor that requires grad"); they are read as their values, by hand:
    torch = pytest.importorskip("torch")
    y_true = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.bfloat16)
    y_score = torch.tensor([[0.75, 0.5], [0.5, 0.25]], requires_grad=True)
    available = torch.tensor([True, True])
    assert route(y_score, available=available).tolist() == [0, 0]
    assert routing_accuracy(y_true, y_score) == 0.5
    assert oracle_accuracy(y_true) == 1.0
    assert single_best_accuracy(y_true) == 0.5
    # Only the first cell is on the right side of 0.5 (0.5 counts as correct).
    assert correctness_accuracy(y_true, y_score) == 0.25
    assert correctness_log_loss(y_true, y_score) == pytest.approx(
        -(np.log(0.75) + np.log(0.5) + np.log(0.5) + np.log(0.25)) / 4
    )


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (
            {"threshold": NAN},
            ValueError,
            r"threshold=nan should be a number in \[0, 1\]",
        ),
        ({"threshold": 2}, ValueError, r"threshold=2 should be a number in \[0, 1\]"),
        ({"threshold": "0.5"}, TypeError, r"threshold must be a number .*got '0.5'"),
        ({"threshold": True}, TypeError, r"got True \(bool\)"),
    ],
)
def test_correctness_accuracy_bad_threshold(kwargs, error, message):
    with pytest.raises(error, match=message):
        correctness_accuracy([[1.0, 0.0]], [[0.9, 0.1]], **kwargs)


@pytest.mark.parametrize("eps", [-1.0, 0.5, 0.7, NAN])
def test_correctness_log_loss_bad_eps(eps):
    # eps >= 0.5 crosses the clip bounds: every prediction becomes 1 - eps.
    with pytest.raises(ValueError, match=r"eps=.* should be a number in \[0, 0.5\)"):
        correctness_log_loss([[1.0, 0.0]], [[0.9, 0.1]], eps=eps)


def test_correctness_log_loss_eps_zero_clips_nothing():
    # Exact predictions cost 0 (not 0 * log 0 = NaN); a wrong certain one, inf.
    assert correctness_log_loss([[1.0, 0.0]], [[1.0, 0.0]], eps=0) == 0.0
    assert correctness_log_loss([[1.0, 0.0]], [[0.0, 0.0]], eps=0) == np.inf
    assert correctness_log_loss([[1.0]], [[0.25]], eps=0) == pytest.approx(np.log(4))


def test_route_needs_a_matrix():
    with pytest.raises(ValueError, match=r"y_score must be 2-D, .* got shape \(2,\)"):
        route([0.2, 0.9])


def test_metric_input_errors():
    with pytest.raises(ValueError, match="no observed score"):
        oracle_accuracy([[NAN, NAN]])
    with pytest.raises(ValueError, match="shape"):
        routing_accuracy(Y, np.zeros((4, 2)))
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        oracle_accuracy([[2.0]])
    with pytest.raises(ValueError, match="probabilities"):
        correctness_log_loss([[1.0]], [[1.5]])


def test_get_router_scorer():
    assert callable(get_router_scorer("neg_log_loss"))
    with pytest.raises(ValueError, match="Unknown router scorer 'acc'; valid names"):
        get_router_scorer("acc")


def test_get_router_scorer_names_a_bad_type():
    # A list is unhashable: the lookup raised a bare "unhashable type: 'list'".
    with pytest.raises(TypeError, match=r"name must be a str, one of \[.*\]; got"):
        get_router_scorer(["routing_accuracy"])


def test_dataframes_are_matched_by_model_name():
    # Columns name the models: y_score's [b, a] was read as [a, b], so the
    # routing to "a" (score 1) was scored as a routing to "b" (score 0).
    import pandas as pd

    y_true = pd.DataFrame([[1.0, 0.0], [1.0, 0.0]], columns=["a", "b"])
    y_score = pd.DataFrame([[0.1, 0.9], [0.2, 0.8]], columns=["b", "a"])
    assert routing_accuracy(y_true, y_score) == 1.0
    assert correctness_accuracy(y_true, y_score) == 1.0
    assert correctness_log_loss(y_true, y_score) == pytest.approx(
        correctness_log_loss(y_true, y_score[["a", "b"]].to_numpy())
    )
    other = y_score.rename(columns={"b": "c"})
    with pytest.raises(
        ValueError,
        match=r"different columns: y_true has \['a', 'b'\], y_score has \['c', 'a'\]",
    ):
        routing_accuracy(y_true, other)
    # Arrays have no names: matched by position, as documented.
    assert routing_accuracy(y_true, y_score.to_numpy()) == 0.0


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: routing_accuracy([["1", "0"]], [[0.1, 0.9]]), "y_true must hold real"),
        (lambda: oracle_accuracy([[True, False]]), "y_true has boolean dtype"),
        (lambda: single_best_accuracy([[True, False]]), "y_true has boolean dtype"),
        (
            lambda: correctness_accuracy([[1.0, 0.0]], [["0.9", "0.1"]]),
            "y_score must hold real",
        ),
        (
            lambda: routing_accuracy([[1.0, 0.0]], [[True, False]]),
            "y_score has boolean dtype",
        ),
        (
            lambda: correctness_log_loss([[1.0, None]], [[0.9, 0.1]]),
            "y_true must hold real numbers; got dtype object",
        ),
        (lambda: route([["0.9", "0.1"]]), "y_score must hold real"),
    ],
)
def test_scores_must_be_real_numbers(call, message):
    # check_evals refuses text and bool scores; the metrics read "1" and
    # True as the number 1.
    with pytest.raises(TypeError, match=message):
        call()


@pytest.mark.parametrize(
    "available, error, message",
    [
        # Indices, names and probabilities were cast to bool: index 0 read
        # as "not available", every name as "available".
        ([[0, 1, 2]], TypeError, r"available must be a boolean mask .*; got dtype int"),
        ([["a", "b", "c"]], TypeError, r"boolean mask .*; got dtype <U1"),
        ([[0.0, 0.5, 0.2]], TypeError, r"boolean mask .*; got dtype float64"),
        # numpy's broadcast error named no parameter.
        (
            [True, False],
            ValueError,
            r"available must have shape \(n_queries, n_models\) = \(1, 3\) or "
            r"\(n_models,\) = \(3,\), like y_score; got shape \(2,\)",
        ),
    ],
)
def test_route_available_must_be_a_mask_of_its_shape(available, error, message):
    with pytest.raises(error, match=message):
        route([[0.9, 0.5, 0.1]], available=available)


def test_route_available_one_row_for_every_query():
    assert route([[0.9, 0.5], [0.9, 0.5]], [False, True]).tolist() == [1, 1]


def test_route_matches_dataframe_available_by_label():
    # A DataFrame mask beside a DataFrame y_score was read by position: with
    # its models in another order it allowed exactly the unavailable ones.
    import pandas as pd

    y_score = pd.DataFrame({"a": [0.9, 0.1], "b": [0.1, 0.9]}, index=["q1", "q2"])
    # q1 may use only b, q2 only a, so the routed models are [b, a] = [1, 0].
    columns = pd.DataFrame(
        {"b": [True, False], "a": [False, True]}, index=y_score.index
    )
    rows = pd.DataFrame({"a": [True, False], "b": [False, True]}, index=["q2", "q1"])
    both = columns.loc[["q2", "q1"]]
    for available in (columns, rows, both):
        assert route(y_score, available=available).tolist() == [1, 0]
    # Arrays have no labels: matched by position, as documented.
    assert route(y_score, available=columns.to_numpy()).tolist() == [0, 1]
    assert route(y_score.to_numpy(), available=rows).tolist() == [0, 1]
    available = columns
    # Other models cannot be matched: named as in the metrics.
    other = available.rename(columns={"b": "c"})
    with pytest.raises(
        ValueError,
        match=r"y_score and available are DataFrames with different columns.*"
        r"1 of available's are not in y_score: \['c'\]",
    ):
        route(y_score, available=other)


def test_route_matches_a_series_of_models_by_label():
    # A Series of models beside a DataFrame y_score was read by position: an
    # outage mask allowing only "a" sent both queries to "b", which it marks down.
    import pandas as pd

    y_score = pd.DataFrame({"b": [0.9, 0.1], "a": [0.1, 0.9]}, index=["q1", "q2"])
    up = pd.Series({"a": True, "b": False})
    assert route(y_score, available=up).tolist() == [1, 1]  # column 1 is "a"
    # As the same mask given per query as a DataFrame.
    mask = pd.DataFrame([up.to_dict()] * 2, index=y_score.index)
    assert route(y_score, available=mask).tolist() == [1, 1]
    # One query, a Series in the columns' own order: unchanged.
    assert route(y_score.iloc[:1], pd.Series({"b": True, "a": True})).tolist() == [0]
    # Arrays have no labels: by position, as documented.
    assert route(y_score, available=up.to_numpy()).tolist() == [0, 0]
    assert route(y_score.to_numpy(), available=up).tolist() == [0, 0]
    # Labels that are not y_score's models, or repeated, cannot be matched.
    for bad, detail in (
        (pd.Series({"a": True, "c": False}), r"1 of available's .*: \['c'\]"),
        (pd.Series([True, False]), r"2 of y_score's are not in available"),
        (pd.Series([True, False, True], index=["a", "b", "a"]), "some are repeated"),
    ):
        with pytest.raises(
            ValueError,
            match=r"available is a Series whose index differs from y_score's "
            rf"columns: .*{detail}.*pass an array \(available.to_numpy\(\)\)",
        ):
            route(y_score, available=bad)


def test_metrics_need_a_matrix():
    # sklearn's "Expected 2D array" named neither argument, and its advice
    # reshape(-1, 1) would read one query's row as one query per model.
    for call, name in (
        (lambda: oracle_accuracy([1.0, 0.0]), "y_true"),
        (lambda: single_best_accuracy([1.0, 0.0]), "y_true"),
        (lambda: routing_accuracy([1.0, 0.0], [[0.2, 0.9]]), "y_true"),
        (lambda: routing_accuracy([[1.0, 0.0]], [0.2, 0.9]), "y_score"),
        (lambda: correctness_log_loss([[1.0, 0.0]], [0.2, 0.9]), "y_score"),
    ):
        with pytest.raises(
            ValueError,
            match=rf"{name} must be 2-D, shape \(n_queries, n_models\); got shape "
            rf"\(2,\)\. Pass one row per query, e\.g\. \[{name}\]",
        ):
            call()
    # The advice is right: one row per query.
    assert routing_accuracy([[1.0, 0.0]], [[0.2, 0.9]]) == 0.0


def test_route_needs_a_model():
    # argmax of an empty sequence, before.
    with pytest.raises(ValueError, match=r"y_score has no models \(shape \(2, 0\)\)"):
        route(np.zeros((2, 0)))


def test_dataframes_are_matched_by_row_label():
    # Rows were read by position: a perfect predictor indexed by the same
    # queries in another order was scored against the wrong queries (0.0).
    import pandas as pd

    y_true = pd.DataFrame({"a": [1.0, 0.0], "b": [0.0, 1.0]}, index=["q1", "q2"])
    y_score = pd.DataFrame({"a": [0.1, 0.9], "b": [0.9, 0.1]}, index=["q2", "q1"])
    assert routing_accuracy(y_true, y_score) == 1.0
    assert correctness_accuracy(y_true, y_score) == 1.0
    # Rows and columns both reordered: q1 -> (a 0.9, b 0.1), q2 -> (a 0.1, b 0.9).
    both = y_score[["b", "a"]]
    assert correctness_log_loss(y_true, both) == pytest.approx(-np.log(0.9))
    # Arrays have no labels: matched by position, as documented.
    assert routing_accuracy(y_true, y_score.to_numpy()) == 0.0
    # Other queries, or a query given twice, cannot be matched.
    with pytest.raises(
        ValueError,
        match=r"different row labels: y_true has \['q1', 'q2'\], y_score has "
        r"\['q2', 'x'\] \(1 of y_true's are not in y_score: \['q1'\]; 1 of "
        r"y_score's are not in y_true: \['x'\]\)\..*\.to_numpy\(\)",
    ):
        routing_accuracy(y_true, y_score.set_axis(["q2", "x"]))
    with pytest.raises(ValueError, match=r"different row labels: .*\['q1', 'q1'\]"):
        correctness_accuracy(y_true, y_score.set_axis(["q1", "q1"]))
    with pytest.raises(ValueError, match=r"1 of y_score's are not in y_true: \['q3'\]"):
        longer = pd.concat([y_score, y_score.iloc[:1].set_axis(["q3"])])
        correctness_log_loss(y_true, longer)


def test_out_of_range_errors_count_and_locate_the_cells():
    # The message was a bare "y_true must hold scores in [0, 1]".
    y = np.zeros((1000, 3))
    y[17, 2], y[400, 0] = 1.5, -0.2
    with pytest.raises(
        ValueError,
        match=r"y_true has 2 value\(s\) outside \[0, 1\] \(e\.g\. 1\.5 at \(row 17, "
        r"column 2\), -0\.2 at \(row 400, column 0\)\); y_true must hold scores",
    ):
        routing_accuracy(y, np.zeros((1000, 3)))
    with pytest.raises(
        ValueError,
        match=r"y_score has 4 value\(s\) outside \[0, 1\] \(e\.g\. 1\.5 at \(row 0, "
        r"column 0\), -1\.0 at \(row 0, column 2\), 2\.0 at \(row 0, column 3\), "
        r"\.\.\.\); y_score must hold probabilities",
    ):
        correctness_log_loss([[1, 0, 1, 0, 1]], [[1.5, 0.2, -1.0, 2.0, 3.0]])


SCORER_NAMES = [
    "routing_accuracy",
    "routing_accuracy_no_cost",
    "correctness_accuracy",
    "neg_log_loss",
]
SCORER_EVALS = {
    "model": ["a", "a", "b", "b"],
    "query": ["q1", "q2", "q1", "q2"],
    "score": [1.0, 0.0, 0.0, 1.0],
}
SCORER_ENCODER = {"q1": [1.0, 0.0], "q2": [0.0, 1.0]}


def test_scorers_need_a_fitted_router():
    # All four fail alike; three of them read classes_ first and raised
    # AttributeError.
    from sklearn.exceptions import NotFittedError

    from locus_sklearn.baselines import KNNRouter

    router = KNNRouter(1, encoder=SCORER_ENCODER)
    for name in SCORER_NAMES:
        with pytest.raises(NotFittedError, match="KNNRouter instance is not fitted"):
            get_router_scorer(name)(router, SCORER_EVALS)


def test_scorers_name_models_outside_the_pool():
    # All four name the pool, as BaseRouter.score does; three of them said
    # "not in models" (to_dense's wording).
    from locus_sklearn.baselines import KNNRouter

    evals = {key: values[:2] for key, values in SCORER_EVALS.items()}  # a only
    router = KNNRouter(1, encoder=SCORER_ENCODER).fit(evals)
    for name in SCORER_NAMES:
        with pytest.raises(
            ValueError,
            match=r"evals has 1 model\(s\) that are not in the pool: \['b'\]",
        ):
            get_router_scorer(name)(router, SCORER_EVALS)
    # On the pool's own models each scorer gives the hand-computed value:
    # 1-NN on its own training queries predicts a's answers exactly.
    expected = {
        "routing_accuracy": 0.5,  # one model: q1 -> 1, q2 -> 0
        "routing_accuracy_no_cost": 0.5,
        "correctness_accuracy": 1.0,
        "neg_log_loss": 0.0,  # up to the clipping eps=1e-7
    }
    for name in SCORER_NAMES:
        score = get_router_scorer(name)(router, evals)
        assert score == pytest.approx(expected[name], abs=1e-6), name


def test_a_huge_cost_weight_routes_to_the_cheapest_model():
    # P - w * cost overflows to -inf for every model at w = 1e308: predict
    # and score routed to the first model. The exact utilities are ranked by
    # cost (two float costs differ by far more than 1 / w): the cheapest
    # model, ties to the larger P, then to the first.
    from locus_sklearn._evals import check_evals
    from locus_sklearn.baselines import SingleBestRouter

    evals = check_evals(
        {"model": ["a", "a", "b", "b", "c", "c", "d", "d"],
         "query": ["q1", "q2"] * 4,
         "score": [1.0, 1.0, 0.5, 0.0, 1.0, 0.0, 0.0, 1.0]}
    ).to_frame()  # fmt: skip
    # Mean scores (SingleBestRouter's P): a 1, b 0.25, c 0.5, d 0.5.
    costs = {"a": 5.0, "b": 2.0, "c": 2.0, "d": 9.0}
    router = SingleBestRouter(cost_weight=1e308).fit(evals, model_costs=costs)
    assert np.isneginf(router.decision_function(["q1"])).all()
    # b and c cost the least; c has the larger P.
    assert router.predict(["q1", "q2"]).tolist() == ["c", "c"]
    assert router.predict(["q1"], models=["a", "b", "d"]).tolist() == ["b"]
    assert router.predict(["q1"], models=["a", "d"]).tolist() == ["a"]
    # score routes as predict: c on both queries, scored 1 and 0.
    assert router.score(evals) == pytest.approx(0.5)
    # Among the models scored on a query: c not scored on q2 -> b (0.0).
    assert router.score(evals[(evals["model"] != "c") | (evals["query"] == "q1")]) == (
        pytest.approx((1.0 + 0.0) / 2)
    )
    # Equal cost and P: the first. A finite utility beats an overflowed one.
    from locus_sklearn._base import route_by_utility

    proba, equal = np.array([[0.5, 0.5, 0.5]]), np.array([3.0, 1.0, 1.0])
    assert route_by_utility(proba, equal, 1e308).tolist() == [1]
    assert route_by_utility(proba, np.array([0.0, 1.0, 2.0]), 1e308).tolist() == [0]
    # Ordinary weights route as route() does.
    assert route_by_utility(proba, equal, 0.1).tolist() == [1]


@pytest.mark.parametrize("eps", [1e-17, 1e-300, np.finfo(float).tiny])
def test_correctness_log_loss_is_finite_for_any_positive_eps(eps):
    # 1 - eps rounds to 1.0 below eps ~ 1.1e-16: the upper clip did nothing,
    # and a certain "correct" for a score of 0 cost inf (its mirror, 39.1).
    wrong_one = correctness_log_loss([[0.0]], [[1.0]], eps=eps)
    assert np.isfinite(wrong_one)
    assert wrong_one == correctness_log_loss([[1.0]], [[0.0]], eps=eps)
    assert wrong_one == pytest.approx(-np.log(eps))


def test_correctness_log_loss_ordinary_eps_unchanged():
    # The floor on 1 - p only acts where 1 - eps rounds to 1: ordinary eps
    # give the loss 1 - clip(p) gave, bit for bit.
    y_true = np.array([[1.0, 0.0, 0.0, 1.0, 0.3]])
    y_score = np.array([[0.0, 1.0, 0.999999999, 0.3, 0.7]])
    for eps in [1e-7, 1e-15, 1e-16, 0.1]:
        p = np.clip(y_score, eps, 1 - eps)
        expected = -np.mean(y_true * np.log(p) + (1 - y_true) * np.log(1 - p))
        assert correctness_log_loss(y_true, y_score, eps=eps) == expected


def test_correctness_accuracy_refuses_scores_outside_0_1():
    # Utilities (decision_function) were thresholded at 0.5 as if they were
    # P(correct); correctness_log_loss refused them already.
    with pytest.raises(
        ValueError,
        match=r"y_score has 4 value\(s\) outside \[0, 1\] \(e\.g\. -3\.0 at \(row 0, "
        r"column 0\), .*\); y_score must hold probabilities in \[0, 1\] for a "
        r"correctness accuracy\.",
    ):
        correctness_accuracy([[1.0, 0.0], [0.0, 1.0]], [[-3.0, 7.0], [2.5, -0.1]])
    assert correctness_accuracy([[1.0, 0.0]], [[1.0, 0.0]]) == 1.0


def test_route_validates_y_score_like_the_metrics():
    import pandas as pd
    from scipy import sparse

    # numpy's "setting an array element with a sequence" named nothing.
    with pytest.raises(TypeError, match="Sparse data was passed for y_score"):
        route(sparse.csr_matrix([[0.1, 0.9]]))
    # pd.NA raised numpy's TypeError; it is a NaN, which never wins.
    y_score = pd.DataFrame(
        {"a": pd.array([0.1, pd.NA], dtype="Float64"), "b": [0.05, 0.2]}
    )
    assert route(y_score).tolist() == [0, 1]
    # The 2-D message and the empty cases stay route's own.
    with pytest.raises(ValueError, match=r"y_score must be 2-D, .* got shape \(\)"):
        route(0.5)
    with pytest.raises(ValueError, match=r"y_score must be 2-D, .* got shape \(0,\)"):
        route([])
    assert route(np.zeros((0, 3))).tolist() == []
    assert route([[np.inf, -np.inf, NAN]]).tolist() == [0]


@pytest.mark.parametrize("call", [routing_accuracy, correctness_accuracy])
def test_a_long_table_beside_a_dataframe_names_the_conversion(call):
    # Label matching ran first: "DataFrames with different columns ... pass
    # arrays (.to_numpy())", which would not have helped.
    import pandas as pd

    evals = pd.DataFrame(
        {"model": ["a", "b", "a", "b"], "query": ["q1", "q1", "q2", "q2"],
         "score": [1.0, 0.0, 0.0, 1.0]}
    )  # fmt: skip
    proba = pd.DataFrame([[0.9, 0.1], [0.2, 0.8]], columns=["a", "b"])
    hint = r"looks like a long evaluation table .* check_evals\(evals\)\.to_dense\(\)"
    with pytest.raises(TypeError, match="y_true " + hint):
        call(evals, proba)
    with pytest.raises(TypeError, match="y_score " + hint):
        call(proba, evals)


INSPECTION_METRICS = [
    "cost_quality_curve",
    "distance_disagreement_correlation",
    "fallback_routing_accuracy",
    "neighbor_agreement",
]


def test_metrics_reexports_the_inspection_metrics():
    # DESIGN.md lists these under locus_sklearn.metrics; they lived only in
    # locus_sklearn.inspection, so importing them from metrics failed.
    import locus_sklearn.inspection as inspection
    import locus_sklearn.metrics as metrics

    for name in INSPECTION_METRICS:
        assert getattr(metrics, name) is getattr(inspection, name), name
        assert name in metrics.__all__ and name in dir(metrics), name
    with pytest.raises(AttributeError, match="has no attribute 'nearest_models'"):
        metrics.nearest_models  # noqa: B018 (only the four metrics are aliased)


@pytest.mark.parametrize("first", ["metrics", "inspection"])
def test_metrics_import_is_not_circular(first):
    # inspection imports route from metrics: a fresh interpreter, importing
    # either package first, must get every name of metrics.__all__.
    import subprocess
    import sys

    code = (
        f"import locus_sklearn.{first}\n"
        "from locus_sklearn.metrics import *\n"
        "from locus_sklearn.inspection import cost_quality_curve as c\n"
        "import locus_sklearn.metrics as m\n"
        "assert cost_quality_curve is c\n"
        "assert all(callable(globals()[n]) for n in m.__all__)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(
    "call, message",
    [
        # numpy's "setting an array element with a sequence ... inhomogeneous
        # shape" named neither argument.
        (
            lambda: routing_accuracy([[1, 0], [0, 1]], [[0.1, 0.9], [0.2]]),
            r"y_score must be a 2-D array-like of shape \(n_queries, n_models\), "
            r".*got a ragged sequence whose rows differ in length \(row lengths "
            r"\[2, 1\]\)",
        ),
        (
            lambda: routing_accuracy([[1, 0], [0]], [[0.1, 0.9], [0.2, 0.3]]),
            r"y_true must be a 2-D array-like of shape \(n_queries, n_models\), "
            r".*row lengths \[2, 1\]",
        ),
        (
            lambda: route([[0.1, 0.9], [0.2]]),
            r"y_score must be a 2-D array-like .*row lengths \[2, 1\]",
        ),
        # sklearn's "Found array with 0 sample(s)" named neither argument and
        # hid that y_score does not match y_true.
        (
            lambda: routing_accuracy([[1.0, 0.0]], np.zeros((0, 2))),
            r"y_score has shape \(0, 2\) but y_true has shape \(1, 2\); both "
            r"must be \(n_queries, n_models\)",
        ),
        (
            lambda: correctness_accuracy([[1.0, 0.0]], np.zeros((1, 0))),
            r"y_score has shape \(1, 0\) but y_true has shape \(1, 2\)",
        ),
        (
            lambda: oracle_accuracy(np.zeros((2, 0))),
            r"y_true is empty \(shape \(2, 0\)\); it must have shape "
            r"\(n_queries, n_models\) with at least one query and one model",
        ),
        (
            lambda: routing_accuracy(np.zeros((0, 2)), np.zeros((0, 2))),
            r"y_true is empty \(shape \(0, 2\)\)",
        ),
    ],
)
def test_ragged_or_empty_matrices_name_the_argument(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_single_best_reads_a_dataframe_model_by_label():
    # model=2 picked the column at position 2 (label 1, mean 0.5), not the
    # column labelled 2 (mean 1.0); "b" was refused as not an int.
    import pandas as pd

    y_true = pd.DataFrame({2: [1.0, 1.0], 0: [0.0, 0.0], 1: [0.5, 0.5]})
    assert single_best_accuracy(y_true, model=2) == 1.0
    assert single_best_accuracy(y_true, model=1) == 0.5
    named = pd.DataFrame({"b": [1.0, 1.0, 0.0], "a": [0.0, 1.0, NAN]})
    assert single_best_accuracy(named, model="a") == 0.5  # its 2 observed cells
    assert single_best_accuracy(named) == pytest.approx(2 / 3)  # "b" by default
    # Positions stay available through the array.
    assert single_best_accuracy(named.to_numpy(), model=1) == 0.5
    with pytest.raises(
        ValueError,
        match=r"model='c' is not a column label of y_true; its columns are "
        r"\['b', 'a'\]\..*y_true\.to_numpy\(\)",
    ):
        single_best_accuracy(named, model="c")
    with pytest.raises(ValueError, match=r"model=0 is not a column label"):
        single_best_accuracy(named, model=0)
    with pytest.raises(TypeError, match=r"column label of y_true; got True \(bool\)"):
        single_best_accuracy(y_true, model=True)
    with pytest.raises(ValueError, match="model='a' has no observed score"):
        single_best_accuracy(named.assign(a=NAN), model="a")
    # Part of a MultiIndex label selects a group of columns, not one model.
    grouped = pd.DataFrame(
        [[1.0, 0.0, 0.5]],
        columns=pd.MultiIndex.from_tuples([("m", "a"), ("m", "b"), ("n", "c")]),
    )
    assert single_best_accuracy(grouped, model=("m", "b")) == 0.0
    with pytest.raises(
        ValueError,
        match=r"model='m' is part of a column label of y_true \(it selects "
        r"\[\('m', 'a'\), \('m', 'b'\)\]\)",
    ):
        single_best_accuracy(grouped, model="m")


K_EVALS = {
    "model": ["a"] * 2 + ["b"] * 2 + ["c"] * 2,
    "query": ["q1", "q2"] * 3,
    "score": [1, 0, 1, 1, 0, 0],
}


def _k_calls():
    from locus_sklearn.baselines import SingleBestRouter
    from locus_sklearn.inspection import fallback_routing_accuracy, neighbor_agreement

    router = SingleBestRouter().fit(K_EVALS)
    return {
        "neighbor_agreement": lambda k: neighbor_agreement(np.eye(3), K_EVALS, k=k),
        "fallback_routing_accuracy": lambda k: fallback_routing_accuracy(
            router, K_EVALS, k=k, embeddings=np.eye(3)
        ),
    }


@pytest.mark.parametrize(
    "function", ["neighbor_agreement", "fallback_routing_accuracy"]
)
def test_k_needs_at_least_one_rank(function):
    call = _k_calls()[function]
    # k=[] was a TypeError saying k must be a sequence of ints, which it is.
    for empty in ([], ()):
        with pytest.raises(
            ValueError,
            match=r"k must hold at least one rank in \[1, 2\], the number of other "
            rf"models; got {re.escape(repr(empty))}",
        ):
            call(empty)
    with pytest.raises(TypeError, match="k must be an int or a sequence of ints"):
        call(1.0)


@pytest.mark.parametrize(
    "function", ["neighbor_agreement", "fallback_routing_accuracy"]
)
def test_k_is_given_once(function):
    call = _k_calls()[function]
    # A repeated k returned the same row twice; refused as profile_recall_at_k
    # refuses it.
    for repeated in ([1, 1], np.array([2, 1, 2])):
        with pytest.raises(ValueError, match=r"k repeats \[\d\]; give each k once"):
            call(repeated)
    assert call([2, 1])["k"].tolist() == [2, 1]


def test_correctness_accuracy_threshold_per_column_and_in_nested_lists():
    # Each column is compared in its own precision: float16(0.7) is 0.7002,
    # above float32(0.7), so one threshold in the coarsest type put the
    # float32 column's 0.7 below it (0.5 where by hand it is 1.0); a float64
    # 0.6999999999 is below 0.7 (1.0 where it is 0.5). Float32 scalars in a
    # list of rows count as float32 (0.0 where it is 1.0).
    import pandas as pd

    mixed = pd.DataFrame(
        {"a": np.array([0.7], dtype=np.float16), "b": np.array([0.7], dtype=np.float32)}
    )
    assert correctness_accuracy(mixed, [[0.9, 0.9]], threshold=0.7) == 1.0
    mixed = pd.DataFrame(
        {"a": np.array([0.7], dtype=np.float32), "b": np.array([0.6999999999])}
    )
    assert correctness_accuracy(mixed, [[0.9, 0.9]], threshold=0.7) == 0.5
    # y_score's columns are read in y_true's order, as they are matched
    # (in y_score's own order, a's float32 0.7 met float64's 0.7: 0.5).
    y_true = pd.DataFrame({"a": [1.0], "b": [1.0]})
    y_score = pd.DataFrame({"b": [0.7], "a": np.array([0.7], dtype=np.float32)})
    assert correctness_accuracy(y_true, y_score, threshold=0.7) == 1.0
    assert correctness_accuracy([[np.float32(0.7)]], [[0.9]], threshold=0.7) == 1.0
