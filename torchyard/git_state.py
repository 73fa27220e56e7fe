"""The client's git state: what makes a run reproducible later (commit, branch, remote without
credentials, uncommitted diff, untracked files). The commit alone does not say what was edited
but not committed.

Read where the code is: by `torchyard submit --code DIR` on the user's machine (sent as the
config's ``code_origin``), and by the worker for a script of the server's workspace
(worker.provenance), so a run's record looks the same either way. Standard library only: the
client CLI runs without the server stack. Shared by the client and the worker, so it is
neither's: the base install's ``torchyard`` package holds it.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

# The most of a checkout's uncommitted diff a run records: cut here, checked by the API
# (app.experiments.config).
MAX_DIFF_BYTES = 512 * 1024
MAX_UNTRACKED = 200
GIT_TIMEOUT_SECONDS = 10.0


def _git(workspace: Path, *args: str, env: Mapping[str, str] | None = None) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(workspace), *args],
            capture_output=True,
            timeout=GIT_TIMEOUT_SECONDS,
            check=False,
            env=env,
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


def _remote(root: Path, env: Mapping[str, str] | None) -> str | None:
    """The URL of the current branch's upstream remote, else ``origin``, else the first
    remote; credentials stripped."""
    upstream = _git(
        root, "rev-parse", "--abbrev-ref", "--symbolic-full-name", "@{upstream}", env=env
    )
    names = (_git(root, "remote", env=env) or "").split()
    preferred = [upstream.strip().split("/", 1)[0]] if upstream else []
    for name in [*preferred, "origin", *names]:
        if name in names:
            url = _git(root, "remote", "get-url", name, env=env)
            if url is not None and url.strip():
                return strip_credentials(url.strip())
    return None


def git_state(directory: Path, env: Mapping[str, str] | None = None) -> dict[str, Any] | None:
    """Commit, branch, remote (no credentials), dirty flag, uncommitted diff (capped) and
    untracked files of the git checkout that holds ``directory`` (a script's directory: a
    workspace may hold several checkouts); None when it is not in one, or without git. The
    whole checkout counts: an edited helper module next to the script changes the run as much
    as the script does. ``env``: git's whole environment (the worker, as root, gives one built
    from nothing: worker.privileged_env); None: this process's."""
    top = _git(directory.expanduser().resolve(), "rev-parse", "--show-toplevel", env=env)
    if top is None:
        return None
    root = Path(top.strip())
    commit = _git(root, "rev-parse", "HEAD", env=env)
    if commit is None:  # a checkout with no commit yet
        return None
    branch = (_git(root, "rev-parse", "--abbrev-ref", "HEAD", env=env) or "").strip()
    # Staged and unstaged changes against the commit.
    diff = _git(root, "diff", "HEAD", "--no-color", env=env) or ""
    untracked = _git(root, "ls-files", "--others", "--exclude-standard", env=env) or ""
    untracked_files = untracked.splitlines()
    encoded = diff.encode("utf-8")
    truncated = len(encoded) > MAX_DIFF_BYTES
    if truncated:
        diff = encoded[:MAX_DIFF_BYTES].decode("utf-8", "ignore")
    return {
        "root": str(root),
        "commit": commit.strip(),
        "branch": branch,
        "remote": _remote(root, env),
        "dirty": bool(diff) or bool(untracked_files),
        "diff": diff,
        "diff_truncated": truncated,
        "untracked": untracked_files[:MAX_UNTRACKED],
    }
