from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.experiments.config.model import run_config
from torchyard.contract import rank_prefix
from worker.launcher import LaunchSpec, NodeSpec, build_launch

CONFIG = {"recipe": "tiny_mlp", "params": {}, "seed": 5, "resources": {"nproc": 1, "gpus": 0}}


def spec(**kw: object) -> LaunchSpec:
    base: dict = dict(
        run_id=7,
        run_dir=Path("/data/runs/7"),
        config=CONFIG,
        python="/py",
        job_token="tok",
        master_port=29555,
        base_env={"PATH": "/bin"},
    )
    base.update(kw)
    base["config"] = run_config(base["config"])  # the worker's typed config, as it reads it
    return LaunchSpec(**base)


def test_single_process_starts_the_entry_point_as_a_plain_interpreter() -> None:
    launch = build_launch(spec())
    assert launch.argv == ["/py", "-m", "torchyard.job"]
    assert launch.cwd == Path("/data/runs/7/work")
    env = launch.env
    # The stored JSON, defaults filled in (the job reads no default of its own).
    assert json.loads(env.pop("TORCHYARD_CONFIG")) == run_config(CONFIG).stored()
    # Exactly this: no resume path, no line-prefix template (its lines are rank 0's, bare),
    # and none of torchrun's variables.
    assert env == {
        "PATH": "/bin",
        "TORCHYARD_RUN_ID": "7",
        "TORCHYARD_RUN_DIR": "/data/runs/7",
        "TORCHYARD_JOB_TOKEN": "tok",
        "PYTHONHASHSEED": "5",
        "PYTHONUNBUFFERED": "1",
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "TORCHYARD_TENSORBOARD_DIR": "/data/runs/7/tensorboard",
        "MLFLOW_TRACKING_URI": "torchyard:job",
        # The spool's backlog bound (torchyard.runtime.ingest_mark), from the settings.
        "TORCHYARD_SPOOL_BACKLOG_BYTES": str(2 * 1024**2),
        "TORCHYARD_SPOOL_MARK_FRESH_SECONDS": "15.0",
        "TORCHYARD_SPOOL_MAX_AGE_SECONDS": "3.0",
    }


def test_a_single_process_drops_inherited_distributed_variables() -> None:
    """A worker started under torchrun (or by hand with RANK set) must not pass them on."""
    inherited = {"PATH": "/bin", "RANK": "3", "WORLD_SIZE": "8", "MASTER_PORT": "1"}
    env = build_launch(spec(base_env=inherited)).env
    assert not {"RANK", "WORLD_SIZE", "MASTER_PORT"} & set(env)


def test_launcher_none_is_one_plain_process_with_every_leased_gpu() -> None:
    config = {**CONFIG, "resources": {"nproc": 1, "gpus": 2, "launcher": "none"}}
    launch = build_launch(spec(config=config, base_env={"CUDA_VISIBLE_DEVICES": "2,3"}))
    assert launch.argv == ["/py", "-m", "torchyard.job"]
    assert launch.env["CUDA_VISIBLE_DEVICES"] == "2,3"
    assert "WORLD_SIZE" not in launch.env and "LOCAL_RANK" not in launch.env
    # even where a single process would otherwise go through torchrun
    assert build_launch(spec(config=config, single_process="torchrun")).argv[1:] == [
        "-m",
        "torchyard.job",
    ]


def test_every_job_numbers_gpus_by_pci_bus_id_as_the_leases_do() -> None:
    """NVML (leases) and CUDA must agree on which card index 1 is, whatever the worker's own
    environment says."""
    inherited = {"PATH": "/bin", "CUDA_DEVICE_ORDER": "FASTEST_FIRST"}
    multi = {**CONFIG, "resources": {"nproc": 2, "gpus": 2}}
    for launch in (
        build_launch(spec(base_env=inherited)),
        build_launch(spec(base_env=inherited, config=multi)),
        build_launch(spec(base_env=inherited, single_process="torchrun")),
    ):
        assert launch.env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"


