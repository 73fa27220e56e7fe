"""The per-user quota (app/users/quota.py): a user past it gets a 413 on an upload and a 422 on
a new run, each naming the quota and the use; another user is not affected; no quota, no
refusal. The use is the recorded sizes (runs.disk_bytes, stored snapshots), summed in SQL."""

from __future__ import annotations

from typing import Any

from app.auth.models import User
from app.db import session_scope
from app.runs.models import Run
from app.settings import get_settings
from app.users.quota import usage
from tests.code_archives import GOOD_SNAPSHOT, tar_gz
from tests.conftest import make_user
from tests.factories import add_run

DIGITS = {"recipe": "digits_cnn", "params": {"epochs": 1}, "seed": 1}


def _user_id(username: str) -> int:
    with session_scope() as session:
        user = session.query(User).filter_by(username=username).one()
        return user.id


def _experiment(client: Any, headers: dict[str, str]) -> int:
    made = client.post("/api/experiments", json={"name": "q", "config": DIGITS}, headers=headers)
    assert made.status_code == 201, made.text
    return int(made.json()["id"])


def _upload(client: Any, headers: dict[str, str], tag: bytes) -> Any:
    data = tar_gz([("train.py", "file", b"print(1)\n" + tag), *GOOD_SNAPSHOT[1:]])
    return client.post("/api/code", headers=headers, files={"file": ("c.tar.gz", data)})


def test_a_user_over_the_quota_is_refused_and_another_is_not(client, monkeypatch) -> None:
    monkeypatch.setattr(get_settings(), "user_quota_gb", 0.00001)  # 10,000 bytes
    alice, _, alice_headers = make_user()
    _bob, _, bob_headers = make_user()
    alice_id = _user_id(alice)
    alice_exp = _experiment(client, alice_headers)
    first = _upload(client, alice_headers, b"# alice 1\n")
    assert first.status_code == 201, first.text
    assert usage_of(alice_id) == first.json()["size_bytes"]  # the stored archive counts
    with session_scope() as session:  # a finished run whose folder the worker measured
        run_id = add_run(session, owner_id=alice_id, config=DIGITS, status="succeeded")
        session.get_one(Run, run_id).disk_bytes = 20_000
    assert usage_of(alice_id) == 20_000 + first.json()["size_bytes"]

    upload = _upload(client, alice_headers, b"# alice 2\n")
    assert upload.status_code == 413, upload.text
    message = upload.json()["detail"]
    assert (
        message.startswith(f"user quota exceeded: {alice} uses 20.") and " kB of 10 kB" in message
    )
    assert "TORCHYARD_USER_QUOTA_GB" in message
    run = client.post(f"/api/experiments/{alice_exp}/runs", json={}, headers=alice_headers)
    assert run.status_code == 422, run.text
    assert f"user quota exceeded: {alice} uses" in run.json()["detail"][0]["msg"]

    # Bob is under his own quota: his upload and his run are taken.
    assert _upload(client, bob_headers, b"# bob\n").status_code == 201
    bob_exp = _experiment(client, bob_headers)
    bobs = client.post(f"/api/experiments/{bob_exp}/runs", json={}, headers=bob_headers)
    assert bobs.status_code == 201, bobs.text

    # No quota (0): nothing is refused.
    monkeypatch.setattr(get_settings(), "user_quota_gb", 0.0)
    assert _upload(client, alice_headers, b"# alice 3\n").status_code == 201


def usage_of(user_id: int) -> int:
    with session_scope() as session:
        return usage(session, user_id)


def test_an_mlflow_artifact_counts_and_is_refused_past_the_quota(client, monkeypatch) -> None:
    """An artifact uploaded into a run logged from outside adds its bytes to the run's disk use
    as it is stored; past the quota the next upload is a 413 in MLflow's error shape."""
    monkeypatch.setattr(get_settings(), "user_quota_gb", 0.00001)  # 10,000 bytes
    carol, _, headers = make_user()
    exp = client.post(
        "/api/2.0/mlflow/experiments/create", json={"name": carol}, headers=headers
    ).json()["experiment_id"]
    run = client.post(
        "/api/2.0/mlflow/runs/create", json={"experiment_id": exp}, headers=headers
    ).json()["run"]["info"]["run_id"]
    url = f"/api/2.0/mlflow-artifacts/artifacts/{exp}/{run}/artifacts"
    first = client.put(f"{url}/a.bin", content=b"x" * 12_000, headers=headers)
    assert first.status_code == 200, first.text
    assert usage_of(_user_id(carol)) == 12_000
    second = client.put(f"{url}/b.bin", content=b"y", headers=headers)
    assert second.status_code == 413, second.text
    body = second.json()
    assert body["error_code"] == "INVALID_PARAMETER_VALUE"
    assert body["message"].startswith(f"user quota exceeded: {carol} uses 12 kB of 10 kB")
