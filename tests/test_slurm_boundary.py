"""The job boundary on the cluster (issue 40; worker.slurm.boundary): a Slurm run's job runs
inside the sandbox a local run gets, on a real cluster (tests/slurm_cluster.py) and a real
Slurm worker running as root (as the tests' cluster does). One run of
tests/workspace_scripts/boundary_probe.py looks past its boundary; each test reads one part of
what it found: its uid is the run's (not root), it reads none of the files the local sandbox
hides, the host's loopback does not answer it, and the run's own variables reach it only
through the handoff, never through the batch script. Without Slurm the module skips, except
on CI (CI=true), where it fails."""

from __future__ import annotations

import json
import re
import shutil
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from app.settings import get_settings
from tests.conftest import DATA_DIR, WORKSPACE_DIR
from tests.slurm_cluster import slurm_cluster
from tests.test_slurm_executor import POOL, SlurmStack, ended, slurm_stack
from tests.waits import wait_for
from torchyard.contract import RunPaths
from worker.sandbox import run_uid

pytestmark = pytest.mark.slow

SCRIPT = "slurm/boundary_probe.py"
SHADOW = "/etc/shadow"


@dataclass(frozen=True)
class Probed:
    run: dict
    found: dict
    batch_script: Path
    hidden: tuple[str, ...]


def _batch_script(stack: SlurmStack, job_id: str) -> Path:
    """The job's script, where Slurm says it ran it from."""
    shown = stack.cluster.run("scontrol", "show", "job", job_id).stdout
    command = re.search(r"Command=(\S+)", shown)
    assert command is not None, shown
    return Path(command.group(1))


@pytest.fixture(scope="module")
def probed(database: str) -> Iterator[Probed]:
    target = WORKSPACE_DIR / SCRIPT
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(Path(__file__).parent / "workspace_scripts" / "boundary_probe.py", target)
    hidden = [SHADOW, str(DATA_DIR / "broker-boundary.db")]  # the broker's file, in the data dir
    url = make_url(database)
    if url.get_backend_name() == "sqlite" and url.database:
        hidden.append(str(Path(url.database).resolve()))  # the server's database
    with (
        socket.socket() as listener,
        slurm_cluster() as cluster,
        slurm_stack(cluster, "boundary") as stack,
    ):
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        params: dict[str, object] = {
            "port": listener.getsockname()[1],
            "read": ",".join(hidden),
            "env": "PROBE_VALUE",
        }
        config = {
            "script": SCRIPT,
            "params": params,
            "env": {"PROBE_VALUE": "from-the-run"},
            "resources": {"nproc": 1, "gpus": 0, "cpus": 1, "memory_gb": 1, "pool": POOL},
        }
        api = stack.api
        exp = api.post("/api/experiments", json={"name": "slurm-boundary", "config": config})
        assert exp.status_code == 201, exp.text
        created = api.post(f"/api/experiments/{exp.json()['id']}/runs", json={})
        assert created.status_code == 201, created.text
        run = ended(api, int(created.json()["id"]))
        log = RunPaths(get_settings().run_dir(run["id"])).log.read_text()
        lines = [line for line in log.splitlines() if line.startswith("PROBE ")]
        assert run["status"] == "succeeded" and lines, f"{run}\n{log[-3000:]}"
        script = _batch_script(stack, run["external_id"])
        yield Probed(run, json.loads(lines[-1].removeprefix("PROBE ")), script, tuple(hidden))


def test_a_slurm_runs_job_runs_as_the_runs_uid_not_root(probed: Probed) -> None:
    settings = get_settings()
    uid = run_uid(probed.run["id"], settings.job_uid_base, settings.job_uid_count)
    assert probed.found["uid"] == probed.found["euid"] == uid != 0


def test_a_slurm_runs_job_reads_none_of_what_the_local_sandbox_hides(probed: Probed) -> None:
    read = probed.found["read"]
    assert set(read) == set(probed.hidden)
    leaked = {path: how for path, how in read.items() if how == "read"}
    assert not leaked, f"the job read {sorted(leaked)}"


def test_a_slurm_runs_job_cannot_reach_the_hosts_loopback(probed: Probed) -> None:
    assert probed.found["loopback"] != "connected"


def test_a_runs_env_reaches_its_slurm_job_only_through_the_handoff(probed: Probed) -> None:
    """The run's variable is the job's (env_handoff, after the drop), and the batch script,
    which runs as root on the node, exports none of the run's variables."""
    assert probed.found["env"] == {"PROBE_VALUE": "from-the-run"}
    script = probed.batch_script.read_text()
    assert "PROBE_VALUE" not in script
    assert "from-the-run" not in script
    # Its descriptor files (the job's environment) are gone once the job has ended.
    folder = probed.batch_script.parent
    wait_for(lambda: not list(folder.glob("attempt-1.fd*")), timeout=30, what="fd files gone")
