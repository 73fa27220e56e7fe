"""A run from an uploaded code snapshot, through the real server and worker (sandboxed when
bwrap is there): the job runs in its own fresh copy, in the script's folder, imports the helper
module beside the script and reads ./data/x.txt; what it writes stays in its own copy; the
run's environment shows the client's git state; the snapshot downloads as uploaded; deleting
the last run (and experiment) that uses it removes it."""

from __future__ import annotations

import hashlib
import os

import pytest

from app.code import store
from app.settings import get_settings
from tests.code_archives import GOOD_SNAPSHOT, tar_gz
from tests.conftest import WORKSPACE_DIR, wait_for_status

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
print("cwd is the snapshot copy:", Path.cwd() == Path(__file__).resolve().parent)
print("workspace visible:", os.path.exists(sys.argv[1]))
Path("out.txt").write_text("written by the run")
Path("data/x.txt").write_text("edited by the run")
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


def test_a_run_from_an_uploaded_snapshot(live_stack, client, monkeypatch) -> None:  # type: ignore[no-untyped-def]
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
            # each run has a fresh copy: the first run's edit is not the second's data
            assert "data: beside the script" in log
            assert "cwd is the snapshot copy: True" in log
            if sandboxed:  # a snapshot's job does not see the server's workspace
                assert "workspace visible: False" in log
        run_id = runs[0]["id"]
        files = {f["path"] for f in api.get(f"/api/runs/{run_id}/files").json()}
        assert {"nested/out.txt", "nested/train.py", "nested/data/x.txt"} <= files
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
