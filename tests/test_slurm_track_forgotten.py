"""A Slurm job that ends and is forgotten by Slurm while no worker runs (issue 40): no
accounting (the test cluster has no slurmdbd: sacct knows nothing) and `MinJobAge` passed (a
cluster of its own with MinJobAge=2: slurmctld purges ended jobs every 10 s, its shortest
purge interval under a MinJobAge below a minute; seconds after the job ends), so
neither squeue nor sacct knows the job when the next worker starts. Its end is the batch
step's record in the attempt's folder (worker.slurm.track.recorded_end): the run succeeds, or
fails with its failing rank's exception, its spool drained: every step once. Without Slurm the
module skips, except on CI (CI=true), where it fails."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.slurm_cluster import slurm_cluster
from tests.test_slurm_executor import (
    SlurmStack,
    assert_every_step_once,
    ended,
    run_of,
    slurm_stack,
    steps,
    submit,
    until,
)
from tests.waits import wait_for
from worker.slurm import boundary, commands

pytestmark = pytest.mark.slow

MIN_JOB_AGE = 2


@pytest.fixture(scope="module")
def stack(database: str) -> Iterator[SlurmStack]:
    with (
        slurm_cluster(min_job_age=MIN_JOB_AGE) as cluster,
        slurm_stack(cluster, "slurm-forgotten") as s,
    ):
        yield s


def forgotten_while_no_worker_runs(stack: SlurmStack, run_id: int) -> str:
    """The run's job, once it has a point; the worker killed, the job left to end and to be
    forgotten by slurmctld (squeue: no such job, sacct: no accounting)."""
    api = stack.api
    job_id = str(
        until(api, run_id, lambda r: r["external_id"] and steps(api, run_id), "a point")[
            "external_id"
        ]
    )
    stack.kill_worker()
    assert run_of(api, run_id)["status"] == "running"
    wait_for(
        lambda: job_id not in commands.query([job_id]),
        timeout=180,
        every=1,
        what=f"slurmctld forgot job {job_id}",
    )
    return job_id


def test_a_job_forgotten_by_slurm_while_no_worker_ran_succeeds_from_its_record(
    stack: SlurmStack,
) -> None:
    api = stack.api
    run_id = submit(api, "slurm-forgotten", epochs=2, step_sleep=0.3)
    job_id = forgotten_while_no_worker_runs(stack, run_id)
    record = boundary.job_files(run_id, 1).exit_record
    assert record.read_text() == f"job={job_id} exit=0\n"
    stack.start_worker()
    run = ended(api, run_id)
    assert run["status"] == "succeeded", run
    assert run["attempt"] == 1  # its end read, not handed over as "found no Slurm job"
    assert run["external_id"] == job_id
    assert_every_step_once(api, run_id)


def test_a_failed_job_forgotten_by_slurm_fails_with_its_ranks_exception(
    stack: SlurmStack,
) -> None:
    api = stack.api
    run_id = submit(
        api, "slurm-forgotten-fail", epochs=20, fail_rank=1, fail_step=12, step_sleep=0.3
    )
    job_id = forgotten_while_no_worker_runs(stack, run_id)
    record = boundary.job_files(run_id, 1).exit_record.read_text()
    assert record.startswith(f"job={job_id} exit=") and record != f"job={job_id} exit=0\n"
    stack.start_worker()
    run = ended(api, run_id)
    assert run["status"] == "failed", run
    assert run["attempt"] == 1
    assert "rank 1 fails on purpose at step 12" in (run["error"] or ""), run["error"]
