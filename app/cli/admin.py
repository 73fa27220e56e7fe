"""`torchyard admin reset-password NAME`: on the server machine, straight on the database
(found the way the server finds it: the one Settings class, TORCHYARD_* variables), so a lost
admin password is not a dead end. It works with the server stopped or running (SQLite in WAL
mode lets it write while the server reads; PostgreSQL anyway), and clears the user's failed
logins so they are not locked out by the attempts that made them need it.

Server-side like `up` and `db`: the database imports stay inside the command.
"""

from __future__ import annotations

from typing import Annotated

import typer

from app.cli.client import CliError
from app.cli.common import out
from app.cli.users import NameArg, PasswordStdinOpt, new_password, read_password_line

ADMIN_PANEL = "Server (run on the torchyard host)"

admin_app = typer.Typer(
    name="admin",
    help="Repairs on the server machine, straight on the database.",
    no_args_is_help=True,
)


@admin_app.command("reset-password")
def reset_password(
    name: NameArg,
    password_stdin: PasswordStdinOpt = False,
    enable: Annotated[
        bool, typer.Option("--enable", help="also enable the user if disabled")
    ] = False,
) -> None:
    """Set NAME's password (default: a generated one, printed once) directly in the database."""
    from app.auth import ratelimit
    from app.db import session_scope
    from app.prestart import schema_is_current
    from app.settings import get_settings
    from app.users import service

    password = read_password_line() if password_stdin else new_password()
    problem = service.password_problem(password)
    if problem is not None:
        raise CliError(problem)
    where = get_settings().resolved_database_url.split("@")[-1]
    ok, current, head = schema_is_current()
    if not ok:
        raise CliError(
            f"the database ({where}) is at schema {current!r}, not {head!r}: "
            "run `torchyard db upgrade` (or start the server once) first"
        )
    with session_scope() as session:
        user = service.find_by_name(session, name)
        if user is None:
            names = ", ".join(u.username for u in service.list_users(session)) or "none"
            raise CliError(f"no user named {name!r} in {where} (users: {names})")
        # A generated password was printed: it must be changed at login; one read from
        # stdin is the operator's own choice (often for their own locked-out account).
        service.set_password(session, user=user, password=password, temporary=not password_stdin)
        ratelimit.forget(session, username=name)
        disabled = not user.is_active
        if disabled and enable:
            service.set_disabled(session, user=user, disabled=False)
    out.print(f"password of {name} reset in {where}")
    if not password_stdin:
        out.print(f"new password: {password}  (shown once)")
    if disabled and not enable:
        out.print(f"note: {name} is disabled; add --enable to enable it too")


def register(app: typer.Typer) -> None:
    app.add_typer(admin_app, rich_help_panel=ADMIN_PANEL)
