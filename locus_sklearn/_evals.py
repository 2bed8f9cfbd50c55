"""The evaluation table: one validation path for ``evals`` and one for queries.

Every estimator takes scored evaluations in long format, one row per
(model, query, score). :func:`check_evals` validates such a table and converts it
once into compact index arrays (:class:`EvalTable`); :func:`check_queries`
validates the queries given at prediction time.
"""

import sys
from collections.abc import Iterable, KeysView, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from decimal import Decimal
from numbers import Rational, Real

import numpy as np
import pandas as pd

from ._tensors import untorched

__all__ = ["EvalTable", "check_evals", "check_model_costs", "check_queries"]

REQUIRED_COLUMNS = ("model", "query", "score")
OPTIONAL_COLUMNS = ("task",)


@dataclass(frozen=True, eq=False)
class EvalTable:
    """Validated evaluations as compact index arrays.

    Rows are sorted by model, then query; duplicate (model, query) rows of the
    input have been averaged into one.

    Attributes
    ----------
    models : ndarray of str, shape (n_models,)
        Distinct model names, sorted (the ``classes_`` convention).
    queries : ndarray of str, shape (n_queries,)
        Distinct queries, sorted.
    model_index : ndarray of int64, shape (n_rows,)
        Row -> index into ``models``.
    query_index : ndarray of int64, shape (n_rows,)
        Row -> index into ``queries``.
    score : ndarray of float64, shape (n_rows,)
        Score in [0, 1] of each row, as given (duplicates averaged in
        float64): a graded 0.7 stays 0.7, where float32 would read
        0.699999988. The network and the kernel readout take float32
        copies; a saved router stores its evaluations in float32.
    query_task : ndarray of str, shape (n_queries,) or None
        Task of each distinct query, when the input had a ``task`` column.
    n_input_rows : int
        Number of rows before duplicates were averaged.

    Examples
    --------
    >>> from locus_sklearn._evals import check_evals
    >>> table = check_evals({"model": ["b", "a", "a"], "query": ["q1", "q1", "q1"],
    ...                      "score": [1.0, 0.0, 1.0]})
    >>> table.models.tolist(), table.score.tolist()
    (['a', 'b'], [0.5, 1.0])
    """

    models: np.ndarray
    queries: np.ndarray
    model_index: np.ndarray
    query_index: np.ndarray
    score: np.ndarray
    query_task: np.ndarray | None
    n_input_rows: int

    @property
    def n_models(self):
        return len(self.models)

    @property
    def n_queries(self):
        return len(self.queries)

    @property
    def n_rows(self):
        return len(self.score)

    @property
    def indptr(self):
        """Row offsets per model, shape (n_models + 1,): model ``m`` owns rows
        ``indptr[m]:indptr[m + 1]`` (rows are sorted by model)."""
        counts = np.bincount(self.model_index, minlength=self.n_models)
        return np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)

    def to_frame(self):
        """The table as a long DataFrame with columns model, query, score[, task].

        Returns
        -------
        frame : DataFrame of shape (n_rows, 3) or (n_rows, 4)
            One row per row of the table, in its order (sorted by model, then
            query; duplicates of the input already averaged), with a default
            ``RangeIndex``: columns ``model`` and ``query`` (str, in object
            columns: pandas' str dtype refuses a lone surrogate), ``score``
            (float64), and ``task`` (str, object) when the input had one.

        Examples
        --------
        >>> from locus_sklearn import check_evals
        >>> table = check_evals({"model": ["b", "a", "a"], "query": ["q2", "q2", "q1"],
        ...                      "score": [1.0, 0.0, 1.0]})
        >>> table.to_frame()
          model query  score
        0     a    q1    1.0
        1     a    q2    0.0
        2     b    q2    1.0
        """
        # Ids as object columns: pandas would infer its Arrow-backed str dtype,
        # which refuses a lone surrogate (as bytes.decode(errors=
        # "surrogateescape") gives) that check_evals accepts.
        frame = pd.DataFrame(
            {
                "model": pd.Series(self.models[self.model_index], dtype=object),
                "query": pd.Series(self.queries[self.query_index], dtype=object),
                "score": self.score.astype(np.float64),
            }
        )
        if self.query_task is not None:
            frame["task"] = pd.Series(self.query_task[self.query_index], dtype=object)
        return frame

    def to_dense(self, models=None):
        """Scores as a matrix of shape (n_queries, n_models) with NaN where missing.

        Parameters
        ----------
        models : array-like of str, default=None
            Column order. Defaults to ``self.models``; every model of the table
            must appear in it, once (extra models get all-NaN columns).

        Returns
        -------
        dense : ndarray of float64, shape (n_queries, n_columns)
            ``dense[i, j]`` is the score on query ``i`` of ``self.queries``
            (sorted) of model ``j`` of ``self.models`` (sorted; ``n_columns =
            n_models``) or, when given, of ``models`` in its order
            (``n_columns = len(models)``); NaN where that model has no
            evaluation of that query.

        Raises
        ------
        TypeError
            If ``models`` is a single string, not one-dimensional, or holds a
            name that is not a str.
        ValueError
            If a name repeats in ``models`` or a model of the table is missing
            from it.

        Examples
        --------
        >>> from locus_sklearn import check_evals
        >>> table = check_evals({"model": ["b", "a", "a"], "query": ["q2", "q2", "q1"],
        ...                      "score": [1.0, 0.0, 1.0]})
        >>> table.to_dense()
        array([[ 1., nan],
               [ 0.,  1.]])
        >>> table.to_dense(models=["b", "a", "c"])
        array([[nan,  1., nan],
               [ 1.,  0., nan]])
        """
        if models is None:
            columns = self.model_index
            n_columns = self.n_models
        else:
            models = _check_model_names(models)
            position = {name: i for i, name in enumerate(models)}
            unknown = [m for m in self.models if m not in position]
            if unknown:
                raise ValueError(
                    f"evals has {len(unknown)} model(s) that are not in models: "
                    f"{_preview(unknown)}."
                )
            lookup = np.array([position[m] for m in self.models], dtype=np.int64)
            columns = lookup[self.model_index]
            n_columns = len(models)
        dense = np.full((self.n_queries, n_columns), np.nan, dtype=np.float64)
        dense[self.query_index, columns] = self.score
        return dense


