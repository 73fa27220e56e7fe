"""worker/supervision.py: the one decision tree, the loop acting on the check-in's answer during
a step before the job starts, a stopped build's whole process tree killed, and node k's job held
to its run's limits (real jobs, a real cgroup, the suite's database)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import psutil

from app.db import session_scope
from app.runs.models import Run, RunNode
from app.runs.state import lifecycle
from app.runs.state.answers import CancelOutcome, Standing
from app.runs.state.status import RunStatus
from tests.test_cgroups import HIERARCHY, needs_cgroups
from tests.test_heartbeat import started_run
from tests.test_run_nodes import running_run
from tests.waits import wait_for
from torchyard.contract import JOB_TOKEN_VAR, METRICS_FILE
from worker import cgroups
from worker.env_build import kill_tree
from worker.heartbeat import Watched
from worker.launcher import Launch
from worker.limits import RunLimits, keeper_options
from worker.node_run import NodeRole, supervise_node
from worker.process import JobProcess
from worker.supervise import stopped_before_start
from worker.supervision import Decision, Policy, Seen, StopReason, decide, while_supervised
from worker.supervision_steps import CheckIn

JOB_POLICY = Policy(cancel_grace=2.0, detach=False, shutdown_grace=30.0)


def seen(**what: object) -> Seen:
    state = Seen()
    for key, value in what.items():
        setattr(state, key, value)
    return state


def test_a_limit_hit_comes_before_every_answer_of_the_check_in() -> None:
    for standing in (None, *Standing):
        decided = decide(seen(hit="disk full", standing=standing), JOB_POLICY, ended=False, now=0)
        assert decided == Decision(StopReason.LIMIT, 2.0)


def test_a_handed_over_attempt_is_stopped_at_once_unless_it_ended_by_itself() -> None:
    handed_over = seen(standing=Standing.NOT_OWNED, shutdown_since=0.0)
    assert decide(handed_over, JOB_POLICY, ended=False, now=0) == Decision(StopReason.FENCED, 0.0)
    assert decide(handed_over, JOB_POLICY, ended=True, now=0) is None


def test_a_cancel_gets_the_grace_unless_the_sweeps_rule_stopped_the_trial() -> None:
    for standing in (Standing.CANCEL_REQUESTED, Standing.DELETED):
        asked = seen(standing=standing)
        assert decide(asked, JOB_POLICY, ended=False, now=0) == Decision(StopReason.CANCEL, 2.0)
        early = seen(standing=standing, stopped_early=True)
        assert decide(early, JOB_POLICY, ended=False, now=0) == Decision(StopReason.CANCEL, 0.0)


def test_a_shutdown_detaches_a_job_or_waits_its_grace_and_never_ends_a_meeting() -> None:
    shutting = seen(standing=Standing.OWNED, shutdown_since=100.0)
    detaching = Policy(cancel_grace=2.0, detach=True, shutdown_grace=30.0)
    assert decide(shutting, detaching, ended=False, now=100) == Decision(StopReason.DETACH, None)
    assert decide(shutting, JOB_POLICY, ended=False, now=129.9) is None
    assert decide(shutting, JOB_POLICY, ended=False, now=130) == Decision(StopReason.SHUTDOWN, 2.0)
    # the database away (no answer) does not keep a shutdown waiting
    away = seen(standing=None, unanswered=True, shutdown_since=100.0)
    assert decide(away, Policy(cancel_grace=2.0), ended=False, now=100) is not None
    meeting = Policy(cancel_grace=0.0, shutdown_grace=None)
    assert decide(shutting, meeting, ended=False, now=1e9) is None
    assert decide(seen(standing=Standing.OWNED), JOB_POLICY, ended=False, now=0) is None


def test_a_cancel_during_a_step_before_the_job_is_acted_on(tmp_path: Path) -> None:
    """A step that cannot be stopped (a snapshot's unpack, the job base) runs to its end, but
    the cancel the check-in saw meanwhile is answered with its result and the run ends
    cancelled before its job would start (the check-in's answer was thrown away before)."""
    run = started_run(tmp_path)
    cancel_seen = threading.Event()

    def watch_for_the_cancel(state: Seen) -> None:
        if state.standing is Standing.CANCEL_REQUESTED:
            cancel_seen.set()

    def step() -> str:
        with session_scope() as session:
            assert lifecycle.cancel(session, run_id=run.run_id) is CancelOutcome.REQUESTED
        assert cancel_seen.wait(timeout=30)
        return "unpacked"

    done, stopped = while_supervised(run, step, [CheckIn(run), watch_for_the_cancel])
    assert (done, stopped) == ("unpacked", StopReason.CANCEL)
    assert stopped is not None
    assert stopped_before_start(run, stopped) is RunStatus.cancelled
    with session_scope() as session:
        row = session.get(Run, run.run_id)
        assert row is not None and row.status == RunStatus.cancelled


def test_a_stopped_build_takes_every_process_below_pip_along(tmp_path: Path) -> None:
    """pip's own session is killed, and a process below it that made a session of its own
    (a build backend's daemon) too: nothing writes into a half-built environment after."""
    escapee = "import os, time; os.setsid(); time.sleep(300)"
    pip = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {escapee!r}]);"
            " time.sleep(300)",
        ],
        start_new_session=True,
    )
    below = wait_for(lambda: psutil.Process(pip.pid).children(), timeout=30, what="its child")[0]
    wait_for(lambda: os.getsid(below.pid) == below.pid, timeout=30, what="its own session")
    kill_tree(pip.pid)
    assert pip.wait(timeout=10) == -9
    wait_for(
        lambda: not below.is_running() or below.status() == psutil.STATUS_ZOMBIE,
        timeout=10,
        what="the process that left pip's session gone",
    )


