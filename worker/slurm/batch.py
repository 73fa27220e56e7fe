"""What a run attempt's Slurm job is: its sbatch options and its batch script (pure).

The options come from the run's resources and the operator's settings only (partition,
account, QOS, TORCHYARD_SLURM_EXTRA_ARGS): a member's run config names no sbatch option. The
job's name and comment carry the run id and the attempt (`job_name`), which is how a restarted
worker finds the jobs of its runs (worker.slurm.executor.adopt).

The script runs the same job runtime as a local run (worker.launcher.build_launch): one
torchrun per node through `srun --ntasks-per-node 1`, the rendezvous on the allocation's first
node, its environment (the run's variables, the job token) exported by the script itself, so
no variable of the worker's own reaches the job (sbatch --export=NONE).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from app.experiments.resources import Resources
from app.settings import Settings
from worker.launcher import Launch

NAME_PREFIX = "torchyard-run-"
_NAME = re.compile(r"^torchyard-run-(\d+)-(\d+)$")
# Slurm sets these for each job step: a local run's value (its leased GPUs) must not win.
_SLURM_OWNS = ("CUDA_VISIBLE_DEVICES",)
# build_launch's placeholders for a node's part of a multi-node run, set per node by srun.
NODE_RANK_PLACEHOLDER = 0
MASTER_PLACEHOLDER = "torchyard-first-node"


def job_name(run_id: int, attempt: int) -> str:
    return f"{NAME_PREFIX}{run_id}-{attempt}"


def parse_job_name(name: str) -> tuple[int, int] | None:
    """(run id, attempt) of one of torchyard's jobs; None for any other job."""
    found = _NAME.match(name)
    return (int(found.group(1)), int(found.group(2))) if found else None


@dataclass(frozen=True)
class JobFiles:
    """Where the attempt's job writes on the shared folder."""

    run_dir: Path
    attempt: int

    @property
    def script(self) -> Path:
        return self.run_dir / "slurm" / f"attempt-{self.attempt}.sh"

    @property
    def log(self) -> Path:  # the run's own log: the worker forwards it as a local run's
        return self.run_dir / "output.log"


def sbatch_options(
    settings: Settings, resources: Resources, *, run_id: int, attempt: int, files: JobFiles
) -> list[str]:
    """sbatch's options for the attempt: the resources per node as Slurm's limits."""
    cpus = max(1, int(-(-resources.cpus // 1)))  # a CPU quota of 0.5 is one CPU to Slurm
    options = [
        f"--job-name={job_name(run_id, attempt)}",
        f"--comment=torchyard run {run_id} attempt {attempt} pool {settings.worker_pool}",
        f"--partition={settings.slurm_partition}",
        f"--nodes={resources.nodes}",
        "--ntasks-per-node=1",
        f"--cpus-per-task={cpus}",
        f"--mem={max(1, int(resources.memory_gb * 1024))}M",
        f"--output={files.log}",
        "--open-mode=append",
        "--export=NONE",
        # One attempt, one job: a requeue is torchyard's (a new attempt), never Slurm's.
        "--no-requeue",
    ]
    if resources.gpus:
        options.append(f"--gres={settings.slurm_gres}:{resources.gpus}")
    if settings.slurm_account:
        options.append(f"--account={settings.slurm_account}")
    if settings.slurm_qos:
        options.append(f"--qos={settings.slurm_qos}")
    options += shlex.split(settings.slurm_extra_args)
    if resources.time_limit_minutes:  # after the operator's: the run's own limit wins
        options.append(f"--time={resources.time_limit_minutes}")
    return options


def _word(word: str) -> str:
    """A launch word for the node's shell: the multi-node placeholders become its variables."""
    if word == f"--node-rank={NODE_RANK_PLACEHOLDER}":
        return '--node-rank="$SLURM_NODEID"'
    if word == f"--master-addr={MASTER_PLACEHOLDER}":
        return '--master-addr="$TORCHYARD_FIRST_NODE"'
    return shlex.quote(word)


# A multi-node job's ranks talk over the interface that reaches the first node (on the first
# node: the one that holds its address), not whatever the host name resolves to (loopback).
_INTERFACE = [
    '  dev="$(ip -o -4 addr show 2>/dev/null'
    ' | awk -v a="$TORCHYARD_FIRST_NODE/" \'index($4, a) == 1 {print $2; exit}\')"',
    '  [ -n "$dev" ] || dev="$(ip route get "$TORCHYARD_FIRST_NODE" 2>/dev/null'
    " | sed -n 's/.* dev \\([^ ]*\\).*/\\1/p' | head -n 1)\"",
    '  if [ -n "$dev" ] && [ "$dev" != lo ]; then',
    '    export GLOO_SOCKET_IFNAME="$dev" NCCL_SOCKET_IFNAME="$dev"',
    "  fi",
]


def batch_script(launch: Launch, files: JobFiles, *, nodes: int) -> str:
    """The batch script: run as the batch step (`sbatch`), it starts one task per node through
    srun, each of which runs this script again as `task` (from the shared folder) and execs
    the node's torchrun (or the job runtime itself, for a one-process run)."""
    exports = [
        f"export {name}={shlex.quote(value)}"
        for name, value in sorted(launch.env.items())
        if name not in _SLURM_OWNS
    ]
    argv = " ".join(_word(w) for w in launch.argv)
    script = shlex.quote(str(files.script))
    return "\n".join(
        [
            "#!/bin/bash",
            f"# torchyard: run attempt {files.attempt}'s job (worker.slurm.batch); do not edit",
            "set -u",
            'if [ "${1:-}" = task ]; then',
            *(_INTERFACE if nodes > 1 else []),
            *(f"  {line}" for line in exports),
            f"  cd {shlex.quote(str(launch.cwd))}",
            f"  exec {argv}",
            "fi",
            # The first node of the allocation is the rendezvous (torchrun's master), at its
            # NodeAddr (a node's name need not resolve where its address is set apart).
            'first="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"',
            'addr="$(scontrol show node "$first" | sed -n \'s/.*NodeAddr=\\([^ ]*\\).*/\\1/p\')"',
            'export TORCHYARD_FIRST_NODE="${addr:-$first}"',
            # sbatch --export=NONE sets this for the steps too: srun's tasks take the script's.
            "export SLURM_EXPORT_ENV=ALL",
            f"srun --nodes={nodes} --ntasks-per-node=1 --kill-on-bad-exit=1 {script} task",
            "exit $?",
            "",
        ]
    )
