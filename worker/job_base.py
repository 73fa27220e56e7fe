"""The Python packages a job sees: torch, numpy, the SDK, tensorboard, mlflow, not the server's.

The worker's own virtual environment holds the server too (FastAPI, SQLAlchemy, Celery,
Alembic, Optuna, redis, ...). A job that imported from it would see them: a script that works
under torchyard would fail under plain Python (mlflow-skinny with a ``sqlite:`` URI finds
SQLAlchemy), and a run's requirements would be resolved against the server's pins. So a job's
interpreter is not the worker's: it is the *job base*, a stdlib ``venv`` of the worker's base
interpreter whose site-packages holds links to exactly

- the distributions in ``ROOTS`` (``torch``, ``numpy``, ``torchyard`` whose entry point
  ``torchyard.mlflow_store`` in-job MLflow clients need, ``tensorboard`` for
  ``torch.utils.tensorboard.SummaryWriter``, ``mlflow-skinny`` so that a script that only
  does ``import mlflow`` runs on the default install) and the operator's
  ``TORCHYARD_JOB_PACKAGES`` (a team's stack baked into the worker's image),
- and what they require, transitively (their metadata's ``Requires-Dist`` without extras):
  mlflow-skinny's include FastAPI, Starlette and uvicorn (``import mlflow`` imports FastAPI),
  so a job sees those as ``pip install mlflow-skinny`` under plain Python would give them;
  SQLAlchemy, Celery, Alembic, Optuna and redis stay out of its sight,

each linked at the outermost folder or file only allowed distributions own (a namespace folder
shared with a server package, ``google/`` say, is made and its allowed children linked), so
nothing of another distribution is reachable through ``sys.path``. Links, not copies: built
in well under a second, nothing to keep in step with the worker's files. The worker's own
environment stays as it is.

One job base per (worker interpreter, the linked distributions' versions): its key is theirs
alone, so a package added to the server's side changes neither it nor the key of any run
environment layered on it (worker/environments.py). Built once per host under a file lock,
in a temp folder renamed into place, never removed while a worker could use it (a few
hundred links).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import logging
import os
import re
import secrets
import shutil
import site
import sys
import venv
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement

from worker.file_lock import flock

log = logging.getLogger(__name__)

# jupyterlab and ipykernel: a session's JupyterLab and its kernels (worker/session_job.py).
ROOTS = ("torch", "numpy", "torchyard", "tensorboard", "mlflow-skinny", "jupyterlab", "ipykernel")
PREFIX = "base-"
MARKER = ".torchyard-job-base.json"

Prefix = tuple[str, ...]


def canonical(name: str) -> str:
    """PEP 503's normal form: ``Typing_Extensions`` and ``typing-extensions`` are one."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class JobBase:
    key: str
    path: Path
    packages: tuple[str, ...]  # "name==version", sorted: what the job sees
    torch_version: str | None

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    @property
    def site_dir(self) -> Path:
        version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
        return self.path / "lib" / version / "site-packages"


def worker_site_dirs() -> tuple[str, ...]:
    """The worker's site-packages, in its sys.path order."""
    return tuple(d for d in site.getsitepackages() if os.path.isdir(d))


@dataclass(frozen=True)
class _Dist:
    name: str  # canonical
    version: str
    site_dir: str
    requires: tuple[str, ...]  # canonical names, extras' left out
    files: tuple[Prefix, ...]  # relative to site_dir, inside it


def _installed(site_dirs: Iterable[str]) -> dict[str, _Dist]:
    """Every distribution of these folders, the first of a name winning (sys.path order)."""
    found: dict[str, _Dist] = {}
    for folder in site_dirs:
        for dist in importlib.metadata.distributions(path=[folder]):
            name = canonical(dist.metadata["Name"] or "")
            if not name or name in found:
                continue
            files = tuple(
                f.parts for f in dist.files or () if f.parts and f.parts[0] not in ("..", "/")
            )
            found[name] = _Dist(name, dist.version, folder, _requires(dist), files)
    return found


def _requires(dist: importlib.metadata.Distribution) -> tuple[str, ...]:
    """The names a distribution needs when installed without extras, on this interpreter."""
    names = []
    for line in dist.requires or ():
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if req.marker is None or req.marker.evaluate({"extra": ""}):
            names.append(canonical(req.name))
    return tuple(names)


def closure(installed: dict[str, _Dist], roots: Iterable[str]) -> list[_Dist]:
    """The roots that are installed and everything they require, sorted by name. A required
    name that is not installed is left out (pip's own check is not ours to repeat)."""
    seen: dict[str, _Dist] = {}
    todo = [canonical(r) for r in roots]
    while todo:
        name = todo.pop()
        if name in seen or name not in installed:
            continue
        seen[name] = installed[name]
        todo.extend(installed[name].requires)
    return [seen[n] for n in sorted(seen)]


