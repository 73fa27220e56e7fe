"""A run's limits hold on the real stack (worker/limits.py, worker/cgroups.py): a fork bomb, a
memory hog and a disk filler are each stopped at their run's limit with an error that names
it, while another user's run succeeds and logins answer within a second."""

from __future__ import annotations

import secrets
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import WORKSPACE_DIR, wait_for_status
from tests.waits import wait_for

pytestmark = pytest.mark.slow

SCRIPTS = Path(__file__).parent / "workspace_scripts"
FINISHED = {"succeeded", "failed", "cancelled"}
LOGIN_SECONDS = 1.0
# A box so loaded that a login alone takes more than a quarter of LOGIN_SECONDS (8 test
# sessions on 2 cores) gets a bound of this many times its own slowest login before the jobs.
LOADED_BOX_FACTOR = 4


@pytest.fixture(scope="module")
def member(live_stack) -> Iterator[tuple[httpx.Client, dict[str, str]]]:
    """A member's API client and its login form."""
    login = {"username": f"member-{secrets.token_hex(3)}", "password": secrets.token_urlsafe(12)}
    with live_stack.admin_client() as admin:
        added = admin.post("/api/users", json={**login, "role": "member"})
        assert added.status_code == 201, added.text
    token = httpx.post(f"{live_stack.base_url}/api/auth/token", data=login).json()
    with live_stack.client({"Authorization": f"Bearer {token['access_token']}"}) as client:
        yield client, login


def launch(api: httpx.Client, config: dict, name: str) -> dict:
    exp = api.post("/api/experiments", json={"name": name, "config": config})
    assert exp.status_code == 201, exp.text
    run = api.post(f"/api/experiments/{exp.json()['id']}/runs", json={})
    assert run.status_code == 201, run.text
    return dict(run.json())


def timed_login(base_url: str, login: dict[str, str]) -> float:
    started = time.monotonic()
    answer = httpx.post(f"{base_url}/api/auth/token", data=login, timeout=30)
    assert answer.status_code == 200, answer.text
    return time.monotonic() - started


def script(name: str, resources: dict) -> dict:
    target = WORKSPACE_DIR / "limits"
    target.mkdir(parents=True, exist_ok=True)
    shutil.copy(SCRIPTS / name, target / name)
    return {"script": f"limits/{name}", "resources": resources}


def test_jobs_past_their_limits_end_naming_them_while_others_carry_on(live_stack, member) -> None:
    api, login = member
    hostile: dict[str, tuple[dict[str, float], str]] = {
        "fork_bomb.py": ({"max_processes": 200}, "too many processes: the run's limit is 200"),
        "memory_hog.py": ({"memory_gb": 0.5}, "out of memory: the run's limit is 0.5 GiB"),
        "disk_filler.py": ({"disk_gb": 0.2}, "disk full: the run's limit is 0.2 GB"),
    }
    before = [timed_login(live_stack.base_url, login) for _ in range(5)]  # the box's own pace
    runs = {name: launch(api, script(name, res), name) for name, (res, _) in hostile.items()}
    with live_stack.admin_client() as admin:
        config = {"recipe": "tiny_mlp", "params": {"epochs": 1, "steps_per_epoch": 2}, "seed": 1}
        other = launch(admin, config, "another user's run")
        logins: list[float] = []

        def all_finished() -> bool:
            logins.append(timed_login(live_stack.base_url, login))
            ids = [r["id"] for r in runs.values()] + [other["id"]]
            statuses = [admin.get(f"/api/runs/{i}").json()["status"] for i in ids]
            return all(s in FINISHED for s in statuses)

        wait_for(all_finished, timeout=240, every=0.2, what="the four runs to finish")
        assert wait_for_status(admin, other["id"], FINISHED)["status"] == "succeeded"
    for name, (_, message) in hostile.items():
        done = wait_for_status(api, runs[name]["id"], FINISHED)
        log = api.get(f"/api/runs/{runs[name]['id']}/logs").text
        assert done["status"] == "failed", (name, done, log[-2000:])
        assert done["error"].startswith(message), (name, done["error"], log[-2000:])
    median = sorted(logins)[len(logins) // 2]
    print(f"logins: slowest of {len(before)} before {max(before):.3f} s, of {len(logins)} ", end="")
    print(f"while the jobs ran {max(logins):.3f} s (median {median:.3f} s)")
    assert max(logins) < max(LOGIN_SECONDS, LOADED_BOX_FACTOR * max(before)), (before, logins)
