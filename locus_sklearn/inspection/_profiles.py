"""Hypothetical models: embed a task-accuracy profile, find the real models near it.

A hypothetical evaluation set has the per-task accuracies of a wanted profile
(paper, appendix E.1); embedded like a real model's evaluations, it lands near
the real models with that profile, which :func:`nearest_models` retrieves.
"""

from collections.abc import Mapping
from numbers import Integral

import numpy as np
import pandas as pd
from sklearn.utils import Bunch, check_random_state

from .._evals import (
    _check_string_column,
    _is_real_number,
    _preview,
    _sorted_codes,
    check_evals,
)
from .._params import validate_random_state
from ._common import as_pool, check_metric, pairwise
from ._fingerprint import _as_embedder, _recording, _reissue
from ._neighbors import _check_k

__all__ = ["embed_profile", "profile_recall_at_k", "task_profiles"]


def task_profiles(evals):
    """Mean score of each model on each task.

    Parameters
    ----------
    evals : DataFrame or mapping of columns
        Scored evaluations with a ``task`` column.

    Returns
    -------
    profiles : DataFrame of shape (n_models, n_tasks)
        Indexed by model (sorted), one column per task (sorted), both as
        object-dtype indexes of str; NaN where a model has no evaluation on
        a task. A profile is the mean of the scores as given, in float64
        (7 correct of 20 reads 0.35, the mean of 0.1 and 0.2
        0.15000000000000002); scores given in float32 are their float32
        values (a graded 0.7 in float32 reads 0.699999988).

    Examples
    --------
    >>> from locus_sklearn.inspection import task_profiles
    >>> evals = {"model": ["a", "a", "a", "b"], "query": ["q1", "q2", "q3", "q1"],
    ...          "score": [1, 0, 1, 0], "task": ["math", "math", "code", "math"]}
    >>> task_profiles(evals)
    task  code  math
    a      1.0   0.5
    b      NaN   0.0
    """
    table = _check_tasks(evals)
    tasks, task_of_query = _sorted_codes(table.query_task)
    # Grouped by codes, labelled after: pandas would infer its Arrow-backed
    # str dtype for the group keys, which refuses a lone surrogate (as
    # bytes.decode(errors="surrogateescape") gives) that check_evals accepts.
    frame = pd.DataFrame(
        {
            "model": table.model_index,
            "task": task_of_query[table.query_index],
            "score": table.score.astype(np.float64),
        }
    )
    profiles = frame.pivot_table(index="model", columns="task", values="score")
    profiles = profiles.reindex(
        index=np.arange(table.n_models), columns=np.arange(len(tasks))
    )
    profiles.index = pd.Index(table.models, dtype=object)
    profiles.columns = pd.Index(tasks, dtype=object, name="task")
    return profiles


def _check_n_evals(n_evals):
    if isinstance(n_evals, bool) or not isinstance(n_evals, Integral) or n_evals < 1:
        raise ValueError(f"n_evals={n_evals!r} should be an int >= 1.")


def _check_tasks(evals, name="evals"):
    table = check_evals(evals, name=name)
    if table.query_task is None:
        raise ValueError(
            f"{name} needs a 'task' column (the task or benchmark of each query) "
            "to build task profiles."
        )
    return table


