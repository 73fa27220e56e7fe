"""app/sql_broker.py on a real SQLite broker file through kombu: an idle poll of an unchanged
file sends no statement, a message another process commits is taken at the next poll, and the
database is asked again once RECHECK_SECONDS passed even when the file looks unchanged."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from queue import Empty
from typing import Any

import pytest
from kombu.connection import Connection
from sqlalchemy import event

from app import sql_broker
from app.sql_broker import GatedChannel, gate_sqlite_polls

PUBLISH = """
import sys
from kombu.connection import Connection
with Connection(sys.argv[1]) as conn:
    conn.SimpleQueue(sys.argv[2]).put({"run": 7})
"""


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[tuple[str, Any, list[str]]]:
    """A broker URL on a file of its own, a consumer's queue on it, and the statements its
    channel's engine sends from now on."""
    gate_sqlite_polls()
    url = f"sqla+sqlite:///{tmp_path / 'broker.db'}"
    with Connection(url) as conn:
        queue = conn.SimpleQueue("jobs")
        channel = conn.default_channel
        assert isinstance(channel, GatedChannel)
        sent: list[str] = []
        engine = channel.session.bind

        def count(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
            sent.append(statement)

        event.listen(engine, "before_cursor_execute", count)
        try:
            yield url, queue, sent
        finally:
            event.remove(engine, "before_cursor_execute", count)
            queue.close()


def test_polls_of_an_unchanged_file_send_no_statement(broker: tuple[str, Any, list[str]]) -> None:
    _, queue, sent = broker
    with pytest.raises(Empty):
        queue.get(block=False)  # asks the database: nothing yet
    assert sent
    asked = len(sent)
    for _ in range(50):
        with pytest.raises(Empty):
            queue.get(block=False)
    assert len(sent) == asked, sent[asked:]


def test_a_message_another_process_commits_is_taken_at_the_next_poll(
    broker: tuple[str, Any, list[str]],
) -> None:
    url, queue, _ = broker
    with pytest.raises(Empty):
        queue.get(block=False)
    subprocess.run([sys.executable, "-c", PUBLISH, url, "jobs"], check=True, timeout=60)
    message = queue.get(block=False)  # at once: not after RECHECK_SECONDS
    assert message.payload == {"run": 7}
    message.ack()
    with pytest.raises(Empty):
        queue.get(block=False)


def test_the_database_is_asked_again_after_the_recheck_interval(
    broker: tuple[str, Any, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, queue, sent = broker
    clock = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    with pytest.raises(Empty):
        queue.get(block=False)
    asked = len(sent)
    clock[0] += sql_broker.RECHECK_SECONDS / 2
    with pytest.raises(Empty):
        queue.get(block=False)
    assert len(sent) == asked
    clock[0] += sql_broker.RECHECK_SECONDS
    with pytest.raises(Empty):
        queue.get(block=False)
    assert len(sent) > asked
