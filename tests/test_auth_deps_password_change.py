"""Generated passwords must be changed at first login (users.must_change_password): a user
whose password the server generated, or an admin set for them, gets a token at login, but
the API answers 403 naming the cause to everything except "who am I" and the password change,
and the pages lead to the account page, until they set their own. In-process, on the suite's
database (SQLite, and PostgreSQL in the services pass)."""

from __future__ import annotations

import secrets

from tests.conftest import make_user
from tests.test_users_api import browser_session

NEW = "my own password 42"


def token_for(client, username: str, password: str) -> dict[str, str]:
    r = client.post("/api/auth/token", data={"username": username, "password": password})
    assert r.status_code == 200, r.text
    return {"Authorization": f"Bearer {r.json()['access_token']}"}


def refused(response) -> bool:
    return response.status_code == 403 and "must be changed" in response.json()["detail"]


def test_a_user_added_without_a_password_must_change_the_generated_one(
    client, admin_headers
) -> None:
    name = f"gen-{secrets.token_hex(3)}"
    r = client.post("/api/users", json={"username": name}, headers=admin_headers)
    assert r.status_code == 201, r.text
    generated = r.json()["password"]
    assert len(generated) >= 10 and r.json()["must_change_password"] is True
    headers = token_for(client, name, generated)  # the login itself works
    assert refused(client.get("/api/experiments", headers=headers))
    assert refused(client.post("/api/tokens", json={"name": "x"}, headers=headers))
    assert refused(client.get("/api/runs", headers=headers))
    me = client.get("/api/users/me", headers=headers)
    assert me.status_code == 200 and me.json()["must_change_password"] is True
    change = {"current_password": generated, "new_password": NEW}
    r = client.post("/api/users/me/password", json=change, headers=headers)
    assert r.status_code == 204, r.text
    assert client.get("/api/experiments", headers=headers).status_code == 200
    assert client.get("/api/users/me", headers=headers).json()["must_change_password"] is False


def test_a_chosen_password_is_not_forced_to_change(client, admin_headers) -> None:
    name = f"chosen-{secrets.token_hex(3)}"
    body = {"username": name, "password": "chosen by ada 1"}
    r = client.post("/api/users", json=body, headers=admin_headers)
    assert r.status_code == 201 and r.json()["password"] is None
    headers = token_for(client, name, "chosen by ada 1")
    assert client.get("/api/experiments", headers=headers).status_code == 200


def test_an_admins_reset_must_be_changed_by_the_user(client, admin_headers) -> None:
    username, _password, headers = make_user()
    uid = client.get("/api/users/me", headers=headers).json()["id"]
    r = client.patch(
        f"/api/users/{uid}", json={"password": "reset by admin"}, headers=admin_headers
    )
    assert r.status_code == 200 and r.json()["must_change_password"] is True
    # Their API token stays (not revoked: 403, not 401), and may do nothing but the change.
    assert refused(client.get("/api/experiments", headers=headers))
    change = {"current_password": "reset by admin", "new_password": NEW}
    assert client.post("/api/users/me/password", json=change, headers=headers).status_code == 204
    assert client.get("/api/experiments", headers=headers).status_code == 200


def test_an_admin_setting_their_own_password_is_not_forced_to_change(client) -> None:
    _name, _password, headers = make_user(admin=True)
    uid = client.get("/api/users/me", headers=headers).json()["id"]
    r = client.patch(f"/api/users/{uid}", json={"password": "my own admin pw"}, headers=headers)
    assert r.status_code == 200 and r.json()["must_change_password"] is False


def test_the_pages_lead_to_the_account_page_until_the_password_is_changed(
    app, client, admin_headers
) -> None:
    name = f"page-{secrets.token_hex(3)}"
    generated = client.post("/api/users", json={"username": name}, headers=admin_headers).json()[
        "password"
    ]
    browser = browser_session(app, name, generated)
    for page in ("/", "/gpus", "/compare"):
        r = browser.get(page, follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"] == "/account", page
    account = browser.get("/account")
    assert account.status_code == 200 and 'id="must-change-password"' in account.text
    r = browser.post(
        "/account/password",
        data={
            "current_password": generated,
            "new_password": NEW,
            "csrf_token": browser.cookies["ty_csrf"],
        },
    )
    assert r.status_code == 200 and "Your password was changed." in r.text
    assert 'id="must-change-password"' not in r.text
    assert browser.get("/", follow_redirects=False).status_code == 200
