"""Benchmark data loaders: long-format evals + one encoding per query id.

Every loader returns a :class:`BenchData`: the evaluations in the package's long
format (``model``, ``query``, ``score``, ``task``) where ``query`` is a stable id
(``"mmlu-pro/<question_id>"``, ``"routerbench/<query_index>"``,
``"synthetic/<q>"``), and ``encodings``, a dict id -> float32 vector that is
passed as ``encoder=`` to every router so that all routers see identical query
features. Text encodings (MiniLM by default, or any sentence-transformers
directory) are computed once through :class:`locus_sklearn.QueryEncoder` with a
joblib cache under ``benchmarks/.cache/``.
"""

import ast
import os
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED_DATA = os.path.abspath(os.path.join(HERE, "..", "..", "shared", "data"))
CACHE_DIR = os.path.join(HERE, ".cache")

#: Proprietary API models dropped for the "open-weights" MMLU-Pro pool.
MMLU_CLOSED = (
    "gemini-1.5-flash-002",
    "gemini-1.5-pro-002",
    "gemini-3.1-pro-preview",
    "gpt-4o",
    "deepseek-chat",
)

#: The folder of ``SHARED_DATA`` each shared data set is read from.
SHARED_FOLDERS = {
    "mmlu-open": "mmlu_pro_32models",
    "mmlu-all": "mmlu_pro_32models",
    "routerbench": "routerbench_routerdc_subset",
    "bfcl": "bfcl_71models",
    "shaberi": "shaberi_169models",
}


@dataclass
class BenchData:
    """One benchmark data set.

    Attributes
    ----------
    name : str
    evals : DataFrame
        Long format: model, query (an id), score, task.
    encodings : dict of str to ndarray
        Query id -> encoding, for every query of ``evals``.
    split : dict of str to str or None
        Query id -> "train"/"test" when the data has its own split, else None
        (the benchmark then makes seeded 80/20 query splits).
    query_costs : DataFrame or None
        Per-query realised cost, indexed by query id, one column per model
        (NaN where unknown).
    model_costs : dict of str to float or None
        Mean cost per query of each model over the training split (the cost
        the routers are given).
    description : str
    """

    name: str
    evals: pd.DataFrame
    encodings: dict
    split: dict | None = None
    query_costs: pd.DataFrame | None = None
    model_costs: dict | None = None
    description: str = ""
    info: dict = field(default_factory=dict)


def _missing(name, root):
    """Why data set ``name`` cannot be read from ``root``, or None."""
    path = os.path.join(root, "correctness.npz")
    if os.path.exists(path):
        return None
    return f"data set {name!r} reads {path}, which does not exist"


def _stop(problems):
    raise SystemExit(
        "; ".join(problems) + ". The shared data (../shared/data next to the "
        "checkout) is on development machines only; the synthetic data and the "
        "package's built-in data (locus_sklearn.datasets) run anywhere."
    )


def require_shared(names):
    """Exit with a message naming each data set of ``names`` that is read from
    ``SHARED_DATA`` and is missing there (before any work: a missing pool must
    not end a run after the others were fitted); other names pass.

    >>> require_shared(["synthetic"])
    """
    problems = [
        _missing(name, os.path.join(SHARED_DATA, SHARED_FOLDERS[name]))
        for name in names
        if name in SHARED_FOLDERS
    ]
    problems = [p for p in problems if p]
    if problems:
        _stop(problems)


def _require(name, root):
    """Exit with a message if data set ``name`` is not under ``root``."""
    problem = _missing(name, root)
    if problem:
        _stop([problem])


def encode_texts(texts, encoder=None, cache_dir=CACHE_DIR, chunk=4096):
    """Encode query texts with QueryEncoder, cached on disk (joblib.Memory).

    Encoded in chunks of ``chunk`` texts, each cached separately, so an
    interrupted first run keeps the chunks it finished.
    """
    from locus_sklearn import QueryEncoder

    os.makedirs(cache_dir, exist_ok=True)
    qe = QueryEncoder(encoder, memory=cache_dir, device="cpu", batch_size=64).fit()
    texts = list(texts)
    parts = [qe.transform(texts[i : i + chunk]) for i in range(0, len(texts), chunk)]
    return np.concatenate(parts)


