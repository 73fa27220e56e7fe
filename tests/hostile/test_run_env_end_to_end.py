"""Issue 37, end to end on the real stack (server, worker, sandboxed job): a member's snapshot
carries a library and a shell script; its run's `env` names them where the loader, glibc,
bash and Python would read them. The loader's and libc's names are refused (422, naming the
variable); the tools' own (BASH_ENV, ENV, PYTHONSTARTUP, PYTHONUSERBASE, PIP_*, SSL_CERT_FILE)
reach the job, which runs them as its own uid, while no process outside the sandbox (where
root's helpers run) ever runs them: the script's host-side markers folder stays empty."""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.code_archives import tar_gz
from tests.conftest import DATA_DIR, wait_for_status
from worker.snapshots import Snapshots

pytestmark = pytest.mark.slow

SCRIPT = b"""
import os, subprocess
for name in ("BASH_ENV", "ENV", "PYTHONSTARTUP", "PYTHONUSERBASE", "PIP_INDEX_URL",
             "PIP_CONFIG_FILE", "SSL_CERT_FILE"):
    print(f"{name}={os.environ.get(name, '<unset>')}", flush=True)
subprocess.run(["bash", "-c", "true"], check=True)
"""


@pytest.fixture
def markers() -> Iterator[Path]:
    """On the host, where root's helpers would write: the job's own /tmp is its tmpfs."""
    folder = Path(tempfile.mkdtemp(prefix="torchyard-hostile-markers-"))
    folder.chmod(0o1777)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_a_runs_env_runs_the_members_files_only_inside_its_job(live_stack, markers: Path) -> None:
    bash_env = f'echo "BASH_ENV ran as uid $(id -u)"; touch "{markers}/bash-$(id -u)"\n'
    data = tar_gz(
        [
            ("show.py", "file", SCRIPT),
            ("mark.sh", "file", bash_env.encode()),
            ("startup.py", "file", f"open('{markers}/startup', 'w')\n".encode()),
        ]
    )
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    # Where the worker unpacks it (docs/code-snapshots.md): a member can know this path.
    unpacked = Snapshots(DATA_DIR / "snapshots", 0).path(digest)
    env = {
        "BASH_ENV": f"{unpacked}/mark.sh",
        "ENV": f"{unpacked}/mark.sh",
        "PYTHONSTARTUP": f"{unpacked}/startup.py",
        "PYTHONUSERBASE": str(unpacked),
        "PIP_INDEX_URL": "http://127.0.0.1:9/simple",
        "PIP_CONFIG_FILE": f"{unpacked}/pip.conf",
        "SSL_CERT_FILE": f"{unpacked}/ca.pem",
    }
    with live_stack.admin_client() as api:
        up = api.post("/api/code", files={"file": ("code.tar.gz", data)})
        assert up.status_code in (200, 201), up.text
        config = {"script": "show.py", "code": digest}
        for name in ("LD_AUDIT", "LD_PRELOAD", "GCONV_PATH", "MALLOC_CONF"):
            refused = api.post(
                "/api/experiments",
                json={"name": "ld", "config": {**config, "env": {name: f"{unpacked}/x.so"}}},
            )
            assert refused.status_code == 422 and f"{name}:" in refused.text, refused.text
        exp = api.post("/api/experiments", json={"name": "env", "config": {**config, "env": env}})
        assert exp.status_code == 201, exp.text
        run = api.post(f"/api/experiments/{exp.json()['id']}/runs").json()
        done = wait_for_status(api, run["id"], {"succeeded", "failed", "cancelled"}, 180)
        log = api.get(f"/api/runs/{run['id']}/logs").text
    assert done["status"] == "succeeded", (done["error"], log[-3000:])
    for name, value in env.items():
        assert f"{name}={value}" in log, (name, log)
    ran_as = [line.rsplit(" ", 1)[1] for line in log.splitlines() if "BASH_ENV ran as uid" in line]
    assert ran_as and all(uid != "0" for uid in ran_as), log
    # Nothing ran these files outside the job's sandbox (its /tmp is its own tmpfs).
    assert sorted(p.name for p in markers.iterdir()) == []
