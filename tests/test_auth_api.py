from __future__ import annotations

from tests.conftest import ADMIN_PASSWORD, make_user


def test_token_for_admin_with_bootstrapped_password(client) -> None:
    r = client.post("/api/auth/token", data={"username": "admin", "password": ADMIN_PASSWORD})
    assert r.status_code == 200
    body = r.json()
    assert body["token_type"] == "bearer" and body["access_token"].startswith("ty_")
    me = client.get("/api/me", headers={"Authorization": f"Bearer {body['access_token']}"})
    assert me.json()["username"] == "admin" and me.json()["is_admin"] is True


def test_token_wrong_password_is_401_naming_the_problem(client) -> None:
    r = client.post("/api/auth/token", data={"username": "admin", "password": "nope"})
    assert r.status_code == 401
    assert "incorrect username or password" in r.json()["detail"]


def test_token_missing_form_fields_is_422(client) -> None:
    r = client.post("/api/auth/token", data={"username": "admin"})
    assert r.status_code == 422
    assert any(e["loc"][-1] == "password" for e in r.json()["detail"])


def test_api_requires_a_token(client) -> None:
    for path in ("/api/experiments", "/api/runs", "/api/runs/1", "/api/me"):
        r = client.get(path)
        assert r.status_code == 401, path
        assert "not authenticated" in r.json()["detail"]


def test_bad_token_is_401(client) -> None:
    r = client.get("/api/experiments", headers={"Authorization": "Bearer ty_forged"})
    assert r.status_code == 401
    assert "invalid" in r.json()["detail"]


def test_health_needs_no_token(client) -> None:
    assert client.get("/api/health").json() == {"status": "ok"}


def test_passwords_are_stored_as_argon2_hashes() -> None:
    from sqlalchemy import select

    from app.auth.models import User
    from app.db import session_scope

    username, password, _ = make_user()
    with session_scope() as session:
        stored = session.scalar(select(User.password_hash).where(User.username == username))
    assert stored is not None and stored.startswith("$argon2") and password not in stored


def test_expired_token_is_refused(client) -> None:
    from app.auth.service import create_user, issue_token
    from app.db import session_scope

    with session_scope() as session:
        user = create_user(session, username="expiring-user", password="pw-123456")
        token = issue_token(session, user=user, ttl_hours=-1)
    r = client.get("/api/me", headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 401
