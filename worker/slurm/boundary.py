"""The job boundary on a Slurm node (issue 40): each node's torchrun runs inside the sandbox a
local run gets (worker.job_sandbox.sandboxed: the same binds, hidden paths, generated /etc,
environment handoff), built on the submit host and carried to the node by the batch script
(worker.slurm.batch.Handoff).

- Who the job is. Slurm runs a job as the user who submitted it. A root worker's job starts as
  root on the node: bwrap builds the mounts and setpriv drops to the run's own uid
  (worker.sandbox.run_uid) before the job's interpreter, as on a local root worker. A worker
  running as the service's Slurm account: bwrap in an unprivileged user namespace, the job
  keeps the account's uid (the node must allow unprivileged user namespaces).
- What it sees. The data dir is hidden (the database's and broker's files, other runs'
  folders, this module's job files); its own run folder read-write, its code snapshot and
  environments read-only, the worker's interpreter (the handoff runs on it, so the worker's
  installation must be at the same path on every node: in the shared folder), the node's GPU
  device nodes where present (`node_devices`: every card; Slurm's `ConstrainDevices` keeps a
  job to the cards of its allocation, CUDA_VISIBLE_DEVICES is Slurm's).
- Descriptors. bwrap reads the job's /etc files, and the handoff the job's environment, from
  descriptors: memfds on the submit host. `handoff` writes each to a file of the attempt's
  folder (0600, in the data dir: hidden from every job) and closes it here; the node's task
  opens each file at the same number before it execs bwrap.
- The network. One node: the worker's TORCHYARD_JOB_NETWORK as locally (egress: a namespace
  of its own with slirp4netns, the node's loopback unreachable, the submit host's addresses
  and the service hosts blocked). Several nodes: the node's own network (its peers must reach
  its ranks); a root worker's run uids get no loopback on the node (an nft table the task
  makes: batch._loopback_fence), not the rest of a local multi-node job's fence.
- A node without the tools: the task refuses to start the job (batch.NODE_REFUSED), saying
  which tool is missing in the run's log, which the run's error shows.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from app.experiments.config.model import RunConfig
from app.settings import get_settings
from torchyard.env_handoff import ENV_FD_OPTION
from worker import job_network, job_sandbox, limits, sandbox
from worker.job_etc import ETC
from worker.job_policy import network_plan
from worker.launcher import Launch
from worker.run_prepare import Prepared
from worker.slurm.batch import Handoff, JobFiles

# Cards bound when the node has them (`--dev-bind-try`): more than any node of today holds.
NODE_CARDS = 16
CONTROL_DEVICES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset", "nvidia-caps")
JOBS_FOLDER = "slurm-jobs"
_CHUNK = 1 << 20


def job_files(run_id: int, attempt: int) -> JobFiles:
    """The attempt's files: its batch script and descriptors in the data dir, outside the run
    folder (which the job's uid owns)."""
    settings = get_settings()
    folder = settings.resolved_data_dir / JOBS_FOLDER / str(run_id)
    return JobFiles(settings.run_dir(run_id), attempt, folder)


def node_devices(dev: Path = Path("/dev")) -> tuple[Path, ...]:
    """The GPU device nodes a node's sandbox binds where they exist: the control nodes and
    every card (the submit host's own /dev says nothing about a node's)."""
    cards = [dev / f"nvidia{i}" for i in range(NODE_CARDS)]
    return (*(dev / name for name in CONTROL_DEVICES), *cards)


def network(config: RunConfig) -> job_network.Plan:
    return job_network.Plan("host") if config.resources.nodes > 1 else network_plan()


def sandboxed(
    launch: Launch,
    isolation: sandbox.Isolation,
    *,
    run_id: int,
    config: RunConfig,
    prepared: Prepared,
    resume: str | None,
    cache: tuple[Path, int | None],
) -> Launch:
    """The node's launch inside the run's sandbox (its descriptors still open here)."""
    return job_sandbox.sandboxed(
        launch,
        isolation,
        run_id=run_id,
        run_dir=get_settings().run_dir(run_id),
        script=prepared.script if prepared.unpacked is None else None,
        code=prepared.unpacked,
        gpus=(),
        resume=resume,
        python_dirs=prepared.python_dirs,
        cache=cache,
        held_to=limits.RunLimits.of(config.resources),
        nvml=False,
        network=network(config),
        devices=node_devices(),
    )


def node_tools(isolation: sandbox.Isolation, plan: job_network.Plan) -> tuple[str, ...]:
    """What a node must have at these paths to run the sandboxed launch (a multi-node job's
    loopback fence: nft, wherever the node's PATH has it)."""
    tools = [isolation.bwrap, sys.executable]
    if isolation.as_root:
        tools.append(isolation.setpriv)
    if plan.egress:
        tools += [t for t in (plan.slirp4netns, plan.nsenter, plan.ip) if t]
    return tuple(tools)


def fenced_uids(isolation: sandbox.Isolation, config: RunConfig) -> tuple[int, int] | None:
    """The run uids whose loopback a root worker's multi-node job fences on its nodes."""
    if not isolation.as_root or config.resources.nodes < 2:
        return None
    settings = get_settings()
    return settings.job_uid_base, settings.job_uid_base + settings.job_uid_count - 1


def handoff(
    launch: Launch,
    files: JobFiles,
    tools: tuple[str, ...],
    fenced: tuple[int, int] | None = None,
) -> Handoff:
    """Each descriptor of the sandboxed launch written to its file (0600) and closed here."""
    files.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    written = []
    for fd in launch.pass_fds:
        path = files.descriptor(fd)
        _copy(fd, path)
        os.close(fd)
        written.append((fd, path))
    argv = launch.argv
    env = int(argv[argv.index(ENV_FD_OPTION) + 1])
    hosts = next(
        (
            int(argv[i + 1])
            for i, word in enumerate(argv[:-2])
            if word == "--ro-bind-data" and argv[i + 2] == str(ETC / "hosts")
        ),
        None,
    )
    return Handoff(tuple(written), env, hosts, tools, fenced)


def forget(files: JobFiles) -> None:
    """The attempt's descriptor files removed (its job has ended); its script stays."""
    for path in files.folder.glob(files.descriptors):
        path.unlink(missing_ok=True)


def _copy(fd: int, path: Path) -> None:
    """The descriptor's whole content from offset 0 (a memfd's offset is at its end)."""
    out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        offset = 0
        while chunk := os.pread(fd, _CHUNK, offset):
            offset += len(chunk)
            view = memoryview(chunk)
            while view:
                view = view[os.write(out, view) :]
    finally:
        os.close(out)


def fresh_log(log: Path) -> None:
    """The run's log as a regular file before Slurm opens it as the job's submitter (root
    for a root worker): a link an earlier attempt's job left there is removed, not followed."""
    if log.is_symlink():
        log.unlink()
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o644)
    os.close(fd)
