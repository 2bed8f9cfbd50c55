"""Embed and score large pools chunk by chunk, in joblib workers."""

import io
import itertools
import os
import pickle
import reprlib
import threading
import uuid
import warnings
from contextlib import contextmanager
from numbers import Integral
from types import SimpleNamespace

import joblib
import numpy as np
from sklearn.frozen import FrozenEstimator
from sklearn.utils._set_output import _wrap_data_with_container
from sklearn.utils.parallel import Parallel, delayed
from sklearn.utils.validation import check_is_fitted

from .._base import BaseRouter, check_model_subset
from .._embedder import LocusEmbedder
from .._evals import (
    _preview,
    _short_repr,
    check_evals,
    check_queries,
    tasks_by_query,
)
from .._warnings import FILTERS_LOCK
from ._sources import model_chunks

try:  # what loky pickles tasks with: a dependency of joblib >= 1.5
    import cloudpickle
except ImportError:  # pragma: no cover - older joblib bundles it
    from joblib.externals import cloudpickle

__all__ = ["predict_chunked", "predict_proba_chunked", "transform_chunked"]


def _check_n_jobs(n_jobs):
    if n_jobs is None:
        return
    # A bool is an Integral, but n_jobs=True is a mistake, not one worker.
    if not isinstance(n_jobs, Integral) or isinstance(n_jobs, bool):
        raise TypeError(
            f"n_jobs must be None or a non-zero int (-1 for every core); got "
            f"{n_jobs!r} ({type(n_jobs).__name__})."
        )
    if n_jobs == 0:
        raise ValueError(
            f"n_jobs must be None or a non-zero int (-1 for every core); got "
            f"{n_jobs!r}."
        )


def _check_chunk_queries(chunk_queries):
    # As chunk_models is checked: a wrong kind is a TypeError, bools included.
    if not isinstance(chunk_queries, Integral) or isinstance(chunk_queries, bool):
        raise TypeError(
            f"chunk_queries must be an int >= 1; got {chunk_queries!r} "
            f"({type(chunk_queries).__name__})."
        )
    if chunk_queries < 1:
        raise ValueError(f"chunk_queries must be an int >= 1; got {chunk_queries!r}.")
    return int(chunk_queries)


