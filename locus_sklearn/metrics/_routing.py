"""Routing and correctness metrics on a score matrix of shape (n_queries, n_models).

``y_true`` holds observed scores in [0, 1] with NaN where a model has no score
for a query; ``y_score`` holds predicted scores (P(correct) or any utility where
larger is better) of the same shape. Both hold real numbers (booleans and text
are refused, as by :func:`~locus_sklearn.check_evals`). Arrays are matched
cell by cell, by position. Two DataFrames are matched by their labels: the
columns name the models and the index the queries, so each must hold the same
labels in both (in any order; y_score is reordered to y_true's); pass arrays
(``.to_numpy()``) to match them by position. A table of named columns that
is not a pandas DataFrame (a pyarrow Table or RecordBatch, a polars DataFrame)
is refused rather than read by position: convert it with ``.to_pandas()``.
"""

from numbers import Integral, Real

import numpy as np
import pandas as pd
from scipy import sparse
from scipy.special import xlogy
from sklearn.utils.validation import check_array

from .._evals import _check_not_foreign_table, _preview
from .._tensors import in_input_precision, untorched

__all__ = [
    "correctness_accuracy",
    "correctness_log_loss",
    "oracle_accuracy",
    "route",
    "routing_accuracy",
    "single_best_accuracy",
]


def _check_not_long_table(values, name):
    """Refuse a long evaluation table, naming the conversion to a matrix.

    The long evaluation table is the library's usual input, and its text
    columns would otherwise be refused for their dtype (or, beside a
    DataFrame of predictions, for its column labels) without saying that a
    matrix is expected nor how to build one.
    """
    if isinstance(values, pd.DataFrame) and {"model", "query", "score"} <= set(
        values.columns
    ):
        raise TypeError(
            f"{name} looks like a long evaluation table (columns 'model', 'query' "
            f"and 'score', {len(values)} rows); the metrics take a score matrix "
            "of shape (n_queries, n_models). Convert it with "
            "check_evals(evals).to_dense() (rows check_evals(evals).queries, "
            "columns .models) or evals.pivot_table(index='query', "
            "columns='model', values='score')."
        )


def _check_real_dtype(values, name):
    """Refuse booleans, text, objects and complex numbers as scores.

    ``check_array`` would read ``"1"`` and ``True`` as the number 1 (and
    check_evals refuses both as scores), so the dtype is checked first.
    """
    if sparse.issparse(values):
        return  # check_array refuses sparse input with its own message
    _check_not_long_table(values, name)
    if isinstance(values, pd.DataFrame):
        dtypes = list(values.dtypes)
    else:
        try:
            dtypes = [np.asarray(values).dtype]
        except ValueError:
            raise _ragged(values, name) from None
        except TypeError:
            return  # not array-like: check_array names it
    for dtype in dtypes:
        if pd.api.types.is_bool_dtype(dtype):
            raise TypeError(
                f"{name} has boolean dtype; scores must be real numbers. Convert "
                f"explicitly, e.g. np.asarray({name}, dtype=float)."
            )
        if not pd.api.types.is_numeric_dtype(dtype) or pd.api.types.is_complex_dtype(
            dtype
        ):
            raise TypeError(
                f"{name} must hold real numbers; got dtype {dtype} (text, objects "
                "and complex numbers are not read as scores; convert explicitly)."
            )


def _check_2d(values, name):
    """Refuse input that is not 2-D with route's message, before check_array:
    its "Expected 2D array" names neither argument, and its first advice,
    ``reshape(-1, 1)``, would read one query's row as n_models queries."""
    if sparse.issparse(values) or isinstance(values, pd.DataFrame):
        return  # 2-D by construction (check_array names sparse input)
    try:
        ndim = np.ndim(values)
    except ValueError:
        raise _ragged(values, name) from None
    except TypeError:
        return  # not array-like: check_array names it
    if ndim != 2:
        raise ValueError(
            f"{name} must be 2-D, shape (n_queries, n_models); got shape "
            f"{np.shape(values)}. Pass one row per query, e.g. [{name}] for a "
            "single query."
        )


