"""Read lm-evaluation-harness ``--log_samples`` output as an evaluation table."""

import fnmatch
import json
import numbers
import os
import re
import stat
from pathlib import Path

import numpy as np

from .._evals import _as_float, _preview, check_evals
from .._warnings import warn_external
from ._loaders import _check_regular, _clip, _file_mode, _long_frame, json_lines

__all__ = ["from_lm_eval"]

# lm-eval names files after the run's ``datetime.now().isoformat()`` with ":" -> "-".
_DATE = r"\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}(?:\.\d+)?"
# Gzipped as other tools store them (lm-eval writes them plain): json_lines
# reads both.
_SAMPLES = re.compile(rf"^samples_(?P<task>.+)_(?P<date>{_DATE})\.jsonl(?:\.gz)?$")
# ``--output_path OUT`` writes OUT/<model>/results_<date>.json; ``--output_path
# OUT/<stem>.json`` writes OUT/<stem>_<date>.json beside the samples files, where
# several models' runs may share the folder.
_RESULTS = re.compile(rf"^(?P<stem>.+)_(?P<date>{_DATE})\.json$")
# The keys lm-eval itself reads a model name from, in its order of precedence.
_MODEL_ARG_KEYS = ("peft", "delta", "pretrained", "model", "path", "engine")
# The keys of a samples record that lm-eval writes besides its metrics.
_RECORD_KEYS = frozenset(
    "doc_id doc target arguments resps filtered_resps filter metrics".split()
)
# The model_args that change which model answers (its weights, adapter,
# precision or quantization) besides the keys of its name: two runs of one
# model_name that differ in one of them are two models. Arguments on how the
# model is run (batch_size, device, max_length, ...) are left out.
_MODEL_CHANGING_ARGS = (
    *_MODEL_ARG_KEYS,
    "revision",
    "subfolder",
    "lora_local_path",
    "dtype",
    "load_in_8bit",
    "load_in_4bit",
    "quantization",
    "gguf_file",
    "autogptq",
    "gptqmodel",
)


def _parse_model_args(text):
    """The ``key=value`` pairs of a model_args string, as lm-eval parses them.

    Split at the commas outside quotes and brackets (a JSON value may hold
    commas), each key and value stripped of the spaces around it (the user may
    write ``"pretrained=x, peft=y"``).

    >>> _parse_model_args('pretrained=x, peft=y,kw={"a": 1, "b": 2}')
    {'pretrained': 'x', 'peft': 'y', 'kw': '{"a": 1, "b": 2}'}
    """
    parts, current, depth, quote = [], [], 0, None
    for char in text:
        if quote is not None:
            quote = None if char == quote else quote
        elif char in "\"'":
            quote = char
        elif char in "[{(":
            depth += 1
        elif char in "]})":
            depth = max(depth - 1, 0)
        elif char == "," and depth == 0:
            parts.append("".join(current))
            current = []
            continue
        current.append(char)
    parts.append("".join(current))
    pairs = {}
    for part in parts:
        key, equals, value = part.partition("=")
        if equals and key.strip():
            pairs[key.strip()] = value.strip()
    return pairs


def _arg_text(value):
    """A model argument as text to compare: ``True`` and ``"true"`` are one."""
    text = str(value).strip()
    return text.lower() if text.lower() in ("true", "false") else text


def _read_results(file):
    """``(model name or None, model-changing args)`` of a results file; the
    args a tuple of ``(key, text)`` pairs."""
    try:
        with open(file, encoding="utf-8-sig") as handle:
            results = json.load(handle)
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"results file {str(file)!r} is not valid JSON: {exc.msg} (line "
            f"{exc.lineno}, column {exc.colno}). Pass model= to name the model "
            "without it."
        ) from None
    except RecursionError:
        # Python's json parses nested arrays and objects by recursion.
        raise ValueError(
            f"results file {str(file)!r} could not be read as JSON: it is nested "
            "too deeply for Python's json parser. Pass model= to name the model "
            "without it."
        ) from None
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"results file {str(file)!r} is not UTF-8 text: {exc}."
        ) from None
    except ValueError as exc:  # e.g. an int past Python's digit limit
        raise ValueError(
            f"results file {str(file)!r} could not be read as JSON: {exc}. Pass "
            "model= to name the model without it."
        ) from None
    if not isinstance(results, dict):
        raise ValueError(
            f"results file {str(file)!r} holds a JSON {type(results).__name__}, "
            "not the object lm-eval writes (with 'model_name' and 'config'). "
            "Pass model= to name the model without it."
        )
    config = results.get("config")
    model_args = config.get("model_args") if isinstance(config, dict) else None
    if isinstance(model_args, str):
        pairs = _parse_model_args(model_args)
    elif isinstance(model_args, dict):
        pairs = model_args
    else:
        pairs = {}
    args = tuple((k, _arg_text(pairs[k])) for k in _MODEL_CHANGING_ARGS if k in pairs)
    name = results.get("model_name")
    if isinstance(name, str) and name:
        return name, args
    for key in _MODEL_ARG_KEYS:
        if isinstance(pairs.get(key), str) and pairs[key]:
            return pairs[key], args
    return None, args


