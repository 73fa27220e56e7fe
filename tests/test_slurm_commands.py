"""worker/slurm/commands.py against a real slurmctld and slurmd (tests/slurm_cluster.py: one
node, two fake GPUs, no accounting database): submit, the states and reasons Slurm reports,
exit codes and signals, cancel within 10 s, unknown ids; and its parsers on Slurm's text."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.slurm_cluster import SlurmCluster, command, slurm_cluster
from tests.waits import wait_for
from worker.slurm import commands
from worker.slurm.commands import SlurmError, SlurmJob, cancel, find, query, submit

# Writes its pid into $TY_DIR, waits there for a file named `release`, exits with $TY_CODE; a
# SIGUSR1 is written down as a file named `usr1`.
JOB = """#!/bin/sh
trap 'touch "$TY_DIR/usr1"' USR1
echo $$ > "$TY_DIR/pid"
echo "seen=$TY_SEEN secret=$TY_SECRET"
while [ ! -e "$TY_DIR/release" ]; do sleep 0.1; done
exit "$TY_CODE"
"""


@pytest.fixture(scope="module")
def cluster() -> Iterator[SlurmCluster]:
    with slurm_cluster() as started:
        yield started


@pytest.fixture
def job_dir(cluster: SlurmCluster, tmp_path: Path) -> Iterator[Path]:
    """The job script at job.sh; every job of the cluster cancelled after the test."""
    (tmp_path / "job.sh").write_text(JOB)
    yield tmp_path
    cluster.end_jobs()


def start(job_dir: Path, name: str, *options: str, code: int = 0) -> str:
    folder = job_dir / name
    folder.mkdir()
    argv = [f"--job-name={name}", f"--output={folder / 'out.txt'}", *options]
    return submit(job_dir / "job.sh", argv, env={"TY_DIR": str(folder), "TY_CODE": str(code)})


def state_of(job_id: str, *states: str) -> SlurmJob | None:
    """The job once it is in one of `states`, else None (for wait_for)."""
    job = query([job_id]).get(job_id)
    return job if job is not None and job.state in states else None


def last(job_id: str) -> str:
    return repr(query([job_id]).get(job_id))


@pytest.mark.slow
def test_a_submitted_job_runs_with_its_name_comment_and_node(job_dir: Path) -> None:
    job_id = start(job_dir, "torchyard-run-7", "--gres=gpu:1", "--comment=run 7 attempt 1")
    job = wait_for(lambda: state_of(job_id, "RUNNING"), timeout=30, what=lambda: last(job_id))
    assert job == SlurmJob(
        job_id=job_id,
        name="torchyard-run-7",
        comment="run 7 attempt 1",
        state="RUNNING",
        reason=None,
        start_estimate=None,
        exit_code=None,
        signal=None,
        nodes=("node-0",),
    )
    assert not job.ended
    assert [j.job_id for j in find("torchyard-run-")] == [job_id]
    assert find("torchyard-run-8") == [] and find("other-") == []
    (job_dir / "torchyard-run-7" / "release").touch()
    done = wait_for(lambda: state_of(job_id, "COMPLETED"), timeout=30, what=lambda: last(job_id))
    assert (done.exit_code, done.signal, done.ended) == (0, None, True)
    assert find("torchyard-run-") == []  # ended: nothing to re-adopt


@pytest.mark.slow
def test_a_job_needing_both_gpus_waits_for_resources_with_a_start_estimate(
    job_dir: Path,
) -> None:
    first = start(job_dir, "first", "--gres=gpu:1", "--time=10")
    wait_for(lambda: state_of(first, "RUNNING"), timeout=30, what=lambda: last(first))
    second = start(job_dir, "second", "--gres=gpu:2", "--time=5")
    # the backfill scheduler (every second) plans it at the first's end: its 10 minutes
    waiting = wait_for(
        lambda: (j := state_of(second, "PENDING")) and j.reason == "Resources" and j.start_estimate,
        timeout=30,
        what=lambda: last(second),
    )
    assert isinstance(waiting, datetime)
    assert timedelta(minutes=9) < waiting - datetime.now(UTC) <= timedelta(minutes=10, seconds=5)
    assert query([second])[second].nodes == ()
    cancel(first)
    wait_for(lambda: state_of(second, "RUNNING"), timeout=30, what=lambda: last(second))


@pytest.mark.slow
@pytest.mark.timed
def test_cancel_ends_a_running_job_within_10_s(job_dir: Path) -> None:
    job_id = start(job_dir, "to-cancel")
    wait_for(lambda: (job_dir / "to-cancel" / "pid").exists(), timeout=30, what=last(job_id))
    pid = int((job_dir / "to-cancel" / "pid").read_text())
    began = time.monotonic()
    cancel(job_id)
    job = wait_for(lambda: state_of(job_id, "CANCELLED"), timeout=10, what=lambda: last(job_id))
    wait_for(lambda: not Path(f"/proc/{pid}").exists(), timeout=10, what=f"pid {pid} gone")
    assert time.monotonic() - began < 10
    assert (job.exit_code, job.signal, job.reason) == (None, 15, None)
    cancel(job_id)  # again: no error
    cancel(job_id, signal="TERM")  # a signal to an ended job: no error either


@pytest.mark.slow
def test_a_signal_reaches_the_batch_script_without_ending_the_job(job_dir: Path) -> None:
    job_id = start(job_dir, "signalled")
    wait_for(lambda: (job_dir / "signalled" / "pid").exists(), timeout=30, what=last(job_id))
    cancel(job_id, signal="USR1")
    wait_for(lambda: (job_dir / "signalled" / "usr1").exists(), timeout=30, what=last(job_id))
    assert query([job_id])[job_id].state == "RUNNING"


@pytest.mark.slow
def test_exit_codes_and_signals_of_ended_jobs(job_dir: Path) -> None:
    failing = start(job_dir, "failing", code=3)
    killed = start(job_dir, "killed")
    wait_for(lambda: (job_dir / "killed" / "pid").exists(), timeout=30, what=last(killed))
    (job_dir / "failing" / "release").touch()
    os.kill(int((job_dir / "killed" / "pid").read_text()), 9)

    def both_ended() -> dict[str, SlurmJob] | None:
        got = query([failing, killed])
        return got if len(got) == 2 and all(job.ended for job in got.values()) else None

    ended = wait_for(both_ended, timeout=30, what=lambda: repr(query([failing, killed])))
    assert (ended[failing].state, ended[failing].exit_code, ended[failing].signal) == (
        "FAILED",
        3,
        None,
    )
    assert ended[failing].reason == "NonZeroExitCode"
    assert (ended[killed].state, ended[killed].exit_code, ended[killed].signal) == (
        "FAILED",
        None,
        9,
    )


@pytest.mark.slow
def test_a_node_failure_ends_a_job_or_requeues_it(cluster: SlurmCluster, job_dir: Path) -> None:
    kept_ended = start(job_dir, "no-requeue", "--no-requeue")
    requeued = start(job_dir, "requeue")
    wait_for(lambda: state_of(kept_ended, "RUNNING"), timeout=30, what=lambda: last(kept_ended))
    wait_for(lambda: state_of(requeued, "RUNNING"), timeout=30, what=lambda: last(requeued))
    assert query([requeued])[requeued].restarts == 0
    cluster.fail_node("node-0")

    def settled(job_id: str, state: str) -> SlurmJob | None:
        """In `state`, with its reason known."""
        job = state_of(job_id, state)
        return job if job is not None and job.reason else None

    failed = wait_for(
        lambda: settled(kept_ended, "NODE_FAIL"), timeout=30, what=lambda: last(kept_ended)
    )
    # the signal (15) comes once the node's slurmd reports the job's end, if it ever does
    assert (failed.reason, failed.exit_code, failed.ended) == ("NodeDown", None, True)
    again = wait_for(lambda: settled(requeued, "PENDING"), timeout=30, what=lambda: last(requeued))
    assert (again.restarts, again.reason, again.nodes, again.ended) == (1, "BeginTime", (), False)
    assert [j.job_id for j in find("requeue")] == [requeued]


@pytest.mark.slow
def test_unknown_ids_are_absent_and_cancel_of_one_is_no_error(job_dir: Path) -> None:
    assert query([]) == {}
    assert query(["987654"]) == {}  # slurmctld has no such job; sacct: accounting is off
    cancel("987654")


@pytest.mark.slow
def test_sbatch_errors_are_raised_with_its_message(job_dir: Path) -> None:
    with pytest.raises(SlurmError, match="Invalid partition name specified"):
        submit(job_dir / "job.sh", ["--partition=nope"])
    with pytest.raises(SlurmError, match="Requested node configuration is not available"):
        submit(job_dir / "job.sh", ["--gres=gpu:3"])


@pytest.mark.slow
def test_the_job_gets_the_given_env_and_none_of_the_agents_secrets(
    job_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TY_SECRET", "s3cret")
    folder = job_dir / "env"
    folder.mkdir()
    (folder / "release").touch()
    job_id = submit(
        job_dir / "job.sh",
        [f"--output={folder / 'out.txt'}"],
        env={"TY_DIR": str(folder), "TY_CODE": "0", "TY_SEEN": "yes"},
    )
    wait_for(lambda: state_of(job_id, "COMPLETED"), timeout=30, what=lambda: last(job_id))
    assert (folder / "out.txt").read_text().splitlines() == ["seen=yes secret="]


@pytest.mark.slow
def test_squeues_text_format_agrees_with_its_json(job_dir: Path) -> None:
    """The reading of a Slurm without --json, checked against 22.05's JSON (no exit codes)."""
    running = start(job_dir, "torchyard-run-a", "--gres=gpu:1", "--comment=a", "--time=10")
    wait_for(lambda: state_of(running, "RUNNING"), timeout=30, what=lambda: last(running))
    pending = start(job_dir, "torchyard-run-b", "--gres=gpu:2", "--time=5")
    wait_for(
        lambda: (j := state_of(pending, "PENDING")) and j.reason and j.start_estimate,
        timeout=30,
        what=lambda: last(pending),
    )
    by_json = {j.job_id: j for j in commands._squeue() if j.job_id in (running, pending)}
    by_text = {j.job_id: j for j in commands._squeue_text() if j.job_id in (running, pending)}
    assert by_text == by_json