def _unordered(values):
    """Whether ``values`` is a set, whose order nobody chose: it iterates in
    hash order (for str, one that changes between processes with
    PYTHONHASHSEED). A dict's keys() are a set too, but keep the order they
    were inserted in."""
    return isinstance(values, AbstractSet) and not isinstance(values, KeysView)


def _is_polars_frame(values):
    """Whether ``values`` is a polars DataFrame (polars is not imported for
    this: if nothing imported it, no value is one)."""
    pl = sys.modules.get("polars")
    return pl is not None and isinstance(values, pl.DataFrame)


def _is_arrow_array(values):
    """Whether ``values`` is a pyarrow Array or ChunkedArray (pyarrow is not
    imported for this: if nothing imported it, no value is one)."""
    pa = sys.modules.get("pyarrow")
    return pa is not None and isinstance(values, (pa.Array, pa.ChunkedArray))


# A value's repr longer than this is cut to 80 characters in error messages:
# query texts (prompts) run to thousands, and one message could fill a
# terminal or a log. (Cutting only past 100 keeps ids and paths a little
# over 80 whole, where the cut would save little.)
_PREVIEW_WIDTH = 100


def _short_repr(value):
    """``repr(value)``, or past ``_PREVIEW_WIDTH`` characters its first 60
    and last 17 characters with the full length: of the string for a str,
    else of the repr. Both ends are kept: a text is told by its start, a path
    by its end."""
    text = repr(value)
    if len(text) <= _PREVIEW_WIDTH:
        return text
    size = len(value) if isinstance(value, str) else len(text)
    return f"{text[:60]}...{text[-17:]} ({size:,} characters)"


def _preview(values, limit=5):
    """The first ``limit`` values as a list literal for an error message.

    NumPy scalars are shown as the Python values they hold ('a', not
    np.str_('a')); a value whose repr is longer than 100 characters is cut
    to about 80 (see :func:`_short_repr`).

    Examples
    --------
    >>> import numpy as np
    >>> _preview(np.array(["a", "b", "c"]), limit=2)
    "['a', 'b', ...]"
    >>> _preview(["a" * 10_000])[58:]
    "aaa...aaaaaaaaaaaaaaaa' (10,000 characters)]"
    """
    values = list(values)
    head = (v.item() if isinstance(v, np.generic) else v for v in values[:limit])
    shown = ", ".join(map(_short_repr, head))
    return f"[{shown}{', ...' if len(values) > limit else ''}]"


def _check_model_names(models):
    """The column names of :meth:`EvalTable.to_dense` as a 1-D object array."""
    if isinstance(models, (str, bytes)):
        raise TypeError(
            f"models must be a sequence of model names, not a single string; "
            f"got {models!r}. Wrap one name in a list: [{models!r}]."
        )
    try:
        names = np.asarray(models, dtype=object)
        shape = names.shape
    except ValueError:  # nested sequences numpy cannot stack
        names, shape = None, "ragged"
    if names is None or names.ndim != 1:
        raise TypeError(
            "models must be a one-dimensional sequence of model names (str); got "
            f"{type(models).__name__} of shape {shape}."
        )
    bad = _non_strings(names)
    if len(bad):
        raise TypeError(
            f"models must hold model names (str); {len(bad)} of {len(names)} "
            f"entries are not (e.g. {_preview(bad[:5])})."
        )
    index = pd.Index(names, dtype=object)  # not str, which refuses lone surrogates
    repeated = index[index.duplicated()].unique()
    if len(repeated):
        # A dict of positions keeps the last: the first column would be all-NaN.
        raise ValueError(
            f"models repeats {len(repeated)} model name(s): {_preview(repeated)}; "
            "each model has one column, so name it once."
        )
    return names


