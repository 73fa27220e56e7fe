"""`torchyard fleet [--window 7d]`: the Fleet page's table (GET /api/fleet): GPU-hours, mean
GPU utilisation, idle GPU-hours and runs waiting per user; an admin sees everyone, anyone else
their own row. ``--json`` prints the API's answer as it is."""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Annotated

import typer
from rich.table import Table

from torchyard.cli import endpoints as ep
from torchyard.cli.common import CLIENT_PANEL, ServerOpt, TokenOpt, connect, out


class WindowChoice(StrEnum):
    day = "24h"
    week = "7d"
    month = "30d"


def fleet(
    window: Annotated[
        WindowChoice, typer.Option(help="the period up to now: 24h, 7d or 30d")
    ] = WindowChoice.week,
    as_json: Annotated[bool, typer.Option("--json", help="print the API's JSON")] = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """GPU-hours, mean GPU utilisation, idle GPU-hours and runs waiting per user."""
    with connect(server, token) as api:
        found = api.json(ep.FLEET(), params={"window": window.value})
    if as_json:
        out.print_json(json.dumps(found))
        return
    table = Table(box=None, header_style="bold")
    for column in ("USER", "GPU-HOURS", "MEAN UTIL", "IDLE GPU-HOURS", "GPU RUNS", "WAITING"):
        table.add_column(column, justify="left" if column == "USER" else "right")
    for row in found["users"]:
        util = "-" if row["util_mean"] is None else f"{row['util_mean']:.1f}%"
        table.add_row(
            row["username"],
            f"{row['gpu_hours']:.2f}",
            util,
            f"{row['idle_gpu_hours']:.2f}",
            str(row["gpu_runs"]),
            str(row["runs_waiting"]),
        )
    out.print(f"last {found['window']} (idle: below {found['idle_below_percent']:g}% util)")
    out.print(table)


def register(app: typer.Typer) -> None:
    app.command(rich_help_panel=CLIENT_PANEL)(fleet)
