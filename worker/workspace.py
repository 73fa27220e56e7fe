"""The workspace: the one directory user scripts may run from, and its git state.

Running a script is running code, so where it comes from is checked twice with the same
function: by the API before anything is stored (a 422 names the problem) and by the worker
right before launch (its own workspace may be another mount of the same files, and a file can
change between the two). A path is accepted only when, with every symlink resolved, it is a
``.py`` file inside the resolved workspace.

The git state (commit, branch, uncommitted diff) is what makes a script run reproducible
later: the commit alone does not say what was edited but not committed.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

from app.runs.job_files import within

MAX_SCRIPT_PATH = 500
MAX_DIFF_BYTES = 512 * 1024
MAX_UNTRACKED = 200
GIT_TIMEOUT_SECONDS = 10.0


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


def prepare_work_dir(work: Path, script_dir: Path | None) -> None:
    """The job's working directory, with the script's folder mirrored into it as links.

    ``./data/file.txt`` and ``--data ./data`` then resolve as under ``python train.py`` run
    from the script's folder, while a file the run creates lands here, in its own directory:
    not in the shared workspace, where runs of the same script would overwrite each other.
    (A write through a link still reaches the linked file.) Names already present, from an
    earlier attempt, are kept."""
    work.mkdir(parents=True, exist_ok=True)
    if script_dir is None:
        return
    for entry in sorted(script_dir.iterdir()):
        link = work / entry.name
        if not link.exists() and not link.is_symlink():
            link.symlink_to(entry)


def script_argv(args: Sequence[str], params: Mapping[str, Any]) -> list[str]:
    """The script's command-line arguments: ``args`` as given, then one flag per param.

    ``{"lr": 0.01, "amp": true, "tag": "x"}`` -> ``--lr=0.01 --amp --tag=x``: the ``=`` form
    keeps values that start with a dash whole; ``true`` is a bare flag (argparse's
    ``store_true``) and ``false`` leaves the flag out.
    """
    argv = [str(a) for a in args]
    for key, value in params.items():
        if value is True:
            argv.append(f"--{key}")
        elif value is False or value is None:
            continue
        else:
            argv.append(f"--{key}={value}")
    return argv


def _git(workspace: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(workspace), *args],
            capture_output=True,
            timeout=GIT_TIMEOUT_SECONDS,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    return done.stdout.decode("utf-8", "replace")


_URL_USERINFO = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/@]*@)")


def strip_credentials(url: str) -> str:
    """A remote URL fit for a record others read: ``https://user:token@host/x`` ->
    ``https://host/x``. Over http(s) the whole user part goes (a token often *is* the user
    name); other schemes keep the user (``ssh://git@host``) but lose any password. The
    scp-like ``git@host:x.git`` carries no secret and stays."""
    match = _URL_USERINFO.match(url)
    if match is None:
        return url
    scheme, userinfo = match["scheme"], match["userinfo"]
    if scheme.lower() in ("http://", "https://"):
        kept = ""
    else:
        kept = userinfo.split(":", 1)[0].rstrip("@") + "@"
    return scheme + kept + url[match.end() :]


def _remote(root: Path) -> str | None:
    """The URL of the current branch's upstream remote, else ``origin``, else the first
    remote; credentials stripped."""
    upstream = _git(root, "rev-parse", "--abbrev-ref", "--symbolic-full-name", "@{upstream}")
    names = (_git(root, "remote") or "").split()
    preferred = [upstream.strip().split("/", 1)[0]] if upstream else []
    for name in [*preferred, "origin", *names]:
        if name in names:
            url = _git(root, "remote", "get-url", name)
            if url is not None and url.strip():
                return strip_credentials(url.strip())
    return None


def git_state(directory: Path) -> dict[str, Any] | None:
    """Commit, branch, remote (no credentials), dirty flag, uncommitted diff (capped) and
    untracked files of the git checkout that holds ``directory`` (a script's directory: a
    workspace may hold several checkouts); None when it is not in one, or without git. The
    whole checkout counts: an edited helper module next to the script changes the run as much
    as the script does."""
    top = _git(directory.expanduser().resolve(), "rev-parse", "--show-toplevel")
    if top is None:
        return None
    root = Path(top.strip())
    commit = _git(root, "rev-parse", "HEAD")
    if commit is None:  # a checkout with no commit yet
        return None
    branch = (_git(root, "rev-parse", "--abbrev-ref", "HEAD") or "").strip()
    # Staged and unstaged changes against the commit.
    diff = _git(root, "diff", "HEAD", "--no-color") or ""
    untracked = _git(root, "ls-files", "--others", "--exclude-standard") or ""
    untracked_files = untracked.splitlines()
    encoded = diff.encode("utf-8")
    truncated = len(encoded) > MAX_DIFF_BYTES
    if truncated:
        diff = encoded[:MAX_DIFF_BYTES].decode("utf-8", "ignore")
    return {
        "root": str(root),
        "commit": commit.strip(),
        "branch": branch,
        "remote": _remote(root),
        "dirty": bool(diff) or bool(untracked_files),
        "diff": diff,
        "diff_truncated": truncated,
        "untracked": untracked_files[:MAX_UNTRACKED],
    }
