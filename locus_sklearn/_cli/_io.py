"""Input and output of the ``locus`` command: tables, JSON, progress, files.

Reading (evaluations, costs, encodings, queries, embeddings, saved
estimators) turns every problem with a file into one clear message naming
the file; writing checks the target before any work and reports a failed
write against the target, never against a temporary file.
"""

import contextlib
import csv
import gzip
import io
import json
import math
import os
import re
import stat
import sys
import unicodedata
import warnings
import zlib
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd

# The package's one cost validator; the only place the CLI names it.
from .._evals import _preview, check_model_costs
from .._paths import file_mode, not_regular_file
from .._text import printable
from ._errors import EXIT_IO, EXIT_USAGE, CommandError

__all__ = [
    "costs_for",
    "echo",
    "emit_json",
    "format_table",
    "load_estimator",
    "note",
    "printable",
    "progress_to_stderr",
    "read_costs",
    "read_embeddings",
    "read_encodings",
    "read_evals",
    "read_lines",
    "read_queries",
    "shorten",
    "check_folder_writable",
    "check_not_an_input",
    "check_writable",
    "write_csv",
    "write_estimator",
    "write_text",
]


# ---------------------------------------------------------------------- output
def _display_width(text):
    """Terminal columns of ``text``: 2 for each wide or fullwidth character,
    0 for each combining or enclosing mark, 1 for the rest."""
    width = 0
    for char in text:
        if unicodedata.east_asian_width(char) in "WF":
            width += 2
        elif not (
            unicodedata.combining(char) or unicodedata.category(char) in ("Mn", "Me")
        ):
            width += 1
    return width


def _as_written(text, stream=None):
    """``text`` as ``stream`` (default: stdout) writes it: each character its
    encoding lacks as its error handler writes it (a backslash escape, where
    the command set stdout up so, ``PYTHONIOENCODING=ascii``), the width a
    terminal shows."""
    stream = sys.stdout if stream is None else stream
    encoding = getattr(stream, "encoding", None)
    errors = getattr(stream, "errors", None) or "strict"
    if not encoding:
        return text
    try:
        return text.encode(encoding, errors).decode(encoding)
    except (LookupError, UnicodeError):
        # A handler that fails on it (strict): measured as it is, and the
        # write itself reports the character.
        return text


def shorten(text, width):
    """``text`` on one line (each run of whitespace one space), escaped as
    :func:`format_table` writes it to stdout, and cut to at most ``width``
    terminal columns (:func:`_display_width`) ending in "..." where it is
    longer; an escape is kept whole or left out.

    Examples
    --------
    >>> shorten("a  short\\tquery", 20)
    'a short query'
    >>> shorten("日本語のとても長い質問", 10)  # 2 columns a character
    '日本語...'
    """
    pieces = [_as_written(printable(c)) for c in " ".join(text.split())]
    widths = [_display_width(p) for p in pieces]
    if sum(widths) <= width:
        return "".join(pieces)
    kept, used = [], 0
    for piece, piece_width in zip(pieces, widths, strict=True):
        if used + piece_width > width - 3:
            break
        kept.append(piece)
        used += piece_width
    return "".join(kept) + "..."


def format_table(header, rows, *, tsv=False, aligns=None, indent=""):
    """Format rows as tab-separated or aligned text.

    Parameters
    ----------
    header : sequence of str
        Column names.
    rows : sequence of sequences
        Cells, converted with ``str``.
    tsv : bool, default=False
        Tab-separated values instead of aligned columns. In both forms, tabs
        and line breaks in cells become spaces, and any other character that
        is not printable is written as its escape (:func:`printable`).
    aligns : sequence of {"<", ">"}, default=None
        Alignment per column; text left, everything else right by default.
    indent : str, default=""
        Prefix of every line of an aligned table.

    Returns
    -------
    lines : list of str

    Notes
    -----
    Aligned columns are padded by display width, not by ``len``: a wide
    (East Asian wide or fullwidth) character takes two terminal columns and
    a combining mark none, so a model named "日本語モデル" or "modèle"
    written with a combining accent keeps the columns aligned. Widths are
    those of the text as stdout writes it: on a stdout that cannot encode
    "日本語" (``PYTHONIOENCODING=ascii``), of its escapes ``\\u65e5...``.

    Examples
    --------
    >>> print("\\n".join(format_table(["model", "p"], [["a", "0.5"]])))
    model    p
    -----  ---
    a      0.5
    """
    # Tabs and line breaks in a cell (a model named "a\tb") would break the
    # columns of either form: they become spaces in both.
    clean = str.maketrans({"\t": " ", "\n": " ", "\r": " "})
    cells = [[printable(str(c).translate(clean)) for c in header]]
    cells += [[printable(str(c).translate(clean)) for c in row] for row in rows]
    if tsv:
        return ["\t".join(row) for row in cells]
    # Measured as written: the escapes stdout writes for what its encoding
    # lacks are wider than the characters.
    cells = [[_as_written(c) for c in row] for row in cells]
    widths = [max(_display_width(row[i]) for row in cells) for i in range(len(header))]
    if aligns is None:
        aligns = ["<" if not _is_number(rows, i) else ">" for i in range(len(header))]
    lines = []
    for n, row in enumerate(cells):
        padded = zip(row, aligns, widths, strict=True)
        text = "  ".join(
            c + " " * (w - _display_width(c))
            if a == "<"
            else " " * (w - _display_width(c)) + c
            for c, a, w in padded
        )
        lines.append(indent + text.rstrip())
        if n == 0:
            lines.append(indent + "  ".join("-" * w for w in widths))
    return lines


def _is_number(rows, i):
    values = [str(row[i]) for row in rows if str(row[i]) != ""]
    try:
        [float(v.replace(",", "")) for v in values]
    except ValueError:
        return False
    return bool(values)


