"""Jobs in a bubblewrap sandbox: their own PID, IPC and mount namespaces, another OS identity.

A run's code is whatever a member uploaded, so it must not reach the server through the
machine: the service's processes and their environment (secret key, admin password), the
database and broker files, other runs' folders. `wrap` puts the launcher's argv (one launcher,
worker/launcher.py) inside Debian's ``bwrap``:

- a new root with only what the interpreter needs, read-only: the system directories, the
  Python installation and its packages (every ``sys.path`` folder), the workspace; the run's
  own folder read-write; a private ``/tmp`` and ``/dev/shm`` (gloo and NCCL need shared
  memory); the GPUs' device nodes. A readable folder that contains the data dir (a
  ``torchyard-data`` inside the checkout) gets an empty tmpfs over the data dir first, so the
  database, the broker and other runs stay out of sight;
- a new PID namespace, ``/proc`` of its own: the job sees its own processes only. Its first
  process is bwrap's init; when it dies the kernel kills every process in the namespace,
  however they detached (double fork, setsid, a clean environment). Cancel uses that
  (worker/process.py), not an environment scan;
- another identity. A worker running as root gives each run its own uid and gid
  (``job_uid_base + run_id % job_uid_count``): bwrap starts as root to build the mounts and
  ``setpriv`` drops to the run's uid with no groups, no capabilities (bounding set included)
  and no_new_privs before the job's interpreter starts. (bwrap's own ``--uid`` needs a user
  namespace, and one created by root maps the job to root outside.) A worker that is not root
  runs bwrap with ``--unshare-user``: the job keeps the worker's uid, but the mount and PID
  namespaces hide the same things.

Not the host's /etc: the files programs need and an account for the job's uid
(worker/job_etc.py). The network: a namespace of the job's own unless
TORCHYARD_JOB_NETWORK=host (worker/job_network.py, applied to this module's argv).

The job's environment (a member's ``env`` among it) never reaches bwrap, setpriv or anything
else that runs as root: they get one built from nothing, and the job's own travels in a memfd
that torchyard/env_handoff.py reads after the privilege drop (worker/privileged_env.py). Never
``--setenv``: argv is readable by every local user in ``/proc/<pid>/cmdline``.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from functools import lru_cache
from glob import glob
from pathlib import Path
from typing import Literal

from app.runs.files.job_files import within
from torchyard.contract import is_server_variable
from worker import job_etc, privileged_env
from worker.launcher import Launch

log = logging.getLogger(__name__)

# Read-only when present. Not /home, /root, /var, /run, /srv, /mnt: other people's files,
# service state (a PostgreSQL data dir, the Docker socket) and mounts the job has no need of.
SYSTEM_PATHS = (
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/opt",
    "/sys",
    # /etc/resolv.conf is a link into it on systemd-resolved hosts.
    "/run/systemd/resolve",
)
# NVIDIA's device nodes every CUDA process needs (control, UVM, MIG capabilities); the cards
# themselves are /dev/nvidia<minor>.
CONTROL_DEVICE_GLOBS = (
    "nvidiactl",
    "nvidia-uvm",
    "nvidia-uvm-tools",
    "nvidia-modeset",
    "nvidia-caps/*",
)
DROP_PRIVILEGES = (
    "--clear-groups",
    "--no-new-privs",
    "--bounding-set=-all",
    "--inh-caps=-all",
)
PROBE_TIMEOUT_SECONDS = 30.0
# The worker's variables a job does not get (torchyard.contract.is_server_variable):
# torchyard's settings (database and broker URLs, secret key, admin password), the team
# deployment's .env (POSTGRES_PASSWORD, cloud keys of the artifact store) and anything named
# like a credential.

Mode = Literal["auto", "bwrap", "off"]


@dataclass(frozen=True)
class SandboxSpec:
    """What one run's sandbox shows. Paths are absolute and appear at the same place inside,
    so the launcher's paths (run dir, script, resume checkpoint) need no translation."""

    run_dir: Path
    home: Path
    read_only: tuple[Path, ...]
    # Hidden even when a read-only folder contains them (the data dir).
    hidden: tuple[Path, ...] = ()
    # Read-only folders inside a hidden one, shown again: a run's shared code snapshot in the
    # data dir (worker/snapshots.py).
    shared_read_only: tuple[Path, ...] = ()
    # Single read-only files outside the run dir, as (descriptor, place in the sandbox): a
    # checkpoint to resume from, opened by app.runs.files.job_files.regular_fd (bwrap, as root,
    # would follow a link another run's job put in place of the file after the API checked it).
    read_only_fds: tuple[tuple[int, Path], ...] = ()
    devices: tuple[Path, ...] = ()
    # The run's uid (and gid) when the worker is root; None: a user namespace, worker's uid.
    uid: int | None = None
    # Read-write folders outside the run dir (the user's HF_HOME/TORCH_HOME cache,
    # worker/user_cache.py), and the one supplementary group a root worker's job gets to
    # share them with the same user's other runs (None: no group at all).
    shared: tuple[Path, ...] = ()
    group: int | None = None
    bwrap: str = "bwrap"
    setpriv: str = "setpriv"
    # Sizes of the job's /tmp and /dev/shm tmpfs (its disk_gb and memory_gb: worker.limits);
    # None: the kernel's default, half the RAM (a bwrap before 0.8 has no --size).
    tmp_bytes: int | None = None
    shm_bytes: int | None = None