def _check_columns(columns, name):
    """Refuse a table (or a Parquet schema) without the required columns, with
    one of the standard columns twice, or with MultiIndex columns."""
    if isinstance(columns, pd.MultiIndex):
        # frame["score"] of MultiIndex columns selects every column under
        # 'score': a DataFrame, which no check below expects.
        raise ValueError(
            f"{name} has MultiIndex columns {_preview(columns)}; each of 'model', "
            "'query', 'score' and 'task' must name one column. Flatten the "
            "columns first, e.g. evals.columns = evals.columns.get_level_values(0)."
        )
    missing = [c for c in REQUIRED_COLUMNS if c not in columns]
    if missing:
        raise ValueError(
            f"{name} is missing required column(s) {missing}; it has columns "
            f"{list(map(str, columns))}. Expected 'model', 'query', 'score' "
            "and optionally 'task'."
        )
    # frame["score"] of a table with two 'score' columns is a DataFrame, which
    # no check below expects: refuse it, naming the column.
    names = list(columns)
    repeated = [c for c in (*REQUIRED_COLUMNS, *OPTIONAL_COLUMNS) if names.count(c) > 1]
    if repeated:
        raise ValueError(
            f"{name} has column(s) {repeated} more than once; it has columns "
            f"{list(map(str, names))}. Each of 'model', 'query', 'score' and "
            "'task' must name one column."
        )


def _empty_error(name):
    """The error for a table (or a stream of chunks) without a row."""
    return ValueError(
        f"{name} is empty (0 rows); at least one scored evaluation is needed."
    )


def _as_frame(evals, name):
    if isinstance(evals, pd.DataFrame):
        return evals
    if isinstance(evals, Mapping):
        # Only the standard columns are read, as from a DataFrame: other
        # entries (per-row vectors, a scalar of metadata, a column of another
        # length) are ignored, not validated. A missing column is reported
        # with every key of the mapping, a misspelt name among them.
        standard = (*REQUIRED_COLUMNS, *OPTIONAL_COLUMNS)
        if any(column not in evals for column in REQUIRED_COLUMNS):
            _check_columns(pd.Index(list(evals), dtype=object), name)
        evals = {
            key: untorched(column)
            for key, column in evals.items()
            if isinstance(key, str) and key in standard
        }
        lengths = {}
        for key, column in evals.items():
            try:
                ndim = np.ndim(column)
            except ValueError:  # a ragged list: one (bad) entry per row
                ndim = 1
            if (
                ndim == 0
                and isinstance(column, Iterable)
                and not isinstance(column, (str, bytes))
            ):
                # A generator, a set, a dict view: NumPy reads each as one
                # value, and "shape ()" would not say what to change.
                what = (
                    "which has no row order"
                    if _unordered(column)
                    else "not a sequence of one value per row"
                )
                raise TypeError(
                    f"{name}[{key!r}] is a {type(column).__name__}, {what}; pass "
                    "a list or an array of one value per row, in the order of "
                    "the rows."
                )
            if ndim != 1:
                raise ValueError(
                    f"{name}[{key!r}] must be one-dimensional; got a value of "
                    f"shape {np.shape(column)}."
                )
            lengths[key] = len(column)
        if len(set(lengths.values())) > 1:
            raise ValueError(
                f"{name} columns must all have the same length; got lengths {lengths}."
            )
        # Columns are read by position. pandas Series carry their rows' labels
        # in their index, and pd.DataFrame(mapping) would pair rows by it:
        # Series in another row order would silently pair the wrong rows.
        series = {k: c.index for k, c in evals.items() if isinstance(c, pd.Series)}
        if series:
            first, index = next(iter(series.items()))
            differ = [k for k, other in series.items() if not other.equals(index)]
            if differ:
                raise ValueError(
                    f"{name} holds pandas Series whose indexes differ: the index "
                    f"of column(s) {differ} is not that of {first!r}. A mapping's "
                    "columns are read by position, and reading these so could "
                    "pair the wrong rows; pass pd.DataFrame(mapping) to pair "
                    "rows by index, or each column's .to_numpy() if the "
                    "positions match."
                )
        try:
            # Each column as a Series (by position: a Series' own index is
            # replaced), so nullable, categorical and Arrow dtypes survive, as
            # in a DataFrame; list() would turn pyarrow arrays into Arrow
            # scalars and pd.NA into an object. set_axis, not reset_index:
            # pandas 2.0 re-infers the dtype there, and fails on an int
            # beyond float64's range in an object column.
            return pd.DataFrame(
                {
                    key: _as_series(column).set_axis(pd.RangeIndex(lengths[key]))
                    for key, column in evals.items()
                }
            )
        except (TypeError, ValueError, OverflowError) as exc:
            # pandas refuses some values outright.
            raise TypeError(
                f"{name} could not be read as a table of columns: {exc}"
            ) from None
    # Named with its module: a polars DataFrame's bare type name, "DataFrame",
    # read as the very type the message asks for.
    hint = (
        " Convert it with its .to_pandas() method."
        if callable(getattr(evals, "to_pandas", None))
        else ""
    )
    raise TypeError(
        f"{name} must be a pandas DataFrame or a mapping of equal-length columns "
        f"'model', 'query', 'score' (optionally 'task'); got "
        f"{_type_name(evals)}.{hint}"
    )


def _check_not_foreign_table(values, name):
    """Refuse a table of named columns that is not a pandas object (a pyarrow
    Table or RecordBatch, a polars DataFrame: anything with a ``to_pandas``
    method and column names), as :func:`~locus_sklearn.check_evals` does.

    NumPy reads one as a bare array: its column names were lost, so a matrix
    was read by position where a DataFrame is matched by label (two tables
    with their models in other orders paired the wrong models), and a model's
    name became a placeholder.
    """
    if (
        not isinstance(values, pd.DataFrame | pd.Series)
        and callable(getattr(values, "to_pandas", None))
        and (hasattr(values, "column_names") or hasattr(values, "columns"))
    ):
        raise TypeError(
            f"{name} must be an array-like or a pandas DataFrame; got "
            f"{_type_name(values)}, whose column names would be lost (read as "
            "a bare array, by position). Convert it with its .to_pandas() "
            "method."
        )