def _worker_threads(n_jobs):
    """Torch threads per worker: the cores shared among the workers."""
    n_workers = joblib.effective_n_jobs(n_jobs)
    if n_workers <= 1:
        return None
    return max(1, joblib.cpu_count() // n_workers)


def _limit_torch_threads(n_threads, parent_pid):
    """In a worker process, use ``n_threads`` torch threads.

    Workers that share the parent process (the threading backend, or
    n_jobs=1) leave the process-wide setting alone.
    """
    if n_threads is not None and os.getpid() != parent_pid:
        import torch

        torch.set_num_threads(n_threads)


# Arrays at least this large travel beside a _Shared estimator's pickle, as
# arrays of their own, so that joblib memory-maps them into worker processes
# as it did when the estimator itself was a task's argument (its default
# max_nbytes, "1M": 1024**2 bytes). Smaller ones stay in the pickle.
_SHARED_ARRAY_NBYTES = 1024**2


class _Pickler(cloudpickle.Pickler):
    """cloudpickle (as loky pickles tasks), with large numeric arrays kept
    out of the bytes and listed in ``arrays``."""

    def __init__(self, file):
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.arrays = []

    def persistent_id(self, obj):
        if (
            isinstance(obj, np.ndarray)
            and not obj.dtype.hasobject
            and obj.nbytes >= _SHARED_ARRAY_NBYTES
        ):
            self.arrays.append(obj)
            return len(self.arrays) - 1
        return None


class _Unpickler(pickle.Unpickler):
    def __init__(self, file, arrays):
        super().__init__(file)
        self.arrays = arrays

    def persistent_load(self, pid):
        return self.arrays[pid]


# The estimator a worker process last received: (token, estimator).
_received = (None, None)
_received_lock = threading.Lock()


def _receive_shared(token, payload, arrays):
    """Unpickle a _Shared estimator in a worker, once per worker and call."""
    global _received
    with _received_lock:
        if _received[0] == token:
            return _Shared(_received[1], token)
    estimator = _Unpickler(io.BytesIO(payload), arrays).load()
    with _received_lock:
        # One estimator per worker: a later call's replaces it (a worker
        # process outlives a call; it keeps the last estimator until then).
        _received = (token, estimator)
    return _Shared(estimator, token)


class _Shared:
    """An estimator unpickled once per worker process and call, not per chunk.

    Given as an argument of every task, a fitted estimator was pickled
    again for every chunk (with its precomputed query encodings: many small
    vectors, 0.6 s for 60,000 of them) and unpickled again in the worker,
    where derived caches (a router's readout, a sentence-transformers
    model) were then rebuilt. This wrapper pickles the estimator once per
    call, when the first task is sent; every task carries those bytes (a
    copy, not a new pickling), and a worker unpickles them only for the
    first chunk of the call it runs: its later chunks share that copy, as
    chunks in threads (or n_jobs=1) share the caller's estimator, with the
    same results. Large numeric arrays travel beside the bytes, so that
    joblib still memory-maps them into loky workers. Each call wraps its
    estimator with a new token: a worker never reuses the estimator of an
    earlier call, which may have changed since. A worker keeps the last
    estimator it received until its next call, or until joblib stops it.
    Without a worker process (threads, n_jobs=1) nothing is pickled.
    """

    def __init__(self, estimator, token=None):
        self.estimator = estimator
        self.token = uuid.uuid4().hex if token is None else token
        self._payload = None
        self._lock = threading.Lock()

    def __reduce__(self):
        # The tasks of one call may be pickled in joblib's threads at once.
        with self._lock:
            if self._payload is None:
                buffer = io.BytesIO()
                pickler = _Pickler(buffer)
                pickler.dump(self.estimator)
                self._payload = (buffer.getvalue(), pickler.arrays)
        return _receive_shared, (self.token, *self._payload)


# The errors of bad input (check_evals', an encoder's), which count and show
# what is wrong among the rows of one chunk only. Others (a MemoryError, a
# KeyboardInterrupt) say nothing about the input and pass through as raised.
_INPUT_ERRORS = (ValueError, TypeError, LookupError)


@contextmanager
def _in_chunk(describe, *args):
    """Put ``describe(*args)``, naming the chunk, in front of an input error
    raised within the block.

    check_evals and the encoders count and list what is wrong among the rows
    they are given, a chunk's: without the prefix, "1 of the 101 distinct
    queries" read as the pool's count, and nothing said which chunk it was.
    The exception keeps its type, and its original text follows the prefix
    (callers match on both); one whose type cannot be made from a message
    passes through unchanged.
    """
    try:
        yield
    except _INPUT_ERRORS as exc:
        # A KeyError's str is the repr of its key; its text is the key.
        text = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        try:
            prefixed = type(exc)(f"{describe(*args)}: {text}")
        except Exception:  # an exception type that takes other arguments
            prefixed = None
        if prefixed is None:
            raise
        # The original frames kept: a bug deep in torch or numpy still shows
        # where it was raised.
        raise prefixed.with_traceback(exc.__traceback__) from None


def _models_of_chunk(index, models):
    """Chunk ``index`` (from 1) of the pool and its ``models`` (a chunk's
    model column, or its distinct names), for an error message."""
    # NumPy strings shown as the names they hold ('a', not np.str_('a')).
    names = sorted(
        {m.item() if isinstance(m, np.generic) else m for m in models}, key=str
    )
    if len(names) == 1:
        held = f"model {_short_repr(names[0])}"
    else:
        first, last = _short_repr(names[0]), _short_repr(names[-1])
        held = f"models {first} .. {last}, {len(names)} models"
    return (
        f"In chunk {index} of the pool ({held}; the counts that follow are this "
        "chunk's)"
    )


def _queries_of_chunk(index, start, n_queries):
    """Chunk ``index`` (from 1) of the queries, ``n_queries`` from position
    ``start``, for an error message."""
    return (
        f"In chunk {index} of the queries (queries[{start}:{start + n_queries}], "
        f"{n_queries} queries; the counts that follow are this chunk's)"
    )


def _embed_chunk(shared, chunk, index, n_threads, parent_pid):
    """Validate, encode and embed one chunk, as ``transform`` does; an input
    error names the chunk (``index``, from 1) and its models."""
    _limit_torch_threads(n_threads, parent_pid)
    embedder = shared.estimator
    frame = chunk.read()
    # Every source has checked the model column: names are strings.
    with _in_chunk(_models_of_chunk, index, frame["model"]):
        table = check_evals(frame, name=chunk.name)
        embeddings = embedder._transform_encoded(table, embedder._encode(table.queries))
    # The queries' tasks, to check across chunks what check_evals checks within.
    tasks = None if table.query_task is None else (table.queries, table.query_task)
    return table.models, np.diff(table.indptr), embeddings, table.n_input_rows, tasks


class _QueryTasks:
    """The task of every query seen so far, checked chunk by chunk.

    check_evals refuses a query with two tasks within a chunk, as transform
    does within the whole table; a query evaluated by models of two chunks
    is checked here, as each chunk's result arrives, so that no chunk's
    query list is kept: memory grows with the distinct queries of the pool
    (one entry per query, however many chunks share it), not with chunks x
    queries.
    """

    def __init__(self, name="evals"):
        self.name = name
        self.task_of = {}
        # One object per distinct task: each chunk's (unpickled or re-read)
        # task strings are new objects, which the map would otherwise keep
        # one of per query.
        self._tasks = {}

    def __len__(self):
        return len(self.task_of)

    def add(self, queries, query_task):
        """Fold one chunk's (distinct queries, task of each) into the map.

        Raises transform's ValueError, naming this chunk's queries whose
        task differs from the one an earlier chunk gave them.
        """
        task_of, tasks = self.task_of, self._tasks
        conflicting = []
        for query, task in zip(queries.tolist(), query_task.tolist(), strict=True):
            known = task_of.setdefault(query, tasks.setdefault(task, task))
            if known != task:
                conflicting.append((query, known, task))
        if conflicting:
            # tasks_by_query words the error exactly as transform does: each
            # conflicting query is passed with both of its tasks.
            queries = np.array([query for query, _, _ in conflicting], dtype=object)
            tasks_by_query(
                np.repeat(np.arange(len(queries)), 2),
                np.array([t for _, *both in conflicting for t in both], dtype=object),
                queries,
                self.name,
            )


def _results_in_order(tasks, n_jobs):
    """Yield the results of joblib ``tasks`` in task order, as they finish.

    A generator from joblib where the backend gives one (sequential, loky,
    threading, dask): a result is folded and dropped before the next. One
    task per batch: with joblib's default ``batch_size="auto"``, loky (and
    dask) send fast tasks in ever larger batches, and the rows of hundreds
    of chunks were drawn from the source at once. With ``batch_size=1``,
    ``2 * n_jobs`` tasks are handed to the workers (``pre_dispatch``), and
    joblib draws up to ``n_jobs - 1`` more ahead: at most ``3 * n_jobs``
    chunks drawn and not yet embedded. A task that finishes before an
    earlier one waits with its result only (joblib hands a new task out as
    each one finishes). Backends that refuse ``return_as="generator"``
    (joblib's multiprocessing, Ray) run the tasks in groups of ``2 *
    n_jobs``, in one pool for the whole run, so that their results never
    pile up either.
    """
    config = dict(n_jobs=n_jobs, batch_size=1, pre_dispatch="2 * n_jobs")
    try:
        parallel = Parallel(return_as="generator", **config)
    except ValueError:
        # joblib refuses the generator when the backend is set up (the only
        # ValueError it can raise here, n_jobs being checked already); any
        # other error is raised again by the Parallel below.
        parallel = None
    if parallel is not None:
        yield from parallel(tasks)
        return
    group = 2 * joblib.effective_n_jobs(n_jobs)
    tasks = iter(tasks)
    # Within the with block, each call reuses the block's workers: a new
    # Parallel per group started a new process pool (on Ray, new actors,
    # each loading torch and the estimator again) for every group.
    with Parallel(**config) as parallel:
        while batch := list(itertools.islice(tasks, group)):
            yield from parallel(batch)


def _close_quietly(results):
    """Stop ``results`` early (an error was raised) without joblib's warning
    that the chunks still in flight were cancelled: that is intended.

    Not a ``catch_warnings`` block, and _warnings.FILTERS_LOCK is not held
    while closing, unlike the library's other blocks that change the
    filters: closing may wait for worker threads, which may need that lock
    (the predict path's first sparse conversion, an ONNX encoder's export),
    and would then never end. A ``catch_warnings`` block without the lock,
    overlapping another thread's ``ignoring()`` block, restored the filter
    list that block had saved, and this filter stayed for good. So only
    this one filter is added and then taken out, each under the lock: taken
    without waiting for it when adding (if another block holds it, the
    results are closed without quieting: one spurious warning is better
    than a filter left behind), and waited for when taking it out, once no
    worker is left to need it, so that a block that copied the list with
    the filter in it has put it back first.
    """
    if not FILTERS_LOCK.acquire(blocking=False):
        results.close()
        return
    try:
        before = list(warnings.filters)
        warnings.filterwarnings("ignore", category=UserWarning, module=r"joblib\.")
        added = warnings.filters[0]
        if added in before:
            # An equal filter was there (the user's): filterwarnings moved
            # it to the front. Put it back where it was, and take none out.
            warnings.filters[:] = before
            added = None
    finally:
        FILTERS_LOCK.release()
    try:
        results.close()
    finally:
        if added is not None:
            with FILTERS_LOCK:
                # By identity: an equal filter added meanwhile is another's.
                # An "ignore" filter records nothing in the warning
                # registries, so taking it out leaves no stale cache.
                for index, item in enumerate(warnings.filters):
                    if item is added:
                        del warnings.filters[index]
                        break


def _locus_embedder(embedder):
    inner = embedder.estimator if isinstance(embedder, FrozenEstimator) else embedder
    if not isinstance(inner, LocusEmbedder):
        raise TypeError(
            "embedder must be a fitted LocusEmbedder (or a FrozenEstimator of "
            f"one); got {type(embedder).__name__}."
        )
    check_is_fitted(inner)
    return inner


def transform_chunked(
    embedder, evals, *, chunk_models=1000, n_jobs=None, return_models=False
):
    """Embed the models of a pool chunk by chunk, optionally in parallel.

    The result of ``embedder.transform(evals)`` (up to float32 rounding,
    about 1e-7 relative: a model is embedded in a padded batch with the
    models of its chunk, not of the whole pool), for pools that do not
    fit one DataFrame: the evaluations are read in chunks of whole models
    (see :func:`iter_model_chunks`) and each chunk is validated, encoded and
    embedded as :meth:`~locus_sklearn.LocusEmbedder.transform` does, in a
    joblib worker. Memory is bounded by the chunks in flight and the
    result, not by the pool's rows: at most ``3 * n_jobs`` chunks are read
    and not yet embedded at once (``2 * n_jobs`` handed to the workers, up
    to ``n_jobs - 1`` read ahead by joblib), and each chunk's result is
    folded in as it arrives (a chunk that finishes before an earlier,
    slower one waits with its result only: its models' embeddings and
    distinct queries, not its rows). With a ``task`` column, what grows
    with the pool is one entry per distinct query id (its task, to refuse a
    query given different tasks in two chunks), however many chunks share
    the query.

    Parameters
    ----------
    embedder : LocusEmbedder or FrozenEstimator
        A fitted embedder. Worker processes receive a pickled copy, so its
        query encoder must pickle (precomputed vectors and model directories
        do; a sentence-transformers model is loaded again in each worker).
        It is pickled once per call and unpickled once per worker process,
        which then embeds all its chunks with that copy.
    evals : DataFrame, mapping of columns, str, os.PathLike, pyarrow.dataset.Dataset or iterable of DataFrames
        Long-format evaluations: a table in memory, a Parquet file or folder
        (rows in any order), a dataset, or a stream of DataFrames grouped by
        model; see :func:`iter_model_chunks`.
    chunk_models : int, default=1000
        Most models per chunk. A chunk's queries are encoded once per chunk,
        so a query shared by models of several chunks is encoded several
        times (``memory=`` on the embedder serves a chunk from its cache only
        when the same set of queries was encoded before; precomputed
        encodings, a mapping, encode nothing).
    n_jobs : int, default=None
        Workers embedding chunks at once. None means 1 unless in a
        :func:`joblib.parallel_config` context; -1 uses every core. The
        default backend, loky, starts local processes; ``with
        joblib.parallel_config(backend="dask")`` (or ``"ray"``) runs them on a
        cluster. Each worker process uses ``cpu_count // n_jobs`` torch threads
        so that workers do not oversubscribe the cores.
    return_models : bool, default=False
        Also return the model names (a Parquet source has no other record of
        them).

    Returns
    -------
    embeddings : ndarray of shape (n_models, embedding_dim) or DataFrame
        One row per distinct model of ``evals``, in sorted model-name order,
        equal to ``embedder.transform(evals)`` up to float32 rounding. With
        pandas output (``embedder.set_output(transform="pandas")``), a
        DataFrame indexed by model name; with polars output, a polars
        DataFrame, as ``transform`` gives.
    models : ndarray of str, shape (n_models,)
        The model of each row; only when ``return_models=True``.

    Raises
    ------
    ValueError
        For ``chunk_models < 1``, ``n_jobs=0``, a file that cannot be read, or
        any table :func:`~locus_sklearn.check_evals` rejects (checked chunk by
        chunk, and a query given different tasks in two chunks: raised at
        the first chunk that contradicts an earlier one, counting and naming
        that chunk's conflicting queries). An error raised while a chunk is
        checked, encoded or embedded (this ValueError, or a TypeError or
        KeyError) keeps its type and ``transform``'s text for the chunk's rows,
        after a prefix naming the chunk: ``In chunk 2 of the pool (models
        'm03' .. 'm05', 3 models; the counts that follow are this chunk's):``
        and a space. Its counts are that chunk's; later chunks may hold more.
    TypeError
        For a ``chunk_models`` or ``n_jobs`` that is not an int, a
        ``return_models`` that is not a bool, or a file
        that stores a column as a type it cannot hold (checked file by file
        before any chunk is read).
    sklearn.utils._param_validation.InvalidParameterError
        If a parameter of ``embedder`` set after fit is invalid (checked once,
        before any chunk runs).
    sklearn.exceptions.NotFittedError
        If ``embedder`` is not fitted.

    Warns
    -----
    FewEvaluationsWarning
        Once, as ``transform`` does, for models with fewer than
        ``enc_size[0]`` evaluations.

    Examples
    --------
    >>> import numpy as np
    >>> from locus_sklearn import LocusEmbedder
    >>> from locus_sklearn.datasets import make_model_pool
    >>> from locus_sklearn.parallel import transform_chunked
    >>> pool = make_model_pool(n_models=6, n_queries=200, evals_per_model=100,
    ...                        random_state=0)
    >>> embedder = LocusEmbedder(pool.encodings, embedding_dim=16, n_latents=4,
    ...                          n_blocks=1, n_heads=2, max_epochs=1,
    ...                          random_state=0).fit(pool.evals)
    >>> Z = transform_chunked(embedder, pool.evals, chunk_models=4)
    >>> Z.shape
    (6, 16)
    >>> np.allclose(Z, embedder.transform(pool.evals), atol=1e-6)
    True
    """
    locus = _locus_embedder(embedder)
    # Run-time settings (refine_steps, inference_dtype, transform_batch_tokens)
    # may have been set after fit; transform checks them, and so does this,
    # once and in this process rather than in every worker.
    locus._validate_params()
    _check_n_jobs(n_jobs)
    # Checked before any chunk is read; a truthy "yes" would silently return
    # a tuple where an array is expected.
    if not isinstance(return_models, bool | np.bool_):
        raise TypeError(
            f"return_models must be a bool (True or False); got "
            f"{reprlib.repr(return_models)} ({type(return_models).__name__})."
        )
    chunks, n_rows = model_chunks(evals, chunk_models)
    shared = _Shared(locus)
    tasks = (
        delayed(_embed_chunk)(
            shared, chunk, index, _worker_threads(n_jobs), os.getpid()
        )
        for index, chunk in enumerate(chunks, 1)
    )
    # joblib draws the chunks from the generator lazily (at most 3 * n_jobs
    # drawn and not yet embedded, see _results_in_order). Each result is
    # folded in as it comes: its models' embeddings are kept (they are the
    # output, sorted by model below), its query list only long enough to
    # update the query -> task map, which also refuses a conflicting chunk
    # before the chunks after it run.
    models, counts, embeddings, n_read = [], [], [], 0
    query_tasks = _QueryTasks()
    results = _results_in_order(tasks, n_jobs)
    try:
        for part in results:
            models.append(part[0])
            counts.append(part[1])
            embeddings.append(part[2])
            n_read += part[3]
            if part[4] is not None:
                query_tasks.add(*part[4])
    finally:
        _close_quietly(results)
    models = np.concatenate(models)
    counts = np.concatenate(counts)
    embeddings = np.concatenate(embeddings)
    if n_rows is not None and n_read != n_rows:
        raise RuntimeError(
            f"evals had {n_rows} rows when its models were listed but {n_read} "
            "when read by chunks; did the data change while it was being read?"
        )
    order = np.argsort(models, kind="stable")
    models, counts, embeddings = models[order], counts[order], embeddings[order]
    repeated = models[1:][models[1:] == models[:-1]]
    if len(repeated):  # a chunk source must never split a model
        raise RuntimeError(
            f"{len(repeated)} model(s) were embedded in two chunks: "
            f"{_preview(repeated)}."
        )
    # transform's warning and output, from what the chunks returned.
    summary = SimpleNamespace(
        models=models, indptr=np.concatenate([[0], np.cumsum(counts)])
    )
    locus._warn_few_evaluations(summary)
    output = locus._as_output(embeddings, summary)
    # What transform's set_output wrapper then does: a polars output is only
    # made there (_as_output indexes a pandas one by model name).
    output = _wrap_data_with_container("transform", output, evals, locus)
    return (output, models) if return_models else output


def _call_chunk(shared, method, queries, start, index, n_threads, parent_pid, params):
    """Score chunk ``index`` (from 1) of the queries, those from position
    ``start``; an input error names the chunk and its positions."""
    _limit_torch_threads(n_threads, parent_pid)
    with _in_chunk(_queries_of_chunk, index, start, len(queries)):
        return getattr(shared.estimator, method)(queries, **params)


def _check_router(router):
    """Refuse what is not a locus_sklearn router, here rather than in a worker.

    A predict_proba method is not enough: LocusEmbedder's takes embeddings
    and queries, a scikit-learn classifier a numeric matrix, and either
    would fail in the worker with an error that does not name ``router``.
    A FrozenEstimator delegates predict and predict_proba to its router.
    """
    inner = router.estimator if isinstance(router, FrozenEstimator) else router
    if not isinstance(inner, BaseRouter):
        given = type(router).__name__
        if inner is not router:
            given = f"a FrozenEstimator wrapping {type(inner).__name__}"
        raise TypeError(
            "router must be a fitted router of locus_sklearn (a BaseRouter: "
            "LocusRouter or any router of locus_sklearn.baselines, or a "
            f"FrozenEstimator wrapping one); got {given}."
        )
    check_is_fitted(router)


def _map_query_chunks(router, method, queries, chunk_queries, n_jobs, params):
    _check_router(router)
    _check_n_jobs(n_jobs)
    chunk_queries = _check_chunk_queries(chunk_queries)
    queries = check_queries(queries)
    n_threads, parent = _worker_threads(n_jobs), os.getpid()
    shared = _Shared(router)
    tasks = (
        delayed(_call_chunk)(
            shared,
            method,
            queries[i : i + chunk_queries],
            i,
            i // chunk_queries + 1,
            n_threads,
            parent,
            params,
        )
        for i in range(0, len(queries), chunk_queries)
    )
    # Ordered results: rows come back in the order of the queries.
    return np.concatenate(list(Parallel(n_jobs=n_jobs)(tasks)))


def predict_proba_chunked(router, queries, *, chunk_queries=1000, n_jobs=None):
    """P(correct) of every model on many queries, chunk by chunk in workers.

    Equal to ``router.predict_proba(queries)`` up to float32 rounding
    (about 1e-7 relative: the chunks are scored in batches of their own
    size); the queries are split into
    chunks scored in joblib workers (each worker process gets one pickled
    copy of the router per call, shared by the chunks it scores; with loky,
    large arrays such as the stored evaluations are memory-mapped rather
    than copied).

    Parameters
    ----------
    router : fitted router
        A :class:`~locus_sklearn.LocusRouter` or any router of
        :mod:`locus_sklearn.baselines`, or a ``FrozenEstimator`` wrapping
        one; anything else (a LocusEmbedder, a scikit-learn classifier) is a
        TypeError, raised before any chunk runs.
    queries : sequence of str or DataFrame with a ``query`` column
    chunk_queries : int, default=1000
        Queries per chunk. Memory per worker grows with it.
    n_jobs : int, default=None
        Workers; see :func:`transform_chunked`.

    Returns
    -------
    proba : ndarray of shape (n_queries, n_models)
        Columns in ``router.classes_`` order.

    Raises
    ------
    ValueError
        An error the router raises for one chunk (a query its precomputed
        encoder lacks; likewise a TypeError or KeyError) keeps its type and
        text, after a prefix naming the chunk and its positions in
        ``queries``: ``In chunk 3 of the queries (queries[2000:3000], 1000
        queries; the counts that follow are this chunk's):`` and a space. Its
        counts are that chunk's. :func:`predict_chunked` names the chunk in the same way.

    Examples
    --------
    >>> import numpy as np
    >>> from locus_sklearn import LocusEmbedder, LocusRouter
    >>> from locus_sklearn.datasets import make_model_pool
    >>> from locus_sklearn.parallel import predict_proba_chunked
    >>> pool = make_model_pool(n_models=6, n_queries=200, evals_per_model=100,
    ...                        random_state=0)
    >>> router = LocusRouter(LocusEmbedder(pool.encodings, embedding_dim=16,
    ...                                    n_latents=4, n_blocks=1, n_heads=2,
    ...                                    max_epochs=1, random_state=0))
    >>> router = router.fit(pool.evals)
    >>> queries = pool.queries["query"]
    >>> proba = predict_proba_chunked(router, queries, chunk_queries=64)
    >>> proba.shape
    (200, 6)
    >>> np.allclose(proba, router.predict_proba(queries), atol=1e-6)
    True
    """
    return _map_query_chunks(
        router, "predict_proba", queries, chunk_queries, n_jobs, {}
    )


def predict_chunked(router, queries, *, models=None, chunk_queries=1000, n_jobs=None):
    """Route many queries, chunk by chunk in joblib workers.

    Equal to ``router.predict(queries, models)`` except where a query's
    best scores lie within float32 rounding of each other (about 1e-7): each
    chunk is predicted as a batch of its own size, which rounds a float32
    P(correct) differently (see :func:`predict_proba_chunked`). Only the
    routed names come back from the workers, so memory does not grow with
    ``n_queries * n_models``.

    Parameters
    ----------
    router : fitted router
        A :class:`~locus_sklearn.LocusRouter` or any router of
        :mod:`locus_sklearn.baselines`, or a ``FrozenEstimator`` wrapping
        one; anything else (a LocusEmbedder, a scikit-learn classifier) is a
        TypeError, raised before any chunk runs.
    queries : sequence of str or DataFrame with a ``query`` column
    models : iterable of str, default=None
        Restrict routing to these models of the pool, each named once
        (checked once, against ``router.classes_``, before any chunk runs).
    chunk_queries : int, default=1000
        Queries per chunk.
    n_jobs : int, default=None
        Workers; see :func:`transform_chunked`.

    Returns
    -------
    routed : ndarray of str, shape (n_queries,)

    Examples
    --------
    >>> from locus_sklearn import LocusEmbedder, LocusRouter
    >>> from locus_sklearn.datasets import make_model_pool
    >>> from locus_sklearn.parallel import predict_chunked
    >>> pool = make_model_pool(n_models=6, n_queries=200, evals_per_model=100,
    ...                        random_state=0)
    >>> router = LocusRouter(LocusEmbedder(pool.encodings, embedding_dim=16,
    ...                                    n_latents=4, n_blocks=1, n_heads=2,
    ...                                    max_epochs=1, random_state=0))
    >>> router = router.fit(pool.evals)
    >>> queries = pool.queries["query"]
    >>> routed = predict_chunked(router, queries, chunk_queries=64)
    >>> bool((routed == router.predict(queries)).all())
    True
    """
    params = {}
    if models is not None:
        _check_router(router)
        # Checked once, here, and sent to every chunk as a list of the pool's
        # names: a generator would be used up by the first chunk (and does not
        # pickle for a worker process).
        params["models"] = router.classes_[
            check_model_subset(models, router.classes_)
        ].tolist()
    return _map_query_chunks(router, "predict", queries, chunk_queries, n_jobs, params)