class _Mounts:
    """bwrap's mount arguments in order, creating each mount point's parents with 0755: bwrap
    makes missing parents with 0700, which the run's uid could not enter."""

    def __init__(self) -> None:
        self.args: list[str] = []
        # (destination, is a tmpfs); later entries are mounted over earlier ones.
        self._mounts: list[tuple[Path, bool]] = [(Path("/"), True)]
        self._made: set[Path] = set()

    def _needs_dir(self, path: Path) -> bool:
        """A parent must be made when the mount it falls in is a tmpfs (bwrap's root, /tmp,
        a mask); inside a bind it exists already, as it does on the host."""
        if path in self._made:
            return False
        owner = max(
            (m for m in enumerate(self._mounts) if within(path, m[1][0])),
            key=lambda m: (len(m[1][0].parts), m[0]),
        )[1]
        return owner[1] and owner[0] != path

    def add(
        self,
        option: str,
        source: Path | None,
        dest: Path,
        *,
        tmpfs: bool = False,
        perms: str | None = None,
        size: int | None = None,
    ) -> None:
        for parent in reversed(dest.parents[:-1]):  # top down, "/" left out
            if self._needs_dir(parent):
                self.args += ["--perms", "0755", "--dir", str(parent)]
                self._made.add(parent)
        if perms is not None:
            self.args += ["--perms", perms]
        if size is not None:
            self.args += ["--size", str(size)]
        self.args += [option, *([str(source)] if source is not None else []), str(dest)]
        self._mounts.append((dest, tmpfs))


def _outermost(paths: Iterable[Path]) -> list[Path]:
    """Each path once, and none inside another (its bind would repeat the outer one)."""
    kept: list[Path] = []
    for path in sorted(set(paths), key=lambda p: (len(p.parts), str(p))):
        if not any(within(path, k) for k in kept):
            kept.append(path)
    return kept


