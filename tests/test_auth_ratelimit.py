"""Password logins are throttled through the login_attempts table (shared by every API
process): per username and per client address, with 429 + Retry-After, on the API and the form.
The limits are set small through the settings object (configuration, not a mock)."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from app.auth.models import LoginAttempt
from app.auth.service import LoginRefused, password_login
from app.db import session_scope
from app.settings import get_settings
from app.timeutil import utcnow
from tests.conftest import make_user

# A failed login is written in a transaction of its own that outlives the request's rollback
# (app.auth.service.password_login): on the one rolled-back connection it would be a SAVEPOINT
# inside the request's, and go with it.
pytestmark = pytest.mark.committed("login failures are counted in a transaction of their own")


@pytest.fixture
def limits(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = get_settings()
    monkeypatch.setattr(settings, "login_max_failures", 3)
    monkeypatch.setattr(settings, "login_max_failures_per_client", 6)
    monkeypatch.setattr(settings, "login_window_seconds", 60.0)


@pytest.fixture
def address(app) -> Iterator[TestClient]:
    """A client with an address of its own, so other tests' failures do not count."""
    with TestClient(
        app, client=(f"10.9.{secrets.randbelow(250)}.{secrets.randbelow(250)}", 1)
    ) as c:
        yield c


def _token(client: TestClient, username: str, password: str):
    return client.post("/api/auth/token", data={"username": username, "password": password})


def test_failures_for_a_username_lock_it_with_429_and_retry_after(limits, address) -> None:
    username, password, _ = make_user()
    for _ in range(3):
        assert _token(address, username, "wrong").status_code == 401
    r = _token(address, username, password)  # even the right password: not checked now
    assert r.status_code == 429
    assert "too many failed logins" in r.json()["detail"]
    assert 1 <= int(r.headers["retry-after"]) <= 60
    # the form says the same, with the same status
    r = address.post("/login", data={"username": username, "password": password})
    assert r.status_code == 429 and "Too many failed logins" in r.text
    assert "retry-after" in r.headers
    # another user from the same address is not locked
    other, other_pw, _ = make_user()
    assert _token(address, other, other_pw).status_code == 200


def test_username_variants_share_one_counter(limits, address) -> None:
    username, _, _ = make_user()
    for variant in (username, username.upper(), f" {username} "):
        assert _token(address, variant, "wrong").status_code == 401
    assert _token(address, username, "wrong").status_code == 429


def test_successful_logins_do_not_count_and_reset_the_username(limits, address) -> None:
    username, password, _ = make_user()
    for _ in range(2):
        assert _token(address, username, "wrong").status_code == 401
    for _ in range(5):
        assert _token(address, username, password).status_code == 200
    for _ in range(2):
        assert _token(address, username, "wrong").status_code == 401
    assert _token(address, username, password).status_code == 200


def test_one_address_spraying_many_usernames_is_throttled(limits, address, client) -> None:
    for _ in range(6):
        assert _token(address, f"nobody-{secrets.token_hex(3)}", "guess").status_code == 401
    username, password, _ = make_user()
    r = _token(address, username, password)
    assert r.status_code == 429 and "from your address" in r.json()["detail"]
    # the same user from another address logs in
    assert _token(client, username, password).status_code == 200


def test_the_form_counts_too(limits, address) -> None:
    username, password, _ = make_user()
    for _ in range(3):
        r = address.post("/login", data={"username": username, "password": "bad"})
        assert r.status_code == 401 and "Incorrect username or password" in r.text
    r = address.post("/login", data={"username": username, "password": password})
    assert r.status_code == 429
    assert "Too many failed logins" in r.text and int(r.headers["retry-after"]) >= 1
    assert "ty_session" not in address.cookies


class FakeClock:
    """Time that moves only when the test says so."""

    def __init__(self) -> None:
        self.now = utcnow()

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


