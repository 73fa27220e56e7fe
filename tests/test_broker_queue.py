"""Reading and pruning the run messages a Redis broker holds (app.broker_queue), on the suite's
Redis (TORCHYARD_TEST_REDIS_URL) with messages published by a real Celery producer and taken by
a real kombu consumer: the envelope is kombu's, not one written here."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator

import pytest
import redis
from celery import Celery

from app.broker import RUN_TASK, SWEEP_ADVANCE_TASK
from app.broker_queue import RunMessage, drop, snapshot, waiting

REDIS_URL = os.environ.get("TORCHYARD_TEST_REDIS_URL", "")
QUEUE = "ty-broker-queue-test"
OTHER = "ty-broker-queue-test-pool"
# Run ids no stack of the suite reaches: the unacknowledged hash is shared by every queue of the
# test Redis (test_queue_faults' stack may use it at the same time), so only these are looked at.
A, B = 900_000_007, 900_000_008

pytestmark = pytest.mark.skipif(not REDIS_URL.startswith("redis"), reason="no test Redis")


@pytest.fixture
def producer() -> Iterator[tuple[Celery, redis.Redis]]:
    client = redis.Redis.from_url(REDIS_URL)
    client.delete(QUEUE, OTHER)
    app = Celery("broker-queue-test", broker=REDIS_URL)
    try:
        yield app, client
    finally:
        drop(client, mine(snapshot(client, [QUEUE, OTHER])))
        client.delete(QUEUE, OTHER)
        app.close()


def mine(found: list[RunMessage]) -> list[RunMessage]:
    return [m for m in found if m.run_id in (A, B)]


def test_run_messages_waiting_and_taken_are_read_and_obsolete_ones_dropped(
    producer: tuple[Celery, redis.Redis],
) -> None:
    app, client = producer
    for args in ([A, 0], [A, 1], [B, 2]):
        app.send_task(RUN_TASK, args=args, queue=QUEUE)
    app.send_task(SWEEP_ADVANCE_TASK, args=[3], queue=QUEUE)  # not a run message
    # A worker takes one (acks_late: it stays in the unacknowledged hash until acknowledged).
    with app.connection_for_read() as conn:
        simple = conn.SimpleQueue(QUEUE, no_ack=False)
        taken = simple.get(timeout=5)
        found = mine(snapshot(client, [QUEUE]))
        assert sorted((m.run_id, m.dispatch, m.waiting) for m in found) == [
            (A, 0, False),
            (A, 1, True),
            (B, 2, True),
        ]
        assert waiting(found) == Counter({(A, 1): 1, (B, 2): 1})
        # Run A's message 0 is obsolete (its current one is 1): dropped as if acknowledged.
        (old,) = [m for m in found if (m.run_id, m.dispatch) == (A, 0)]
        drop(client, [old])
        left = mine(snapshot(client, [QUEUE]))
        assert sorted((m.run_id, m.dispatch, m.waiting) for m in left) == [
            (A, 1, True),
            (B, 2, True),
        ]
        assert client.zscore("unacked_index", old.key) is None
        taken.ack()  # the worker's own acknowledgement afterwards is harmless
        simple.close()


def test_messages_of_every_pools_queue_are_read_and_dropped_from_the_queue_they_wait_in(
    producer: tuple[Celery, redis.Redis],
) -> None:
    app, client = producer
    app.send_task(RUN_TASK, args=[A, 0], queue=QUEUE)
    app.send_task(RUN_TASK, args=[B, 1], queue=OTHER)  # another pool's queue
    assert [m.run_id for m in mine(snapshot(client, [QUEUE]))] == [A]  # its own queue only
    found = mine(snapshot(client, [QUEUE, OTHER]))
    assert sorted((m.run_id, m.dispatch, m.queue) for m in found) == [
        (A, 0, QUEUE),
        (B, 1, OTHER),
    ]
    drop(client, [m for m in found if m.run_id == B])
    assert client.llen(OTHER) == 0 and client.llen(QUEUE) == 1
