"""The worker's half of a run's reproducibility record, and the merge with the job's half.

The worker knows what the job cannot: which host and GPUs the scheduler gave it, and the
workspace's git state at launch (read before the job starts, so an edit made while it trains
is not attributed to it). The job writes its half (versions, packages, determinism flags:
torchyard.runtime.environment) when it starts; ``merge_job_record`` folds it in once it appears.
The record is stored by app.runs.files.environment_record, its one writer.
"""

from __future__ import annotations

import json
import logging
import socket
from pathlib import Path
from typing import Any

from app.db import Session
from app.experiments.config.model import ScriptConfig
from app.runs.files import environment_record
from app.runs.files.job_files import read_job_file, within
from app.settings import get_settings
from torchyard.contract import RunPaths
from torchyard.git_state import git_state
from worker import privileged_env

log = logging.getLogger(__name__)

MAX_RECORD_BYTES = 4 * 1024 * 1024


def worker_record(
    *,
    worker_host: str,
    gpu_indices: tuple[int, ...],
    script: Path | None,
    code: ScriptConfig | None = None,
    script_name: str | None = None,
) -> dict[str, Any]:
    """``code``: the config of a run from a code snapshot; its git state is then the client's
    (``code_origin``, recorded when the snapshot was packed), not the server workspace's."""
    record: dict[str, Any] = {
        "hostname": socket.gethostname(),
        "worker_host": worker_host,
        "gpu_indices": list(gpu_indices),
    }
    if script is not None:
        # As the config names it: the resolved path is the host's (issue 37)
        record["script"] = script_name or script.name
        record["git"] = workspace_git(script) if code is None else client_git(code)
    if code is not None:
        record["code"] = code.code
    return record


def workspace_git(script: Path) -> dict[str, Any] | None:
    """The workspace checkout's git state, read by git as root with an environment built from
    nothing; its root shown as ``workspace/...``, not the host's path (issue 37)."""
    state = git_state(script.parent, env=privileged_env.scratch())
    if state is not None:
        workspace = get_settings().workspace_dir.expanduser().resolve()
        root = Path(state["root"])
        if not within(root, workspace):
            state["root"] = root.name
        elif root == workspace:
            state["root"] = "workspace"
        else:
            state["root"] = f"workspace/{root.relative_to(workspace)}"
    return state


def client_git(config: ScriptConfig) -> dict[str, Any] | None:
    """The client's git state from ``code_origin``, in the shape of torchyard.git_state.git_state
    (None when the snapshot was packed outside a git checkout, or without one)."""
    origin = config.code_origin
    if origin is None or not origin.commit:
        return None
    return {
        "source": "client",
        "commit": origin.commit,
        "branch": origin.branch or "",
        "remote": origin.remote,
        "dirty": origin.dirty,
        "diff": origin.diff,
        "diff_truncated": origin.diff_truncated,
        "untracked": [],
    }


def merge_job_record(session: Session, *, run_id: int, run_dir: Path) -> bool:
    """Fold the job's environment.json into the run's record; False while it is not there."""
    path = RunPaths(run_dir).environment
    raw = read_job_file(path, MAX_RECORD_BYTES)  # a regular file only, never blocking
    if raw is None:
        return False
    try:
        job = json.loads(raw)
    except (ValueError, RecursionError):
        job = None
    if not isinstance(job, dict):
        log.warning("run %s: unreadable %s; the record keeps the worker's half", run_id, path)
        return True
    environment_record.merge_job_half(session, run_id=run_id, job=job)
    return True
