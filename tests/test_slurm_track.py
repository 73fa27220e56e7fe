"""How a Slurm job's last known state ends its run (worker.slurm.track.final_status), for the
states a test cluster cannot easily give: a job Slurm forgot while it ran (no accounting to
ask), and a COMPLETED job without an exit code (squeue's text format, no sacct). The states a
real cluster gives (NODE_FAIL, TIMEOUT, sbatch's refusal) are in
tests/test_slurm_executor_ops.py."""

from __future__ import annotations

from pathlib import Path

from app.db import session_scope
from app.runs.models import Run
from app.runs.state.status import RunStatus
from tests.test_heartbeat import started_run
from worker.slurm.commands import SlurmJob
from worker.slurm.track import final_status


def job(state: str, exit_code: int | None = None, reason: str | None = None) -> SlurmJob:
    return SlurmJob("41", "torchyard-run-1-1", "", state, reason, None, exit_code, None, ())


def ended_as(run_id: int) -> tuple[RunStatus, str | None]:
    with session_scope() as session:
        run = session.get(Run, run_id)
        assert run is not None
        return run.status, run.error


def test_a_completed_job_without_an_exit_code_succeeds(tmp_path: Path) -> None:
    run = started_run(tmp_path)
    assert final_status(run, job("COMPLETED"), None, "41") is RunStatus.succeeded
    assert ended_as(run.run_id) == (RunStatus.succeeded, None)


def test_a_job_slurm_forgot_while_it_ran_fails_saying_its_end_is_unknown(tmp_path: Path) -> None:
    run = started_run(tmp_path)
    assert final_status(run, job("RUNNING"), None, "41") is RunStatus.failed
    status, error = ended_as(run.run_id)
    assert status is RunStatus.failed
    assert "Slurm job 41 was last seen RUNNING, then Slurm no longer knew it" in (error or "")
    assert "no accounting storage" in (error or "")
    assert "its end is unknown" in (tmp_path / "output.log").read_text()


def test_a_timed_out_job_fails_naming_the_slurm_time_limit(tmp_path: Path) -> None:
    run = started_run(tmp_path)
    assert final_status(run, job("TIMEOUT", reason="TimeLimit"), None, "41") is RunStatus.failed
    error = ended_as(run.run_id)[1] or ""
    said = "Slurm job 41: TIMEOUT (TimeLimit): the run reached its Slurm time limit"
    assert error.startswith(said), error
