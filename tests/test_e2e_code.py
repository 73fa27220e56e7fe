"""A run from an uploaded code snapshot, through the real server and worker (sandboxed when
bwrap is there): the job runs in the script's folder of its own mirror of the shared read-only
copy, imports the helper module beside the script and reads ./data/x.txt; it cannot change its
code (nor so another run's), and what it writes stays in its own folder; the
run's environment shows the client's git state; the snapshot downloads as uploaded; deleting
the last run (and experiment) that uses it removes it."""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import os
import tarfile
from pathlib import Path

import pytest

from app.code import store
from app.settings import get_settings
from tests.code_archives import GOOD_SNAPSHOT, tar_gz
from tests.conftest import DATA_DIR, WORKSPACE_DIR, wait_for_status

pytestmark = pytest.mark.slow

TRAIN = b"""\
import os
import sys
from pathlib import Path

import helper
from torchyard import init

run = init()
print("helper:", helper.GREETING)
print("data:", Path("./data/x.txt").read_text().strip())
print("cwd is the script's folder:", Path.cwd() == Path(__file__).parent)
print("cwd is the run's own:", "/runs/" in str(Path.cwd()))
print("workspace visible:", os.path.exists(sys.argv[1]))
Path("out.txt").write_text("written by the run")
try:
    Path("data/x.txt").write_text("edited by the run")
    print("code edit: written")
except OSError:
    print("code edit: refused")
run.log({"code/ok": 1.0}, step=1)
sys.stdout.flush()
"""

ORIGIN = {
    "commit": "0123456789abcdef0123456789abcdef01234567",
    "branch": "feature/x",
    "remote": "git@example.com:team/model.git",
    "dirty": True,
    "diff": "--- a/train.py\n+++ b/train.py\n@@ -1 +1 @@\n-old\n+new\n",
    "diff_truncated": False,
}


def test_a_run_from_an_uploaded_snapshot(live_stack, client, monkeypatch) -> None:
    data = tar_gz(
        [
            ("nested", "dir", None),
            *[
                (f"nested/{n}", k, p)
                for n, k, p in (
                    ("train.py", "file", TRAIN),
                    *GOOD_SNAPSHOT[1:],
                )
            ],
        ]
    )
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    sandboxed = os.environ.get("TORCHYARD_JOB_ISOLATION") == "bwrap"
    with live_stack.admin_client() as api:
        up = api.post("/api/code", files={"file": ("code.tar.gz", data)})
        assert up.status_code in (200, 201), up.text
        assert up.json() == {"digest": digest, "size_bytes": len(data)}
        config = {
            "script": "nested/train.py",
            "code": digest,
            "code_origin": ORIGIN,
            "seed": 5,
            "args": [str(WORKSPACE_DIR)],
        }
        exp = api.post("/api/experiments", json={"name": "from code", "config": config})
        assert exp.status_code == 201, exp.text
        runs = [api.post(f"/api/experiments/{exp.json()['id']}/runs").json() for _ in "ab"]
        for run in runs:
            done = wait_for_status(api, run["id"], {"succeeded", "failed", "cancelled"}, 180)
            log = api.get(f"/api/runs/{run['id']}/logs").text
            assert done["status"] == "succeeded", (done.get("error"), log[-3000:])
            assert "helper: hello from the helper module" in log
            # the shared copy is read-only: no run's edit is another's data
            assert "data: beside the script" in log
            assert "cwd is the script's folder: True" in log
            assert "cwd is the run's own: True" in log  # its mirror, in its own folder
            if sandboxed:  # a snapshot's job does not see the server's workspace
                assert "workspace visible: False" in log
                assert "code edit: refused" in log
        run_id = runs[0]["id"]
        files = {f["path"] for f in api.get(f"/api/runs/{run_id}/files").json()}
        assert "nested/out.txt" in files  # the run's own; its code's links are not its files
        assert "nested/train.py" not in files
        env = api.get(f"/api/runs/{run_id}/environment").json()
        assert env["code"] == digest
        git = env["git"]
        assert git["source"] == "client" and git["commit"] == ORIGIN["commit"]
        assert git["diff"] == ORIGIN["diff"] and git["branch"] == "feature/x"
        got = api.get(f"/api/runs/{run_id}/code")
        assert got.status_code == 200 and got.content == data
        assert "attachment" in got.headers["content-disposition"]
        # A run without code: 404
        assert api.get("/api/runs/999999/code").status_code == 404
        token = {"Authorization": api.headers["Authorization"]}
    assert not (WORKSPACE_DIR / "nested").exists()
    # Deleting the experiment (and its runs) removes the snapshot nothing uses any more.
    monkeypatch.setattr(get_settings(), "code_unused_grace_seconds", 0.0)
    gone = client.delete(f"/api/experiments/{exp.json()['id']}", headers=token)
    assert gone.status_code == 204, gone.text
    assert not store.local_path(digest).exists()


class _Zeros:
    """A file-like of ``size`` zero bytes, never held in memory at once."""

    def __init__(self, size: int) -> None:
        self.left = size

    def read(self, n: int = -1) -> bytes:
        n = self.left if n < 0 else min(n, self.left)
        self.left -= n
        return bytes(n)


def _bomb(unpacked: int) -> bytes:
    """A ~1 MB .tar.gz whose zero-filled file unpacks to ``unpacked`` bytes."""
    buf = io.BytesIO()
    with (
        gzip.GzipFile(fileobj=buf, mode="wb", compresslevel=9, mtime=0) as gz,
        tarfile.open(fileobj=gz, mode="w") as tar,
    ):
        script = b"print('bomb snapshot ran')\n"
        info = tarfile.TarInfo("train.py")
        info.size = len(script)
        tar.addfile(info, io.BytesIO(script))
        info = tarfile.TarInfo("zeros.bin")
        info.size = unpacked
        tar.addfile(info, _Zeros(unpacked))
    return buf.getvalue()


def _disk_bytes(root: Path) -> int:
    """What ``du`` says of a folder: the blocks of everything in it, links not followed."""
    total = 0
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(folder, name)).st_blocks * 512
    return total


def test_a_snapshot_is_unpacked_once_for_every_run_that_uses_it(live_stack) -> None:
    """The 1 MB upload that unpacks to 1,000 MiB, run three times: one shared read-only copy,
    so the data dir grows by at most 1.2 GiB in all (it grew by 3 GiB with a copy per run)."""
    data = _bomb(1000 * 1024**2)
    assert len(data) < 2 * 1024**2
    before = _disk_bytes(DATA_DIR)
    with live_stack.admin_client() as api:
        up = api.post("/api/code", files={"file": ("bomb.tar.gz", data)})
        assert up.status_code in (200, 201), up.text
        config = {"script": "train.py", "code": up.json()["digest"], "seed": 1}
        exp = api.post("/api/experiments", json={"name": "bomb", "config": config})
        assert exp.status_code == 201, exp.text
        runs = [api.post(f"/api/experiments/{exp.json()['id']}/runs").json() for _ in "abc"]
        for run in runs:
            done = wait_for_status(api, run["id"], {"succeeded", "failed", "cancelled"}, 300)
            log = api.get(f"/api/runs/{run['id']}/logs").text
            assert done["status"] == "succeeded", (done.get("error"), log[-3000:])
            assert "bomb snapshot ran" in log
    grown = _disk_bytes(DATA_DIR) - before
    print(f"data dir grew by {grown / 1024**2:.1f} MiB for 3 runs of a 1,000 MiB snapshot")
    assert grown <= 1.2 * 1024**3, grown
