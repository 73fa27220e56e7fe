"""Issue 18's acceptance, from the laptop's side: `torchyard submit spec.yaml --code .` in a git
checkout with an ignored 1 MB file, an untracked helper file and an uncommitted edit, as a real
CLI process against the real server and worker. The snapshot leaves the ignored file out and
carries the edit; the run imports the helper module and reads ./data/x.txt; its environment
shows the client's commit, branch, remote (no credentials) and diff."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

from tests.test_cli import Cli, cli  # noqa: F401  (the logged-in CLI fixture)
from tests.test_cli_pack import git

pytestmark = pytest.mark.slow

TRAIN = """\
from pathlib import Path

from pkg.helper import GREETING

print("helper:", GREETING)
print("data:", Path("data/x.txt").read_text().strip())
print("version: committed")
"""


def test_submit_code_from_a_checkout_runs_the_working_tree_and_records_its_git(
    cli: Cli,  # noqa: F811
    tmp_path: Path,
) -> None:
    repo = tmp_path / "proj"
    (repo / "pkg").mkdir(parents=True)
    git(repo, "init", "-q", "-b", "exp/code")
    (repo / "train.py").write_text(TRAIN)
    (repo / "pkg" / "__init__.py").write_text("")
    (repo / "pkg" / "helper.py").write_text('GREETING = "hello from the helper"\n')
    (repo / ".gitignore").write_text("*.ckpt\n")
    (repo / "spec.yaml").write_text("name: code-e2e\nconfig:\n  script: train.py\n  seed: 1\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "first")
    git(repo, "remote", "add", "origin", "https://bob:ghp_secret@git.example.com/t/proj.git")
    (repo / "big.ckpt").write_bytes(os.urandom(1024 * 1024))  # ignored: stays home
    (repo / "data").mkdir()
    (repo / "data" / "x.txt").write_text("untracked data\n")  # not ignored: goes along
    (repo / "train.py").write_text(TRAIN.replace("committed", "edited, not committed"))

    done = cli("submit", "spec.yaml", "--code", ".", "--follow", cwd=repo)
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert "packed . (as git tracks it): 6 files" in done.stderr
    assert "big.ckpt: ignored by git" in done.stderr
    assert "with uncommitted changes" in done.stderr
    run_id = int(done.stdout.split()[1])

    with cli.stack.admin_client() as api:
        log = api.get(f"/api/runs/{run_id}/logs").text
        assert "helper: hello from the helper" in log
        assert "data: untracked data" in log
        assert "version: edited, not committed" in log

        snapshot = api.get(f"/api/runs/{run_id}/code")
        assert snapshot.status_code == 200
        with tarfile.open(fileobj=io.BytesIO(snapshot.content), mode="r:gz") as tar:
            names = sorted(tar.getnames())
        assert names == [
            ".gitignore",
            "data/x.txt",
            "pkg/__init__.py",
            "pkg/helper.py",
            "spec.yaml",
            "train.py",
        ]

        env = api.get(f"/api/runs/{run_id}/environment").json()
        head = git(repo, "rev-parse", "HEAD").strip()
        assert env["git"]["commit"] == head and env["git"]["branch"] == "exp/code"
        assert env["git"]["remote"] == "https://git.example.com/t/proj.git"
        assert env["git"]["dirty"] is True
        assert '+print("version: edited, not committed")' in env["git"]["diff"]
        assert "ghp_secret" not in str(env)