def test_node_lists_are_expanded() -> None:
    expand = commands.expand_hostlist
    assert expand("") == ()
    assert expand("node-0") == ("node-0",)
    assert expand("node-[0-1]") == ("node-0", "node-1")
    assert expand("gpu[08-10,3],login1") == ("gpu08", "gpu09", "gpu10", "gpu3", "login1")
    assert expand("r[1-2]n[1-2]") == ("r1n1", "r1n2", "r2n1", "r2n2")


def test_sacct_lines_of_ended_jobs_are_read() -> None:
    """Lines as `sacct --parsable2 --allocations --format=JobID,JobName,Comment,State,Reason,
    Start,ExitCode,NodeList` prints them (accounting is off on the test cluster)."""
    parse = commands.parse_sacct_line
    assert parse("41|torchyard-run-7|run 7|CANCELLED by 0|None|2026-12-06T16:28:54|0:15|n[1-2]")
    cancelled = parse("41|torchyard-run-7|run 7|CANCELLED by 0|None|Unknown|0:15|n[1-2]")
    assert cancelled == SlurmJob(
        job_id="41",
        name="torchyard-run-7",
        comment="run 7",
        state="CANCELLED",
        reason=None,
        start_estimate=None,
        exit_code=None,
        signal=15,
        nodes=("n1", "n2"),
    )
    failed = parse("42|x||FAILED|NonZeroExitCode|2026-12-06T16:28:54|3:0|node-0")
    assert failed is not None and (failed.exit_code, failed.signal) == (3, None)
    assert parse("42.batch|batch||FAILED||2026-12-06T16:28:54|3:0|node-0") is None
    assert (
        parse("43|a|b|c|PENDING|Priority|Unknown|0:0|None assigned") is None
    )  # a '|' in the comment
    pending = parse("44|y||PENDING|Priority|Unknown|0:0|None assigned")
    assert pending is not None and (pending.reason, pending.exit_code, pending.nodes) == (
        "Priority",
        None,
        (),
    )