def _encodings_for(ids, texts, encoder):
    X = encode_texts(texts, encoder)
    return dict(zip(ids, X.astype(np.float32), strict=True))


def load_mmlu_pro(open_only=True, encoder=None, root=None):
    """MMLU-Pro, 32 (or 27 open-weights) models x 12,032 questions."""
    name = "mmlu-open" if open_only else "mmlu-all"
    root = root or os.path.join(SHARED_DATA, SHARED_FOLDERS[name])
    _require(name, root)
    data = np.load(os.path.join(root, "correctness.npz"), allow_pickle=False)
    queries = pd.read_csv(os.path.join(root, "queries.csv.gz"), keep_default_na=False)
    Y, models = data["Y"], data["models"].astype(str)
    ids = np.array([f"mmlu-pro/{q}" for q in data["question_id"]], dtype=object)
    keep = np.ones(len(models), dtype=bool)
    if open_only:
        keep = ~np.isin(models, MMLU_CLOSED)
    Y, models = Y[:, keep], models[keep]
    qi, mi = np.nonzero(np.isfinite(Y))
    evals = pd.DataFrame(
        {
            "model": models[mi].astype(object),
            "query": ids[qi],
            "score": Y[qi, mi].astype(np.float64),
            "task": data["benchmark"].astype(str)[qi].astype(object),
        }
    )
    assert (queries["question_id"].to_numpy() == data["question_id"]).all()
    encodings = _encodings_for(ids, queries["prompt"].tolist(), encoder)
    return BenchData(
        name=name,
        evals=evals,
        encodings=encodings,
        description=(
            f"MMLU-Pro (TIGER-Lab model outputs), {len(models)} "
            f"{'open-weights ' if open_only else ''}models x {len(ids)} questions; "
            "no official split (seeded 80/20 query splits)"
        ),
    )


def routerbench_question(prompt):
    """The question a RouterBench prompt asks, without its few-shot exemplars.

    The prompts are stored as Python list literals of strings. ARC-Challenge
    and Winogrande prompts open with the same five answered exemplars, which
    fill MiniLM's 256-token window by themselves: encoded whole, all the
    queries of a benchmark get one encoding. The question is the last
    blank-line-separated block.
    """
    parts = ast.literal_eval(prompt)
    if not (isinstance(parts, list) and all(isinstance(s, str) for s in parts)):
        raise ValueError(f"not a list of strings: {prompt[:80]!r}")
    return "\n\n".join(parts).strip().split("\n\n")[-1]


def load_routerbench(encoder=None, root=None):
    """RouterBench 0-shot subset (RouterDC): 11 models, own train/test split, costs."""
    root = root or os.path.join(SHARED_DATA, SHARED_FOLDERS["routerbench"])
    _require("routerbench", root)
    data = np.load(os.path.join(root, "correctness.npz"), allow_pickle=False)
    queries = pd.read_csv(os.path.join(root, "queries.csv.gz"), keep_default_na=False)
    Y, cost, models = data["Y"], data["cost"], data["models"].astype(str)
    ids = np.array([f"routerbench/{i}" for i in range(len(Y))], dtype=object)
    split = data["split"].astype(str)
    qi, mi = np.nonzero(Y >= 0)
    evals = pd.DataFrame(
        {
            "model": models[mi].astype(object),
            "query": ids[qi],
            "score": Y[qi, mi].astype(np.float64),
            "task": data["benchmark"].astype(str)[qi].astype(object),
        }
    )
    query_costs = pd.DataFrame(cost.astype(np.float64), index=ids, columns=models)
    train = split == "train"
    model_costs = {m: float(np.nanmean(cost[train, j])) for j, m in enumerate(models)}
    questions = [routerbench_question(p) for p in queries["prompt"]]
    encodings = _encodings_for(ids, questions, encoder)
    return BenchData(
        name="routerbench",
        evals=evals,
        encodings=encodings,
        split=dict(zip(ids, split, strict=True)),
        query_costs=query_costs,
        model_costs=model_costs,
        description=(
            "RouterBench 0-shot subset (RouterDC: ARC-Challenge, MBPP, Winogrande), "
            f"{len(models)} models x {len(ids)} queries, RouterDC train/test split, "
            "per-query USD costs"
        ),
    )


