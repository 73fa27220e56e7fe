"""Issue 29: a run config's `env` reaches the job's process, through a real server, worker
and job (the launcher and the sandbox between them), and a refused name stores nothing."""

from __future__ import annotations

import pytest

from tests.conftest import WORKSPACE_DIR, wait_for_status

pytestmark = pytest.mark.slow

SCRIPT = """
import os
print("HF_HUB_OFFLINE=" + os.environ.get("HF_HUB_OFFLINE", "<unset>"), flush=True)
print("WANDB_MODE=" + os.environ.get("WANDB_MODE", "<unset>"), flush=True)
"""


def test_a_configs_env_reaches_the_job(live_stack) -> None:
    (WORKSPACE_DIR / "config_env").mkdir(parents=True, exist_ok=True)
    (WORKSPACE_DIR / "config_env" / "show_env.py").write_text(SCRIPT)
    config = {
        "script": "config_env/show_env.py",
        "env": {"HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline"},
    }
    with live_stack.admin_client() as api:
        refused = api.post(
            "/api/experiments",
            json={"name": "env-refused", "config": {**config, "env": {"TORCHYARD_X": "1"}}},
        )
        assert refused.status_code == 422 and "TORCHYARD_X" in refused.text
        exp = api.post("/api/experiments", json={"name": "env", "config": config}).json()
        run = api.post(f"/api/experiments/{exp['id']}/runs").json()
        done = wait_for_status(api, run["id"], {"succeeded", "failed", "cancelled"})
        log = api.get(f"/api/runs/{run['id']}/logs").text
    assert done["status"] == "succeeded", (done["error"], log[-2000:])
    assert "HF_HUB_OFFLINE=1" in log and "WANDB_MODE=offline" in log
