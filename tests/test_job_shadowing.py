"""A user's folder may hold modules named like torchyard's own top-level packages: the job
imports only ``torchyard``, so the script's ``worker.py`` and ``app.py`` are the script's."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.conftest import WORKSPACE_DIR, wait_for_status

pytestmark = pytest.mark.slow

SCRIPT_DIR = Path(__file__).parent / "workspace_scripts" / "shadowed"


def test_a_script_beside_its_own_worker_and_app_modules_logs_through_torchyard(
    live_stack,  # type: ignore[no-untyped-def]
) -> None:
    target = WORKSPACE_DIR / "shadowed"
    shutil.copytree(SCRIPT_DIR, target, dirs_exist_ok=True)
    with live_stack.admin_client() as api:
        exp = api.post(
            "/api/experiments",
            json={"name": "shadowed", "config": {"script": "shadowed/train.py", "seed": 3}},
        )
        assert exp.status_code == 201, exp.text
        run = api.post(f"/api/experiments/{exp.json()['id']}/runs").json()
        done = wait_for_status(api, run["id"], {"succeeded", "failed", "cancelled"}, timeout=180)
        log = api.get(f"/api/runs/{run['id']}/logs").text
        assert done["status"] == "succeeded", (done.get("error"), log[-2000:])
        assert f"from {target / 'worker.py'}" in log
        got = api.get(f"/api/runs/{run['id']}/metrics", params={"keys": "shadow/value"}).json()
        series = got["series"]["shadow/value"]
        assert series["step"] == list(range(1, 21))
        assert series["value"] == [s * 0.5 for s in range(1, 21)]
