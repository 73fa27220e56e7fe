"""The workspace: the one directory user scripts may run from, and the check of a script's path.

Running a script is running code, so where it comes from is checked twice with the same
function: by the API before anything is stored (a 422 names the problem) and by the worker
right before launch (its own workspace may be another mount of the same files, and a file can
change between the two). A path is accepted only when, with every symlink resolved, it is a
``.py`` file inside the resolved workspace. The server owns the rule; the worker imports it.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath, PureWindowsPath

from app.runs.files.job_files import within
from torchyard.git_state import MAX_DIFF_BYTES as MAX_DIFF_BYTES  # the API checks, git_state cuts

MAX_SCRIPT_PATH = 500


class ScriptPathError(ValueError):
    """The script path is not a .py file inside the workspace; the message says why."""


def resolve_script(workspace: Path, script: str) -> Path:
    """The script's real path, or ScriptPathError with a message fit for the user."""
    if not script or not script.strip():
        raise ScriptPathError("give the script's path relative to the workspace, e.g. train.py")
    if len(script) > MAX_SCRIPT_PATH:
        raise ScriptPathError(f"the script path is longer than {MAX_SCRIPT_PATH} characters")
    if "\x00" in script:
        raise ScriptPathError("the script path contains a NUL character")
    if PurePosixPath(script).is_absolute() or PureWindowsPath(script).is_absolute():
        raise ScriptPathError(
            f"{script!r} is an absolute path; give a path relative to the workspace"
        )
    if ".." in PurePosixPath(script.replace("\\", "/")).parts:
        raise ScriptPathError(f"{script!r} leaves the workspace ('..' is not allowed)")
    if not script.endswith(".py"):
        raise ScriptPathError(f"{script!r} is not a Python file (.py)")
    root = workspace.expanduser().resolve()
    if not root.is_dir():
        raise ScriptPathError("the server's workspace directory does not exist")
    candidate = root / script
    resolved = candidate.resolve()
    if not within(resolved, root):
        raise ScriptPathError(f"{script!r} resolves (through a symlink) outside the workspace")
    if not resolved.exists():
        raise ScriptPathError(f"{script!r} does not exist in the workspace")
    if not resolved.is_file():
        raise ScriptPathError(f"{script!r} is not a file")
    if resolved.suffix != ".py":
        raise ScriptPathError(f"{script!r} points to {resolved.name!r}, not a Python file (.py)")
    return resolved
