"""A run's files when its worker is another host: the worker copies its working directory to
the artifact store when it ends (app/runs/files/work_dir/store.py, capped), and the API lists and
serves them from there (app/runs/files/work_dir/serve.py), taking the stored listing as hostile
input."""

from __future__ import annotations

import io
import json
import os
import tarfile

import pytest

from app.db import session_scope
from app.settings import get_settings
from tests.factories import add_run
from worker.work_dir_upload import store_run_files

WEIGHTS = os.urandom(100_000)


@pytest.fixture
def stored_run(client, user_headers, tmp_path, monkeypatch):
    """A run whose directory is on a "worker host" (not the API's data dir)."""
    me = client.get("/api/me", headers=user_headers).json()
    with session_scope() as session:
        run_id = add_run(session, owner_id=me["id"], status="succeeded")
    worker_run = tmp_path / "worker-host" / "runs" / str(run_id)
    work = worker_run / "work"
    (work / "out" / "checkpoint-6").mkdir(parents=True)
    (work / "model_best.pt").write_bytes(WEIGHTS)
    (work / "out" / "checkpoint-6" / "model.safetensors").write_bytes(b"tensors")
    (work / "big.bin").write_bytes(b"x" * 200_000)  # over the cap left after the others
    os.symlink("/etc/passwd", work / "passwd")  # never followed
    store = tmp_path / "store"
    store.mkdir()
    monkeypatch.setattr(get_settings(), "artifact_store", str(store))
    store_run_files(str(store), run_id=run_id, run_dir=worker_run, max_bytes=150_000)
    return run_id, store, worker_run


def test_the_api_lists_and_serves_the_stored_files(client, user_headers, stored_run) -> None:
    run_id, _store, worker_run = stored_run
    assert not get_settings().run_dir(run_id).exists()  # nothing on the API's disk
    listed = client.get(f"/api/runs/{run_id}/files", headers=user_headers).json()
    assert [f["path"] for f in listed] == ["model_best.pt", "out/checkpoint-6/model.safetensors"]
    assert all(f["checkpoint"] for f in listed)
    got = client.get(f"/api/runs/{run_id}/files/model_best.pt", headers=user_headers)
    assert got.status_code == 200 and got.content == WEIGHTS
    folder = client.get(f"/api/runs/{run_id}/files/out/checkpoint-6", headers=user_headers)
    with tarfile.open(fileobj=io.BytesIO(folder.content), mode="r:gz") as tar:
        assert tar.getnames() == ["checkpoint-6/model.safetensors"]
    log = (worker_run / "output.log").read_text()
    assert "2 files of the run's working directory (100007 bytes) copied" in log
    assert "1 left out over the cap of 150000 bytes: big.bin" in log


def test_paths_not_in_the_stored_listing_are_refused(client, user_headers, stored_run) -> None:
    run_id, _store, _ = stored_run
    base = f"/api/runs/{run_id}/files"
    assert client.get(f"{base}/big.bin", headers=user_headers).status_code == 404
    assert client.get(f"{base}/passwd", headers=user_headers).status_code == 404
    assert client.get(f"{base}/..%2f..%2fwork.json", headers=user_headers).status_code == 422


def test_a_hostile_stored_listing_is_read_entry_by_entry(client, user_headers, stored_run) -> None:
    run_id, store, _ = stored_run
    listing = store / "runs" / str(run_id) / "work.json"
    entries = json.loads(listing.read_text())
    entries += [
        {"path": "../../secret", "size_bytes": 1, "modified_at": "2026-01-01T00:00:00+00:00"},
        {"path": "/etc/passwd", "size_bytes": 1, "modified_at": "2026-01-01T00:00:00+00:00"},
        {"path": "a/./b", "size_bytes": 1, "modified_at": "2026-01-01T00:00:00+00:00"},
        {"path": "ok.txt", "size_bytes": "1", "modified_at": "2026-01-01T00:00:00+00:00"},
        {"path": "ok2.txt", "size_bytes": 1, "modified_at": "yesterday"},
        ["not", "an", "object"],
    ]
    listing.write_text(json.dumps(entries))
    listed = client.get(f"/api/runs/{run_id}/files", headers=user_headers).json()
    assert [f["path"] for f in listed] == ["model_best.pt", "out/checkpoint-6/model.safetensors"]
    r = client.get(f"/api/runs/{run_id}/files/..%2f..%2fsecret", headers=user_headers)
    assert r.status_code == 422
