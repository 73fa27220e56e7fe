"""A script runs as it would under ``python train.py`` from its own folder: that folder's
``worker.py`` and ``app.py`` are the script's (the job imports only ``torchyard``), a relative
``./data/file.txt`` beside it is found, and what it writes stays in the run's own directory
(listed and downloadable), not in the shared workspace."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.conftest import WORKSPACE_DIR, wait_for_status

pytestmark = pytest.mark.slow

SCRIPT_DIR = Path(__file__).parent / "workspace_scripts" / "shadowed"


def test_a_script_runs_as_from_its_folder_and_logs_through_torchyard(
    live_stack,
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
        assert "read: beside the script" in log
        files = {f["path"]: f for f in api.get(f"/api/runs/{run['id']}/files").json()}
        assert list(files) == ["written-by-the-run.txt"]  # the folder's own files are links
        got_file = api.get(f"/api/runs/{run['id']}/files/written-by-the-run.txt")
        assert got_file.status_code == 200 and got_file.text == "mine"
        assert not (target / "written-by-the-run.txt").exists()
        got = api.get(f"/api/runs/{run['id']}/metrics", params={"keys": "shadow/value"}).json()
        series = got["series"]["shadow/value"]
        assert series["step"] == list(range(1, 21))
        assert series["value"] == [s * 0.5 for s in range(1, 21)]
