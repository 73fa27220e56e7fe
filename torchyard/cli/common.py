"""Pieces every client command shares: the `--server`/`--token` options, the two consoles
(results on stdout, progress and errors on stderr, so `$(torchyard ...)` captures only
results), connecting, and picking a run's newest checkpoint."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.console import Console

from torchyard.cli import endpoints as ep
from torchyard.cli.client import Api, CliError
from torchyard.cli.config import ConfigError, config_path, load_config, resolve

CLIENT_PANEL = "Runs (talk to a server over its REST API)"
EXIT_INTERRUPTED = 130

ServerOpt = Annotated[
    str | None,
    typer.Option(
        "--server",
        help="server URL (default: $TORCHYARD_URL, else the one `login` saved, "
        "else http://127.0.0.1:8000)",
        show_default=False,
    ),
]
TokenOpt = Annotated[
    str | None,
    typer.Option(
        "--token",
        help="API token (default: $TORCHYARD_TOKEN, else the one `login` saved for the server)",
        show_default=False,
    ),
]
RunArg = Annotated[int, typer.Argument(metavar="RUN", help="run id", show_default=False)]

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


def connect(server: str | None, token: str | None) -> Api:
    """An Api for the server and token the precedence rules pick (see torchyard.cli.config)."""
    try:
        config = load_config(config_path())
    except ConfigError as e:
        raise CliError(str(e)) from e
    return Api(resolve(server_flag=server, token_flag=token, config=config))


def newest_checkpoint(api: Api, run_id: int) -> dict[str, Any]:
    """The checkpoint with the highest step; among equals the last saved (final.pt after the
    last epoch's). The server lists checkpoints in the order they were recorded."""
    checkpoints = api.json(ep.RUN_CHECKPOINTS(run_id=run_id))
    if not checkpoints:
        raise CliError(no_checkpoints(api, run_id))
    ranked = sorted(enumerate(checkpoints), key=lambda pair: (pair[1]["step"], pair[0]))
    return dict(ranked[-1][1])


def no_checkpoints(api: Api, run_id: int) -> str:
    """ "No checkpoints", with "yet" only while the run may still write one."""
    status = api.json(ep.RUN(run_id=run_id))["status"]
    later = " yet" if status in ("queued", "running") else ""
    return f"run {run_id} has no checkpoints{later}"


def find_checkpoint(api: Api, run_id: int, name: str | None) -> dict[str, Any]:
    """The named checkpoint (a 404 with the names there are, when it is not one), or the
    newest when no name is given."""
    if name is None:
        return newest_checkpoint(api, run_id)
    checkpoints = api.json(ep.RUN_CHECKPOINTS(run_id=run_id))
    for checkpoint in checkpoints:
        if checkpoint["name"] == name:
            return dict(checkpoint)
    names = ", ".join(c["name"] for c in checkpoints) or "none"
    raise CliError(f"run {run_id} has no checkpoint {name!r} (it has: {names})")


def human_size(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"
