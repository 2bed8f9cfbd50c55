"""Read lm-evaluation-harness ``--log_samples`` output as an evaluation table."""

import json
import numbers
import os
import re
from pathlib import Path

import numpy as np

from .._evals import _as_float, _preview, check_evals
from .._warnings import warn_external
from ._loaders import _long_frame, json_lines

__all__ = ["from_lm_eval"]

# lm-eval names files after the run's ``datetime.now().isoformat()`` with ":" -> "-".
_DATE = r"\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}(?:\.\d+)?"
_SAMPLES = re.compile(rf"^samples_(?P<task>.+)_(?P<date>{_DATE})\.jsonl$")
_RESULTS = re.compile(rf"^results_(?P<date>{_DATE})\.json$")
# The keys lm-eval itself reads a model name from, in its order of precedence.
_MODEL_ARG_KEYS = ("peft", "delta", "pretrained", "model", "path", "engine")


def _name_from_results(file):
    """Model name recorded in a results_<date>.json file, or None."""
    try:
        with open(file, encoding="utf-8-sig") as handle:
            results = json.load(handle)
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"results file {str(file)!r} is not valid JSON: {exc.msg} (line "
            f"{exc.lineno}, column {exc.colno}). Pass model= to name the model "
            "without it."
        ) from None
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"results file {str(file)!r} is not UTF-8 text: {exc}."
        ) from None
    if not isinstance(results, dict):
        raise ValueError(
            f"results file {str(file)!r} holds a JSON {type(results).__name__}, "
            "not the object lm-eval writes (with 'model_name' and 'config'). "
            "Pass model= to name the model without it."
        )
    name = results.get("model_name")
    if isinstance(name, str) and name:
        return name
    config = results.get("config")
    model_args = config.get("model_args") if isinstance(config, dict) else None
    if isinstance(model_args, str):
        pairs = dict(
            part.split("=", 1) for part in model_args.split(",") if "=" in part
        )
    elif isinstance(model_args, dict):
        pairs = model_args
    else:
        return None
    for key in _MODEL_ARG_KEYS:
        if isinstance(pairs.get(key), str) and pairs[key]:
            return pairs[key]
    return None


def _model_name(samples_file, date):
    """The model of one samples file, from the results file(s) beside it."""
    folder = samples_file.parent
    results = sorted(
        f for f in folder.iterdir() if _RESULTS.match(f.name) and f.is_file()
    )
    same_run = [f for f in results if _RESULTS.match(f.name)["date"] == date]
    names = {_name_from_results(f) for f in (same_run or results)}
    names.discard(None)
    if len(names) != 1:
        found = "no model name" if not names else f"model names {sorted(names)}"
        raise ValueError(
            f"cannot tell which model wrote {str(samples_file)!r}: the "
            f"results_*.json file(s) in its folder give {found}. Pass model= "
            "to name it."
        )
    return names.pop()


def _query_texts(records, query_text, task, file):
    texts = []
    for record in records:
        doc = record.get("doc")
        if callable(query_text):
            text = query_text(doc)
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


def _check_same_prompts(ids, queries, path):
    """Refuse documents whose prompt differs between runs (chat templates,
    another number of few-shot examples): they would become unrelated queries.
    Warn where documents share one text: they become one query, their scores
    averaged."""
    texts, docs = {}, {}
    for doc, text in zip(ids, queries, strict=True):
        texts.setdefault(doc, set()).add(text)
        docs.setdefault(text, set()).add(doc)
    shared = [sorted(seen) for seen in docs.values() if len(seen) > 1]
    if shared:
        warn_external(
            f"{len(shared)} text(s) read from {str(path)!r} belong to several "
            f"documents (e.g. {_preview(shared[0])}): each becomes one query, the "
            "documents' scores averaged (a zero-shot prompt without the answer "
            "choices, or one question in two tasks). Pass query_text= a callable "
            "that tells them apart (e.g. the question with its choices), or "
            "query_text=None for one query per '<task>/<doc_id>'.",
            UserWarning,
        )
    differing = [doc for doc, seen in texts.items() if len(seen) > 1]
    if differing:
        raise ValueError(
            f"{len(differing)} document(s) of {str(path)!r} were sent to models with "
            f"different prompts (e.g. {_preview(differing)}), as happens with "
            "chat templates or another number of few-shot examples; the same "
            "question would become unrelated queries. Pass query_text= a key of "
            "the doc (e.g. 'question') or a callable, or query_text=None for ids."
        )


def _read_records(file):
    """The records of a samples file, each a dict with a ``doc_id``."""
    records = []
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
    return records


