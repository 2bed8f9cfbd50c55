"""Split an evaluation table into chunks that each hold whole models.

A chunk is a small picklable object whose ``read()`` returns a DataFrame, so
that a worker can read its own rows (a Parquet chunk travels as a filter, not
as rows). Three kinds of source:

- a DataFrame (or mapping of columns): split in memory, models in sorted order;
- a Parquet file or folder, or a ``pyarrow.dataset.Dataset``: one scan of the
  ``model`` column finds the models, then each chunk is read with a filter on
  a range of model names (any row order; row groups of a file sorted by model
  are skipped by their statistics);
- any other iterable of DataFrames or Arrow record batches or tables
  (``pd.read_csv(chunksize=...)``, ``ParquetFile.iter_batches``): streamed,
  regrouped into chunks of whole models; the rows of one model must come in
  consecutive frames.
"""

import bisect
import os
import pickle
import sys
from collections.abc import Iterable, Mapping
from numbers import Integral

import numpy as np
import pandas as pd

from .._evals import (
    _as_frame,
    _check_columns,
    _check_score_dtype,
    _check_string_column,
    _empty_error,
    _preview,
)

__all__ = ["iter_model_chunks", "model_chunks"]

_ID_COLUMNS = ("model", "query", "task")


def _check_chunk_models(chunk_models):
    if not isinstance(chunk_models, Integral) or isinstance(chunk_models, bool):
        raise TypeError(
            f"chunk_models must be an int >= 1; got {chunk_models!r} "
            f"({type(chunk_models).__name__})."
        )
    if chunk_models < 1:
        raise ValueError(f"chunk_models must be an int >= 1; got {chunk_models}.")
    return int(chunk_models)


class FrameChunk:
    """Rows of whole models, held in memory."""

    def __init__(self, frame, name):
        self.frame = frame
        self.name = name

    def read(self):
        return self.frame


class DatasetChunk:
    """Rows of the models ``values`` of a pyarrow dataset, read on demand."""

    def __init__(self, dataset, columns, values, by_range, name, cast=False):
        self.dataset = dataset
        self.columns = columns
        self.values = values
        self.by_range = by_range
        self.name = name
        self.cast = cast

    def read(self):
        import pyarrow as pa
        import pyarrow.dataset as ds

        field = ds.field("model")
        if self.cast:
            # A file stores the names, read as strings, as Arrow string_view
            # or integers, which pyarrow cannot compare with the strings of
            # the filter (nor with its row groups' statistics): compare them
            # once read. No row group is skipped then.
            field = field.cast(pa.large_string())
        if self.by_range:
            # Names are sorted and the chunk takes every name in between.
            where = (field >= self.values[0]) & (field <= self.values[-1])
        else:
            where = field.isin(self.values)
        try:
            table = self.dataset.to_table(
                columns=self.columns, filter=where, **_scan_options(self.dataset)
            )
        except _arrow_decode_errors() as exc:
            if _names_its_path(exc):
                raise
            raise _read_error(
                self.dataset, exc, self.name, self.columns, where
            ) from exc
        return _ids_as_strings(table).to_pandas()


