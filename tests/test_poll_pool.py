"""The event streams' poll threads are shared fairly (app/runs/streams/poll_pool.py): one user's
many streams poll in parallel (it was one poll at a time per user: twelve viewers of one user took
turns on one thread while three stood idle, bench/flood.py), yet another user's poll still
finds a thread at once, and a freed thread goes to the user holding fewest."""

from __future__ import annotations

import threading
import time

import anyio

from app.runs.streams.poll_pool import POLL_THREADS, FairPool, run_polled


def test_one_users_polls_run_in_parallel_on_all_threads_but_one() -> None:
    """Six polls of one user, each blocking until told: POLL_THREADS - 1 run at once."""
    running = 0
    most = 0
    lock = threading.Lock()
    release = threading.Event()

    def blocking_poll() -> None:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        release.wait(10)
        with lock:
            running -= 1

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            for _ in range(6):
                tg.start_soon(run_polled, 7, blocking_poll)
            with anyio.fail_after(10):
                while most < POLL_THREADS - 1:
                    await anyio.sleep(0.01)
            await anyio.sleep(0.2)  # room for a fourth to start, were it let
            assert running == POLL_THREADS - 1
            release.set()

    anyio.run(main)
    assert most == POLL_THREADS - 1


def test_another_users_poll_gets_the_free_thread_at_once() -> None:
    release = threading.Event()
    waited: dict[str, float] = {}

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            for _ in range(5):
                tg.start_soon(run_polled, 1, release.wait, 10)
            await anyio.sleep(0.2)
            with anyio.fail_after(5):
                t0 = time.monotonic()
                await run_polled(2, lambda: None)
                waited["b"] = time.monotonic() - t0
            release.set()

    anyio.run(main)
    assert waited["b"] < 1.0


def test_a_freed_slot_goes_to_the_user_holding_fewest_then_the_longest_waiting() -> None:
    order: list[str] = []

    async def main() -> None:
        pool = FairPool(size=2, per_user=2)
        hold = anyio.Event()

        async def task(user: int, name: str) -> None:
            async with pool.slot(user):
                order.append(name)
                await hold.wait()

        async with anyio.create_task_group() as tg:
            tg.start_soon(task, 1, "a1")
            tg.start_soon(task, 1, "a2")
            await anyio.sleep(0.05)
            tg.start_soon(task, 1, "a3")  # waits first...
            await anyio.sleep(0.05)
            tg.start_soon(task, 2, "b1")  # ...but B holds none: B goes first
            await anyio.sleep(0.05)
            assert order == ["a1", "a2"]
            hold.set()
        assert pool.busy == 0 and not pool.waiting

    anyio.run(main)
    assert order == ["a1", "a2", "b1", "a3"]


def test_a_poll_cancelled_while_waiting_leaves_no_slot_taken() -> None:
    async def main() -> None:
        pool = FairPool(size=1, per_user=1)
        hold = anyio.Event()

        async def holder() -> None:
            async with pool.slot(1):
                await hold.wait()

        async def waiter() -> None:
            async with pool.slot(2):
                pass

        async with anyio.create_task_group() as tg:
            tg.start_soon(holder)
            await anyio.sleep(0.05)
            with anyio.move_on_after(0.1):
                await waiter()
            assert pool.waiting == {}
            hold.set()
        assert pool.busy == 0
        with anyio.fail_after(1):
            await waiter()  # the slot is free again

    anyio.run(main)