def _queries_by_task(queries_by_task):
    """Mapping task -> ndarray of distinct queries; a query belongs to one task.

    Tasks and queries are non-empty strings, as in an ``evals`` table: a
    missing one (None, NaN) would otherwise be dropped by a groupby, or fail
    in a sort with no parameter named, and a number could be confused with
    the string it prints as.
    """
    is_table = isinstance(queries_by_task, pd.DataFrame) or (
        isinstance(queries_by_task, Mapping)
        and {"query", "task"} <= set(queries_by_task)
    )
    if isinstance(queries_by_task, pd.DataFrame):
        absent = [c for c in ("query", "task") if c not in queries_by_task.columns]
        if absent:
            # Otherwise a bare KeyError from pandas, naming neither the
            # parameter nor the columns the table has.
            raise ValueError(
                f"queries_by_task is a DataFrame without the column(s) {absent} "
                f"(its columns: {_preview(queries_by_task.columns)}); pass a table "
                "with 'query' and 'task' columns (e.g. an evals table, its task "
                "column named 'task') or a mapping task -> sequence of queries."
            )
    if is_table:
        query = _check_string_column(
            list(queries_by_task["query"]), "queries_by_task", "query"
        )
        task = _check_string_column(
            list(queries_by_task["task"]), "queries_by_task", "task"
        )
        # Grouped by codes (sorted tasks): a pandas groupby would infer the
        # Arrow-backed str dtype for the tasks, which refuses lone surrogates.
        tasks, codes = _sorted_codes(task)
        order = np.argsort(codes, kind="stable")
        start = np.searchsorted(codes[order], np.arange(len(tasks) + 1))
        queries = {
            name: np.unique(query[order[start[i] : start[i + 1]]])
            for i, name in enumerate(tasks)
        }
    elif not isinstance(queries_by_task, Mapping):
        raise TypeError(
            "queries_by_task must be a mapping of task -> queries or a table with "
            f"'query' and 'task' columns; got {type(queries_by_task).__name__}."
        )
    else:
        queries = {}
        for task, listed in queries_by_task.items():
            if not isinstance(task, str) or not task:
                raise TypeError(
                    "queries_by_task must be keyed by task names (non-empty str); "
                    f"got the key {task!r} ({type(task).__name__})."
                )
            if isinstance(listed, str):  # list("q12") would be its characters
                raise TypeError(
                    f"queries_by_task[{task!r}] must be a sequence of queries; got "
                    f"the string {listed!r}. Wrap a single query in a list: "
                    f"[{listed!r}]."
                )
            try:
                listed = list(listed)
            except TypeError:
                raise TypeError(
                    f"queries_by_task[{task!r}] must be a sequence of queries (str); "
                    f"got {type(listed).__name__} {listed!r}."
                ) from None
            # A Series keeps nested sequences as entries (np.asarray would
            # stack them into a 2-D array), so each is reported as a non-str.
            listed = pd.Series(listed, dtype=object).to_numpy()
            _check_string_column(listed, "queries_by_task", task)
            queries[task] = np.unique(listed)
    # A query under two tasks would be drawn, and scored, once per task: a
    # model with two scores on one query, which the embedder refuses or
    # averages, and the profile's accuracies would no longer be its own.
    tasks_of = {}
    for task, listed in queries.items():
        for query in listed.tolist():
            tasks_of.setdefault(query, []).append(task)
    shared = {q: t for q, t in tasks_of.items() if len(t) > 1}
    if shared:
        query, tasks = next(iter(shared.items()))
        raise ValueError(
            f"queries_by_task gives {len(shared)} quer(y/ies) more than one task, "
            f"e.g. {query!r} under tasks {tasks}; each query belongs to one task."
        )
    return queries