def load_synthetic(n_models=112, n_queries=3000, random_state=0, **kwargs):
    """A dense synthetic pool from make_model_pool (112 models as in the paper)."""
    from locus_sklearn.datasets import make_model_pool

    pool = make_model_pool(
        n_models=n_models,
        n_queries=n_queries,
        evals_per_model="all",
        random_state=random_state,
        **kwargs,
    )
    evals = pool.evals.copy()
    evals["query"] = "synthetic/" + evals["query"].astype(str)
    encodings = {f"synthetic/{q}": v for q, v in pool.encodings.items()}
    return BenchData(
        name="synthetic",
        evals=evals,
        encodings=encodings,
        description=(
            f"synthetic make_model_pool: {n_models} models x {n_queries} queries, "
            f"{pool.tasks.size} tasks, dense (SYNTHETIC, not real LLMs)"
        ),
    )


def load_path(path, encoder=None):
    """Any long-format evals file (csv/parquet/jsonl) through load_evals."""
    from locus_sklearn.datasets import load_evals

    evals = load_evals(path)
    texts = pd.unique(evals["query"].astype(str))
    ids = np.array([f"evals/{i}" for i in range(len(texts))], dtype=object)
    lookup = dict(zip(texts, ids, strict=True))
    evals = evals.assign(query=evals["query"].astype(str).map(lookup))
    if "task" not in evals:
        evals["task"] = "all"
    evals = evals[["model", "query", "score", "task"]]
    encodings = _encodings_for(ids, texts, encoder)
    base = os.path.splitext(os.path.basename(str(path)))[0].replace(".", "_")
    return BenchData(
        name=f"evals-{base}",
        evals=evals,
        encodings=encodings,
        description=f"long-format evals from {path}",
    )


def load(name, *, encoder=None, evals_path=None, tiny=False):
    """Load a data set by benchmark name."""
    if name == "mmlu-open":
        return load_mmlu_pro(True, encoder)
    if name == "mmlu-all":
        return load_mmlu_pro(False, encoder)
    if name == "routerbench":
        return load_routerbench(encoder)
    if name == "synthetic":
        if tiny:
            return load_synthetic(n_models=12, n_queries=300, n_tasks=4, n_families=3)
        return load_synthetic()
    if name == "bfcl":
        return load_bfcl(encoder)
    if name == "shaberi":
        return load_shaberi(encoder)
    if name == "evals":
        return load_path(evals_path, encoder)
    raise ValueError(f"unknown data set {name!r}")


# ----------------------------------------------------------------- BFCL
def _bfcl_text(text, functions):
    """Question plus the signatures of the functions shown to the model.

    The BFCL category is often visible only in the function specs (an
    irrelevant function, several functions, Java / JavaScript signatures), so
    the encoded text is the question followed by ``name(param, ...)`` for each
    function (names and parameter names from the ``functions`` JSON).
    """
    import json

    try:
        specs = json.loads(functions) if functions else []
    except (TypeError, json.JSONDecodeError):
        specs = []
    if isinstance(specs, dict):
        specs = [specs]
    sigs = []
    for spec in specs:
        if not isinstance(spec, dict):
            continue
        params = spec.get("parameters") or {}
        props = params.get("properties") if isinstance(params, dict) else None
        names = list(props) if isinstance(props, dict) else []
        sigs.append(f"{spec.get('name', '?')}({', '.join(names)})")
    return f"{text}\nFunctions: {'; '.join(sigs)}" if sigs else str(text)


#: BFCL twins: a prompt-mode column and its native function-calling variants.
def bfcl_twin_groups(models):
    """Groups of BFCL columns of one LLM: ``X``, ``X-FC``, ``X-FC-Any``,
    ``X-FC-Auto`` (the ``-FC...`` suffix stripped); groups of >= 2 only."""
    import re

    groups = {}
    for m in models:
        groups.setdefault(re.sub(r"-FC(-Any|-Auto)?$", "", m), []).append(m)
    return {k: sorted(v) for k, v in groups.items() if len(v) >= 2}


