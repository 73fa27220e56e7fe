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
from worker.slurm.track import final_status, recorded_end


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


def test_a_forgotten_jobs_end_is_its_batch_steps_record_of_that_job_only(tmp_path: Path) -> None:
    record = tmp_path / "attempt-1.exit"
    assert recorded_end(record, "41") is None  # none written (cancelled, its node lost)
    record.write_text("job=40 exit=0\n")  # an earlier job's: not this one's end
    assert recorded_end(record, "41") is None
    record.write_text("job=41 exit=0\n")
    done = recorded_end(record, "41")
    assert done is not None and done.ended and (done.state, done.exit_code) == ("COMPLETED", 0)
    record.write_text("job=41 exit=1\n")
    failed = recorded_end(record, "41")
    assert failed is not None and (failed.state, failed.exit_code) == ("FAILED", 1)


def test_a_job_forgotten_with_a_failed_record_fails_with_the_ranks_exception(
    tmp_path: Path,
) -> None:
    run = started_run(tmp_path)
    (tmp_path / "output.log").write_text(
        "Traceback (most recent call last):\nRuntimeError: rank 1 fails on purpose at step 3\n"
    )
    record = tmp_path / "attempt-1.exit"
    record.write_text("job=41 exit=1\n")
    assert final_status(run, recorded_end(record, "41"), None, "41") is RunStatus.failed
    assert "rank 1 fails on purpose" in (ended_as(run.run_id)[1] or "")