def echo(lines, stream=None):
    """Print a line or lines to ``stream`` (default: stdout)."""
    stream = sys.stdout if stream is None else stream
    for line in [lines] if isinstance(lines, str) else lines:
        print(line, file=stream)


def note(message):
    """Progress and notes go to stderr, so stdout stays parseable; what is
    not printable in them (a model name from a file) is escaped
    (:func:`printable`)."""
    print(printable(message), file=sys.stderr, flush=True)


def _jsonable(value):
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    raise TypeError(f"cannot write a {type(value).__name__} as JSON")


def emit_json(document):
    """Print ``document`` as one JSON document on stdout.

    NaN or infinite numbers are an error: JSON has no spelling for them.

    Examples
    --------
    >>> import numpy as np
    >>> emit_json({"model": "a", "p_correct": np.float32(0.5)})
    {
      "model": "a",
      "p_correct": 0.5
    }
    """
    print(json.dumps(document, indent=2, allow_nan=False, default=_jsonable))


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


class _ProgressStream(io.TextIOBase):
    """A text stream writing to ``target`` with ANSI colour codes removed
    unless ``target`` is a terminal and NO_COLOR is unset (or empty), the
    rule of :func:`locus_sklearn._training.progress_sink` too."""

    def __init__(self, target):
        self.target = target
        isatty = getattr(target, "isatty", None)
        # A set, non-empty NO_COLOR asks for no colour on a terminal too
        # (https://no-color.org).
        self.strip = bool(os.environ.get("NO_COLOR")) or not (
            isatty is not None and isatty()
        )

    @property
    def encoding(self):  # progress bars draw with what the target can write
        return getattr(self.target, "encoding", None)

    def writable(self):
        return True

    def write(self, text):
        self.target.write(_ANSI.sub("", text) if self.strip else text)
        return len(text)

    def flush(self):
        self.target.flush()


@contextlib.contextmanager
def progress_to_stderr():
    """Send what is printed to stdout meanwhile (skorch's epoch table) to stderr,
    without colour codes unless stderr is a terminal and NO_COLOR is not set.

    Examples
    --------
    >>> with progress_to_stderr():
    ...     print("epoch 1")  # written to stderr
    """
    # The epoch table itself goes to stderr (_training.progress_sink, which
    # reads NO_COLOR too).
    with contextlib.redirect_stdout(_ProgressStream(sys.stderr)):
        yield


# ----------------------------------------------------------------- evaluations
#: Errors of reading a file whose bytes are wrong (not gzip, cut short,
#: corrupt, not UTF-8): malformed data (status 1), not an unreadable file,
#: although gzip's BadGzipFile is an OSError (status 3).
_UNREADABLE = (gzip.BadGzipFile, EOFError, zlib.error, UnicodeDecodeError)


def _csv_separator(path):
    lower = os.fspath(path).lower()
    if lower.endswith((".csv", ".csv.gz")):
        return ","
    if lower.endswith((".tsv", ".tsv.gz")):
        return "\t"
    return None


def _check_header(path, sep):
    """Reject an empty csv/tsv and one with repeated column names (pandas
    would rename the second ``score`` to ``score.1`` and read the first)."""
    try:
        first = pd.read_csv(path, sep=sep, header=None, nrows=1, dtype=str)
    except pd.errors.EmptyDataError:
        raise ValueError(
            f"The evaluations file {os.fspath(path)!r} is empty; it needs a header "
            "line (model, query, score) and one row per evaluation."
        ) from None
    except (*_UNREADABLE, pd.errors.ParserError):
        # Not gzip, cut short, not UTF-8, an unclosed quote: load_evals reads
        # the whole file and reports each naming it (status 1, read_evals).
        return
    names = [str(n).strip() for n in first.iloc[0].tolist()]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        where = {n: [i + 1 for i, m in enumerate(names) if m == n] for n in repeated}
        described = "; ".join(f"{n!r} (columns {where[n]})" for n in repeated)
        raise ValueError(
            f"The evaluations file {os.fspath(path)!r} has repeated column names: "
            f"{described}; keep one column of each name."
        )


def _first_bad_score(path):
    """(row, value, count) of the first non-numeric score of a file, or None."""
    sep = _csv_separator(path)
    try:
        if sep is not None:
            raw = pd.read_csv(
                path, sep=sep, usecols=["score"], dtype=str, keep_default_na=False
            )["score"]
        elif os.fspath(path).lower().endswith((".jsonl", ".jsonl.gz")):
            raw = pd.read_json(path, lines=True, dtype=False)["score"]
        else:
            raw = pd.read_parquet(path, columns=["score"])["score"]
    except (ValueError, KeyError, OSError, ImportError, *_UNREADABLE):
        return None
    present = raw.notna() & (raw.astype(str).str.strip() != "")
    number = pd.to_numeric(raw.where(present), errors="coerce")
    bad = np.flatnonzero(present.to_numpy() & number.isna().to_numpy())
    if not len(bad):
        return None
    return int(bad[0]) + 1, raw.iloc[bad[0]], len(bad)


# load_evals names its parameters (``path=``, ``model_column=``); a command
# names the file, and has no options to rename columns.
_COLUMN_ADVICE = re.compile(r"(Name the right columns|rename or drop them first).*$")


