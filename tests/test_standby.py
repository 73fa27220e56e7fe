"""An upgrade's SIGTERM of the server under `torchyard up`, with 4 event streams open (issue 27):
the process is gone within 5 s and the API answers again within 15 s, because `up` hands the
port to its spare server, which did its imports ahead of time (torchyard/compose/standby.py). A
fresh server's imports alone took 25-45 s of wall time on a loaded box."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.stack import free_port
from tests.test_cli_up import _alive, _end, _health, _start_up, _token, serving_pid
from tests.waits import wait_for

pytestmark = pytest.mark.slow


class Output(threading.Thread):
    """The rest of `up`'s output, read as it comes (the pipe must never fill up)."""

    def __init__(self, stream: object) -> None:
        super().__init__(daemon=True)
        self.stream = stream
        self.lines: list[str] = []

    def run(self) -> None:
        try:
            for line in self.stream:  # type: ignore[attr-defined]
                self.lines.append(line)
        except ValueError:  # closed by the test's end
            return

    def count(self, text: str) -> int:
        return sum(text in line for line in list(self.lines))


class Stream(threading.Thread):
    """One open run event stream, read to its end."""

    def __init__(self, url: str, headers: dict[str, str]) -> None:
        super().__init__(daemon=True)
        self.url, self.headers = url, headers
        self.lines: list[str] = []
        self.ended: str | BaseException | None = None

    def run(self) -> None:
        try:
            with httpx.stream("GET", self.url, headers=self.headers, timeout=60) as r:
                for line in r.iter_lines():
                    self.lines.append(line)
            self.ended = "end of stream"
        except BaseException as e:  # noqa: BLE001 - reported by the test
            self.ended = e


def test_sigterm_of_the_server_under_up_it_answers_again_within_15_s(tmp_path: Path) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc, password = _start_up(tmp_path, port)
    output = Output(proc.stdout)
    output.start()
    try:
        headers = {"Authorization": f"Bearer {_token(base, password, time.monotonic() + 90)}"}
        config = {"recipe": "tiny_mlp", "params": {"epochs": 50, "step_sleep": 0.05}}
        with httpx.Client(base_url=base, headers=headers, timeout=30) as api:
            exp = api.post("/api/experiments", json={"name": "standby", "config": config})
            run_id = api.post(f"/api/experiments/{exp.json()['id']}/runs").json()["id"]
        streams = [Stream(f"{base}/api/runs/{run_id}/events", headers) for _ in range(4)]
        for stream in streams:
            stream.start()
        wait_for(
            lambda: all(s.lines for s in streams), timeout=30, what="4 streams open and talking"
        )
        # The state an upgrade finds: `up` running for a while, its spare ready.
        wait_for(
            lambda: output.count("spare server is ready"),
            timeout=180,
            what=lambda: f"the spare ready: {output.lines[-20:]}",
        )
        server = serving_pid(proc.pid, port)
        stopped_at = time.monotonic()
        os.kill(server, signal.SIGTERM)
        wait_for(lambda: not _alive(server), timeout=5, what="the server gone within 5 s")
        gone = time.monotonic() - stopped_at
        wait_for(
            lambda: _health(base),
            timeout=15,
            every=0.1,
            what=lambda: f"answering within 15 s: {output.lines[-30:]}",
        )
        back = time.monotonic() - stopped_at
        for stream in streams:
            stream.join(timeout=5)
            assert stream.ended == "end of stream", stream.ended
        assert serving_pid(proc.pid, port) != server
        # A new spare for the next time, once the new server has had its moment.
        wait_for(
            lambda: output.count("spare server is ready") >= 2,
            timeout=180,
            what=lambda: f"a new spare: {output.lines[-20:]}",
        )
        print(f"SIGTERM under up, 4 streams: gone in {gone:.2f} s, answering in {back:.2f} s")
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=90) == 0
    finally:
        if proc.poll() is None:  # its children hold the output pipe open until `up` ends them
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                pass
        output.join(timeout=10)
        _end(proc)
