"""A run's environment, made ready before its job starts (worker/environments.py builds it).

The run is already running (its GPUs leased) while pip works, which can take minutes, so the
build runs in a thread under the supervision loop that watches jobs (worker.supervision): it
heartbeats the run and its leases (the reaper must not take it for lost), ships the run's log
(pip's lines appear on the run page as they come, each as ``torchyard: pip: ...``), and kills
pip's whole process tree on a cancel, a hand-over or a worker shutdown. The time the
environment took (built, or found and reused) is said in the log. While it builds, the run's
phase is "building environment" with pip's last line (app.runs.state.phase.building /
build_progress: the API, `submit --follow` and the run page show it). A failed build raises
PipFailed: pip's ERROR lines first, then its other last lines (its "Looking in indexes"
preamble left out), so the line that matters is the error's first.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import signal
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from app.db import session_scope
from app.experiments.config.model import run_config
from app.runs.service import queued_config
from app.runs.state import phase
from app.settings import get_settings
from worker import privileged_env
from worker.db_retry import with_db
from worker.environments import BuildFailed, Cache, Env, pip_argv, run_requirements
from worker.heartbeat import Watched
from worker.ingest_steps import IngestSteps
from worker.run_log import note_in_log
from worker.supervision import Policy, Step, StopReason, ThreadTarget, supervise
from worker.supervision_steps import CheckIn, Forward, ShowLine

log = logging.getLogger(__name__)

ERROR_TAIL_LINES = 25
STOPPED_BUILD_WAIT_SECONDS = 10.0


# pip's preamble, said before anything is looked up: noise in a failed build's error.
PIP_PREAMBLE = ("Looking in indexes:", "Looking in links:")


class PipFailed(BuildFailed):
    """pip exited non-zero. Its message starts with pip's own ERROR lines."""


def pip_failure(code: int, tail: list[str]) -> str:
    """A failed pip's message: its ERROR lines first (the line that matters, in the first
    place a reader looks), then what it exited with, then its other last lines."""
    errors = [line for line in tail if line.startswith("ERROR:")]
    rest = [
        line
        for line in tail
        if line.strip() and not line.startswith("ERROR:") and not line.startswith(PIP_PREAMBLE)
    ]
    said = f"pip exited with code {code} building the run's environment"
    return "\n".join([*errors, said + (", after:" if rest else ""), *rest])


class Pip:
    """pip in the environment being built, each line of its output into the run's log."""

    def __init__(self, run_dir: Path, timeout: float) -> None:
        self.run_dir = run_dir
        self.timeout = timeout
        self.stopped = threading.Event()
        self._process: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()
        self._why_stopped = ""
        # pip's last line so far (the run's phase shows it); "" until pip says something.
        self.last_line = ""

    def install(
        self, python: Path, requirements: list[str], constraints: Path, *, cwd: Path
    ) -> None:
        if importlib.util.find_spec("pip") is None:  # a worker installed by uv, say
            raise BuildFailed(
                "the worker's Python has no pip, which builds run environments: install pip "
                f"into it ({sys.executable} -m ensurepip)"
            )
        with self._lock:
            if self.stopped.is_set():
                raise BuildFailed(self._why_stopped)
            # Built from nothing but the worker's own pip settings (its index, proxies): pip
            # runs as root, and no run's variable may reach it (worker.privileged_env).
            self._process = subprocess.Popen(
                pip_argv(python, requirements, constraints),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                env=privileged_env.for_build(os.environ),
                umask=0o022,  # read by a run's own uid (a root worker's sandbox)
                start_new_session=True,
            )
        timer = threading.Timer(self.timeout, self.stop, [f"took over {self.timeout:g} s"])
        timer.start()
        tail: deque[str] = deque(maxlen=ERROR_TAIL_LINES)
        try:
            assert self._process.stdout is not None
            with self._process.stdout as output:
                for raw in output:
                    line = raw.decode("utf-8", "replace").rstrip()
                    tail.append(line)
                    if line.strip():
                        self.last_line = line.strip()
                    note_in_log(self.run_dir, f"pip: {line}")
            code = self._process.wait()
        finally:
            timer.cancel()
        if self.stopped.is_set():
            raise BuildFailed(f"the build was stopped: {self._why_stopped}")
        if code != 0:
            raise PipFailed(pip_failure(code, list(tail)))

    def stop(self, why: str) -> None:
        with self._lock:
            self._why_stopped = why
            self.stopped.set()
            if self._process is not None and self._process.poll() is None:
                kill_tree(self._process.pid)


def kill_tree(pid: int) -> None:
    """SIGKILL pip's session (its own process group) and every process below it, also one
    that left the group (a build backend that made a session of its own): nothing of a
    stopped build goes on writing into the environment's folder."""
    try:
        leader = psutil.Process(pid)
        tree = [leader, *leader.children(recursive=True)]
    except psutil.NoSuchProcess:
        tree = []
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    for process in tree:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()


