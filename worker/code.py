"""A run's view of its code snapshot (config ``code``): the shared copy, and its own folder.

The snapshot is unpacked once per host and digest, read-only (worker/snapshots.py). The run's
working directory, ``<run_dir>/work/`` (``snapshot_root``), gets a mirror of it: its folders
made anew, its files (and links) as links into the shared copy. The job's working directory is
the script's folder in the mirror, so ``./data/x.txt`` and a helper module beside the script
resolve as under ``python train.py`` in the user's checkout, while what the run writes lands in
its own folder (listed and served by the run's files API like any script run's; the links are
not its files). A run cannot change its code, nor so another's: writing through a link is
refused (the copy is read-only, and bound read-only in the sandbox); a run that must change a
file of its snapshot removes the link and writes its own. A requeued attempt keeps the mirror
its first attempt made (and what it wrote).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from app.code.scripts import clean_script
from app.experiments.workspace import ScriptPathError
from app.runs.files.job_files import within
from torchyard.contract import RunPaths
from worker import snapshots


@dataclass(frozen=True)
class Code:
    """A run's code: the script to run (in the run's mirror) and the shared unpacked copy
    (bound read-only into the sandbox; its ``requirements.txt`` is read there)."""

    script: Path
    unpacked: Path


def snapshot_root(run_dir: Path) -> Path:
    """The root of a run's mirror of its snapshot: its working directory's top."""
    return RunPaths(run_dir).work


@contextlib.contextmanager
def use(run_dir: Path, digest: str, script: str | None) -> Iterator[Code]:
    """The run's code, held from eviction while the block runs (the job's whole life); raises
    SnapshotMissing, TarRefused or ScriptPathError."""
    with snapshots.cache().use(digest) as unpacked:
        yield Code(prepare(run_dir, unpacked, digest, script), unpacked)


def prepare(run_dir: Path, unpacked: Path, digest: str, script: str | None) -> Path:
    """Mirror the unpacked snapshot into the run's working directory (first attempt only) and
    return the script's path in it (a session has none: the mirror's root)."""
    root = snapshot_root(run_dir)
    if not root.exists():
        staging = run_dir / f".code-{secrets.token_hex(4)}"
        try:
            mirror(unpacked, staging)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        staging.rename(root)
    if script is None:
        return root
    path = root / clean_script(script)
    resolved = path.resolve()
    inside = within(resolved, unpacked.resolve()) or within(resolved, root.resolve())
    if not inside or not resolved.is_file():
        raise ScriptPathError(f"{script!r} is not a file in code snapshot {digest}")
    return path


def mirror(source: Path, dest: Path) -> None:
    """``dest`` made with ``source``'s folders, each file or link of it a link to it (an
    absolute path, the same inside the sandbox). A linked folder is linked, not entered."""
    dest.mkdir(mode=0o755)
    for folder, dirs, files in os.walk(source):
        here = dest / Path(folder).relative_to(source)
        for name in list(dirs):
            if os.path.islink(os.path.join(folder, name)):
                dirs.remove(name)
                files.append(name)
            else:
                (here / name).mkdir(mode=0o755)
        for name in files:
            os.symlink(os.path.join(folder, name), here / name)