def _type_name(value):
    """The type of ``value`` for messages: with its module unless builtin
    (``polars.dataframe.frame.DataFrame``, ``list``)."""
    kind = type(value)
    if kind.__module__ == "builtins":
        return kind.__qualname__
    return f"{kind.__module__}.{kind.__qualname__}"


def _as_series(column):
    """A mapping's column as a pandas Series; strings in a list, a tuple or a
    NumPy array stay Python objects.

    pandas would infer its Arrow-backed str dtype for them, which refuses a
    lone surrogate (what ``bytes.decode(errors="surrogateescape")`` gives for
    bytes that are not UTF-8), and model names, queries and tasks may hold one.
    """
    if isinstance(column, (list, tuple, np.ndarray)) and (
        pd.api.types.infer_dtype(column, skipna=True) == "string"
    ):
        return pd.Series(column, dtype=object)
    try:
        return pd.Series(column)
    except OverflowError:
        # pandas < 3 casts a column of numbers holding an int beyond
        # float64's range to float and fails; pandas 3 keeps it as objects,
        # and check_evals reports such a score as outside [0, 1].
        return pd.Series(column, dtype=object)


def _object_frame(columns, index=None):
    """``pd.DataFrame(columns, index=index)`` whose str columns and str index
    stay Python objects (see :func:`_as_series`): for frames built from model
    names, queries or tasks, which may hold a lone surrogate.

    ``columns`` maps each name to a 1-D list, tuple or array (all of one
    length); ``index`` (None: a RangeIndex) labels the rows: an Index is
    used as it is, any other array-like is read as ``columns`` are (str
    labels in an object-dtype Index, other labels as pandas infers them).

    >>> frame = _object_frame({"model": ["a\\udce9"], "n": [2]}, index=["q\\udce9"])
    >>> frame.dtypes.tolist(), frame.index.dtype
    ([dtype('O'), dtype('int64')], dtype('O'))
    """
    frame = pd.DataFrame({key: _as_series(value) for key, value in columns.items()})
    if index is not None:
        # Set after: given to the constructor, it would align the Series'
        # RangeIndex to it (all-NaN rows) instead of labelling the rows.
        frame.index = index if isinstance(index, pd.Index) else _as_series(index)
    return frame


def _sorted_codes(values):
    """``np.unique(values, return_inverse=True)`` for an object array of str.

    Hashes the rows (``pd.factorize``) and sorts only the distinct values:
    ``np.unique`` would sort every row by Python string comparison, about 3 s
    per million rows. (``astype(str)`` would build a fixed-width array as wide
    as the longest query text.) The order is the same: Python's str order.
    """
    codes, uniques = pd.factorize(values, sort=True)
    return _plain_str(uniques), codes.astype(np.intp, copy=False)


def _plain_str(values):
    """The str of ``values`` as an object array of plain str.

    A str subclass (NumPy's str_, what ``list(np_array)`` gives) would reach
    a router's ``classes_``, its predictions and output index, and show as
    np.str_('a'), where the same ids from a '<U' array or a DataFrame give
    'a' (and a saved and loaded router gives 'a'). ``str.__str__`` keeps the
    text of any subclass. Only arrays holding another type are copied.
    """
    values = np.asarray(values, dtype=object)
    if all(type(v) is str for v in values):
        return values
    return np.array([str.__str__(v) for v in values], dtype=object)


def _non_strings(values):
    """The entries of the object array ``values`` that are not str (often none)."""
    # pandas checks the types in C (a per-row Python loop costs 0.5 s per
    # million rows); the loop runs only when there is something to report.
    if pd.api.types.infer_dtype(values, skipna=False) == "string":
        return values[:0]
    is_str = np.fromiter((isinstance(v, str) for v in values), bool, len(values))
    return values[~is_str]


def _is_missing(value):
    """Whether ``value`` is a missing value (None, NaN, pd.NA, NaT)."""
    try:
        # An array-like entry is not a scalar missing value. Its dimensions
        # are checked first: bool() of pd.isna's array result raises from
        # numpy 2.2 on, but before that only warns for an empty one (and
        # gives a one-element one's truth).
        return np.ndim(value) == 0 and bool(pd.isna(value))
    except (TypeError, ValueError, ArithmeticError):
        # A ragged nested list has no dimensions (ValueError); a signalling
        # Decimal NaN raises decimal.InvalidOperation (an ArithmeticError).
        return False


def _check_string_column(values, name, column):
    """Raise unless every entry of ``values`` is a non-empty str."""
    values = np.asarray(values, dtype=object)
    bad = _non_strings(values)
    if len(bad):
        # Missing ids (NaN, None, pd.NA) get their own remedy: .astype(str)
        # would turn them into the literal id "nan", accepted silently.
        missing = np.fromiter((_is_missing(v) for v in bad), bool, len(bad))
        n_missing = int(missing.sum())
        others = bad[~missing]
        if not len(others):
            raise TypeError(
                f"{name}[{column!r}] must hold strings; {n_missing} missing "
                f"value(s) in {column!r}: drop or fill those rows."
            )
        hint = (
            f" ({n_missing} missing value(s) in {column!r}: drop or fill those rows)"
            if n_missing
            else ""
        )
        raise TypeError(
            f"{name}[{column!r}] must hold strings; {len(others)} of "
            f"{len(values)} rows do not (e.g. {_preview(others[:5])}). Convert "
            f"ids with .astype(str) if they are numbers{hint}."
        )
    empty = values == ""
    if empty.any():
        raise ValueError(
            f"{name}[{column!r}] has {int(empty.sum())} empty string(s); every row "
            "needs a non-empty id."
        )
    return values


