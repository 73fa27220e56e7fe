"""worker/sandbox.py: the exact bwrap argv around the launcher's, and real sandboxes (as root
with a run uid, and as a worker that is not root) showing what a job can and cannot see."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.runs.files.job_files import FileRefused, regular_fd
from tests.waits import wait_for
from torchyard.env_handoff import read_environment
from worker import job_etc
from worker.gpus import device_minors
from worker.launcher import Launch
from worker.privileged_env import HANDOFF_SCRIPT, scratch
from worker.process import JobProcess, pids_in_namespace
from worker.sandbox import (
    SandboxSpec,
    decide,
    describe,
    device_nodes,
    interpreter_paths,
    job_environment,
    wrap,
)

HAS_BWRAP = shutil.which("bwrap") is not None
needs_bwrap = pytest.mark.skipif(
    not HAS_BWRAP and os.environ.get("CI") != "true", reason="bubblewrap is not installed"
)

JOB = Launch(
    argv=["/venv/bin/python", "-m", "torchyard.job"],
    env={"PATH": "/usr/bin", "TORCHYARD_JOB_TOKEN": "t0k3n", "HOME": "/root"},
    cwd=Path("/data/runs/7/work"),
)


def ro_try(*paths: str) -> list[str]:
    return [arg for path in paths for arg in ("--ro-bind-try", path, path)]


def ro_data(fds: tuple[int, ...], *paths: str) -> list[str]:
    pairs = zip(fds, paths, strict=True)
    return [a for fd, path in pairs for a in ("--perms", "0644", "--ro-bind-data", str(fd), path)]


def make_dirs(*paths: str) -> list[str]:
    return [arg for path in paths for arg in ("--perms", "0755", "--dir", path)]


def test_a_root_worker_drops_the_job_to_the_runs_uid_inside_the_sandbox() -> None:
    spec = SandboxSpec(
        run_dir=Path("/data/runs/7"),
        home=Path("/data/runs/7/home"),
        read_only=(Path("/venv"), Path("/srv/workspace")),
        hidden=(Path("/data"),),
        read_only_fds=((9, Path("/data/runs/3/checkpoints/last.pt")),),
        devices=(Path("/dev/nvidia0"), Path("/dev/nvidiactl")),
        uid=200007,
        bwrap="/usr/bin/bwrap",
        setpriv="/usr/bin/setpriv",
    )
    wrapped = wrap(JOB, spec)
    etc_fds, env_fd = wrapped.pass_fds[1:-1], wrapped.pass_fds[-1]
    with open(etc_fds[0], closefd=False) as passwd:
        assert (
            "torchyard:x:200007:200007:torchyard job:/data/runs/7/home:/bin/sh\n" in passwd.read()
        )
    assert wrapped.argv == [
        "/usr/bin/bwrap",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--die-with-parent",
        "--new-session",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--perms",
        "1777",
        "--tmpfs",
        "/dev/shm",
        "--perms",
        "1777",
        "--tmpfs",
        "/tmp",
        "--dev-bind-try",
        "/dev/nvidia0",
        "/dev/nvidia0",
        "--dev-bind-try",
        "/dev/nvidiactl",
        "/dev/nvidiactl",
        # outermost first; each path once; parents in a tmpfs made 0755 (bwrap's are 0700)
        *ro_try("/bin", "/lib", "/lib32", "/lib64", "/libx32", "/opt", "/sbin"),
        *ro_try("/sys", "/usr"),
        *("--ro-bind", "/venv", "/venv"),
        *make_dirs("/srv"),
        *("--ro-bind", "/srv/workspace", "/srv/workspace"),
        *make_dirs("/run", "/run/systemd"),
        *ro_try("/run/systemd/resolve"),
        # not the host's /etc: what programs need (worker/job_etc.py), the job's own account
        *make_dirs("/etc"),
        *ro_try(*(f"/etc/{name}" for name in job_etc.BOUND)),
        *ro_data(etc_fds, "/etc/passwd", "/etc/group", "/etc/nsswitch.conf", "/etc/hosts"),
        # /data is inside nothing readable: no mask needed
        *make_dirs("/data", "/data/runs"),
        *("--bind", "/data/runs/7", "/data/runs/7"),
        *make_dirs("/data/runs/3", "/data/runs/3/checkpoints"),
        *("--ro-bind-fd", "9", "/data/runs/3/checkpoints/last.pt"),
        "--chdir",
        "/data/runs/7/work",
        "--cap-add",
        "CAP_SETUID",
        "--cap-add",
        "CAP_SETGID",
        "--cap-add",
        "CAP_SETPCAP",
        "--",
        "/usr/bin/setpriv",
        "--reuid=200007",
        "--regid=200007",
        "--clear-groups",
        "--no-new-privs",
        "--bounding-set=-all",
        "--inh-caps=-all",
        "--",
        # the job's first process of its own: takes its environment from the memfd
        *(sys.executable, "-I", "-S", str(HANDOFF_SCRIPT), "--env-fd", str(env_fd), "--"),
        "/venv/bin/python",
        "-m",
        "torchyard.job",
    ]
    # The job's environment travels in a memfd the handoff reads after the drop, never in
    # argv (world-readable in /proc) nor in bwrap's and setpriv's (root's) environment.
    user = {"USER": "torchyard", "LOGNAME": "torchyard"}
    job_env = {**JOB.env, "HOME": "/data/runs/7/home", "TMPDIR": "/tmp", **user}
    assert read_environment(env_fd) == job_env
    assert wrapped.env == {**scratch(), "TORCHYARD_JOB_TOKEN": "t0k3n"}
    assert not any("t0k3n" in arg for arg in wrapped.argv)
    assert wrapped.cwd == JOB.cwd and wrapped.pass_fds[0] == 9 and len(etc_fds) == 4
    for fd in (*etc_fds, env_fd):
        os.close(fd)


def test_a_checkpoint_to_resume_from_is_opened_without_following_any_link(tmp_path: Path) -> None:
    """bwrap binds as root: a link another run's job put in place of its checkpoint (or of a
    folder on the way) must not bind the database into the resumed run's sandbox."""
    runs = tmp_path / "runs"
    (runs / "3" / "checkpoints").mkdir(parents=True)
    (runs / "3" / "checkpoints" / "last.pt").write_bytes(b"weights")
    (tmp_path / "torchyard.db").write_bytes(b"secret rows")
    fd = regular_fd(runs, "3/checkpoints/last.pt")
    try:
        assert os.read(fd, 100) == b"weights"
    finally:
        os.close(fd)
    (runs / "3" / "checkpoints" / "link.pt").symlink_to(tmp_path / "torchyard.db")
    (runs / "4").symlink_to(runs / "3")
    os.mkfifo(runs / "3" / "checkpoints" / "fifo.pt")
    for relative in ("3/checkpoints/link.pt", "4/checkpoints/last.pt"):
        with pytest.raises(FileNotFoundError):
            regular_fd(runs, relative)
    for relative in ("3/checkpoints/fifo.pt", "3/checkpoints", "../torchyard.db"):
        with pytest.raises(FileRefused):
            regular_fd(runs, relative)


