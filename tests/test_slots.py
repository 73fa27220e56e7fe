"""A worker's run slots and build places (worker/slots.py): a building run holds no run slot,
both are bounded, a finished build moves into a run slot (issue 39). The worker end to end:
tests/test_liveness.py's run that needs no build, started while two others build."""

from __future__ import annotations

from worker.slots import Slots


def test_a_run_that_needs_no_build_gets_a_slot_while_the_build_places_are_taken() -> None:
    slots = Slots(runs=2, builds=2)
    builds = [slots.claim(needs_build=True) for _ in range(2)]
    assert all(b is not None for b in builds)
    assert slots.claim(needs_build=True) is None  # the build pool is bounded
    quick = slots.claim(needs_build=False)
    assert quick is not None and slots.counts() == (1, 2)
    assert slots.claim(needs_build=False) is not None
    assert slots.claim(needs_build=False) is None  # both run slots taken


def test_a_finished_build_moves_into_a_run_slot_and_every_place_is_given_back_once() -> None:
    slots = Slots(runs=1, builds=1)
    build = slots.claim(needs_build=True)
    assert build is not None
    build.built()
    assert slots.counts() == (1, 0)
    assert slots.claim(needs_build=False) is None  # the built run trains in the slot
    assert slots.claim(needs_build=True) is not None  # the build place is free again
    build.release()
    build.release()
    assert slots.counts() == (0, 1)
