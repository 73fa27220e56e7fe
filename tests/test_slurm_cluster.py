"""The Slurm test bed (tests/slurm_cluster.py): a private cluster that runs a GPU job to its
end, two clusters side by side on this machine, two nodes in two network namespaces running one
job as one allocation, and a CI that fails, not skips, where Slurm cannot run."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import slurm_cluster as harness
from tests.slurm_cluster import SlurmCluster, slurm_cluster
from tests.waits import wait_for

# Prints what Slurm gave the job, then stays until the test lets it go.
GPU_JOB = """#!/bin/sh
echo "gpus=$CUDA_VISIBLE_DEVICES nodes=$SLURM_JOB_NODELIST"
while [ ! -e "$1" ]; do sleep 0.1; done
"""


@pytest.fixture(scope="module")
def cluster() -> Iterator[SlurmCluster]:
    with slurm_cluster() as started:
        yield started


def job_state(cluster: SlurmCluster, job_id: str) -> str:
    """JobState=... of `scontrol show job` (one line): slurmctld remembers an ended job for
    MinJobAge seconds."""
    line = cluster.run("scontrol", "show", "job", "--oneliner", job_id).stdout
    fields = dict(part.split("=", 1) for part in line.split() if "=" in part)
    return fields.get("JobState", "")


def submit(cluster: SlurmCluster, *options: str, script: Path, args: list[str]) -> str:
    done = cluster.run("sbatch", "--parsable", *options, str(script), *args)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().split(";")[0]


@pytest.mark.slow
def test_a_job_with_one_gpu_runs_and_completes(cluster: SlurmCluster, tmp_path: Path) -> None:
    script, release, out = tmp_path / "job.sh", tmp_path / "release", tmp_path / "out.txt"
    script.write_text(GPU_JOB)
    job = submit(cluster, "--gres=gpu:1", f"--output={out}", script=script, args=[str(release)])
    wait_for(lambda: job_state(cluster, job) == "RUNNING", timeout=30, what=cluster.logs)
    assert cluster.node_states() == {"node-0": "mix"}  # one of its two GPUs and 1 of 4 CPUs
    release.touch()
    wait_for(
        lambda: job_state(cluster, job) == "COMPLETED",
        timeout=30,
        what=lambda: f"{job_state(cluster, job)}\n{cluster.logs()}",
    )
    expected_gpus = "0" if cluster.fake_gpus_are_devices else ""
    assert out.read_text().splitlines() == [f"gpus={expected_gpus} nodes=node-0"]
    assert f"JobId={job} " in (cluster.folder / "jobcomp.txt").read_text()


@pytest.mark.slow
def test_two_clusters_run_side_by_side(cluster: SlurmCluster) -> None:
    with SlurmCluster() as other:
        assert other.conf.read_text() != cluster.conf.read_text()
        assert cluster.node_states() == other.node_states() == {"node-0": "idle"}
    assert not other.folder.exists()
    assert cluster.node_states() == {"node-0": "idle"}


@pytest.mark.slow
def test_two_nodes_in_two_namespaces_run_one_job(tmp_path: Path) -> None:
    """Each srun task prints its node and its address: one task a node, each node's own."""
    script, out = tmp_path / "job.sh", tmp_path / "out.txt"
    script.write_text(
        "#!/bin/sh\nsrun --label sh -c 'echo $SLURMD_NODENAME $CUDA_VISIBLE_DEVICES "
        '$(ip -4 -o addr show eth0 | cut -d" " -f7)\'\n'
    )
    with slurm_cluster(nodes=2) as two:
        assert os.environ["SLURM_CONF"] == str(two.conf)
        job = submit(two, "--nodes=2", "--gres=gpu:2", f"--output={out}", script=script, args=[])
        wait_for(
            lambda: job_state(two, job) == "COMPLETED",
            timeout=60,
            what=lambda: f"{job_state(two, job)}\n{two.logs()}",
        )
        rows = sorted(line.split() for line in out.read_text().splitlines())
        gpus = ["0,1"] if two.fake_gpus_are_devices else []
        assert [row[:-1] for row in rows] == [["0:", "node-0", *gpus], ["1:", "node-1", *gpus]]
        addresses = {row[-1] for row in rows}
        assert len(addresses) == 2 and all(a.startswith("10.") for a in addresses), rows
    assert "SLURM_CONF" not in os.environ or os.environ["SLURM_CONF"] != str(two.conf)


def test_without_slurm_ci_fails_and_elsewhere_skips(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(harness, "SBIN", tmp_path)
    assert "not installed: munged, slurmctld, slurmd" in (harness.why_no_slurm() or "")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI must run the Slurm tests"):
        harness.require_slurm()
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception, match="no Slurm here"):
        harness.require_slurm()