def _ragged(values, name):
    """The ValueError for a sequence of rows of different lengths: numpy's
    "inhomogeneous shape" names neither the argument nor the shape wanted."""
    try:
        lengths = f" (row lengths {_preview([len(row) for row in values])})"
    except TypeError:  # a row without a length: a scalar among the rows
        lengths = ""
    return ValueError(
        f"{name} must be a 2-D array-like of shape (n_queries, n_models), one "
        f"row of n_models scores per query; got a ragged sequence whose rows "
        f"differ in length{lengths}."
    )


def _check_not_empty(values, name):
    """Refuse a matrix without queries or models before check_array, whose
    "Found array with 0 sample(s)" names neither the argument nor its shape."""
    if sparse.issparse(values):
        return  # check_array refuses sparse input with its own message
    shape = np.shape(values)
    if 0 in shape:
        raise ValueError(
            f"{name} is empty (shape {shape}); it must have shape (n_queries, "
            "n_models) with at least one query and one model."
        )


def _check_y_true(y_true):
    # A tensor that requires grad, lives on a GPU or holds bfloat16 is read
    # as NumPy reads it (np.asarray failed with torch's own message).
    y_true = untorched(y_true)
    _check_not_foreign_table(y_true, "y_true")
    _check_real_dtype(y_true, "y_true")
    _check_2d(y_true, "y_true")
    _check_not_empty(y_true, "y_true")
    y_true = check_array(
        y_true, dtype=np.float64, ensure_all_finite="allow-nan", input_name="y_true"
    )
    observed = ~np.isnan(y_true)
    outside = observed & ((y_true < 0) | (y_true > 1))
    if outside.any():
        raise ValueError(
            f"y_true has {_cells(y_true, outside)}; y_true must hold scores in "
            "[0, 1] (NaN for missing)."
        )
    if not observed.any(axis=1).all():
        n_empty = int((~observed.any(axis=1)).sum())
        raise ValueError(
            f"y_true has {n_empty} quer(y/ies) with no observed score for any model; "
            "drop them before scoring."
        )
    return y_true, observed


def _cells(values, mask, limit=3):
    """How many cells of ``mask`` there are, and the first few as ``value at
    (row, column)``: a position finds a bad score in a large matrix, which a
    bare "must hold ..." left the user to search for."""
    rows, columns = np.nonzero(mask)
    shown = ", ".join(
        f"{float(values[r, c])!r} at (row {r}, column {c})"
        for r, c in zip(rows[:limit], columns[:limit], strict=True)
    )
    more = ", ..." if len(rows) > limit else ""
    return f"{len(rows)} value(s) outside [0, 1] (e.g. {shown}{more})"


def _check_pair(y_true, y_score, *, utility=False):
    """Validated ``y_true``, its observed mask and ``y_score``. With
    ``utility``, ``y_score`` may hold -inf: a utility ``P(correct) -
    cost_weight * cost`` overflows there under a huge weight, and
    :func:`route` still picks a model (NaN and +inf stay refused)."""
    y_score = untorched(y_score)
    if isinstance(y_true, pd.DataFrame) and isinstance(y_score, pd.DataFrame):
        # Before matching labels: a long table's columns are no model names,
        # and "different columns" would hide how to build the matrix.
        _check_not_long_table(y_true, "y_true")
        _check_not_long_table(y_score, "y_score")
        y_score = _align_frames(y_true, y_score)
    y_true, observed = _check_y_true(y_true)
    _check_not_foreign_table(y_score, "y_score")
    _check_real_dtype(y_score, "y_score")
    _check_2d(y_score, "y_score")
    # Before check_array: an empty y_score beside a non-empty y_true is a
    # shape mismatch, which its "Found array with 0 sample(s)" would hide.
    if not sparse.issparse(y_score) and np.shape(y_score) != y_true.shape:
        raise ValueError(
            f"y_score has shape {np.shape(y_score)} but y_true has shape "
            f"{y_true.shape}; both must be (n_queries, n_models)."
        )
    y_score = check_array(
        y_score,
        dtype=np.float64,
        ensure_all_finite=not utility,
        input_name="y_score",
    )
    if utility and not (np.isfinite(y_score) | (y_score == -np.inf)).all():
        raise ValueError(
            "y_score must hold finite numbers or -inf (an overflowed utility); "
            "it has NaN or +inf."
        )
    return y_true, observed, y_score