# Values that Python or NumPy count as numbers but that are no real numbers
# here: a bool is an int to Python, and np.timedelta64 is an np.integer (so
# a numbers.Integral) whose value would lose its unit (200 ms and 2 s as 200
# and 2). np.datetime64 is listed too, in case NumPy ever counts it alike.
_NOT_REAL = (bool, np.bool_, np.timedelta64, np.datetime64)


def _is_real_number(value):
    """Whether ``value`` is a real number as a score: a ``numbers.Real`` (an
    int or a float of Python or NumPy, a ``fractions.Fraction``), as
    :func:`check_model_costs` reads costs; not a bool (which is an int to
    Python) nor a duration (an integer to NumPy). A Decimal is no
    ``numbers.Real``."""
    return isinstance(value, Real) and not isinstance(value, _NOT_REAL)


def _as_float(number):
    """A real number as a float; an int beyond float64's range as +-inf, which
    the callers report as out of range (float() would raise OverflowError)."""
    try:
        return float(number)
    except OverflowError:
        return np.inf if number > 0 else -np.inf


def _is_real_dtype(dtype):
    """Whether a column or array of ``dtype`` holds real numbers: integers or
    floats of NumPy, pandas (nullable) or Arrow. Not booleans, complex numbers
    (numpy would drop the imaginary part), durations (numpy counts
    timedelta64 as an integer type) or decimals (kind "O"), whose values
    are refused rather than converted, however the column stores them.
    """
    return getattr(dtype, "kind", "O") in "iuf"


def _check_score_dtype(dtype, name):
    """Refuse a score column of boolean or complex ``dtype``, or of Arrow
    decimals, with a message naming the conversion to make."""
    if pd.api.types.is_bool_dtype(dtype):
        raise TypeError(
            f"{name}['score'] has boolean dtype; scores must be numbers in [0, 1]. "
            "Convert explicitly, e.g. evals['score'].astype(float)."
        )
    if pd.api.types.is_complex_dtype(dtype):
        # Converting to float would silently drop the imaginary part.
        raise TypeError(
            f"{name}['score'] has complex dtype {dtype}; scores must be real "
            "numbers in [0, 1]. Convert explicitly if the imaginary parts are zero, "
            "e.g. evals['score'].to_numpy().real."
        )
    if pd.api.types.is_numeric_dtype(dtype) and not _is_real_dtype(dtype):
        # Arrow decimals: refused, as Decimal objects and Parquet decimals are.
        raise TypeError(
            f"{name}['score'] has dtype {dtype}; scores must be integers or floats "
            "in [0, 1]. Decimals are refused rather than converted: cast them, "
            "e.g. evals['score'].astype(float)."
        )


def _check_score_column(values, name):
    series = pd.Series(values)
    _check_score_dtype(series.dtype, name)
    if not _is_real_dtype(series.dtype):
        items = series.to_numpy(dtype=object)
        is_number = np.fromiter(map(_is_real_number, items), bool, len(items))
        if not is_number.all():
            # A missing value (None, pd.NA, NaT) is no value of the wrong
            # type: it is reported as missing, as NaN in a float column is.
            missing = np.fromiter(map(_is_missing, items), bool, len(items))
            bad = items[~is_number & ~missing]
            if len(bad):
                decimals = any(isinstance(v, Decimal) for v in bad)
                hint = (
                    " Decimals are refused rather than converted: cast them, e.g. "
                    "evals['score'].astype(float)."
                    if decimals
                    else ""
                )
                raise TypeError(
                    f"{name}['score'] must hold numbers in [0, 1]; {len(bad)} of "
                    f"{len(items)} rows are not numbers (e.g. "
                    f"{_preview(bad[:5])}).{hint}"
                )
            items = np.where(missing, np.nan, items)
        # One by one: a Python int beyond float64's range made the whole
        # conversion fail with a bare OverflowError; it is infinite here.
        score = np.fromiter(map(_as_float, items), np.float64, len(items))
        # Such an int (or Fraction) is finite, only too large: reported
        # below as outside [0, 1], not as infinite (no rational number is).
        huge = np.isinf(score) & np.fromiter(
            (isinstance(v, Rational) for v in items), bool, len(items)
        )
    else:
        score = series.to_numpy(dtype=np.float64, na_value=np.nan)
        items, huge = None, np.zeros(len(score), dtype=bool)
    missing = np.isnan(score)
    if missing.any():
        raise ValueError(
            f"{name}['score'] has {int(missing.sum())} missing value(s) (NaN, None "
            f"or pd.NA) out of {len(score)} rows; every row needs a score in "
            "[0, 1]: drop or fill those rows."
        )
    infinite = np.isinf(score) & ~huge
    if infinite.any():
        raise ValueError(
            f"{name}['score'] has {int(infinite.sum())} infinite value(s) out of "
            f"{len(score)} rows; every score must be a finite number in [0, 1]."
        )
    outside = (score < 0.0) | (score > 1.0)
    if outside.any():
        # A huge int is shown as given, not as the inf it was read as.
        shown = np.where(huge, items, score) if huge.any() else score
        raise ValueError(
            f"{name}['score'] has {int(outside.sum())} value(s) outside [0, 1] "
            f"(e.g. {_preview(shown[outside][:5].tolist())}); scores must lie in "
            "[0, 1]."
        )
    return score