def _sanitize_model_name(name):
    """The folder name lm-eval gives a model's output (its
    ``utils.sanitize_model_name``).

    >>> _sanitize_model_name("org/m:v1")
    'org__m__v1'
    """
    return re.sub(r"[\"<>:/|\\?*\[\]]+", "__", name)


def _results_files(folder):
    return sorted(f for f in folder.iterdir() if _RESULTS.match(f.name) and f.is_file())


def _model_run(samples_file, date):
    """``(model name, model-changing args)`` of the run that wrote a samples
    file, from the results file of its run, or else from those beside it
    where the folder is named after their model."""
    results = _results_files(samples_file.parent)
    same_run = [f for f in results if _RESULTS.match(f.name)["date"] == date]
    runs = {_read_results(f) for f in (same_run or results)}
    runs = {run for run in runs if run[0] is not None}
    names = {name for name, _ in runs}
    if len(names) != 1:
        found = "no model name" if not names else f"model names {sorted(names)}"
        raise ValueError(
            f"cannot tell which model wrote {str(samples_file)!r}: the results "
            f"file(s) in its folder (results_<date>.json or <stem>_<date>.json) "
            f"give {found}. Pass model= to name it."
        )
    # abspath, not resolve: a folder linked into the output folder keeps the
    # name it is read under; "." becomes the name of the current folder.
    folder = Path(os.path.abspath(samples_file.parent)).name
    name = next(iter(names))
    if not same_run and folder != _sanitize_model_name(name):
        # Only --output_path OUT writes OUT/<sanitized model name>/, one
        # model's runs; --output_path OUT/<stem>.json and the Python API
        # share a folder between models, where another run's results file
        # says nothing of the model of this one.
        raise ValueError(
            f"cannot tell which model wrote {str(samples_file)!r}: no results "
            f"file in its folder has its date {date}, and the folder {folder!r} "
            f"is not the one lm-eval names after {name!r}, the model of the "
            f"results files there ({_sanitize_model_name(name)!r}), so it may "
            "hold other models' runs (as --output_path OUT/<name>.json and the "
            "Python API write them). Pass the file alone with model= to name it."
        )
    if len(runs) > 1:
        # No results file of its own date, and runs of that name that are
        # different models (another revision, dtype, adapter) beside it.
        raise ValueError(
            f"cannot tell which run of {next(iter(names))!r} wrote "
            f"{str(samples_file)!r}: no results file has its date {date}, and "
            "those in its folder give that name to runs with different "
            f"model_args ({_describe_args(sorted(runs))}). Pass the file alone "
            "with model= to name it."
        )
    return runs.pop()


def _describe_args(runs, where=None):
    """The model_args that differ between ``runs`` (name, args), each with
    its value in every run (``where`` names the runs)."""
    dicts = [dict(args) for _, args in runs]
    keys = [k for k in _MODEL_CHANGING_ARGS if len({d.get(k) for d in dicts}) > 1]
    shown = []
    for key in keys:
        values = [d.get(key, "(not given)") for d in dicts]
        if where is not None:
            values = [f"{v!r} in {w}" for v, w in zip(values, where, strict=True)]
        else:
            values = [repr(v) for v in values]
        shown.append(f"{key}: {', '.join(values)}")
    return "; ".join(shown)


def _check_one_model_per_name(names, runs, dates):
    """Refuse runs of one model name that are different models: their scores
    would be averaged as one model's."""
    for name in dict.fromkeys(names):
        kinds = {}
        for run_name, run, date in zip(names, runs, dates, strict=True):
            if run_name == name:
                kinds.setdefault(run, set()).add(date)
        if len(kinds) > 1:
            where = [f"run(s) {sorted(d)}" for d in kinds.values()]
            raise ValueError(
                f"the results files give the model name {name!r} to runs whose "
                "model_args differ in what changes the model ("
                f"{_describe_args(list(kinds), where)}): they are different "
                "models, and reading them under one name would average their "
                "scores. Read each run's samples files on their own with model= "
                f"a name of its own (e.g. model='{name}@<revision>') and "
                "concatenate the tables."
            )


