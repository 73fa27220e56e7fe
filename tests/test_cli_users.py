"""`torchyard users add|list|passwd` against a live server, and `torchyard admin
reset-password` through the real console script on a real database, with the server stopped
and with it running."""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.cli.server import server_argv
from tests.stack import REPO, LiveStack, free_port, start_logged, stop_process, wait_healthy

TORCHYARD = Path(sys.executable).parent / "torchyard"  # the installed console script
PASSWORD_LINE = re.compile(r"(?:initial|new) password: (\S+)")


def run(
    argv: list[str], env: dict[str, str], stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(TORCHYARD), *argv],
        cwd=REPO,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


def printed_password(out: str) -> str:
    found = PASSWORD_LINE.search(out)
    assert found is not None, out
    return found.group(1)


def can_log_in(base_url: str, username: str, password: str) -> bool:
    r = httpx.post(f"{base_url}/api/auth/token", data={"username": username, "password": password})
    assert r.status_code in (200, 401), r.text
    return r.status_code == 200


# --- users add | list | passwd over REST ------------------------------------------------------


@pytest.fixture(scope="module")
def cli_env(live_stack: LiveStack, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """An environment whose CLI config holds the live server's admin token."""
    config = tmp_path_factory.mktemp("cli-users") / "cli.json"
    env = {k: v for k, v in os.environ.items() if k not in ("TORCHYARD_URL", "TORCHYARD_TOKEN")}
    env.update(TORCHYARD_CLI_CONFIG=str(config), COLUMNS="200")
    done = run(
        ["login", "--server", live_stack.base_url, "--username", "admin", "--password-stdin"],
        env,
        stdin=live_stack.admin_password + "\n",
    )
    assert done.returncode == 0, done.stderr
    return env


def test_users_add_list_and_passwd_through_the_cli(live_stack: LiveStack, cli_env) -> None:  # type: ignore[no-untyped-def]
    base = live_stack.base_url
    viewer = f"vi-{secrets.token_hex(3)}"
    added = run(["users", "add", viewer, "--role", "viewer"], cli_env)
    assert added.returncode == 0, added.stderr
    assert f"added user {viewer}" in added.stdout and "viewer" in added.stdout
    generated = printed_password(added.stdout)
    assert can_log_in(base, viewer, generated)

    member = f"me-{secrets.token_hex(3)}"
    added = run(["users", "add", member, "--password-stdin"], cli_env, stdin="first password\n")
    assert added.returncode == 0, added.stderr
    assert "password:" not in added.stdout  # given, so not printed
    assert can_log_in(base, member, "first password")

    listed = run(["users", "list"], cli_env)
    assert listed.returncode == 0, listed.stderr
    rows = {line.split()[1]: line.split()[2:4] for line in listed.stdout.splitlines()[1:]}
    assert rows[viewer] == ["viewer", "active"] and rows[member] == ["member", "active"]
    assert rows["admin"] == ["admin", "active"]

    changed = run(["users", "passwd", member], cli_env)
    assert changed.returncode == 0, changed.stderr
    new = printed_password(changed.stdout)
    assert can_log_in(base, member, new) and not can_log_in(base, member, "first password")

    bad = run(["users", "add", "no spaces allowed"], cli_env)
    assert bad.returncode == 1 and "invalid username" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_a_member_changes_their_own_password_but_cannot_list_users(
    live_stack: LiveStack, cli_env, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    member = f"me-{secrets.token_hex(3)}"
    run(["users", "add", member, "--password-stdin"], cli_env, stdin="member password\n")
    env = dict(cli_env, TORCHYARD_CLI_CONFIG=str(tmp_path / "member.json"))
    login = ["login", "--server", live_stack.base_url, "--username", member, "--password-stdin"]
    assert run(login, env, stdin="member password\n").returncode == 0
    refused = run(["users", "list"], env)
    assert refused.returncode == 1 and "only admins" in refused.stderr
    own = run(
        ["users", "passwd", member, "--password-stdin"],
        env,
        stdin="member password\nmy own new one\n",
    )
    assert own.returncode == 0, own.stderr
    assert can_log_in(live_stack.base_url, member, "my own new one")


# --- admin reset-password, on the server machine ----------------------------------------------


@pytest.fixture
def box(tmp_path: Path) -> dict[str, str]:
    """A torchyard host of its own: a fresh SQLite database at head with its admin."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("TORCHYARD_") or k in ("TORCHYARD_TEST_POSTGRES_URL",)
    }
    env.update(
        TORCHYARD_DATA_DIR=str(tmp_path / "data"),
        TORCHYARD_BROKER_URL="memory://",
        TORCHYARD_ADMIN_PASSWORD="the original one",
        TORCHYARD_REAP_INTERVAL_SECONDS="0",
        PYTHONUNBUFFERED="1",
    )
    prestart = subprocess.run(
        [sys.executable, "-c", "from app.prestart import prestart; print(prestart())"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert prestart.returncode == 0, prestart.stderr
    return env


@pytest.fixture
def serve(tmp_path: Path) -> Iterator:  # type: ignore[type-arg]
    started: list[subprocess.Popen] = []  # type: ignore[type-arg]

    def start(env: dict[str, str]) -> str:
        port = free_port()
        log = tmp_path / f"server-{port}.log"
        started.append(start_logged(server_argv("127.0.0.1", port), env, log))
        base_url = f"http://127.0.0.1:{port}"
        wait_healthy(base_url, started[-1], log)
        return base_url

    yield start
    for proc in started:
        stop_process(proc)


def test_admin_reset_password_with_the_server_stopped(box, serve) -> None:  # type: ignore[no-untyped-def]
    done = run(["admin", "reset-password", "admin"], box)
    assert done.returncode == 0, done.stderr
    new = printed_password(done.stdout)
    assert "torchyard.db" in done.stdout  # says which database it changed
    base_url = serve(box)
    assert can_log_in(base_url, "admin", new)
    assert not can_log_in(base_url, "admin", "the original one")


def test_admin_reset_password_with_the_server_running(box, serve) -> None:  # type: ignore[no-untyped-def]
    base_url = serve(box)
    for _ in range(3):  # a few wrong guesses: the reset clears them
        assert not can_log_in(base_url, "admin", "a wrong guess")
    done = run(
        ["admin", "reset-password", "admin", "--password-stdin"], box, stdin="chosen anew!\n"
    )
    assert done.returncode == 0, done.stderr
    assert "password:" not in done.stdout
    assert can_log_in(base_url, "admin", "chosen anew!")
    assert not can_log_in(base_url, "admin", "the original one")

    missing = run(["admin", "reset-password", "nobody"], box)
    assert missing.returncode == 1 and "no user named 'nobody'" in missing.stderr
    short = run(["admin", "reset-password", "admin", "--password-stdin"], box, stdin="short\n")
    assert short.returncode == 1 and "too short" in short.stderr


def test_the_last_active_admin_can_be_neither_demoted_nor_disabled(box, serve) -> None:  # type: ignore[no-untyped-def]
    base_url = serve(box)
    token = httpx.post(
        f"{base_url}/api/auth/token", data={"username": "admin", "password": "the original one"}
    ).json()["access_token"]
    with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {token}"}) as api:
        me = api.get("/api/users/me").json()
        for change in ({"role": "member"}, {"disabled": True}):
            r = api.patch(f"/api/users/{me['id']}", json=change)
            assert r.status_code == 409 and "last active admin" in r.json()["detail"], r.text
        second = api.post(
            "/api/users",
            json={"username": "grace", "password": "grace's password", "role": "admin"},
        )
        assert second.status_code == 201
        assert api.patch(f"/api/users/{me['id']}", json={"role": "member"}).status_code == 200