def _evals_terms(message, path):
    """A message of ``load_evals`` about ``path`` in the command's terms.

    Examples
    --------
    >>> _evals_terms("path has no column(s) ['score']; it has columns ['model']. "
    ...              "Name the right columns with model_column=.", "e.csv")
    "The evaluations file 'e.csv' has no column(s) ['score']; it has columns \
['model']. Rename the file's columns to model, query and score (and task, if \
any)."
    >>> _evals_terms("evals read from 'e.csv'['score'] has 1 value(s) outside "
    ...              "[0, 1] (e.g. [2.0]).", "e.csv")
    "The evaluations file 'e.csv', column 'score' has 1 value(s) outside [0, 1] \
(e.g. [2.0])."
    """
    shown = repr(os.fspath(path))
    message = message.replace(f"path={shown}", f"The evaluations file {shown}")
    message = message.replace(f"path ({shown})", f"The evaluations file {shown}")
    # The checks of the table read: "evals read from 'e.csv'['score'] has ...".
    read_from = f"evals read from {shown}"
    message = re.sub(
        re.escape(read_from) + r"""\[('[^']*'|"[^"]*")\]""",
        lambda found: f"The evaluations file {shown}, column {found[1]}",
        message,
    )
    message = message.replace(read_from, f"The evaluations file {shown}")
    if message.startswith("path "):
        message = f"The evaluations file {shown} {message[len('path ') :]}"
    return _COLUMN_ADVICE.sub(
        "Rename the file's columns to model, query and score (and task, if any).",
        message,
    )


@contextlib.contextmanager
def _permission_named(what, path):
    """A file the process may not read, met in the block, as one line naming
    the ``what`` file (not Python's "[Errno 13] Permission denied: ...")."""
    try:
        yield
    except PermissionError:
        raise PermissionError(
            f"The {what} file {str(path)!r} cannot be read: permission denied."
        ) from None


def expanded(path):
    """The file ``path`` names, a leading ``~`` expanded: the rule of every
    path argument (no shell expands ``--encodings=~/enc.npz``, nor a quoted
    name). Messages name the path as the user wrote it.

    Examples
    --------
    >>> import os
    >>> expanded("~/router.safetensors") == os.path.join(
    ...     os.path.expanduser("~"), "router.safetensors")
    True
    >>> expanded("router.safetensors")
    'router.safetensors'
    """
    return os.path.expanduser(os.fspath(path))


def read_evals(path):
    """Read an evaluation file with :func:`~locus_sklearn.datasets.load_evals`,
    with messages naming the file (and the row) for the common mistakes.

    Parameters
    ----------
    path : str or path-like

    Returns
    -------
    evals : DataFrame
    """
    from ..datasets import load_evals

    sep = _csv_separator(path)
    # "~/evals.csv" names the file load_evals (and pandas) read: checked as
    # such here, where a name given as --evals=~/... reaches us unexpanded.
    source = expanded(path)
    try:
        missing = file_mode(source) is None
    except OSError:
        # It may exist: a loop of links, a folder on the way without search
        # permission. load_evals names what it is (os.path.exists said "no
        # such file" for both).
        missing = False
    if missing:
        raise FileNotFoundError(f"No such evaluations file: {os.fspath(path)!r}.")
    with _permission_named("evaluations", path):
        if sep is not None and os.path.isfile(source):
            _check_header(path, sep)
        try:
            return load_evals(path)
        except ImportError as exc:
            if not os.fspath(path).lower().endswith(".parquet"):
                raise
            # Neither pyarrow nor fastparquet: pandas' own "Unable to find a
            # usable engine" names no extra, and load_evals names its
            # parameter (path=...), not the file.
            raise ImportError(
                f"Reading the evaluations file {os.fspath(path)!r} (Parquet) needs "
                'pyarrow: pip install "locus_sklearn[parquet]" (or pyarrow).'
            ) from exc
        except OSError as exc:  # e.g. a folder: "path='.' is a folder; ..."
            message = _evals_terms(str(exc), path)
            if message == str(exc):
                raise
            raise type(exc)(message) from None
        except (ValueError, TypeError) as exc:
            found = _first_bad_score(path) if isinstance(exc, ValueError) else None
            if found is None:
                message = _evals_terms(str(exc), path)
                if message == str(exc):
                    raise
                raise type(exc)(message) from None
            row, value, count = found
            raise ValueError(
                f"The evaluations file {os.fspath(path)!r}, column 'score': "
                f"{value!r} in data row {row} is not a number ({count} row(s) are "
                "not); scores are numbers in [0, 1]."
            ) from None


def read_queries(arguments, file=None):
    """Queries from the command line (``-`` reads stdin) and ``file``; blank
    lines are skipped.

    Examples
    --------
    >>> read_queries(["What is 2+2?", "  "])
    ['What is 2+2?']
    """
    if not arguments and not file:
        # Nothing named where queries come from: a command line missing its
        # argument (status 2), not a source found empty (status 1).
        raise CommandError(
            "No queries given: pass them as arguments, '-' to read one per line "
            "from stdin, or --file FILE.",
            status=EXIT_USAGE,
        )
    queries = []
    for query in arguments:
        if query == "-":
            queries.extend(_stdin_lines())
        else:
            queries.append(query)
    if file:
        queries.extend(read_lines(file, "--file"))
    queries = [q for q in queries if q.strip()]
    if not queries:
        # Name where the blank queries came from: a QUERY argument, stdin, a file.
        sources = []
        if any(query != "-" for query in arguments):
            sources.append("the QUERY argument(s)")
        if "-" in arguments:
            sources.append("stdin ('-')")
        if file:
            sources.append(f"--file {str(file)!r}")
        raise ValueError(
            "No queries given: every query read was blank (from "
            f"{' and '.join(sources)}); give at least one query with some text."
        )
    return queries


def _stdin_lines():
    """The lines of stdin, read as files are (:func:`_utf8_lines`). A stream
    without bytes (a test's StringIO) is read as it is."""
    buffer = getattr(sys.stdin, "buffer", None)
    if buffer is None:
        return _text_lines(sys.stdin.read())
    return _utf8_lines(buffer.read(), "stdin ('-')", "send UTF-8")


