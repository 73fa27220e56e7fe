"""What the broker holds of each run, read from Redis itself (issue 39).

A run whose task has not come by a worker for a while is not always lost: when every worker
thread is busy its message waits in the queue, and sending another only piles duplicates up (a
soak saw 180 for 18 runs). So the queue reconciliation (app.runs.state.dispatch) reads the
shared queue's list and the transport's unacknowledged hash (kombu's Redis layout: a list per
queue of JSON envelopes, and ``unacked``/``unacked_index`` keyed by delivery tag) and:

- sends a run again only when its current message is not waiting in the queue;
- drops the messages it has made obsolete (an older message number, a run that is gone): a
  worker killed -9 leaves its taken messages in ``unacked`` for the visibility timeout (days),
  and one would be redelivered, only to be dropped, long after its run was sent again.

Each pool has its queue (app.broker.pool_queue, issue 40): the reads take every pool's queue the
caller names, and a waiting message is removed from the queue it waits in.

The SQL broker of the embedded stack cannot be read this way: ``read_run_messages`` answers
None there, and the caller goes by how long each run's task has not come by.
"""

from __future__ import annotations

import base64
import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from app.broker import RUN_TASK, celery_app, pool_queue
from app.settings import get_settings
from app.settings_pools import LOCAL_POOL

UNACKED = "unacked"
UNACKED_INDEX = "unacked_index"


class BrokerUnreachable(Exception):
    """The broker did not answer a read of its queue (a message sent now would fail too)."""


@dataclass(frozen=True)
class RunMessage:
    run_id: int
    dispatch: int
    waiting: bool  # in the queue; else taken by a worker and not acknowledged
    key: bytes  # the list item itself (waiting) or its delivery tag (taken)
    queue: str = ""  # the queue it waits in (waiting); "" for a taken one


def run_message(envelope: Any) -> tuple[int, int] | None:
    """(run id, message number) of a run task's envelope; None for any other message."""
    try:
        if envelope.get("headers", {}).get("task") != RUN_TASK:
            return None
        body = envelope["body"]
        if envelope.get("properties", {}).get("body_encoding") == "base64":
            body = base64.b64decode(body)
        args = json.loads(body)[0]
        return int(args[0]), int(args[1]) if len(args) > 1 else 0
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        return None


def parse(
    queued: Iterable[bytes], unacked: dict[bytes, bytes], queue: str = ""
) -> list[RunMessage]:
    """The run messages of one snapshot: a queue's items and the unacknowledged hash."""
    found = waiting_in(queue, queued)
    for tag, value in unacked.items():
        try:
            key = run_message(json.loads(value)[0])
        except (ValueError, IndexError, TypeError):
            key = None
        if key is not None:
            found.append(RunMessage(key[0], key[1], False, tag))
    return found


def waiting_in(queue: str, queued: Iterable[bytes]) -> list[RunMessage]:
    """The run messages among one queue's items."""
    found: list[RunMessage] = []
    for item in queued:
        try:
            key = run_message(json.loads(item))
        except ValueError:
            key = None
        if key is not None:
            found.append(RunMessage(key[0], key[1], True, item, queue))
    return found


def snapshot(client: Any, queues: Iterable[str]) -> list[RunMessage]:
    """Every place read in one MULTI/EXEC: a message moving from a queue to a worker between
    two reads would otherwise be counted twice, or not at all."""
    names = list(dict.fromkeys(queues))
    pipe = client.pipeline(transaction=True)
    for queue in names:
        pipe.lrange(queue, 0, -1)
    pipe.hgetall(UNACKED)
    *lists, unacked = pipe.execute()
    found = parse((), unacked)
    for queue, queued in zip(names, lists, strict=True):
        found += waiting_in(queue, queued)
    return found


def pool_queues(pools: Iterable[str]) -> list[str]:
    """The queues of these pools, the local pool's (Celery's default queue) always first."""
    return list(dict.fromkeys(pool_queue(p) for p in (LOCAL_POOL, *pools)))


def _client_call(action: Any) -> Any:
    if not get_settings().resolved_broker_url.startswith("redis"):
        return None
    try:
        with celery_app.connection_for_read() as conn:
            # One try: Celery's own connection retries forever, and this runs inside requests
            # (a queued run's reason) while the broker may be down.
            conn.ensure_connection(max_retries=0)
            return action(conn.default_channel.client)
    except Exception as exc:  # any broker error: it does not answer now
        raise BrokerUnreachable(repr(exc)) from exc


def read_run_messages(pools: Iterable[str] = ()) -> list[RunMessage] | None:
    """Every run message the broker holds in the queues of these pools (the local pool's
    always) and in workers' hands; None where the broker cannot be read (SQL)."""
    queues = pool_queues(pools)
    found: list[RunMessage] | None = _client_call(lambda client: snapshot(client, queues))
    return found


def waiting(messages: Iterable[RunMessage]) -> Counter[tuple[int, int]]:
    """(run id, message number) -> how many such messages wait in the queue."""
    return Counter((m.run_id, m.dispatch) for m in messages if m.waiting)


def drop(client: Any, messages: Iterable[RunMessage]) -> None:
    default = str(celery_app.conf.task_default_queue)
    pipe = client.pipeline(transaction=False)
    for message in messages:
        if message.waiting:
            pipe.lrem(message.queue or default, 1, message.key)
        else:
            pipe.zrem(UNACKED_INDEX, message.key)
            pipe.hdel(UNACKED, message.key)
    pipe.execute()


def drop_run_messages(messages: list[RunMessage]) -> None:
    """Remove these messages from the broker (taken ones: as if acknowledged)."""
    if messages:
        _client_call(lambda client: drop(client, messages))


def forget_taken(delivery_tag: str) -> None:
    """Remove a message a worker took from the unacknowledged hash, as its acknowledgement
    would. A task that retries after its worker reconnected (a Redis restarted with its
    data) acknowledges on a channel that is gone: its taken copy would stay beside the retry
    for the visibility timeout (days). Nothing where the broker is not Redis."""

    def remove(client: Any) -> None:
        pipe = client.pipeline(transaction=True)
        pipe.zrem(UNACKED_INDEX, delivery_tag)
        pipe.hdel(UNACKED, delivery_tag)
        pipe.execute()

    _client_call(remove)
