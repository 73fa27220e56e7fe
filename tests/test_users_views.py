"""The account pages in-process: "my account" (password, API tokens) and the admins' users
page (add with a one-time password, change a role, disable, reset a password).

Logged in the way a browser is (POST /login sets the session cookie); forms post the CSRF
token as a field, as the pages' own forms do.
"""

from __future__ import annotations

import html as htmllib
import re
import secrets

from sqlalchemy import select

from app.auth.models import ApiToken, User
from app.auth.security import token_digest
from app.db import session_scope
from tests.conftest import make_user
from tests.factories import add_run
from tests.test_pages import login

TINY = {"recipe": "tiny_mlp", "params": {"epochs": 1}, "seed": 3}


def csrf(client) -> str:
    return str(client.cookies["ty_csrf"])


def post_form(client, url: str, **fields: str):
    return client.post(url, data={"csrf_token": csrf(client), **fields}, follow_redirects=False)


def shown_once(html: str, element_id: str) -> str:
    found = re.search(rf'id="{element_id}">([^<]+)<', html)
    assert found is not None, html[:2000]
    return htmllib.unescape(found.group(1))


def user_id(username: str) -> int:
    with session_scope() as session:
        found = session.scalar(select(User.id).where(User.username == username))
    assert found is not None
    return found


def as_admin(client) -> None:
    username, password, _ = make_user(admin=True)
    login(client, username, password)


def test_admin_adds_a_user_and_the_generated_password_is_shown_once(client) -> None:
    as_admin(client)
    name = f"ada-{secrets.token_hex(3)}"
    r = post_form(client, "/admin/users", username=name, role="member", password="")
    assert r.status_code == 200, r.text
    password = shown_once(r.text, "one-time-password-value")
    assert f'data-username="{name}"' in r.text
    assert password not in client.get("/admin/users").text  # never shown again
    client.cookies.clear()
    login(client, name, password)
    assert 'id="current-user"' in client.get("/account").text


def test_adding_a_bad_or_taken_name_says_why(client) -> None:
    as_admin(client)
    r = post_form(client, "/admin/users", username="no spaces", role="member")
    assert r.status_code == 422 and "invalid username" in r.text
    r = post_form(client, "/admin/users", username="admin", role="member")
    assert r.status_code == 409 and "is taken" in r.text


def test_admin_changes_role_disables_and_resets_a_password(client) -> None:
    as_admin(client)
    username, password, headers = make_user()
    uid = user_id(username)
    r = post_form(client, f"/admin/users/{uid}", action="role", role="viewer")
    assert r.status_code == 200 and f"{username} is now viewer" in r.text
    r = post_form(client, f"/admin/users/{uid}", action="disable")
    assert r.status_code == 200
    row = re.search(rf'data-username="{username}".*?</tr>', r.text, re.S)
    assert row is not None and '<td class="state">disabled</td>' in row.group(0)
    assert client.get("/api/users/me", headers=headers).status_code == 401
    post_form(client, f"/admin/users/{uid}", action="enable")
    r = post_form(client, f"/admin/users/{uid}", action="reset-password")
    new = shown_once(r.text, "one-time-password-value")
    client.cookies.clear()
    r = client.post("/login", data={"username": username, "password": password})
    assert r.status_code == 401
    login(client, username, new)
    assert '<span class="badge" id="current-role">viewer</span>' in client.get("/account").text


def test_the_users_page_is_for_admins_only(client) -> None:
    username, password, _ = make_user()
    login(client, username, password)
    r = client.get("/admin/users")
    assert r.status_code == 403 and "Only admins" in r.text
    assert 'id="nav-users"' not in client.get("/account").text
    r = post_form(client, "/admin/users", username=f"x-{secrets.token_hex(3)}", role="admin")
    assert r.status_code == 403


def test_my_account_changes_the_password(client) -> None:
    username, password, _ = make_user()
    login(client, username, password)
    page = client.get("/account").text
    assert f'id="account-username">{username}<' in page and 'id="password-form"' in page
    r = post_form(client, "/account/password", current_password="wrong one!", new_password="x" * 12)
    assert r.status_code == 422 and "current password is not right" in r.text
    r = post_form(
        client, "/account/password", current_password=password, new_password="my new password"
    )
    # post, redirect, get: the address bar holds /account, not the form's POST address
    assert r.status_code == 303 and r.headers["location"] == "/account?done=password"
    assert "Your password was changed." in client.get(r.headers["location"]).text
    assert "Your password was changed." not in client.get("/account?done=junk").text
    client.cookies.clear()
    login(client, username, "my new password")