def _read_samples(file, task, metric, filter_name):
    records = _read_records(file)
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
        records = [r for r in records if r.get("filter", "none") == filter_name]

    missing = [r for r in records if metric not in r]
    if missing:
        available = missing[0].get("metrics") or sorted(
            k for k, v in missing[0].items() if isinstance(v, numbers.Real)
        )
        raise ValueError(
            f"metric={metric!r} is missing from {len(missing)} of {len(records)} "
            f"records of {str(file)!r} (task {task!r}); its metrics are "
            f"{available}."
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
    outside = ~((score >= 0.0) & (score <= 1.0))
    if outside.any():
        raise ValueError(
            f"metric={metric!r} has {int(outside.sum())} value(s) outside [0, 1] in "
            f"{str(file)!r} (e.g. {_preview(score[outside][:5].tolist())}); choose "
            "a metric scored in [0, 1] such as 'acc' or 'exact_match'."
        )
    return records, score


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
      results file of the same run in the same folder;
    - ``query``: the prompt the harness sent to the model (the context of the
      document's first request, from the record's ``arguments``), a text taken
      from ``doc`` with ``query_text``, or the id ``"<task>/<doc_id>"``
      (``query_text=None``);
    - ``score``: the value of ``metric``, which must lie in [0, 1];
    - ``task``: the task name from the file name.

    Several runs of the same model and task give repeated (model, query) rows;
    estimators average them (see :func:`~locus_sklearn.check_evals`).

    Parameters
    ----------
    path : str or os.PathLike
        An output folder (searched recursively for ``samples_*.jsonl``) or
        one samples file.
    model : str, default=None
        Model name for every file, when the results files do not give it
        (e.g. a samples file on its own). Only for samples files from one
        folder.
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
        way to go. In few-shot runs the prompt starts with the examples, and
        encoders truncate long texts (all-MiniLM-L6-v2 at 256 tokens), so a
        doc key holding the question alone is better there too.
    filter_name : str, default=None
        Filter to keep in files that hold several (e.g. ``"strict-match"``
        for gsm8k); required there. Files with a single filter use it.

    Returns
    -------
    evals : DataFrame of shape (n_samples, 4)
        Columns ``model``, ``query``, ``score`` (float) and ``task``; files in
        (model, task, date) order, documents in file order.

    Warns
    -----
    UserWarning
        If one text belongs to several documents (a zero-shot prompt without
        the answer choices, one question in two tasks): they become one
        query, their scores averaged.

    Raises
    ------
    ValueError
        If a samples or results file is not valid JSON, a line of a samples
        file is not a JSON object, names a key twice or has no ``doc_id``
        (the message names the file and the line), a metric value lies
        outside [0, 1], or the model of a file cannot be told.
    TypeError
        If a metric value or a ``query_text`` result is of the wrong kind.

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
    if query_text is not None and not (
        callable(query_text) or isinstance(query_text, str)
    ):
        raise TypeError(
            f"query_text must be None, a str key of doc or a callable; got "
            f"{query_text!r}."
        )
    path = Path(path)
    if path.is_dir():
        files = sorted(path.rglob("samples_*.jsonl"))
        if not files:
            raise ValueError(
                f"path={str(path)!r} holds no samples_*.jsonl file; run lm_eval "
                "with --log_samples."
            )
    elif path.is_file():
        files = [path]
    else:
        raise FileNotFoundError(f"path={str(path)!r} does not exist.")

    runs = []
    for file in files:
        match = _SAMPLES.match(file.name)
        if match is None:
            raise ValueError(
                f"cannot read the task from {str(file)!r}: lm-eval names samples "
                "files samples_<task>_<YYYY-MM-DDTHH-MM-SS.ffffff>.jsonl."
            )
        runs.append((file, match["task"], match["date"]))
    if model is not None:
        folders = sorted({str(file.parent) for file, _, _ in runs})
        if len(folders) > 1:
            raise ValueError(
                f"model={model!r} would name the samples of {len(folders)} folders "
                f"({_preview(folders)}), which lm-eval writes per model; pass one "
                "folder, or leave model=None to read each name from its results "
                "file."
            )
        names = [model] * len(runs)
    else:
        names = [_model_name(file, date) for file, _, date in runs]

    order = sorted(range(len(runs)), key=lambda i: (names[i], runs[i][1], runs[i][2]))
    columns = {"model": [], "query": [], "score": [], "task": []}
    ids = []
    for i in order:
        file, task, _ = runs[i]
        records, score = _read_samples(file, task, metric, filter_name)
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
    if query_text is not None:
        _check_same_prompts(ids, columns["query"], path)
    evals = _long_frame(columns)
    check_evals(evals, name=f"evals read from {str(path)!r}")
    return evals
