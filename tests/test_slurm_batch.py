"""A run attempt's Slurm job on paper (worker.slurm.batch): its sbatch options come from the
run's resources and the operator's settings only, its name carries the run, and its batch
script runs build_launch's launch once per node through srun."""

from __future__ import annotations

import subprocess
from pathlib import Path

from app.experiments.config.model import run_config
from app.settings import Settings
from worker.launcher import Launch, LaunchSpec, NodeSpec, build_launch
from worker.slurm.batch import (
    MASTER_PLACEHOLDER,
    NODE_RANK_PLACEHOLDER,
    NODE_REFUSED,
    Handoff,
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
FILES = JobFiles(Path("/shared/runs/7"), 2, Path("/shared/slurm-jobs/7"))


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


def test_a_sandboxed_script_exports_no_run_variable_and_opens_the_handoffs_files(
    tmp_path: Path,
) -> None:
    """The run's env reaches the job only through the handoff's descriptor (after the drop):
    the script exports the privileged environment alone and execs bwrap with its descriptors
    opened from the attempt's folder, the node's values added to the job's environment."""
    env_file, hosts_file, passwd = (FILES.descriptor(n) for n in (9, 8, 7))
    launch = Launch(
        argv=["/usr/bin/bwrap", "--ro-bind-data", "8", "/etc/hosts", "--", "/py", "--env-fd", "9"],
        env={"PATH": "/usr/bin", "TORCHYARD_JOB_TOKEN": "tok"},
        cwd=Path("/shared/runs/7/work"),
    )
    handoff = Handoff(
        ((7, passwd), (8, hosts_file), (9, env_file)), 9, 8, ("/usr/bin/bwrap", "/py")
    )
    script = batch_script(launch, FILES, nodes=1, handoff=handoff)
    path = tmp_path / "job.sh"
    path.write_text(script)
    assert subprocess.run(["bash", "-n", str(path)], check=False).returncode == 0
    task = script[: script.index("\nfi\n")]  # what a node's task runs
    exports = [line.strip() for line in task.splitlines() if line.strip().startswith("export ")]
    assert exports == ["export PATH=/usr/bin", "export TORCHYARD_JOB_TOKEN=tok"]
    assert f"exec 7<{passwd}" in script
    assert f'cat {env_file} > "$copy"' in script
    assert "printf '%s=%s\\0' CUDA_VISIBLE_DEVICES \"$CUDA_VISIBLE_DEVICES\"" in script
    assert f"exit {NODE_REFUSED}" in script
    assert script.index("compgen -e") < script.index("export PATH")


def test_a_node_without_the_sandboxs_tools_refuses_the_job(tmp_path: Path) -> None:
    launch = Launch(argv=["/bin/true"], env={"PATH": "/usr/bin"}, cwd=tmp_path)
    env_file = tmp_path / "env"
    env_file.write_bytes(b"A=1\0")
    handoff = Handoff(((9, env_file),), 9, None, ("/nonexistent/bwrap",))
    path = tmp_path / "job.sh"
    path.write_text(batch_script(launch, FILES, nodes=1, handoff=handoff))
    done = subprocess.run(["bash", str(path), "task"], capture_output=True, text=True, check=False)
    assert done.returncode == NODE_REFUSED
    assert "has no /nonexistent/bwrap" in done.stderr


def test_a_multi_node_jobs_run_uids_get_no_loopback_on_the_node(tmp_path: Path) -> None:
    """A root worker's multi-node job shares the node's network: the task fences the run uids
    from the node's loopback (one nft table, made once) or refuses the job."""
    launch = Launch(argv=["/bin/true"], env={"PATH": "/usr/bin"}, cwd=tmp_path)
    handoff = Handoff((), 9, None, (), fenced_uids=(720000, 720999))
    script = batch_script(launch, FILES, nodes=2, handoff=handoff)
    path = tmp_path / "job.sh"
    path.write_text(script)
    assert subprocess.run(["bash", "-n", str(path)], check=False).returncode == 0
    assert "meta skuid 720000-720999 ip daddr 127.0.0.0/8 reject" in script
    assert "meta skuid 720000-720999 ip6 daddr ::1 reject" in script
    assert "nft list table inet torchyard_jobs_720000" in script


def test_a_sandboxed_task_execs_with_the_launchs_environment_only(tmp_path: Path) -> None:
    """Run as a node's task: the node's rank still reaches the argv, none of the task's own
    variables (Slurm's, the batch's) reach what it execs, the handoff's file is opened."""
    env_file = tmp_path / "env"
    env_file.write_bytes(b"JOB=1\0")
    argv = ["/bin/sh", "-c", 'echo "argv $1"; env; cat <&9', "sh", "--node-rank=0"]
    launch = Launch(argv=argv, env={"PATH": "/usr/bin:/bin"}, cwd=tmp_path)
    handoff = Handoff(((9, env_file),), 9, None, ("/bin/sh",))
    path = tmp_path / "job.sh"
    path.write_text(batch_script(launch, FILES, nodes=1, handoff=handoff))
    task_env = {"PATH": "/usr/bin:/bin", "SLURM_NODEID": "1", "TASK_SECRET": "x"}
    task_env["CUDA_VISIBLE_DEVICES"] = "3"
    done = subprocess.run(
        ["bash", str(path), "task"], env=task_env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "argv --node-rank=1" in done.stdout
    assert "TASK_SECRET" not in done.stdout.replace("\0", "\n").split("JOB=1")[0]
    assert "SLURM_NODEID" not in done.stdout.split("JOB=1")[0]
    assert "JOB=1\0CUDA_VISIBLE_DEVICES=3\0" in done.stdout


def test_the_batch_step_records_sruns_exit_status_in_the_attempts_folder(tmp_path: Path) -> None:
    """After srun (here a stand-in on PATH that exits 3, as srun does with a task's status),
    the batch step writes "job=<id> exit=<status>" into the attempt's folder, which no job sees,
    and exits with it: the end a worker reads once Slurm forgot the job (worker.slurm.track)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in (("srun", "exit 3"), ("scontrol", "exit 0")):
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    files = JobFiles(tmp_path / "run", 1, tmp_path / "jobs")
    files.folder.mkdir()
    launch = Launch(argv=["/bin/true"], env={"PATH": "/usr/bin"}, cwd=tmp_path)
    files.script.write_text(batch_script(launch, files, nodes=1))
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "SLURM_JOB_ID": "41", "SLURM_JOB_NODELIST": "n0"}
    done = subprocess.run(["bash", str(files.script)], env=env, check=False)
    assert done.returncode == 3
    assert files.exit_record.read_text() == "job=41 exit=3\n"
    assert {p.name for p in files.folder.iterdir()} == {files.script.name, "attempt-1.exit"}
