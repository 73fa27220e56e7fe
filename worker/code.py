"""A run's own copy of its code snapshot (config ``code``): where it goes, and the script in it.

The snapshot is extracted into the run's working directory, ``<run_dir>/work/``, which is
then the snapshot root (``snapshot_root``); the job's working directory is the script's folder
inside it, so ``./data/x.txt`` and a helper module beside the script resolve as under
``python train.py`` in the user's checkout, and what the run writes stays in its own folder,
listed and served by the run's files API like any script run's. The copy is fresh per run
(never shared, so a run that edits its code changes nothing of another's) and extracted with
every member checked again (app.code.tarcheck): the worker trusts neither the upload path nor
the store. A requeued attempt keeps the copy its first attempt extracted (and what it wrote).
"""

from __future__ import annotations

import secrets
from pathlib import Path

from app.code.scripts import clean_script
from app.code.store import local_archive
from app.code.tarcheck import Limits, extract
from app.experiments.workspace import ScriptPathError
from app.runs.job_files import within
from torchyard.contract import RunPaths


def snapshot_root(run_dir: Path) -> Path:
    """The root of a run's working copy of its snapshot (e.g. where a ``requirements.txt`` of
    the snapshot is: ``snapshot_root(run_dir) / "requirements.txt"``)."""
    return RunPaths(run_dir).work


def prepare(run_dir: Path, digest: str, script: str) -> Path:
    """Extract the snapshot into the run's working directory (first attempt only) and return
    the script's path in it; raises SnapshotMissing, TarRefused or ScriptPathError."""
    root = snapshot_root(run_dir)
    if not root.exists():
        staging = run_dir / f".code-{secrets.token_hex(4)}"
        with local_archive(digest) as archive:
            extract(archive, staging, Limits.from_settings())
        staging.rename(root)
    path = root / clean_script(script)
    resolved = path.resolve()
    if not within(resolved, root.resolve()) or not resolved.is_file():
        raise ScriptPathError(f"{script!r} is not a file in code snapshot {digest}")
    return path
