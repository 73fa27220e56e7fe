"""A script's path in a code snapshot (config ``code`` + ``script``): the rule the API checks
before a run is stored (``script_in_snapshot``) and the worker again on the run's own copy
(worker.code.prepare), so it lives with the snapshots, on the server's side.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import PurePosixPath

from app.experiments.workspace import MAX_SCRIPT_PATH, ScriptPathError


def clean_script(script: str) -> str:
    """The script's path in the snapshot, normalised, or ScriptPathError saying why not."""
    if not script or not script.strip() or "\x00" in script or len(script) > MAX_SCRIPT_PATH:
        raise ScriptPathError("give the script's path relative to the code snapshot, e.g. train.py")
    if script.startswith("/") or "\\" in script:
        raise ScriptPathError(
            f"{script!r}: give a path relative to the code snapshot, with '/' between folders"
        )
    parts = [p for p in PurePosixPath(script).parts if p != "."]
    if ".." in parts:
        raise ScriptPathError(f"{script!r} leaves the code snapshot ('..' is not allowed)")
    if not script.endswith(".py"):
        raise ScriptPathError(f"{script!r} is not a Python file (.py)")
    return "/".join(parts)


def script_in_snapshot(script: str, files: Iterable[str], digest: str) -> str:
    """The API's check: ``script`` is a regular file of the snapshot (ScriptPathError if not)."""
    path = clean_script(script)
    if path not in set(files):
        raise ScriptPathError(f"{script!r} is not a file in code snapshot {digest}")
    return path
