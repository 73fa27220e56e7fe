"""Named API tokens: list, create (secret shown once, bounded life), revoke; refused tokens say
why on every route, the event stream included; logout revokes the browser's token."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select, update

from app.auth.models import ApiToken
from app.db import session_scope
from app.settings import get_settings
from app.timeutil import as_utc, utcnow
from tests.conftest import make_user
from tests.factories import add_run


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_create_list_and_use_a_named_token(client, user_headers) -> None:
    r = client.post("/api/tokens", json={"name": "laptop", "ttl_hours": 2}, headers=user_headers)
    assert r.status_code == 201, r.text
    created = r.json()
    secret = created["access_token"]
    assert secret.startswith("ty_") and created["name"] == "laptop"
    life = as_utc_iso(created["expires_at"]) - as_utc_iso(created["created_at"])
    assert timedelta(hours=2) - timedelta(seconds=5) < life <= timedelta(hours=2, seconds=5)
    assert client.get("/api/me", headers=_bearer(secret)).status_code == 200

    listed = client.get("/api/tokens", headers=user_headers).json()
    mine = next(t for t in listed if t["id"] == created["id"])
    assert set(mine) == {"id", "name", "created_at", "expires_at", "revoked_at", "last_used_at"}
    assert mine["last_used_at"] is not None  # used for GET /api/me above
    assert mine["revoked_at"] is None
    with session_scope() as session:
        digest = session.scalar(select(ApiToken.token_hash).where(ApiToken.id == created["id"]))
    assert digest is not None and digest != secret
    assert secret not in client.get("/api/tokens", headers=user_headers).text
    assert digest not in client.get("/api/tokens", headers=user_headers).text


def as_utc_iso(text: str):
    from datetime import datetime

    return as_utc(datetime.fromisoformat(text))


def test_default_life_comes_from_settings(client, user_headers) -> None:
    created = client.post("/api/tokens", json={"name": "d"}, headers=user_headers).json()
    life = as_utc_iso(created["expires_at"]) - as_utc_iso(created["created_at"])
    assert abs(life.total_seconds() - get_settings().token_ttl_hours * 3600) < 5


def test_token_life_is_bounded(client, user_headers) -> None:
    too_long = get_settings().token_max_ttl_hours + 1
    r = client.post("/api/tokens", json={"name": "x", "ttl_hours": too_long}, headers=user_headers)
    assert r.status_code == 422
    assert "at most" in r.json()["detail"][0]["msg"]
    for bad in (0, -1, "soon"):
        r = client.post("/api/tokens", json={"name": "x", "ttl_hours": bad}, headers=user_headers)
        assert r.status_code == 422, bad
    assert client.post("/api/tokens", json={"name": ""}, headers=user_headers).status_code == 422


def test_revoke_a_token_then_it_is_refused_everywhere(client, user_headers) -> None:
    created = client.post("/api/tokens", json={"name": "ci"}, headers=user_headers).json()
    secret = created["access_token"]
    me = client.get("/api/me", headers=user_headers).json()
    with session_scope() as session:
        run_id = add_run(session, owner_id=me["id"], status="succeeded")
    assert client.get(f"/api/runs/{run_id}", headers=_bearer(secret)).status_code == 200

    r = client.delete(f"/api/tokens/{created['id']}", headers=user_headers)
    assert r.status_code == 204 and r.content == b""
    for path in ("/api/me", f"/api/runs/{run_id}", f"/api/runs/{run_id}/events", "/api/tokens"):
        r = client.get(path, headers=_bearer(secret))
        assert r.status_code == 401, path
        assert "revoked" in r.json()["detail"], path
    listed = client.get("/api/tokens", headers=user_headers).json()
    assert next(t for t in listed if t["id"] == created["id"])["revoked_at"] is not None
    # revoking again is harmless
    assert client.delete(f"/api/tokens/{created['id']}", headers=user_headers).status_code == 204


def test_an_expired_token_says_so(client, user_headers) -> None:
    created = client.post("/api/tokens", json={"name": "old"}, headers=user_headers).json()
    with session_scope() as session:
        session.execute(
            update(ApiToken)
            .where(ApiToken.id == created["id"])
            .values(expires_at=utcnow() - timedelta(seconds=1))
        )
    r = client.get("/api/runs", headers=_bearer(created["access_token"]))
    assert r.status_code == 401 and "expired" in r.json()["detail"]
    assert r.headers["www-authenticate"] == "Bearer"


def test_another_users_token_is_not_found_but_an_admin_may_revoke_it(client) -> None:
    _, _, owner = make_user()
    _, _, other = make_user()
    _, _, admin = make_user(admin=True)
    token = client.post("/api/tokens", json={"name": "t"}, headers=owner).json()
    r = client.delete(f"/api/tokens/{token['id']}", headers=other)
    assert r.status_code == 404 and "not found" in r.json()["detail"]
    assert client.get("/api/me", headers=_bearer(token["access_token"])).status_code == 200
    assert client.delete(f"/api/tokens/{token['id']}", headers=admin).status_code == 204
    assert client.get("/api/me", headers=_bearer(token["access_token"])).status_code == 401
    assert client.delete("/api/tokens/999999999", headers=owner).status_code == 404
    assert client.delete(f"/api/tokens/{2**64}", headers=owner).status_code == 404


def test_logout_revokes_the_browser_session_token(client) -> None:
    username, password, _ = make_user()
    r = client.post(
        "/login", data={"username": username, "password": password}, follow_redirects=False
    )
    assert r.status_code == 303
    session_token = client.cookies["ty_session"]
    csrf = client.cookies["ty_csrf"]
    assert client.get("/api/me", headers=_bearer(session_token)).status_code == 200
    r = client.post("/logout", headers={"X-CSRF-Token": csrf}, follow_redirects=False)
    assert r.status_code == 303
    client.cookies.clear()
    r = client.get("/api/me", headers=_bearer(session_token))
    assert r.status_code == 401 and "revoked" in r.json()["detail"]
    # the old cookie, replayed, gets the login page and not the app
    r = client.get("/", headers={"Cookie": f"ty_session={session_token}"}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"].startswith("/login")


def test_the_default_cap_is_90_days_and_a_token_cannot_outlive_its_maker(client) -> None:
    from app.settings import Settings

    assert Settings().token_max_ttl_hours == 24 * 90  # a year was the old default
    _, _, headers = make_user()  # a token that lives 30 days
    r = client.post("/api/tokens", json={"name": "heir", "ttl_hours": 24 * 60}, headers=headers)
    assert r.status_code == 422
    assert "may not outlive the token that creates it" in r.json()["detail"][0]["msg"]
    r = client.post("/api/tokens", json={"name": "heir", "ttl_hours": 24 * 29}, headers=headers)
    assert r.status_code == 201
    # a short token made from it cannot make a longer one in turn
    short = r.json()["access_token"]
    r = client.post("/api/tokens", json={"name": "x", "ttl_hours": 24 * 28}, headers=_bearer(short))
    assert r.status_code == 201
    tiny = client.post(
        "/api/tokens", json={"name": "tiny", "ttl_hours": 1}, headers=_bearer(short)
    ).json()["access_token"]
    r = client.post("/api/tokens", json={"name": "y", "ttl_hours": 2}, headers=_bearer(tiny))
    assert r.status_code == 422
    # asking for no life in particular: the default, cut to what the maker has left
    r = client.post("/api/tokens", json={"name": "z"}, headers=_bearer(tiny))
    assert r.status_code == 201
    life = as_utc_iso(r.json()["expires_at"]) - utcnow()
    assert timedelta(minutes=58) < life <= timedelta(hours=1)