def test_the_lock_ends_with_the_window_and_old_rows_are_pruned(limits) -> None:
    username, password, _ = make_user()
    clock = FakeClock()
    settings = get_settings()

    def login(secret: str) -> str:
        with session_scope() as session:
            try:
                password_login(
                    session,
                    username=username,
                    password=secret,
                    client="10.8.0.1",
                    settings=settings,
                    clock=clock,
                )
            except LoginRefused as refused:  # the API answers 401 / 429 from this
                return "throttled" if refused.retry_after else "refused"
        return "ok"

    with session_scope() as session:
        session.add(
            LoginAttempt(
                username="ancient", client="x", succeeded=False, at=utcnow() - timedelta(days=1)
            )
        )
    for _ in range(3):
        assert login("wrong") == "refused"
        clock.advance(10)  # however slow the box, only the clock decides
    assert login(password) == "throttled"
    clock.advance(60 - 30 + 0.5)  # the first failure leaves the 60 s window
    assert login(password) == "ok"
    with session_scope() as session:
        old = session.scalar(
            select(func.count()).where(LoginAttempt.at < utcnow() - timedelta(hours=1))
        )
    assert old == 0


def test_failed_attempts_are_recorded_even_though_the_request_fails(limits, address) -> None:
    username, _, _ = make_user()
    assert _token(address, username, "wrong").status_code == 401
    with session_scope() as session:
        rows = session.scalars(
            select(LoginAttempt).where(LoginAttempt.username == username.lower())
        ).all()
    assert len(rows) == 1 and not rows[0].succeeded and rows[0].client.startswith("10.9.")


# --- nobody locks anyone else out; forwarded addresses only from configured proxies ---------


def test_fifty_wrong_admin_passwords_from_one_client_do_not_lock_the_admin_out(app) -> None:
    from tests.conftest import ADMIN_PASSWORD

    with (
        TestClient(app, client=("10.66.0.1", 1)) as attacker,
        TestClient(app, client=("10.66.0.2", 1)) as admin,
    ):
        codes = [_token(attacker, "admin", f"guess-{i}").status_code for i in range(50)]
        assert set(codes) <= {401, 429} and codes[-1] == 429  # the guesser is throttled
        r = _token(admin, "admin", ADMIN_PASSWORD)
        assert r.status_code == 200, r.text
        # ... and so is the attacker's address for the admin, still
        assert _token(attacker, "admin", ADMIN_PASSWORD).status_code == 429


def test_x_forwarded_for_from_an_unconfigured_peer_is_ignored(limits, address) -> None:
    username, password, _ = make_user()
    for i in range(3):
        r = address.post(
            "/api/auth/token",
            data={"username": username, "password": "wrong"},
            headers={"X-Forwarded-For": f"198.51.100.{i}"},
        )
        assert r.status_code == 401
    r = address.post(
        "/api/auth/token",
        data={"username": username, "password": password},
        headers={"X-Forwarded-For": "198.51.100.99"},
    )
    assert r.status_code == 429  # counted on the peer, whatever it claims


def test_x_forwarded_for_from_a_configured_proxy_names_the_client(
    limits, monkeypatch: pytest.MonkeyPatch
) -> None:
    from app.main import create_app

    monkeypatch.setattr(get_settings(), "trusted_proxies", "10.77.0.1")
    with TestClient(create_app(), client=("10.77.0.1", 1)) as proxy:
        username, password, _ = make_user()
        for _ in range(3):
            r = proxy.post(
                "/api/auth/token",
                data={"username": username, "password": "wrong"},
                headers={"X-Forwarded-For": "203.0.113.5"},
            )
            assert r.status_code == 401
        blocked = {"X-Forwarded-For": "203.0.113.5"}
        other = {"X-Forwarded-For": "203.0.113.6"}
        form = {"username": username, "password": password}
        assert proxy.post("/api/auth/token", data=form, headers=blocked).status_code == 429
        assert proxy.post("/api/auth/token", data=form, headers=other).status_code == 200


def test_the_server_command_leaves_forwarded_headers_to_the_app() -> None:
    from torchyard.compose.processes import server_argv

    assert "--no-proxy-headers" in server_argv("127.0.0.1", 8000)
