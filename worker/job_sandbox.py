"""A job's sandbox as the worker builds it for a run (worker.sandbox, worker.job_network):
what it binds, hides and runs as, and the environment a job starts from. Used by every node
of a run (worker.runner)."""

from __future__ import annotations

import os
from pathlib import Path

from app.artifacts import renames_atomically, store_fs
from app.gpus.service import format_indices
from app.runs.files.job_files import FileRefused, regular_fd, within
from app.settings import get_settings
from torchyard.contract import RunPaths
from worker import job_network, limits, sandbox, user_cache
from worker.gpus import device_minors
from worker.launcher import Launch


def sandboxed(
    launch: Launch,
    isolation: sandbox.Isolation,
    *,
    run_id: int,
    run_dir: Path,
    script: Path | None,
    code: Path | None,
    gpus: tuple[int, ...],
    resume: str | None,
    python_dirs: tuple[Path, ...],
    cache: tuple[Path, int | None],
    held_to: limits.RunLimits,
    nvml: bool,
    network: job_network.Plan,
    devices: tuple[Path, ...] | None = None,
) -> Launch:
    """The launch inside the run's sandbox: its folder (owned by the run's uid when the worker
    is root), the interpreter, the workspace when it runs a script, a checkpoint to resume.
    `devices`: the device nodes to bind where present (a Slurm node's, not this host's);
    default: the GPUs of this host it was given."""
    settings = get_settings()
    uid = None
    if isolation.as_root:
        uid = sandbox.run_uid(run_id, settings.job_uid_base, settings.job_uid_count)
    home = RunPaths(run_dir).home
    sandbox.own_run_dir(run_dir, home, uid)
    workspace = (settings.workspace_dir.expanduser().resolve(),) if script is not None else ()
    resume_fds: tuple[tuple[int, Path], ...] = ()
    if resume and not within(settings.runs_dir / resume, run_dir):
        try:
            fd = regular_fd(settings.runs_dir, resume)
        except (OSError, FileRefused) as exc:
            raise RuntimeError(
                f"cannot open the checkpoint to resume from ({resume}): {exc}"
            ) from exc
        if os.fstat(fd).st_uid == os.geteuid():  # this worker's copy from the artifact store
            os.fchmod(fd, 0o644)
        resume_fds = ((fd, settings.runs_dir / resume),)
    spec = sandbox.SandboxSpec(
        run_dir=run_dir,
        home=home,
        read_only=(*sandbox.interpreter_paths(), *workspace, *python_dirs),
        hidden=(settings.resolved_data_dir, *_local_store(settings.artifact_store)),
        shared_read_only=(code,) if code is not None else (),
        read_only_fds=resume_fds,
        devices=devices
        if devices is not None
        else sandbox.device_nodes(device_minors(gpus) if nvml else None),
        uid=uid,
        shared=(cache[0],),
        group=cache[1],
        bwrap=isolation.bwrap,
        setpriv=isolation.setpriv,
        tmp_bytes=held_to.disk_bytes if isolation.sized_tmpfs else None,
        shm_bytes=held_to.memory_bytes if isolation.sized_tmpfs else None,
    )
    return job_network.attach(sandbox.wrap(launch, spec), network)


def user_group(owner_id: int) -> int:
    settings = get_settings()
    return user_cache.user_gid(owner_id, settings.job_uid_base, settings.job_uid_count)


def _local_store(url: str) -> tuple[Path, ...]:
    """An artifact store on a local or mounted file system: hidden from jobs like the data dir
    (it holds every run's checkpoints)."""
    if not url:
        return ()
    fs, root = store_fs(url)
    return (Path(root).resolve(),) if renames_atomically(fs) else ()


def job_base_env(gpu_indices: tuple[int, ...]) -> dict[str, str]:
    # The job must not inherit the worker's settings (database URLs, secrets).
    env = sandbox.job_environment(os.environ)
    # Exactly the leased GPUs; none at all ("") for a run without GPUs.
    env["CUDA_VISIBLE_DEVICES"] = format_indices(gpu_indices)
    return env