def _utf8_lines(data, what, fix):
    """The lines of ``data`` (bytes) as UTF-8 text; a ValueError naming
    ``what`` and saying ``fix`` where it is not UTF-8."""
    try:
        return _text_lines(data.decode("utf-8"))
    except UnicodeDecodeError:
        from ..datasets._loaders import first_non_utf8

        raise ValueError(
            f"{what} is not UTF-8 text: {first_non_utf8([data])}; {fix}."
        ) from None


def _text_lines(text):
    """Lines as a text-mode file splits them (universal newlines), without
    their ends; a byte-order mark (some editors write one) is not text."""
    lines = io.StringIO(text.removeprefix("\ufeff"), newline=None)
    return [line.rstrip("\r\n") for line in lines]


def read_lines(path, what):
    """The lines of the UTF-8 text file ``path`` (named ``what`` in errors),
    without their line ends.

    Raises FileNotFoundError, IsADirectoryError or PermissionError (exit
    status 3) for a missing file, a folder or a file the process may not
    read, and ValueError (status 1) for one that is not UTF-8 text, each
    naming ``what`` and the file.
    """
    try:
        with open(expanded(path), "rb") as handle:
            data = handle.read()
    except FileNotFoundError:
        raise FileNotFoundError(f"{what} {str(path)!r}: no such file.") from None
    except IsADirectoryError:
        raise IsADirectoryError(
            f"{what} {str(path)!r} is a folder, not a file."
        ) from None
    except PermissionError:
        raise PermissionError(
            f"{what} {str(path)!r} cannot be read: permission denied."
        ) from None
    return _utf8_lines(data, f"{what} {str(path)!r}", "save it as UTF-8")


# ----------------------------------------------------------------------- costs
def _read_csv(path, what, **options):
    """``pd.read_csv`` of every column as read (never one taken as the index),
    with one-line errors naming the ``what`` file; a row with more fields
    than the header is refused (pandas would shift it, or drop its extra
    fields). A name ending in ``.gz`` is read as gzip, as evaluations files
    are; no other compression is inferred (both reads below must agree)."""
    try:
        with warnings.catch_warnings():
            # A row with extra fields: refused below, naming the row.
            warnings.simplefilter("ignore", pd.errors.ParserWarning)
            frame = pd.read_csv(
                path, index_col=False, compression=_compression(path), **options
            )
    except FileNotFoundError:
        raise FileNotFoundError(f"No such {what} file: {str(path)!r}.") from None
    except IsADirectoryError:
        raise IsADirectoryError(
            f"The {what} file {str(path)!r} is a folder, not a file."
        ) from None
    except PermissionError:
        raise PermissionError(
            f"The {what} file {str(path)!r} cannot be read: permission denied."
        ) from None
    except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
        raise ValueError(
            f"Could not read the {what} file {str(path)!r} as gzip: {exc}"
        ) from None
    except UnicodeDecodeError as exc:
        from ..datasets._loaders import file_not_utf8

        # exc's position is in pandas' read buffer, not in the file.
        where = file_not_utf8(expanded(path)) or exc
        raise ValueError(
            f"Could not read the {what} file {str(path)!r}: it is not UTF-8 text: "
            f"{where}; save it as UTF-8 csv."
        ) from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise ValueError(
            f"Could not read the {what} file {str(path)!r}: {exc}"
        ) from None
    _check_no_extra_fields(path, what)
    return frame


def _compression(path):
    """How :func:`_read_csv` decompresses ``path``: gzip for ``.gz``."""
    return "gzip" if os.fspath(path).lower().endswith(".gz") else None


def _check_no_extra_fields(path, what):
    """Refuse a csv row with more fields than the header, naming the row
    (``m,1,5`` under ``model,cost``: a decimal comma, or an unquoted
    comma in a name)."""
    opener = gzip.open if _compression(path) == "gzip" else open
    # The file pandas read: it expands "~" (--costs=~/costs.csv), where
    # open() would look for a folder named "~".
    with opener(expanded(path), "rt", encoding="utf-8-sig", newline="") as handle:
        rows = csv.reader(handle)
        row_number = 0
        try:
            header = next(rows, [])
            for row in rows:
                row_number += bool(row)  # pandas skips blank lines
                if len(row) > len(header):
                    raise ValueError(
                        f"The {what} file {str(path)!r}: data row {row_number} "
                        f"has {len(row)} fields, but the header has {len(header)} "
                        f"({','.join(header)}): {','.join(row)!r}. Quote a value "
                        "that holds a comma, and write decimals with a point."
                    )
        except csv.Error as exc:
            raise ValueError(
                f"Could not read the {what} file {str(path)!r} as csv, after data "
                f"row {row_number}: {exc}"
            ) from None


