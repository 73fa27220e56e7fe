"""The one launcher: a pure function from a run's spec to the argv and environment of its job.

Every job, built-in recipe or user script, one process or many, is started from what
this returns; the exact argv is unit-tested. For nproc == 1 the default skips torchrun and
starts the entry point directly as a plain interpreter, with none of torchrun's variables:
that saves one torch import (~2.5 s of a 2-core box), and code that starts its own ranks
(Lightning with devices=2, accelerate, mp.spawn) sees what it would under `python train.py`
instead of waiting for ranks nobody starts. ``resources.launcher = "none"`` asks for that
one plain process whatever the GPU count: every leased GPU is visible to it.

Under torchrun every line a rank writes, to stdout or stderr, print, logging or a traceback,
reaches output.log with the rank in front (``[rank1]: ...``): ``--tee=3`` sends each worker's
stdout and stderr to per-rank files under ``<run_dir>/torchrun/`` and has torchrun copy them,
line by line, to its own output with the prefix that ``TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE``
names (torch 2.13 has no command-line flag for the template). Lines without a prefix come from
torchrun itself. A direct single-process job writes its lines unprefixed: they are all rank 0's.

Every job gets ``CUDA_DEVICE_ORDER=PCI_BUS_ID``, overriding an inherited value: GPU leases are
NVML indices (worker/gpus.py), and NVML numbers devices by PCI bus id while CUDA by default
numbers them fastest first. On a box with mixed GPUs, ``CUDA_VISIBLE_DEVICES=1`` would then
name another card than the lease's, one the scheduler may have leased to another run.

Every job gets ``MLFLOW_TRACKING_URI=torchyard:job``, overriding an inherited value: MLflow in
the job logs into the job's own run through torchyard.mlflow_store, network or not.

A multi-node run (``resources.nodes`` > 1) starts one torchrun per host, each given its
`NodeSpec`: torchrun's static rendezvous (``--master-addr``/``--master-port`` of node 0,
``--node-rank``), not c10d's. Static keeps node k's ranks at k * nproc .. k * nproc + nproc - 1,
so global rank 0 is always on node 0 (whose host keeps the checkpoints); c10d numbers nodes by
arrival and, tried across two network namespaces (torch 2.13), node 0 did not host the store
(it did not recognise the endpoint's address as its own) and both nodes timed out after 60 s.
``--max-restarts=0``: a failed rank fails the run, never a silent restart of every node.
``GLOO_SOCKET_IFNAME``/``NCCL_SOCKET_IFNAME`` name the worker's interface when it has one set
(TORCHYARD_WORKER_INTERFACE). Not wired yet: no worker builds a NodeSpec (docs/multi-node.md).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from app.experiments.config.model import RunConfig, ScriptConfig
from app.settings import get_settings
from torchyard.contract import (
    CONFIG_VAR,
    DISTRIBUTED_VARS,
    JOB_TOKEN_VAR,
    LOG_LINE_PREFIX_TEMPLATE,
    LOG_LINE_PREFIX_VAR,
    RESUME_FROM_VAR,
    RUN_DIR_VAR,
    RUN_ID_VAR,
    SCRIPT_ARGV_VAR,
    SCRIPT_VAR,
    SPOOL_BACKLOG_VAR,
    SPOOL_MARK_FRESH_VAR,
    SPOOL_MAX_AGE_VAR,
    TENSORBOARD_DIR_VAR,
    WORKSPACE_VAR,
    RunPaths,
)
from worker.workspace import script_argv

JOB_MODULE = "torchyard.job"
# torchyard.mlflow_store.TRACKING_URI (that module imports mlflow, which the worker need not have)
MLFLOW_TRACKING_URI = "torchyard:job"


@dataclass(frozen=True)
class NodeSpec:
    """This host's part of a multi-node run: which node it is and where node 0 listens."""

    rank: int  # 0 .. nodes - 1
    master_address: str  # node 0's worker address (TORCHYARD_WORKER_ADDRESS)
    master_port: int  # allocated per run on node 0
    interface: str = ""  # this worker's TORCHYARD_WORKER_INTERFACE
    peers: tuple[str, ...] = ()  # every node's worker address (worker.job_firewall's rules)


@dataclass(frozen=True)
class LaunchSpec:
    run_id: int
    run_dir: Path
    config: RunConfig
    python: str
    job_token: str
    master_port: int
    single_process: Literal["direct", "torchrun"] = "direct"
    resume_from: Path | None = None
    base_env: Mapping[str, str] = field(default_factory=dict)
    # A user script: its resolved path (app.experiments.workspace.resolve_script), the workspace.
    script: Path | None = None
    workspace: Path | None = None
    # The script is in the run's copy of a code snapshot (worker.code): the job starts in the
    # script's folder there instead of in <run_dir>/work.
    from_snapshot: bool = False
    # A multi-node run's node on this host (required when its config has nodes > 1).
    node: NodeSpec | None = None