def wrap(launch: Launch, spec: SandboxSpec) -> Launch:
    """The same job, started inside its sandbox: bwrap's argv around the launcher's."""
    argv = [
        spec.bwrap,
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--die-with-parent",
        "--new-session",
    ]
    if spec.uid is None:
        # Not root: a user namespace for the mounts; nested ones refused (a way back to
        # mount and PID namespace tricks the job has no use for).
        argv += ["--unshare-user", "--disable-userns"]
    mounts = _Mounts()
    mounts.add("--proc", None, Path("/proc"))
    mounts.add("--dev", None, Path("/dev"), tmpfs=True)
    # World-writable and sticky, as on the host: bwrap's tmpfs is 0755 root's, where the run's
    # uid could not write (tempfile, torch's inductor cache in /tmp/torchinductor_<user>).
    shm, tmp = spec.shm_bytes, spec.tmp_bytes
    mounts.add("--tmpfs", None, Path("/dev/shm"), tmpfs=True, perms="1777", size=shm)
    mounts.add("--tmpfs", None, Path("/tmp"), tmpfs=True, perms="1777", size=tmp)
    for device in spec.devices:
        mounts.add("--dev-bind-try", device, device)
    system = {Path(p) for p in SYSTEM_PATHS}
    readable = _outermost([*system, *spec.read_only])
    for path in readable:
        mounts.add("--ro-bind-try" if path in system else "--ro-bind", path, path)
    # Not the host's /etc: what programs need, and the job's own account (worker/job_etc.py).
    for name in job_etc.BOUND:
        mounts.add("--ro-bind-try", job_etc.ETC / name, job_etc.ETC / name)
    uid, gid = (spec.uid, spec.uid) if spec.uid is not None else (os.getuid(), os.getgid())
    etc_fds = []
    for name, text in job_etc.generated(uid, gid, spec.home).items():
        etc_fds.append(job_etc.data_fd(text))
        mounts.add("--ro-bind-data", Path(str(etc_fds[-1])), job_etc.ETC / name, perms="0644")
    for hidden in _outermost(spec.hidden):
        if any(within(hidden, r) for r in readable):
            mounts.add("--tmpfs", None, hidden, tmpfs=True)
    for shared in _outermost(spec.shared_read_only):
        mounts.add("--ro-bind", shared, shared)
    mounts.add("--bind", spec.run_dir, spec.run_dir)
    for folder in spec.shared:
        mounts.add("--bind", folder, folder)
    for fd, dest in spec.read_only_fds:
        mounts.add("--ro-bind-fd", Path(str(fd)), dest)
    argv += [*mounts.args, "--chdir", str(launch.cwd)]
    # The job's own environment reaches it only through the handoff, after the drop; bwrap,
    # setpriv and the helpers before them get one built from nothing (worker.privileged_env).
    job_env = dict(launch.env)
    job_env.update(
        HOME=str(spec.home), TMPDIR="/tmp", USER=job_etc.JOB_USER, LOGNAME=job_etc.JOB_USER
    )
    job = privileged_env.handed_over(replace(launch, env=job_env, pass_fds=()))
    inner = list(job.argv)
    if spec.uid is not None:
        # Kept for setpriv alone (bwrap gives a root-started child no capability otherwise);
        # setpriv drops them all, bounding set included, before the job's exec.
        argv += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_SETPCAP"]
        inner = [
            spec.setpriv,
            f"--reuid={spec.uid}",
            f"--regid={spec.uid}",
            *(DROP_PRIVILEGES if spec.group is None else _with_group(spec.group)),
            "--",
            *inner,
        ]
    fds = (*launch.pass_fds, *(fd for fd, _ in spec.read_only_fds), *etc_fds, *job.pass_fds)
    return replace(launch, argv=[*argv, "--", *inner], env=job.env, pass_fds=fds)


def _with_group(gid: int) -> tuple[str, ...]:
    """DROP_PRIVILEGES with one supplementary group instead of none."""
    return tuple(f"--groups={gid}" if a == "--clear-groups" else a for a in DROP_PRIVILEGES)


