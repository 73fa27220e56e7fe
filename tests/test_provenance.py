"""worker/provenance.py: the worker's half of a run's record names the workspace's checkout as
the member sees it, and reads it with git in an environment built from nothing."""

from __future__ import annotations

import secrets
import subprocess
from pathlib import Path

import pytest

from tests.conftest import WORKSPACE_DIR
from worker.provenance import worker_record, workspace_git


def checkout() -> Path:
    root = WORKSPACE_DIR / f"repo-{secrets.token_hex(3)}"
    (root / "exp").mkdir(parents=True)
    (root / "exp" / "train.py").write_text("print('hi')\n")
    git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    for args in (["init", "-q"], ["add", "."], ["commit", "-qm", "first"]):
        subprocess.run([*git, *args], check=True, capture_output=True)
    return root


def test_the_checkout_is_named_inside_the_workspace_not_by_the_hosts_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    root = checkout()
    # The worker's own environment does not reach git (issue 37): a GIT_DIR there would make
    # this git read another repository, or none.
    monkeypatch.setenv("GIT_DIR", "/nonexistent")
    state = workspace_git(root / "exp" / "train.py")
    assert state is not None and state["root"] == f"workspace/{root.name}", state
    assert len(state["commit"]) == 40 and not state["dirty"]
    record = worker_record(
        worker_host="h",
        gpu_indices=(),
        script=root / "exp" / "train.py",
        script_name=f"{root.name}/exp/train.py",
    )
    assert record["script"] == f"{root.name}/exp/train.py"
    assert str(WORKSPACE_DIR) not in str(record)