def tasks_by_query(query_index, task, queries, name):
    """The task of each of ``queries``, from rows of query ``query_index``
    (codes into ``queries``) and ``task``; a query given two tasks is a
    ValueError naming ``name``.

    Returns
    -------
    query_task : ndarray of object, shape (len(queries),)
    """
    # The distinct (query, task) pairs, in whole-column operations: a
    # groupby(...).unique() ran Python code per query, 50 times the cost of
    # the rest of check_evals (9 s for 100,000 queries).
    # Tasks as objects, not pandas' inferred str dtype (lone surrogates).
    pairs = pd.DataFrame(
        {"query": query_index, "task": pd.Series(task, dtype=object)}
    ).drop_duplicates()
    repeated = pairs["query"].duplicated(keep=False).to_numpy()
    if repeated.any():
        conflicting = np.unique(pairs["query"].to_numpy()[repeated])
        examples = [queries[i] for i in conflicting[:3]]
        raise ValueError(
            f"{name}['task'] gives {len(conflicting)} quer(y/ies) more than one "
            f"task (e.g. {_preview(examples)}); each query belongs to one task."
        )
    query_task = np.empty(len(queries), dtype=object)
    query_task[pairs["query"].to_numpy()] = _plain_str(pairs["task"].to_numpy())
    return query_task


def check_evals(evals, *, name="evals"):
    """Validate a long-format evaluation table and convert it to index arrays.

    Parameters
    ----------
    evals : DataFrame or mapping of equal-length columns
        One row per scored evaluation with columns ``model`` (str), ``query``
        (str: query text, or an id the encoder resolves) and ``score`` (float in
        [0, 1]); optionally ``task`` (str, one task per query). Other columns
        are ignored. A mapping's columns are read by position: pandas Series
        among them must share one index (pass ``pd.DataFrame(mapping)`` to
        pair rows by index); a torch tensor is read as NumPy reads it (a
        bfloat16 one, or one that requires grad, too). Model names, queries
        and tasks are compared as exact strings, neither stripped nor
        Unicode-normalised: ``"gpt-4 "`` (a trailing space) is another
        model than ``"gpt-4"``,
        and an accented letter written as one code point another text than
        the letter followed by a combining accent. Normalise them first
        (``str.strip``, ``unicodedata.normalize("NFC", ...)``) where sources
        differ.
    name : str, default="evals"
        Name of the parameter, used in error messages.

    Returns
    -------
    table : EvalTable
        Rows sorted by (model, query). Duplicate (model, query) rows are
        averaged into one row, so repeated runs of the same query give a
        fractional score; no row is dropped.

    Raises
    ------
    TypeError
        If ``evals`` is not a table, a mapping's column is a set or a
        generator (give a list in row order), ids are not strings (or are
        missing), or scores are not real numbers: booleans (a flag is not a
        score; convert with ``astype(float)`` if 0/1 is meant), complex
        numbers, decimals and durations are refused rather than converted.
    ValueError
        If a column is missing or repeated, the columns are a MultiIndex,
        the table is empty, a score is missing (NaN, None or ``pd.NA``),
        infinite or outside [0, 1] (a Python int too large for a float is
        outside, not infinite), a query has conflicting tasks, or the pandas
        Series of a mapping have different indexes.

    Examples
    --------
    >>> import pandas as pd
    >>> from locus_sklearn._evals import check_evals
    >>> evals = pd.DataFrame({"model": ["m2", "m1", "m1"],
    ...                       "query": ["2+2?", "2+2?", "capital of France?"],
    ...                       "score": [1.0, 0.0, 1.0]})
    >>> table = check_evals(evals)
    >>> table.models.tolist(), table.queries.tolist()
    (['m1', 'm2'], ['2+2?', 'capital of France?'])
    >>> table.to_dense()
    array([[ 0.,  1.],
           [ 1., nan]])
    """
    frame = _as_frame(evals, name)
    _check_columns(frame.columns, name)
    if len(frame) == 0:
        raise _empty_error(name)
    model = _check_string_column(frame["model"].to_numpy(dtype=object), name, "model")
    query = _check_string_column(frame["query"].to_numpy(dtype=object), name, "query")
    score = _check_score_column(frame["score"], name)

    models, model_index = _sorted_codes(model)
    queries, query_index = _sorted_codes(query)

    query_task = None
    if "task" in frame.columns:
        task = _check_string_column(frame["task"].to_numpy(dtype=object), name, "task")
        query_task = tasks_by_query(query_index, task, queries, name)

    # Average duplicate (model, query) rows; sort by (model, query).
    key = model_index.astype(np.int64) * len(queries) + query_index
    unique_key, inverse = np.unique(key, return_inverse=True)
    total = np.bincount(inverse, weights=score, minlength=len(unique_key))
    count = np.bincount(inverse, minlength=len(unique_key))
    return EvalTable(
        models=models,
        queries=queries,
        model_index=unique_key // len(queries),
        query_index=unique_key % len(queries),
        score=total / count,
        query_task=query_task,
        n_input_rows=len(frame),
    )


