"""The scheduler's pure decision: order, single-host fit, backfill, starvation, gpus: 0, and
multi-node runs (gang scheduling)."""

from __future__ import annotations

import dataclasses
import random
from datetime import UTC, datetime, timedelta

from app.gpus.scheduler import (
    MESSAGE_LOST,
    NO_LIVE_HOST,
    WAITING_FOR_SLOT,
    Placement,
    QueuedRun,
    never_fits,
    pick,
    queue_order,
)

T0 = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
STARVE = 300.0


def run(id: int, gpus: int, *, priority: int = 0, age: float = 0.0, nodes: int = 1) -> QueuedRun:
    """A run submitted `age` seconds before T0 (ids follow submit order in these tests)."""
    return QueuedRun(
        id=id, gpus=gpus, priority=priority, created_at=T0 - timedelta(seconds=age), nodes=nodes
    )


def starts(queue, free, *, now=T0, **kw) -> dict[int, Placement]:
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


def test_a_run_whose_message_waits_in_the_broker_says_it_waits_for_a_worker_slot() -> None:
    # Its task has not come by for long, but its message is in the broker's queue: every worker
    # thread is busy. Not "lost" (issue 39: the page said lost for runs whose workers were busy),
    # and like a lost one it holds up nobody until a worker takes it.
    waiting = dataclasses.replace(run(1, 1, age=STARVE + 1), message_waiting=True)
    decision = pick([waiting, run(2, 1, age=1)], {"h": [0]}, T0, STARVE)
    assert decision.starts == {2: Placement("h", (0,))}
    assert decision.waiting == {1: WAITING_FOR_SLOT}
    assert "free worker slot" in WAITING_FOR_SLOT and "lost" in MESSAGE_LOST


# --- multi-node runs (gang scheduling) ----------------------------------------------------


def test_a_multi_node_run_gets_every_nodes_gpus_in_one_decision_or_none() -> None:
    gang = run(1, 2, nodes=2)
    decision = pick([gang], {"a": [0, 1], "b": [1]}, T0, STARVE)
    assert decision.starts == {}
    assert decision.waiting[1] == (
        "waiting for 2 hosts with 2 free GPUs each: b: 1 of 2 free, needs 1 more"
    )
    got = starts([gang], {"a": [0, 1], "b": [2, 3], "c": [0, 1, 2]})
    # best fit: the two fullest hosts that fit, node 0 the fullest (then by name)
    assert got == {1: Placement("a", (0, 1), nodes=(("a", (0, 1)), ("b", (2, 3))))}


def test_the_asking_host_is_node_0_of_its_multi_node_run() -> None:
    got = starts([run(1, 1, nodes=2)], {"a": [0], "b": [0]}, asking=(1, "b"))
    assert got == {1: Placement("b", (0,), nodes=(("b", (0,)), ("a", (0,))))}


def test_a_multi_node_run_never_doubles_up_on_one_host() -> None:
    decision = pick([run(1, 2, nodes=2)], {"a": [0, 1, 2, 3]}, T0, STARVE)
    assert decision.starts == {}
    assert "only 1 live" in decision.waiting[1]


def test_two_two_node_runs_on_two_hosts_of_two_gpus_one_starts_whole_the_other_holds_none() -> None:
    queue = [run(1, 2, nodes=2, age=2), run(2, 2, nodes=2, age=1)]
    decision = pick(queue, {"a": [0, 1], "b": [0, 1]}, T0, STARVE)
    assert decision.starts == {1: Placement("a", (0, 1), nodes=(("a", (0, 1)), ("b", (0, 1))))}
    assert decision.waiting[2] == (
        "waiting for 2 hosts with 2 free GPUs each: "
        "a: 0 of 2 free, needs 2 more; b: 0 of 2 free, needs 2 more"
    )
    # Asked from either host, by either run: the first one, whole, or nothing.
    for host in ("a", "b"):
        for asking in (1, 2):
            got = starts(queue, {"a": [0, 1], "b": [0, 1]}, asking=(asking, host))
            assert set(got) == {1} and {h for h, _ in got[1].nodes} == {"a", "b"}


def test_backfill_never_takes_the_gpus_a_waiting_multi_node_run_needs() -> None:
    queue = [run(1, 2, nodes=2, age=10), run(2, 1, age=5)]
    # a's two free GPUs are the gang's: the 1-GPU run may not take one of them
    decision = pick(queue, {"a": [0, 1], "b": [0]}, T0, STARVE)
    assert decision.starts == {}
    assert decision.waiting[2] == "waiting for 1 free GPUs on one host"
    # a host the gang does not need takes it
    assert starts(queue, {"a": [0, 1], "b": [0], "c": [5]}, capacity_by_host=CAP3) == {
        2: Placement("c", (5,))
    }
    # and a GPU beyond the gang's share on its own host
    assert starts(queue, {"a": [0, 1, 2], "b": [0]}) == {2: Placement("a", (0,))}


