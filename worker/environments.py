"""Runs' own virtual environments, layered on the job base: built once per host, cached.

A run that asks for packages (``environment.requirements`` in its config, or a
``requirements.txt`` at the root of its code snapshot) gets a virtual environment of its own
with just those installed; everything else, torch first, is the job base's (worker/job_base.py:
links to torch, numpy, the torchyard SDK, tensorboard and what they need, never the server's
packages), shared, never copied or reinstalled. A run that asks for nothing runs in the job
base itself:

- the environment is a stdlib ``venv`` of the worker's base interpreter without pip, whose
  site-packages holds one ``.pth`` line, ``import site; site.addsitedir(<the job base's
  site-packages>)``: the base's packages come after the environment's own on ``sys.path`` (so
  a requirement that pins another version of one of them wins), and their own ``.pth`` files
  (the editable torchyard install) work as in the worker;
- pip installs the requirements. It is the worker's pip run with ``--python`` (its code, the
  environment's interpreter), so it sees every package of the job base as installed: a
  requirement that depends on torch takes the worker's torch, one that asks for a server
  package (sqlalchemy) gets it in the environment. A constraint pins torch to the worker's
  version, so a requirement that would pull another copy fails the build with pip's message
  instead of downloading gigabytes. pip reads the worker's own configuration (pip.conf,
  PIP_INDEX_URL, PIP_EXTRA_INDEX_URL, PIP_FIND_LINKS): the index is whatever the worker's pip
  uses;
- wheels only (``--only-binary=:all:``): the build runs in the worker, outside the job's
  sandbox, and installing a wheel runs none of its code, while building a source
  distribution runs its setup.py;
- cached under ``env_dir/<key>``, the key a hash of the normalised requirements and the job
  base's key (the interpreter and the versions of the base's packages): an upgraded torch
  gives fresh environments, a package added to the server's side does not;
- built once per host: a file lock per key, so two runs asking at once build once (the
  second waits and reuses); built in a temp folder and renamed into place, so a crashed build
  leaves nothing that looks ready; the build's scripts are rewritten for the final path;
- each run holds a shared lock on its environment while its job runs; eviction (least
  recently used first, down to ``env_cache_max_bytes``) takes an exclusive one without
  waiting and so never removes one in use.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import secrets
import shutil
import stat
import sys
import time
import venv
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from app.experiments.config.model import RunConfig
from app.experiments.requirements import (
    MAX_REQUIREMENTS_FILE_BYTES,
    RequirementRefused,
    check_requirements,
    check_requirements_file,
    normal_form,
)
from app.runs.files.job_files import FileRefused, read_job_file
from worker import job_base
from worker.file_lock import flock
from worker.job_base import JobBase

log = logging.getLogger(__name__)

REQUIREMENTS_FILE = "requirements.txt"
MARKER = ".torchyard-env.json"
BASE_PTH = "_torchyard_job_base.pth"
LOCKS = ".locks"


def requirements_for(config_requirements: list[str], snapshot_root: Path | None) -> list[str]:
    """The run's requirements: its config's, then a ``requirements.txt`` at the root of its
    code snapshot (read as a regular file only, never through a link), each checked the same
    way and taken once. RequirementRefused names the line that is not allowed."""
    lines = list(config_requirements)
    source = "environment.requirements"
    if snapshot_root is not None:
        from_file = _requirements_file(snapshot_root / REQUIREMENTS_FILE)
        if from_file is not None:
            lines += check_requirements_file(from_file, source=REQUIREMENTS_FILE)
            source = f"environment.requirements and {REQUIREMENTS_FILE}"
    return check_requirements(lines, source=source)


def run_requirements(config: RunConfig, snapshot_root: Path | None) -> list[str]:
    """requirements_for a run's whole config (its `environment.requirements`, if any)."""
    return requirements_for(list(config.environment.requirements), snapshot_root)