def read_costs(path):
    """Read per-model costs from a csv file with columns ``model`` and ``cost``
    (gzip-compressed if its name ends in ``.gz``).

    Costs are validated by the estimators' own validator
    (:func:`~locus_sklearn.check_model_costs`).

    Parameters
    ----------
    path : str or path-like

    Returns
    -------
    costs : dict of str to float

    Raises
    ------
    FileNotFoundError
        If the file does not exist.
    ValueError
        For missing columns, duplicate models, or costs that are not finite
        numbers >= 0.

    Examples
    --------
    >>> import tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "costs.csv")
    >>> _ = open(path, "w").write("model,cost\\na,1.5\\nb,0\\n")
    >>> read_costs(path)
    {'a': 1.5, 'b': 0.0}
    """
    # Every cell as text: a model named "NA", "None" or "null" stays a name.
    frame = _read_csv(path, "costs", dtype=str, keep_default_na=False)
    missing = [c for c in ("model", "cost") if c not in frame.columns]
    if missing:
        raise ValueError(
            f"The costs file {str(path)!r} must be a csv with columns model,cost; it "
            f"has {list(frame.columns)}."
        )
    duplicated = frame["model"][frame["model"].duplicated()].unique().tolist()
    if duplicated:
        raise ValueError(
            f"The costs file {str(path)!r} lists {len(duplicated)} model(s) more "
            f"than once: {duplicated[:5]}."
        )
    number = pd.to_numeric(frame["cost"].str.strip(), errors="coerce")
    bad = np.flatnonzero(number.isna().to_numpy())
    if len(bad):
        raise ValueError(
            f"The costs file {str(path)!r}, column 'cost': "
            f"{frame['cost'].iloc[bad[0]]!r} in data row {bad[0] + 1} is not a "
            f"number ({len(bad)} row(s) are not)."
        )
    models = frame["model"].to_numpy(dtype=object)
    raw = dict(zip(models, number.astype(np.float64).tolist(), strict=True))
    costs = check_model_costs(raw, models, name=f"The costs file {str(path)!r}")
    return dict(zip(models.tolist(), costs.tolist(), strict=True))


def costs_for(costs, models, path):
    """Costs of ``models`` (in that order) from a costs file's ``costs``;
    models of the file that are not asked for are ignored.

    Returns
    -------
    costs : ndarray of float64, shape (len(models),)

    Examples
    --------
    >>> costs_for({"a": 1.0, "b": 2.0, "c": 3.0}, ["c", "a"], "costs.csv").tolist()
    [3.0, 1.0]
    """
    models = np.asarray(models, dtype=object)
    # Checked here rather than left to check_model_costs, whose remedy ("pass
    # costs for exactly the models of the pool") is wrong for a file: its
    # other rows are ignored, so it only has to cover the pool.
    missing = [m for m in models if m not in costs]
    if missing:
        raise ValueError(
            f"The costs file {str(path)!r} has no cost for {len(missing)} model(s) "
            f"of the pool: {_preview(missing)}; list a cost for every model of the "
            "pool (other rows are ignored)."
        )
    wanted = {m: costs[m] for m in models}
    return check_model_costs(wanted, models, name=f"The costs file {str(path)!r}")


# ------------------------------------------------------------------- encodings
_NPZ_MAGIC = b"PK\x03\x04"  # an npz file is a zip archive


def _npz_problem(path):
    """Why ``path`` is not an npz archive, or None if it looks like one."""
    with open(path, "rb") as handle:
        start = handle.read(6)
    if start.startswith(_NPZ_MAGIC):
        return None
    if start.startswith(b"\x93NUMPY"):
        return "it holds a single .npy array, not an npz archive"
    return "it is not an npz archive; a text file, perhaps"


def _npz_arrays(data):
    """(key, member, shape, dtype, declared, held) of the arrays 'queries'
    and 'vectors' of the open npz archive ``data``, read from their .npy
    headers only: ``declared`` is the bytes their shape and dtype need,
    ``held`` the bytes the member holds after its header (its uncompressed
    size in the zip, which no read goes beyond)."""
    from numpy.lib import format as npy_format

    names = data.zip.namelist()
    arrays = []
    for key in ("queries", "vectors"):
        member = f"{key}.npy" if f"{key}.npy" in names else key
        with data.zip.open(member) as handle:
            version = npy_format.read_magic(handle)
            # Versions 2 and 3 have the same header layout (3 allows UTF-8
            # in field names, which no array of this file has).
            read_header = (
                npy_format.read_array_header_1_0
                if version == (1, 0)
                else npy_format.read_array_header_2_0
            )
            shape, _, dtype = read_header(handle)
            offset = handle.tell()
        declared = math.prod(int(n) for n in shape) * dtype.itemsize
        held = data.zip.getinfo(member).file_size - offset
        arrays.append((key, member, shape, dtype, declared, held))
    return arrays


def _array_sizes(arrays):
    """The arrays of :func:`_npz_arrays` for a message: "'vectors' (member
    'vectors.npy'): shape (2, 3) of float64 needs 48 bytes, the file holds
    48"."""
    return "; ".join(
        f"{key!r} (member {member!r}): shape {shape} of {dtype} needs "
        f"{declared:,} bytes, the file holds {held:,}"
        for key, member, shape, dtype, declared, held in arrays
    )


