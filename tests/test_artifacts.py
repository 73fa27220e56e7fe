"""The artifact store: upload and fetch on a plain path and a file:// URL, the forwarder's
uploads (URI recorded once the copy is complete, the final drain waiting for them), and the
API and the resume path reading a checkpoint that is only in the store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import select

from app.artifacts import open_uri
from app.db import session_scope
from app.runs.files import log_store
from app.runs.models import Checkpoint, Run
from app.settings import get_settings
from tests.factories import make_run
from tests.test_resume import new_run
from worker import artifacts
from worker.forwarder import forward

PAYLOAD = b"checkpoint bytes " * 1000


@pytest.fixture(params=["path", "file-url"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    root = tmp_path / "store"
    return str(root) if request.param == "path" else root.as_uri()


def store_root(store: str) -> Path:
    return Path(store.removeprefix("file://"))


def test_upload_puts_the_file_under_runs_id_checkpoints_and_fetch_brings_it_back(
    store: str, tmp_path: Path
) -> None:
    local = tmp_path / "epoch-0001.pt"
    local.write_bytes(PAYLOAD)
    uri = artifacts.upload(store, local, run_id=12, name="epoch-0001.pt")
    stored = store_root(store) / "runs/12/checkpoints/epoch-0001.pt"
    assert stored.read_bytes() == PAYLOAD
    assert uri == stored.as_uri()
    assert [p.name for p in stored.parent.iterdir()] == ["epoch-0001.pt"]  # no temp left
    target = tmp_path / "elsewhere" / "runs/12/checkpoints/epoch-0001.pt"
    artifacts.fetch(uri, target)
    assert target.read_bytes() == PAYLOAD
    assert [p.name for p in target.parent.iterdir()] == ["epoch-0001.pt"]
    opened = open_uri(uri, store=store)
    assert opened is not None and opened.size == len(PAYLOAD)
    assert b"".join(opened.chunks) == PAYLOAD
    assert open_uri(uri + ".nope", store=store) is None


def test_a_uri_outside_the_configured_store_is_never_opened(store: str, tmp_path: Path) -> None:
    secret = tmp_path / "secret.pt"
    secret.write_bytes(PAYLOAD)
    root = store_root(store)
    for uri in (
        secret.as_uri(),
        str(secret),
        f"{root.as_uri()}/../secret.pt",
        f"{root.as_uri()}/runs/../../secret.pt",
    ):
        assert open_uri(uri, store=store) is None, uri
    assert open_uri(secret.as_uri(), store="") is None  # no store configured


def checkpoint_line(name: str, step: int) -> str:
    return json.dumps(
        {
            "type": "checkpoint",
            "name": name,
            "path": f"checkpoints/{name}",
            "epoch": 1,
            "step": step,
            "size_bytes": len(PAYLOAD),
            "time": 1.0,
        }
    )


def drain(run_id: int, run_dir: Path) -> None:
    for _ in range(200):
        with session_scope() as session:
            if not forward(
                session, run_id=run_id, metrics_path=run_dir / "metrics.jsonl", final=True
            ):
                return
    raise AssertionError("the drain never ended")


def uris(run_id: int) -> dict[str, str | None]:
    with session_scope() as session:
        rows = session.execute(
            select(Checkpoint.name, Checkpoint.uri).where(Checkpoint.run_id == run_id)
        ).all()
    return dict(rows)


def test_the_forwarder_uploads_recorded_checkpoints_and_the_drain_waits_for_them(
    store: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(get_settings(), "artifact_store", store)
    run_id = make_run()
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    contents = {"epoch-0001.pt": PAYLOAD, "final.pt": PAYLOAD * 2000}  # 34 MB: still moving
    for name, data in contents.items():
        (run_dir / "checkpoints" / name).write_bytes(data)
    lines = [checkpoint_line("epoch-0001.pt", 10), checkpoint_line("final.pt", 20)]
    (run_dir / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    drain(run_id, run_dir)  # ends only once both URIs are recorded
    recorded = uris(run_id)
    assert set(recorded) == set(contents)
    for name, uri in recorded.items():
        assert uri == (store_root(store) / f"runs/{run_id}/checkpoints/{name}").as_uri()
        opened = open_uri(uri, store=store)
        assert opened is not None and b"".join(opened.chunks) == contents[name]


def test_a_checkpoint_file_that_is_gone_is_given_up_and_the_drain_still_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(get_settings(), "artifact_store", str(tmp_path / "store"))
    run_id = make_run()
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "metrics.jsonl").write_text(checkpoint_line("vanished.pt", 5) + "\n")
    drain(run_id, run_dir)
    assert uris(run_id) == {"vanished.pt": None}


def test_without_a_store_nothing_is_uploaded(tmp_path: Path) -> None:
    assert get_settings().artifact_store == ""
    run_id = make_run()
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "checkpoints" / "final.pt").write_bytes(PAYLOAD)
    (run_dir / "metrics.jsonl").write_text(checkpoint_line("final.pt", 5) + "\n")
    drain(run_id, run_dir)
    assert uris(run_id) == {"final.pt": None}


# --- the API and the resume path, for a checkpoint written on another host ----------------


@pytest.fixture
def api_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The API's configured store: it reads only checkpoints inside it."""
    monkeypatch.setattr(get_settings(), "artifact_store", str(tmp_path))
    return tmp_path