def _check_probabilities(y_score, use):
    """Refuse a ``y_score`` outside [0, 1]: utilities or decision values are
    no P(correct), and ``use`` (thresholded or logged) would give a number
    that means nothing."""
    outside = (y_score < 0) | (y_score > 1)
    if outside.any():
        raise ValueError(
            f"y_score has {_cells(y_score, outside)}; y_score must hold "
            f"probabilities in [0, 1] for {use}."
        )


def _align_frames(y_true, y_score, names=("y_true", "y_score")):
    """``y_score`` with the columns and rows of ``y_true``, matched by label.

    Two DataFrames name their models in their columns and, most often, their
    queries in their index; reading either by position would score a model
    by another one's predictions, or a query by another query's. ``names``
    are the two arguments' names in an error (route aligns ``available`` to
    ``y_score``).
    """
    if not y_score.columns.equals(y_true.columns):
        if not _same_labels(y_true.columns, y_score.columns):
            raise _mismatch(y_true.columns, y_score.columns, "columns", "models", names)
        y_score = y_score[y_true.columns]
    if not y_score.index.equals(y_true.index):
        if not _same_labels(y_true.index, y_score.index):
            raise _mismatch(y_true.index, y_score.index, "row labels", "queries", names)
        y_score = y_score.loc[y_true.index]
    return y_score


def _same_labels(true_labels, score_labels):
    """Whether ``score_labels`` can be reordered to ``true_labels``: the same
    labels, each once on both sides (a repeated label has no one match)."""
    return (
        true_labels.is_unique
        and score_labels.is_unique
        and len(true_labels) == len(score_labels)
        and set(true_labels) == set(score_labels)
    )


def _mismatch(
    true_labels, score_labels, axis, what, names=("y_true", "y_score"), *, series=False
):
    """The ValueError for two DataFrames whose ``axis`` labels differ, or
    with ``series`` for a Series (the second name) whose index differs from
    a DataFrame's columns."""
    true_name, score_name = names
    only_true = true_labels.difference(score_labels, sort=False)
    only_score = score_labels.difference(true_labels, sort=False)
    # The first labels of two long indexes look alike: name the odd ones.
    parts = [
        f"{len(only)} of {mine}'s are not in {other}: {_preview(only)}"
        for only, mine, other in (
            (only_true, true_name, score_name),
            (only_score, score_name, true_name),
        )
        if len(only)
    ]
    detail = "; ".join(parts) or "the same labels, but some are repeated"
    if series:
        return ValueError(
            f"{score_name} is a Series whose index differs from {true_name}'s "
            f"{axis}: {true_name} has {_preview(true_labels)}, {score_name} has "
            f"{_preview(score_labels)} ({detail}). Its index names the {what}, "
            f"so it must hold the labels of {true_name}'s {axis}, each once (in "
            f"any order); pass an array ({score_name}.to_numpy()) to match the "
            f"{what} by position."
        )
    return ValueError(
        f"{true_name} and {score_name} are DataFrames with different {axis}: "
        f"{true_name} has {_preview(true_labels)}, {score_name} has "
        f"{_preview(score_labels)} "
        f"({detail}). Their {axis} name the {what}, so they must hold the same "
        f"labels, each once (in any order); pass arrays (.to_numpy()) to match "
        f"the {what} by position."
    )


def _check_number(value, name, valid, in_range):
    """``value`` as a float; bools are refused as numbers, NaN fails ``in_range``."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(
            f"{name} must be a number {valid}; got {value!r} ({type(value).__name__})."
        )
    if not in_range(float(value)):
        raise ValueError(f"{name}={value!r} should be a number {valid}.")
    return float(value)


def _as_mask(available):
    """``available`` as an array, a pandas mask of nullable ("boolean") or
    Arrow ("bool[pyarrow]") dtype as NumPy bools: np.asarray gives such a
    mask dtype object, which the boolean check refused as no mask."""
    if isinstance(available, pd.Series | pd.DataFrame):
        dtypes = list(available.dtypes) if available.ndim == 2 else [available.dtype]
        if dtypes and all(pd.api.types.is_bool_dtype(dtype) for dtype in dtypes):
            n_missing = int(available.isna().to_numpy().sum())
            if n_missing:
                raise ValueError(
                    f"available has {n_missing} missing entr(y/ies) (pd.NA); a "
                    "mask must say True or False for every model. Fill them, "
                    "e.g. available.fillna(False) to exclude those models."
                )
            return available.to_numpy(dtype=bool)
    return np.asarray(available)


def route(y_score, available=None):
    """Index of the model with the largest score per query, among available ones.

    Parameters
    ----------
    y_score : array-like of shape (n_queries, n_models)
        Predicted scores; larger is better.
    available : array-like of bool, shape (n_queries, n_models) or (n_models,), \