def _requirements_file(path: Path) -> str | None:
    """The text of the snapshot's requirements.txt, None when there is none."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(info.st_mode):
        raise RequirementRefused(f"{REQUIREMENTS_FILE} is not a regular file")
    if info.st_size > MAX_REQUIREMENTS_FILE_BYTES:
        raise RequirementRefused(
            f"{REQUIREMENTS_FILE} is larger than {MAX_REQUIREMENTS_FILE_BYTES} bytes"
        )
    try:
        data = read_job_file(path, MAX_REQUIREMENTS_FILE_BYTES)
    except (FileRefused, OSError) as exc:
        raise RequirementRefused(f"cannot read {REQUIREMENTS_FILE}: {exc}") from None
    if data is None:
        raise RequirementRefused(f"cannot read {REQUIREMENTS_FILE}: replaced while read")
    return data.decode("utf-8", "replace")


def env_key(requirements: list[str], base: JobBase) -> str:
    """The requirements (however spelled) and the job base they are layered on: its key is
    the job's own packages', so a package added to the server's side changes no key."""
    identity = {"requirements": sorted({normal_form(r) for r in requirements}), "base": base.key}
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:24]


@dataclass(frozen=True)
class Env:
    key: str
    path: Path
    built: bool  # False: an environment built earlier was reused
    seconds: float

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"


class BuildFailed(Exception):
    """pip could not install the requirements; the message is its own (the last lines)."""


class Installer(Protocol):
    """Installs requirements into an environment (worker/env_build.py: pip, its output
    streamed into the run's log)."""

    def install(
        self, python: Path, requirements: list[str], constraints: Path, *, cwd: Path
    ) -> None: ...


def site_packages(env: Path) -> Path:
    return env / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"