def test_my_account_creates_lists_and_revokes_named_tokens(client) -> None:
    username, password, _ = make_user()
    login(client, username, password)
    r = post_form(client, "/account/tokens", name="laptop cli", days="7")
    assert r.status_code == 200
    secret = shown_once(r.text, "new-token-secret")
    assert client.get("/api/users/me", headers={"Authorization": f"Bearer {secret}"}).is_success
    page = client.get("/account").text
    assert secret not in page
    with session_scope() as session:
        token = session.scalar(
            select(ApiToken).where(
                ApiToken.user_id == user_id(username), ApiToken.name == "laptop cli"
            )
        )
        assert token is not None
        token_id = token.id
    row = re.search(rf'<tr data-token-id="{token_id}">.*?</tr>', page, re.S)
    assert row is not None
    cells = re.findall(r"<td>(.*?)</td>", row.group(0), re.S)
    assert cells[0] == "laptop cli" and cells[2] != "–"  # created, last used (just now)
    assert cells[2].startswith("<time datetime=")  # app/pages.py `when`
    r = post_form(client, f"/account/tokens/{token_id}/revoke")
    assert r.status_code == 303 and r.headers["location"] == "/account"
    assert (
        client.get("/api/users/me", headers={"Authorization": f"Bearer {secret}"}).status_code
        == 401
    )
    # another user's token is not yours to revoke (nor to know about)
    other_page_token = make_user()[2]["Authorization"].removeprefix("Bearer ")
    with session_scope() as session:
        other_id = session.scalar(
            select(ApiToken.id).where(ApiToken.token_hash == token_digest(other_page_token))
        )
    assert post_form(client, f"/account/tokens/{other_id}/revoke").status_code == 404


def test_the_gpu_page_queue_shows_everyones_or_mine(client) -> None:
    username, password, _ = make_user()
    login(client, username, password)
    other, _, _ = make_user()
    with session_scope() as session:
        theirs = add_run(session, owner_id=user_id(other), config=TINY, status="queued")
        mine = add_run(session, owner_id=user_id(username), config=TINY, status="queued")
    everyone = client.get("/gpus").text
    assert f'data-run-id="{theirs}"' in everyone and f'data-run-id="{mine}"' in everyone
    only_mine = client.get("/gpus?owner=mine").text
    assert f'data-run-id="{theirs}"' not in only_mine and f'data-run-id="{mine}"' in only_mine
    assert f'<table id="gpu-queue" data-owner="{username}">' in only_mine  # gpus.js filters too


def test_an_invite_link_sets_the_first_password_once(app, client) -> None:
    from fastapi.testclient import TestClient

    as_admin(client)
    name = f"inv-{secrets.token_hex(3)}"
    r = post_form(client, "/admin/users", username=name, role="viewer", how="invite")
    assert r.status_code == 200 and "one-time-password" not in r.text
    link = shown_once(r.text, "invite-link-value")
    path = link.removeprefix("http://testserver")
    assert path.startswith("/invite/ty_") and link not in client.get("/admin/users").text

    newcomer = TestClient(app)  # not logged in: the link is the credential
    page = newcomer.get(path)
    assert page.status_code == 200 and f"Welcome, {name}" in page.text
    short = newcomer.post(path, data={"new_password": "short"})
    assert short.status_code == 422 and "too short" in short.text
    done = newcomer.post(path, data={"new_password": "my very own"}, follow_redirects=False)
    assert done.status_code == 303 and done.headers["location"] == "/login"
    login(newcomer, name, "my very own")
    assert '<span class="badge" id="current-role">viewer</span>' in newcomer.get("/account").text
    used = TestClient(app).get(path)
    assert used.status_code == 404 and "not valid any more" in used.text


def test_an_expired_or_unknown_invite_link_is_a_404_page(client) -> None:
    from datetime import timedelta

    from app.auth.models import Role
    from app.timeutil import utcnow
    from app.users import service

    with session_scope() as session:
        user, secret = service.invite_user(
            session, username=f"late-{secrets.token_hex(3)}", role=Role.member
        )
        user.invite_expires_at = utcnow() - timedelta(seconds=1)
    for path in (f"/invite/{secret}", "/invite/ty_nonsense", "/invite/x"):
        r = client.get(path)
        assert r.status_code == 404 and "not valid any more" in r.text, path
        assert client.post(path, data={"new_password": "long enough pw"}).status_code == 404


def test_admin_sets_ceilings_per_role_and_per_user_on_the_users_page(client) -> None:
    as_admin(client)
    page = client.get("/admin/users").text
    assert 'data-scope="box"' in page and 'data-scope="role:member"' in page
    r = post_form(client, "/admin/ceilings", scope="role:member", cpus="1", memory_gb="2")
    assert r.status_code == 200 and "Ceilings of role member saved." in r.text, r.text
    assert 'aria-label="cpus of role member" value="1"' in r.text
    name = f"ceil-{secrets.token_hex(3)}"
    make_user_named = post_form(client, "/admin/users", username=name, role="member")
    assert make_user_named.status_code == 200
    r = post_form(client, "/admin/ceilings", scope=f"user:{user_id(name)}", disk_gb="3.5")
    assert r.status_code == 200 and f"Ceilings of {name} saved." in r.text, r.text
    assert f'data-scope="user:{user_id(name)}"' in r.text
    # The same rules as the API: a value out of bounds names the field, nothing is saved.
    r = post_form(client, "/admin/ceilings", scope="role:viewer", max_processes="2")
    assert r.status_code == 422 and "greater than or equal to 16" in r.text, r.text
    assert 'aria-label="max_processes of role viewer" value=""' in r.text
    # Empty fields fall back: the member role's row goes.
    r = post_form(client, "/admin/ceilings", scope="role:member")
    assert 'aria-label="cpus of role member" value=""' in r.text
    client.cookies.clear()


def test_a_member_cannot_set_ceilings_on_the_page(client) -> None:
    username, password, _ = make_user()
    login(client, username, password)
    r = post_form(client, "/admin/ceilings", scope="role:member", cpus="4096")
    assert r.status_code == 403, r.text
    client.cookies.clear()