def test_exit_codes_of_newer_slurms_json_are_read() -> None:
    """23.02 and later: the exit code an object, numbers as {set, infinite, number}."""
    signalled = {
        "status": ["SIGNALED"],
        "return_code": {"set": True, "number": 0},
        "signal": {"id": {"set": True, "number": 9}, "name": "KILL"},
    }
    exited = {"status": ["ERROR"], "return_code": {"set": True, "number": 3}}
    assert commands._exit(signalled) == (None, 9)
    assert commands._exit(exited) == (3, None)
    assert commands._exit(768) == (3, None) and commands._exit(15) == (None, 15)
    assert commands._number({"set": True, "infinite": True, "number": 0}) is None


@pytest.mark.slow
def test_a_submit_host_without_sacct_reads_what_slurmctld_holds(
    job_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No accounting client at all (only squeue on PATH): a job slurmctld still holds is read
    from squeue, one it holds no more is absent (ended unseen), never an error."""
    only = tmp_path / "bin"
    only.mkdir()
    (only / "squeue").symlink_to(command("squeue"))
    job_id = start(job_dir, "no-sacct")
    monkeypatch.setenv("PATH", str(only))
    assert query([job_id])[job_id].job_id == job_id
    assert query(["987654"]) == {}


@pytest.mark.slow
def test_a_node_out_of_service_gives_its_reason(cluster: SlurmCluster, job_dir: Path) -> None:
    node = cluster.node_names[0]
    assert commands.node_reasons([node]) == {}  # in service: no reason
    cluster.stop_node(node)  # a dead node's slurmd: it stays down
    try:
        cluster.fail_node(node, "disk on fire")
        assert commands.node_reasons([node, "no-such-node"]) == {node: "disk on fire"}
    finally:
        cluster.start_node(node)
        wait_for(
            lambda: cluster.node_states().get(node) == "idle",
            timeout=60,
            what=lambda: f"{node} idle: {cluster.node_states()}",
        )
