"""Event streams cannot starve each other: one user's streams on a run with 100,000 keys do not
delay another user's stream, and a user past the per-user stream limit gets a 429 naming it.
Against a real uvicorn server (the streams' polls share its thread pool)."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select, update

from app.auth.models import User
from app.db import session_scope
from app.runs.models import Run
from app.runs.streams.events import KEY_WINDOW
from tests.conftest import make_user
from tests.factories import add_metric_keys, add_run
from tests.stack import free_port, start_logged, stop_process, wait_healthy
from tests.waits import wait_for
from torchyard.compose.processes import server_argv

# Its streams poll on threads of their own while the test reads them: one rolled-back
# connection cannot serve both (conftest app_sessions), so this module commits.
pytestmark = pytest.mark.committed("event streams poll on threads of their own")

KEYS = 100_000
STREAM_LIMIT = 6


def run_of(username: str, keys: int) -> int:
    """A running run of `username` with `keys` metric keys of one point each."""
    with session_scope() as session:
        owner = session.scalars(select(User).where(User.username == username)).one()
        run_id = add_run(session, owner_id=owner.id, status="running")
        add_metric_keys(session, run_id=run_id, keys=[f"k/{i:06d}" for i in range(keys)])
    return run_id


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    logs = tmp_path_factory.mktemp("fairness")
    env = dict(os.environ, TORCHYARD_SSE_MAX_STREAMS_PER_USER=str(STREAM_LIMIT))
    port = free_port()
    log_file = Path(logs) / "server.log"
    proc = start_logged(server_argv("127.0.0.1", port), env, log_file)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(base, proc, log_file)
        yield base
    finally:
        stop_process(proc)


class Reader(threading.Thread):
    """Holds one event stream open, noting when its first event came."""

    def __init__(self, base: str, run_id: int, headers: dict[str, str]) -> None:
        super().__init__(daemon=True)
        self.url = f"{base}/api/runs/{run_id}/events"
        self.headers = headers
        self.started = time.monotonic()
        self.first_event: float | None = None
        self.events = 0  # metrics events read
        self.status: int | None = None
        self.stop = threading.Event()

    def run(self) -> None:
        with (
            httpx.Client(timeout=60) as client,
            client.stream("GET", self.url, headers=self.headers) as response,
        ):
            self.status = response.status_code
            for line in response.iter_lines():
                if line.startswith("event: metrics"):
                    self.events += 1
                    if self.first_event is None:
                        self.first_event = time.monotonic() - self.started
                if self.stop.is_set():
                    return


def test_a_users_streams_on_a_huge_run_do_not_delay_another_users_first_event(
    server: str,
) -> None:
    a_name, _, a_headers = make_user()
    b_name, _, b_headers = make_user()
    huge = run_of(a_name, KEYS)
    small = run_of(b_name, 3)
    readers = [Reader(server, huge, a_headers) for _ in range(STREAM_LIMIT)]
    try:
        for r in readers:
            r.start()
        wait_for(
            lambda: all(r.first_event is not None for r in readers),
            timeout=60,
            what="every stream's first event",
        )
        assert all(r.status == 200 for r in readers)
        # The six streams are now sweeping the 100,000 keys: each past its first window.
        wait_for(lambda: all(r.events >= 2 for r in readers), timeout=60, what="second windows")

        # One more of A's streams: 429, and the body names the limit.
        with httpx.stream(
            "GET", f"{server}/api/runs/{huge}/events", headers=a_headers, timeout=30
        ) as refused:
            assert refused.status_code == 429
            assert f"at most {STREAM_LIMIT} per user" in refused.read().decode()

        b = Reader(server, small, b_headers)
        b.start()
        b.join(timeout=0)
        try:
            wait_for(lambda: b.first_event is not None, timeout=30, every=0.01, what="B's event")
        finally:
            b.stop.set()
        print(f"user B's first event after {b.first_event:.3f} s")
        assert b.first_event is not None and b.first_event < 1.0
    finally:
        for r in readers:
            r.stop.set()


def test_a_finished_runs_stream_sends_every_key_across_windows_then_ends(client) -> None:
    name, _, headers = make_user()
    run_id = run_of(name, KEY_WINDOW + 500)
    with session_scope() as session:
        session.execute(update(Run).where(Run.id == run_id).values(status="succeeded"))
    body = client.get(f"/api/runs/{run_id}/events", headers=headers).text
    keys = set()
    for line in body.splitlines():
        if line.startswith("data: ") and '"series"' in line:
            keys.update(json.loads(line[6:])["series"])
    assert len(keys) == KEY_WINDOW + 500
