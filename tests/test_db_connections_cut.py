"""The database cuts the API's connections (pg_terminate_backend, as a failover or an admin
does) three times under load (issue 27 item 5): no request answers 500 (a request whose
connection was cut answers 503 with Retry-After; the pool's pre-ping gives the next one a
fresh connection), and an open event stream carries on and ends with the run's final status.

PostgreSQL only (the fault is PostgreSQL's): a database of its own, a server with no worker;
the run is started and finished by hand."""

from __future__ import annotations

import json
import os
import threading
from collections import Counter
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest
from sqlalchemy import Engine, create_engine
from sqlalchemy.orm import Session

from app.runs.models import RunStatus
from app.runs.state import lifecycle
from app.timeutil import utcnow
from tests.databases import POSTGRES_URL, own_database, user_with_token
from tests.stack import free_port, start_logged, stop_process, wait_healthy
from tests.waits import wait_for
from torchyard.compose.processes import server_argv

pytestmark = pytest.mark.slow

CONFIG = {"recipe": "tiny_mlp", "params": {"epochs": 1}}
CUTS = 3


class Load(threading.Thread):
    """GET /api/runs or POST /api/experiments in a loop: every status code it got."""

    def __init__(self, api: httpx.Client, write: bool, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.api, self.write, self.stop = api, write, stop
        self.codes: Counter[int] = Counter()

    def run(self) -> None:
        n = 0
        while not self.stop.is_set():
            n += 1
            try:
                if self.write:
                    body = {"name": f"e{n}", "config": CONFIG}
                    r = self.api.post("/api/experiments", json=body)
                else:
                    r = self.api.get("/api/runs", params={"limit": 20})
            except httpx.HTTPError:
                self.codes[0] += 1  # no answer at all: counted, and the test fails on it
                continue
            retry_after = r.headers.get("Retry-After")
            self.codes[r.status_code if retry_after == "1" or r.status_code != 503 else 0] += 1

    def done(self) -> int:
        return sum(self.codes.values())


class Stream(threading.Thread):
    """One run event stream, read to its end: the status events it got, and how it ended."""

    def __init__(self, url: str, headers: dict[str, str]) -> None:
        super().__init__(daemon=True)
        self.url, self.headers = url, headers
        self.statuses: list[str] = []
        self.ended: BaseException | str | None = None

    def run(self) -> None:
        try:
            with httpx.stream("GET", self.url, headers=self.headers, timeout=60) as r:
                r.raise_for_status()
                event = ""
                for line in r.iter_lines():
                    if line.startswith("event: "):
                        event = line[7:]
                    elif line.startswith("data: ") and event == "status":
                        self.statuses.append(json.loads(line[6:])["status"])
            self.ended = "end of stream"
        except BaseException as e:  # noqa: BLE001 - reported by the test
            self.ended = e


def _terminate_connections(admin: Engine, database: str) -> int:
    with admin.connect() as conn:
        killed = conn.exec_driver_sql(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = %(db)s AND pid <> pg_backend_pid()",
            {"db": database},
        ).scalar()
    return int(killed or 0)


def test_cut_connections_answer_no_500_and_the_stream_ends_with_the_final_status(
    tmp_path: Path,
) -> None:
    if not POSTGRES_URL:
        if os.environ.get("CI") == "true":
            pytest.fail("TORCHYARD_TEST_POSTGRES_URL is not set: `make test` sets it")
        pytest.skip("needs TORCHYARD_TEST_POSTGRES_URL (make test sets it)")
    admin = create_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT", pool_pre_ping=True)
    with own_database("postgresql", tmp_path, "dbcut") as engine:
        token = user_with_token(engine, "carol")
        headers = {"Authorization": f"Bearer {token}"}
        env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHYARD_")} | {
            "TORCHYARD_DATABASE_URL": engine.url.render_as_string(hide_password=False),
            "TORCHYARD_DATA_DIR": str(tmp_path / "data"),
            "TORCHYARD_BROKER_URL": "memory://",
            "TORCHYARD_WORKSPACE_DIR": str(tmp_path / "workspace"),
            "TORCHYARD_REAP_INTERVAL_SECONDS": "0",
        }
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        server = start_logged(server_argv("127.0.0.1", port), env, tmp_path / "server.log")
        stop = threading.Event()
        stack = ExitStack()
        try:
            wait_healthy(base, server, tmp_path / "server.log")
            api = httpx.Client(base_url=base, headers=headers, timeout=30)
            stack.callback(api.close)
            exp = api.post("/api/experiments", json={"name": "cut", "config": CONFIG})
            run_id = api.post(f"/api/experiments/{exp.json()['id']}/runs").json()["id"]
            with Session(engine) as session:
                assert lifecycle.start(
                    session, run_id=run_id, host="box-1", gpu_indices="", started_at=utcnow()
                )
                session.commit()
            stream = Stream(f"{base}/api/runs/{run_id}/events", headers)
            stream.start()
            wait_for(lambda: stream.statuses, timeout=20, what="the stream's first status")
            loads = [Load(api, write, stop) for write in (False, True, False, True)]
            for load in loads:
                load.start()

            def answered(more: int) -> Callable[[], bool]:
                enough = sum(load.done() for load in loads) + more
                return lambda: sum(load.done() for load in loads) >= enough

            for _ in range(CUTS):
                wait_for(answered(10), timeout=30, what="ten more requests answered")
                assert _terminate_connections(admin, engine.url.database or "") > 0
            # The API goes on: every kind of request answers again after the last cut.
            after = [load.done() for load in loads]
            wait_for(
                lambda: all(load.done() >= n + 3 for load, n in zip(loads, after, strict=True)),
                timeout=30,
                what="each load's requests answered after the last cut",
            )
            stop.set()
            for load in loads:
                load.join(timeout=30)
            with Session(engine) as session:
                assert lifecycle.finish(
                    session,
                    run_id=run_id,
                    attempt=1,
                    status=RunStatus.succeeded,
                    exit_code=0,
                    error=None,
                )
                session.commit()
            stream.join(timeout=30)
            codes = sum((load.codes for load in loads), Counter[int]())
            print(f"{CUTS} cuts under load: status codes {dict(codes)}")
            assert codes[500] == 0, codes
            assert set(codes) <= {200, 201, 503}, codes
            assert stream.ended == "end of stream", stream.ended
            assert stream.statuses[-1] == "succeeded", stream.statuses
        finally:
            stop.set()
            stack.close()
            stop_process(server)
            admin.dispose()