def test_every_job_logs_mlflow_into_its_own_run_whatever_the_worker_inherited() -> None:
    """A worker started with MLFLOW_TRACKING_URI (someone's server) must not send its jobs'
    MLflow data there: it goes to the job's run (torchyard.mlflow_store)."""
    inherited = {"PATH": "/bin", "MLFLOW_TRACKING_URI": "http://elsewhere:5000"}
    multi = {**CONFIG, "resources": {"nproc": 2, "gpus": 0}}
    for launch in (build_launch(spec(base_env=inherited)), build_launch(spec(config=multi))):
        assert launch.env["MLFLOW_TRACKING_URI"] == "torchyard:job"


def test_single_process_drops_an_inherited_line_prefix_template() -> None:
    env = {"PATH": "/bin", "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": "[${rank}]"}
    launch = build_launch(spec(base_env=env))
    assert "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE" not in launch.env


def test_single_process_through_torchrun_when_configured() -> None:
    launch = build_launch(spec(single_process="torchrun"))
    assert launch.argv == [
        "/py",
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=1",
        "--tee=3",
        "--log-dir=/data/runs/7/torchrun",
        "--module",
        "torchyard.job",
    ]
    env = launch.env
    # The stored JSON, defaults filled in (the job reads no default of its own).
    assert json.loads(env.pop("TORCHYARD_CONFIG")) == run_config(CONFIG).stored()
    # torchrun sets RANK, MASTER_PORT and the rest for each process it starts.
    assert env == {
        "PATH": "/bin",
        "TORCHYARD_RUN_ID": "7",
        "TORCHYARD_RUN_DIR": "/data/runs/7",
        "TORCHYARD_JOB_TOKEN": "tok",
        "PYTHONHASHSEED": "5",
        "PYTHONUNBUFFERED": "1",
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "TORCHYARD_TENSORBOARD_DIR": "/data/runs/7/tensorboard",
        "MLFLOW_TRACKING_URI": "torchyard:job",
        # The spool's backlog bound (torchyard.runtime.ingest_mark), from the settings.
        "TORCHYARD_SPOOL_BACKLOG_BYTES": str(2 * 1024**2),
        "TORCHYARD_SPOOL_MARK_FRESH_SECONDS": "15.0",
        "TORCHYARD_SPOOL_MAX_AGE_SECONDS": "3.0",
        "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": "[rank${rank}]: ",
    }


def test_multi_process_always_goes_through_torchrun() -> None:
    config = {**CONFIG, "resources": {"nproc": 2, "gpus": 0}}
    launch = build_launch(spec(config=config))
    assert launch.argv == [
        "/py",
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        "--tee=3",
        "--log-dir=/data/runs/7/torchrun",
        "--module",
        "torchyard.job",
    ]
    # torchrun writes every line of rank N (stdout and stderr) with "[rankN]: " in front.
    assert launch.env["TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"] == "[rank${rank}]: "
    assert (rank_prefix(0), rank_prefix(1)) == ("[rank0]: ", "[rank1]: ")


def test_resume_path_is_passed_to_the_job() -> None:
    launch = build_launch(spec(resume_from=Path("/data/runs/3/checkpoints/final.pt")))
    assert launch.env["TORCHYARD_RESUME_FROM"] == "/data/runs/3/checkpoints/final.pt"


def test_a_runs_own_environment_runs_torchrun_and_so_every_rank() -> None:
    """torchrun starts each rank with its own interpreter: the environment's, with its
    packages (worker/environments.py)."""
    env_python = "/envs/0123abcd/bin/python"
    multi = {**CONFIG, "resources": {"nproc": 2, "gpus": 0}}
    assert build_launch(spec(python=env_python, config=multi)).argv[:3] == [
        env_python,
        "-m",
        "torch.distributed.run",
    ]
    assert build_launch(spec(python=env_python)).argv == [env_python, "-m", "torchyard.job"]


