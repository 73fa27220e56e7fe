"""SIGTERM of the API with event streams open (issue 27, item 3): the streams end at once with a
reconnect hint, the process is gone within 5 s (it used to wait for every stream's run to end:
a viewer on a long run kept it alive, refusing connections, for minutes), and a client that
reconnects to the restarted server with Last-Event-ID gets exactly what it missed.

A server of its own (tests/own_server.py): the run is made "running" by hand, so nothing but
the stop can end its streams."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import httpx
import pytest
from sqlalchemy.orm import Session

from app.runs.state import lifecycle
from app.timeutil import utcnow
from tests.own_server import OwnServer, own_server
from tests.waits import wait_for

pytestmark = pytest.mark.slow

STREAMS = 4
CONFIG = {"recipe": "tiny_mlp", "params": {"epochs": 1}}


class Viewer(threading.Thread):
    """One open event stream, read to its end: its raw lines and how it ended."""

    def __init__(self, server: OwnServer, headers: dict[str, str], run_id: int) -> None:
        super().__init__(daemon=True)
        self.url = f"{server.base_url}/api/runs/{run_id}/events"
        self.headers = headers
        self.lines: list[str] = []
        self.ended: BaseException | str | None = None

    def run(self) -> None:
        try:
            with httpx.stream("GET", self.url, headers=self.headers, timeout=30) as r:
                r.raise_for_status()
                for line in r.iter_lines():
                    self.lines.append(line)
            self.ended = "end of stream"
        except BaseException as e:  # noqa: BLE001 - reported by the test
            self.ended = e

    def last_id(self) -> str:
        return [line for line in self.lines if line.startswith("id: ")][-1][4:]


def _running_run(server: OwnServer, headers: dict[str, str]) -> int:
    with server.client(headers) as api:
        exp = api.post("/api/experiments", json={"name": "stop", "config": CONFIG})
        assert exp.status_code == 201, exp.text
        created = api.post(f"/api/experiments/{exp.json()['id']}/runs")
        assert created.status_code == 201, created.text
    run_id = int(created.json()["id"])
    with Session(server.engine) as session:
        assert lifecycle.start(
            session, run_id=run_id, host="box-1", gpu_indices="", started_at=utcnow()
        )
        session.commit()
    return run_id


def _append_log(server: OwnServer, run_id: int, text: str) -> None:
    run_dir = server.directory / "data" / "runs" / str(run_id)
    run_dir.mkdir(parents=True, exist_ok=True)
    with open(run_dir / "output.log", "a") as f:
        f.write(text)


def test_sigterm_ends_the_streams_and_the_server_is_gone_within_5_s(tmp_path: Path) -> None:
    with own_server(tmp_path) as server:
        _, headers = server.user("alice")
        run_id = _running_run(server, headers)
        _append_log(server, run_id, "epoch 1\n")
        viewers = [Viewer(server, headers, run_id) for _ in range(STREAMS)]
        for viewer in viewers:
            viewer.start()
        wait_for(
            lambda: all(any("epoch 1" in line for line in v.lines) for v in viewers),
            timeout=20,
            what=lambda: f"the log line on {STREAMS} streams: {[v.lines for v in viewers]}",
        )
        assert server.proc is not None
        stopped_at = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        server.proc.wait(timeout=15)
        took = time.monotonic() - stopped_at
        assert took < 5, f"the server took {took:.1f} s to stop with {STREAMS} streams open"
        for viewer in viewers:
            viewer.join(timeout=5)
            # Ended by the server, cleanly, asking the client to come back soon.
            assert viewer.ended == "end of stream", viewer.ended
            assert "retry: 1000" in viewer.lines, viewer.lines[-5:]
        print(f"SIGTERM with {STREAMS} streams open: process gone in {took:.2f} s")

        # The restarted server: a client back with Last-Event-ID misses nothing, sees nothing twice.
        server.start()
        _append_log(server, run_id, "epoch 2\n")
        again = viewers[0]
        resumed = httpx.Client(base_url=server.base_url, headers=headers, timeout=30)
        with (
            resumed,
            resumed.stream(
                "GET", f"/api/runs/{run_id}/events", headers={"Last-Event-ID": again.last_id()}
            ) as r,
        ):
            assert r.status_code == 200
            got: list[str] = []
            for line in r.iter_lines():
                got.append(line)
                if "epoch 2" in line:
                    break
        text = "\n".join(got)
        assert "epoch 2" in text and "epoch 1" not in text, text