def embed_profile(
    embedder,
    task_accuracies,
    queries_by_task,
    *,
    n_evals=256,
    scores="bernoulli",
    random_state=None,
):
    """Embed hypothetical models with given per-task accuracies.

    For each profile, ``n_evals`` queries are drawn without replacement from
    the queries of the profile's tasks (so tasks weigh by their number of
    queries), each gets a synthetic score at its task's accuracy, and the
    resulting evaluation set is embedded (paper, appendix E.1). Find the real
    models nearest to it with :func:`nearest_models`.

    Parameters
    ----------
    embedder : fitted LocusEmbedder or fitted router
        Anything with ``transform(evals)`` returning one embedding per model of
        ``evals`` in sorted model-name order; a router's ``embedder_`` is used.
    task_accuracies : mapping, Series or DataFrame of shape (n_profiles, n_tasks)
        Accuracy per task, a number (not a bool) in [0, 1], tasks named by
        str, each once: one profile (a mapping or Series, giving every task
        it names an accuracy), or one profile per row (a DataFrame such as
        :func:`task_profiles` returns; NaN leaves a task out of that profile).
    queries_by_task : mapping of str to sequence of str, or DataFrame
        The queries of each task, or a table with ``query`` and ``task``
        columns (e.g. an ``evals`` table); tasks and queries are non-empty
        str. A task given an accuracy must have at least one query.
    n_evals : int, default=256
        Evaluations per profile; at most the number of queries of its tasks,
        all of which are used when there are fewer.
    scores : {"bernoulli", "exact"}, default="bernoulli"
        "bernoulli" draws each score as a 0/1 with the task's accuracy (the
        paper's protocol, accuracies matched in expectation); "exact" scores
        ``round(accuracy * n)`` of a task's ``n`` drawn queries as correct
        (Python's ``round``: a half goes to the even count). A product within
        float32 rounding of a half (relative 2**-22) counts as that half:
        means of scores given in float32 carry it, so that a mean of 0.35
        that reads 0.3499999940 still gives 4 of 10 queries, as 0.35 does.
    random_state : int, RandomState instance or None, default=None
        Seeds the queries and scores.

    Returns
    -------
    embeddings : ndarray of shape (n_profiles, d)
        One row per profile (one row for a single profile), in input order;
        ``ValueError`` if the embedder returns another number of rows.

    Warns
    -----
    FewEvaluationsWarning
        Once, if a profile is embedded from fewer evaluations than the
        embedder's ``enc_size[0]`` (the smallest set it was trained to embed
        from): the message names ``n_evals``, or the profiles whose tasks
        have fewer queries than that.

    Examples
    --------
    A stand-in embedder whose embedding is the per-task accuracy; a fitted
    :class:`~locus_sklearn.LocusEmbedder` is used the same way.

    >>> from locus_sklearn.inspection import embed_profile
    >>> class TaskAccuracy:
    ...     def transform(self, evals):
    ...         by_task = evals.groupby(["model", "task"])["score"].mean()
    ...         return by_task.unstack().to_numpy()
    >>> queries = {"math": [f"m{i}" for i in range(50)],
    ...            "code": [f"c{i}" for i in range(50)]}
    >>> embed_profile(TaskAccuracy(), {"math": 0.9, "code": 0.2}, queries,
    ...               n_evals=100, scores="exact")
    array([[0.2, 0.9]])
    """
    embedder = _as_embedder(embedder)
    _check_n_evals(n_evals)
    validate_random_state(random_state, caller="embed_profile")
    if scores not in ("bernoulli", "exact"):
        raise ValueError(f"scores must be 'bernoulli' or 'exact'; got {scores!r}.")
    profiles = _task_accuracies(task_accuracies)
    values = profiles.to_numpy(dtype=np.float64)
    given = ~np.isnan(values)
    tasks = profiles.columns.tolist()
    outside = given & ~((values >= 0) & (values <= 1))
    if outside.any():
        p, t = np.argwhere(outside)[0]
        where = (
            f" of profile {_label(profiles.index[p])!r}"
            if isinstance(task_accuracies, pd.DataFrame)
            else ""
        )
        raise ValueError(
            f"task_accuracies must lie in [0, 1]; got {float(values[p, t])!r} for "
            f"task {tasks[t]!r}{where} ({int(outside.sum())} value(s) outside)."
        )
    queries = _queries_by_task(queries_by_task)
    # Only a task some profile gives an accuracy needs queries: a DataFrame
    # column of NaN (a task_profiles row of a model never scored on it) draws
    # none, as a task listed with no queries does.
    unknown = [
        t
        for t, ok in zip(tasks, given.any(axis=0), strict=True)
        if ok and t not in queries
    ]
    if unknown:
        raise ValueError(
            f"task_accuracies has task(s) {_preview(unknown)} with no queries in "
            f"queries_by_task (tasks: {_preview(sorted(queries))})."
        )
    # A task listed with no queries draws no evaluation: a profile of only
    # such tasks would reach the embedder with no rows and get no embedding,
    # shifting every later profile up a row.
    for t, task in enumerate(tasks):
        if given[:, t].any() and len(queries[task]) == 0:
            where = (
                f" in profile(s) {_preview(profiles.index[given[:, t]])}"
                if isinstance(task_accuracies, pd.DataFrame)
                else ""
            )
            raise ValueError(
                f"queries_by_task lists no queries for task {task!r}, yet "
                f"task_accuracies gives it an accuracy{where}; list the task's "
                "queries, or leave the task out of the profiles."
            )
    rng = check_random_state(random_state)
    width = len(str(len(profiles)))
    frames, drawn = [], []
    for p, row in enumerate(values):
        # In sorted order, whatever order the mapping's keys or the
        # DataFrame's columns come in: the queries and scores drawn depend on
        # it, and the same profile must give the same embedding for one
        # random_state (task_profiles' columns are sorted).
        used = sorted(t for t, ok in zip(tasks, given[p], strict=True) if ok)
        if not used:
            # Only a DataFrame row can get here: a single profile naming no
            # task, or giving one NaN, was refused by _task_accuracies.
            raise ValueError(
                f"Profile {_label(profiles.index[p])!r} of task_accuracies (a "
                "DataFrame row) gives no task accuracy (all NaN); give each "
                "profile at least one."
            )
        pool = np.concatenate([queries[t] for t in used])
        task_of = np.repeat(used, [len(queries[t]) for t in used])
        picked = rng.choice(len(pool), min(n_evals, len(pool)), replace=False)
        drawn.append(len(picked))
        accuracy = dict(zip(tasks, row, strict=True))
        score = np.empty(len(picked))
        for t in used:
            at = np.flatnonzero(task_of[picked] == t)
            if scores == "bernoulli":
                score[at] = rng.random_sample(len(at)) < accuracy[t]
            else:
                correct = np.zeros(len(at))
                correct[: _exact_count(accuracy[t], len(at))] = 1.0
                score[at] = rng.permutation(correct)
        frames.append(
            pd.DataFrame(
                {
                    # Zero-padded, so that sorted names keep the input order.
                    "model": f"profile{p:0{width}d}",
                    # Object columns, not pandas' str (lone surrogates).
                    "query": pd.Series(pool[picked], dtype=object),
                    "score": score,
                    "task": pd.Series(task_of[picked], dtype=object),
                }
            )
        )
    with _recording() as caught:
        embeddings = np.asarray(
            embedder.transform(pd.concat(frames, ignore_index=True))
        )
    labels = profiles.index if isinstance(task_accuracies, pd.DataFrame) else None
    _reissue(caught, _few_evaluations(embedder, n_evals, np.array(drawn), labels))
    # Rows are matched to profiles by position: a missing or extra row would
    # silently give each later profile another's embedding.
    if embeddings.ndim != 2 or len(embeddings) != len(profiles):
        raise ValueError(
            f"embedder.transform returned an array of shape {embeddings.shape} for "
            f"the evaluations of {len(profiles)} profile(s); it must return one "
            "embedding (row) per model of the evaluations, in sorted model order."
        )
    return embeddings


