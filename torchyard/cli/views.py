"""`torchyard views list [--experiment ID]` and `torchyard views delete ID`: the saved views
of the experiment pages (GET/DELETE /api/views), yours and the shared ones. A view is saved
on the experiment page (it is that page's state); the CLI lists them with the URL to open or
pass on, and deletes yours."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.table import Table

from torchyard.cli import endpoints as ep
from torchyard.cli.common import CLIENT_PANEL, ServerOpt, TokenOpt, connect, out

views_app = typer.Typer(
    name="views", help="Saved views of the experiment pages: list, delete.", no_args_is_help=True
)
ViewArg = Annotated[int, typer.Argument(min=1, help="the view's id (torchyard views list)")]


def views_table(views: list[dict[str, Any]], server: str) -> Table:
    table = Table(box=None, header_style="bold")
    for column in ("id", "name", "owner", "experiment", "shared", "default", "url"):
        table.add_column(column)
    for v in views:
        table.add_row(
            str(v["id"]),
            v["name"],
            v["owner"],
            str(v["experiment_id"] or ""),
            "yes" if v["shared"] else "no",
            "yes" if v["is_default"] else "",
            server.rstrip("/") + v["url"],
        )
    return table


def list_views(
    experiment: Annotated[
        int | None, typer.Option("--experiment", "-e", min=1, help="only this experiment's")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="the views as JSON (API shape)")] = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """List your saved views and the shared ones, by name, with the URL that opens each."""
    params = {"experiment_id": experiment} if experiment else None
    with connect(server, token) as api:
        found = api.json(ep.VIEWS(), params=params)
        base = api.server
    if as_json:
        out.print_json(data=found)
    elif not found:
        out.print("no saved views")
    else:
        out.print(views_table(found, base))


def delete_view(view_id: ViewArg, server: ServerOpt = None, token: TokenOpt = None) -> None:
    """Delete one of your saved views (an admin: anyone's)."""
    with connect(server, token) as api:
        api.request(ep.VIEW_DELETE(view_id=view_id))
    out.print(f"view {view_id} deleted")


def register(app: typer.Typer) -> None:
    views_app.command("list")(list_views)
    views_app.command("delete")(delete_view)
    app.add_typer(views_app, rich_help_panel=CLIENT_PANEL)