def _check_one_model_for_model(model, folder, dates):
    """Refuse ``model=`` for the samples of several runs in one folder unless
    their results files tell they are one model's: ``--output_path
    OUT/<stem>.json`` and the Python API (with dict model_args) write
    several models' runs into one folder."""
    results = _results_files(folder)
    found, unknown = {}, []
    for date in dates:
        runs = set()
        for file in results:
            if _RESULTS.match(file.name)["date"] == date:
                try:
                    runs.add(_read_results(file))
                except ValueError:
                    runs.add((None, ()))
        if len(runs) != 1 or next(iter(runs))[0] is None:
            unknown.append(date)
        else:
            found.setdefault(runs.pop(), []).append(date)
    if not unknown and len(found) <= 1:
        return
    names = {name for name, _ in found}
    if len(names) > 1:
        shown = "; ".join(f"{name!r} for {ds}" for (name, _), ds in found.items())
        why = f"their results files name different models ({shown})"
    elif len(found) > 1:
        where = [f"run(s) {ds}" for ds in found.values()]
        why = (
            f"their results files give {next(iter(names))!r} different "
            f"model_args ({_describe_args(list(found), where)})"
        )
    else:
        why = f"no results file of the run(s) {unknown} tells which model wrote them"
    raise ValueError(
        f"model={model!r} would name the samples of {len(dates)} runs in "
        f"{str(folder)!r} as one model, but {why}; lm-eval writes several "
        "models' runs into one folder with --output_path OUT/<name>.json or "
        "from the Python API. Leave model=None to read each run's model from "
        "its results file, or pass one run's samples files at a time with "
        "model= and concatenate the tables."
    )


def _query_texts(records, query_text, task, file):
    texts = []
    for record in records:
        doc = record.get("doc")
        if callable(query_text):
            try:
                text = query_text(doc)
            except Exception as error:
                # Bare, a KeyError('ctx') would not say which document of
                # which file it failed on, nor what the doc holds.
                keys = sorted(doc) if isinstance(doc, dict) else []
                raise ValueError(
                    f"query_text={query_text!r} raised {type(error).__name__}: "
                    f"{error} on the doc of {task}/{record.get('doc_id')} in "
                    f"{str(file)!r}; its keys are {keys}."
                ) from error
        elif isinstance(doc, dict) and query_text in doc:
            text = doc[query_text]
        else:
            keys = sorted(doc) if isinstance(doc, dict) else []
            raise ValueError(
                f"query_text={query_text!r} is not a key of the doc of "
                f"{task}/{record.get('doc_id')} in {str(file)!r}; its keys are "
                f"{keys}."
            )
        if not isinstance(text, str) or not text:
            raise TypeError(
                f"query_text={query_text!r} gave {text!r} for "
                f"{task}/{record.get('doc_id')}; it must give a non-empty str."
            )
        texts.append(text)
    return texts


def _prompt(record):
    """The prompt lm-eval sent for ``record`` (its first request's context)."""
    arguments = record.get("arguments")
    if isinstance(arguments, dict):  # {"gen_args_0": {"arg_0": context, ...}, ...}
        first = arguments.get("gen_args_0")
        return first.get("arg_0") if isinstance(first, dict) else None
    if isinstance(arguments, list) and arguments:  # [[context, ...], ...]
        first = arguments[0]
        return first[0] if isinstance(first, list) and first else None
    return None


def _prompt_texts(records, task, file):
    texts = []
    for record in records:
        text = _prompt(record)
        if not isinstance(text, str) or not text:
            doc = record.get("doc")
            keys = sorted(doc) if isinstance(doc, dict) else []
            raise ValueError(
                f"{task}/{record.get('doc_id')} in {str(file)!r} has no prompt text "
                "in its 'arguments' (lm-eval writes it with --log_samples). Pass "
                f"query_text= a key of its doc (its keys are {keys}) or a "
                "callable to read the text from the doc, or query_text=None for "
                "ids '<task>/<doc_id>' with an encoder that knows them."
            )
        texts.append(text)
    return texts


