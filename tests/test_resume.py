"""Resume from a checkpoint: the API in-process, and one real run continued end to end."""

from __future__ import annotations

import pytest

from app.db import session_scope
from app.metrics.service import ingest_points
from app.runs.models import Checkpoint
from app.settings import get_settings
from tests.conftest import make_user, wait_for_status


def new_run(client, headers, params: dict | None = None) -> dict:
    config = {"recipe": "tiny_mlp", "params": params or {"epochs": 2}, "seed": 31}
    exp = client.post("/api/experiments", json={"name": "r", "config": config}, headers=headers)
    assert exp.status_code == 201, exp.text
    run = client.post(
        f"/api/experiments/{exp.json()['id']}/runs",
        json={"overrides": {"params": {"lr": 0.05}}},
        headers=headers,
    )
    assert run.status_code == 201, run.text
    return run.json()


def add_checkpoint(run_id: int, name: str, *, on_disk: bool = True) -> None:
    relative = f"checkpoints/{name}"
    path = get_settings().run_dir(run_id) / relative
    if on_disk:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"not really torch")
    with session_scope() as session:
        session.add(
            Checkpoint(run_id=run_id, name=name, epoch=1, step=10, size_bytes=16, path=relative)
        )


def test_resume_queues_a_new_run_with_the_same_config_from_the_checkpoint(
    client, user_headers
) -> None:
    run = new_run(client, user_headers)
    add_checkpoint(run["id"], "epoch-0001.pt")
    r = client.post(
        f"/api/runs/{run['id']}/resume", json={"checkpoint": "epoch-0001.pt"}, headers=user_headers
    )
    assert r.status_code == 201, r.text
    new = r.json()
    assert new["id"] != run["id"] and new["status"] == "queued"
    assert new["experiment_id"] == run["experiment_id"] and new["owner_id"] == run["owner_id"]
    assert new["config"] == run["config"] and new["seed"] == run["seed"] == 31
    assert new["config"]["params"]["lr"] == 0.05  # the run's overrides, not just the experiment's
    assert new["resume_from"] == f"{run['id']}/checkpoints/epoch-0001.pt"
    assert (get_settings().runs_dir / new["resume_from"]).is_file()


def test_an_admin_resumes_another_users_run_as_the_new_runs_owner(client, user_headers) -> None:
    run = new_run(client, user_headers)
    add_checkpoint(run["id"], "final.pt")
    _name, _password, admin = make_user(admin=True)
    r = client.post(f"/api/runs/{run['id']}/resume", json={"checkpoint": "final.pt"}, headers=admin)
    assert r.status_code == 201, r.text
    me = client.get("/api/runs", headers=admin).json()["runs"]
    assert r.json()["id"] in [x["id"] for x in me] and r.json()["owner_id"] != run["owner_id"]


def test_resume_from_an_unknown_checkpoint_is_404(client, user_headers) -> None:
    run = new_run(client, user_headers)
    r = client.post(
        f"/api/runs/{run['id']}/resume", json={"checkpoint": "nope.pt"}, headers=user_headers
    )
    assert r.status_code == 404 and "nope.pt" in r.json()["detail"]


def test_resume_when_the_checkpoint_file_is_gone_is_409(client, user_headers) -> None:
    run = new_run(client, user_headers)
    add_checkpoint(run["id"], "gone.pt", on_disk=False)
    r = client.post(
        f"/api/runs/{run['id']}/resume", json={"checkpoint": "gone.pt"}, headers=user_headers
    )
    assert r.status_code == 409 and "no longer on disk" in r.json()["detail"]


def test_resume_of_another_users_run_is_403_and_of_a_missing_run_404(client, user_headers) -> None:
    run = new_run(client, user_headers)
    add_checkpoint(run["id"], "epoch-0001.pt")
    other = make_user()[2]
    body = {"checkpoint": "epoch-0001.pt"}
    assert client.post(f"/api/runs/{run['id']}/resume", json=body, headers=other).status_code == 403
    assert client.post("/api/runs/99999999/resume", json=body, headers=other).status_code == 404


def test_resume_body_is_validated(client, user_headers) -> None:
    run = new_run(client, user_headers)
    r = client.post(f"/api/runs/{run['id']}/resume", json={}, headers=user_headers)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "checkpoint"]


