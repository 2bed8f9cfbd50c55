"""Read evaluation tables from files and convert wide score matrices."""

import codecs
import gzip
import itertools
import json
import os
import stat
import warnings
import zlib
from collections.abc import Mapping
from decimal import Decimal

import numpy as np
import pandas as pd

from .._evals import (
    _as_float,
    _check_not_foreign_table,
    _is_missing,
    _is_real_dtype,
    _is_real_number,
    _object_frame,
    _plain_str,
    _preview,
    _unordered,
    check_evals,
)
from .._paths import file_mode, not_regular_file
from .._warnings import FILTERS_LOCK, warn_external

__all__ = ["from_wide", "load_evals"]

# Longest suffix first, so "x.csv.gz" is read as csv and not as "gz".
_READERS = {
    ".csv.gz": "csv",
    ".csv": "csv",
    ".tsv.gz": "tsv",
    ".tsv": "tsv",
    ".parquet": "parquet",
    ".jsonl.gz": "jsonl",
    ".jsonl": "jsonl",
}


def _long_frame(columns):
    """A DataFrame whose text columns keep object dtype.

    pandas' default string dtype would copy every text (MMLU-Pro prompts are
    repeated once per model) and ``check_evals`` reads them back as objects.
    """
    return pd.DataFrame(
        {
            key: pd.Series(values, dtype=np.float64 if key == "score" else object)
            for key, values in columns.items()
        }
    )


def _file_format(path, name):
    lower = os.fspath(path).lower()
    for suffix, kind in _READERS.items():
        if lower.endswith(suffix):
            return kind
    raise ValueError(
        f"{name}={os.fspath(path)!r} has an unknown suffix; valid suffixes are "
        f"{list(_READERS)}."
    )


# The texts pandas.read_csv reads as missing values by default.
_NA_TEXTS = (
    *("", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan"),
    *("1.#IND", "1.#QNAN", "<NA>", "N/A", "NA", "NULL", "NaN", "None", "n/a"),
    *("nan", "null"),
)


class _RepeatedKey(ValueError):
    """A JSON object names one key twice (``key`` is the key)."""

    def __init__(self, key):
        super().__init__(key)
        self.key = key


def _unique_keys(pairs):
    """A JSON object as a dict, refusing a repeated key: json.loads keeps the
    last value silently, so a score or model written twice would lose one."""
    record = dict(pairs)
    if len(record) < len(pairs):
        seen = set()
        for key, _ in pairs:
            if key in seen:
                raise _RepeatedKey(key)
            seen.add(key)
    return record


# A UTF-16 file starts with one (little- or big-endian): "save as Unicode"
# in Windows tools writes it.
_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")

# Bytes read at once when a file is scanned for its first byte that is not
# UTF-8 (memory only; any size finds the same byte).
_SCAN_CHUNK = 1 << 20


def first_non_utf8(chunks):
    """Where the bytes of ``chunks`` (an iterable of bytes: a file read in
    pieces, in order) stop being UTF-8, for a message: the byte, its offset
    from the start, its line and why it is not UTF-8, and a note where the
    bytes start with a UTF-16 byte-order mark; None if they are all UTF-8.

    A reader's ``UnicodeDecodeError`` gives a position in its own buffer
    (pandas' or a text file's), not in the file: "position 3" for a byte at
    offset 25801, on line 2002.

    Examples
    --------
    >>> first_non_utf8([b"model,score\\ncaf", b"\\xe9,1\\n"])
    'byte 0xe9 at offset 15, line 2 (invalid continuation byte)'
    >>> first_non_utf8(["a,b\\n".encode("utf-16")])
    'byte 0xff at offset 0, line 1 (invalid start byte); it starts with a \
UTF-16 byte-order mark, so it is UTF-16 text'
    >>> first_non_utf8([b"caf\\xc3", b"\\xa9\\n"]) is None
    True
    """
    decoder = codecs.getincrementaldecoder("utf-8")()
    start, offset, lines = b"", 0, 0  # the first 2 bytes; bytes, line ends before
    for chunk, final in itertools.chain(((c, False) for c in chunks), [(b"", True)]):
        start += chunk[: 2 - len(start)]
        # The decoder holds back the first bytes of a character cut at the
        # end of the last chunk: the error's position counts from them.
        pending = decoder.getstate()[0]
        try:
            decoder.decode(chunk, final=final)
        except UnicodeDecodeError as exc:
            data = pending + chunk
            line = lines + data[: exc.start].count(b"\n") + 1
            found = (
                f"byte {data[exc.start]:#04x} at offset "
                f"{offset - len(pending) + exc.start}, line {line} ({exc.reason})"
            )
            if start.startswith(_UTF16_BOMS):
                found += (
                    "; it starts with a UTF-16 byte-order mark, so it is UTF-16 text"
                )
            return found
        offset += len(chunk)
        lines += chunk.count(b"\n")
    return None


def file_not_utf8(path):
    """:func:`first_non_utf8` of the file ``path`` (gzip when its name ends
    in ``.gz``: the offset is then in the uncompressed bytes), or None where
    it cannot be read again or is all UTF-8."""
    opener = gzip.open if os.fspath(path).lower().endswith(".gz") else open
    try:
        with opener(path, "rb") as handle:
            return first_non_utf8(iter(lambda: handle.read(_SCAN_CHUNK), b""))
    except (OSError, EOFError, zlib.error):
        return None


def json_lines(path, where, hint):
    """``(line number, record)`` of each non-blank line of a JSON-lines file.

    Read line by line (gzip when the name ends in ``.gz``) rather than with
    ``pandas.read_json``: an error then names the line, a byte-order mark is
    skipped (as in a csv), floats are parsed exactly and no column is
    converted (``read_json`` turns columns with date-like names into dates).
    Each record must be a JSON object, and no object (nested ones included)
    may name a key twice. Errors are ValueErrors that start with
    ``where`` (how the file is named, e.g. ``"path='a.jsonl'"``) and end with
    ``hint`` (what the file should hold).
    """
    opener = gzip.open if os.fspath(path).lower().endswith(".gz") else open
    found = False
    try:
        with opener(path, "rt", encoding="utf-8-sig") as handle:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line, object_pairs_hook=_unique_keys)
                except json.JSONDecodeError as exc:
                    raise ValueError(
                        f"{where}, line {number}, is not valid JSON: {exc.msg} "
                        f"(column {exc.colno}); {hint}"
                    ) from None
                except _RepeatedKey as exc:
                    raise ValueError(
                        f"{where}, line {number}, names the key {exc.key!r} twice "
                        "in one object (a JSON reader would keep the last value "
                        f"silently); {hint}"
                    ) from None
                except RecursionError:
                    # Python's json parses nested arrays and objects by recursion.
                    raise ValueError(
                        f"{where}, line {number}, could not be read as JSON: it is "
                        f"nested too deeply for Python's json parser; {hint}"
                    ) from None
                except ValueError as exc:  # e.g. an int past Python's digit limit
                    raise ValueError(
                        f"{where}, line {number}, could not be read as JSON: "
                        f"{exc}; {hint}"
                    ) from None
                if not isinstance(record, dict):
                    value = repr(record)
                    value = value if len(value) <= 60 else value[:57] + "..."
                    raise ValueError(
                        f"{where}, line {number}, holds a JSON "
                        f"{type(record).__name__} ({value}), not an object; {hint}"
                    )
                found = True
                yield number, record
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"{where} is not UTF-8 text: {file_not_utf8(path) or exc}; save it "
            "as UTF-8."
        ) from None
    except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
        # not gzip, cut short, or its compressed data corrupt
        raise ValueError(f"{where} could not be read as gzip: {exc}.") from None
    if not found:
        raise ValueError(f"{where} holds no records (no non-blank line); {hint}")


