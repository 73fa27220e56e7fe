"""`torchyard runs delete RUN --yes` and `torchyard experiments delete EXPERIMENT --yes`:
DELETE over the REST API (app/runs/delete_api.py). Nothing is deleted without --yes: the
command then says what it would delete and exits 2."""

from __future__ import annotations

from typing import Annotated

import typer

from torchyard.cli import endpoints as ep
from torchyard.cli.client import Api, CliError
from torchyard.cli.common import RunArg, ServerOpt, TokenOpt, connect, human_size, out

EXIT_USAGE = 2
YesOpt = Annotated[bool, typer.Option("--yes", "-y", help="really delete (it cannot be undone)")]
ExperimentArg = Annotated[
    int, typer.Argument(metavar="EXPERIMENT", help="experiment id", show_default=False)
]

runs_app = typer.Typer(name="runs", help="Runs: delete.", no_args_is_help=True)
experiments_app = typer.Typer(
    name="experiments", help="Experiments: edit, delete.", no_args_is_help=True
)


def _delete(api: Api, call: ep.Call, what: str) -> None:
    response = api.request(call)
    freed = int(response.headers.get("X-Freed-Bytes", "0"))
    out.print(f"deleted {what}; {human_size(freed)} freed")


def _confirm(yes: bool, what: str, disk_bytes: int) -> None:
    if not yes:
        out.print(
            f"this deletes {what} ({human_size(disk_bytes)} on disk) with its metrics, logs,"
            " files and checkpoints; run again with --yes to do it"
        )
        raise typer.Exit(EXIT_USAGE)


@runs_app.command("delete")
def delete_run(
    run: RunArg, yes: YesOpt = False, server: ServerOpt = None, token: TokenOpt = None
) -> None:
    """Delete an ended run: its points, logs, files and stored checkpoints."""
    with connect(server, token) as api:
        found = api.json(ep.RUN(run_id=run))
        _confirm(yes, f"run {run}", int(found.get("disk_bytes", 0)))
        _delete(api, ep.RUN_DELETE(run_id=run), f"run {run}")


@experiments_app.command("delete")
def delete_experiment(
    experiment: ExperimentArg, yes: YesOpt = False, server: ServerOpt = None, token: TokenOpt = None
) -> None:
    """Delete an experiment and all its runs (every run must have ended)."""
    with connect(server, token) as api:
        found = api.json(ep.EXPERIMENT(experiment_id=experiment))
        if not isinstance(found, dict):
            raise CliError(f"experiment {experiment}: unexpected answer")
        what = f"experiment {experiment} ({found.get('name')!r}, {found.get('run_count', 0)} runs)"
        _confirm(yes, what, int(found.get("disk_bytes", 0)))
        _delete(api, ep.EXPERIMENT_DELETE(experiment_id=experiment), f"experiment {experiment}")


def register(app: typer.Typer, panel: str) -> None:
    app.add_typer(runs_app, rich_help_panel=panel)
    app.add_typer(experiments_app, rich_help_panel=panel)