def _check_same_prompts(ids, queries, tasks, path, query_text="prompt"):
    """Refuse documents whose text differs between runs: a prompt (chat
    templates, another number of few-shot examples) or, with ``query_text``
    a doc key or a callable, the doc itself (a revised dataset); they would
    become unrelated queries.
    Refuse one text in documents of several tasks: a query has one task.
    Warn where documents of one task share one text: they become one query,
    their scores averaged."""
    texts, docs = {}, {}
    for doc, text in zip(ids, queries, strict=True):
        texts.setdefault(doc, set()).add(text)
        docs.setdefault(text, set()).add(doc)
    differing = [doc for doc, seen in texts.items() if len(seen) > 1]
    if differing and isinstance(query_text, str) and query_text == "prompt":
        raise ValueError(
            f"{len(differing)} document(s) of {str(path)!r} were sent to models with "
            f"different prompts (e.g. {_preview(differing)}), as happens with "
            "chat templates or another number of few-shot examples; the same "
            "question would become unrelated queries. Pass query_text= a key of "
            "the doc (e.g. 'question') or a callable, or query_text=None for ids."
        )
    if differing:
        # The prompt is not read: the doc itself differs between the runs, and
        # another doc key would differ in the same way.
        first, second = sorted(texts[differing[0]])[:2]
        source = (
            f"the doc key {query_text!r}"
            if isinstance(query_text, str)
            else f"query_text={query_text!r}"
        )
        raise ValueError(
            f"{len(differing)} document(s) of {str(path)!r} have a different "
            f"text in different runs, read from {source} (e.g. "
            f"{differing[0]!r}: {_clip(first)!r} and {_clip(second)!r}), as "
            "happens when the dataset changed between the runs (another "
            "revision of it); the same question would become unrelated "
            "queries. Pass query_text=None for ids '<task>/<doc_id>', or "
            "query_text= a callable that gives each document one text (e.g. "
            "one that normalises the text), or read the runs apart."
        )
    shared = {text: sorted(seen) for text, seen in docs.items() if len(seen) > 1}
    task_of = dict(zip(ids, tasks, strict=True))
    across = {
        text: sorted({task_of[doc] for doc in seen})
        for text, seen in shared.items()
        if len({task_of[doc] for doc in seen}) > 1
    }
    if across:
        text, its_tasks = next(iter(across.items()))
        raise ValueError(
            f"{len(across)} text(s) read from {str(path)!r} belong to documents "
            f"of several tasks (e.g. {_clip(text)!r} in the tasks {its_tasks}, "
            f"documents {_preview(shared[text])}); a query belongs to one task, "
            "so they cannot become one query. Pass query_text=None for one "
            "query per '<task>/<doc_id>', or query_text= a callable that makes "
            "the text unique per task (e.g. the question with a field of the "
            "doc that differs between the tasks)."
        )
    if shared:
        first = next(iter(shared.values()))
        warn_external(
            f"{len(shared)} text(s) read from {str(path)!r} belong to several "
            f"documents of one task (e.g. {_preview(first)}): each becomes one "
            "query, the documents' scores averaged (a zero-shot prompt without "
            "the answer choices, or a question asked twice). Pass query_text= a "
            "callable that tells them apart (e.g. the question with its "
            "choices), or query_text=None for one query per '<task>/<doc_id>'.",
            UserWarning,
        )


def _samples_files(folder, shown):
    """The samples files in ``folder`` and the folders below it, sorted.

    Folders that are symlinks are followed (Path.rglob skips them, and a
    model's folder linked into the output folder would be left out without
    a word); a folder reached twice (a second link to it, or a link back up
    the tree) is read once, under its first path in sorted order. Hidden
    folders (``.ipynb_checkpoints``, where JupyterLab keeps a copy of a file
    opened in it) are skipped. A folder that cannot be listed is an error
    naming it and ``path=shown`` (the path as the user wrote it).
    """

    def refuse(exc):
        # os.walk skips a folder it cannot list: a model's folder would be
        # left out of the table without a word.
        error = type(exc)(
            f"path={shown!r}: the folder {exc.filename!r} cannot be read "
            f"({exc.strerror}), and its samples files would be left out; make it "
            "readable, or pass a path that leaves it out."
        )
        error.errno = exc.errno  # kept for callers that map errors to exit codes
        raise error from None

    files, seen = [], set()
    for parent, folders, names in os.walk(folder, onerror=refuse, followlinks=True):
        real = os.path.realpath(parent)
        if real in seen:
            folders.clear()
            continue
        seen.add(real)
        # Sorted: which of two paths to one folder is read does not depend
        # on the order the file system lists them in.
        folders[:] = sorted(f for f in folders if not f.startswith("."))
        files += [
            Path(parent, name)
            for name in names
            if fnmatch.fnmatchcase(name, "samples_*.jsonl")
            or fnmatch.fnmatchcase(name, "samples_*.jsonl.gz")
        ]
    return sorted(files)