def _few_evaluations(embedder, n_evals, drawn, labels):
    """embed_profile's FewEvaluationsWarning, in terms of its arguments.

    The embedder's own names the internal models ('profile0', ...) and asks
    for more scored queries per model; but a profile is embedded from
    ``n_evals`` evaluations (``drawn``), or from all the queries of its tasks
    when they are fewer. ``labels``: the profiles' (None for a single one).
    """
    low = getattr(embedder, "enc_size", None)
    low = None if low is None else int(low[0])
    if low is not None and (drawn < low).any():
        few = drawn < low
        smallest = f"the embedder's enc_size[0]={low}"
    else:
        # Which profiles the embedder found short is unknown (it has no
        # enc_size, or its warning had another cause); those embedded from
        # the fewest evaluations are among them.
        few = drawn == drawn.min()
        smallest, low = "the embedder's smallest training set", None
    short = few & (drawn < n_evals)  # limited by the queries of their tasks
    causes, advice = [], []
    if (few & ~short).any():
        causes.append(f"n_evals={n_evals} is fewer evaluations than {smallest}")
        advice.append(
            "raise n_evals" + (f" to at least {low}" if low is not None else "")
        )
    if short.any():
        whose = (
            "the profile's tasks have"
            if labels is None
            else f"the tasks of {int(short.sum())} profile(s) "
            f"{_preview(labels[short])} have"
        )
        than = "n_evals"
        if not causes:  # the message's start
            whose = whose[0].upper() + whose[1:]
            than = f"n_evals={n_evals} and {smallest}"
        causes.append(
            f"{whose} fewer queries than {than} "
            f"({_preview(drawn[short].tolist())}), all of which are drawn"
        )
        advice.append("give those tasks more queries")
    return (
        f"{', and '.join(causes)}: a profile is embedded from that many "
        "evaluations, so its embedding is less reliable (as a real model's from "
        "as few would be). To embed profiles as the embedder was trained, "
        f"{' or '.join(advice)}."
    )