# Writes `sys.argv[1]` MB into its folder, or holds 16 MiB pieces without end; then waits at
# most a minute for a file that never comes, and ends well (what a job without a guard does).
PAST_ITS_LIMIT = (
    "import os, sys, time\n"
    "if sys.argv[1] == 'memory':\n"
    "    held = [bytearray(16 * 2**20) for _ in range(1024)]\n"
    "else:\n"
    "    for n in range(int(sys.argv[1])):\n"
    "        open(f'fill-{n}.bin', 'wb').write(os.urandom(2**20))\n"
    "deadline = time.monotonic() + 60\n"
    "while time.monotonic() < deadline and not os.path.exists('never'): time.sleep(0.05)\n"
)


def node_1_past(tmp_path: Path, limits: RunLimits, what: str) -> tuple[int, RunStatus]:
    """Node 1 of a running two-node run, its job going past `limits` (`what`), supervised as
    its worker does: the run's id and what supervise_node answered."""
    with session_scope() as session:
        run_id = running_run(session)
    run = Watched(run_id, 1, tmp_path / METRICS_FILE, has_leases=False, limits=limits, node=1)
    token = f"sv-{os.getpid()}-{run_id}"
    launch = Launch(
        argv=[sys.executable, "-c", PAST_ITS_LIMIT, what],
        env={**os.environ, JOB_TOKEN_VAR: token},
        cwd=tmp_path,
        keeper_options=tuple(keeper_options(limits, own_uid=False, gpus=True)),
    )
    job = JobProcess(launch, log_path=tmp_path / "output.log", cwd=tmp_path, token=token)
    with job:
        status = supervise_node(run, job, NodeRole(node=1, nodes=2))
    assert job.members() == []
    return run_id, status


def run_error(run_id: int) -> tuple[str, float | None]:
    """The run's error, and when node 1's record says it failed."""
    with session_scope() as session:
        run = session.get(Run, run_id)
        node = session.get(RunNode, (run_id, 1))
        assert run is not None and run.status == RunStatus.failed, run and run.status
        assert node is not None
        return run.error or "", node.failed_at


def test_node_1s_job_past_its_disk_limit_is_stopped_and_the_run_fails_naming_it(
    tmp_path: Path,
) -> None:
    """Node k's loop guards the run's disk limit as node 0's does: the job is stopped (it
    would have waited a minute and ended well), and the run's error names node 1 and the
    limit, dated no later than the job's first write past it."""
    limits = RunLimits(memory_gb=8, cpus=4, disk_gb=0.002, max_processes=4096)
    run_id, status = node_1_past(tmp_path, limits, "5")
    assert status is RunStatus.failed
    error, failed_at = run_error(run_id)
    assert error.startswith("node 1 (b), disk full: the run's limit is 0.002 GB"), error
    written = min(p.stat().st_mtime for p in tmp_path.glob("fill-*.bin"))
    assert failed_at is not None and failed_at <= written + 0.01


@needs_cgroups
def test_node_1s_job_killed_at_its_memory_limit_is_reported_as_that_limit(
    tmp_path: Path,
) -> None:
    assert HIERARCHY is not None
    parent = f"torchyard-test-{os.getpid()}"
    try:
        folders = cgroups.create(HIERARCHY, parent, "node-1", cgroups.Limits(128 * 2**20, 1, 64))
        limits = RunLimits(0.125, 1, 50, 64, cgroup=tuple(str(f) for f in folders))
        run_id, status = node_1_past(tmp_path, limits, "memory")
        assert status is RunStatus.failed
        error, _ = run_error(run_id)
        assert error.startswith("node 1 (b), out of memory: the run's limit is 0.125 GiB"), error
        assert not any(f.exists() for f in folders)  # released with the job's end
    finally:
        cgroups.remove([root / parent for _, root in HIERARCHY.roots])