@dataclass(frozen=True)
class Launch:
    argv: list[str]
    env: dict[str, str]
    # The job's working directory (<run_dir>/work, worker.workspace.prepare_work_dir).
    cwd: Path
    # Descriptors the job's first process inherits (a sandbox's bind sources, worker/sandbox.py).
    pass_fds: tuple[int, ...] = ()
    # The keeper's own options (worker.keeper): the job's cgroup and rlimits (worker.limits).
    keeper_options: tuple[str, ...] = ()


def job_config(config: RunConfig) -> dict[str, Any]:
    """The config as the job sees it: the stored JSON without ``code_origin``, the client's
    git state (its diff may be 512 KiB, and one environment variable may hold only 128 KiB on
    Linux; the run's environment record has it)."""
    return {k: v for k, v in config.stored().items() if k != "code_origin"}


def build_launch(spec: LaunchSpec) -> Launch:
    config = spec.config
    run = config.run_spec()
    paths = RunPaths(spec.run_dir)
    cwd = paths.work
    if spec.from_snapshot and spec.script is not None:
        cwd = spec.script.parent
    nproc = run.nproc
    env = dict(spec.base_env)
    env.update(config.env)  # the run's own (RunConfig refuses the service's and the worker's)
    env.update(
        {
            RUN_ID_VAR: str(spec.run_id),
            RUN_DIR_VAR: str(spec.run_dir),
            CONFIG_VAR: json.dumps(job_config(config), sort_keys=True),
            JOB_TOKEN_VAR: spec.job_token,
            "PYTHONHASHSEED": str(config.seed),
            "PYTHONUNBUFFERED": "1",
            # CUDA numbers devices as NVML does, so the leased index is the GPU the job uses.
            "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
            # SummaryWriter() without a log_dir writes here (torchyard.runtime.tensorboard_defaults)
            TENSORBOARD_DIR_VAR: str(paths.tensorboard),
            # MLflow logs into this run's spool, whatever the job's network (torchyard.mlflow_store)
            "MLFLOW_TRACKING_URI": MLFLOW_TRACKING_URI,
        }
    )
    settings = get_settings()  # the spool's backlog bound (torchyard.runtime.ingest_mark)
    env[SPOOL_BACKLOG_VAR] = str(settings.spool_backlog_bytes)
    env[SPOOL_MARK_FRESH_VAR] = str(settings.spool_mark_fresh_seconds)
    env[SPOOL_MAX_AGE_VAR] = str(settings.spool_max_age_seconds)
    if spec.script is not None and isinstance(config, ScriptConfig):
        env[SCRIPT_VAR] = str(spec.script)
        env[SCRIPT_ARGV_VAR] = json.dumps(script_argv(config.args, config.params))
        if spec.workspace is not None:
            env[WORKSPACE_VAR] = str(spec.workspace)
    if spec.resume_from is not None:
        env[RESUME_FROM_VAR] = str(spec.resume_from)
    if run.launcher == "none" or (nproc == run.nodes == 1 and spec.single_process == "direct"):
        # A plain interpreter, as `python train.py` would be: no distributed variables (code
        # that starts its own ranks takes them for ranks torchrun started, and waits for
        # them), and nothing prefixes its lines.
        env.pop(LOG_LINE_PREFIX_VAR, None)
        for name in DISTRIBUTED_VARS:
            env.pop(name, None)
        return Launch(argv=[spec.python, "-m", JOB_MODULE], env=env, cwd=cwd)
    env[LOG_LINE_PREFIX_VAR] = LOG_LINE_PREFIX_TEMPLATE
    argv = [
        spec.python,
        "-m",
        "torch.distributed.run",
        *_rendezvous(run.nodes, spec.node, env),
        f"--nproc_per_node={nproc}",
        "--tee=3",
        f"--log-dir={paths.torchrun_logs}",
        "--module",
        JOB_MODULE,
    ]
    return Launch(argv=argv, env=env, cwd=cwd)


def _rendezvous(nodes: int, node: NodeSpec | None, env: dict[str, str]) -> list[str]:
    """torchrun's options that say which ranks are whose: one host alone (``--standalone``)
    or this host's node of a multi-node run (the static form; the module's docstring says
    why), whose interface, when set, goes to Gloo and NCCL through `env`."""
    if nodes == 1:
        return ["--standalone"]
    if node is None or not 0 <= node.rank < nodes:
        raise ValueError(f"a run of {nodes} nodes needs this host's node (got {node})")
    if node.interface:
        env["GLOO_SOCKET_IFNAME"] = env["NCCL_SOCKET_IFNAME"] = node.interface
    return [
        f"--nnodes={nodes}",
        f"--node-rank={node.rank}",
        f"--master-addr={node.master_address}",
        f"--master-port={node.master_port}",
        "--max-restarts=0",
    ]