def test_a_snapshot_script_starts_in_its_folder_without_the_client_git_state() -> None:
    config = {
        "script": "nested/train.py",
        "code": "sha256:" + "a" * 64,
        "code_origin": {"commit": "c0ffee", "diff": "x" * 200_000},
        "args": [],
        "params": {"lr": 0.1},
        "seed": 5,
        "resources": {"nproc": 1, "gpus": 0},
    }
    script = Path("/data/runs/7/work/nested/train.py")
    launch = build_launch(spec(config=config, script=script, from_snapshot=True))
    assert launch.argv == ["/py", "-m", "torchyard.job"]
    assert launch.cwd == Path("/data/runs/7/work/nested")
    job_config = json.loads(launch.env["TORCHYARD_CONFIG"])
    # The diff may be 512 KiB; one environment variable may hold only 128 KiB (MAX_ARG_STRLEN).
    assert "code_origin" not in job_config and job_config["code"] == config["code"]
    assert launch.env["TORCHYARD_SCRIPT"] == str(script)
    assert json.loads(launch.env["TORCHYARD_SCRIPT_ARGV"]) == ["--lr=0.1"]
    assert "TORCHYARD_WORKSPACE" not in launch.env


def test_a_configs_env_reaches_the_job_and_an_empty_one_is_not_stored() -> None:
    """Issue 29: `env` in the config (HF_HUB_OFFLINE, WANDB_MODE, ...) is the job's; the
    launcher's own variables still win (the config refuses their names anyway)."""
    config = {**CONFIG, "env": {"HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline"}}
    env = build_launch(spec(config=config, base_env={"PATH": "/bin", "WANDB_MODE": "online"})).env
    assert env["HF_HUB_OFFLINE"] == "1" and env["WANDB_MODE"] == "offline"
    assert json.loads(env["TORCHYARD_CONFIG"])["env"] == config["env"]
    assert "env" not in run_config(CONFIG).stored()


# --- multi-node runs: one torchrun per host (docs/multi-node.md) -----------------------------

TWO_NODES = {**CONFIG, "resources": {"nodes": 2, "nproc": 2, "gpus": 0}}


def test_each_node_runs_torchrun_in_the_static_form_at_node_0s_address() -> None:
    node = NodeSpec(rank=1, master_address="10.0.0.5", master_port=29611)
    launch = build_launch(spec(config=TWO_NODES, node=node))
    assert launch.argv == [
        "/py",
        "-m",
        "torch.distributed.run",
        "--nnodes=2",
        "--node-rank=1",
        "--master-addr=10.0.0.5",
        "--master-port=29611",
        "--max-restarts=0",
        "--nproc_per_node=2",
        "--tee=3",
        "--log-dir=/data/runs/7/torchrun",
        "--module",
        "torchyard.job",
    ]
    # global ranks in the lines' prefix: node 1's are rank2 and rank3
    assert launch.env["TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"] == "[rank${rank}]: "
    assert "GLOO_SOCKET_IFNAME" not in launch.env and "NCCL_SOCKET_IFNAME" not in launch.env


def test_a_node_with_one_process_still_goes_through_torchrun() -> None:
    config = {**CONFIG, "resources": {"nodes": 3, "nproc": 1}}
    node = NodeSpec(rank=0, master_address="a", master_port=1)
    assert build_launch(spec(config=config, node=node)).argv[3:5] == [
        "--nnodes=3",
        "--node-rank=0",
    ]


def test_the_workers_interface_goes_to_gloo_and_nccl() -> None:
    node = NodeSpec(rank=0, master_address="10.0.0.5", master_port=29611, interface="eth1")
    inherited = {"PATH": "/bin", "GLOO_SOCKET_IFNAME": "lo"}
    env = build_launch(spec(config=TWO_NODES, node=node, base_env=inherited)).env
    assert env["GLOO_SOCKET_IFNAME"] == env["NCCL_SOCKET_IFNAME"] == "eth1"


@pytest.mark.parametrize("node", [None, NodeSpec(rank=2, master_address="a", master_port=1)])
def test_a_multi_node_launch_without_its_node_is_refused(node: NodeSpec | None) -> None:
    with pytest.raises(ValueError, match="a run of 2 nodes needs this host's node"):
        build_launch(spec(config=TWO_NODES, node=node))
