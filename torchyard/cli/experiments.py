"""`torchyard experiments edit EXPERIMENT`: PATCH /api/experiments/{id}. Its name, description
and its own "best" metric (`--best KEY [--mode max|min]`, `--no-best` to clear), the metric
the experiments list's Best column judges it by (app/experiments/best.py). The owner's or an
admin's; another member's try is the server's 403, said in one line."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import typer

from torchyard.cli import endpoints as ep
from torchyard.cli.common import ServerOpt, TokenOpt, connect, out
from torchyard.cli.delete import ExperimentArg, experiments_app

EXIT_USAGE = 2


def edit_experiment(
    experiment: ExperimentArg,
    name: Annotated[str | None, typer.Option(help="a new name")] = None,
    description: Annotated[str | None, typer.Option(help="a new description")] = None,
    best: Annotated[
        str | None,
        typer.Option(
            "--best", metavar="KEY", help="the experiment's own best metric, e.g. val/loss"
        ),
    ] = None,
    mode: Annotated[
        Literal["max", "min"],
        typer.Option(help="with --best: larger (max) or smaller (min) is better"),
    ] = "max",
    no_best: Annotated[
        bool,
        typer.Option(
            "--no-best",
            help="clear the choice: the newest sweep's metric, else checkpoints.metric, applies",
        ),
    ] = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Edit an experiment: its name, description, or its own best metric."""
    if best is not None and no_best:
        raise typer.BadParameter("give --best KEY or --no-best, not both", param_hint="--no-best")
    body: dict[str, Any] = {}
    if name is not None:
        body["name"] = name
    if description is not None:
        body["description"] = description
    if best is not None:
        body["best"] = {"metric": best, "mode": mode}
    if no_best:
        body["best"] = None
    if not body:
        raise typer.BadParameter(
            "nothing to change: give --name, --description, --best KEY or --no-best",
            param_hint="EXPERIMENT",
        )
    with connect(server, token) as api:
        found = api.json(ep.EXPERIMENT_EDIT(experiment_id=experiment), json=body)
    chosen = found.get("best")
    what = f"best {chosen['metric']} ({chosen['mode']})" if chosen else "no best metric of its own"
    out.print(f"experiment {found['id']} ({found['name']!r}): {what}")


def register() -> None:
    experiments_app.command("edit")(edit_experiment)
