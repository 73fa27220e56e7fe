"""Checkpoint, log and resume paths never leave the run's directory, whatever the URL or the
checkpoint row says: traversal, encoded traversal, absolute paths, backslashes, NUL, symlinks."""

from __future__ import annotations

import os

import pytest
from sqlalchemy import func, select

from app.db import session_scope
from app.runs.models import Checkpoint, Run
from app.settings import get_settings
from tests.factories import add_run

SECRET = b"outside the run directory"

HOSTILE_NAMES = [
    "..",
    "../secret.txt",
    "..%2fsecret.txt",
    "%2e%2e%2fsecret.txt",
    "%2e%2e/%2e%2e/secret.txt",
    "..%5csecret.txt",
    "..\\secret.txt",
    "%2Fetc%2Fpasswd",
    "/etc/passwd",
    "escape",  # a row whose stored path climbs out
    "abs",  # a row whose stored path is absolute
    "link",  # a symlink in the run dir pointing outside
    "ok.pt%00.txt",
]


@pytest.fixture
def run_with_traps(user_headers, client):
    me = client.get("/api/me", headers=user_headers).json()
    with session_scope() as session:
        run_id = add_run(session, owner_id=me["id"], status="succeeded")
        run_dir = get_settings().run_dir(run_id)
        run_dir.mkdir(parents=True, exist_ok=True)
        outside = run_dir.parent / f"secret-{run_id}.txt"
        outside.write_bytes(SECRET)
        (run_dir / "ok.pt").write_bytes(b"fine")
        os.symlink(outside, run_dir / "link.pt")
        rows = {
            "ok.pt": "ok.pt",
            "escape": f"../secret-{run_id}.txt",
            "abs": str(outside),
            "link": "link.pt",
        }
        for name, path in rows.items():
            session.add(
                Checkpoint(run_id=run_id, name=name, epoch=1, step=1, size_bytes=4, path=path)
            )
    return run_id


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_checkpoint_download_stays_inside(client, user_headers, run_with_traps, name) -> None:
    r = client.get(f"/api/runs/{run_with_traps}/checkpoints/{name}", headers=user_headers)
    assert SECRET not in r.content
    # the client normalises a bare ".." away: the URL then names the run itself (JSON)
    assert r.headers["content-type"].startswith("application/json"), name
    if name != "..":
        assert r.status_code in (404, 422), (name, r.status_code)


def test_the_legit_checkpoint_is_served(client, user_headers, run_with_traps) -> None:
    r = client.get(f"/api/runs/{run_with_traps}/checkpoints/ok.pt", headers=user_headers)
    assert r.status_code == 200 and r.content == b"fine"


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_resume_from_a_hostile_checkpoint_starts_nothing(
    client, user_headers, run_with_traps, name
) -> None:
    with session_scope() as session:
        before = session.scalar(select(func.count()).select_from(Run))
    r = client.post(
        f"/api/runs/{run_with_traps}/resume", json={"checkpoint": name}, headers=user_headers
    )
    assert r.status_code in (404, 409, 422), (name, r.status_code, r.text)
    assert isinstance(r.json()["detail"], str | list)
    with session_scope() as session:
        assert session.scalar(select(func.count()).select_from(Run)) == before


@pytest.mark.parametrize(
    "suffix", ["logs?offset=0", "logs/../../secret", "logs%2f..%2f..%2fsecret", "..%2flogs"]
)
def test_logs_are_the_runs_own(client, user_headers, run_with_traps, suffix) -> None:
    r = client.get(f"/api/runs/{run_with_traps}/{suffix}", headers=user_headers)
    assert r.status_code in (200, 404, 422), r.status_code
    assert SECRET not in r.content


@pytest.mark.parametrize(
    "path",
    [
        "/static/../app/settings.py",
        "/static/%2e%2e/%2e%2e/app/settings.py",
        "/static/..%2f..%2fpyproject.toml",
        "/static/vendor/chart-..%2f..%2fsettings.py/uPlot.js",
        "/static/vendor/chart-1/..%2f..%2fsettings.py",
    ],
)
def test_static_files_stay_inside(client, path) -> None:
    r = client.get(path)
    assert b"BaseSettings" not in r.content and b"[project]" not in r.content