def _read_records(file):
    """The records of a samples file, each a dict with a ``doc_id``, and the
    line of each."""
    records, lines = [], []
    where = f"samples file {str(file)!r}"
    hint = "lm-eval writes one JSON object per document."
    for number, record in json_lines(file, where, hint):
        # The doc_id tells documents apart: without it every record would be
        # the query "<task>/None" and their scores averaged.
        doc_id = record.get("doc_id")
        if doc_id is None:
            raise ValueError(
                f"{where}, line {number}, has no 'doc_id'; lm-eval writes one per "
                "document, and it is what tells documents apart."
            )
        if not isinstance(doc_id, (int, str)) or isinstance(doc_id, bool):
            raise ValueError(
                f"{where}, line {number}, has doc_id={doc_id!r}; a doc_id is an "
                "int (as lm-eval writes it) or a str."
            )
        records.append(record)
        lines.append(number)
    return records, lines


def _check_one_record_per_doc(records, lines, file):
    """Refuse a doc_id repeated in one file's records of one filter: its
    records would become one document's repeated rows, their scores averaged."""
    first = {}
    for record, line in zip(records, lines, strict=True):
        doc_id = record["doc_id"]
        if doc_id not in first:
            first[doc_id] = line
            continue
        if "filter" in record:
            which = f"for the filter {record['filter']!r}"
            cause = (
                "A file that joins the records of two runs looks so; read each "
                "run's file on its own"
            )
        else:
            # lm-eval's EvaluationTracker, in the versions before records
            # named their filter (EleutherAI/lm-evaluation-harness#2025),
            # logged one record per document and filter: which of the two is
            # which filter is not in the file.
            which = "in records without a 'filter' key"
            cause = (
                "lm-eval versions that log one record per document and filter "
                "without the filter's name write a task with several filters "
                "(gsm8k's strict-match and flexible-extract) so, and which "
                "record is which filter cannot be told. Re-run the task with a "
                "newer lm-eval, whose records have 'filter' and 'metrics' keys, "
                "or add each record's 'filter' key yourself"
            )
        raise ValueError(
            f"samples file {str(file)!r} holds doc_id={doc_id!r} twice {which} "
            f"(lines {first[doc_id]} and {line}); each document has one record per "
            f"filter, and reading both would average their scores. {cause}."
        )


def _documents(indices, records, lines, task):
    """The documents at ``indices`` and their lines, for a message."""
    docs = _preview(f"{task}/{records[i]['doc_id']}" for i in indices)
    return f"the document(s) {docs} (line(s) {_preview(lines[i] for i in indices)})"


def _read_samples(file, task, metric, filter_name):
    records, lines = _read_records(file)
    filters = list(dict.fromkeys(r.get("filter", "none") for r in records))
    if len(filters) > 1:
        if filter_name is None:
            raise ValueError(
                f"samples file {str(file)!r} holds the filters {filters}; choose "
                "one with filter_name=."
            )
        if filter_name not in filters:
            raise ValueError(
                f"filter_name={filter_name!r} is not in samples file "
                f"{str(file)!r}; its filters are {filters}."
            )
        kept = [
            i for i, r in enumerate(records) if r.get("filter", "none") == filter_name
        ]
        records = [records[i] for i in kept]
        lines = [lines[i] for i in kept]
    _check_one_record_per_doc(records, lines, file)

    missing = [r for r in records if metric not in r]
    if missing:
        # Without a "metrics" list (older lm-eval), the numeric keys but
        # lm-eval's own bookkeeping (doc_id, *_hash).
        available = missing[0].get("metrics") or sorted(
            k
            for k, v in missing[0].items()
            if isinstance(v, numbers.Real)
            and k not in _RECORD_KEYS
            and not k.endswith("_hash")
        )
        raise ValueError(
            f"metric={metric!r} is missing from {len(missing)} of {len(records)} "
            f"records of {str(file)!r} (task {task!r}); its metrics are "
            f"{available}."
        )
    # lm-eval lists each record's metrics in "metrics"; another numeric key
    # (doc_id, a doc field) would be read as scores.
    unlisted = [
        r
        for r in records
        if isinstance(r.get("metrics"), list) and metric not in r["metrics"]
    ]
    if unlisted:
        raise ValueError(
            f"metric={metric!r} is not a metric of {len(unlisted)} of "
            f"{len(records)} records of {str(file)!r} (task {task!r}): their "
            f"'metrics' list {unlisted[0]['metrics']}."
        )
    values = [r[metric] for r in records]
    bad = [v for v in values if not isinstance(v, numbers.Real)]
    if bad:
        raise TypeError(
            f"metric={metric!r} has {len(bad)} non-numeric value(s) in "
            f"{str(file)!r} (e.g. {_preview(bad[:5])})."
        )
    # One by one: a JSON integer beyond float64's range made the whole
    # conversion fail with a bare OverflowError; it is infinite here, and
    # reported as outside [0, 1].
    score = np.fromiter(map(_as_float, values), np.float64, len(values))
    unscored = np.flatnonzero(np.isnan(score))
    if len(unscored):
        # A NaN (JSON NaN) is a score that was not computed, not a value
        # outside [0, 1]: another metric would not help.
        raise ValueError(
            f"metric={metric!r} has {len(unscored)} missing value(s) (NaN) in "
            f"{str(file)!r}, for {_documents(unscored, records, lines, task)}; "
            "every document needs a score in [0, 1]: drop those lines or score "
            "them again."
        )
    outside = np.flatnonzero(~((score >= 0.0) & (score <= 1.0)))
    if len(outside):
        others = [m for m in ("acc", "exact_match") if m != metric]
        raise ValueError(
            f"metric={metric!r} has {len(outside)} value(s) outside [0, 1] in "
            f"{str(file)!r} (e.g. {_preview(score[outside][:5].tolist())}), for "
            f"{_documents(outside, records, lines, task)}; every document needs "
            "a score in [0, 1]: fix or drop those lines, or choose a metric "
            f"scored in [0, 1] such as {' or '.join(map(repr, others))}."
        )
    return records, score, filters


