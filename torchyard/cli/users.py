"""`torchyard users add|list|passwd|ceilings|share`: accounts over the REST API (an admin's
token, except for changing your own password and reading fair share), so they work from a
laptop like the other client commands.

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

from torchyard.cli import endpoints as ep
from torchyard.cli.client import Api, CliError
from torchyard.cli.common import ServerOpt, TokenOpt, connect, out

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
    for user in api.json(ep.USERS()):
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
        user = api.json(ep.USER_CREATE(), json=body)
    out.print(f"added user {user['username']} (id {user['id']}, {user['role']})")
    if not password_stdin:
        out.print(
            f"initial password: {user['password']}  (shown once; to be changed at first login)"
        )


@users_app.command("list")
def list_(server: ServerOpt = None, token: TokenOpt = None) -> None:
    """List the users (admins only)."""
    with connect(server, token) as api:
        users = api.json(ep.USERS())
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
        me = api.json(ep.USER_ME())
        if name == me["username"]:
            _change_own(api, password_stdin)
            out.print(f"password of {name} changed")
            return
        user = _find_user(api, name)
        password = read_password_line() if password_stdin else new_password()
        api.request(ep.USER_EDIT(user_id=user["id"]), json={"password": password})
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
    api.request(ep.MY_PASSWORD(), json=body)


CEILINGS = ("memory_gb", "cpus", "disk_gb", "max_processes")
LimitOpt = Annotated[float | None, typer.Option(min=0, show_default=False)]


@users_app.command("ceilings")
def ceilings_(
    name: Annotated[
        str | None, typer.Argument(metavar="[NAME]", help="the user to set", show_default=False)
    ] = None,
    role: Annotated[
        RoleChoice | None, typer.Option(help="set this role's ceilings", show_default=False)
    ] = None,
    memory_gb: LimitOpt = None,
    cpus: LimitOpt = None,
    disk_gb: LimitOpt = None,
    max_processes: Annotated[int | None, typer.Option(min=16, show_default=False)] = None,
    clear: Annotated[bool, typer.Option(help="drop every ceiling set there first")] = False,
    all_: Annotated[bool, typer.Option("--all", help="every ceiling set (admins)")] = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Ceilings on a run's limits. Alone: yours, and where each comes from; --all: the box's
    defaults and every role's and user's (admins). With NAME or --role (admins): set the
    options given there, keep the others (--clear: fall back for the rest)."""
    given = {"memory_gb": memory_gb, "cpus": cpus, "disk_gb": disk_gb}
    given["max_processes"] = max_processes
    with connect(server, token) as api:
        if name is None and role is None:
            if all_:
                _print_ceilings(api.json(ep.CEILINGS()))
            else:
                mine = api.json(ep.CEILINGS_ME())
                for field in CEILINGS:
                    source = mine["sources"][field]
                    out.print(f"{field}: {mine['ceilings'][field]:g}  ({source})")
            return
        if name is not None and role is not None:
            raise CliError("give NAME or --role, not both")
        table = api.json(ep.CEILINGS())
        if role is not None:
            url, current = ep.CEILINGS_ROLE(role=role.value), table["roles"].get(role.value)
        else:
            url = ep.CEILINGS_USER(user_id=_find_user(api, str(name))["id"])
            current = table["users"].get(name)
        body = {} if clear or current is None else dict(current)
        body.update({k: v for k, v in given.items() if v is not None})
        saved: dict[str, Any] = api.request(url, json=body).json()
    where = f"role {role.value}" if role is not None else str(name)
    shown = ", ".join(f"{k} {v:g}" for k, v in saved.items() if v is not None) or "none"
    out.print(f"ceilings of {where}: {shown}")


def _print_ceilings(found: dict[str, Any]) -> None:
    table = Table(box=None, header_style="bold")
    for column in ("WHO", *(c.upper() for c in CEILINGS)):
        table.add_column(column)
    rows = [("box (defaults)", found["box"])]
    rows += [(f"role {r}", v) for r, v in found["roles"].items()]
    rows += list(found["users"].items())
    for who, values in rows:
        table.add_row(who, *("-" if values[c] is None else f"{values[c]:g}" for c in CEILINGS))
    out.print(table)


@users_app.command("share")
def share(
    name: Annotated[
        str | None, typer.Argument(metavar="[NAME]", help="the user to set", show_default=False)
    ] = None,
    weight: Annotated[
        float | None, typer.Option(min=0.001, help="their fair-share weight", show_default=False)
    ] = None,
    clear: Annotated[bool, typer.Option(help="back to their role's weight")] = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Fair share (docs/fleet.md). Alone: each user's decayed GPU-hours, weight and due
    share. With NAME and --weight or --clear (admins): set that user's weight."""
    with connect(server, token) as api:
        if name is None:
            found = api.json(ep.FAIR_SHARE())
            table = Table(box=None, header_style="bold")
            for column in ("USER", "GPU-H", "WEIGHT", "EFFECTIVE", "SHARE", "RUNNING", "QUEUED"):
                table.add_column(column)
            for u in found["users"]:
                table.add_row(
                    u["username"],
                    f"{u['gpu_hours']:.2f}",
                    f"{u['weight']:g}" + ("" if u["own_weight"] is not None else " (role)"),
                    f"{u['effective']:.2f}",
                    f"{u['share']:.0%}",
                    str(u["running_gpus"]),
                    str(u["queued_runs"]),
                )
            out.print(f"half-life {found['half_life_hours']:g} h (0: fair share off)")
            out.print(table)
            return
        if (weight is None) == (not clear):
            raise CliError("give --weight W or --clear")
        url = ep.FAIR_SHARE_USER(user_id=_find_user(api, name)["id"])
        saved: dict[str, Any] = api.request(url, json={"weight": weight}).json()
    out.print(f"fair-share weight of {name}: {saved['weight']:g}")


def register(app: typer.Typer) -> None:
    app.add_typer(users_app, rich_help_panel=USERS_PANEL)
