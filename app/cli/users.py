"""`torchyard users add|list|passwd`: accounts over the REST API (an admin's token, except
for changing your own password), so they work from a laptop like the other client commands.

A password is read from stdin's first line with --password-stdin; without it, `add` and an
admin's `passwd` make one up and print it once, to hand over.
"""

from __future__ import annotations

import secrets
import sys
from enum import StrEnum
from typing import Annotated, Any

import typer
from rich.table import Table

from app.cli.client import Api, CliError
from app.cli.common import ServerOpt, TokenOpt, connect, out

USERS_PANEL = "Users (admins; talk to a server over its REST API)"


class RoleChoice(StrEnum):
    admin = "admin"
    member = "member"
    viewer = "viewer"


NameArg = Annotated[str, typer.Argument(metavar="NAME", help="username", show_default=False)]
PasswordStdinOpt = Annotated[
    bool,
    typer.Option(
        "--password-stdin",
        help="read the password from stdin's first line (default: generate one and print it)",
    ),
]

users_app = typer.Typer(
    name="users",
    help="Add users, list them, set passwords (admins; `passwd` of yourself: anyone).",
    no_args_is_help=True,
)


def read_password_line() -> str:
    password = sys.stdin.readline().rstrip("\r\n")
    if not password:
        raise CliError("--password-stdin: stdin's first line is empty")
    return password


def new_password() -> str:
    return secrets.token_urlsafe(12)


def _find_user(api: Api, name: str) -> dict[str, Any]:
    for user in api.get("/api/users"):
        if user["username"] == name:
            return dict(user)
    raise CliError(f"no user named {name!r} (torchyard users list)")


@users_app.command("add")
def add(
    name: NameArg,
    role: Annotated[RoleChoice, typer.Option(help="admin, member or viewer")] = RoleChoice.member,
    password_stdin: PasswordStdinOpt = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Add a user (admins only). Without --password-stdin the server generates the password
    (printed once), and the user must change it at their first login."""
    body = {"username": name, "role": role.value}
    if password_stdin:
        body["password"] = read_password_line()
    with connect(server, token) as api:
        user = api.post("/api/users", json=body)
    out.print(f"added user {user['username']} (id {user['id']}, {user['role']})")
    if not password_stdin:
        out.print(
            f"initial password: {user['password']}  (shown once; to be changed at first login)"
        )


@users_app.command("list")
def list_(server: ServerOpt = None, token: TokenOpt = None) -> None:
    """List the users (admins only)."""
    with connect(server, token) as api:
        users = api.get("/api/users")
    table = Table(box=None, header_style="bold")
    for column in ("ID", "USER", "ROLE", "STATE", "CREATED"):
        table.add_column(column)
    for user in users:
        state = "disabled" if user["disabled"] else "active"
        table.add_row(
            str(user["id"]), user["username"], user["role"], state, user["created_at"][:16]
        )
    out.print(table)


@users_app.command("passwd")
def passwd(
    name: NameArg,
    password_stdin: PasswordStdinOpt = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Set NAME's password. Your own: asks for the current one (with --password-stdin: the
    current on the first line, the new one on the second). Someone else's: admins only."""
    with connect(server, token) as api:
        me = api.get("/api/users/me")
        if name == me["username"]:
            _change_own(api, password_stdin)
            out.print(f"password of {name} changed")
            return
        user = _find_user(api, name)
        password = read_password_line() if password_stdin else new_password()
        api.request("PATCH", f"/api/users/{user['id']}", json={"password": password})
    out.print(f"password of {name} set")
    if not password_stdin:
        out.print(f"new password: {password}  (shown once)")


def _change_own(api: Api, password_stdin: bool) -> None:
    if password_stdin:
        current = sys.stdin.readline().rstrip("\r\n")
        new = read_password_line()
    else:
        current = typer.prompt("current password", hide_input=True)
        new = typer.prompt("new password", hide_input=True, confirmation_prompt=True)
    body = {"current_password": current, "new_password": new}
    api.request("POST", "/api/users/me/password", json=body)


def register(app: typer.Typer) -> None:
    app.add_typer(users_app, rich_help_panel=USERS_PANEL)