def _nothing() -> None:
    pass


@dataclass(frozen=True)
class Prepared:
    """The run's environment (kept from eviction until ``release`` is called, when its job has
    ended), or None when it asks for no packages; ``stopped`` when a cancel or a worker
    shutdown came first."""

    env: Env | None
    stopped: StopReason | None = None
    release: Callable[[], None] = field(default=_nothing)


class _Building:
    """Cache.use entered in a thread; whoever comes last (the thread, or the run that gave
    up waiting) leaves it, so the shared lock is never held by nobody's run."""

    def __init__(self, cache: Cache, requirements: list[str], pip: Pip) -> None:
        self._use = cache.use(requirements, pip)
        self._lock = threading.Lock()
        self._abandoned = False
        self.env: Env | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            env = self._use.__enter__()
        except BaseException as exc:
            self.error = exc
            return
        with self._lock:
            self.env = env
            if self._abandoned:
                self.release()

    def abandon(self) -> None:
        with self._lock:
            self._abandoned = True
            if self.env is not None:
                self.release()

    def release(self) -> None:
        self._use.__exit__(None, None, None)


def prepare(run: Watched, *, run_dir: Path, requirements: list[str]) -> Prepared:
    """The environment for ``requirements``; BuildFailed (pip's message) when it could not
    be built."""
    if not requirements:
        return Prepared(None)
    settings = get_settings()
    cache = Cache(
        settings.resolved_env_dir, settings.env_cache_max_bytes, settings.job_package_names
    )
    pip = Pip(run_dir, settings.env_build_timeout_seconds)
    note_in_log(run_dir, f"environment: {' '.join(requirements)}")
    with_db(
        run.run_id,
        "record the environment build's start",
        lambda s: phase.building(s, run_id=run.run_id, attempt=run.attempt),
    )
    building = _Building(cache, requirements, pip)
    thread = threading.Thread(target=building.run, name=f"run-{run.run_id}-env", daemon=True)
    thread.start()
    stopped = _keep_alive(run, thread, pip)
    if stopped is not None:  # pip's processes are killed already
        building.abandon()
        # pip is killed; its thread now removes the half-built folder. Waited for (a while:
        # the thread may instead be queued behind another build's lock) so that nothing
        # half-built outlives the run's final status.
        thread.join(timeout=STOPPED_BUILD_WAIT_SECONDS)
        return Prepared(None, stopped)
    if building.error is not None:
        if isinstance(building.error, BuildFailed | OSError):
            note_in_log(run_dir, f"environment: the build failed: {building.error}")
            if isinstance(building.error, PipFailed):
                raise building.error
            raise BuildFailed(str(building.error)) from building.error
        raise building.error
    env = building.env
    assert env is not None
    what = "built" if env.built else "reused"
    note_in_log(run_dir, f"environment {env.key} {what} in {env.seconds:.2f} s: {env.path}")
    log.info("run %s: environment %s %s in %.2f s", run.run_id, env.key, what, env.seconds)
    return Prepared(env, release=building.release)


def needs_build(run_id: int) -> bool:
    """The queued run asks for packages whose environment is not built on this host yet (its
    config's `environment.requirements`; a code snapshot's requirements.txt is known only
    once it is unpacked, in the run's slot). worker.slots gives such a run a build place."""
    with session_scope() as session:
        config = queued_config(session, run_id=run_id)
    if config is None:
        return False
    try:
        requirements = run_requirements(run_config(config), None)
    except Exception:  # a config the start refuses: the run's own start says why
        return False
    if not requirements:
        return False
    settings = get_settings()
    cache = Cache(
        settings.resolved_env_dir, settings.env_cache_max_bytes, settings.job_package_names
    )
    return not cache.built(requirements)


def _keep_alive(run: Watched, thread: threading.Thread, pip: Pip) -> StopReason | None:
    """The supervision loop (worker.supervision) over the build until ``thread`` ends: the
    run's log shipped, pip's last line shown, the check-in; pip's processes killed on a cancel,
    a hand-over or a worker shutdown (nothing of a build is left for the next worker)."""
    settings = get_settings()
    ingest = IngestSteps(run.run_id)
    steps: list[Step] = [ShowLine(ingest, run, lambda: pip.last_line), Forward(ingest, run)]
    steps.append(CheckIn(run))

    def halt(reason: StopReason) -> None:
        pip.stop(f"the run was {'cancelled' if reason is StopReason.CANCEL else 'handed back'}")

    target = ThreadTarget(thread, halt)
    policy = Policy(cancel_grace=settings.cancel_grace_seconds)
    interval = max(settings.forwarder_interval_seconds, 0.05)
    return supervise(f"run {run.run_id}'s build", target, steps, policy, interval=interval)