def read_encodings(path):
    """Read precomputed query encodings from an ``.npz`` file.

    The file holds two arrays: ``queries`` (strings, shape (n,)) and
    ``vectors`` (numbers, shape (n, d)), as written by
    ``numpy.savez(path, queries=np.array(texts, dtype=str), vectors=X)``.

    Parameters
    ----------
    path : str or path-like

    Returns
    -------
    encodings : dict of str to ndarray of shape (d,)
        Usable as ``encoder=`` of any estimator.

    Raises
    ------
    FileNotFoundError
        If the file does not exist.
    OSError
        If it is a folder, a named pipe or a device, or a file the process
        may not read.
    ValueError
        If it is not an npz file with those two arrays of matching length,
        or an array's header declares more data than the file holds for it
        (checked before any array is read: a small file declaring a huge
        shape is refused without allocating it), or the arrays do not fit
        in memory.
    """
    path = Path(path)  # as given, for the messages
    source = expanded(path)  # "--encodings=~/enc.npz": the file read
    how = (
        "Write one with numpy.savez(path, queries=np.array(texts, dtype=str), "
        "vectors=X)."
    )
    with _permission_named("encodings", path):
        mode = file_mode(source)
        if mode is None:
            raise FileNotFoundError(f"No such encodings file: {str(path)!r}.")
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(
                f"The encodings file {str(path)!r} is a folder, not a file."
            )
        if not stat.S_ISREG(mode):
            raise not_regular_file(
                mode, f"The encodings file {str(path)!r}", "an npz file"
            )
        reason = _npz_problem(source)
    if reason is not None:
        raise ValueError(
            f"{str(path)!r} is not a valid encodings file ({reason}). {how}"
        )
    arrays, oversized = [], []
    try:
        with np.load(source, allow_pickle=False) as data:
            missing = [k for k in ("queries", "vectors") if k not in data.files]
            if missing:
                raise ValueError(
                    f"it has arrays {data.files}; it needs 'queries' and 'vectors'"
                )
            # Reading an array allocates what its header declares first: a
            # file of a few hundred bytes can declare gigabytes.
            arrays = _npz_arrays(data)
            oversized = [array for array in arrays if array[4] > array[5]]
            if not oversized:
                queries, vectors = data["queries"], data["vectors"]
    except MemoryError:
        sizes = f" ({_array_sizes(arrays)})" if arrays else ""
        raise ValueError(
            f"--encodings {str(path)!r}: its arrays do not fit in memory{sizes}; "
            "give fewer or smaller vectors (float32 takes half the memory of "
            "float64)."
        ) from None
    except (ValueError, OSError, EOFError) as exc:
        reason = str(exc)
        if "allow_pickle" in reason:
            reason = (
                "'queries' is an object array; save it as np.array(texts, dtype=str)"
            )
        raise ValueError(
            f"{str(path)!r} is not a valid encodings file ({reason}). {how}"
        ) from None
    if oversized:
        raise ValueError(
            f"--encodings {str(path)!r} is not a valid encodings file: the header "
            "of an array declares more data than the file holds for it "
            f"({_array_sizes(oversized)}), so it is cut short or corrupt. {how}"
        )
    if queries.ndim != 1 or queries.dtype.kind not in "US":
        raise ValueError(
            f"{str(path)!r}: 'queries' must be a 1-d array of strings; got dtype "
            f"{queries.dtype} and shape {queries.shape}."
        )
    if (
        vectors.ndim != 2
        or len(vectors) != len(queries)
        or vectors.dtype.kind not in "fiu"
    ):
        raise ValueError(
            f"{str(path)!r}: 'vectors' must be numbers of shape ({len(queries)}, d), "
            f"one row per query; got dtype {vectors.dtype} and shape {vectors.shape}."
        )
    if queries.dtype.kind == "S":
        # Bytes (numpy.savez of encoded texts): UTF-8, as every text file here.
        try:
            queries = np.char.decode(queries, "utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(
                f"{str(path)!r}: 'queries' holds bytes that are not UTF-8 text "
                f"({exc.reason}); save the texts as np.array(texts, dtype=str)."
            ) from None
    if not len(queries) or not vectors.shape[1]:
        raise ValueError(
            f"{str(path)!r}: 'vectors' has shape {vectors.shape}; it needs at least "
            "one query and one number per encoding, shape (n, d) with n, d >= 1."
        )
    queries = queries.astype(str).tolist()
    if len(set(queries)) != len(queries):
        raise ValueError(f"{str(path)!r}: 'queries' has duplicates.")
    with np.errstate(over="ignore"):  # reported below, as not finite
        vectors = vectors.astype(np.float32)
    bad = ~np.isfinite(vectors).all(axis=1)
    if bad.any():
        examples = [queries[i] for i in np.flatnonzero(bad)[:3]]
        raise ValueError(
            f"{str(path)!r}: 'vectors' has {int(bad.sum())} row(s) with NaN or "
            f"infinite values (or values beyond float32's range), e.g. for "
            f"{examples}; every encoding must be finite."
        )
    return dict(zip(queries, vectors, strict=True))


# ------------------------------------------------------------------ embeddings
def read_embeddings(path):
    """Model names and embeddings from a csv written by ``locus embed`` (or
    gzip-compressed, ``.csv.gz``): a ``model`` column first, then one
    numeric column per dimension.

    Returns
    -------
    names : ndarray of object, shape (n_models,)
    X : ndarray of float64, shape (n_models, n_dims)
    """
    # Every cell as text: a model named "NA", "None" or "007" stays that name.
    frame = _read_csv(path, "embeddings", dtype=str, keep_default_na=False)
    expected = (
        "expected a model column followed by numeric columns (as written by "
        "locus embed)"
    )
    if len(frame.columns) == 0 or str(frame.columns[0]).strip() != "model":
        first = str(frame.columns[0]) if len(frame.columns) else None
        raise ValueError(
            f"{str(path)!r} is not an embeddings csv: its first column is "
            f"{first!r}, not 'model'; {expected}."
        )
    names = frame.iloc[:, 0].to_numpy(dtype=object)
    values = frame.iloc[:, 1:].apply(pd.to_numeric, errors="coerce")
    values = values.to_numpy(dtype=np.float64)
    if values.shape[1] == 0 or len(frame) == 0 or not np.isfinite(values).all():
        raise ValueError(f"{str(path)!r} is not an embeddings csv: {expected}.")
    # The rule check_evals applies to model ids, which are exact strings:
    # "" is refused, a name of spaces is a name (embed writes it as such).
    blank = [i + 1 for i, name in enumerate(names) if str(name) == ""]
    if blank:
        raise ValueError(
            f"The embeddings file {str(path)!r} has a blank model name in data "
            f"row(s) {blank[:5]} (an empty cell); every row needs the name of "
            "its model."
        )
    repeated = sorted(set(names[pd.Series(names).duplicated().to_numpy()]))
    if repeated:
        raise ValueError(
            f"The embeddings file {str(path)!r} lists {len(repeated)} model(s) "
            f"more than once: {repeated[:5]}; keep one row per model."
        )
    return names, values