def _dense_pool(root, prefix):
    """A shared pool's queries x models score matrix as a long evals table.

    Returns (evals, queries frame, model names, query ids ``prefix/qid``);
    missing (NaN) scores are left out.
    """
    data = np.load(os.path.join(root, "correctness.npz"), allow_pickle=False)
    queries = pd.read_csv(os.path.join(root, "queries.csv.gz"), keep_default_na=False)
    Y, models = data["Y"], data["models"].astype(str)
    assert (queries["qid"].astype(str).to_numpy() == data["qid"].astype(str)).all()
    ids = np.array([f"{prefix}/{q}" for q in data["qid"].astype(str)], dtype=object)
    qi, mi = np.nonzero(np.isfinite(Y))
    evals = pd.DataFrame(
        {
            "model": models[mi].astype(object),
            "query": ids[qi],
            "score": Y[qi, mi].astype(np.float64),
            "task": data["task"].astype(str)[qi].astype(object),
        }
    )
    return evals, queries, models, ids


def load_bfcl(encoder=None, root=None):
    """BFCL v2 (non-live): 71 models x 1,700 function-calling queries, 12 tasks."""
    root = root or os.path.join(SHARED_DATA, SHARED_FOLDERS["bfcl"])
    _require("bfcl", root)
    evals, queries, models, ids = _dense_pool(root, "bfcl")
    texts = [
        _bfcl_text(t, f)
        for t, f in zip(queries["text"], queries["functions"], strict=True)
    ]
    return BenchData(
        name="bfcl",
        evals=evals,
        encodings=_encodings_for(ids, texts, encoder),
        description=(
            f"BFCL v2 non-live, {len(models)} models x {len(ids)} queries, 12 "
            "categories; question + function signatures encoded; seeded 80/20 "
            "query splits"
        ),
        info={"groups": bfcl_twin_groups(models)},
    )


# -------------------------------------------------------------- Shaberi
_SHABERI_VARIANT = (
    r"(-nothink|-FP8(-block)?|-W8A8-INT8(-smooth|-spin)?|-W4A16-gs128"
    r"|-W8A8-ascend|[.-]run2|-default-prompt|-noprompt)$"
)


def shaberi_base_name(model):
    """The base a Shaberi column serves, by a fixed rule on its name.

    Lower-cased, the ``org__`` prefix and a leading run number (``011-``)
    removed, then variant suffixes stripped repeatedly: thinking switched off
    (``-nothink``), quantised weights (``-FP8``, ``-FP8-block``,
    ``-W8A8-INT8[-smooth|-spin]``, ``-W4A16-gs128``, ``-W8A8-ascend``), a
    re-run (``-run2``, ``.run2``) and prompt variants (``-default-prompt``,
    ``-noprompt``). Columns with one base are the same weights (or a
    quantisation of them) served differently: siblings. Fine-tunes and merges
    are *not* grouped (their names share a base but not the weights).
    """
    import re

    name = model.split("__", 1)[-1]
    name = re.sub(r"^\d{3}-", "", name)
    while True:
        stripped = re.sub(_SHABERI_VARIANT, "", name, flags=re.IGNORECASE)
        if stripped == name:
            return name.lower()
        name = stripped


def shaberi_sibling_groups(models):
    """Groups (>= 2 columns) of Shaberi models with one :func:`shaberi_base_name`."""
    groups = {}
    for m in models:
        groups.setdefault(shaberi_base_name(m), []).append(m)
    return {k: sorted(v) for k, v in groups.items() if len(v) >= 2}


def load_shaberi(encoder=None, root=None):
    """Shaberi: 169 models x 320 Japanese chat prompts, graded 0-1 judge scores."""
    root = root or os.path.join(SHARED_DATA, SHARED_FOLDERS["shaberi"])
    _require("shaberi", root)
    evals, queries, models, ids = _dense_pool(root, "shaberi")
    return BenchData(
        name="shaberi",
        evals=evals,
        encodings=_encodings_for(ids, queries["text"].tolist(), encoder),
        description=(
            f"Shaberi (GPT-4.1 judge), {len(models)} models x {len(ids)} Japanese "
            "prompts, graded scores in [0, 1]; seeded 80/20 query splits"
        ),
        info={"groups": shaberi_sibling_groups(models)},
    )
