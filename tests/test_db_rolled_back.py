"""An in-process API test leaves nothing in the suite's database: `client` runs the app on the
test's rolled-back sessions (tests/conftest.py db_sessions, app.db.sessions_bound_to), so what
it wrote, the users it made included, is gone when the next test starts. Runs on the suite's
database: SQLite in the embedded pass, PostgreSQL in the services pass.

The two tests run in this order (pytest keeps a module's order); the second reads what the
first wrote, from a connection of its own and through the API."""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, func, select

from app.auth.models import User
from app.db import make_engine, session_scope
from app.saved_views.models import SavedView
from tests.conftest import DATABASE_URL, make_user

# What the first test wrote, for the second to look for.
written: dict[str, str | int] = {}


@pytest.fixture(scope="module")
def outside() -> Iterator[Engine]:
    """A connection of another process's kind: it sees only what was committed."""
    engine = make_engine(DATABASE_URL, pooled=False)
    yield engine
    engine.dispose()


def committed_views(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.scalar(select(func.count()).select_from(SavedView)) or 0)


def test_an_api_test_writes_through_the_api_and_its_own_sessions_see_it(
    client: TestClient, outside: Engine
) -> None:
    username, _, headers = make_user()
    before = committed_views(outside)
    experiment = client.post(
        "/api/experiments",
        json={"name": "rolled-back", "config": {"recipe": "digits_cnn", "params": {}, "seed": 1}},
        headers=headers,
    )
    assert experiment.status_code == 201, experiment.text
    name = f"view-{secrets.token_hex(4)}"
    body = {"name": name, "experiment_id": experiment.json()["id"], "shared": False, "state": {}}
    view = client.post("/api/views", json=body, headers=headers)
    assert view.status_code == 201, view.text
    mine = [v["name"] for v in client.get("/api/views", headers=headers).json() if not v["shared"]]
    assert mine == [name]
    # App code that opens its own session (a background task, a stream) is on the same
    # connection, so it sees the request's rows.
    with session_scope() as session:
        assert session.get(SavedView, view.json()["id"]) is not None
    # Nothing reached the database for anyone else: not committed.
    assert committed_views(outside) == before
    written.update(username=username, view=name, views=before)


def test_the_next_test_sees_none_of_it(
    client: TestClient, admin_headers: dict[str, str], outside: Engine
) -> None:
    if not written:
        pytest.skip("runs after the test above, which writes what this one looks for")
    assert committed_views(outside) == written["views"]
    with session_scope() as session:
        assert session.scalar(select(User).where(User.username == written["username"])) is None
        assert session.scalars(select(SavedView.name)).all().count(written["view"]) == 0
    # The first test's user and token are gone: its headers no longer authenticate.
    shared = client.get("/api/views", headers=admin_headers).json()
    assert written["view"] not in [v["name"] for v in shared]