# --- what the run page needs from the metrics and events routes --------------------------


def test_metrics_with_time_add_wall_times_also_when_downsampled(client, user_headers) -> None:
    run = new_run(client, user_headers)
    with session_scope() as session:
        points = [("m", s, float(s % 7), 1000.0 + s) for s in range(1, 101)]
        ingest_points(session, run_id=run["id"], points=points)
    url = f"/api/runs/{run['id']}/metrics"
    plain = client.get(url, headers=user_headers).json()["series"]["m"]
    assert set(plain) == {"step", "value"}
    whole = client.get(url, params={"with_time": "true"}, headers=user_headers).json()
    assert whole["series"]["m"]["time"] == [1000.0 + s for s in range(1, 101)]
    small = client.get(
        url, params={"with_time": "true", "max_points": 10}, headers=user_headers
    ).json()["series"]["m"]
    assert len(small["step"]) <= 10
    assert small["time"] == [1000.0 + s for s in small["step"]]


def test_events_after_must_be_a_json_object_of_steps(client, user_headers) -> None:
    run = new_run(client, user_headers)
    r = client.get(f"/api/runs/{run['id']}/events", params={"after": "[1]"}, headers=user_headers)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "after"]


def test_logs_tail_returns_the_last_bytes_and_the_size(client, user_headers) -> None:
    run = new_run(client, user_headers)
    log = get_settings().run_dir(run["id"]) / "output.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("line one\nline two\n")
    r = client.get(f"/api/runs/{run['id']}/logs", params={"tail": 9}, headers=user_headers)
    assert r.text == "line two\n" and r.headers["x-log-size"] == "18"
    whole = client.get(f"/api/runs/{run['id']}/logs", headers=user_headers)
    assert whole.text == "line one\nline two\n"


# --- end to end ------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.local_only  # a job resuming; the resume routes: the quick tests, both stacks
def test_a_resumed_run_continues_the_curve_where_the_checkpoint_stopped(live_stack) -> None:
    tiny = {
        "recipe": "tiny_mlp",
        "params": {"epochs": 3, "steps_per_epoch": 10},
        "seed": 3,
        "checkpoints": {"keep_last": 3},  # epoch 1 too (the default keeps the latest two)
    }
    with live_stack.admin_client() as api:
        exp = api.post("/api/experiments", json={"name": "resume-e2e", "config": tiny}).json()
        first = api.post(f"/api/experiments/{exp['id']}/runs").json()
        assert wait_for_status(api, first["id"], {"succeeded", "failed"})["status"] == "succeeded"
        ckpts = {c["name"]: c for c in api.get(f"/api/runs/{first['id']}/checkpoints").json()}
        assert ckpts["epoch-0001.pt"]["step"] == 10 and ckpts["epoch-0001.pt"]["epoch"] == 1

        r = api.post(f"/api/runs/{first['id']}/resume", json={"checkpoint": "epoch-0001.pt"})
        assert r.status_code == 201, r.text
        second = r.json()
        assert second["resume_from"] == f"{first['id']}/checkpoints/epoch-0001.pt"
        done = wait_for_status(api, second["id"], {"succeeded", "failed"})
        assert done["status"] == "succeeded", done

        def series(run_id: int) -> dict:
            return api.get(f"/api/runs/{run_id}/metrics").json()["series"]

        a, b = series(first["id"]), series(second["id"])
        assert a["train/loss"]["step"] == list(range(1, 31))
        assert b["train/loss"]["step"] == list(range(11, 31))  # checkpoint step + 1 .. the end
        # Model, optimizer and the per-epoch data order are restored: the same curve.
        assert b["train/loss"]["value"] == pytest.approx(a["train/loss"]["value"][10:], rel=1e-5)
        assert b["val/loss"]["step"] == [20, 30] and b["epoch"]["value"] == [2.0, 3.0]
        assert b["val/acc"]["value"] == pytest.approx(a["val/acc"]["value"][1:], rel=1e-5)
        final = {c["name"]: c for c in api.get(f"/api/runs/{second['id']}/checkpoints").json()}
        assert "epoch-0001.pt" not in final
        assert final["final.pt"]["epoch"] == 3 and final["final.pt"]["step"] == 30
