"""The scheduler's pure decision: order, single-host fit, backfill, starvation, gpus: 0."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

from app.gpus.scheduler import (
    MESSAGE_LOST,
    NO_LIVE_HOST,
    Placement,
    QueuedRun,
    never_fits,
    pick,
    queue_order,
)

T0 = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
STARVE = 300.0


def run(id: int, gpus: int, *, priority: int = 0, age: float = 0.0) -> QueuedRun:
    """A run submitted `age` seconds before T0 (ids follow submit order in these tests)."""
    return QueuedRun(id=id, gpus=gpus, priority=priority, created_at=T0 - timedelta(seconds=age))


def starts(queue, free, *, now=T0, **kw) -> dict[int, Placement]:  # type: ignore[no-untyped-def]
    return pick(queue, free, now, STARVE, **kw).starts


def test_queue_order_is_priority_then_submit_time_then_id() -> None:
    a = run(1, 1, age=10)
    b = run(2, 1, age=20)
    c = run(3, 1, priority=5, age=1)
    d = run(4, 1, age=20)
    assert [r.id for r in queue_order([a, b, c, d])] == [3, 2, 4, 1]


def test_runs_start_in_submit_order_and_get_exactly_their_gpus() -> None:
    queue = [run(1, 1, age=3), run(2, 1, age=2), run(3, 1, age=1)]
    got = starts(queue, {"h": [0, 1]})
    assert got == {1: Placement("h", (0,)), 2: Placement("h", (1,))}


def test_higher_priority_goes_first_even_when_submitted_later() -> None:
    queue = [run(1, 2, age=10), run(2, 2, priority=1, age=1)]
    assert starts(queue, {"h": [0, 1]}) == {2: Placement("h", (0, 1))}


def test_a_run_gets_the_lowest_free_indices() -> None:
    assert starts([run(1, 2)], {"h": [3, 1, 2]}) == {1: Placement("h", (1, 2))}


def test_a_run_never_straddles_hosts() -> None:
    decision = pick([run(1, 2)], {"a": [0], "b": [1]}, T0, STARVE)
    assert decision.starts == {}
    assert "2 free GPUs on one host" in decision.waiting[1]


def test_best_fit_keeps_the_bigger_hole_for_a_bigger_run() -> None:
    queue = [run(1, 1, age=2), run(2, 2, age=1)]
    got = starts(queue, {"big": [0, 1], "small": [0]})
    assert got == {1: Placement("small", (0,)), 2: Placement("big", (0, 1))}


def test_the_asking_host_is_preferred_for_its_own_run() -> None:
    got = starts([run(1, 1)], {"a": [0], "b": [0]}, asking=(1, "b"))
    assert got == {1: Placement("b", (0,))}


def test_runs_ahead_keep_their_place_even_for_the_asking_host() -> None:
    # Run 1 is ahead and fits only on "a": run 2 asking from "a" must not take it.
    got = starts([run(1, 2, age=2), run(2, 1, age=1)], {"a": [0, 1]}, asking=(2, "a"))
    assert got == {1: Placement("a", (0, 1))}


def test_a_smaller_run_backfills_past_a_larger_one_that_cannot_fit_yet() -> None:
    queue = [run(1, 2, age=10), run(2, 1, age=5)]
    decision = pick(queue, {"h": [1]}, T0, STARVE)
    assert decision.starts == {2: Placement("h", (1,))}
    assert 1 in decision.waiting


def test_a_run_waiting_past_the_starvation_limit_stops_backfill() -> None:
    queue = [run(1, 2, age=STARVE + 1), run(2, 1, age=5), run(3, 1, age=1)]
    decision = pick(queue, {"h": [1]}, T0, STARVE)
    assert decision.starts == {}
    assert "run 1 has waited too long" in decision.waiting[2]


def test_the_starvation_limit_counts_from_submit_time() -> None:
    queue = [run(1, 2, age=STARVE - 1), run(2, 1, age=5)]
    assert set(starts(queue, {"h": [1]})) == {2}
    assert starts(queue, {"h": [1]}, now=T0 + timedelta(seconds=2)) == {}


def test_runs_ahead_of_a_starving_run_still_start() -> None:
    queue = [run(1, 1, priority=1, age=1), run(2, 3, age=STARVE + 1), run(3, 1, age=2)]
    got = starts(queue, {"h": [0, 1]})
    assert got == {1: Placement("h", (0,))}


def test_a_starving_run_starts_once_its_gpus_are_free() -> None:
    queue = [run(1, 2, age=STARVE + 1), run(2, 1, age=5)]
    assert starts(queue, {"h": [0, 1]}) == {1: Placement("h", (0, 1))}


def test_a_run_larger_than_any_host_blocks_nobody() -> None:
    queue = [run(1, 4, age=STARVE + 1), run(2, 1, age=1)]
    decision = pick(queue, {"h": [0]}, T0, STARVE, capacity_by_host={"h": 2})
    assert decision.starts == {2: Placement("h", (0,))}
    assert "no host has that many" in decision.waiting[1]


def test_without_capacities_a_large_starving_run_still_blocks() -> None:
    queue = [run(1, 4, age=STARVE + 1), run(2, 1, age=1)]
    assert starts(queue, {"h": [0]}) == {}


def test_gpu_free_runs_are_never_blocked() -> None:
    queue = [run(1, 2, age=STARVE + 1), run(2, 0, age=1), run(3, 1, age=0)]
    decision = pick(queue, {"h": [0]}, T0, STARVE)
    assert decision.starts == {2: Placement(None, ())}
    assert set(decision.waiting) == {1, 3}


def test_gpu_free_runs_start_on_a_host_without_gpus() -> None:
    assert starts([run(1, 0), run(2, 1)], {"cpu": []}) == {1: Placement(None, ())}


def test_the_2_1_1_2_sequence_on_two_gpus() -> None:
    queue = [run(1, 2, age=4), run(2, 1, age=3), run(3, 1, age=2), run(4, 2, age=1)]
    # All free: the first 2-GPU run takes both, everyone else waits.
    assert starts(queue, {"h": [0, 1]}) == {1: Placement("h", (0, 1))}
    # Run 1 done: the two 1-GPU runs start together, run 4 waits.
    assert starts(queue[1:], {"h": [0, 1]}) == {
        2: Placement("h", (0,)),
        3: Placement("h", (1,)),
    }
    # One of them done: run 4 cannot fit on the one free GPU; both free: it starts.
    assert starts(queue[3:], {"h": [0]}) == {}
    assert starts(queue[3:], {"h": [0, 1]}) == {4: Placement("h", (0, 1))}


def test_never_fits_is_the_one_rule_for_requests_no_host_can_take() -> None:
    assert never_fits(3, {"a": 2, "b": 1}) == (
        "needs 3 GPUs on one host; no host has that many (the most on one host: 2)"
    )
    assert never_fits(2, {"a": 2, "b": 1}) is None
    assert never_fits(0, {"cpu": 0}) is None
    assert never_fits(5, {}) is None  # no host known: a worker may come with any number


def test_with_no_host_at_all_every_run_waits_for_a_worker() -> None:
    queue = [run(1, 0), run(2, 2)]
    decision = pick(queue, {}, T0, STARVE, capacity_by_host={})
    assert decision.starts == {}
    assert decision.waiting == {1: NO_LIVE_HOST, 2: NO_LIVE_HOST}


def test_a_run_whose_message_is_lost_never_holds_up_another_and_says_so() -> None:
    # Run 1 has starved and would block run 2, but its broker message is lost: until it is
    # sent again it cannot start, so run 2 takes the GPU (issue 27).
    lost = QueuedRun(id=1, gpus=2, priority=0, created_at=T0 - timedelta(seconds=STARVE + 1))
    lost = dataclasses.replace(lost, message_lost=True)
    decision = pick([lost, run(2, 1, age=1)], {"h": [0]}, T0, STARVE)
    assert decision.starts == {2: Placement("h", (0,))}
    assert decision.waiting == {1: MESSAGE_LOST}
    # Nor does it take GPUs it would fit on: a run behind it starts there.
    lost_small = dataclasses.replace(run(1, 1, age=5), message_lost=True)
    assert starts([lost_small, run(2, 1, age=1)], {"h": [0]}) == {2: Placement("h", (0,))}
