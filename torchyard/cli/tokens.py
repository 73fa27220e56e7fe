"""`torchyard token create [--name N] [--expires 30d]`: a named API token of your own (POST
/api/tokens), for a script, a CI job or MLflow's client (``MLFLOW_TRACKING_TOKEN``).

The token alone goes to stdout, so ``export MLFLOW_TRACKING_TOKEN=$(torchyard token create)``
works; its name, expiry and how to use it go to stderr. The server shows the secret this once
(only its hash is kept); it lives at most the server's ``token_max_ttl_hours`` and never past the
token that creates it.
"""

from __future__ import annotations

import re
from typing import Annotated

import typer

from torchyard.cli import endpoints as ep
from torchyard.cli.client import CliError
from torchyard.cli.common import CLIENT_PANEL, ServerOpt, TokenOpt, connect, err, out

token_app = typer.Typer(
    name="token", help="API tokens for scripts and MLflow's client.", no_args_is_help=True
)
_HOURS = {"m": 1 / 60, "h": 1.0, "d": 24.0, "w": 24.0 * 7}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([mhdw])")


def duration_hours(text: str) -> float:
    """``30d`` -> 720.0: a number and a unit, m(inutes), h(ours), d(ays) or w(eeks)."""
    found = _DURATION.fullmatch(text.strip().lower())
    if not found or float(found[1]) <= 0:
        raise CliError(f"--expires {text!r}: a positive number and a unit, e.g. 12h, 30d, 2w")
    return float(found[1]) * _HOURS[found[2]]


def create(
    name: Annotated[
        str, typer.Option("--name", "-n", help="what the token is for, shown on the account page")
    ] = "cli token",
    expires: Annotated[
        str | None,
        typer.Option(
            "--expires",
            help="its life: 12h, 30d, 2w (default: the server's token_ttl_hours)",
            show_default=False,
        ),
    ] = None,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Create an API token and print it, shown once: MLFLOW_TRACKING_TOKEN, TORCHYARD_TOKEN."""
    body: dict[str, object] = {"name": name}
    if expires is not None:
        body["ttl_hours"] = duration_hours(expires)
    with connect(server, token) as api:
        created = api.json(ep.TOKEN_CREATE(), json=body)
        base = api.server
    expiry = created.get("expires_at") or "never"
    err.print(f"token {created['name']!r} (id {created['id']}), expires {expiry}; shown once:")
    out.print(created["access_token"])
    err.print(
        f"use it: export MLFLOW_TRACKING_URI={base.rstrip('/')} "
        "MLFLOW_TRACKING_TOKEN=<the token>  (revoke it on the account page)"
    )


def register(app: typer.Typer) -> None:
    token_app.command("create")(create)
    app.add_typer(token_app, rich_help_panel=CLIENT_PANEL)
