"""`torchyard admin reset-password NAME`: a repair on the server machine, straight on the
database (torchyard/compose/admin.py does it). Server-side like `up` and `db`: declared here,
its work imported inside the command once the server extra is known to be installed.
"""

from __future__ import annotations

from typing import Annotated

import typer

from torchyard.cli.client import CliError
from torchyard.cli.common import out
from torchyard.cli.server import require_server_stack
from torchyard.cli.users import NameArg, PasswordStdinOpt, new_password, read_password_line

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
    require_server_stack()
    from torchyard.compose import admin

    password = read_password_line() if password_stdin else new_password()
    # A generated password was printed: it must be changed at login; one read from stdin is
    # the operator's own choice (often for their own locked-out account).
    try:
        lines = admin.reset_password(name, password, temporary=not password_stdin, enable=enable)
    except admin.ResetRefused as e:
        raise CliError(str(e)) from e
    for line in lines:
        out.print(line)


def register(app: typer.Typer) -> None:
    app.add_typer(admin_app, rich_help_panel=ADMIN_PANEL)
