"""A run attempt's Slurm job on paper (worker.slurm.batch): its sbatch options come from the
run's resources and the operator's settings only, its name carries the run, and its batch
script runs build_launch's launch once per node through srun."""

from __future__ import annotations

import subprocess
from pathlib import Path

from app.experiments.config.model import run_config
from app.settings import Settings
from worker.launcher import LaunchSpec, NodeSpec, build_launch
from worker.slurm.batch import (
    MASTER_PLACEHOLDER,
    NODE_RANK_PLACEHOLDER,
    JobFiles,
    batch_script,
    job_name,
    parse_job_name,
    sbatch_options,
)


def settings(**kw: object) -> Settings:
    base: dict[str, object] = {
        "worker_executor": "slurm",
        "worker_pool": "cluster",
        "slurm_partition": "gpu",
        "slurm_shared_dir": Path("/shared"),
    }
    return Settings(**(base | kw))  # type: ignore[arg-type]


CONFIG = {
    "recipe": "tiny_mlp",
    "params": {},
    "seed": 5,
    "resources": {"nproc": 2, "gpus": 2, "nodes": 2, "cpus": 3.5, "memory_gb": 1.5},
}
FILES = JobFiles(Path("/shared/runs/7"), 2)


def test_the_options_are_the_resources_and_the_operators_settings() -> None:
    resources = run_config(CONFIG).resources
    options = sbatch_options(
        settings(slurm_account="lab", slurm_qos="normal", slurm_extra_args="--exclusive --x='a b'"),
        resources,
        run_id=7,
        attempt=2,
        files=FILES,
    )
    assert options[:6] == [
        "--job-name=torchyard-run-7-2",
        "--comment=torchyard run 7 attempt 2 pool cluster",
        "--partition=gpu",
        "--nodes=2",
        "--ntasks-per-node=1",
        "--cpus-per-task=4",  # a quota of 3.5 CPUs is 4 to Slurm
    ]
    assert "--mem=1536M" in options
    assert "--gres=gpu:2" in options
    assert "--account=lab" in options and "--qos=normal" in options
    assert "--export=NONE" in options and "--no-requeue" in options
    assert f"--output={FILES.log}" in options
    assert options[-2:] == ["--exclusive", "--x=a b"]  # shell words, the operator's last


def test_a_run_without_gpus_asks_for_no_gres_and_no_account() -> None:
    config = {**CONFIG, "resources": {"gpus": 0}}
    options = sbatch_options(
        settings(slurm_gres="gpu:a100"),
        run_config(config).resources,
        run_id=7,
        attempt=1,
        files=FILES,
    )
    assert not [o for o in options if o.startswith(("--gres", "--account", "--qos"))]


def test_the_job_name_carries_the_run_and_its_attempt() -> None:
    assert parse_job_name(job_name(31, 4)) == (31, 4)
    assert parse_job_name("torchyard-run-31") is None
    assert parse_job_name("someone-else-31-4") is None


def test_the_script_runs_one_torchrun_per_node_meeting_on_the_first(tmp_path: Path) -> None:
    launch = build_launch(
        LaunchSpec(
            run_id=7,
            run_dir=FILES.run_dir,
            config=run_config(CONFIG),
            python="/py",
            job_token="secret token",
            master_port=29407,
            base_env={"PATH": "/bin", "CUDA_VISIBLE_DEVICES": "0"},
            node=NodeSpec(NODE_RANK_PLACEHOLDER, MASTER_PLACEHOLDER, 29407),
        )
    )
    script = batch_script(launch, FILES, nodes=2)
    path = tmp_path / "job.sh"
    path.write_text(script)
    assert subprocess.run(["bash", "-n", str(path)], check=False).returncode == 0
    assert f"srun --nodes=2 --ntasks-per-node=1 --kill-on-bad-exit=1 {FILES.script} task" in script
    assert '--node-rank="$SLURM_NODEID"' in script
    assert '--master-addr="$TORCHYARD_FIRST_NODE"' in script
    assert "--nproc_per_node=2" in script
    assert "export TORCHYARD_JOB_TOKEN='secret token'" in script
    # Slurm's --gres sets the job's GPUs: a local run's leased indices never reach it.
    assert "CUDA_VISIBLE_DEVICES" not in script


def test_the_runs_time_limit_is_its_jobs_time_after_the_operators() -> None:
    def options(resources: dict, extra: str = "") -> list[str]:
        config = {**CONFIG, "resources": resources}
        return sbatch_options(
            settings(slurm_extra_args=extra),
            run_config(config).resources,
            run_id=7,
            attempt=1,
            files=FILES,
        )

    assert not [o for o in options({}) if o.startswith("--time")]  # the partition's default
    assert options({}, "--time=24:00:00")[-1] == "--time=24:00:00"
    # sbatch takes the last: the run's own limit over the operator's default.
    assert options({"time_limit_minutes": 90}, "--time=24:00:00")[-2:] == [
        "--time=24:00:00",
        "--time=90",
    ]