# ---------------------------------------------------------- saved estimators
def _file_kind(path):
    """The estimator kind stored in a locus_sklearn file, or None if unreadable."""
    try:
        from safetensors import safe_open

        with safe_open(str(path), framework="pt", device="cpu") as handle:
            kind = (handle.metadata() or {}).get("kind")
        return json.loads(kind) if kind else None
    except Exception:  # any unreadable file: let load() give its own message
        return None


def load_estimator(path, *, encoder=None, device=None, embedder_ok=False):
    """Load a saved router (or, with ``embedder_ok``, an embedder).

    Precomputed encodings (a mapping ``encoder``) are added to those saved in
    a file fitted with precomputed encodings (the new vectors win).
    """
    from .. import LocusEmbedder, LocusRouter
    from .._files import check_regular_file

    what = "router or embedder" if embedder_ok else "router"
    with _permission_named(what, path):
        # Before _file_kind opens it: opening a named pipe with no writer blocks.
        check_regular_file(path)
        # Opened once here: _file_kind takes any failure for "not a locus
        # file", and the load's own read gives Python's bare "[Errno 13]".
        open(expanded(path), "rb").close()
    cls = LocusRouter
    if _file_kind(expanded(path)) == "LocusEmbedder":
        if not embedder_ok:
            raise ValueError(
                f"{str(path)!r} holds a LocusEmbedder, not a LocusRouter: this "
                "command needs a router file (locus fit -o ROUTER); an embedder "
                "file is for locus embed."
            )
        cls = LocusEmbedder
    if encoder is None:
        return cls.load(path, device=device)
    if isinstance(encoder, Mapping):
        try:
            saved = cls.load(path, device=device)
        except ValueError:  # e.g. saved with a custom encoder object
            saved = None
        if saved is not None:
            saved = (saved.embedder_ if cls is LocusRouter else saved).encoder
        if isinstance(saved, Mapping):
            _check_added_encodings(encoder, saved, path)
            encoder = {**saved, **encoder}
    return cls.load(path, encoder=encoder, device=device)


def _check_added_encodings(added, saved, path):
    """The vectors ``added`` to those ``saved`` in ``path`` must have their
    dimension: checked in the merged mapping, a mismatch is measured against
    its first vector, and one added vector of another dimension replacing it
    made every saved vector the odd one."""
    if not saved:
        return
    shape = tuple(np.shape(next(iter(saved.values()))))
    wrong = []
    for key, value in added.items():
        try:
            own = tuple(np.shape(value))
        except ValueError:  # ragged: the encoder's own check names it
            continue
        if own != shape:
            wrong.append((key, own))
    if wrong:
        shown = ", ".join(f"{k!r}: {own}" for k, own in wrong[:5])
        raise ValueError(
            f"The precomputed encodings added to those saved in {str(path)!r} "
            f"(a mapping encoder, or --encodings) must have their shape {shape}; "
            f"{len(wrong)} of the {len(added)} added vectors do not "
            f"({shown}{', ...' if len(wrong) > 5 else ''})."
        )


# --------------------------------------------------------------------- writing
def _folder_problem(folder, shown=None):
    """Why files cannot be created in the existing path ``folder``, or None
    (``shown``: the folder as the user wrote it, for the message).

    Found by creating (then removing) an empty file there, named as the
    save names its temporary files: ``os.access`` says yes to root
    everywhere, also under /proc or /sys or on an NFS mount that maps root
    to nobody, where the write would fail only after the work.
    """
    from .._files import _temp_name

    shown = str(folder if shown is None else shown)
    if not folder.is_dir():
        return f"{shown!r} is not a folder"
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"the folder {shown!r} is not writable"
    probe = _temp_name(folder / "locus-write-check")
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except OSError as exc:
        return f"cannot create a file in the folder {shown!r} ({exc.strerror})"
    with contextlib.suppress(OSError):
        os.unlink(probe)
    return None


def check_writable(path, what):
    """Fail now, before any work, if ``what`` cannot be written to ``path``:
    its folder is missing or not writable, it names a folder, or it is an
    existing file that the write would refuse (not a regular file, or not
    writable by this process).

    Examples
    --------
    >>> check_writable("/no/such/folder/router.locus", "ROUTER")
    Traceback (most recent call last):
    ...
    locus_sklearn._cli._errors.CommandError: cannot write ROUTER '/no/such/folder/router.locus': the folder '/no/such/folder' does not exist
    >>> check_writable("router.locus/", "ROUTER")
    Traceback (most recent call last):
    ...
    locus_sklearn._cli._errors.CommandError: cannot write ROUTER 'router.locus/': it ends with a path separator, so it names a folder; give a file name
    """
    # Checked on the name as given: Path() drops a trailing separator and a
    # last "." ("out/" and "out/." become "out"), so such a name would pass
    # here and be refused by the save only after the work.
    text = os.fspath(path)
    name = os.path.basename(text)
    if name in ("", ".", ".."):
        ends = "ends with a path separator" if not name else f"ends with {name!r}"
        raise CommandError(
            f"cannot write {what} {text!r}: it {ends}, so it names a folder; "
            "give a file name",
            status=EXIT_IO,
        )
    path = Path(path)  # as given, for the messages
    target = Path(expanded(path))  # "~/router.locus": the file written
    if target.is_dir():
        problem = "it is a folder; give a file name"
    elif not target.parent.exists():
        problem = f"the folder {str(path.parent)!r} does not exist"
    else:
        from .._files import target_problem

        refused = target_problem(target)  # the save's own check, in its words
        problem = refused[2] if refused else _folder_problem(target.parent, path.parent)
    if problem:
        raise CommandError(
            f"cannot write {what} {str(path)!r}: {problem}", status=EXIT_IO
        )