default=None
        Which models may be chosen for each query (one row for every query
        if 1-D); every query needs one. Defaults to all models. Matched to
        ``y_score`` by position, or, when both are DataFrames, by their
        column (model) and row (query) labels, which must be the same. A
        Series beside a DataFrame ``y_score`` is one row for every query,
        matched by label: its index must hold ``y_score``'s columns. A
        pandas mask of dtype "boolean" or "bool[pyarrow]" is read as bools;
        a missing entry (pd.NA) is refused.

    Returns
    -------
    routed : ndarray of int64, shape (n_queries,)
        Always an available model. Ties go to the lowest model index; a NaN
        score never wins, and where every available score is -inf or NaN
        the first available model is chosen.

    Examples
    --------
    >>> route([[0.2, 0.9], [0.7, 0.1]]).tolist()
    [1, 0]
    >>> route([[0.2, 0.9]], available=[[True, False]]).tolist()
    [0]

    A Series of models beside a DataFrame is matched by label:

    >>> import pandas as pd
    >>> y_score = pd.DataFrame({"b": [0.9], "a": [0.1]})
    >>> route(y_score, available=pd.Series({"a": True, "b": False})).tolist()
    [1]
    """
    y_score, available = untorched(y_score), untorched(available)
    _check_not_foreign_table(y_score, "y_score")
    _check_not_foreign_table(available, "available")
    _check_real_dtype(y_score, "y_score")
    if isinstance(y_score, pd.DataFrame) and isinstance(available, pd.DataFrame):
        # Two DataFrames are matched by label, as in the other metrics: a mask
        # such as y_true.notna() with its models in another order would, by
        # position, allow exactly the wrong models.
        available = _align_frames(y_score, available, names=("y_score", "available"))
    elif isinstance(y_score, pd.DataFrame) and isinstance(available, pd.Series):
        # A Series names its models in its index: by position, an outage
        # mask {"a": True, "b": False} beside columns [b, a] allowed only b.
        if not available.index.equals(y_score.columns):
            if not _same_labels(y_score.columns, available.index):
                raise _mismatch(
                    y_score.columns,
                    available.index,
                    "columns",
                    "models",
                    ("y_score", "available"),
                    series=True,
                )
            available = available.loc[y_score.columns]
    # check_array as for the other metrics (sparse input named, pd.NA read as
    # NaN), but -inf, +inf and NaN are allowed and the 2-D check is our own.
    y_score = check_array(
        y_score,
        dtype=np.float64,
        ensure_all_finite=False,
        ensure_2d=False,
        allow_nd=True,
        ensure_min_samples=0,
        ensure_min_features=0,
        input_name="y_score",
    )
    if y_score.ndim != 2:
        raise ValueError(
            f"y_score must be 2-D, shape (n_queries, n_models); got shape "
            f"{y_score.shape}. Pass one row per query, e.g. [y_score] for a "
            "single query."
        )
    n_queries, n_models = y_score.shape
    if not n_models:
        raise ValueError(
            f"y_score has no models (shape {y_score.shape}); route needs at "
            "least one model to choose."
        )
    if available is None:
        available = np.ones(y_score.shape, dtype=bool)
    else:
        available = _as_mask(available)
        # Only a mask: model indices or names cast to bool would silently
        # mean "every model but index 0" or "every model".
        if available.dtype != bool:
            raise TypeError(
                f"available must be a boolean mask (True where a model may be "
                f"chosen); got dtype {available.dtype}. For model indices, build "
                "the mask, e.g. mask = np.zeros(n_models, bool); mask[indices] = "
                "True."
            )
        if available.shape not in {(n_queries, n_models), (n_models,)}:
            raise ValueError(
                f"available must have shape (n_queries, n_models) = "
                f"{(n_queries, n_models)} or (n_models,) = ({n_models},), like "
                f"y_score; got shape {available.shape}."
            )
        available = np.broadcast_to(available, y_score.shape)
    if not available.any(axis=1).all():
        raise ValueError("available must allow at least one model for every query.")
    masked = np.where(available & ~np.isnan(y_score), y_score, -np.inf)
    routed = np.argmax(masked, axis=1).astype(np.int64)
    # A row of -inf (e.g. a huge cost weight) makes argmax return column 0,
    # which may be unavailable: take the first available model instead.
    stuck = ~available[np.arange(len(routed)), routed]
    routed[stuck] = np.argmax(available[stuck], axis=1)
    return routed


def routing_accuracy(y_true, y_score):
    """Mean realised score of the routed model over queries.

    Each query is routed to the model with the largest ``y_score`` among the
    models that have an observed score for it (NaN in ``y_true`` means "not
    evaluated", so such a model cannot be judged and is not a candidate). On a
    complete matrix this is the usual routing accuracy; on a sparse one it
    ranks only the evaluated models and never counts a missing score as wrong.

    Parameters
    ----------
    y_true : array-like of shape (n_queries, n_models)
        Observed scores in [0, 1], NaN where missing. Every query needs at
        least one observed score.
    y_score : array-like of shape (n_queries, n_models)
        Predicted scores or utilities; larger is better. -inf is allowed (a
        utility overflowed by a huge cost weight); NaN and +inf are not.
        Matched to ``y_true`` by position, or, when both are DataFrames, by
        their column (model) and row (query) labels, which must be the same.

    Returns
    -------
    accuracy : float

    Examples
    --------
    >>> import numpy as np
    >>> y_true = [[1, 0], [0, 1], [np.nan, 0]]
    >>> y_score = [[0.9, 0.1], [0.8, 0.2], [0.9, 0.1]]
    >>> routing_accuracy(y_true, y_score)  # (1 + 0 + 0) / 3
    0.333...

    Two DataFrames are matched by labels, not by position:

    >>> import pandas as pd
    >>> y_true = pd.DataFrame({"a": [1, 0], "b": [0, 1]}, index=["q1", "q2"])
    >>> y_score = pd.DataFrame({"b": [0.9, 0.1], "a": [0.1, 0.9]}, index=["q2", "q1"])
    >>> routing_accuracy(y_true, y_score)
    1.0
    """
    y_true, observed, y_score = _check_pair(y_true, y_score, utility=True)
    routed = route(y_score, observed)
    return float(y_true[np.arange(len(y_true)), routed].mean())


def oracle_accuracy(y_true):
    """Mean over queries of the best observed score: a perfect router's accuracy.

    Parameters
    ----------
    y_true : array-like of shape (n_queries, n_models)
        Observed scores in [0, 1], NaN where missing; every query needs at
        least one observed score. A long evaluation table converts with
        ``check_evals(evals).to_dense()``.

    Returns
    -------
    accuracy : float

    Examples
    --------
    >>> oracle_accuracy([[1, 0], [0, 0], [0.5, float("nan")]])
    0.5
    """
    y_true, _ = _check_y_true(y_true)
    return float(np.nanmax(y_true, axis=1).mean())


def single_best_accuracy(y_true, *, model=None):
    """Routing accuracy of always choosing one model.

    Parameters
    ----------
    y_true : array-like of shape (n_queries, n_models)
        Observed scores in [0, 1], NaN where missing.
    model : int or column label, default=None
        The model to use, typically the best one on training data; it needs
        an observed score in ``y_true``. For a DataFrame ``y_true``, a column
        label (DataFrames are matched by label, as in the other metrics);
        otherwise a column position in [0, n_models - 1]. Defaults to the
        column with the best mean observed score in ``y_true`` itself (an
        in-sample choice; pass the training choice for an honest baseline),
        among the models that have one. Queries where that model has no
        score are skipped.

    Returns
    -------
    accuracy : float

    Examples
    --------
    >>> single_best_accuracy([[1, 0], [1, 1], [0, 1]])
    0.666...
    >>> single_best_accuracy([[1, 0], [1, 1], [0, 1]], model=1)
    0.666...

    A DataFrame's model is named by its column label:

    >>> import pandas as pd
    >>> y_true = pd.DataFrame({"b": [1, 1, 0], "a": [0, 1, 0]})
    >>> single_best_accuracy(y_true, model="a")
    0.333...
    """
    columns = y_true.columns if isinstance(y_true, pd.DataFrame) else None
    y_true, observed = _check_y_true(y_true)
    n_scored = observed.sum(axis=0)
    if model is None:
        # A model without scores has no mean (np.nanmean's NaN would win the
        # argmax); _check_y_true guarantees that some model has one.
        means = np.full(y_true.shape[1], -np.inf)
        total = np.where(observed, y_true, 0.0).sum(axis=0)
        np.divide(total, n_scored, out=means, where=n_scored > 0)
        position = int(np.argmax(means))
        model = position if columns is None else columns[position]
    elif columns is not None:
        position = _column_position(columns, model)
    else:
        if isinstance(model, bool) or not isinstance(model, Integral):
            raise TypeError(
                f"model must be an int, a column position of y_true in [0, "
                f"{y_true.shape[1] - 1}]; got {model!r} ({type(model).__name__})."
            )
        if not 0 <= model < y_true.shape[1]:
            raise ValueError(
                f"model={model} should be a column position of y_true in [0, "
                f"{y_true.shape[1] - 1}] (y_true has {y_true.shape[1]} models)."
            )
        position = int(model)
    if not n_scored[position]:
        raise ValueError(
            f"model={model!r} has no observed score in y_true (its column is all "
            "NaN); pick a model scored on these queries."
        )
    column = y_true[:, position]
    return float(column[observed[:, position]].mean())


def _column_position(columns, model):
    """The position of the column labelled ``model``: a DataFrame names its
    models by its columns, and reading ``model`` as a position would pick
    another model wherever the labels are not 0, 1, ... in order."""
    # A bool would match the label 1 or 0 (True == 1) without naming a model.
    if isinstance(model, bool):
        raise TypeError(
            f"model must be a column label of y_true; got {model!r} (bool)."
        )
    try:
        position = columns.get_loc(model)
    except (KeyError, TypeError, pd.errors.InvalidIndexError):
        raise ValueError(
            f"model={model!r} is not a column label of y_true; its columns are "
            f"{_preview(columns)}. y_true is a DataFrame, so model names a column "
            "by label; pass y_true.to_numpy() to choose one by position."
        ) from None
    if not isinstance(position, Integral):  # a slice: part of a MultiIndex key
        raise ValueError(
            f"model={model!r} is part of a column label of y_true (it selects "
            f"{_preview(columns[position])}); name one model by its full label."
        )
    return int(position)


def correctness_accuracy(y_true, y_score, *, threshold=0.5):
    """Fraction of observed (query, model) cells whose correctness is predicted.

    A cell counts as correct when ``y_score >= threshold`` agrees with
    ``y_true >= threshold``; missing cells are skipped.

    Made for binary scores (0 or 1). On graded scores (fractions in [0, 1])
    it compares a predicted mean with the side of the threshold that the
    observed score falls on, so it rewards predicting the median score, not
    the expected one: where a model scores 1 on a third of the queries and 0.4
    on the rest, the calibrated P(correct) 0.6 (the mean, which training
    targets) scores 1/3, a miscalibrated 0.4 scores 2/3 (see Examples). For
    graded pools use :func:`correctness_log_loss` (the ``"neg_log_loss"``
    scorer), which the expected score minimises; so does the Brier score
    ``np.nanmean((y_true - y_score) ** 2)`` (not provided by this package).

    Parameters
    ----------
    y_true : array-like of shape (n_queries, n_models)
        Observed scores in [0, 1], NaN where missing.
    y_score : array-like of shape (n_queries, n_models)
        Predicted P(correct), in [0, 1] (utilities and decision values are
        refused).
        Two DataFrames are matched by column and row labels, as in
        :func:`routing_accuracy`.
    threshold : float, default=0.5
        Score at which a cell counts as correct, in [0, 1].

    Returns
    -------
    accuracy : float

    Examples
    --------
    >>> correctness_accuracy([[1, 0], [0, float("nan")]], [[0.8, 0.6], [0.1, 0.9]])
    0.666...

    Graded scores of mean 0.6, two of three below 0.5: the mean scores worse
    than a miscalibrated 0.4, which the log loss ranks right.

    >>> y_true = [[1.0], [0.4], [0.4]]
    >>> correctness_accuracy(y_true, [[0.6]] * 3), correctness_accuracy(y_true, [[0.4]] * 3)
    (0.333..., 0.666...)
    >>> correctness_log_loss(y_true, [[0.6]] * 3) < correctness_log_loss(y_true, [[0.4]] * 3)
    True
    """
    threshold = _check_number(
        threshold, "threshold", "in [0, 1]", lambda t: 0 <= t <= 1
    )
    # The threshold at the precision of each input (each column of a
    # DataFrame): a graded score 0.7 held in float32 (as check_evals and
    # parquet files hold them) is 0.69999999 in float64, and fell below
    # threshold=0.7.
    true_threshold = _thresholds(threshold, y_true)
    score_threshold = _thresholds(threshold, y_score, order=y_true)
    y_true, observed, y_score = _check_pair(y_true, y_score)
    _check_probabilities(y_score, "a correctness accuracy")
    hit = (y_score >= score_threshold) == (y_true >= true_threshold)
    return float(hit[observed].mean())


def _thresholds(threshold, values, order=None):
    """``threshold`` in the precision ``values`` came in: one per column of
    a DataFrame (columns of float16, float32 and float64 differ), in the
    column order of the DataFrame ``order`` where it holds the same labels
    (as :func:`_check_pair` aligns them), else one number."""
    if not isinstance(values, pd.DataFrame):
        return in_input_precision(threshold, values)
    if (
        isinstance(order, pd.DataFrame)
        and values.columns.is_unique
        and order.columns.is_unique
        and set(values.columns) == set(order.columns)
    ):
        values = values[order.columns]
    return np.array(
        [
            in_input_precision(threshold, values.iloc[:, i])
            for i in range(values.shape[1])
        ]
    )


def correctness_log_loss(y_true, y_score, *, eps=1e-7):
    """Mean binary cross-entropy over observed cells (fractional scores allowed).

    Parameters
    ----------
    y_true : array-like of shape (n_queries, n_models)
        Observed scores in [0, 1], NaN where missing.
    y_score : array-like of shape (n_queries, n_models)
        Predicted P(correct), in [0, 1].
        Two DataFrames are matched by column and row labels, as in
        :func:`routing_accuracy`.
    eps : float, default=1e-7
        Predictions are clipped to ``[eps, 1 - eps]`` so that the loss stays
        finite for any ``eps > 0`` (``1 - p`` is kept at least ``eps`` where
        ``1 - eps`` rounds to 1, below about 1e-16); in [0, 0.5), as a larger
        ``eps`` would cross the bounds (0 clips nothing: a confident wrong
        prediction then costs inf).

    Returns
    -------
    loss : float

    Examples
    --------
    >>> round(correctness_log_loss([[1, 0]], [[0.5, 0.5]]), 4)
    0.6931
    """
    eps = _check_number(eps, "eps", "in [0, 0.5)", lambda e: 0 <= e < 0.5)
    y_true, observed, y_score = _check_pair(y_true, y_score)
    _check_probabilities(y_score, "a log loss")
    p = np.clip(y_score[observed], eps, 1 - eps)
    # Below eps ~ 1.1e-16, 1 - eps rounds to 1.0 and the clip leaves p = 1,
    # so 1 - p = 0 would cost inf: floor it at eps there (elsewhere 1 - p is
    # kept bit for bit; with eps=0 it stays 0).
    q = np.where(p < 1, 1 - p, eps)
    t = y_true[observed]
    # xlogy(0, 0) is 0 where 0 * log(0) is NaN: with eps=0, a prediction of 0
    # for a score of 0 costs nothing.
    return float(-(xlogy(t, p) + xlogy(1 - t, q)).mean())