def _read_jsonl(path, name, shown, keys):
    """The records of a jsonl file as a DataFrame, and the line of each record
    (``shown``: the path as the user wrote it, for messages; ``keys``: the
    keys a record of this file holds, shown in the hint of an error)."""
    example = ", ".join(f"{json.dumps(key, ensure_ascii=False)}: ..." for key in keys)
    hint = f"each line of a jsonl file must be one JSON object such as {{{example}}}."
    lines, records = [], []
    for number, record in json_lines(path, f"{name}={shown!r}", hint):
        lines.append(number)
        records.append(record)
    # Column by column, as pd.DataFrame(records) fills them (keys in order of
    # appearance, NaN where a record lacks one), but text columns as objects:
    # a JSON escape such as "\udce9" gives a lone surrogate, which pandas'
    # inferred str dtype refuses.
    keys = dict.fromkeys(key for record in records for key in record)
    columns = {key: [record.get(key, np.nan) for record in records] for key in keys}
    return _object_frame(columns), np.array(lines)


def _index_as_columns(frame):
    """A frame read from parquet with the named levels of its index back as
    columns.

    pandas writes the index of a DataFrame into the file as columns and
    restores them as the index: a column set as the index
    (``df.set_index("question_id")``) would be lost, or reported missing
    from a file that holds it. Unnamed levels (a default RangeIndex,
    ``__index_level_0__``) are row labels, not data, and stay out. A level
    named like a column (``set_index(..., drop=False)``) is left out too:
    the column is read, as it always was.
    """
    names = [
        level
        for level in frame.index.names
        if level is not None and level not in frame.columns
    ]
    return frame.reset_index(level=names) if names else frame


def _file_mode(path, name, shown):
    """The ``st_mode`` of ``path`` (a symbolic link followed), or None if
    nothing is there (or a file is on the way: ``"e.csv/x.csv"``).

    ``os.path.isfile`` would report a path it cannot look at as missing; a
    folder on the way without search permission, or a loop of symbolic
    links, is named here instead (``name=shown`` in the message, ``shown``
    the path as the user wrote it).
    """
    try:
        return file_mode(path)
    except PermissionError as exc:
        error = PermissionError(
            f"{name}={shown!r} cannot be read: permission denied (a folder on "
            "the way may lack search permission); make it readable or give "
            "another path."
        )
        error.errno = exc.errno  # kept for callers that map errors to exit codes
        raise error from None
    except OSError as exc:  # a loop of symbolic links, a name too long, ...
        error = OSError(f"{name}={shown!r} cannot be read: {exc.strerror}.")
        error.errno = exc.errno
        raise error from None


def _check_regular(mode, name, shown):
    """Refuse a file of mode ``mode`` that is not a regular file (a named pipe,
    a device): opening a pipe blocks until something writes to it."""
    if not stat.S_ISREG(mode):
        raise not_regular_file(mode, f"{name}={shown!r}", "a file")