def check_not_an_input(output, what, inputs):
    """Refuse, as a command-line error, to write ``what`` at ``output`` when
    it is one of the ``inputs`` (a mapping of option or argument name to
    path; None for one not given) the command reads.

    Examples
    --------
    >>> import tempfile, os
    >>> evals = os.path.join(tempfile.mkdtemp(), "evals.csv")
    >>> _ = open(evals, "w").write("model,query,score\\n")
    >>> check_not_an_input(evals, "ROUTER", {"EVALS": evals})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    locus_sklearn._cli._errors.CommandError: ROUTER '...evals.csv' is EVALS, ...
    """
    target = expanded(output)  # "~/evals.csv" is EVALS given as such
    if not os.path.exists(target):
        return
    for name, path in inputs.items():
        if path is None or not os.path.exists(expanded(path)):
            continue
        if os.path.samefile(target, expanded(path)):
            raise CommandError(
                f"{what} {str(output)!r} is {name}, which this command reads; "
                "writing it would overwrite that input. Give another file name.",
                status=EXIT_USAGE,
            )


def check_folder_writable(path, what):
    """Fail now, before any work, if files cannot be written into the folder
    ``path`` (created with its parents if missing).

    Examples
    --------
    >>> import tempfile, os
    >>> afile = os.path.join(tempfile.mkdtemp(), "afile")
    >>> _ = open(afile, "w").write("")
    >>> check_folder_writable(afile, "--output")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    locus_sklearn._cli._errors.CommandError: cannot write into --output '...afile': it is a file, not a folder
    """
    path = Path(path)  # as given, for the messages
    folder = Path(expanded(path))  # "~/figures": the folder written into
    if folder.exists() and not folder.is_dir():
        problem = "it is a file, not a folder"
    else:
        existing = folder  # the folder, or its nearest existing parent
        # lexists: a symbolic link to nothing (an unmounted folder) is there
        # too, and no folder can be created in its place or through it.
        while not os.path.lexists(existing) and existing != existing.parent:
            existing = existing.parent
        if os.path.islink(existing) and not existing.exists():
            where = "it" if existing == folder else repr(str(existing))
            problem = (
                f"{where} is a symbolic link to {os.readlink(existing)!r}, which "
                "does not exist; give an existing folder or one that can be created"
            )
        else:
            problem = _folder_problem(existing, path if existing == folder else None)
    if problem:
        raise CommandError(
            f"cannot write into {what} {str(path)!r}: {problem}", status=EXIT_IO
        )


def _write_failure(exc):
    """The reason of a failed write, without the temporary file's name."""
    if isinstance(exc, OSError):
        return exc.strerror or str(exc)
    # safetensors reports e.g. IoError(Os { code: 28, ..., message: "No space
    # left on device" }): keep the OS's message when there is one.
    found = re.search(r'message: "([^"]*)"', str(exc))
    return found.group(1) if found else " ".join(str(exc).split())


def _reported_write(write, path, what):
    """Run ``write()``, which writes ``path`` atomically; a failed write (a
    full disk) is one error naming ``path`` with status 3, the file as it
    was."""
    existed = Path(expanded(path)).exists()
    try:
        write()
    except Exception as exc:
        if not isinstance(exc, OSError) and type(exc).__name__ != "SafetensorError":
            raise
        left = "the file is unchanged" if existed else "nothing was written"
        raise CommandError(
            f"could not write {what} {str(path)!r}: {_write_failure(exc)} ({left})",
            status=EXIT_IO,
        ) from exc


def write_estimator(estimator, path, what):
    """``estimator.save(path)``, with a failed write reported against ``path``
    (as given; the file written has a leading ``~`` expanded)."""
    _reported_write(lambda: estimator.save(expanded(path)), path, what)


def write_text(text, path, what):
    """Write ``text`` (UTF-8) to ``path`` atomically, as a saved router is
    written (:func:`locus_sklearn._files.write_bytes`), with a failed write
    reported against ``path``."""
    from .._files import write_bytes

    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError as exc:
        # A lone surrogate (a name read from bytes that are not UTF-8) has no
        # UTF-8 form: a file written otherwise could not be read back.
        line = text[: exc.start].count("\n") + 1
        raise ValueError(
            f"cannot write {what} {str(path)!r} as UTF-8: line {line} holds "
            f"{text[exc.start : exc.end]!r}, a lone surrogate (from bytes that "
            "are not UTF-8); rename what holds it to valid text."
        ) from None
    _reported_write(lambda: write_bytes(expanded(path), data), path, what)


def write_csv(frame, path, what):
    """``frame.to_csv(path)``, atomically (:func:`write_text`).

    Where a name (index, column label or text cell) holds a carriage return,
    every text cell is quoted: Python's csv writer quotes a field holding
    the line end it writes ("\\n") but not a lone "\\r", which every csv
    reader takes for a line end too (a model named "gpt-4\\r", from a CRLF
    file split on "\\n", split its row in two). Other files are written as
    ``to_csv`` writes them, but for the line ends: "\\n" on every system
    (pandas' default is ``os.linesep``, "\\r\\n" on Windows), as the
    command's other text files.
    """
    texts = [*frame.index, *frame.columns, frame.index.name]
    texts += frame.select_dtypes(exclude="number").to_numpy().ravel().tolist()
    quote = any(isinstance(t, str) and "\r" in t for t in texts)
    quoting = csv.QUOTE_NONNUMERIC if quote else csv.QUOTE_MINIMAL
    write_text(frame.to_csv(quoting=quoting, lineterminator="\n"), path, what)