CAP3 = {"a": 2, "b": 2, "c": 1}


def test_reservations_add_up_for_several_waiting_multi_node_runs() -> None:
    queue = [run(1, 2, nodes=2, age=3), run(2, 1, nodes=2, age=2), run(3, 1, age=1)]
    decision = pick(queue, {"a": [0, 1, 2], "b": [0, 1, 2], "c": [0]}, T0, STARVE)
    # all fit: run 1 on a and b, run 2 on what is left of them, run 3 on c
    assert set(decision.starts) == {1, 2, 3}
    # Run 1 waits for b, keeping a's two GPUs and b's; run 2 then fits only on c and waits
    # too, keeping c's and one more of a's; run 3 finds nothing that is not kept.
    decision = pick(queue, {"a": [0, 1], "b": [0], "c": [0]}, T0, STARVE)
    assert decision.starts == {}
    assert decision.waiting[2] == (
        "waiting for 2 hosts with 1 free GPUs each: a: 0 of 1 free, needs 1 more"
    )
    assert decision.waiting[3] == "waiting for 1 free GPUs on one host"


def test_a_multi_node_run_that_can_never_fit_blocks_nobody_and_says_why() -> None:
    queue = [run(1, 2, nodes=3, age=STARVE + 1), run(2, 1, age=1)]
    decision = pick(queue, {"a": [0], "b": [0, 1]}, T0, STARVE, capacity_by_host={"a": 2, "b": 2})
    assert decision.starts == {2: Placement("a", (0,))}
    assert decision.waiting[1] == (
        "needs 3 hosts with 2 GPUs each; only 2 of the 2 live hosts have that many (a, b)"
    )


def test_a_starving_multi_node_run_stops_backfill_everywhere() -> None:
    queue = [run(1, 2, nodes=2, age=STARVE + 1), run(2, 1, age=1)]
    decision = pick(queue, {"a": [0, 1], "b": [0], "c": [0]}, T0, STARVE)
    assert decision.starts == {}
    assert "run 1 has waited too long" in decision.waiting[2]


def test_a_multi_node_run_without_gpus_needs_hosts_only_and_is_never_blocked() -> None:
    queue = [run(1, 2, age=STARVE + 1), run(2, 0, nodes=2, age=1)]
    got = starts(queue, {"a": [], "b": [0]})
    assert got == {2: Placement("a", (), nodes=(("a", ()), ("b", ())))}
    decision = pick([run(1, 0, nodes=3)], {"a": []}, T0, STARVE, capacity_by_host={"a": 0})
    assert decision.waiting[1] == "needs 3 hosts; only 1 are live"


def test_never_fits_counts_hosts_for_multi_node_runs() -> None:
    assert never_fits(2, {"a": 2, "b": 2}, nodes=2) is None
    assert never_fits(2, {"a": 2, "b": 1}, nodes=2) == (
        "needs 2 hosts with 2 GPUs each; only 1 of the 2 live hosts have that many (a)"
    )
    assert never_fits(0, {"a": 0}, nodes=2) == "needs 2 hosts; only 1 are live"
    assert never_fits(8, {}, nodes=4) is None


def test_no_gpu_is_ever_given_twice_and_no_run_gets_part_of_its_nodes() -> None:
    rng = random.Random(30)
    for _ in range(2000):
        hosts = {f"h{i}": list(range(rng.randint(0, 4))) for i in range(rng.randint(1, 4))}
        free = {h: [g for g in gpus if rng.random() < 0.7] for h, gpus in hosts.items()}
        queue = [
            run(i, rng.randint(0, 3), nodes=rng.choice([1, 1, 2, 3]), age=rng.uniform(0, 600))
            for i in range(1, rng.randint(2, 7))
        ]
        capacity = {h: len(g) for h, g in hosts.items()}
        decision = pick(queue, free, T0, STARVE, capacity_by_host=capacity)
        given: set[tuple[str, int]] = set()
        for run_id, placement in decision.starts.items():
            asked = next(r for r in queue if r.id == run_id)
            nodes = placement.nodes or ((placement.host, placement.gpu_indices),)
            assert len(nodes) == asked.nodes and len({h for h, _ in nodes}) == asked.nodes
            for host, indices in nodes:
                assert len(indices) == asked.gpus
                for index in indices:
                    assert index in free[str(host)] and (str(host), index) not in given
                    given.add((str(host), index))
        assert set(decision.starts) | set(decision.waiting) == {r.id for r in queue}