class Cache:
    """The environments of one host, under ``root``."""

    def __init__(
        self,
        root: Path,
        max_bytes: int,
        job_packages: tuple[str, ...] = (),
        site_dirs: tuple[str, ...] | None = None,
    ) -> None:
        self.root = root
        self.max_bytes = max_bytes
        self.job_packages = job_packages  # settings.job_packages: in every job's base
        self.site_dirs = site_dirs  # the worker's site-packages (None: this interpreter's)

    def _lock(self, key: str, kind: str) -> Path:
        return self.root / LOCKS / f"{key}.{kind}"

    def built(self, requirements: list[str]) -> bool:
        """The environment for ``requirements`` is ready on this host: no build to wait for."""
        base = job_base.ensure(self.root, self.job_packages, self.site_dirs)
        return (self.root / env_key(requirements, base) / MARKER).is_file()

    @contextlib.contextmanager
    def use(self, requirements: list[str], builder: Installer) -> Iterator[Env]:
        """The environment for ``requirements``, built unless it is there, kept from
        eviction until the block ends (the job's whole life)."""
        started = time.monotonic()
        self.root.mkdir(parents=True, exist_ok=True)
        self.root.chmod(0o755)  # a run's uid reads its environment through it
        (self.root / LOCKS).mkdir(mode=0o700, exist_ok=True)
        base = job_base.ensure(self.root, self.job_packages, self.site_dirs)
        key = env_key(requirements, base)
        final = self.root / key
        # Shared before looking: an eviction (exclusive) either ended before, and the folder
        # is gone, or waits until this run ends.
        with flock(self._lock(key, "use"), fcntl.LOCK_SH):
            with flock(self._lock(key, "build"), fcntl.LOCK_EX):
                built = not (final / MARKER).is_file()
                if built:
                    self._build(key, final, requirements, base, builder)
                else:
                    os.utime(final / MARKER)  # the least recently used go first
            env = Env(key, final, built, time.monotonic() - started)
            self.evict(keep=key)
            yield env

    def _build(
        self, key: str, final: Path, requirements: list[str], base: JobBase, builder: Installer
    ) -> None:
        for stale in self.root.glob(f".build-{key}-*"):  # a crashed build's (we hold its lock)
            shutil.rmtree(stale, ignore_errors=True)
        if final.exists():  # no marker: not a finished environment
            shutil.rmtree(final)
        tmp = self.root / f".build-{key}-{secrets.token_hex(4)}"
        try:
            venv.EnvBuilder(symlinks=True, with_pip=False, prompt=f"torchyard-{key[:8]}").create(
                tmp
            )
            line = f"import site; site.addsitedir({str(base.site_dir)!r})\n"
            (site_packages(tmp) / BASE_PTH).write_text(line)
            constraints = tmp / ".torchyard-constraints.txt"
            pinned = f"torch=={base.torch_version}\n" if base.torch_version else ""
            constraints.write_text(pinned)
            if requirements:
                builder.install(tmp / "bin" / "python", requirements, constraints, cwd=tmp)
            if any(site_packages(tmp).glob("torch/__init__.py")):  # the constraint's backstop
                raise BuildFailed("the requirements installed a second torch")
            _relocate_scripts(tmp / "bin", str(tmp), str(final))
            _readable(tmp)
            record = {"key": key, "requirements": requirements, "size_bytes": _size(tmp)}
            (tmp / MARKER).write_text(json.dumps(record))
            (tmp / MARKER).chmod(0o644)
            os.rename(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise

    def evict(self, *, keep: str) -> list[str]:
        """Least recently used first, until the total is under the cap; an environment a
        run holds (its use lock) is skipped. Returns the keys removed."""
        ready: list[tuple[float, int, str]] = []
        for marker in self.root.glob(f"*/{MARKER}"):
            try:
                size = int(json.loads(marker.read_text())["size_bytes"])
                ready.append((marker.stat().st_mtime, size, marker.parent.name))
            except (OSError, ValueError, KeyError, TypeError):
                continue
        total = sum(size for _, size, _ in ready)
        removed: list[str] = []
        for _, size, key in sorted(ready):
            if total <= self.max_bytes:
                break
            if key == keep:
                continue
            with flock(self._lock(key, "use"), fcntl.LOCK_EX | fcntl.LOCK_NB) as free:
                if not free:
                    continue
                trash = self.root / f".evicted-{key}-{secrets.token_hex(4)}"
                try:
                    os.rename(self.root / key, trash)
                except OSError:
                    continue
            shutil.rmtree(trash, ignore_errors=True)
            log.info("run environment %s evicted (%d bytes; cap %d)", key, size, self.max_bytes)
            total -= size
            removed.append(key)
        return removed


def pip_argv(python: Path, requirements: list[str], constraints: Path) -> list[str]:
    """The worker's pip installing into the environment (``--python``: pip runs its own code
    with the environment's interpreter, which sees the job base's packages as installed, and
    no pip in the job's sight), wheels only, the worker's index configuration; ``--`` ends the
    options, so no requirement is read as one."""
    return [
        sys.executable,
        "-m",
        "pip",
        f"--python={python}",
        "install",
        "--no-input",
        "--disable-pip-version-check",
        "--no-warn-script-location",
        "--progress-bar=off",
        "--only-binary=:all:",
        f"--constraint={constraints}",
        "--",
        *requirements,
    ]


def _relocate_scripts(bin_dir: Path, old: str, new: str) -> None:
    """Console scripts and activate files name the folder they were built in."""
    for path in bin_dir.iterdir():
        if path.is_symlink() or not path.is_file() or path.stat().st_size > 1024**2:
            continue
        data = path.read_bytes()
        if old.encode() in data:
            path.write_bytes(data.replace(old.encode(), new.encode()))


def _readable(root: Path) -> None:
    """Readable by a run's own uid (a root worker's sandbox): the worker's umask is 077."""
    for folder, _dirs, files in os.walk(root):
        os.chmod(folder, 0o755)
        for name in files:
            path = os.path.join(folder, name)
            if not os.path.islink(path):
                mode = os.stat(path).st_mode
                os.chmod(path, 0o755 if mode & 0o100 else 0o644)


def _size(root: Path) -> int:
    total = 0
    for folder, _dirs, files in os.walk(root):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(folder, name)).st_blocks * 512
    return total
