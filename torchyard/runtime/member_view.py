"""Paths as a member sees them: run-relative, never the host's data dir (issue 37).

The job's own lines (the script it runs, the checkpoint it resumes from) and the traceback
torchyard prints and records for a failed run (the run's error on its page and in the API)
named the data dir's absolute paths: where the snapshots and every run live on the worker's
host. Here they become ``work/train.py`` (the run's own folder), ``workspace/...`` (the
server's workspace) and ``<data>/...`` (anything else of the data dir, a run environment's
packages). Standard library only: it runs in every job.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from torchyard.contract import RUN_DIR_VAR, WORKSPACE_VAR


def _replacements(env: Mapping[str, str]) -> list[tuple[str, str]]:
    pairs = []
    if run_dir := env.get(RUN_DIR_VAR):
        path = Path(run_dir)
        pairs.append((f"{path}/", ""))
        pairs.append((f"{path.parent.parent}/", "<data>/"))  # <data dir>/runs/<id>
    if workspace := env.get(WORKSPACE_VAR):
        pairs.append((f"{Path(workspace)}/", "workspace/"))
    return sorted(pairs, key=lambda pair: len(pair[0]), reverse=True)


def member_view(text: str, env: Mapping[str, str] | None = None) -> str:
    """`text` with the host's paths of this run made run-relative."""
    for host, shown in _replacements(os.environ if env is None else env):
        text = text.replace(host, shown)
    return text