def test_a_worker_that_is_not_root_uses_a_user_namespace_and_keeps_its_uid() -> None:
    spec = SandboxSpec(run_dir=Path("/data/runs/7"), home=Path("/h"), read_only=())
    argv = wrap(JOB, spec).argv
    assert argv[:10] == [
        "bwrap",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--die-with-parent",
        "--new-session",
        "--unshare-user",
        "--disable-userns",
        "--proc",
    ]
    assert "setpriv" not in argv and "--cap-add" not in argv
    inner = argv[argv.index("--") + 1 :]
    assert inner[:5] == [sys.executable, "-I", "-S", str(HANDOFF_SCRIPT), "--env-fd"]
    assert inner[6:] == ["--", *JOB.argv]


def test_a_data_dir_inside_a_readable_folder_is_masked_before_the_run_dir_is_bound() -> None:
    """`torchyard up` run in the checkout: ./torchyard-data sits in a sys.path folder."""
    spec = SandboxSpec(
        run_dir=Path("/src/ty/torchyard-data/runs/7"),
        home=Path("/h"),
        read_only=(Path("/src/ty"), Path("/src/ty/torchyard")),  # nested: bound once
        hidden=(Path("/src/ty/torchyard-data"),),
    )
    argv = wrap(JOB, spec).argv
    assert argv.count("/src/ty/torchyard") == 0
    bound = argv.index("/src/ty")
    assert argv[bound - 5 : bound + 2] == [*make_dirs("/src"), "--ro-bind", "/src/ty", "/src/ty"]
    masked = argv.index("/src/ty/torchyard-data")
    assert bound < masked and argv[masked - 1] == "--tmpfs"
    assert argv[masked + 1 : argv.index("--chdir")] == [
        *make_dirs("/src/ty/torchyard-data/runs"),
        *("--bind", "/src/ty/torchyard-data/runs/7", "/src/ty/torchyard-data/runs/7"),
    ]