def stored_checkpoint(run_id: int, name: str, store: Path, *, uploaded: bool = True) -> str:
    """A checkpoint row whose file is not on this machine's disk, only in the store."""
    local = store / "upload-from" / name
    local.parent.mkdir(parents=True, exist_ok=True)
    local.write_bytes(PAYLOAD)
    uri = artifacts.upload(str(store), local, run_id=run_id, name=name) if uploaded else None
    with session_scope() as session:
        session.add(
            Checkpoint(
                run_id=run_id,
                name=name,
                epoch=1,
                step=10,
                size_bytes=len(PAYLOAD),
                path=f"checkpoints/{name}",
                uri=uri,
            )
        )
    assert not (get_settings().run_dir(run_id) / "checkpoints" / name).exists()
    return uri or ""


def test_download_streams_from_the_store_when_the_file_is_not_here(
    client, user_headers, tmp_path: Path, api_store: Path
) -> None:
    run = new_run(client, user_headers)
    uri = stored_checkpoint(run["id"], "epoch-0001.pt", tmp_path)
    url = f"/api/runs/{run['id']}/checkpoints/epoch-0001.pt"
    r = client.get(url, headers={**user_headers, "Accept-Encoding": "identity"})
    assert r.status_code == 200 and r.content == PAYLOAD
    assert r.headers["content-length"] == str(len(PAYLOAD))
    assert 'filename="epoch-0001.pt"' in r.headers["content-disposition"]

    Path(uri.removeprefix("file://")).unlink()
    r = client.get(f"/api/runs/{run['id']}/checkpoints/epoch-0001.pt", headers=user_headers)
    assert r.status_code == 404 and "epoch-0001.pt" in r.json()["detail"]


def test_download_of_a_checkpoint_not_uploaded_yet_is_409_then_404_once_finished(
    client, user_headers, tmp_path: Path, api_store: Path
) -> None:
    run = new_run(client, user_headers)
    stored_checkpoint(run["id"], "final.pt", tmp_path, uploaded=False)
    url = f"/api/runs/{run['id']}/checkpoints/final.pt"
    r = client.get(url, headers=user_headers)
    assert r.status_code == 409 and "artifact store" in r.json()["detail"]
    with session_scope() as session:
        session.get(Run, run["id"]).status = "succeeded"  # type: ignore[union-attr]
    r = client.get(url, headers=user_headers)
    assert r.status_code == 404 and "nor in the artifact store" in r.json()["detail"]


def test_resume_from_a_checkpoint_only_in_the_store_and_the_worker_fetches_it(
    client, user_headers, tmp_path: Path, api_store: Path
) -> None:
    run = new_run(client, user_headers)
    stored_checkpoint(run["id"], "epoch-0001.pt", tmp_path)
    r = client.post(
        f"/api/runs/{run['id']}/resume", json={"checkpoint": "epoch-0001.pt"}, headers=user_headers
    )
    assert r.status_code == 201, r.text
    resume_from = r.json()["resume_from"]
    assert resume_from == f"{run['id']}/checkpoints/epoch-0001.pt"

    runs_dir = tmp_path / "worker-b" / "runs"  # another host's data dir
    fetched = artifacts.ensure_local(runs_dir, resume_from)
    assert fetched is not None
    assert fetched == (runs_dir / resume_from).resolve() and fetched.read_bytes() == PAYLOAD
    assert artifacts.ensure_local(runs_dir, resume_from) == fetched  # there now: no fetch
    assert artifacts.ensure_local(runs_dir, None) is None

    stored_checkpoint(run["id"], "nowhere.pt", tmp_path, uploaded=False)
    r = client.post(
        f"/api/runs/{run['id']}/resume", json={"checkpoint": "nowhere.pt"}, headers=user_headers
    )
    assert r.status_code == 409 and "not in the artifact store" in r.json()["detail"]
    with pytest.raises(artifacts.ArtifactMissing, match="neither on this host"):
        artifacts.ensure_local(runs_dir, f"{run['id']}/checkpoints/nowhere.pt")


def test_only_node_0_reaches_the_store_node_1_ships_only_its_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A multi-node run's checkpoints are global rank 0's, on node 0's host: node 1's
    forwarder never reads a spool or uploads, whatever its run folder holds; it ships its
    output.log to node 1's chunks and leaves the run's offsets alone."""
    store = tmp_path / "store"
    monkeypatch.setattr(get_settings(), "artifact_store", str(store))
    run_id = make_run(config={**MULTI_NODE, "seed": 1})
    node_dirs = {k: tmp_path / f"node{k}" for k in (0, 1)}
    for k, run_dir in node_dirs.items():
        (run_dir / "checkpoints").mkdir(parents=True)
        (run_dir / "checkpoints" / "epoch-0001.pt").write_bytes(PAYLOAD)
        (run_dir / "metrics.jsonl").write_text(checkpoint_line("epoch-0001.pt", 10) + "\n")
        (run_dir / "output.log").write_text(f"[rank{2 * k}]: hello from node {k}\n")
    for _ in range(20):
        with session_scope() as session:
            moved = forward(
                session,
                run_id=run_id,
                metrics_path=node_dirs[1] / "metrics.jsonl",
                final=True,
                node=1,
            )
        if not moved:
            break
    assert not store.exists() and uris(run_id) == {}  # nothing recorded, nothing uploaded
    with session_scope() as session:
        run = session.get(Run, run_id)
        assert run is not None and run.metrics_offset == 0 and run.log_offset == 0
    assert log_store.ChunkLogSource(run_id, 1).read(0, 100) == b"[rank2]: hello from node 1\n"
    drain(run_id, node_dirs[0])  # node 0's forwarder: the checkpoint goes to the store
    assert set(uris(run_id)) == {"epoch-0001.pt"}
    assert (store / f"runs/{run_id}/checkpoints/epoch-0001.pt").read_bytes() == PAYLOAD


MULTI_NODE = {"recipe": "tiny_mlp", "params": {}, "resources": {"nodes": 2, "nproc": 2, "gpus": 0}}
