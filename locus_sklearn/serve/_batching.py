"""Micro-batching: concurrent requests share one encoder and predictor call.

Encoding a query and scoring it against the pool cost little more for 64
queries than for one (one matrix product, one transformer forward pass), so
the service gathers the requests that arrive within a short window, or while
the previous batch is computing, and answers them with one call. The call runs
in a worker thread, so the event loop keeps accepting requests meanwhile.
"""

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

__all__ = ["MicroBatcher", "BatcherStopped", "MAX_WINDOW_MS"]

# The longest batch window create_app and ``locus serve`` take, in ms: a
# batch gains nothing from a wait of seconds, and a huge one (1e308) would
# hold every request for good.
MAX_WINDOW_MS = 10_000


class BatcherStopped(RuntimeError):
    """The batcher is not running: never started, or stopped."""


class MicroBatcher:
    """Gather concurrent calls of ``fn(context, items)`` into one.

    Parameters
    ----------
    fn : callable
        ``fn(context, list) -> array``: computes one row of ``array`` per
        item, for the ``context`` the items were submitted with (e.g. the
        router snapshot a request was validated against). A batch only
        holds items submitted with the same context (the same object), so
        each is answered in the context it was submitted in.
    max_batch : int
        Items per batch, at most: a request that would take a batch over it
        waits for the next batch (a single larger request goes alone, whole).
    window : float, default=0.0
        Seconds a batch waits for more requests after its first one arrived.
        While a batch computes, the next one fills up with whatever arrives,
        its window counting from its first request's arrival, not from the
        end of that computation: under load batches grow without any wait
        beyond the window; 0 sends a request on at once when nothing is
        computing. On a CPU a query costs about the same alone as
        in a batch (the encoder's batches are cut by length,
        :mod:`locus_sklearn._length_batches`), so a wait buys nothing there;
        an accelerator that gains from batches may.

    Examples
    --------
    >>> import asyncio
    >>> from locus_sklearn.serve._batching import MicroBatcher
    >>> def fn(context, items):
    ...     return [context * item for item in items]
    >>> async def main():
    ...     batcher = MicroBatcher(fn, max_batch=8)
    ...     await batcher.start()
    ...     try:
    ...         return await asyncio.gather(
    ...             batcher.submit([1, 2], context=10), batcher.submit([3], context=100)
    ...         )
    ...     finally:
    ...         await batcher.stop()
    >>> asyncio.run(main())
    [[10, 20], [300]]
    """

    def __init__(self, fn, *, max_batch=64, window=0.0):
        self._fn = fn
        self.max_batch = max_batch
        self.window = window
        self.n_batches = 0
        self.n_items = 0
        self.n_calls = 0
        self._queue = None
        self._task = None
        self._executor = None
        self._stopped_executor = None  # its last call may still be running
        self._pending = []  # taken from the queue, not answered yet

    async def start(self):
        if self._stopped_executor is not None:
            # stop() does not wait for the call it leaves running: the new
            # worker does, in a thread (the loop keeps running), so the
            # predictor is still never run concurrently with itself.
            stopped, self._stopped_executor = self._stopped_executor, None
            await asyncio.get_running_loop().run_in_executor(None, stopped.shutdown)
        self._queue = asyncio.Queue()
        self._pending = []
        # One worker: the predictor is not run concurrently with itself, and
        # batches are what gives throughput.
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="locus-route")
        self._task = asyncio.create_task(self._run())

    async def stop(self):
        """Stop the worker; every request not answered yet, and any submitted
        later, fails with :class:`BatcherStopped`.

        Returns without waiting for a predictor call still running: it ends
        in its thread and its result is dropped (a later :meth:`start` waits
        for it before the next call).
        """
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        stopped = BatcherStopped("The service is shutting down; retry later.")
        for _, _, future, _ in self._pending:
            _settle(future, exception=stopped)
        self._pending = []
        while self._queue is not None and not self._queue.empty():
            _settle(self._queue.get_nowait()[2], exception=stopped)
        if self._executor is not None:
            # Not shutdown(wait=True): in a coroutine it would block the event
            # loop, every other request and the server's shutdown, until the
            # running call returns, for good if it hangs. Its requests have
            # failed above, so nothing waits for its result.
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._stopped_executor, self._executor = self._executor, None

    def check_running(self):
        """Raise :class:`BatcherStopped` when the worker is not running (never
        started, or stopped): nothing would ever answer."""
        if self._task is None:
            raise BatcherStopped(
                "The service is not started: its lifespan has not run (serve the "
                "app with uvicorn, or use a TestClient as a context manager)."
            )
        if self._task.done():
            raise BatcherStopped("The service is shutting down; retry later.")

    async def submit(self, items, *, context=None):
        """The rows of ``fn(context, ...)``'s array for ``items``.

        ``items`` shares a batch only with items submitted with the same
        ``context`` object; requests are answered in their arrival order.
        Raises :class:`BatcherStopped` when the worker is not running (never
        started, or stopped): nothing would ever answer.
        """
        self.check_running()
        future = asyncio.get_running_loop().create_future()
        self.n_calls += 1
        # With its arrival time: the batch it starts closes a window after
        # it arrived, however long it then waited for the worker.
        self._queue.put_nowait((list(items), context, future, time.monotonic()))
        return await future

    async def _run(self):
        loop = asyncio.get_running_loop()
        held = None  # taken from the queue, too large for the last batch
        while True:
            # What was taken from the queue and not answered yet: failed by
            # stop() if the worker is cancelled before answering it.
            self._pending = batch = [] if held is None else [held]
            if held is None:
                batch.append(await self._queue.get())
            held = None
            items, context, _, arrived = batch[0]
            size = len(items)
            # From the first request's arrival, not from now: a request that
            # waited while the previous batch computed has spent (part of)
            # its window already, so under load a batch is not held for the
            # computation and a window more.
            closes = arrived + self.window
            while size < self.max_batch:
                wait = closes - time.monotonic()
                try:
                    if wait <= 0:
                        entry = self._queue.get_nowait()
                    else:
                        entry = await asyncio.wait_for(self._queue.get(), wait)
                except (asyncio.QueueEmpty, asyncio.TimeoutError):
                    break
                if entry[1] is not context or size + len(entry[0]) > self.max_batch:
                    # It starts the next batch, in its arrival order: the
                    # queue cannot be peeked at, so it is held here. Another
                    # context (a request validated against another router)
                    # must not be answered in this one.
                    held = entry
                    self._pending = [*batch, held]
                    break
                batch.append(entry)
                size += len(entry[0])
            batch = [(items, f) for items, _, f, _ in batch if not f.cancelled()]
            if batch:
                await self._process(loop, context, batch)
            self._pending = [] if held is None else [held]
            # The context is the router state the batch was checked against:
            # kept in these locals while the queue is idle, a replaced router
            # (its network, pool and readout) stayed in memory after a reload
            # until the next request came.
            items = context = entry = batch = None

    async def _call(self, loop, context, items):
        """``fn(context, items)`` in the worker thread, counted as one batch.

        Whatever it raises but a cancellation (the worker stopping) comes
        back as an Exception: a BaseException such as SystemExit would end
        the worker, and every later request would find it gone.
        """
        self.n_batches += 1
        self.n_items += len(items)
        try:
            return await loop.run_in_executor(self._executor, self._fn, context, items)
        except (Exception, asyncio.CancelledError):
            raise
        except BaseException as exc:
            raise RuntimeError(
                f"the predictor raised {type(exc).__name__}: {exc}"
            ) from exc

    async def _process(self, loop, context, batch):
        items = [item for part, _ in batch for item in part]
        try:
            rows = await self._call(loop, context, items)
        except Exception as exc:
            if len(batch) == 1:
                _settle(batch[0][1], exception=exc)
                return
            # One bad request (say an unknown query id) must not fail the
            # others: answer each on its own (each call a batch of its own
            # in the counters, as it is one more predictor call).
            for part, future in batch:
                try:
                    result = await self._call(loop, context, part)
                except Exception as own:
                    _settle(future, exception=own)
                else:
                    _settle(future, result=result)
            return
        start = 0
        for part, future in batch:
            _settle(future, result=rows[start : start + len(part)])
            start += len(part)


def _settle(future, *, result=None, exception=None):
    if future.done():  # the client went away
        return
    if exception is not None:
        future.set_exception(exception)
    else:
        future.set_result(result)
