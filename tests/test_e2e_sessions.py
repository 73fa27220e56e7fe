"""Sessions end to end (issue 42): a real server and worker (fake GPU inventory "0"), a real
JupyterLab in the job's sandbox, reached only through torchyard's proxy over HTTP and a
kernel's WebSocket; the GPU leased while it runs and free after stop; a notebook saved in it
kept in the run's files."""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from collections.abc import Iterator

import httpx
import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from tests.code_archives import tar_gz
from tests.conftest import ADMIN_PASSWORD, BASE_DIR, make_user, wait_for_status
from tests.stack import (
    LiveStack,
    fake_gpu_stack,
    free_port,
    own_broker_url,
    start_logged,
    stop_process,
    wait_healthy,
)
from tests.waits import wait_for
from torchyard.compose.processes import server_argv

pytestmark = pytest.mark.slow

SESSION_BROKER_URL = own_broker_url(BASE_DIR / "session-broker.db")
LOG_DIR = BASE_DIR / "logs-sessions"
HOST = "sess-a"


def stack_env(**extra: str) -> dict[str, str]:
    return dict(
        os.environ,
        TORCHYARD_BROKER_URL=SESSION_BROKER_URL,
        TORCHYARD_RUN_HEARTBEAT_SECONDS="1",
        PYTHONUNBUFFERED="1",
        **extra,
    )


@pytest.fixture(scope="module")
def stack(database: str) -> Iterator[LiveStack]:
    with fake_gpu_stack(
        stack_env(), LOG_DIR, host=HOST, gpus="0", concurrency=2, admin_password=ADMIN_PASSWORD
    ) as live:
        yield live


def lab_up(client: httpx.Client, run_id: int, timeout: float = 240) -> None:
    """Until the session's JupyterLab answers through the proxy (409 while it starts)."""
    seen: list[str] = [""]

    def answered() -> bool:
        r = client.get(f"/sessions/{run_id}/lab/api/status")
        seen[0] = f"{r.status_code} {r.text[:300]}"
        return r.status_code == 200

    wait_for(answered, timeout=timeout, every=0.5, what=lambda: f"lab of {run_id}: {seen[0]}")


def gpu_holder(client: httpx.Client) -> int | None:
    hosts = client.get("/api/gpus").json()
    host = next(h for h in hosts["hosts"] if h["host"] == HOST)
    return host["gpus"][0]["run_id"]


def execute(ws_url: str, headers: dict[str, str], code: str) -> str:
    """`code` run by the kernel over its WebSocket (Jupyter's JSON messages); its stdout."""
    msg_id = uuid.uuid4().hex
    request = {
        "header": {
            "msg_id": msg_id,
            "username": "test",
            "session": uuid.uuid4().hex,
            "msg_type": "execute_request",
            "version": "5.3",
            "date": "",
        },
        "parent_header": {},
        "metadata": {},
        "content": {"code": code, "silent": False, "store_history": False},
        "channel": "shell",
        "buffers": [],
    }
    out: list[str] = []
    with connect(ws_url, additional_headers=headers, open_timeout=30, max_size=None) as ws:
        ws.send(json.dumps(request))
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            msg = json.loads(ws.recv(timeout=deadline - time.monotonic()))
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            if msg["msg_type"] == "stream":
                out.append(msg["content"]["text"])
            if msg["msg_type"] == "error":
                raise AssertionError(msg["content"])
            if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                return "".join(out)
    raise AssertionError(f"no answer to the execute request; stdout so far {out}")


