"""Script paths stay inside the workspace; flags and the git record of a script run."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from app.experiments.workspace import ScriptPathError, resolve_script
from torchyard.git_state import git_state
from worker.workspace import prepare_work_dir, script_argv


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "pkg").mkdir(parents=True)
    (root / "train.py").write_text("print('hi')\n")
    (root / "pkg" / "inner.py").write_text("")
    (root / "notes.txt").write_text("")
    (root / "dir.py").mkdir()
    (tmp_path / "outside.py").write_text("")
    return root


def test_a_script_inside_the_workspace_resolves(workspace: Path) -> None:
    assert resolve_script(workspace, "train.py") == workspace.resolve() / "train.py"
    assert resolve_script(workspace, "pkg/inner.py") == workspace.resolve() / "pkg" / "inner.py"


def test_a_symlink_that_stays_inside_is_allowed(workspace: Path) -> None:
    (workspace / "alias.py").symlink_to(workspace / "train.py")
    assert resolve_script(workspace, "alias.py") == workspace.resolve() / "train.py"


@pytest.mark.parametrize(
    ("script", "message"),
    [
        ("../outside.py", "leaves the workspace"),
        ("pkg/../../outside.py", "leaves the workspace"),
        ("/etc/passwd.py", "absolute path"),
        ("C:\\x.py", "absolute path"),
        ("missing.py", "does not exist"),
        ("notes.txt", "not a Python file"),
        ("dir.py", "not a file"),
        ("", "relative to the workspace"),
        ("a\x00.py", "NUL"),
    ],
)
def test_bad_script_paths_are_refused_with_the_reason(
    workspace: Path, script: str, message: str
) -> None:
    with pytest.raises(ScriptPathError, match=message):
        resolve_script(workspace, script)


def test_a_symlink_leaving_the_workspace_is_refused(workspace: Path, tmp_path: Path) -> None:
    (workspace / "escape.py").symlink_to(tmp_path / "outside.py")
    (workspace / "linkdir").symlink_to(tmp_path)
    for script in ("escape.py", "linkdir/outside.py"):
        with pytest.raises(ScriptPathError, match="outside the workspace"):
            resolve_script(workspace, script)


def test_a_symlink_to_a_non_python_file_is_refused(workspace: Path) -> None:
    (workspace / "sneaky.py").symlink_to(workspace / "notes.txt")
    with pytest.raises(ScriptPathError, match="not a Python file"):
        resolve_script(workspace, "sneaky.py")


def test_a_missing_workspace_is_named(tmp_path: Path) -> None:
    with pytest.raises(ScriptPathError, match="workspace directory does not exist"):
        resolve_script(tmp_path / "nope", "train.py")


def test_params_become_flags_after_the_args() -> None:
    argv = script_argv(["data.csv", "-v"], {"lr": 0.01, "amp": True, "ema": False, "tag": "-x"})
    assert argv == ["data.csv", "-v", "--lr=0.01", "--amp", "--tag=-x"]


def _git(root: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        check=True,
        capture_output=True,
    )


def test_git_state_records_commit_diff_and_untracked(workspace: Path) -> None:
    assert git_state(workspace) is None  # not a checkout
    _git(workspace, "init", "-q", "-b", "main")
    _git(workspace, "add", "train.py")
    _git(workspace, "commit", "-q", "-m", "first")
    clean = git_state(workspace)
    assert clean is not None and len(clean["commit"]) == 40 and clean["branch"] == "main"
    assert clean["diff"] == "" and set(clean["untracked"]) == {"notes.txt", "pkg/inner.py"}
    (workspace / "train.py").write_text("print('edited')\n")
    dirty = git_state(workspace)
    assert dirty is not None and dirty["dirty"] and dirty["commit"] == clean["commit"]
    assert "+print('edited')" in dirty["diff"] and "-print('hi')" in dirty["diff"]
    assert "notes.txt" in dirty["untracked"]


def test_the_work_dir_mirrors_the_scripts_folder_as_links(tmp_path: Path) -> None:
    folder = tmp_path / "ws" / "project"
    (folder / "data").mkdir(parents=True)
    (folder / "data" / "file.txt").write_text("x")
    (folder / "train.py").write_text("")
    work = tmp_path / "run" / "work"
    prepare_work_dir(work, folder)
    assert sorted(p.name for p in work.iterdir()) == ["data", "train.py"]
    assert (work / "data").is_symlink() and (work / "data" / "file.txt").read_text() == "x"
    (work / "model.pt").write_bytes(b"w")  # a file the run writes is its own
    assert not (folder / "model.pt").exists()
    prepare_work_dir(work, folder)  # a later attempt keeps what is there
    assert (work / "model.pt").read_bytes() == b"w"


def test_a_recipe_gets_an_empty_work_dir(tmp_path: Path) -> None:
    prepare_work_dir(tmp_path / "work", None)
    assert list((tmp_path / "work").iterdir()) == []