def frame_column(frame, column, name, what):
    """The one column ``column`` of the DataFrame ``frame`` (the parameter
    ``name``), holding ``what``, as a Series (a polars one for a polars
    ``frame``, whose column names are unique).

    Raises
    ------
    ValueError
        If ``frame`` has no such column, or several (repeated labels, or a
        MultiIndex with ``column`` as a first level: iterating the selection
        would give its labels).

    >>> frame_column(pd.DataFrame({"query": ["q1"]}), "query", "X", "queries").tolist()
    ['q1']
    """
    if column not in frame.columns:
        raise ValueError(
            f"{name} is a DataFrame without a {column!r} column; it has columns "
            f"{_preview(frame.columns)}. Give the {what} in one column named "
            f"{column!r}."
        )
    selected = frame[column]
    if isinstance(selected, pd.DataFrame):
        raise ValueError(
            f"{name}[{column!r}] is not one column but a DataFrame of "
            f"{selected.shape[1]} column(s) {_preview(selected.columns)}; give "
            f"the {what} in one column named {column!r} (rename or drop the "
            "others, or flatten MultiIndex columns)."
        )
    return selected


def check_queries(queries, *, name="queries"):
    """Validate the queries given at prediction time.

    Parameters
    ----------
    queries : sequence of str, pyarrow array, or DataFrame with a ``query`` column
        Query texts or ids, in the order predictions are wanted. Repeats are
        allowed. The DataFrame is a pandas or a polars one.
    name : str, default="queries"
        Name of the parameter, used in error messages.

    Returns
    -------
    queries : ndarray of str, shape (n_queries,)

    Raises
    ------
    TypeError
        If ``queries`` is a single string, a set or a mapping (neither has
        the order predictions come back in), not a sequence, or holds a
        value that is not a str.
    ValueError
        If ``queries`` is empty, not one-dimensional, has no ``query``
        column or several (repeated, or under a MultiIndex), or holds an
        empty string (as :func:`check_evals` refuses an empty query id;
        blank strings such as ``" "`` are kept).

    Examples
    --------
    >>> from locus_sklearn._evals import check_queries
    >>> check_queries(["2+2?", "capital of France?"]).tolist()
    ['2+2?', 'capital of France?']
    """
    # A polars frame too (a ColumnTransformer passes one for polars input):
    # iterated as a sequence it gives its columns, not its rows.
    if isinstance(queries, pd.DataFrame) or _is_polars_frame(queries):
        queries = frame_column(queries, "query", name, "queries")
    if isinstance(queries, (str, bytes)):
        raise TypeError(
            f"{name} must be a sequence of str, not a single string; wrap it in a "
            f"list: [{queries!r}]."
        )
    if isinstance(queries, Mapping) or _unordered(queries):
        # From a set, predictions would come back in an order nobody chose; a
        # mapping would give its keys where its values may be meant.
        raise TypeError(
            f"{name} must be a sequence of str in the order predictions are "
            f"wanted, or a DataFrame with a 'query' column; got a "
            f"{type(queries).__name__}, which has no such order. Pass a list: "
            "sorted() of a set, or list() of a mapping's keys or values."
        )
    if isinstance(queries, (pd.Series, np.ndarray)):
        values = np.asarray(queries, dtype=object)
    elif _is_arrow_array(queries):
        # NumPy would stack its Arrow scalars into shape (n, 1).
        values = np.asarray(queries.to_pylist(), dtype=object)
    elif isinstance(queries, Sequence) or hasattr(queries, "__iter__"):
        values = np.asarray(list(queries), dtype=object)
    else:
        raise TypeError(
            f"{name} must be a sequence of str or a DataFrame with a 'query' "
            f"column; got {type(queries).__name__}."
        )
    if values.ndim != 1:
        raise ValueError(
            f"{name} must be one-dimensional; got an array of shape {values.shape}."
        )
    if len(values) == 0:
        raise ValueError(f"{name} is empty; pass at least one query.")
    bad = _non_strings(values)
    if len(bad):
        # Missing queries get their own remedy, as missing ids do in
        # check_evals (_check_string_column).
        missing = np.fromiter(map(_is_missing, bad), bool, len(bad))
        others = bad[~missing]
        n_missing = int(missing.sum())
        if not len(others):
            raise TypeError(
                f"{name} must hold strings; {n_missing} missing value(s): drop or "
                "fill those entries."
            )
        hint = (
            f" ({n_missing} missing value(s): drop or fill those entries)"
            if n_missing
            else ""
        )
        raise TypeError(
            f"{name} must hold strings; {len(others)} of {len(values)} entries do "
            f"not (e.g. {_preview(others[:5])}){hint}."
        )
    # The rule check_evals applies to query ids: "" is refused, a blank or
    # padded string is kept as given (it may be a query's text).
    empty = np.flatnonzero(values == "")
    if len(empty):
        raise ValueError(
            f"{name} has {len(empty)} empty string(s) '' at position(s) "
            f"{_preview(empty)}; every query needs a non-empty id."
        )
    return values