def _ids_as_strings(table):
    """``table`` with its integer id columns as their decimal strings, as
    load_evals reads Parquet.

    Converted in Arrow, before ``to_pandas``: an id column stored as a
    dictionary of integers (Arrow IPC/Feather files, ``ds.dataset(table)``)
    becomes a pandas categorical of integers, which no integer-dtype check
    recognises (every chunk was then refused as not strings), and whose
    ``astype(str)`` would turn a missing id into the string "nan". Arrow's
    cast decodes the dictionary and keeps a missing id missing, refused as
    such by check_evals.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    for column in _ID_COLUMNS:
        index = table.schema.get_field_index(column)
        if index < 0 or not pa.types.is_integer(
            _value_type(table.schema.field(index).type)
        ):
            continue
        strings = pc.cast(table.column(index), pa.large_string())
        table = table.set_column(index, column, strings)
    return table


# ---------------------------------------------------------------- DataFrame
def _frame_chunks(frame, chunk_models, name):
    _check_columns(frame.columns, name)
    if len(frame) == 0:
        raise _empty_error(name)
    model = _check_string_column(frame["model"].to_numpy(dtype=object), name, "model")
    codes, names = pd.factorize(model)
    names = np.asarray(names, dtype=object)
    # Chunks in sorted model-name order, so their results concatenate in it.
    rank = np.empty(len(names), dtype=np.int64)
    rank[np.argsort(names)] = np.arange(len(names))
    codes = rank[codes]
    order = np.argsort(codes, kind="stable")
    bounds = np.searchsorted(codes[order], np.arange(0, len(names), chunk_models))
    bounds = np.append(bounds, len(order))
    # Checked above, split lazily: one chunk's copy of the rows at a time.
    return (
        FrameChunk(frame.iloc[np.sort(order[start:stop])], name)
        for start, stop in zip(bounds[:-1], bounds[1:], strict=True)
    )


# ------------------------------------------------------------------ pyarrow
def _arrow_read_errors():
    """What pyarrow raises for a value it cannot convert or a file it cannot
    decode; an OSError (a missing file, no permission) names its path itself."""
    import pyarrow as pa

    return pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError


def _arrow_decode_errors():
    """:func:`_arrow_read_errors`, and the OSError pyarrow raises reading a
    file whose pages or metadata it cannot decode ("Couldn't deserialize
    thrift"), whose message names no file (see :func:`_names_its_path`)."""
    return (*_arrow_read_errors(), OSError)


def _names_its_path(exc):
    """Whether ``exc`` is an error raised as it is: a missing file or one
    without permission, whose message names its path."""
    return isinstance(exc, FileNotFoundError | PermissionError)


def _scan_options(dataset):
    """Options of a scan of ``dataset`` whose memory is the rows it keeps.

    pyarrow's defaults read ahead of the filter: 16 batches of each of 4
    files, and the whole of a Parquet row group's columns at once
    (``pre_buffer``). For a file not sorted by model, every row group is read
    and few of its rows kept, so reading one chunk took memory that grew
    with the file. One batch and one file ahead keep it to the chunk's rows
    and the row group being filtered.
    """
    import pyarrow.dataset as ds

    options = {"batch_readahead": 1, "fragment_readahead": 1}
    file_format = getattr(dataset, "format", None)  # none for a UnionDataset
    if isinstance(file_format, ds.ParquetFileFormat) and (
        file_format.default_fragment_scan_options.equals(
            ds.ParquetFragmentScanOptions()
        )
    ):
        # Options given here replace the format's own: only pyarrow's
        # defaults are replaced, never options a caller set on the format
        # (decryption, buffer sizes), which are kept as they are.
        options["fragment_scan_options"] = ds.ParquetFragmentScanOptions(
            pre_buffer=False
        )
    return options


def _is_text(arrow_type):
    import pyarrow as pa

    return (
        pa.types.is_string(arrow_type)
        or pa.types.is_large_string(arrow_type)
        or _is_string_view(arrow_type)
    )


def _is_string_view(arrow_type):
    """Whether ``arrow_type`` is Arrow's string_view, which pyarrow 16 added:
    pyarrow 14 and 15 (supported) have no ``pa.types.is_string_view`` and
    read no column as string_view."""
    import pyarrow as pa

    is_string_view = getattr(pa.types, "is_string_view", None)
    return is_string_view is not None and is_string_view(arrow_type)


def _check_arrow_types(schema, name, where="the column has"):
    """Refuse the columns of ``schema`` whose Arrow type check_evals refuses.

    Ids must be strings or integers (read as their decimal strings), scores
    integers or floats (not booleans, decimals or strings). A column of Arrow
    type null (an empty file written from pandas) holds no value to convert;
    its rows are missing values, refused when read.
    """
    import pyarrow as pa

    for column in (*_ID_COLUMNS, "score"):
        if column not in schema.names:
            continue
        arrow_type = schema.field(column).type
        if pa.types.is_null(arrow_type):
            continue
        value_type = (
            arrow_type.value_type if pa.types.is_dictionary(arrow_type) else arrow_type
        )
        if column == "score":
            if not (
                pa.types.is_integer(value_type) or pa.types.is_floating(value_type)
            ):
                raise TypeError(
                    f"{name}['score'] must hold numbers in [0, 1]; {where} Arrow "
                    f"type {arrow_type}. Store scores as floats (strings and "
                    "decimals are not converted to numbers)."
                )
        elif not (_is_text(value_type) or pa.types.is_integer(value_type)):
            raise TypeError(
                f"{name}[{column!r}] must hold strings; {where} Arrow type "
                f"{arrow_type}. Convert ids to strings (integers are read as their "
                "decimal strings)."
            )


def _is_csv(fragment):
    """Whether ``fragment`` is a file whose column types pyarrow infers from
    its text (csv), rather than types the file stores (Parquet)."""
    import pyarrow.dataset as ds

    return isinstance(getattr(fragment, "format", None), ds.CsvFileFormat)


def _check_files(dataset, name):
    """Check every file of ``dataset`` by its own schema, before any read.

    pyarrow reads all the files with one schema (the first file's, unless
    the dataset was given one) and casts the others to it: a file storing
    scores as the strings "1.0"/"0.0" would be read as numbers, where the
    same file alone is refused. So each file is checked as it is stored.
    Returns ``(fragment, schema)`` for each file, to build one schema from.
    """
    import pyarrow as pa
    import pyarrow.dataset as ds

    files = []
    for fragment in dataset.get_fragments():
        path = getattr(fragment, "path", None)
        if path is None:  # a table in memory: the dataset's schema is its own
            continue
        try:
            schema = fragment.physical_schema
        except _arrow_decode_errors() as exc:
            if _names_its_path(exc):
                raise
            raise ValueError(
                f"{name} could not be read: file {path!r} fails with "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        # A column of a hive-partitioned folder lives in the paths, not the file.
        keys = ds.get_partition_keys(fragment.partition_expression)
        _check_columns([*schema.names, *keys], f"{name} file {path!r}")
        checked = schema
        if _is_csv(fragment):
            # Ids of a csv are text, read as strings whatever pyarrow infers
            # ("007" would be an int, "true" a bool): only scores have a type.
            checked = pa.schema([f for f in schema if f.name not in _ID_COLUMNS])
        _check_arrow_types(checked, name, f"file {path!r} stores it as")
        files.append((fragment, schema))
    return files


def _has_column(fragment, schema, column):
    import pyarrow.dataset as ds

    keys = ds.get_partition_keys(fragment.partition_expression)
    return column in schema.names or column in keys


def _check_optional_task(files, name):
    """Whether the files that hold rows have a ``task`` column: all, or none.

    Read with one schema, a file without the column would give its rows a
    missing task (refused, but by a message naming no file), and with the
    first file's schema the column was dropped from every file when the
    first lacked it. A file without rows (header-only) does not count.
    """
    with_task = [(f, s) for f, s in files if _has_column(f, s, "task")]
    without = [(f, s) for f, s in files if not _has_column(f, s, "task")]
    if not with_task or not without:
        return bool(with_task)
    # Counting rows reads Parquet metadata only; needed only in this case.
    with_rows = [f.path for f, _ in with_task if f.count_rows()]
    lacking = [f.path for f, _ in without if f.count_rows()]
    if with_rows and lacking:
        raise ValueError(
            f"{name} has a 'task' column in {len(with_rows)} file(s) (e.g. "
            f"{with_rows[0]!r}) but not in {len(lacking)} file(s) with rows "
            f"(e.g. {lacking[0]!r}); each query needs one task, so give every "
            "file the 'task' column, or none."
        )
    return bool(with_rows)


def _unified_schema(dataset, files, name):
    """One schema that reads every file of ``dataset`` as it is stored.

    pyarrow reads a folder with its first file's schema, so the outcome
    depended on the order of the file names: a column the first file lacks
    was dropped from every file, integer scores of the first file made a
    later 0.5 fail, and integer ids of the first file turned a later "007"
    into "7". Here each column read (``model``, ``query``, ``score``,
    ``task``) takes a type that fits every file (``files``: each file's own
    schema, from :func:`_check_files`):

    - a column any file with rows has is read from every file;
    - scores stored as different types are read as float64;
    - ids stored as integers in some files and as strings in others are
      refused (integers become decimal strings, so 7 and "007" could not
      both be kept); ids stored as different integer types (e.g. uint64
      and int64) are read as their decimal strings; ids of a csv file are
      read as strings, as written;
    - a column of Arrow type null (a header-only file written from pandas)
      types nothing, nor does a file without rows whose type differs from
      the others' (an empty DataFrame with integer ids).

    Partition columns and other columns keep the dataset's own types.
    """
    import pyarrow as pa

    fields = {field.name: field for field in dataset.schema}
    if not files:  # a table in memory: its schema is its own, string_view aside
        for column in _ID_COLUMNS:
            if column in fields and _is_string_view(fields[column].type):
                fields[column] = pa.field(column, pa.large_string())
        return pa.schema(list(fields.values()), metadata=dataset.schema.metadata)
    has_task = _check_optional_task(files, name)
    for column in ("model", "query", "score", "task"):
        stored = []  # (fragment, type) of each file storing values of the column
        for fragment, schema in files:
            index = schema.get_field_index(column)
            if index < 0:
                continue
            arrow_type = schema.field(index).type
            if _is_csv(fragment) and column in _ID_COLUMNS:
                arrow_type = pa.large_string()
            if not pa.types.is_null(arrow_type):
                stored.append((fragment, arrow_type))
        if column == "task" and not has_task:
            # Only header-only files have it: no row to give a task to.
            fields.pop(column, None)
            continue
        if not stored:
            # A partition column keeps its type; a column of type null in
            # every file is read as such (missing values, refused when read).
            if column not in fields and any(column in s.names for _, s in files):
                fields[column] = pa.field(column, pa.null())
            continue
        types = _read_types(stored)
        if len(types) > 1:
            # A file without rows stores no value: its type does not count
            # (an empty DataFrame with integer ids, written beside files of
            # string ids). Counting rows reads Parquet metadata only.
            with_rows = [(f, t) for f, t in stored if f.count_rows()]
            if with_rows:
                stored, types = with_rows, _read_types(with_rows)
        stored = [(fragment.path, arrow_type) for fragment, arrow_type in stored]
        if len(types) == 1:
            (arrow_type,) = types
        elif column == "score":  # integers or floats, checked file by file
            arrow_type = pa.float64()
        else:
            arrow_type = _unified_id_type(column, stored, name)
        fields[column] = pa.field(column, arrow_type)
    return pa.schema(list(fields.values()), metadata=dataset.schema.metadata)


def _read_types(stored):
    """The types to read the ``(file, type)`` pairs of ``stored`` with: as
    stored, but string_view as strings (pyarrow can neither filter nor
    compare string_view ids)."""
    import pyarrow as pa

    return {
        pa.large_string() if _is_string_view(arrow_type) else arrow_type
        for _, arrow_type in stored
    }


def _value_type(arrow_type):
    """The type of the values of a column of ``arrow_type`` (dictionary-encoded
    or not)."""
    import pyarrow as pa

    if pa.types.is_dictionary(arrow_type):
        return arrow_type.value_type
    return arrow_type


def _unified_id_type(column, stored, name):
    """The type to read an id column stored as several types: strings as
    large strings, integers too (their decimal strings, as they are read
    anyway: no one integer type may hold them all, e.g. uint64 and int64),
    a mix of integers and strings refused."""
    import pyarrow as pa

    integers = [p for p, t in stored if pa.types.is_integer(_value_type(t))]
    strings = [p for p, t in stored if _is_text(_value_type(t))]
    if integers and strings:
        raise TypeError(
            f"{name}[{column!r}] is stored as integers in {len(integers)} file(s) "
            f"(e.g. {integers[0]!r}) and as strings in {len(strings)} file(s) "
            f"(e.g. {strings[0]!r}). Integer ids are read as their decimal "
            'strings, so 7 and "007" would become one id; store the ids as '
            "strings in every file."
        )
    return pa.large_string()


def _with_schema(dataset, schema):
    """``dataset`` read with ``schema`` (a type change that
    ``Dataset.replace_schema`` refuses, e.g. int64 scores to float64)."""
    import pyarrow.dataset as ds

    if schema.equals(dataset.schema, check_metadata=True):
        return dataset
    if isinstance(dataset, ds.FileSystemDataset):
        return ds.FileSystemDataset(
            list(dataset.get_fragments()),
            schema,
            dataset.format,
            dataset.filesystem,
            root_partition=dataset.partition_expression,
        )
    if isinstance(dataset, ds.UnionDataset):
        return ds.UnionDataset(
            schema, [_with_schema(child, schema) for child in dataset.children]
        )
    if isinstance(dataset, ds.InMemoryDataset):
        # Its string_view ids as strings: a table in memory is cast, not read.
        return ds.InMemoryDataset(dataset.to_table().cast(schema))
    return dataset.replace_schema(schema)  # pragma: no cover - no file to unify


def _read_error(dataset, exc, name, columns, where=None):
    """A clear error for an Arrow error raised reading ``dataset``.

    pyarrow's message (e.g. "Failed to parse string: 'yes' as a scalar of
    type double") names neither the parameter nor the file; reading the files
    one by one finds the file.
    """
    path = None
    for fragment in dataset.get_fragments(filter=where):
        try:
            fragment.to_table(schema=dataset.schema, columns=columns, filter=where)
        except _arrow_decode_errors():
            path = getattr(fragment, "path", None)
            break
    source = f"file {path!r}" if path else "one of its files"
    if isinstance(exc, OSError):  # pages or metadata pyarrow cannot decode
        advice = (
            "The file is damaged, or was changed while it was read; write it again."
        )
    else:
        expected = ", ".join(
            f"{f.name}: {f.type}" for f in dataset.schema if f.name in columns
        )
        advice = (
            f"The files are read with one schema ({expected}); store each column "
            "with the same type in every file."
        )
    # A value of the wrong type (ArrowTypeError, ArrowNotImplementedError) is
    # a TypeError; a value that does not fit or a file that cannot be decoded
    # (ArrowInvalid, OSError) a ValueError.
    kind = TypeError if isinstance(exc, TypeError | NotImplementedError) else ValueError
    return kind(
        f"{name} could not be read: {source} fails with {type(exc).__name__}: "
        f"{str(exc).strip().rstrip('.')}. {advice}"
    )


def _as_dataset(evals, name):
    try:
        import pyarrow.dataset as ds
    except ImportError as exc:  # pragma: no cover - pyarrow is a test dependency
        raise ImportError(
            f"Reading {name} from Parquet needs pyarrow: pip install "
            '"locus_sklearn[parquet]" (or pyarrow).'
        ) from exc
    if isinstance(evals, ds.Dataset):
        return _with_absolute_paths(evals)
    path = os.fspath(evals)  # as the user wrote it, for messages
    # A leading ~ is the user's home, as for every path of the package.
    expanded = os.path.expanduser(path)
    # A URI (s3://, gs://, hdfs://) is resolved by pyarrow's filesystems.
    if "://" not in path and not os.path.exists(expanded):
        raise FileNotFoundError(f"{name}={path!r} does not exist.")
    try:
        # A relative path is resolved here: a chunk keeps its files' paths,
        # and a worker process resolves them against its own working folder
        # (loky reuses workers, which keep the folder they started in).
        location = path if "://" in path else os.path.abspath(expanded)
        dataset = ds.dataset(location, format="parquet")
    except _arrow_read_errors() as exc:
        # pyarrow's message names the file but not the parameter.
        raise ValueError(
            f"{name}={path!r} could not be opened as Parquet: {type(exc).__name__}: "
            f"{exc}. A path must be a Parquet file or a folder of Parquet files "
            "only (names starting with '.' or '_' are skipped); read a csv with "
            "pyarrow.dataset.dataset(path, format='csv') or "
            "locus_sklearn.datasets.load_evals."
        ) from exc
    if not dataset.files:
        raise ValueError(
            f"{name}={path!r} is a folder with no Parquet files (names starting "
            "with '.' or '_' are skipped)."
        )
    if "://" in path or os.path.isdir(expanded):
        dataset = _with_hive_columns(dataset, location)
    return dataset


def _with_absolute_paths(dataset):
    """``dataset`` with the relative paths of its local files made absolute.

    A chunk sent to a worker process carries its files' paths, which the
    worker resolves against its own working folder: after ``os.chdir`` a
    relative path read the file of the worker's folder, or failed.
    """
    import pyarrow.dataset as ds
    import pyarrow.fs as fs

    if isinstance(dataset, ds.UnionDataset):
        children = [_with_absolute_paths(child) for child in dataset.children]
        return ds.UnionDataset(dataset.schema, children)
    if not isinstance(dataset, ds.FileSystemDataset) or not isinstance(
        dataset.filesystem, fs.LocalFileSystem
    ):
        return dataset
    fragments = list(dataset.get_fragments())
    if all(os.path.isabs(fragment.path) for fragment in fragments):
        return dataset
    rebuilt = []
    for fragment in fragments:
        if fragment.buffer is None and not os.path.isabs(fragment.path):
            # Made as pickling makes it (format, partition, row groups of a
            # Parquet fragment), with no file read.
            make, args = fragment.__reduce__()
            fragment = make(os.path.abspath(args[0]), *args[1:])
        rebuilt.append(fragment)
    return ds.FileSystemDataset(
        rebuilt,
        dataset.schema,
        dataset.format,
        dataset.filesystem,
        root_partition=dataset.partition_expression,
    )


def _with_hive_columns(dataset, path):
    """``dataset`` with the columns of a hive-partitioned folder
    (``model=m1/part-0.parquet``, as ``DataFrame.to_parquet(path,
    partition_cols=[...])`` writes it) read from the paths.

    Only keys that no file stores are added, so a folder of plain files (or
    one whose ``key=value`` folders repeat a column of its files) reads as
    before. Id keys (``model``, ``query``, ``task``) are read as strings,
    as written ("007" stays "007"); others by pyarrow's inference.
    """
    import pyarrow as pa
    import pyarrow.dataset as ds

    try:
        hive = ds.dataset(path, format="parquet", partitioning="hive")
    except _arrow_read_errors():  # e.g. a key that is also a column
        return dataset
    stored = set(dataset.schema.names)
    keys = [field for field in hive.schema if field.name not in stored]
    if not keys:
        return dataset
    fields = [
        pa.field(f.name, pa.string()) if f.name in _ID_COLUMNS else f for f in keys
    ]
    partitioning = ds.partitioning(pa.schema(fields), flavor="hive")
    try:
        return ds.dataset(path, format="parquet", partitioning=partitioning)
    except _arrow_read_errors():  # pragma: no cover - discovered just above
        return dataset


def _dataset_chunks(dataset, chunk_models, name):
    import pyarrow as pa
    import pyarrow.compute as pc

    _check_columns(dataset.schema.names, name)
    # Read every file with one schema that fits them all, not the first one's.
    files = _check_files(dataset, name)
    dataset = _with_schema(dataset, _unified_schema(dataset, files, name))
    schema = dataset.schema
    # Names read as strings from a file that stores them as string_view or
    # integers: compared once read (see DatasetChunk.read).
    stored = [
        _value_type(s.field("model").type)
        for f, s in files
        if "model" in s.names and not _is_csv(f)
    ]
    cast = pa.types.is_large_string(schema.field("model").type) and any(
        not (
            pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_null(t)
        )
        for t in stored
    )
    # Partition columns and in-memory tables: the dataset's own schema.
    _check_arrow_types(schema, name)
    if dataset.count_rows() == 0:
        raise _empty_error(name)
    model_type = schema.field("model").type
    is_text = _is_text(
        model_type.value_type if pa.types.is_dictionary(model_type) else model_type
    )
    # One pass over the model column only: every distinct name, null count,
    # and the first and last name (as names sort) of each file.
    names, n_rows, n_null, spans = set(), 0, 0, {}
    try:
        scanner = dataset.scanner(columns=["model"], **_scan_options(dataset))
        for tagged in scanner.scan_batches():
            column = tagged.record_batch.column(0)
            n_rows += len(column)
            n_null += column.null_count
            if pa.types.is_dictionary(column.type):
                column = column.dictionary_decode()
            unique = pc.unique(column.drop_null()).to_pylist()
            if not unique:
                continue
            names.update(unique)
            keys = [str(m) for m in unique]
            first, last = min(keys), max(keys)
            path = getattr(tagged.fragment, "path", None)
            if path in spans:
                first, last = min(first, spans[path][0]), max(last, spans[path][1])
            spans[path] = first, last
    except _arrow_decode_errors() as exc:
        if _names_its_path(exc):
            raise
        raise _read_error(dataset, exc, name, ["model"]) from exc
    if n_rows == 0:
        raise _empty_error(name)
    if n_null:
        raise TypeError(
            f"{name}['model'] must hold strings; {n_null} of {n_rows} rows do not "
            "(e.g. [None]). Every row needs a model name."
        )
    # Sorted as the model names (strings) sort; UTF-8 byte order, which Arrow's
    # comparisons use, is code-point order, which Python's is.
    values = sorted(names, key=str)
    columns = [c for c in ("model", "query", "score", "task") if c in schema.names]
    chunks = (
        DatasetChunk(part, columns, values[i : i + chunk_models], is_text, name, cast)
        for i, part in zip(
            range(0, len(values), chunk_models),
            _chunk_datasets(dataset, spans, values, chunk_models),
            strict=True,
        )
    )
    if not _pickles(dataset):
        # A dataset of a table in memory cannot travel to a worker process:
        # read each chunk here, lazily (one chunk's rows at a time), and send
        # its rows instead.
        chunks = (FrameChunk(chunk.read(), name) for chunk in chunks)
    return chunks, n_rows


def _chunk_datasets(dataset, spans, values, chunk_models):
    """For each chunk (``chunk_models`` of the sorted names ``values``), the
    files of ``dataset`` that can hold its models: those whose names
    (``spans``: path -> first and last name it holds, as names sort) meet the
    chunk's range. The others hold none of its rows.

    A chunk carrying every file of a folder opened every file to read its
    rows, so a folder of one file per model cost files x chunks.
    """
    import pyarrow.dataset as ds

    starts = range(0, len(values), chunk_models)
    if not isinstance(dataset, ds.FileSystemDataset):
        for _ in starts:
            yield dataset
        return
    fragments = list(dataset.get_fragments())
    # Each file's first and last name as positions in ``values``; a file
    # without rows as an empty range.
    first = np.full(len(fragments), len(values))
    last = np.full(len(fragments), -1)
    for i, fragment in enumerate(fragments):
        if fragment.path in spans:
            low, high = spans[fragment.path]
            first[i] = bisect.bisect_left(values, low, key=str)
            last[i] = bisect.bisect_left(values, high, key=str)
    for start in starts:
        stop = min(start + chunk_models, len(values)) - 1
        held = np.flatnonzero((first <= stop) & (last >= start))
        if len(held) == len(fragments):
            yield dataset
            continue
        yield ds.FileSystemDataset(
            [fragments[i] for i in held],
            dataset.schema,
            dataset.format,
            dataset.filesystem,
            root_partition=dataset.partition_expression,
        )


def _pickles(dataset):
    """Whether ``dataset`` can be sent to a worker process: a dataset of files
    pickles as its paths, one of tables in memory does not pickle at all."""
    try:
        pickle.dumps(dataset)
    except (TypeError, AttributeError, pickle.PicklingError):
        return False
    return True


# ------------------------------------------------------------------- stream
def _stream_chunks(frames, chunk_models, name):
    """Regroup a stream of frames into chunks of whole models.

    A model is complete once a frame arrives without it (or the stream ends);
    a row of a complete model arriving later means the stream is not grouped
    by model, which would split the model's embedding: an error.
    """
    pending = []  # frames holding the rows of models not yet emitted
    open_models = {}  # model -> index of the first frame it appeared in
    complete = []  # complete models not yet emitted, in completion order
    closed = set()  # complete or emitted models
    n_rows = 0
    first_frame = None  # (index, has a task column) of the first frame with rows
    for i, frame in enumerate(frames):
        label = f"{name} (frame {i})"
        frame = _as_frame(_arrow_as_pandas(frame, label), label)
        _check_columns(frame.columns, label)
        if len(frame) == 0:
            continue
        # Frames with and without the optional task column would be
        # concatenated into rows with a missing task, refused by a message
        # naming neither the frame nor the column.
        has_task = "task" in frame.columns
        if first_frame is None:
            first_frame = (i, has_task)
        elif has_task != first_frame[1]:
            with_task, without = (
                (i, first_frame[0]) if has_task else (first_frame[0], i)
            )
            raise ValueError(
                f"{name} has a 'task' column in frame {with_task} but not in frame "
                f"{without}; each query needs one task, so give every frame with "
                "rows the 'task' column, or none."
            )
        # Frames are concatenated below, where pandas turns booleans among
        # integers into 1/0: refuse them here, as check_evals refuses them.
        _check_score_dtype(frame["score"].dtype, label)
        n_rows += len(frame)
        model = _check_string_column(
            frame["model"].to_numpy(dtype=object), label, "model"
        )
        present = pd.unique(model)
        again = [m for m in present if m in closed]
        if again:
            raise ValueError(
                f"{name} is not grouped by model: {len(again)} model(s) come back "
                f"in frame {i} after frames without them (e.g. {_preview(again)}). "
                "Each model's rows must come in consecutive frames, or its "
                "embedding would be split; sort the rows by model, or pass a "
                "DataFrame or a Parquet path (read in any order)."
            )
        present_set = set(present)
        for m in [m for m in open_models if m not in present_set]:
            del open_models[m]
            complete.append(m)
            closed.add(m)
        for m in present:
            open_models.setdefault(m, i)
        pending.append(frame)
        n_ready = len(complete) // chunk_models * chunk_models
        if n_ready:
            ready, complete = complete[:n_ready], complete[n_ready:]
            pending = yield from _take(pending, ready, chunk_models, name)
    if n_rows == 0:
        raise _empty_error(name)
    complete.extend(open_models)
    if complete:
        yield from _take(pending, complete, chunk_models, name)


def _arrow_as_pandas(frame, label):
    """``frame`` as a DataFrame if it is an Arrow record batch or table
    (``ParquetFile.iter_batches()``), its integer ids as their decimal
    strings, as a Parquet source reads them; anything else as it is."""
    if isinstance(frame, str | os.PathLike):
        raise TypeError(
            f"{label} must be a DataFrame; got the path {os.fspath(frame)!r}. An "
            "iterable is read as a stream of frames: pass one path (a Parquet "
            "file or folder), or pyarrow.dataset.dataset(paths, format='parquet') "
            "for several files."
        )
    pa = sys.modules.get("pyarrow")  # an Arrow object means pyarrow is imported
    if pa is not None and isinstance(frame, pa.RecordBatch | pa.Table):
        return _ids_as_strings(pa.table(frame)).to_pandas()
    return frame


def _take(pending, models, chunk_models, name):
    """Yield the rows of ``models`` (complete models, in order) as chunks of
    ``chunk_models`` models; return the other rows, as a one-frame list.

    The pending frames are concatenated and their models ranked once, however
    many chunks are cut from them: masking every pending row again for each
    chunk made regrouping a stream quadratic (rows pending x chunks).
    Each chunk's rows are in their pending order, copied lazily, one chunk at
    a time, as a mask would take them.
    """
    rows = pd.concat(pending, ignore_index=True) if len(pending) > 1 else pending[0]
    n_chunks = -(-len(models) // chunk_models)
    chunk_of = {m: k // chunk_models for k, m in enumerate(models)}
    codes, uniques = pd.factorize(rows["model"].to_numpy(dtype=object))
    # Rows of models still open get the last rank, n_chunks: they stay pending.
    ranks = np.array([chunk_of.get(m, n_chunks) for m in uniques], dtype=np.int64)
    which = ranks[codes]
    order = np.argsort(which, kind="stable")
    bounds = np.searchsorted(which[order], np.arange(n_chunks + 1))
    for start, stop in zip(bounds[:-1], bounds[1:], strict=True):
        yield FrameChunk(rows.iloc[order[start:stop]], name)
    return [rows.iloc[order[bounds[-1] :]]]


# ------------------------------------------------------------------- public
def model_chunks(evals, chunk_models, *, name="evals"):
    """Chunks of ``evals`` (objects with ``read()``), and the row count if known.

    Returns
    -------
    chunks : iterable of FrameChunk or DatasetChunk
    n_rows : int or None
        Rows of a dataset source, counted by the scan (None otherwise), so
        that the caller can check no row was lost.
    """
    chunk_models = _check_chunk_models(chunk_models)
    if isinstance(evals, pd.DataFrame | Mapping):
        return _frame_chunks(_as_frame(evals, name), chunk_models, name), None
    is_dataset = is_table = False
    try:
        import pyarrow as pa
        import pyarrow.dataset as ds

        is_dataset = isinstance(evals, ds.Dataset)
        is_table = isinstance(evals, pa.Table | pa.RecordBatch)
    except ImportError:  # pragma: no cover - pyarrow is a test dependency
        pass
    if is_dataset or isinstance(evals, str | os.PathLike):
        return _dataset_chunks(_as_dataset(evals, name), chunk_models, name)
    if isinstance(evals, Iterable) and not isinstance(evals, bytes | np.ndarray):
        return _stream_chunks(evals, chunk_models, name), None
    # A single Table is no stream (it does not iterate), but both forms that
    # take it are documented: say which, rather than only "got Table".
    hint = (
        f" For a single {type(evals).__name__}, pass [{name}] (a stream of "
        f"one) or pyarrow.dataset.dataset({name})."
        if is_table
        else ""
    )
    raise TypeError(
        f"{name} must be a DataFrame (or mapping of columns), a path to a Parquet "
        "file or folder, a pyarrow.dataset.Dataset, or an iterable of DataFrames "
        f"or Arrow tables or record batches; got {type(evals).__name__}.{hint}"
    )


def iter_model_chunks(evals, *, chunk_models=1000):
    """Read an evaluation table in chunks that each hold whole models.

    Use it to process a pool that does not fit one DataFrame; every chunk can
    be passed to :meth:`LocusEmbedder.transform
    <locus_sklearn.LocusEmbedder.transform>`, :meth:`LocusRouter.add_models
    <locus_sklearn.LocusRouter.add_models>` or
    :func:`~locus_sklearn.check_evals`. No row is dropped or changed; chunks
    are not validated beyond the ``model`` column and, for a Parquet or
    dataset source, the column types of every file, or for a stream the
    ``score`` dtype of every frame (validate each chunk with
    :func:`~locus_sklearn.check_evals`).

    Parameters
    ----------
    evals : DataFrame, mapping of columns, str, os.PathLike, pyarrow.dataset.Dataset or iterable of DataFrames or Arrow record batches
        Long-format evaluations (columns ``model``, ``query``, ``score``,
        optionally ``task``):

        - a DataFrame or a mapping of equal-length columns, split in memory;
        - a path to a Parquet file or to a folder of Parquet files (a
          leading ``~`` is the user's home), or a
          ``pyarrow.dataset.Dataset`` (any format pyarrow reads, e.g. csv):
          the ``model`` column is scanned once, then each chunk is read with
          a filter on its range of model names, so the rows may come in any
          order; a file sorted by model reads fastest (row groups outside
          the range are skipped). Integer id columns (plain or
          dictionary-encoded, as Arrow IPC/Feather files and
          ``pyarrow.dataset.dataset(table)`` keep them) become their decimal
          strings, as in :func:`~locus_sklearn.datasets.load_evals`; the ids
          of a csv are read as strings, as written ("007" stays "007"). Every
          file's own schema is checked first (ids strings or integers, scores
          numbers), then all are read with one schema that fits every file
          (not the first file's): scores stored as integers in some files
          and floats in others are read as floats; ids stored as integers in
          some files and strings in others, or a ``task`` column in only some
          of the files with rows, are refused (ids stored as different
          integer types are read as their decimal strings); a header-only
          file (columns of Arrow type null) types nothing, nor does a file
          without rows whose types differ from the others'. Each chunk
          reads only the files that hold its models' names (from the scan),
          and a relative path is resolved in the calling process, as a
          worker process may work in another folder. A
          hive-partitioned folder (``model=m1/part-0.parquet``, as
          ``DataFrame.to_parquet(path, partition_cols=["model"])`` writes it)
          gives the columns its folder names hold and its files lack, ids
          as strings. A dataset of a table in memory is read chunk by chunk
          in the calling process (it cannot be sent to a worker process);
        - any other iterable of DataFrames (e.g. ``pd.read_csv(path,
          chunksize=100_000)``) or of Arrow record batches or tables (e.g.
          ``pyarrow.parquet.ParquetFile(path).iter_batches()``; integer ids
          become their decimal strings): streamed and regrouped; each
          model's rows must come in consecutive frames, and every frame with
          rows must have the ``task`` column, or none.
    chunk_models : int, default=1000
        Most models per chunk. Memory grows with it (rows of the chunk),
        never with the number of models in ``evals``; reading a Parquet file
        not sorted by model also holds one row group at a time while it is
        filtered.

    Returns
    -------
    chunks : iterator of DataFrame
        Each chunk holds the rows of at most ``chunk_models`` models, every row of each. Chunks
        of a DataFrame or a dataset come in sorted model-name order; those of
        a stream in the order its models end.

    Raises
    ------
    ValueError
        If ``chunk_models < 1``, a column is missing (from ``evals`` or one of
        its files; ``task`` from only some files, or from only some frames
        of a stream) or repeated, the columns
        are a MultiIndex, ``evals`` is empty (or a
        folder with no Parquet files), a stream is not grouped by model (a
        model's rows come back after frames without it), or a file cannot be
        read (not Parquet, or its values do not fit the other files' types).
    TypeError
        If ``evals`` is none of the above, a model name is not a string, a
        file stores a column as a type the column cannot hold (e.g. scores
        as strings), a frame of a stream has boolean scores (refused, as
        :func:`~locus_sklearn.check_evals` refuses them), or ids are stored as integers in some files and as
        strings in others.

    Examples
    --------
    >>> import pandas as pd
    >>> from locus_sklearn.parallel import iter_model_chunks
    >>> evals = pd.DataFrame({"model": ["b", "a", "c", "a"],
    ...                       "query": ["q1", "q1", "q2", "q2"],
    ...                       "score": [1.0, 0.0, 1.0, 1.0]})
    >>> [sorted(chunk["model"].unique()) for chunk in
    ...  iter_model_chunks(evals, chunk_models=2)]
    [['a', 'b'], ['c']]
    """
    chunks, _ = model_chunks(evals, chunk_models)
    return (chunk.read() for chunk in chunks)