def from_lm_eval(
    path, *, model=None, metric="acc", query_text="prompt", filter_name=None
):
    """Read lm-evaluation-harness per-sample logs as an evaluation table.

    ``lm_eval --output_path OUT --log_samples`` writes, per model, a folder
    ``OUT/<sanitized model name>/`` holding ``results_<date>.json`` and one
    ``samples_<task>_<date>.jsonl`` per task; each line of a samples file is
    one document with its ``doc_id``, ``doc``, ``filter`` and the value of
    every metric as a top-level key (``"acc": 1.0``). Each line becomes one
    evaluation:

    - ``model``: ``model`` if given, else the ``model_name`` (or the
      ``pretrained=``/``model=`` entry of ``config.model_args``) of the
      results file of the same run in the same folder (``results_<date>.json``,
      or ``<stem>_<date>.json`` as ``--output_path OUT/<stem>.json`` writes
      it). A run without one takes the model of the results files beside it
      only in a folder named after that model as lm-eval names it
      (``OUT/<sanitized model name>/``, which holds one model's runs);
      elsewhere it is an error;
    - ``query``: the prompt the harness sent to the model (the context of the
      document's first request, from the record's ``arguments``), a text taken
      from ``doc`` with ``query_text``, or the id ``"<task>/<doc_id>"``
      (``query_text=None``);
    - ``score``: the value of ``metric``, which must lie in [0, 1];
    - ``task``: the task name from the file name.

    Several runs of the same model and task give repeated (model, query) rows;
    estimators average them (see :func:`~locus_sklearn.check_evals`). Runs
    of one model name are one model only if their ``config.model_args``
    agree on what changes the model: the name keys (``pretrained``,
    ``peft``, ``delta``, ``model``, ``path``, ``engine``), ``revision``,
    ``subfolder``, ``lora_local_path``, ``dtype``, ``load_in_8bit``,
    ``load_in_4bit``, ``quantization``, ``gguf_file``, ``autogptq`` and
    ``gptqmodel`` (an argument given in one run and not in the other
    differs); otherwise, e.g. two checkpoints (``revision=``) of one model,
    it is an error: read each run on its own with ``model=``. Arguments on
    how the model is run (``batch_size``, ``device``, ``max_length``, ...)
    may differ.

    Parameters
    ----------
    path : str or os.PathLike
        An output folder (searched recursively for ``samples_*.jsonl`` and
        gzipped ``samples_*.jsonl.gz``, following folders that are symlinks
        and skipping hidden ones such as ``.ipynb_checkpoints``) or one
        samples file; ``~`` is expanded to the home folder.
    model : str, default=None
        Model name for every file, when the results files do not give it
        (e.g. a samples file on its own). Only for samples files of one
        folder, and of one run unless the results files of their runs give
        one model (same name and model-changing arguments): lm-eval writes
        several models' runs into one folder with ``--output_path
        OUT/<stem>.json`` or from the Python API.
    metric : str, default="acc"
        The per-sample metric to use as the score (``"acc"``,
        ``"acc_norm"``, ``"exact_match"``, ...). Booleans count as 0/1.
    query_text : "prompt", str, callable or None, default="prompt"
        Where the query text comes from. ``"prompt"``: the prompt the model
        was given, so that a text encoder embeds what the model saw (a doc key
        named ``"prompt"`` is read with a callable,
        ``lambda doc: doc["prompt"]``). Another str takes the text from that
        key of each ``doc`` (e.g. ``"question"``); a callable maps a ``doc``
        dict to the text. None gives ids ``"<task>/<doc_id>"``, for an
        encoder that knows them (a mapping of precomputed encodings): a text
        encoder would embed the id itself.

        Prompts must be the same for every model: runs with chat templates or
        different few-shot settings raise an error, and then a doc key is the
        way to go. A doc's text must be the same in every run too: a dataset
        revised between runs raises an error (then pass None, or a callable
        that gives each doc one text). In few-shot runs the prompt starts
        with the examples, and encoders truncate long texts
        (all-MiniLM-L6-v2 at 256 tokens), so a doc key holding the question
        alone is better there too.
    filter_name : str, default=None
        Filter to keep in files that hold several (e.g. ``"strict-match"``
        for gsm8k); required there. Files with a single filter use it, but
        a ``filter_name`` that no record read has is an error.

    Returns
    -------
    evals : DataFrame of shape (n_samples, 4)
        Columns ``model``, ``query``, ``score`` (float) and ``task``; files in
        (model, task, date) order, documents in file order.

    Warns
    -----
    UserWarning
        If one text belongs to several documents of one task (a zero-shot
        prompt without the answer choices): they become one query, their
        scores averaged.

    Raises
    ------
    ValueError
        If a samples or results file is not valid JSON, a line of a samples
        file is not a JSON object, names a key twice or has no ``doc_id``
        (the message names the file and the line), a ``doc_id`` occurs twice
        in one file's records of one filter (as lm-eval versions that logged
        several filters without their names wrote them; the message names the
        lines), ``metric`` names a key lm-eval writes beside the metrics
        (``doc_id``, ``target``, ``*_hash``) or is not in a record's
        ``metrics`` list, or a value of it is missing (NaN) or lies outside
        [0, 1] (the message names the documents and lines), a folder holds a
        samples file and its gzipped copy,
        ``filter_name`` is no record's filter, the model of a file cannot be
        told, runs of one model name differ in model-changing arguments,
        ``model=`` would name the runs of several models, one document gets
        different prompts (or doc texts) in different runs, one text belongs
        to documents of several tasks (a query has one task: pass
        ``query_text=None``, or a callable that makes the text unique per
        task), or a ``query_text`` callable raises (the message names the
        file, task, ``doc_id`` and the doc's keys).
    TypeError
        If ``filter_name`` is not a str or None, or a metric value or a
        ``query_text`` result is of the wrong kind.
    FileNotFoundError
        If ``path`` does not exist.
    PermissionError
        If ``path``, or a folder below it, cannot be read (the message names
        the folder): no folder's samples files are left out without a word.
    OSError
        If ``path`` is a named pipe, a device or a socket, or a loop of
        symbolic links, or a folder below it cannot be listed.

    Examples
    --------
    >>> import json, os, tempfile
    >>> from locus_sklearn.datasets import from_lm_eval
    >>> folder = tempfile.mkdtemp()
    >>> lines = [{"doc_id": i, "doc": {"question": q}, "filter": "none",
    ...           "arguments": {"gen_args_0": {"arg_0": f"Q: {q}\\nA:",
    ...                                        "arg_1": " 4"}},
    ...           "metrics": ["acc"], "acc": acc}
    ...          for i, (q, acc) in enumerate([("2+2?", 1.0), ("3+3?", 0.0)])]
    >>> file = os.path.join(folder, "samples_arith_2024-06-01T10-00-00.5.jsonl")
    >>> with open(file, "w") as handle:
    ...     _ = handle.write("\\n".join(json.dumps(line) for line in lines))
    >>> from_lm_eval(file, model="my-model")["query"].tolist()
    ['Q: 2+2?\\nA:', 'Q: 3+3?\\nA:']
    >>> from_lm_eval(file, model="my-model", query_text=None)
          model    query  score   task
    0  my-model  arith/0    1.0  arith
    1  my-model  arith/1    0.0  arith
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or os.PathLike; got {path!r}.")
    if model is not None and (not isinstance(model, str) or not model):
        raise TypeError(f"model must be a non-empty str or None; got {model!r}.")
    if not isinstance(metric, str):
        raise TypeError(f"metric must be a str; got {metric!r}.")
    if metric in _RECORD_KEYS or metric.endswith("_hash"):
        # Records without a "metrics" list (older lm-eval) hold these beside
        # the metrics; doc_id would be read as scores.
        raise ValueError(
            f"metric={metric!r} is a key lm-eval writes beside the metrics of a "
            "samples record, not a metric; choose one such as 'acc' or "
            "'exact_match'."
        )
    if filter_name is not None and not isinstance(filter_name, str):
        raise TypeError(f"filter_name must be a str or None; got {filter_name!r}.")
    if query_text is not None and not (
        callable(query_text) or isinstance(query_text, str)
    ):
        raise TypeError(
            f"query_text must be None, a str key of doc or a callable; got "
            f"{query_text!r}."
        )
    path = Path(path)
    # "~/out" is read as the shell reads it; messages keep the user's text.
    shown = str(path)
    path = path.expanduser()
    mode = _file_mode(path, "path", shown)
    if mode is not None and stat.S_ISDIR(mode):
        files = _samples_files(path, shown)
        if not files:
            raise ValueError(
                f"path={shown!r} holds no samples_*.jsonl (or .jsonl.gz) file "
                "outside hidden folders; run lm_eval with --log_samples."
            )
    elif mode is not None:
        _check_regular(mode, "path", shown)
        files = [path]
    else:
        raise FileNotFoundError(f"path={shown!r} does not exist.")

    runs = []
    for file in files:
        match = _SAMPLES.match(file.name)
        if match is None:
            raise ValueError(
                f"cannot read the task from {str(file)!r}: lm-eval names samples "
                "files samples_<task>_<YYYY-MM-DDTHH-MM-SS.ffffff>.jsonl (read "
                "gzipped too, as .jsonl.gz)."
            )
        runs.append((file, match["task"], match["date"]))
    paths = {file for file, _, _ in runs}
    for file in sorted(paths):
        if file.suffix == ".gz" and file.with_suffix("") in paths:
            # gzip -k keeps the file it compresses: one run read twice.
            raise ValueError(
                f"path={shown!r} holds both {str(file.with_suffix(''))!r} and its "
                f"gzipped copy {file.name!r}; reading both would count each of "
                "their documents twice. Remove one of them."
            )
    if model is not None:
        folders = sorted({str(file.parent) for file, _, _ in runs})
        if len(folders) > 1:
            raise ValueError(
                f"model={model!r} would name the samples of {len(folders)} folders "
                f"({_preview(folders)}), which lm-eval writes per model; pass one "
                "folder, or leave model=None to read each name from its results "
                "file."
            )
        dates = sorted({date for _, _, date in runs})
        if len(dates) > 1:
            _check_one_model_for_model(model, runs[0][0].parent, dates)
        names = [model] * len(runs)
    else:
        # One read of a run's results files, not one per task of the run (a
        # run's first samples file is where an unreadable run is reported).
        run_of = {}
        for file, _, date in runs:
            if (file.parent, date) not in run_of:
                run_of[file.parent, date] = _model_run(file, date)
        models = [run_of[file.parent, date] for file, _, date in runs]
        names = [name for name, _ in models]
        _check_one_model_per_name(names, models, [date for _, _, date in runs])

    order = sorted(range(len(runs)), key=lambda i: (names[i], runs[i][1], runs[i][2]))
    columns = {"model": [], "query": [], "score": [], "task": []}
    ids, filters = [], {}
    for i in order:
        file, task, _ = runs[i]
        records, score, seen = _read_samples(file, task, metric, filter_name)
        filters.update(dict.fromkeys(seen))
        doc_ids = [f"{task}/{r.get('doc_id')}" for r in records]
        if query_text is None:
            queries = doc_ids
        elif isinstance(query_text, str) and query_text == "prompt":
            queries = _prompt_texts(records, task, file)
        else:
            queries = _query_texts(records, query_text, task, file)
        ids += doc_ids
        columns["model"] += [names[i]] * len(score)
        columns["query"] += queries
        columns["score"] += score.tolist()
        columns["task"] += [task] * len(score)
    if filter_name is not None and filter_name not in filters:
        # A file with one filter is read whatever filter_name says; a name
        # that no file holds is a typo or the wrong folder.
        raise ValueError(
            f"filter_name={filter_name!r} is not a filter of any record read from "
            f"{shown!r}; their filters are {list(filters)}."
        )
    if query_text is not None:
        _check_same_prompts(ids, columns["query"], columns["task"], shown, query_text)
    evals = _long_frame(columns)
    check_evals(evals, name=f"evals read from {shown!r}")
    return evals
