"""`torchyard session start --gpus 1 --hours 4 [--code DIR] [--requirements FILE]`:
JupyterLab on leased GPUs (POST /api/sessions), queued like a run, the folder's files (a code
snapshot, uploaded) its work folder; prints the URL to open once it runs (its owner and admins
only). `session extend ID --hours 1` adds time while no run waits for GPUs; `session
stop ID` ends it (its files stay in the run's folder)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from torchyard.cli import endpoints as ep
from torchyard.cli.client import CliError
from torchyard.cli.code_upload import ship
from torchyard.cli.common import CLIENT_PANEL, ServerOpt, TokenOpt, connect, err, out

session_app = typer.Typer(
    name="session", help="Interactive JupyterLab sessions on leased GPUs.", no_args_is_help=True
)


def requirement_lines(path: Path) -> list[str]:
    """A requirements file's lines, without blanks and comments."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise CliError(f"--requirements {path}: {exc.strerror or exc}") from None
    return [
        ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")
    ]


def start(
    gpus: Annotated[int, typer.Option("--gpus", help="GPUs the session holds")] = 1,
    hours: Annotated[float, typer.Option("--hours", help="its time limit in hours")] = 4,
    requirements: Annotated[
        Path | None,
        typer.Option("--requirements", "-r", help="a requirements.txt for its environment"),
    ] = None,
    code: Annotated[
        Path | None,
        typer.Option("--code", help="a folder whose files become the session's work folder"),
    ] = None,
    experiment: Annotated[
        int | None, typer.Option("--experiment", help="the experiment it belongs to")
    ] = None,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Start a session; prints its URL (open it once it runs)."""
    body: dict[str, object] = {"gpus": gpus, "hours": hours}
    if requirements is not None:
        body["requirements"] = requirement_lines(requirements)
    if experiment is not None:
        body["experiment_id"] = experiment
    with connect(server, token) as api:
        if code is not None:
            body["code"] = ship(api, code, script=None, console=err)["code"]
        started = api.json(ep.SESSION_START(), json=body)
    run = started["run"]
    err.print(f"session {run['id']} is {run['status']}; it opens once its GPUs are leased:")
    out.print(started["url"])


def extend(
    run_id: Annotated[int, typer.Argument(help="the session's run id")],
    hours: Annotated[float, typer.Option("--hours", help="hours added")] = 1,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Add time to a running session (refused while a run waits for GPUs)."""
    with connect(server, token) as api:
        extended = api.json(ep.SESSION_EXTEND(run_id=run_id), json={"hours": hours})
    out.print(f"session {run_id} now ends at {extended['ends_at']}")


def stop(
    run_id: Annotated[int, typer.Argument(help="the session's run id")],
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Stop a session; its notebooks and files stay in the run's folder."""
    with connect(server, token) as api:
        api.json(ep.RUN_CANCEL(run_id=run_id))
    out.print(f"session {run_id} is stopping")


def register(app: typer.Typer) -> None:
    session_app.command("start")(start)
    session_app.command("extend")(extend)
    session_app.command("stop")(stop)
    app.add_typer(session_app, rich_help_panel=CLIENT_PANEL)
