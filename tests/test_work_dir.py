"""GET /api/runs/{id}/files and /files/{path}: every regular file a run wrote under its
directory, listed and downloaded byte for byte; checkpoints marked; folders as a tar.gz; links,
FIFOs, traversal and torchyard's own files refused, and nothing outside ever served."""

from __future__ import annotations

import io
import os
import tarfile

import pytest

from app.db import session_scope
from app.settings import get_settings
from tests.factories import add_run

SECRET = b"outside the run directory"
WEIGHTS = os.urandom(300_000)


@pytest.fixture
def run_dir_with_files(user_headers, client):
    me = client.get("/api/me", headers=user_headers).json()
    with session_scope() as session:
        run_id = add_run(session, owner_id=me["id"], status="succeeded")
    run_dir = get_settings().run_dir(run_id)
    root = run_dir / "work"  # the job's working directory
    (root / "checkpoint-500").mkdir(parents=True)
    (root / "sub" / "deeper").mkdir(parents=True)
    (root / "model_best.pt").write_bytes(WEIGHTS)
    (root / "checkpoint-500" / "model.safetensors").write_bytes(b"tensors")
    (root / "checkpoint-500" / "trainer_state.json").write_text('{"global_step": 500}')
    (root / "sub" / "deeper" / "notes.txt").write_text("hello")
    (run_dir / "metrics.jsonl").write_text("{}\n")  # torchyard's own, beside the work dir
    (run_dir / "output.log").write_text("log\n")
    outside = run_dir.parent / f"secret-{run_id}.txt"
    outside.write_bytes(SECRET)
    os.symlink(outside, root / "link.pt")
    os.symlink("/etc", root / "etc")
    os.mkfifo(root / "pipe.pt")
    return run_id


def test_the_listing_has_every_regular_file_with_checkpoints_marked(
    client, user_headers, run_dir_with_files
) -> None:
    r = client.get(f"/api/runs/{run_dir_with_files}/files", headers=user_headers)
    assert r.status_code == 200, r.text
    listed = {f["path"]: f for f in r.json()}
    assert sorted(listed) == [
        "checkpoint-500/model.safetensors",
        "checkpoint-500/trainer_state.json",
        "model_best.pt",
        "sub/deeper/notes.txt",
    ]
    assert listed["model_best.pt"]["size_bytes"] == len(WEIGHTS)
    assert listed["model_best.pt"]["checkpoint"] is True
    assert listed["checkpoint-500/trainer_state.json"]["checkpoint"] is True
    assert listed["sub/deeper/notes.txt"]["checkpoint"] is False
    assert listed["sub/deeper/notes.txt"]["modified_at"].endswith(("Z", "+00:00"))


def test_a_file_downloads_byte_for_byte(client, user_headers, run_dir_with_files) -> None:
    base = f"/api/runs/{run_dir_with_files}/files"
    r = client.get(f"{base}/model_best.pt", headers=user_headers)
    assert r.status_code == 200 and r.content == WEIGHTS
    assert 'filename="model_best.pt"' in r.headers["content-disposition"]
    assert client.get(f"{base}/sub/deeper/notes.txt", headers=user_headers).text == "hello"


def test_a_folder_downloads_as_a_tar_of_its_files(client, user_headers, run_dir_with_files) -> None:
    r = client.get(f"/api/runs/{run_dir_with_files}/files/checkpoint-500", headers=user_headers)
    assert r.status_code == 200
    with tarfile.open(fileobj=io.BytesIO(r.content), mode="r:gz") as tar:
        got = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}  # type: ignore[union-attr]
    assert got == {
        "checkpoint-500/model.safetensors": b"tensors",
        "checkpoint-500/trainer_state.json": b'{"global_step": 500}',
    }


@pytest.mark.parametrize(
    ("path", "status"),
    [
        ("link.pt", 404),  # a link to a file outside
        ("etc/passwd", 404),  # through a linked folder
        ("pipe.pt", 422),  # a FIFO: refused at once, never read (no hang)
        ("../secret.txt", 404),  # the client normalises ..; the server never sees it
        ("..%2fsecret.txt", 422),
        ("sub/..%2f..%2fsecret.txt", 422),
        ("sub%5c..%5csecret.txt", 422),
        ("%2fetc%2fpasswd", 422),
        ("metrics.jsonl", 404),  # torchyard's own files are not in the working directory
        ("..%2foutput.log", 422),
        ("nothing-here.pt", 404),
    ],
)
def test_links_fifos_traversal_and_own_files_are_refused(
    client, user_headers, run_dir_with_files, path, status
) -> None:
    r = client.get(f"/api/runs/{run_dir_with_files}/files/{path}", headers=user_headers)
    assert r.status_code == status, (path, r.status_code, r.text)
    assert SECRET not in r.content and b"root:" not in r.content and b"log\n" != r.content


def test_a_run_that_has_not_started_lists_nothing(client, user_headers) -> None:
    me = client.get("/api/me", headers=user_headers).json()
    with session_scope() as session:
        run_id = add_run(session, owner_id=me["id"])
    r = client.get(f"/api/runs/{run_id}/files", headers=user_headers)
    assert r.status_code == 200 and r.json() == []