def link_plan(installed: dict[str, _Dist], allowed: set[str], folder: str) -> list[Prefix]:
    """The paths under ``folder`` to link: each the outermost one whose every owner (by the
    distributions' RECORDs) is allowed. A path some other distribution also owns is descended
    into, so its allowed children are linked one by one."""
    owners: dict[Prefix, set[str]] = defaultdict(set)
    children: dict[Prefix, set[Prefix]] = defaultdict(set)
    for dist in installed.values():
        if dist.site_dir != folder:
            continue
        for parts in dist.files:
            for depth in range(1, len(parts) + 1):
                owners[parts[:depth]].add(dist.name)
                children[parts[: depth - 1]].add(parts[:depth])
    plan: list[Prefix] = []
    todo: list[Prefix] = [()]
    while todo:
        for child in sorted(children[todo.pop()]):
            who = owners[child]
            if not who & allowed:
                continue
            if who <= allowed:
                plan.append(child)
            else:
                todo.append(child)
    return sorted(plan)


@lru_cache(maxsize=8)
def _scan(
    dirs: tuple[tuple[str, int], ...], extra: tuple[str, ...]
) -> tuple[dict[str, _Dist], tuple[_Dist, ...]]:
    """Reading every distribution's metadata takes a fraction of a second; a folder's mtime
    changes when a package is installed or removed in it, so the answer is kept per mtime."""
    installed = _installed(d for d, _ in dirs)
    return installed, tuple(closure(installed, (*ROOTS, *extra)))


def describe(site_dirs: tuple[str, ...], extra: tuple[str, ...]) -> JobBase:
    """The job base these folders give (its key and packages); ``path`` is under no root yet."""
    stamped = tuple((d, os.stat(d).st_mtime_ns) for d in site_dirs)
    _unused, dists = _scan(stamped, tuple(sorted(canonical(e) for e in extra)))
    packages = tuple(f"{d.name}=={d.version}" for d in dists)
    python = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
    # Where each linked distribution lives, not the folders' whole contents: a package added
    # beside them (the server's) changes nothing.
    identity = {
        "python": python,
        "version": sys.version,
        "packages": [[d.name, d.version, d.site_dir] for d in dists],
    }
    key = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:24]
    torch = next((d.version for d in dists if d.name == "torch"), None)
    return JobBase(key=key, path=Path(PREFIX + key), packages=packages, torch_version=torch)


def ensure(
    root: Path, extra: Iterable[str] = (), site_dirs: tuple[str, ...] | None = None
) -> JobBase:
    """The job base for the worker's packages (``site_dirs``: its site-packages), built under
    ``root`` unless it is there."""
    dirs = worker_site_dirs() if site_dirs is None else site_dirs
    described = describe(dirs, tuple(extra))
    base = JobBase(
        described.key, root / described.path, described.packages, described.torch_version
    )
    if (base.path / MARKER).is_file():
        return base
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(0o755)  # a run's uid reads its interpreter through it
    with flock(root / f".{PREFIX}{base.key}.lock"):
        if not (base.path / MARKER).is_file():
            _build(base, dirs, tuple(extra))
    return base


def _build(base: JobBase, dirs: tuple[str, ...], extra: tuple[str, ...]) -> None:
    stamped = tuple((d, os.stat(d).st_mtime_ns) for d in dirs)
    installed, dists = _scan(stamped, tuple(sorted(canonical(e) for e in extra)))
    allowed = {d.name for d in dists}
    tmp = base.path.with_name(f".build-{base.path.name}-{secrets.token_hex(4)}")
    try:
        venv.EnvBuilder(symlinks=True, with_pip=False, prompt="torchyard-job").create(tmp)
        target = tmp / base.site_dir.relative_to(base.path)
        links = 0
        for folder in dirs:
            for parts in link_plan(installed, allowed, folder):
                dest = target.joinpath(*parts)
                source = Path(folder).joinpath(*parts)
                if dest.exists() or dest.is_symlink() or not source.exists():
                    continue  # an earlier folder's wins, as on sys.path; a file RECORD lists gone
                dest.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
                dest.symlink_to(source)
                links += 1
        _readable(tmp)
        record = {"key": base.key, "packages": list(base.packages), "links": links}
        (tmp / MARKER).write_text(json.dumps(record))
        (tmp / MARKER).chmod(0o644)
        if base.path.exists():  # no marker: a crashed build's
            shutil.rmtree(base.path)
        os.rename(tmp, base.path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    log.info("job base %s built: %d links, %d packages", base.key, links, len(base.packages))


def _readable(root: Path) -> None:
    """Readable by a run's own uid (a root worker's sandbox; the worker's umask is 077). Links
    are left alone: what they point to is the worker's, never changed from here."""
    for folder, _dirs, files in os.walk(root):  # does not descend into linked folders
        os.chmod(folder, 0o755)
        for name in files:
            path = os.path.join(folder, name)
            if not os.path.islink(path):
                os.chmod(path, 0o755 if os.stat(path).st_mode & 0o100 else 0o644)
