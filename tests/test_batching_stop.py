"""MicroBatcher.stop() during a slow predictor call (serve/_batching.py)."""

import asyncio
import threading
import time

import numpy as np

from locus_sklearn.serve._batching import BatcherStopped, MicroBatcher


def test_stop_does_not_block_the_loop_for_a_running_call():
    """stop() called shutdown(wait=True) in the coroutine: the event loop
    stood still until the predictor call returned (2 s here, the call's own
    limit, as the loop could not run the timer that releases it; forever
    for a call that hangs). Now stop() returns at once, the call ends in its
    thread, and start() waits for it before the next call."""
    started, release, finished = threading.Event(), threading.Event(), threading.Event()
    running, most_running = [0], [0]
    lock = threading.Lock()

    def fn(context, items):
        with lock:
            running[0] += 1
            most_running[0] = max(most_running[0], running[0])
        try:
            started.set()
            release.wait(2)  # bounded: the old code's loop never releases it
            return np.asarray(items, dtype=float)
        finally:
            with lock:
                running[0] -= 1
            finished.set()

    async def scenario():
        loop = asyncio.get_running_loop()
        batcher = MicroBatcher(fn, max_batch=4)
        await batcher.start()
        request = asyncio.create_task(batcher.submit([1]))
        while not started.is_set():
            await asyncio.sleep(0.001)
        beats = []

        async def heartbeat():
            while True:
                beats.append(time.monotonic())
                await asyncio.sleep(0.01)

        beat = asyncio.create_task(heartbeat())
        await asyncio.sleep(0.03)
        # The call is released 1 s from now, by the loop itself (room for a
        # slow, shared CI runner; the old code's loop stood still for 2 s).
        loop.call_later(1.0, release.set)
        before = time.monotonic()
        await batcher.stop()
        stop_took = time.monotonic() - before
        call_running_after_stop = not finished.is_set()
        (outcome,) = await asyncio.gather(request, return_exceptions=True)
        # Restarting waits for the call stop() left running, without
        # blocking the loop: the heartbeat goes on meanwhile.
        await batcher.start()
        call_finished_at_start = finished.is_set()
        beat.cancel()
        gaps = np.diff(beats)
        again = await asyncio.wait_for(batcher.submit([2, 3]), 2)
        await batcher.stop()
        return (
            stop_took,
            call_running_after_stop,
            outcome,
            call_finished_at_start,
            gaps,
            again,
        )

    start = time.monotonic()
    stop_took, running_after_stop, outcome, finished_at_start, gaps, again = (
        asyncio.run(scenario())
    )
    assert stop_took < 0.8, stop_took
    assert running_after_stop
    assert isinstance(outcome, BatcherStopped), outcome
    assert "shutting down" in str(outcome)
    # The loop ran through stop() and start(): no gap near the call's 1 s.
    assert gaps.max() < 0.8, gaps.max()
    assert finished_at_start
    assert most_running[0] == 1  # never two predictor calls at once
    np.testing.assert_array_equal(again, [2.0, 3.0])
    assert time.monotonic() - start < 5