def _exact_count(accuracy, n):
    """``round(accuracy * n)``, a product within float32 rounding of a half
    counted as that half.

    Scores given in float32 (as parquet files often hold them) carry a
    relative error of up to 2**-24 into a task profile's mean (0.35 reads
    0.3499999940): 0.35 * 10 is 3.5, which
    rounds to 4, but 0.3499999940 * 10 would round to 3. Four times that
    error is the tolerance; a half then rounds to even, as round(3.5) does.

    >>> _exact_count(0.35, 10), _exact_count(float(np.float32(0.35)), 10)
    (4, 4)
    >>> _exact_count(0.25, 10), _exact_count(0.26, 10)  # 2.5 -> 2, 2.6 -> 3
    (2, 3)
    """
    product = accuracy * n
    half = np.floor(product) + 0.5
    if abs(product - half) <= 2.0**-22 * product:
        product = half
    return int(round(product))


def _label(value):
    """A profile's label as the Python value it holds (0, not np.int64(0))."""
    return value.item() if isinstance(value, np.generic) else value


def _task_accuracies(task_accuracies):
    """The profiles as a float DataFrame (n_profiles, n_tasks), NaN where a
    DataFrame leaves a task out; task names (the columns) are checked to be
    distinct strings and accuracies to be real numbers (range checked later).
    """
    if isinstance(task_accuracies, pd.DataFrame):
        frame = task_accuracies
        if not len(frame):
            raise ValueError(
                "task_accuracies is a DataFrame with no rows; give one profile "
                "(per-task accuracies) per row, at least one."
            )
        if not len(frame.columns):
            raise ValueError(
                f"task_accuracies is a DataFrame with {len(frame)} row(s) but no "
                "columns: it names no task. Give one column per task, one "
                "profile per row."
            )
        kind = "DataFrame"
    elif isinstance(task_accuracies, Mapping | pd.Series):
        kind = "mapping" if isinstance(task_accuracies, Mapping) else "Series"
        items = list(task_accuracies.items())
        if not items:
            raise ValueError(
                f"task_accuracies is an empty {kind}: it names no task. Give one "
                "profile as task -> accuracy, with at least one task."
            )
        # Task names as an object index: pandas' str dtype refuses a lone
        # surrogate, which check_evals accepts in a task.
        frame = pd.DataFrame(
            [[v for _, v in items]],
            columns=pd.Index([k for k, _ in items], dtype=object),
            dtype=object,
        )
    else:
        raise TypeError(
            "task_accuracies must be one profile (a mapping task -> accuracy, or "
            "a Series indexed by task) or a DataFrame with one profile per row "
            f"and one column per task; got {type(task_accuracies).__name__} "
            f"{task_accuracies!r}, which names no task."
        )
    holder = {"DataFrame": "columns", "mapping": "keys", "Series": "index"}[kind]
    names = frame.columns.tolist()
    odd = [n for n in names if not isinstance(n, str) or not n]
    if odd:
        raise TypeError(
            f"task_accuracies must name tasks by non-empty str (its {holder}), as "
            f"queries_by_task does; got {_preview(odd)}."
        )
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        # Two columns of one task would pool its queries twice, one accuracy
        # silently winning over the other.
        raise ValueError(
            f"task_accuracies has task(s) {_preview(repeated)} more than once (its "
            f"{holder}); give each task one accuracy per profile."
        )
    cells = frame.to_numpy(dtype=object)
    # Only a DataFrame leaves a task out of a profile with NaN; in a single
    # profile a missing value would drop the task without a word.
    missing = pd.isna(cells) if kind == "DataFrame" else np.zeros(cells.shape, bool)
    bad = ~missing & ~np.vectorize(_is_real_number, otypes=[bool])(cells)
    if kind != "DataFrame":
        bad |= pd.isna(cells)
    if bad.any():
        p, t = np.argwhere(bad)[0]
        value = cells[p, t]
        if kind != "DataFrame" and pd.isna(value):
            raise ValueError(
                f"task_accuracies gives task {names[t]!r} the missing value "
                f"{value!r} ({int(bad.sum())} value(s) not numbers); a single "
                "profile cannot leave a task out that way: drop the task from it, "
                "or pass a DataFrame, where NaN leaves a task out of a profile."
            )
        where = f" of profile {_label(frame.index[p])!r}" if kind == "DataFrame" else ""
        raise TypeError(
            f"task_accuracies must hold accuracies as numbers in [0, 1] (not bool "
            f"or str); got {value!r} ({type(value).__name__}) for task "
            f"{names[t]!r}{where} ({int(bad.sum())} value(s) not numbers)."
        )
    return pd.DataFrame(
        np.where(missing, np.nan, cells).astype(np.float64),
        index=frame.index,
        columns=pd.Index(names, dtype=object),
    )