def test_without_bubblewrap_auto_runs_unisolated_and_says_why(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap on it
    decide.cache_clear()
    try:
        isolation = decide("auto", 200000)
    finally:
        decide.cache_clear()
    assert not isolation.enabled
    assert describe(isolation) == (
        "job isolation: OFF: bubblewrap is not installed (apt-get install bubblewrap). Jobs run "
        "as this service's own user and can read its database, its environment and every "
        "run's files"
    )
    assert describe(decide("off", 200000)).startswith("job isolation: OFF: job isolation is off")


def test_a_worker_that_must_isolate_refuses_to_start_without_bubblewrap(tmp_path: Path) -> None:
    env = {**os.environ, "PATH": str(tmp_path), "TORCHYARD_JOB_ISOLATION": "bwrap"}
    done = subprocess.run(
        [sys.executable, "-P", "-m", "worker", "worker"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "job isolation: OFF: bubblewrap is not installed" in done.stderr
    assert "job network: host (no sandbox): jobs share this machine's network" in done.stderr
    assert "refusing to start: TORCHYARD_JOB_ISOLATION=bwrap requires the sandbox" in done.stderr


def test_the_job_gets_none_of_the_services_variables() -> None:
    worker_env = {
        "PATH": "/usr/bin",
        "LANG": "C.UTF-8",
        "HF_HUB_OFFLINE": "1",
        "NCCL_DEBUG": "INFO",
        "TORCHYARD_SECRET_KEY": "s",
        "TORCHYARD_DATABASE_URL": "postgresql://u:p@db/x",
        "POSTGRES_PASSWORD": "p",
        "PGPASSWORD": "p",
        "AWS_SECRET_ACCESS_KEY": "k",
        "HF_TOKEN": "hf_x",
        "WANDB_API_KEY": "w",
        "my_db_password": "p",
    }
    assert job_environment(worker_env) == {
        "PATH": "/usr/bin",
        "LANG": "C.UTF-8",
        "HF_HUB_OFFLINE": "1",
        "NCCL_DEBUG": "INFO",
    }


class StandInNVML:
    """pynvml's calls device_minors makes, for a box whose cards' minors are not their indices."""

    MINORS = {0: 3, 1: 0}

    def nvmlInit(self) -> None: ...

    def nvmlShutdown(self) -> None: ...

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetMinorNumber(self, handle: int) -> int:
        return self.MINORS[handle]


def test_a_run_gets_the_device_nodes_of_its_leased_gpus_only(tmp_path: Path) -> None:
    for name in ("nvidia0", "nvidia3", "nvidiactl", "nvidia-uvm", "nvidia-caps/nvidia-cap1"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).touch()
    control = [tmp_path / "nvidia-caps/nvidia-cap1", tmp_path / "nvidia-uvm"]
    control += [tmp_path / "nvidiactl"]
    minors = device_minors((0,), nvml=StandInNVML())
    assert minors == (3,)
    assert device_nodes(minors, dev=tmp_path) == tuple(sorted([*control, tmp_path / "nvidia3"]))
    assert device_nodes((), dev=tmp_path) == tuple(sorted(control))  # gpus: 0, no card
    # NVML cannot say (a fake inventory): every card; CUDA_VISIBLE_DEVICES picks
    cards = [tmp_path / "nvidia0", tmp_path / "nvidia3"]
    assert device_nodes(None, dev=tmp_path) == tuple(sorted([*control, *cards]))


def test_the_interpreter_paths_hold_this_python_and_torchyard() -> None:
    import torchyard

    paths = interpreter_paths()
    assert Path(sys.prefix) in paths and Path(sys.base_prefix) in paths
    here = Path(torchyard.__file__).resolve()
    assert any(here.is_relative_to(p) for p in paths)


@pytest.fixture
def box() -> Iterator[Path]:
    """A folder every uid may enter (pytest's tmp_path is 0700 root's): a data dir with a
    database and another run, and a run dir."""
    root = Path(tempfile.mkdtemp(prefix="torchyard-sandbox-"))
    root.chmod(0o755)
    (root / "data" / "runs" / "1").mkdir(parents=True)
    (root / "data" / "runs" / "2" / "home").mkdir(parents=True)
    (root / "data" / "torchyard.db").write_text("secret rows")
    (root / "data" / "runs" / "1" / "output.log").write_text("another run")
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


PROBE = """
import os, sys
print("uid", os.getuid(), os.getgid(), os.getgroups())
print("pids", sorted(int(p) for p in os.listdir("/proc") if p.isdigit()))
for path in sys.argv[1:]:
    print("exists" if os.path.exists(path) else "absent", path)
open("written", "w").write("ok")
import tempfile
for folder in ("/tmp", "/dev/shm"):  # the run's uid writes its scratch files there
    with tempfile.NamedTemporaryFile(dir=folder) as scratch:
        scratch.write(b"x")
"""


def probe_argv(data: Path) -> list[str]:
    return [sys.executable, "-c", PROBE, str(data / "torchyard.db"), str(data / "runs" / "1")]


@needs_bwrap
@pytest.mark.skipif(os.geteuid() != 0, reason="the per-run uid needs a root worker")
def test_a_root_workers_job_runs_as_the_runs_uid_and_sees_only_its_own(box: Path) -> None:
    isolation = decide("bwrap", 200000)
    assert isolation.enabled and isolation.as_root, isolation.reason
    data, run_dir = box / "data", box / "data" / "runs" / "2"
    os.chown(run_dir, 200002, 200002)
    spec = SandboxSpec(
        run_dir=run_dir,
        home=run_dir / "home",
        read_only=interpreter_paths(),
        hidden=(data,),
        uid=200002,
        bwrap=isolation.bwrap,
        setpriv=isolation.setpriv,
    )
    launch = wrap(Launch(argv=probe_argv(data), env=dict(os.environ), cwd=run_dir), spec)
    job = JobProcess(launch, log_path=box / "job.log", cwd=run_dir, token="t", sandboxed=True)
    assert job.wait() == 0, (box / "job.log").read_text()
    lines = (box / "job.log").read_text().splitlines()
    assert lines[0] == "uid 200002 200002 []"
    assert lines[1] in ("pids [1, 2]", "pids [1, 2, 3]"), lines
    assert lines[2:] == [f"absent {data / 'torchyard.db'}", f"absent {data / 'runs' / '1'}"]
    assert (run_dir / "written").stat().st_uid == 200002


@pytest.fixture
def interpreter_reachable_by_others() -> Iterator[None]:
    """The test's interpreter may live under root's 0700 home (pyenv in /root here and in CI),
    which a worker running as nobody could not reach; a real non-root worker's interpreter is
    its own. Each folder on the way gets the others' search bit for the test, then its mode
    back."""
    changed = []
    for folder in reversed(Path(sys.executable).resolve().parents):
        mode = folder.stat().st_mode & 0o7777
        if not mode & 0o001:
            folder.chmod(mode | 0o001)
            changed.append((folder, mode))
    try:
        yield
    finally:
        for folder, mode in changed:
            folder.chmod(mode)


@needs_bwrap
@pytest.mark.skipif(os.geteuid() != 0, reason="becoming another user needs root")
@pytest.mark.usefixtures("interpreter_reachable_by_others")
def test_a_worker_that_is_not_root_sandboxes_in_a_user_namespace(box: Path) -> None:
    """The worker's part runs as nobody (65534): the probe, the wrap, the job."""
    data, run_dir = box / "data", box / "data" / "runs" / "2"
    os.chown(run_dir, 65534, 65534)
    (box / "job.log").touch()
    os.chown(box / "job.log", 65534, 65534)
    worker_side = f"""
import os, sys
from pathlib import Path
from worker.gpus import device_minors
from worker.launcher import Launch
from worker.process import JobProcess
from worker.sandbox import (
    SandboxSpec,
    decide,
    describe,
    device_nodes,
    interpreter_paths,
    job_environment,
    wrap,
)
isolation = decide("bwrap", 200000)
assert isolation.enabled and not isolation.as_root, isolation.reason
run_dir, data = Path({str(run_dir)!r}), Path({str(data)!r})
spec = SandboxSpec(run_dir=run_dir, home=run_dir / "home", read_only=interpreter_paths(),
                   hidden=(data,), bwrap=isolation.bwrap)
launch = wrap(Launch(argv={probe_argv(data)!r}, env=dict(os.environ), cwd=run_dir), spec)
job = JobProcess(launch, log_path=Path({str(box / "job.log")!r}), cwd=run_dir, token="t",
                 sandboxed=True)
sys.exit(job.wait())
"""
    done = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
        + [sys.executable, "-c", worker_side],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    lines = (box / "job.log").read_text().splitlines()
    assert done.returncode == 0, (done.stderr, lines)
    assert lines[0] == "uid 65534 65534 [65534]" or lines[0].startswith("uid 65534 65534"), lines
    assert lines[1] in ("pids [1, 2]", "pids [1, 2, 3]"), lines
    assert lines[2:] == [f"absent {data / 'torchyard.db'}", f"absent {data / 'runs' / '1'}"]


DAEMON = """
import os, sys, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        sleep = "import time; time.sleep(600)"
        os.execv("/usr/bin/env", ["env", "-i", sys.executable, "-c", sleep])
    os._exit(0)
os.wait()
time.sleep(600)
"""


@needs_bwrap
def test_stop_ends_a_detached_daemon_with_the_pid_namespace(box: Path) -> None:
    isolation = decide("bwrap", 200000)
    run_dir = box / "data" / "runs" / "2"
    uid = 200002 if isolation.as_root else None
    if uid is not None:
        os.chown(run_dir, uid, uid)
    spec = SandboxSpec(
        run_dir=run_dir,
        home=run_dir,
        read_only=interpreter_paths(),
        uid=uid,
        bwrap=isolation.bwrap,
        setpriv=isolation.setpriv,
    )
    launch = wrap(Launch(argv=[sys.executable, "-c", DAEMON], env={}, cwd=run_dir), spec)
    job = JobProcess(launch, log_path=box / "job.log", cwd=run_dir, token="t", sandboxed=True)

    def full_namespace() -> str | None:
        init = job._namespace_init()
        # init, the job, the daemon (its parent exited)
        if init is not None and len(pids_in_namespace(init[1])) >= 3:
            return init[1]
        return None

    namespace = wait_for(full_namespace, timeout=20, what=lambda: (box / "job.log").read_text())
    started = time.monotonic()
    job.stop(grace_seconds=1.0)
    assert pids_in_namespace(namespace) == [] and time.monotonic() - started < 5