def job_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The worker's environment without what is the service's own (SERVER_VARIABLE_*)."""
    return {name: value for name, value in environ.items() if not is_server_variable(name)}


def interpreter_paths() -> tuple[Path, ...]:
    """What this interpreter imports from: its prefixes and every folder on sys.path (the
    editable install's source folders included, through its finder's mapping)."""
    paths = {Path(sys.prefix), Path(sys.base_prefix), Path(sys.exec_prefix)}
    paths.add(Path(sys.executable).resolve().parent.parent)
    for entry in sys.path:
        if entry and os.path.isdir(entry):
            paths.add(Path(entry).resolve())
    for package in ("torchyard", "worker"):
        module = sys.modules.get(package)
        for folder in getattr(module, "__path__", []) or []:
            paths.add(Path(folder).resolve())
    # Only folders this process can reach: bwrap refuses to start on a source path it cannot
    # open (a non-root worker whose interpreter's symlink points into a 0700 /root).
    return tuple(sorted(p for p in paths if os.path.isdir(p)))


def device_nodes(minors: Iterable[int] | None, dev: Path = Path("/dev")) -> tuple[Path, ...]:
    """The GPU device nodes a run's sandbox gets: the control nodes, and the cards with these
    minor numbers (its leased GPUs, worker.gpus.device_minors); every card when the minors are
    not known (no NVML: CUDA_VISIBLE_DEVICES alone then keeps the job to its lease)."""
    found = [Path(p) for pattern in CONTROL_DEVICE_GLOBS for p in glob(str(dev / pattern))]
    if minors is None:
        found += [p for p in dev.glob("nvidia*") if p.name.removeprefix("nvidia").isdigit()]
    else:
        found += [dev / f"nvidia{m}" for m in minors if (dev / f"nvidia{m}").exists()]
    return tuple(sorted(set(found)))


def run_uid(run_id: int, base: int, count: int) -> int:
    return base + run_id % count


def own_run_dir(run_dir: Path, home: Path, uid: int | None) -> None:
    """The run's folder, 0700, and its HOME; with a run uid, every file in it is the run's
    (lchown: a link the job left from an earlier attempt is changed, not what it points to)."""
    home.mkdir(parents=True, exist_ok=True)
    run_dir.chmod(0o700)
    if uid is None:
        return
    os.lchown(run_dir, uid, uid)
    for folder, dirs, files in os.walk(run_dir):
        for name in dirs + files:
            os.lchown(os.path.join(folder, name), uid, uid)


@dataclass(frozen=True)
class Isolation:
    """Whether this worker sandboxes its jobs, and a sentence saying why (printed at start)."""

    enabled: bool
    reason: str
    bwrap: str = "bwrap"
    setpriv: str = "setpriv"
    as_root: bool = False
    # bwrap 0.8 and later take --size for a tmpfs (the job's /tmp and /dev/shm get one).
    sized_tmpfs: bool = False


def _probe(bwrap: str, setpriv: str, as_root: bool, uid: int) -> str | None:
    """Runs `true` in a real sandbox built by `wrap`; None when it worked, else why not."""
    with tempfile.TemporaryDirectory(prefix="torchyard-probe-") as tmp:
        run_dir = Path(tmp) / "run"
        run_dir.mkdir()
        spec = SandboxSpec(
            run_dir=run_dir,
            home=run_dir,
            read_only=interpreter_paths(),
            uid=uid if as_root else None,
            bwrap=bwrap,
            setpriv=setpriv,
        )
        own_run_dir(run_dir, run_dir, spec.uid)
        launch = wrap(Launch(argv=["true"], env={"PATH": "/usr/bin:/bin"}, cwd=run_dir), spec)
        try:
            done = subprocess.run(
                launch.argv,
                env=launch.env,
                capture_output=True,
                timeout=PROBE_TIMEOUT_SECONDS,
                check=False,
                pass_fds=launch.pass_fds,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return str(exc)
        finally:
            for fd in launch.pass_fds:
                os.close(fd)
        if done.returncode != 0:
            lines = done.stderr.decode("utf-8", "replace").strip().splitlines()
            return lines[-1] if lines else f"exit code {done.returncode}"
    return None


@lru_cache
def decide(mode: Mode, uid_base: int) -> Isolation:
    """What this machine allows, asked once per process: "off" never isolates, "bwrap"
    requires it (the caller refuses to start without), "auto" isolates when it works."""
    if mode == "off":
        return Isolation(False, "job isolation is off (TORCHYARD_JOB_ISOLATION=off)")
    as_root = os.geteuid() == 0
    bwrap, setpriv = shutil.which("bwrap"), shutil.which("setpriv")
    if bwrap is None:
        return Isolation(False, "bubblewrap is not installed (apt-get install bubblewrap)")
    if as_root and setpriv is None:
        return Isolation(False, "setpriv is not installed (apt-get install util-linux)")
    failed = _probe(bwrap, setpriv or "setpriv", as_root, uid_base)
    if failed is not None:
        return Isolation(False, f"bubblewrap cannot make a sandbox here: {failed}")
    who = "a uid of their own per run" if as_root else "the worker's uid in a user namespace"
    help_text = subprocess.run([bwrap, "--help"], capture_output=True, text=True, check=False)
    return Isolation(
        True,
        f"jobs run in a bubblewrap sandbox ({who}; own PID and mount namespaces)",
        bwrap=bwrap,
        setpriv=setpriv or "setpriv",
        as_root=as_root,
        sized_tmpfs="--size" in help_text.stdout + help_text.stderr,
    )


def describe(isolation: Isolation) -> str:
    """The line the worker and `torchyard up` print at start."""
    if isolation.enabled:
        return f"job isolation: on: {isolation.reason}"
    return (
        f"job isolation: OFF: {isolation.reason}. Jobs run as this service's own user and can "
        "read its database, its environment and every run's files"
    )