def profile_recall_at_k(
    embedder,
    evals,
    *,
    k=(1, 5, 10),
    n_evals=256,
    scores="bernoulli",
    reference=None,
    metric="cosine",
    random_state=None,
):
    """How often a model's task profile retrieves the model itself.

    For each model of ``evals``, its per-task accuracy profile
    (:func:`task_profiles`) is embedded as a hypothetical model
    (:func:`embed_profile`, with the queries of ``evals``), and the real
    embeddings are ranked by distance to it. recall@k is the fraction of
    models ranked within the first k (paper, appendix E.1: recall@10 of 97%
    with 8,192 evaluations).

    Parameters
    ----------
    embedder : fitted LocusEmbedder or fitted router
        Anything with ``transform(evals)``; a router's ``embedder_`` is used.
    evals : DataFrame or mapping of columns
        Scored evaluations with a ``task`` column.
    k : int or sequence of int, default=(1, 5, 10)
        Ranks to report, each an int >= 1 given once; ``recall`` is indexed
        by them as given. A k at least the number of models of ``evals``
        counts every model: its recall is 1.0.
    n_evals : int, default=256
        Evaluations per hypothetical model.
    scores : {"bernoulli", "exact"}, default="bernoulli"
        How synthetic scores are drawn (see :func:`embed_profile`).
    reference : fitted router or array-like of shape (n_models, d), default=None
        Real embeddings of the models of ``evals`` (sorted by name, or a
        router whose pool holds them, or a DataFrame indexed by model name
        that holds them), in the embedder's space (the same ``d``).
        Defaults to ``embedder.transform(evals)``.
    metric : {"cosine", "euclidean"}, default="cosine"
        Distance between embeddings.
    random_state : int, RandomState instance or None, default=None
        Seeds the hypothetical evaluation sets.

    Returns
    -------
    result : :class:`~sklearn.utils.Bunch`
        ``recall`` (Series indexed by k) and ``ranks`` (Series indexed by
        model: the rank of the true model, 1 being the nearest; ties count in
        its favour).

    Examples
    --------
    >>> import numpy as np
    >>> from locus_sklearn.inspection import profile_recall_at_k
    >>> class TaskAccuracy:
    ...     def transform(self, evals):
    ...         by_task = evals.groupby(["model", "task"])["score"].mean()
    ...         return by_task.unstack().to_numpy()
    >>> def scores(math, code):  # 20 math then 20 code queries
    ...     return [1] * math + [0] * (20 - math) + [1] * code + [0] * (20 - code)
    >>> evals = {"model": np.repeat(["a", "b", "c"], 40),
    ...          "query": np.tile([f"q{i}" for i in range(40)], 3),
    ...          "task": np.tile(["math"] * 20 + ["code"] * 20, 3),
    ...          "score": scores(18, 4) + scores(4, 18) + scores(10, 10)}
    >>> result = profile_recall_at_k(TaskAccuracy(), evals, k=[1, 2], n_evals=40,
    ...                              scores="exact", metric="euclidean")
    >>> result.recall.tolist()
    [1.0, 1.0]
    """
    embedder = _as_embedder(embedder)
    check_metric(metric)
    _check_n_evals(n_evals)
    validate_random_state(random_state, caller="profile_recall_at_k")
    table = _check_tasks(evals)
    ks = _check_k(
        k,
        None,
        what=f"a k of at least the number of models ({table.n_models}) counts "
        "every model",
    )
    # Everything is validated before the profiles are embedded (the slow part).
    real = None if reference is None else _reference_embeddings(reference, table)
    frame = table.to_frame()
    hypothetical = embed_profile(
        embedder,
        task_profiles(frame),
        frame[["query", "task"]],
        n_evals=n_evals,
        scores=scores,
        random_state=random_state,
    )
    if real is None:
        real = np.asarray(embedder.transform(frame), dtype=np.float64)
    elif real.shape[1] != hypothetical.shape[1]:
        raise ValueError(
            f"reference has embeddings of dimension {real.shape[1]}, but the "
            f"embedder embeds profiles in dimension {hypothetical.shape[1]}; pass "
            "reference embeddings from the same embedder (e.g. the router it "
            "belongs to)."
        )
    distance = pairwise(hypothetical, real, metric=metric)
    own = distance[np.arange(table.n_models), np.arange(table.n_models)]
    ranks = 1 + (distance < own[:, None]).sum(axis=1)
    return Bunch(
        recall=pd.Series(
            [float(np.mean(ranks <= kk)) for kk in ks],
            index=pd.Index(ks, name="k"),
            name="recall",
        ),
        ranks=pd.Series(
            ranks, index=pd.Index(table.models, dtype=object, name="model"), name="rank"
        ),
    )


def _reference_embeddings(reference, table):
    """The reference embeddings of the models of ``table``, in its order."""
    real, names = as_pool(reference, name="reference")
    if hasattr(reference, "model_embeddings_") or isinstance(reference, pd.DataFrame):
        position = {m: i for i, m in enumerate(names.tolist())}
        missing = [m for m in table.models if m not in position]
        if missing:
            raise ValueError(
                f"reference has no embedding for {len(missing)} model(s) of "
                f"evals: {_preview(missing)}."
            )
        return real[[position[m] for m in table.models]]
    if len(real) != table.n_models:
        raise ValueError(
            f"reference has {len(real)} rows but evals has {table.n_models} "
            "models; pass one row per model, sorted by name."
        )
    return real