def check_model_costs(model_costs, classes, *, name="model_costs", models="the pool"):
    """Validate per-model costs and align them with ``classes``.

    Parameters
    ----------
    model_costs : mapping of str to float, pandas Series, array-like of shape (n_models,) or None
        Cost of each model (e.g. USD per query, or billions of parameters). A
        mapping or a Series is read by model name (a Series by its index) and
        must name exactly the models of ``classes``; an array is read in the
        order of ``classes`` (sorted model names); a torch tensor as NumPy
        reads it (a bfloat16 one, or one that requires grad, too).
    classes : ndarray of str, shape (n_models,)
    name : str, default="model_costs"
        The parameter, as error messages name it.
    models : str, default="the pool"
        What ``classes`` are, as error messages name them.

    Returns
    -------
    costs : ndarray of float64, shape (n_models,) or None

    Examples
    --------
    >>> import numpy as np
    >>> from locus_sklearn import check_model_costs
    >>> check_model_costs({"b": 2.0, "a": 1.0}, np.array(["a", "b"])).tolist()
    [1.0, 2.0]
    """
    if model_costs is None:
        return None
    classes = np.asarray(classes, dtype=object)
    if isinstance(model_costs, pd.Series):
        # A Series names its models in its index; reading it by position would
        # silently give each model another one's cost.
        index = model_costs.index
        not_names = [m for m in index if not isinstance(m, str)]
        if not_names:
            raise ValueError(
                f"{name} is a pandas Series, which is read by its index of model "
                f"names, but {len(not_names)} index label(s) are not model names: "
                f"{_preview(not_names)}. Index it by model name, or pass "
                f"{name}.to_numpy() for costs in sorted model-name order."
            )
        repeated = index[index.duplicated()].unique().tolist()
        if repeated:
            raise ValueError(
                f"{name} is a pandas Series whose index repeats {len(repeated)} "
                f"model name(s): {_preview(repeated)}; give each model one cost."
            )
        model_costs = model_costs.to_dict()
    if isinstance(model_costs, Mapping):
        known = set(classes)
        missing = [m for m in classes if m not in model_costs]
        extra = [m for m in model_costs if m not in known]
        # Both lists in one message: a name misspelt is usually both.
        problems = []
        if missing:
            problems.append(
                f"no cost for {len(missing)} model(s) of {models}: {_preview(missing)}"
            )
        if extra:
            problems.append(
                f"costs for {len(extra)} model(s) that are not in {models}: "
                f"{_preview(extra)}"
            )
        if problems:
            raise ValueError(
                f"{name} has {' and '.join(problems)}; pass costs for exactly the "
                f"models of {models}."
            )
        costs = [model_costs[m] for m in classes]
    else:
        costs = untorched(model_costs)
    # Only real numbers: numpy would turn "1.5" into 1.5, True into 1.0 and
    # drop the imaginary part of a complex number, silently.
    try:
        raw = np.asarray(
            costs, dtype=object if isinstance(costs, (list, tuple)) else None
        )
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must hold numbers; {exc}.") from None
    if raw.dtype == object:
        items = raw.ravel().tolist()
        # Missing values (None, pd.NA, as a nullable Series gives them) are
        # not of the wrong type: they become NaN, reported below as missing.
        missing = [_is_missing(v) for v in items]
        bad = [
            v
            for v, gone in zip(items, missing, strict=True)
            if not gone and (not isinstance(v, Real) or isinstance(v, _NOT_REAL))
        ]
        n_bad = len(bad)
        if not n_bad and any(missing):
            raw = np.array(
                [np.nan if gone else v for v, gone in zip(items, missing, strict=True)],
                dtype=object,
            ).reshape(raw.shape)
    else:
        # Every value of a non-numeric dtype is bad: count them all; the
        # preview shows five, and "..." when there are more (the sixth).
        n_bad = 0 if raw.dtype.kind in "iuf" else raw.size
        bad = raw.ravel()[:6].tolist()
    if n_bad:
        durations = raw.dtype.kind in "mM" or any(
            isinstance(v, (np.timedelta64, np.datetime64)) for v in bad
        )
        hint = (
            " Durations are refused rather than converted: give every cost in "
            "one unit, e.g. latency / np.timedelta64(1, 'ms')."
            if durations
            else ""
        )
        raise TypeError(
            f"{name} must hold real numbers; got {n_bad} value(s) that are "
            f"not (e.g. {_preview(bad)}, dtype {raw.dtype}).{hint}"
        )
    try:
        costs = raw.astype(np.float64)
    except (TypeError, ValueError, OverflowError) as exc:
        raise TypeError(f"{name} must hold real numbers; {exc}.") from None
    if costs.shape != (len(classes),):
        raise ValueError(
            f"{name} must have one cost per model, shape ({len(classes)},); got "
            f"shape {costs.shape}."
        )
    bad = ~np.isfinite(costs) | (costs < 0)
    if bad.any():
        # Missing costs (None and pd.NA are NaN by now) get their remedy.
        n_missing = int(np.isnan(costs).sum())
        hint = (
            f"; {n_missing} missing value(s) (NaN, None or pd.NA): every model "
            "needs a cost, fill them in"
            if n_missing
            else ""
        )
        shown = dict(zip(classes[bad], costs[bad].tolist(), strict=True))
        raise ValueError(
            f"{name} must be finite and >= 0; {int(bad.sum())} cost(s) are not: "
            f"{_preview(shown.items())}{hint}."
        )
    return costs