def test_session_through_the_proxy(stack: LiveStack) -> None:
    _owner, _pw, headers = make_user()
    _other, _pw2, other_headers = make_user()
    with stack.client(headers) as owner, stack.client(other_headers) as other:
        archive = tar_gz([("hello.py", "file", b"print('hello from the snapshot')\n")])
        uploaded = owner.post("/api/code", files={"file": ("code.tar.gz", archive)})
        assert uploaded.status_code in (200, 201), uploaded.text
        body = {"gpus": 1, "hours": 1, "code": uploaded.json()["digest"]}
        created = owner.post("/api/sessions", json=body)
        assert created.status_code == 201, created.text
        run_id = created.json()["run"]["id"]
        assert created.json()["url"].endswith(f"/sessions/{run_id}/lab/")
        wait_for_status(owner, run_id, {"running"}, timeout=240)
        lab_up(owner, run_id)
        assert gpu_holder(owner) == run_id  # the scheduler leased its GPU

        base = f"/sessions/{run_id}/lab"
        listed = owner.get(f"{base}/api/contents")
        assert listed.status_code == 200, listed.text
        assert listed.json()["type"] == "directory"
        # The code snapshot's files are its work folder.
        assert "hello.py" in {item["name"] for item in listed.json()["content"]}, listed.json()
        page = owner.get(f"{base}/lab")  # JupyterLab's own page, its assets found
        assert page.status_code == 200 and "JupyterLab" in page.text, page.text[:500]
        assets = re.findall(r'(?:src|href)="(/sessions/[^"]*/static/[^"]+)"', page.text)
        assert assets, page.text[:1000]
        for asset in assets[:3]:  # served through the proxy too
            assert owner.get(asset).status_code == 200, asset
        # Another member, and nobody signed in: refused by torchyard, never reaching Jupyter.
        assert other.get(f"{base}/api/contents").status_code == 403
        assert httpx.get(f"{stack.base_url}{base}/api/contents").status_code == 401

        notebook = {
            "type": "notebook",
            "content": {
                "cells": [],
                "metadata": {},
                "nbformat": 4,
                "nbformat_minor": 5,
            },
        }
        saved = owner.put(f"{base}/api/contents/kept.ipynb", json=notebook)
        assert saved.status_code in (200, 201), saved.text

        kernel = owner.post(f"{base}/api/kernels", json={"name": "python3"})
        assert kernel.status_code == 201, kernel.text
        ws_base = stack.base_url.replace("http://", "ws://") + base
        ws_url = f"{ws_base}/api/kernels/{kernel.json()['id']}/channels"
        out = execute(ws_url, headers, "import torch; print(torch.__version__)")
        import torch

        assert out.strip() == torch.__version__
        with pytest.raises(InvalidStatus):  # the WebSocket refuses another member too
            execute(ws_url, other_headers, "print(1)")

        assert owner.post(f"/api/runs/{run_id}/cancel").status_code == 202
        wait_for_status(owner, run_id, {"cancelled", "succeeded", "failed"}, timeout=120)
        wait_for(lambda: gpu_holder(owner) is None, timeout=30, what="the GPU freed")
        files = owner.get(f"/api/runs/{run_id}/files")
        assert files.status_code == 200, files.text
        assert "kept.ipynb" in {f["path"] for f in files.json()}, files.json()


def test_idle_session_is_ended_with_its_files(stack: LiveStack) -> None:
    """A second API process with a short idle limit (its periodic round checks every second)
    ends a session nobody uses; the notebook saved before stays in its files."""
    port = free_port()
    env = stack_env(TORCHYARD_SESSION_IDLE_MINUTES="0.25", TORCHYARD_SESSION_CHECK_SECONDS="1")
    log = LOG_DIR / "server-idle.log"
    server = start_logged(server_argv("127.0.0.1", port), env, log)
    try:
        base_url = f"http://127.0.0.1:{port}"
        wait_healthy(base_url, server, log)
        _owner, _pw, headers = make_user()
        with httpx.Client(base_url=base_url, headers=headers, timeout=30) as owner:
            created = owner.post("/api/sessions", json={"gpus": 1, "hours": 2})
            assert created.status_code == 201, created.text
            run_id = created.json()["run"]["id"]
            wait_for_status(owner, run_id, {"running"}, timeout=240)
            lab_up(owner, run_id)
            saved = owner.put(
                f"/sessions/{run_id}/lab/api/contents/idle.txt",
                json={"type": "file", "format": "text", "content": "kept"},
            )
            assert saved.status_code in (200, 201), saved.text
            ended = wait_for_status(owner, run_id, {"cancelled", "failed"}, timeout=120)
            assert ended["status"] == "cancelled", ended
            assert any("idle" in line for line in ended["notices"]), ended["notices"]
            wait_for(lambda: gpu_holder(owner) is None, timeout=30, what="the GPU freed")
            files = {f["path"] for f in owner.get(f"/api/runs/{run_id}/files").json()}
            assert "idle.txt" in files, files
    finally:
        stop_process(server)
