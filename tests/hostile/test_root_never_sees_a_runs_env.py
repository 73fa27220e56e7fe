"""Issue 37: a run's environment reaches its own processes only, after the privilege drop.

The hole: config.env ``LD_AUDIT=<a library in the member's snapshot>`` was handed to every
process the root worker starts for the job (the keeper, the network helper, bwrap,
slirp4netns, nsenter, ip, setpriv), and the library ran as euid 0 in all of them. Here a real
root worker's chain (the keeper, the egress helper and its tools, bwrap, setpriv, the handoff)
starts a job whose environment carries a member's library in every loader variable, and the
job's own processes (python, bash) must load it, as its uid, while no process does as root.
On e30f233 the keeper, bwrap and every helper loaded it as root.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.hostile.marker_library import build, loaded_by
from worker import job_network, sandbox
from worker.launcher import Launch
from worker.process import JobProcess

JOB_UID = 200_037
# The job: python (the library preloaded into it), then bash (BASH_ENV runs a script).
JOB = "import subprocess; subprocess.run(['bash', '-c', 'true'], check=True)"
BASH_ENV_SCRIPT = 'touch "{markers}/$(id -u)-$$"\n'


@pytest.fixture
def box() -> Iterator[Path]:
    """A folder every uid may enter (pytest's tmp_path is root's 0700)."""
    root = Path(tempfile.mkdtemp(prefix="torchyard-hostile-"))
    root.chmod(0o755)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_a_loader_variable_in_a_runs_env_runs_nothing_as_root(box: Path) -> None:
    assert os.geteuid() == 0, "the hostile suite runs as root, as a team's worker does"
    isolation = sandbox.decide("bwrap", 200_000)
    plan = job_network.plan("egress", ())
    assert isolation.enabled and isolation.as_root and plan.egress, (isolation.reason, plan)
    run_dir = box / "run"
    run_dir.mkdir()
    markers = run_dir / "markers"  # where root outside and the job inside both write
    library = build(box, markers)
    bash_env = box / "bash_env.sh"
    bash_env.write_text(BASH_ENV_SCRIPT.format(markers=markers))
    env = {
        "PATH": "/usr/bin:/bin",
        "LD_AUDIT": str(library),
        "LD_PRELOAD": str(library),
        "BASH_ENV": str(bash_env),
        "ENV": str(bash_env),
        "TORCHYARD_JOB_TOKEN": "hostile",
    }
    spec = sandbox.SandboxSpec(
        run_dir=run_dir,
        home=run_dir,
        read_only=(*sandbox.interpreter_paths(), box),
        uid=JOB_UID,
        bwrap=isolation.bwrap,
        setpriv=isolation.setpriv,
    )
    sandbox.own_run_dir(run_dir, run_dir, JOB_UID)
    launch = Launch(argv=[sys.executable, "-c", JOB], env=env, cwd=run_dir)
    launch = job_network.attach(sandbox.wrap(launch, spec), plan)
    log = box / "job.log"
    job = JobProcess(launch, log_path=log, cwd=run_dir, token="hostile", sandboxed=True)
    assert job.wait() == 0, log.read_text()
    loaded = loaded_by(markers)
    assert 0 not in loaded, f"a run's library ran as root in: {sorted(set(loaded[0]))}"
    # The variables were in force where they belong: the job's own python and bash.
    assert sorted(loaded) == [JOB_UID], loaded
    assert any(Path(exe).name.startswith("python") for exe in loaded[JOB_UID]), loaded
    assert len(loaded[JOB_UID]) >= 3, loaded  # python, bash (library), bash (BASH_ENV)
