"""What a run attempt's Slurm job is: its sbatch options and its batch script (pure).

The options come from the run's resources and the operator's settings only (partition,
account, QOS, TORCHYARD_SLURM_EXTRA_ARGS): a member's run config names no sbatch option. The
job's name and comment carry the run id and the attempt (`job_name`), which is how a restarted
worker finds the jobs of its runs (worker.slurm.executor.adopt).

The script runs the same job runtime as a local run (worker.launcher.build_launch): one
torchrun per node through `srun --ntasks-per-node 1`, the rendezvous on the allocation's first
node. Sandboxed (worker.slurm.boundary, a `Handoff`), each node's task opens the descriptors
the sandbox reads (the job's environment, its /etc files) from the attempt's folder, adds the
node's own values to them (Slurm's CUDA_VISIBLE_DEVICES, the interface, the node's name),
clears its own environment down to the launch's (PATH, a locale, the job token: built from
nothing, worker.privileged_env) and execs bwrap: a run's variables are never exported by the
script, they reach the job through torchyard/env_handoff.py after the privilege drop. Not
sandboxed (TORCHYARD_JOB_ISOLATION=off), the script exports the launch's environment itself.
Either way no variable of the worker's own reaches the job (sbatch --export=NONE).
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


# What a sandboxed job's environment takes of the node's task: the GPUs Slurm gave the step,
# the interface a multi-node job talks over (_INTERFACE), the Slurm job's id.
NODE_VARIABLES = (
    "CUDA_VISIBLE_DEVICES",
    "GLOO_SOCKET_IFNAME",
    "NCCL_SOCKET_IFNAME",
    "SLURM_JOB_ID",
)
# The task's exit code when the node cannot run the job in its sandbox (a tool missing).
NODE_REFUSED = 126


@dataclass(frozen=True)
class JobFiles:
    """Where the attempt's job reads and writes on the shared folder: the run's log in the
    run's folder; the batch script and the sandbox's descriptors in `folder`, outside it (the
    job's uid owns its run's folder, and the script runs as the service's account or root)."""

    run_dir: Path
    attempt: int
    folder: Path

    @property
    def script(self) -> Path:
        return self.folder / f"attempt-{self.attempt}.sh"

    @property
    def descriptors(self) -> str:  # the glob of the attempt's descriptor files in `folder`
        return f"attempt-{self.attempt}.fd*"

    def descriptor(self, fd: int) -> Path:
        return self.folder / self.descriptors.replace("*", str(fd))

    @property
    def exit_record(self) -> Path:  # the batch step's "job=<id> exit=<srun's status>" line
        return self.folder / f"attempt-{self.attempt}.exit"

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


@dataclass(frozen=True)
class Handoff:
    """A sandboxed launch's descriptors, each a file of the attempt's folder the node's task
    opens at its number (`files`); `env` (the job's environment) and `hosts` (its /etc/hosts)
    get the node's own lines. `tools`: what the node must have to run it (bwrap, setpriv, the
    network helper's tools, the worker's interpreter for the handoff), by absolute path."""

    files: tuple[tuple[int, Path], ...]
    env: int
    hosts: int | None
    tools: tuple[str, ...]
    # A root worker's multi-node job shares the node's network: its run uids (first, last)
    # get no loopback on the node (`_loopback_fence`).
    fenced_uids: tuple[int, int] | None = None


def _loopback_fence(first: int, last: int) -> list[str]:
    """An nft table of the node (made once, kept: it only ever refuses) in which no process of
    a run uid reaches the node's loopback (127.0.0.0/8, ::1): slurmd, munge, whatever trusts
    local connections. The ranks meet on the node's address, never on loopback."""
    table = f"torchyard_jobs_{first}"
    uids = f"{first}-{last}"
    refuse = (
        "    echo \"torchyard: node $(hostname) cannot fence its loopback from the run's uid"
        " (nft): a multi-node job shares the node's network, so it is not started\" >&2"
    )
    return [
        f"  if ! nft list table inet {table} >/dev/null 2>&1; then",
        "    nft -f - <<'NFT' || {",
        f"table inet {table} {{",
        "  chain output {",
        "    type filter hook output priority 0; policy accept;",
        f"    meta skuid {uids} ip daddr 127.0.0.0/8 reject",
        f"    meta skuid {uids} ip6 daddr ::1 reject",
        "  }",
        "}",
        "NFT",
        refuse,
        f"      exit {NODE_REFUSED}",
        "    }",
        "  fi",
    ]


def _node_lines(handoff: Handoff) -> list[str]:
    """The task's lines before the exec of a sandboxed launch: the tools checked, each
    descriptor opened (the node's values added to a private copy), the environment cleared."""
    tools = " ".join(shlex.quote(t) for t in handoff.tools)
    lines = [
        f"  for tool in {tools}; do",
        '    if [ ! -x "$tool" ]; then',
        "      echo \"torchyard: node $(hostname) has no $tool: the run's job is not started"
        " outside its sandbox (install bubblewrap and the tools of docs/clusters.md on every"
        ' node)" >&2',
        f"      exit {NODE_REFUSED}",
        "    fi",
        "  done",
    ]
    if handoff.fenced_uids is not None:
        lines += _loopback_fence(*handoff.fenced_uids)
    for fd, path in handoff.files:
        source = shlex.quote(str(path))
        if fd not in (handoff.env, handoff.hosts):
            lines.append(f"  exec {fd}<{source}")
            continue
        lines += ['  copy="$(mktemp)"', f'  cat {source} > "$copy"']
        if fd == handoff.env:
            lines += [
                f'  [ -z "${{{name}+x}}" ] || printf \'%s=%s\\0\' {name} "${name}" >> "$copy"'
                for name in NODE_VARIABLES
            ]
        else:  # the node's name on the job's loopback, as a local job's host's (worker.job_etc)
            lines.append('  printf \'127.0.1.1 %s\\n\' "$(hostname)" >> "$copy"')
        lines += [f'  exec {fd}<"$copy"', '  rm -f "$copy"']
    # Nothing of the task's own environment (Slurm's, the batch's) for bwrap and setpriv: its
    # variables stay the shell's own (the argv's $SLURM_NODEID), exported no more.
    lines.append('  while read -r name; do export -n "$name"; done < <(compgen -e)')
    return lines


def batch_script(
    launch: Launch, files: JobFiles, *, nodes: int, handoff: Handoff | None = None
) -> str:
    """The batch script: run as the batch step (`sbatch`), it starts one task per node through
    srun, each of which runs this script again as `task` (from the shared folder) and execs
    the node's torchrun (or the job runtime itself, for a one-process run), inside the run's
    sandbox with a `handoff`."""
    exports = [
        f"export {name}={shlex.quote(value)}"
        for name, value in sorted(launch.env.items())
        if name not in _SLURM_OWNS
    ]
    argv = " ".join(_word(w) for w in launch.argv)
    script = shlex.quote(str(files.script))
    record = shlex.quote(str(files.exit_record))
    return "\n".join(
        [
            "#!/bin/bash",
            f"# torchyard: run attempt {files.attempt}'s job (worker.slurm.batch); do not edit",
            "set -u",
            'if [ "${1:-}" = task ]; then',
            *(_INTERFACE if nodes > 1 else []),
            *(_node_lines(handoff) if handoff is not None else []),
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
            "code=$?",
            # The job's end for a worker that finds Slurm forgot it (worker.slurm.track
            # .recorded_end): written by the batch step, outside the sandbox, into the attempt's
            # folder, which no job sees; renamed into place, never read half written.
            f'printf \'job=%s exit=%s\\n\' "$SLURM_JOB_ID" "$code" > {record}.new'
            f" && mv -f {record}.new {record}",
            'exit "$code"',
            "",
        ]
    )