def _read_table(path, name, string_columns, score_column=None, keys=()):
    """Read one csv/tsv/parquet/jsonl file into a DataFrame.

    Returns the frame, the file's format and, for jsonl, the line of each row
    (None otherwise), for error messages. ``keys`` are the columns the file
    should hold, shown in the hint of a jsonl parse error.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{name} must be a path (str or os.PathLike); got {path!r}.")
    shown = os.fspath(path)
    # "~/evals.csv" is read as pandas reads it; messages keep the user's text.
    path = os.path.expanduser(path)
    mode = _file_mode(path, name, shown)
    if mode is not None and stat.S_ISDIR(mode):
        # It exists: "does not exist" would send the user looking for a typo.
        raise IsADirectoryError(
            f"{name}={shown!r} is a folder; give the path of a file (a folder "
            "of parquet parts can be read with pandas.read_parquet and written "
            "out as one file)."
        )
    kind = _file_format(shown, name)
    if mode is None:
        raise FileNotFoundError(f"{name}={shown!r} does not exist.")
    _check_regular(mode, name, shown)
    if kind == "jsonl":
        frame, lines = _read_jsonl(path, name, shown, keys)
        return frame, kind, lines
    try:
        if kind == "parquet":
            try:
                return _index_as_columns(pd.read_parquet(path)), kind, None
            except ImportError as exc:  # neither pyarrow nor fastparquet
                raise ImportError(
                    f"Reading {name}={shown!r} from Parquet needs pyarrow: pip "
                    'install "locus_sklearn[parquet]" (or pyarrow).'
                ) from exc
        # Ids and texts stay strings ("NA", "null" or "007" are valid query
        # texts); only an empty score cell becomes NaN, which check_evals then
        # reports. Other columns are read as pandas reads them, missing cells
        # included (NA texts are per column: their names come from the header).
        sep = "," if kind == "csv" else "\t"
        header = pd.read_csv(path, sep=sep, nrows=0, index_col=False).columns
        na = {c: _NA_TEXTS for c in header if c not in string_columns}
        if score_column:
            na[score_column] = [""]
        # Under the library's lock: the filters are process-wide while the
        # block runs (see _warnings.FILTERS_LOCK).
        with FILTERS_LOCK, warnings.catch_warnings():
            # A row with more fields than the header: by default pandas makes
            # the first column the index (shifting every column), and with
            # index_col=False it drops the extra fields with this warning.
            warnings.simplefilter("error", pd.errors.ParserWarning)
            frame = pd.read_csv(
                path,
                sep=sep,
                dtype={c: str for c in string_columns},
                keep_default_na=False,
                na_values=na,
                index_col=False,
            )
    except pd.errors.ParserWarning:
        raise ValueError(
            f"{name}={shown!r} has a row with more fields than its header line "
            "has columns; every row needs one field per column."
        ) from None
    except pd.errors.EmptyDataError:
        raise ValueError(
            f"{name}={shown!r} is empty: it has no header line naming its columns."
        ) from None
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"{name}={shown!r} is not UTF-8 text: {file_not_utf8(path) or exc}; "
            "save it as UTF-8."
        ) from None
    except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
        # not gzip, cut short, or its compressed data corrupt
        raise ValueError(
            f"{name}={shown!r} could not be read as gzip: {exc}."
        ) from None
    except ValueError as exc:  # pandas' ParserError, pyarrow's ArrowInvalid
        raise ValueError(
            f"{name}={shown!r} could not be read as {kind}: {str(exc).strip()}"
        ) from None
    repeated = _repeated_header(frame, path, "," if kind == "csv" else "\t")
    if repeated:
        raise ValueError(
            f"{name}={shown!r} has column(s) {repeated} more than once in its "
            f"header line; pandas would rename the repeats ({repeated[0] + '.1'!r}, "
            "...) and one of the columns would be used silently. Give each "
            "column its own name."
        )
    return frame, kind, None


def _repeated_header(frame, path, sep):
    """The names that the header line of a csv/tsv file gives to several columns.

    pandas renames a repeated "score" to "score.1" (then "score.2", ...): the
    header line is read again, as a row of text, only when a column is named
    like that.
    """
    names = set(map(str, frame.columns))
    renamed = (column.rpartition(".") for column in names)
    if not any(dot and n.isdigit() and stem in names for stem, dot, n in renamed):
        return []
    header = pd.read_csv(
        path, sep=sep, header=None, nrows=1, dtype=str, keep_default_na=False
    ).iloc[0]
    header = header.tolist()
    # Empty names are not repeats: pandas names them "Unnamed: 3", ... apart.
    return [c for c in dict.fromkeys(header) if c and header.count(c) > 1]


def _category_values(column):
    """A categorical column as a column of its values (any other column as it
    is), so that integer categories become decimal strings as integer
    columns do; a missing value stays missing."""
    if not isinstance(column.dtype, pd.CategoricalDtype):
        return column
    dtype = column.cat.categories.dtype
    if getattr(dtype, "kind", "O") in "iub" and column.isna().any():
        # A NumPy integer or bool column holds no missing value (astype
        # would raise, or make it True): its nullable dtype does.
        dtype = pd.array(column.cat.categories.to_numpy()).dtype
    return column.astype(dtype)


def _ids_as_str(frame, columns):
    """Integer id columns (typical of parquet/jsonl files) as decimal strings,
    a missing id kept missing; categorical id columns as their values first."""
    for column in columns:
        if column not in frame.columns:
            continue
        values = _category_values(frame[column])
        if pd.api.types.is_integer_dtype(values.dtype):
            # where(): pandas < 3 makes a nullable column's <NA> the text
            # "<NA>", an id that would equal another table's missing id.
            values = values.astype(str).where(values.notna())
        frame[column] = values
    return frame


# Integers past 2**53 are rounded when stored as float64 (2**53 + 1 becomes
# 2**53): a float id there may stand for another integer than the one written.
_EXACT_FLOAT_INTS = 2**53


def _is_integer_id(value):
    """Whether ``value`` (an entry of an object column) is an int (not a bool)
    or a float of a whole number below 2**53: an id matched as its decimal
    string."""
    if not _is_real_number(value):
        return False
    if isinstance(value, (int, np.integer)):
        return True
    number = float(value)
    return abs(number) < _EXACT_FLOAT_INTS and number.is_integer()


def _whole_ids_as_str(column, name):
    """A float or object id column of whole numbers as the decimal strings an
    integer column becomes (see :func:`_ids_as_str`); missing ids stay missing.

    pandas stores an integer id column with one missing id as float64 (a jsonl
    file, a list of records), and a column of Python ints built by hand, or
    of ints and text (a jsonl file with ``1`` on one line and ``"2"`` on
    another), has object dtype; left as they are, none of their numbers
    equals a string id of the other table. In an object column each int,
    and each float of a whole number below 2**53, becomes its decimal string
    and text is kept. Any other column is returned unchanged, to be matched
    as it is: text, other objects, or numbers of which one is not a whole
    number below 2**53 (1.5 is no integer id, and is never made one).

    Raises
    ------
    TypeError
        If an object column (``name``, for the message) holds integer ids,
        text and a value that is neither (1.5, True): that value could never
        be matched, and it is no missing id either.
    """
    if pd.api.types.is_float_dtype(column.dtype):
        values = column.to_numpy(dtype=np.float64, na_value=np.nan)
        present = ~np.isnan(values)
        numbers = values[present]
        if not (
            (np.abs(numbers) < _EXACT_FLOAT_INTS) & (numbers == np.trunc(numbers))
        ).all():
            return column
    elif pd.api.types.is_object_dtype(column.dtype):
        values = column.to_numpy(dtype=object)
        present = ~np.fromiter(map(_is_missing, values), bool, len(values))
        numbers = values[present]
        is_int = np.fromiter(map(_is_integer_id, numbers), bool, len(numbers))
        if not is_int.any():
            return column
        is_text = np.fromiter((isinstance(v, str) for v in numbers), bool, len(numbers))
        others = numbers[~is_int & ~is_text]
        if len(others) and is_text.any():
            raise TypeError(
                f"{name} mixes integer ids and text ids with "
                f"{len(others)} value(s) that are neither (e.g. "
                f"{_preview(others[:3])}); integer ids, and floats that are "
                "whole numbers below 2**53, are matched as decimal strings, "
                "other values never. Give the column ids of one type."
            )
        if len(others):  # numbers only (1 and 1.5): matched as numbers
            return column
    else:
        return column
    text = np.full(len(values), np.nan, dtype=object)
    text[present] = [v if isinstance(v, str) else str(int(v)) for v in numbers]
    # An object column's text ids are kept, and may hold a lone surrogate,
    # which pandas' str dtype refuses: it stays an object column.
    dtype = object if pd.api.types.is_object_dtype(column.dtype) else str
    return pd.Series(text, index=column.index, dtype=dtype)


def _id_kinds(column):
    """The kinds (``"text"``, ``"number"``, ``"other"``) of the non-missing
    ids of ``column``."""
    dtype = column.dtype
    if pd.api.types.is_string_dtype(dtype) and not pd.api.types.is_object_dtype(dtype):
        return {"text"}
    if _is_real_dtype(dtype):
        return {"number"}
    values = column.to_numpy(dtype=object)
    kinds = set()
    for value in values:
        if isinstance(value, str):
            kinds.add("text")
        elif _is_missing(value):
            # Before numbers: NaN is a float, and an object column of text
            # ids (as _whole_ids_as_str gives) marks a missing one with it.
            continue
        elif _is_real_number(value):
            kinds.add("number")
        else:
            kinds.add("other")
    return kinds


def _check_id_kinds(ids, table_ids, query_id_column):
    """Raise a TypeError when no id of path can equal an id of queries: one
    column holds numbers that are no integer ids (e.g. 1.5), the other text.
    Counted as ids "not in queries", they would send the user looking for ids
    that are there."""
    kinds, table_kinds = _id_kinds(ids), _id_kinds(table_ids)
    if not kinds or not table_kinds or kinds & table_kinds:
        return
    examples = []
    for where, column in (("path", ids), ("queries", table_ids)):
        values = column.dropna()
        examples.append(
            f"{where}[{query_id_column!r}] has dtype {column.dtype} (e.g. "
            f"{_preview(values.unique()[:3])})"
        )
    reason = ""
    for column in (ids, table_ids):
        if pd.api.types.is_float_dtype(column.dtype):
            values = column.dropna().to_numpy(dtype=np.float64)
            whole = values == np.trunc(values)
            if not whole.all():
                reason = f" ({float(values[~whole][0])!r} is not a whole number)"
            elif len(values):
                reason = (
                    f" ({float(values[np.argmax(np.abs(values))])!r} is past 2**53, "
                    "where float64 rounds integers)"
                )
    raise TypeError(
        "the query ids of path and queries cannot be matched: "
        f"{examples[0]} and {examples[1]}. Integer ids, and float ids that "
        "are all whole numbers below 2**53 (as an integer column with a "
        "missing id is stored), are matched as decimal strings; other "
        f"numbers{reason} are never matched to text. Give both columns ids of "
        "one type."
    )


def _is_number_text(value):
    """Whether ``value`` is the text of a finite number, as pandas reads a csv
    cell: ASCII digits, no underscores (Python's float() also takes "1_0" and
    other scripts' digits, which pandas leaves as text)."""
    if not isinstance(value, str) or not value.isascii() or "_" in value:
        return False
    try:
        return bool(np.isfinite(float(value)))
    except ValueError:
        return False


def _read_scores(frame, column, path, kind, lines):
    """The score column as float64, once it is known to hold real numbers only.

    check_evals refuses booleans, text and complex numbers rather than
    converting them; casting the column first would hide them (a parquet bool
    column, a jsonl ``"0.5"`` or a csv column of ``True``/``false`` would load
    as numbers), so the column is checked as it was read.
    """
    values = frame[column]
    if _is_real_dtype(values.dtype):
        return values.to_numpy(dtype=np.float64, na_value=np.nan)
    items = values.to_numpy(dtype=object)
    is_number = np.fromiter(map(_is_real_number, items), bool, len(items))
    if not is_number.all():
        # A missing score (a jsonl null) is read as NaN: check_evals reports
        # it as missing, as it does an empty csv cell, not as a bad value.
        missing = np.fromiter(map(_is_missing, items), bool, len(items))
        if missing.any():
            items = np.where(missing, np.nan, items)
            is_number |= missing
    if is_number.all():  # numbers of several kinds in an object column
        return np.fromiter(map(_as_float, items), np.float64, len(items))
    text = kind in ("csv", "tsv")
    if text:
        # pandas leaves a whole column as text when one cell is not a number;
        # the cells that are numbers are not what is wrong with it.
        is_number |= np.fromiter(map(_is_number_text, items), bool, len(items))
    bad = np.flatnonzero(~is_number)
    if not len(bad):  # a cell pandas left as text that looked like a number
        bad = np.flatnonzero(
            ~np.fromiter(map(_is_real_number, items), bool, len(items))
        )
    # _preview shows np.str_('a') as 'a'; one value at a time, with its place.
    examples = ", ".join(
        f"{_preview([items[i]])[1:-1]} "
        f"({f'line {lines[i]}' if lines is not None else f'row {i + 1}'})"
        for i in bad[:3]
    )
    hint = ""
    if any(isinstance(items[i], (bool, np.bool_)) for i in bad):
        hint = (
            " Booleans are refused rather than converted: write 1 and 0 if that "
            "is what they mean."
        )
    elif any(isinstance(items[i], Decimal) for i in bad):
        hint = " Decimals are refused rather than converted: store scores as floats."
    message = (
        # The path first: the CLI names the file by replacing "path=...".
        f"path={os.fspath(path)!r}, column {column!r}, must hold numbers in "
        f"[0, 1]; {len(bad)} of {len(items)} "
        f"{'cells' if text else 'values'} are not numbers, e.g. {examples}"
        f"{' (rows counted from 1 after the header)' if text else ''}.{hint}"
    )
    if text:
        # Every cell of a text file is a string: one that is not a number is
        # a bad value. A typed file (parquet, jsonl) holds a value of the
        # wrong kind, as check_evals reports it.
        raise ValueError(
            message + " Write scores as plain numbers with a '.' decimal point."
        )
    raise TypeError(message)


def _require(frame, columns, name, source=None):
    """Raise unless ``frame`` has every one of ``columns``; all the missing
    ones are named at once, so a file is not fixed one round at a time.
    ``source`` (a path, or None for a DataFrame) is named in the message."""
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        where = name if source is None else f"{name} ({os.fspath(source)!r})"
        raise ValueError(
            f"{where} has no column(s) {missing}; it has columns "
            f"{list(map(str, frame.columns))}. Name the right columns with "
            "model_column=, query_column=, score_column=, task_column= or "
            "query_id_column=."
        )


def _distinct_columns(roles):
    """Raise if two of ``roles`` (``(parameter, column)`` pairs) name one column."""
    seen = {}
    for parameter, column in roles:
        if column in seen:
            raise ValueError(
                f"{seen[column]}={column!r} and {parameter}={column!r} name the "
                "same column, whose values would be read for both; give each "
                "its own column."
            )
        seen[column] = parameter


def _one_column_each(table, columns):
    """Raise unless each of ``columns`` present in the DataFrame ``table``
    (``queries``) selects one column: a repeated name, or a first level of
    MultiIndex columns, selects several."""
    for column in dict.fromkeys(columns):
        if column in table.columns and isinstance(table[column], pd.DataFrame):
            raise ValueError(
                f"queries[{column!r}] is not one column but a DataFrame of "
                f"{table[column].shape[1]} column(s); queries has columns "
                f"{_preview(table.columns, limit=10)}. Give each column its own "
                "name (flatten MultiIndex columns)."
            )


def _match_query_ids(ids, query_table, query_id_column):
    """Row of ``query_table`` holding each evaluation's query id.

    Every id must appear exactly once in the query table; no row is dropped.
    """
    table_ids = query_table[query_id_column]
    # A row of queries without an id is no query of any evaluation. Left in,
    # two such rows would be "repeated ids", and a missing id of path would
    # be matched to one of them (pandas' index matches NaN to NaN).
    rows = np.flatnonzero(table_ids.notna().to_numpy())
    table_ids = table_ids.iloc[rows]
    repeated = table_ids[table_ids.duplicated()]
    if len(repeated):
        raise ValueError(
            f"queries has {len(repeated)} repeated id(s) in column "
            f"{query_id_column!r} (e.g. {_preview(repeated.unique()[:5])}); "
            "each id must name one query."
        )
    missing = ids.isna().to_numpy()
    if missing.any():
        raise ValueError(
            f"{int(missing.sum())} of {len(ids)} rows of path have no "
            f"{query_id_column!r} (a missing value); every evaluation needs the "
            "id of its query: drop or fill those rows."
        )
    _check_id_kinds(ids, table_ids, query_id_column)
    position = pd.Index(table_ids).get_indexer(ids)
    unmatched = position < 0
    if unmatched.any():
        bad = ids.to_numpy()[unmatched]
        raise ValueError(
            f"{int(unmatched.sum())} of {len(ids)} rows of path have a "
            f"{query_id_column!r} that is not in queries "
            f"({len(pd.unique(bad))} distinct id(s), e.g. "
            f"{_preview(pd.unique(bad)[:5])}); every evaluated id needs a query."
        )
    return rows[position]


def _clip(text, width=80):
    return text if len(text) <= width else text[: width - 3] + "..."


def _check_shared_text_tasks(
    position, table_ids, table_texts, tasks, query_id_column, query_column
):
    """Refuse ids of several tasks that share one text.

    They would become one query with several tasks, which check_evals
    refuses as one query given "more than one task", without saying that
    the ids were merged. ``position`` (the query table's row of each
    evaluation) and ``tasks`` hold one entry per evaluation, ``table_ids``
    and ``table_texts`` one per row of the query table; an id given several
    tasks by itself is left to check_evals.
    """
    # Each distinct (row, task) pair once, found on integer codes: the
    # checks below on every evaluation's strings doubled load_evals' time.
    task_codes, task_names = pd.factorize(pd.Series(tasks, dtype=object))
    pairs = np.unique(np.stack([np.asarray(position), task_codes], axis=1), axis=0)
    pairs = pairs[pairs[:, 1] >= 0]  # a missing task: check_evals' to report
    # Ids, texts and tasks as objects, grouped by codes: pandas would infer
    # its str dtype for them (group keys included), which refuses a lone
    # surrogate.
    rows = _object_frame(
        {
            "id": table_ids[pairs[:, 0]],
            "text": table_texts[pairs[:, 0]],
            "task": np.asarray(task_names, dtype=object)[pairs[:, 1]],
        }
    )
    # Missing or non-text entries are check_evals' to report.
    is_text = rows["text"].map(lambda v: isinstance(v, str))
    rows = rows[is_text & rows["task"].map(lambda v: isinstance(v, str))]
    rows = rows.drop_duplicates()
    id_codes = pd.factorize(rows["id"].to_numpy(dtype=object))[0]
    one_task = rows.groupby(id_codes, sort=False)["task"].transform("nunique") == 1
    rows = rows[one_task.to_numpy()]
    text_codes, texts = pd.factorize(rows["text"].to_numpy(dtype=object))
    counts = rows[["id", "task"]].groupby(text_codes, sort=False).nunique()
    across = texts[counts.index[(counts["id"] > 1) & (counts["task"] > 1)]]
    if len(across):
        group = rows[rows["text"] == across[0]]
        raise ValueError(
            f"{len(across)} text(s) in column {query_column!r} of queries belong "
            f"to ids of {query_id_column!r} of several tasks (e.g. "
            f"{_clip(across[0])!r} in the tasks {sorted(group['task'].unique())}, "
            f"ids {_preview(sorted(group['id'].unique(), key=str))}); a query "
            "belongs to one task, so they cannot become one query. Give each id "
            "its own text (e.g. the question with a field that differs between "
            "the tasks), "
            f"or leave out queries= and pass query_column={query_id_column!r} "
            "for one query per id, with an encoder that knows the ids."
        )


def _warn_shared_texts(query_table, position, query_id_column, query_column):
    """Warn where evaluated ids of the query table share one text: they become
    one query, their scores averaged."""
    used = np.unique(position)
    # Objects, grouped by codes: pandas would infer its str dtype for texts
    # and ids, which refuses a lone surrogate.
    texts = pd.Series(
        query_table[query_column].to_numpy(dtype=object)[used], dtype=object
    )
    ids = query_table[query_id_column].to_numpy(dtype=object)[used]
    shared = texts.duplicated(keep=False).to_numpy()
    if not shared.any():
        return
    codes = pd.factorize(texts[shared].to_numpy())[0]
    groups = pd.Series(ids[shared], dtype=object).groupby(codes, sort=False)
    example = next(iter(groups))[1].tolist()
    warn_external(
        f"{groups.ngroups} text(s) in column {query_column!r} of queries belong "
        f"to several ids of {query_id_column!r} (e.g. {_preview(example)}): each "
        "becomes one query, the ids' scores averaged. Give each id its own text "
        "(e.g. the question with its answer choices), or leave out queries= and "
        f"pass query_column={query_id_column!r} for one query per id, with an "
        "encoder that knows the ids.",
        UserWarning,
    )


def load_evals(
    path,
    *,
    queries=None,
    query_id_column="query_id",
    model_column="model",
    query_column="query",
    score_column="score",
    task_column=None,
):
    """Read a long-format evaluation table from a csv, parquet or jsonl file.

    The format is chosen from the file name: ``.csv``, ``.csv.gz``, ``.tsv``,
    ``.tsv.gz``, ``.parquet``, ``.jsonl`` or ``.jsonl.gz``. One row per scored
    evaluation. Columns are renamed to the standard names ``model``,
    ``query``, ``score`` and ``task``; other columns are kept as they are,
    dtype included (those of a csv/tsv file as ``pandas.read_csv`` reads
    them, an empty cell or ``"NA"`` missing; text columns of a jsonl file as
    object columns, which keep a lone surrogate that a JSON escape such as
    ``"\\udce9"`` gives). The named index of a parquet
    file (``df.set_index("question_id").to_parquet(...)``) is read as
    columns, in ``path`` and ``queries``; an unnamed one is not data.

    Query texts may live in a separate table, the way EmbedLLM-style releases
    ship a model-query-score file keyed by a question id plus a file with the
    text of each question: pass that table as ``queries``. Each evaluation's
    ``query_id_column`` is then looked up in it and the text found in its
    ``query_column`` becomes the ``query``. An id with no match is an error
    (the count is reported); no row is ever dropped. Ids whose texts are the
    same become one query, their scores averaged (with a warning).

    In csv/tsv files the id and text columns are read as strings (``"007"``
    and ``"NA"`` stay as written); in parquet/jsonl files integer id columns
    (categorical ones included) are converted to their decimal strings. So
    are the ``query_id_column`` of ``path`` and of ``queries`` when they
    hold Python ints (object dtype, also mixed with text ids, as a jsonl file
    with ``1`` on one line and ``"2"`` on another) or floats that are all
    whole numbers below 2**53 (an integer column with a missing id is stored
    as float): ``1.0`` matches ``"1"``. Other numbers (``1.5``) are matched
    only with numbers, never with text (a column mixing them with text is
    refused). A row of
    ``queries`` without an id is no query; a row of ``path`` without one is
    an error. Scores must be numbers as
    written: booleans and text are refused, never converted. Files may start
    with a UTF-8 byte-order mark.

    Parameters
    ----------
    path : str or os.PathLike
        The evaluation file; ``~`` is expanded to the home folder, as in
        ``queries``.
    queries : str, os.PathLike or DataFrame, default=None
        Optional query table with columns ``query_id_column`` and
        ``query_column`` (and optionally ``task_column``), one row per id.
    query_id_column : str, default="query_id"
        Column holding the query id, in both files; used only with
        ``queries``.
    model_column : str, default="model"
        Column of ``path`` holding the model name.
    query_column : str, default="query"
        Column holding the query text: in ``path``, or in ``queries`` when
        that is given.
    score_column : str, default="score"
        Column of ``path`` holding the score in [0, 1].
    task_column : str, default=None
        Column holding the task (benchmark or category) of each query, in
        ``path`` or in ``queries``. If None, a column named ``task`` is used
        when there is one; a name given explicitly must exist.

    Returns
    -------
    evals : DataFrame of shape (n_evaluations, n_columns)
        Columns ``model``, ``query``, ``score`` (float) and, when a task
        column was found, ``task``, followed by the file's other columns, in
        the file's row order. It passes :func:`~locus_sklearn.check_evals`.

    Warns
    -----
    UserWarning
        If evaluated ids of ``queries`` share one text: they become one
        query, their scores averaged. The warning names some of them.

    Raises
    ------
    ValueError
        For an unknown suffix, a file that cannot be parsed (the message names
        the file, and for jsonl the line), a csv/tsv header line that names a
        column twice, a jsonl object that names a key twice, a missing
        column, a score cell of a csv/tsv file that is not a number
        (``True``, ``yes``, ``0,5``), query ids of ``path`` that are missing
        or absent from ``queries``, duplicate ids in ``queries``, ids of
        ``queries`` of different tasks that share one text (a query has one
        task; the message names them), one column named for
        two roles (e.g. ``model_column == query_column``), a column of a
        ``queries`` DataFrame that selects several (a repeated name), or a
        table that :func:`~locus_sklearn.check_evals` rejects.
    TypeError
        If ``queries`` is neither a path nor a DataFrame, a score of a
        parquet or jsonl file is not a real number (booleans, decimals and
        text such as ``"0.5"`` are refused rather than converted, as
        :func:`~locus_sklearn.check_evals` refuses them), the query ids
        of ``path`` and ``queries`` are of kinds that never match (numbers
        that are not whole, such as ``1.5``, against text), or one id column
        mixes integer ids and text with other values (``1.5``, ``True``).
    FileNotFoundError
        If ``path`` or ``queries`` does not exist.
    IsADirectoryError
        If ``path`` or ``queries`` is a folder.
    PermissionError
        If ``path`` or ``queries`` cannot be read (a folder on the way
        without search permission included).
    OSError
        If ``path`` or ``queries`` is a named pipe, a device or a socket, or
        a loop of symbolic links (the message names it).
    ImportError
        If a parquet file is read without pyarrow (install the ``parquet``
        extra).

    Examples
    --------
    >>> import os, tempfile
    >>> import pandas as pd
    >>> from locus_sklearn.datasets import load_evals
    >>> folder = tempfile.mkdtemp()
    >>> pd.DataFrame({"model_id": ["llama", "llama", "qwen"],
    ...               "question_id": [1, 2, 1],
    ...               "label": [1, 0, 1]}).to_csv(
    ...     os.path.join(folder, "scores.csv"), index=False)
    >>> texts = pd.DataFrame({"question_id": ["1", "2"],
    ...                       "prompt": ["2+2?", "Capital of France?"]})
    >>> load_evals(os.path.join(folder, "scores.csv"), queries=texts,
    ...            query_id_column="question_id", model_column="model_id",
    ...            query_column="prompt", score_column="label")
       model               query  score question_id
    0  llama                2+2?    1.0           1
    1  llama  Capital of France?    0.0           2
    2   qwen                2+2?    1.0           1
    """
    for key, value in [
        ("query_id_column", query_id_column),
        ("model_column", model_column),
        ("query_column", query_column),
        ("score_column", score_column),
    ]:
        if not isinstance(value, str):
            raise TypeError(f"{key} must be a str; got {value!r}.")
    if task_column is not None and not isinstance(task_column, str):
        raise TypeError(f"task_column must be a str or None; got {task_column!r}.")
    task_name = "task" if task_column is None else task_column
    joined = queries is not None
    if joined and not isinstance(queries, (str, os.PathLike, pd.DataFrame)):
        raise TypeError(
            "queries must be a path (str or os.PathLike) or a pandas DataFrame; "
            f"got a {type(queries).__name__}. Pass pd.DataFrame(queries) for a "
            "mapping of columns."
        )
    # One column read for two roles would give both its values silently.
    task_role = [] if task_column is None else [("task_column", task_column)]
    query_role = (
        ("query_id_column", query_id_column)
        if joined
        else ("query_column", query_column)
    )
    _distinct_columns(
        [("model_column", model_column), query_role, ("score_column", score_column)]
        + task_role
    )
    if joined:  # the columns of queries
        _distinct_columns([query_role, ("query_column", query_column)] + task_role)
    id_columns = [model_column, query_id_column if joined else query_column, task_name]
    query_key = query_id_column if joined else query_column
    frame, kind, lines = _read_table(
        path, "path", id_columns, score_column, [model_column, query_key, score_column]
    )
    frame = _ids_as_str(frame, id_columns)

    # queries is read before the columns are checked: a queries path that
    # cannot be read at all (a folder, a missing file) is the first thing to fix.
    query_table = None
    if joined:
        if isinstance(queries, pd.DataFrame):
            _one_column_each(queries, [query_id_column, query_column, task_name])
            query_table = queries.copy()
        else:
            query_table, _, _ = _read_table(
                queries,
                "queries",
                [query_id_column, query_column, task_name],
                keys=[query_id_column, query_column],
            )
        query_table = _ids_as_str(query_table, [query_id_column, task_name])

    # Every required column of the file checked together: model and score
    # first and the query column later would report them in two rounds.
    _require(frame, [model_column, query_key, score_column], "path", path)
    score = _read_scores(frame, score_column, path, kind, lines)

    if joined:
        _require(
            query_table,
            [query_id_column, query_column],
            "queries",
            None if isinstance(queries, pd.DataFrame) else queries,
        )

    # Where the task column is: the evaluation file first, then the query table.
    task_in = None
    if task_name in frame.columns:
        task_in = "path"
    elif query_table is not None and task_name in query_table.columns:
        task_in = "queries"
    elif task_column is not None:
        where = "path or queries" if joined else "path"
        raise ValueError(
            f"task_column={task_column!r} is in neither {where}; path has columns "
            f"{list(map(str, frame.columns))}."
        )

    if joined:
        converted = [
            _whole_ids_as_str(table[query_id_column], f"{where}[{query_id_column!r}]")
            for where, table in (("path", frame), ("queries", query_table))
        ]
        # Where one side keeps numbers (1.5), neither is converted: numbers
        # are then matched with numbers, as pandas compares them (2.0 finds
        # 2.0), and never with text (_check_id_kinds).
        if not any("number" in _id_kinds(ids) for ids in converted):
            frame[query_id_column], query_table[query_id_column] = converted
        position = _match_query_ids(
            frame[query_id_column], query_table, query_id_column
        )
        texts = query_table[query_column].to_numpy(dtype=object)[position]
        if task_in == "queries":
            tasks = query_table[task_name].to_numpy(dtype=object)[position]

    columns = {"model": frame[model_column].to_numpy(dtype=object)}
    columns["query"] = texts if joined else frame[query_column].to_numpy(dtype=object)
    columns["score"] = score
    used = {model_column, score_column} | ({query_column} if not joined else set())
    if task_in == "path":
        columns["task"] = frame[task_name].to_numpy(dtype=object)
        used.add(task_name)
    elif task_in == "queries":
        columns["task"] = tasks
    rest = [c for c in frame.columns if c not in used]
    clashes = [c for c in rest if c in columns]
    if clashes:
        raise ValueError(
            f"path has column(s) {clashes} besides the column(s) renamed to "
            "them; rename or drop them first, or name them with model_column=, "
            "query_column=, score_column= or task_column=."
        )
    out = _long_frame(columns)
    for column in rest:
        # As read, dtype included: through NumPy a nullable Int64 column with
        # a missing value would become float (ids past 2**53 rounded) and a
        # categorical column text. set_axis: rows go by position.
        out[column] = frame[column].set_axis(out.index)
    if joined and task_in is not None:
        _check_shared_text_tasks(
            position,
            query_table[query_id_column].to_numpy(dtype=object),
            query_table[query_column].to_numpy(dtype=object),
            columns["task"],
            query_id_column,
            query_column,
        )
    check_evals(out, name=f"evals read from {os.fspath(path)!r}")
    if joined:
        _warn_shared_texts(query_table, position, query_id_column, query_column)
    return out


def _entries(values, name, valid):
    """``values`` as a 1-D object array, one entry per item.

    An item that is a tuple (a column of a MultiIndex) or a list stays one
    entry: np.asarray would make a 2-D array, whose length is not the number
    of entries. A set is refused (:func:`~.._evals._unordered`): which entry
    gets which name or task would be chosen by nobody.
    """
    if _unordered(values):
        raise TypeError(
            f"{name} must be {valid}; got a {type(values).__name__} "
            f"{_preview(values)}, which has no order. Pass a list in the order "
            "of the scores (sorted() of the set, if that is its order)."
        )
    try:
        values = list(values)
    except TypeError:
        raise TypeError(
            f"{name} must be {valid}; got {type(values).__name__} {values!r}."
        ) from None
    return np.fromiter(values, dtype=object, count=len(values))


def _labels(values, default, n, name, prefix):
    if values is None:
        values = default
    if values is None:
        width = len(str(n - 1))
        return np.array([f"{prefix}{i:0{width}d}" for i in range(n)], dtype=object)
    if isinstance(values, (str, bytes)):
        # list("ab") would name two entries "a" and "b".
        raise TypeError(
            f"{name} must be a sequence of str, not a single string; got "
            f"{values!r}. Wrap one name in a list: [{values!r}]."
        )
    if isinstance(values, Mapping):
        # list() of a mapping gives its keys, where its values may be meant.
        raise TypeError(
            f"{name} must be a sequence of str in the order of the scores' "
            f"{'columns' if name == 'models' else 'rows'}; got a "
            f"{type(values).__name__} {_preview(values)}, whose keys would be read "
            "where its values may be meant. Pass a list: list() of its keys or "
            "values."
        )
    values = _entries(values, name, "a sequence of str")
    if len(values) != n:
        raise ValueError(f"{name} must have {n} entries; got {len(values)}.")
    is_str = np.fromiter((isinstance(v, str) for v in values), bool, n)
    if not is_str.all():
        raise TypeError(
            f"{name} must be strings; got {_preview(values[~is_str][:5])}. Pass "
            f"{name}= or convert the labels with .astype(str)."
        )
    empty = np.flatnonzero(values == "")
    if len(empty):
        # As check_evals refuses an empty id, naming the parameter here.
        raise ValueError(
            f"{name} must be non-empty strings; got '' at position(s) "
            f"{_preview(empty)}."
        )
    repeated = pd.Index(values, dtype=object)  # not str: lone surrogates
    repeated = repeated[repeated.duplicated()]
    if len(repeated):
        raise ValueError(
            f"{name} must be unique; {_preview(repeated.unique()[:5])} repeat."
        )
    return _plain_str(values)


def _query_tasks(tasks, queries):
    """The task of each query, from a sequence in row order or a mapping."""
    n_queries = len(queries)
    if isinstance(tasks, pd.Series):
        # A Series names its queries in its index; reading it by position
        # would give queries each other's tasks, silently.
        index = tasks.index
        repeated = index[index.duplicated()].unique().tolist()
        if repeated:
            raise ValueError(
                f"tasks is a pandas Series, read by its index of queries, whose "
                f"index repeats {len(repeated)} quer(y/ies): {_preview(repeated)}; "
                "give each query one task."
            )
        tasks = tasks.to_dict()
    if isinstance(tasks, Mapping):
        unknown = [q for q in queries if q not in tasks]
        if unknown:
            raise ValueError(
                f"tasks has no entry for {len(unknown)} of {n_queries} queries "
                f"(e.g. {_preview(unknown[:5])})."
            )
        return _check_tasks(
            np.array([tasks[q] for q in queries], dtype=object), queries
        )
    if isinstance(tasks, (str, bytes)):
        raise TypeError(
            f"tasks must be a sequence of str (one per query) or a mapping query "
            f"-> task, not a single string; got {tasks!r}."
        )
    if isinstance(tasks, pd.DataFrame):
        # list() of a DataFrame gives its column names.
        raise TypeError(
            "tasks must be a sequence of str (one per query), a mapping or a "
            "pandas Series query -> task; got a DataFrame. Pass one of its "
            "columns."
        )
    query_task = _entries(
        tasks, "tasks", "a sequence of str (one per query), a mapping or a Series"
    )
    if len(query_task) != n_queries:
        raise ValueError(
            f"tasks must have one entry per query ({n_queries}); got {len(query_task)}."
        )
    return _check_tasks(query_task, queries)


def _check_tasks(query_task, queries):
    """Raise unless every task of ``query_task`` (one per query) is a non-empty
    str; the error names ``tasks`` and the queries whose task is bad."""
    is_str = np.fromiter((isinstance(t, str) for t in query_task), bool, len(queries))
    if not is_str.all():
        bad = query_task[~is_str]
        missing = sum(map(_is_missing, bad))
        raise TypeError(
            f"tasks must be strings, one per query; {len(bad)} of {len(queries)} "
            f"are not (e.g. {_preview(bad[:5])} for queries "
            f"{_preview(queries[~is_str][:5])}"
            f"{f', {missing} missing' if missing else ''}). Give every query a "
            "task name; convert numbers with .astype(str)."
        )
    empty = query_task == ""
    if empty.any():
        raise ValueError(
            f"tasks has {int(empty.sum())} empty string(s) '' (for queries "
            f"{_preview(queries[empty][:5])}); every query needs a non-empty task "
            "name."
        )
    return _plain_str(query_task)


def _real_column(column):
    """A column of a wide ``scores`` DataFrame as float64 (NaN where missing),
    or None if it holds something other than real numbers."""
    if _is_real_dtype(column.dtype):
        return column.to_numpy(dtype=np.float64, na_value=np.nan)
    if not (
        pd.api.types.is_object_dtype(column.dtype)
        or isinstance(column.dtype, pd.CategoricalDtype)
    ):
        return None
    items = column.to_numpy(dtype=object)
    is_number = np.fromiter(map(_is_real_number, items), bool, len(items))
    missing = np.fromiter((v is None or v is pd.NA for v in items), bool, len(items))
    if not (is_number | missing).all():
        return None
    values = np.full(len(items), np.nan)
    # One by one: a Python int beyond float64's range is infinite here.
    values[is_number] = np.fromiter(map(_as_float, items[is_number]), np.float64)
    return values


def from_wide(scores, models=None, queries=None, *, tasks=None):
    """Convert a queries x models score matrix to a long evaluation table.

    NaN cells are absences (the model was not scored on that query), not
    zeros: they produce no row; so are the masked cells of a NumPy masked
    array. Queries with no score at all therefore do not appear in the
    result; a model with no score at all is an error.

    Parameters
    ----------
    scores : array-like of shape (n_queries, n_models) or DataFrame
        Scores in [0, 1], NaN (or masked, in a masked array) where missing;
        rows of numbers may give a missing score as None or ``pd.NA`` too
        (``[[1.0, None]]``). A DataFrame gives the queries as its index and
        the models as its columns; an object or categorical column of it may
        hold numbers, with None or ``pd.NA`` where missing.
    models : sequence of str of shape (n_models,), default=None
        Model names. Defaults to the DataFrame's columns, or for an array to
        ``"model0"``, ``"model1"``, ... (zero-padded so they sort in order).
    queries : sequence of str of shape (n_queries,), default=None
        Query texts or ids. Defaults to the DataFrame's index, or for an array
        to ``"query0"``, ``"query1"``, ... (zero-padded).
    tasks : sequence of str of shape (n_queries,), mapping or Series, default=None
        Task of each query, in row order, or a mapping query -> task that
        covers every query. A pandas Series is such a mapping: it is read by
        its index of queries, never by position. If None, the result has no
        ``task`` column.

        ``models``, ``queries`` and a sequence ``tasks`` are read in order:
        a set (whose order changes between processes) is refused, and so is
        a mapping as ``models`` or ``queries``.

    Returns
    -------
    evals : DataFrame of shape (n_scored_cells, 3 or 4)
        Columns ``model``, ``query``, ``score`` (float) and ``task`` if
        ``tasks`` is given; model-major: the rows of the first model
        (columns order), in query order, then the next model.

    Raises
    ------
    TypeError
        If ``scores`` does not hold real numbers (booleans, complex numbers,
        durations, decimals and text are refused rather than converted), if
        it is a table of named columns that is not a pandas DataFrame (a pyarrow
        Table or RecordBatch, a polars DataFrame: convert it with
        ``.to_pandas()``, as its column names would be lost), if
        ``models``, ``queries`` or ``tasks`` is a single string, a set or not
        a sequence, if ``models`` or ``queries`` is a mapping, or if a model,
        query or task name is not a str.
    ValueError
        If ``scores`` is not 2-D (or its rows have different lengths), is
        empty, holds an infinite value or a model without any score, if names
        repeat, are empty strings or do not match the shape of ``scores``, or
        if ``tasks`` misses a query or gives one an empty string.

    Examples
    --------
    >>> import numpy as np
    >>> from locus_sklearn.datasets import from_wide
    >>> from_wide([[1.0, np.nan], [0.0, 1.0]], models=["a", "b"],
    ...           queries=["q1", "q2"], tasks=["math", "law"])
      model query  score  task
    0     a    q1    1.0  math
    1     a    q2    0.0   law
    2     b    q2    1.0   law
    """
    if isinstance(scores, pd.DataFrame):
        default_models = list(scores.columns)
        default_queries = list(scores.index)
        # An object or categorical column may hold numbers only (a missing
        # one as None or pd.NA): its values are checked one by one.
        columns = [_real_column(scores.iloc[:, j]) for j in range(scores.shape[1])]
        bad = [
            (c, t)
            for (c, t), column in zip(scores.dtypes.items(), columns, strict=True)
            if column is None
        ]
        if bad:
            shown = ", ".join(f"{c!r} ({t})" for c, t in bad[:5])
            raise TypeError(
                f"scores must hold real numbers in [0, 1] (NaN for missing); "
                f"{len(bad)} column(s) do not: {shown}"
                f"{', ...' if len(bad) > 5 else ''}. Booleans, complex "
                "numbers (whose imaginary part would be lost), durations, "
                "decimals and text are refused rather than converted."
            )
        values = np.column_stack(columns) if columns else np.empty(scores.shape)
    else:
        # A pyarrow Table's (or polars DataFrame's) column names would be
        # replaced by model0, model1, ...: refused, naming .to_pandas().
        _check_not_foreign_table(scores, "scores")
        default_models = default_queries = None
        # np.asarray drops a masked array's mask: a masked (missing) cell
        # would be scored with whatever value lies under it.
        masked = isinstance(scores, np.ma.MaskedArray)
        try:
            array = scores if masked else np.asarray(scores)
        except ValueError:  # nested sequences numpy cannot stack
            raise ValueError(
                "scores must be a 2-D (n_queries, n_models) array-like; rows have "
                "different lengths."
            ) from None
        if array.dtype == object:
            # Rows with None for a missing score (``[[1.0, None]]``) make an
            # object array: read one value at a time, as the object columns
            # of a DataFrame are, None and pd.NA missing.
            data = np.ma.getdata(array)
            if masked:  # whatever lies under the mask is not read
                data = np.where(np.ma.getmaskarray(array), None, data)
            values = _real_column(pd.Series(data.ravel(), dtype=object))
            if values is None:
                items = data.ravel()
                is_ok = (_is_real_number(v) or v is None or v is pd.NA for v in items)
                bad = items[~np.fromiter(is_ok, bool, len(items))]
                raise TypeError(
                    "scores must hold real numbers in [0, 1] (NaN, None or "
                    f"pd.NA for missing); got {_preview(bad[:3])[1:-1]} in an "
                    "array of dtype object. Booleans, complex numbers (whose "
                    "imaginary part would be lost), durations, decimals and "
                    "text are refused rather than converted."
                )
            values = values.reshape(data.shape)
        elif not _is_real_dtype(array.dtype):
            raise TypeError(
                f"scores must hold real numbers in [0, 1] (NaN for missing); got "
                f"an array of dtype {array.dtype}. Booleans, complex numbers "
                "(whose imaginary part would be lost), durations, decimals and "
                "text are refused rather than converted."
            )
        else:
            values = array.astype(np.float64)
            if masked:
                values = values.filled(np.nan)
    if values.ndim != 2:
        raise ValueError(
            f"scores must be 2-D (n_queries, n_models); got shape {values.shape}."
        )
    if values.size == 0:
        raise ValueError(f"scores is empty (shape {values.shape}).")
    n_queries, n_models = values.shape
    models = _labels(models, default_models, n_models, "models", "model")
    queries = _labels(queries, default_queries, n_queries, "queries", "query")

    infinite = np.isinf(values)
    if infinite.any():
        raise ValueError(
            f"scores has {int(infinite.sum())} infinite value(s); use NaN for a "
            "missing score and numbers in [0, 1] otherwise."
        )
    present = ~np.isnan(values)
    empty = ~present.any(axis=0)
    if empty.any():
        raise ValueError(
            f"{int(empty.sum())} model(s) have no score at all (all-NaN columns): "
            f"{_preview(models[empty])}; drop them or give them scores."
        )

    query_task = None
    if tasks is not None:
        query_task = _query_tasks(tasks, queries)
    model_index, query_index = np.nonzero(present.T)
    columns = {
        "model": models[model_index],
        "query": queries[query_index],
        "score": values[query_index, model_index],
    }
    if query_task is not None:
        columns["task"] = query_task[query_index]
    evals = _long_frame(columns)
    check_evals(evals, name="evals built from scores")
    return evals
