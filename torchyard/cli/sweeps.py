"""`torchyard sweep SPEC [--follow]`: start a hyperparameter sweep from a YAML/JSON file that
holds the POST /api/sweeps body (docs/sweeps.md), and optionally watch it until it ends.

Following polls GET /api/sweeps/{id} (a sweep has no event stream: its news is a trial ending,
every few seconds at most) and draws a bar over the trials (done of planned) with the running,
stopped-early and failed counts and the best value so far. Exit 0 when the sweep finished, 3
when it was cancelled; a failed trial does not fail the sweep (it counts, the sweep goes on).

The rest of what the API offers, as a W&B user looks for it (`wandb sweep config.yaml`,
`wandb sweep --cancel ID`): `sweep ls` (GET /api/sweeps), `sweep show ID [--follow]` (GET
/api/sweeps/{id}: progress, best, trials) and `sweep cancel ID` (POST .../cancel). `sweep` is a
group whose default command is the start, so `torchyard sweep spec.yaml` stays as it was.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from typer.core import TyperGroup

from torchyard.cli import endpoints as ep
from torchyard.cli.client import Api, Unreachable
from torchyard.cli.common import (
    CLIENT_PANEL,
    EXIT_INTERRUPTED,
    ServerOpt,
    TokenOpt,
    connect,
    err,
    out,
)
from torchyard.cli.specs import SpecError, read_document

POLL_SECONDS = 2.0
GIVE_UP_SECONDS = 120.0  # unreachable this long in a row: report it instead of waiting on
ENDED = ("succeeded", "failed", "cancelled", "deleted")
EXIT_CANCELLED = 3


def read_sweep_spec(path: Path) -> dict[str, Any]:
    """The file's mapping, sent as it is: the server names each bad field in its 422."""
    document = read_document(path)
    if not isinstance(document, dict):
        raise SpecError(f"{path} must hold a mapping: the POST /api/sweeps body (docs/sweeps.md)")
    return document


def format_params(params: dict[str, Any]) -> str:
    return ", ".join(f"{k}={_number(v)}" for k, v in params.items())


def _number(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def summary(sweep: dict[str, Any]) -> dict[str, Any]:
    """What the bar shows: trials ended (of planned), running/queued, stopped early, failed."""
    counts: dict[str, int] = sweep.get("counts") or {}
    trials: list[dict[str, Any]] = sweep.get("trials") or []
    return {
        "done": sum(counts.get(s, 0) for s in ENDED),
        "planned": int(sweep.get("planned_runs") or sweep.get("max_runs") or 0),
        "running": counts.get("running", 0) + counts.get("queued", 0),
        "stopped": sum(1 for t in trials if t.get("stopped_early")),
        "failed": counts.get("failed", 0),
    }


def best_line(sweep: dict[str, Any]) -> str:
    best = sweep.get("best")
    metric = sweep.get("metric") or {}
    if not best:
        return "best: none yet"
    return (
        f"best {metric.get('name', '')} {_number(best['value'])} (run {best['run_id']}: "
        f"{format_params(best.get('params') or {})})"
    )


def progress_line(sweep: dict[str, Any]) -> str:
    s = summary(sweep)
    return (
        f"{s['done']}/{s['planned']} done, {s['running']} running, "
        f"{s['stopped']} stopped early, {s['failed']} failed"
    )


def follow_sweep(api: Api, sweep_id: int, *, console: Console) -> int:
    """Poll the sweep until it ends; the bar on a terminal, one line per change elsewhere."""
    live = console.is_terminal
    progress = Progress(
        TextColumn(f"sweep {sweep_id} [bold]{{task.fields[status]}}[/]"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[line]}"),
        console=console,
        disable=not live,
    )
    task = progress.add_task("", total=None, status="", line="")
    shown = ""
    down_since: float | None = None
    with progress:
        while True:
            try:
                sweep = api.json(ep.SWEEP(sweep_id=sweep_id))
                down_since = None
            except Unreachable:
                down_since = down_since or time.monotonic()
                if time.monotonic() - down_since > GIVE_UP_SECONDS:
                    raise
                time.sleep(POLL_SECONDS)
                continue
            s = summary(sweep)
            extra = f"{s['running']} running, {s['stopped']} stopped early, {s['failed']} failed"
            line = f"{extra}  {best_line(sweep)}"
            progress.update(
                task, total=s["planned"], completed=s["done"], status=sweep["status"], line=line
            )
            text = f"sweep {sweep_id} {sweep['status']}: {progress_line(sweep)}; {best_line(sweep)}"
            if not live and text != shown:
                console.print(text, markup=False, highlight=False)
            shown = text
            if sweep["status"] != "running":
                break
            time.sleep(POLL_SECONDS)
    if live:  # elsewhere the last line is already printed
        console.print(shown, markup=False, highlight=False)
    return EXIT_CANCELLED if sweep["status"] == "cancelled" else 0


def start(
    spec_file: Annotated[
        Path,
        typer.Argument(
            metavar="SPEC",
            help="YAML/JSON with the POST /api/sweeps body: experiment_id, method, metric, "
            "parameters, max_runs, ... (docs/sweeps.md)",
            show_default=False,
        ),
    ],
    follow: Annotated[
        bool,
        typer.Option(
            "--follow",
            "-f",
            help="show progress over the trials and the best so far until the sweep ends; "
            "exit 0 finished, 3 cancelled",
        ),
    ] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="print only the id")] = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Start a hyperparameter sweep of an experiment: its trials are ordinary runs."""
    body = read_sweep_spec(spec_file)
    with connect(server, token) as api:
        created = api.json(ep.SWEEP_CREATE(), json=body)
        sweep_id = int(created["id"])
        if quiet:
            out.print(sweep_id)
        else:
            page = api.page_url(ep.SWEEP_PAGE(sweep_id=sweep_id))
            out.print(f"sweep {sweep_id} {created['status']}: {page}")
        if not follow:
            return
        try:
            code = follow_sweep(api, sweep_id, console=err)
        except KeyboardInterrupt:
            err.print(f"stopped following; sweep {sweep_id} goes on")
            raise typer.Exit(EXIT_INTERRUPTED) from None
        raise typer.Exit(code)


class StartByDefault(TyperGroup):
    """`sweep SPEC ...` is `sweep start SPEC ...`: a first word that names no subcommand (nor
    asks for help) is the spec file, as in `wandb sweep config.yaml`."""

    # ctx: typer's own click Context (typer bundles click; its module is private)
    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args = ["start", *args]
        return super().parse_args(ctx, args)


sweep_app = typer.Typer(
    name="sweep",
    cls=StartByDefault,
    help="Hyperparameter sweeps: `sweep SPEC [--follow]` starts one; ls, show, cancel.",
    no_args_is_help=True,
)
SweepArg = Annotated[int, typer.Argument(metavar="SWEEP", help="sweep id", show_default=False)]


def sweeps_table(sweeps: list[dict[str, Any]]) -> Table:
    table = Table(box=None, header_style="bold")
    for column in ("id", "experiment", "status", "method", "progress", "best"):
        table.add_column(column, justify="right" if column == "id" else "left")
    for found in sweeps:
        s = summary(found)
        best = found.get("best")
        table.add_row(
            str(found["id"]),
            f"#{found['experiment_id']}",
            found["status"],
            found["method"],
            f"{s['done']}/{s['planned']}",
            f"{_number(best['value'])} (run {best['run_id']})" if best else "",
        )
    return table


def ls(
    experiment: Annotated[
        int | None, typer.Option("--experiment", "-e", min=1, help="only this experiment's")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="the sweeps as JSON (API shape)")] = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """List sweeps, newest first: status, trials done of planned, best value."""
    params = {"experiment_id": experiment} if experiment else None
    with connect(server, token) as api:
        found = api.json(ep.SWEEPS(), params=params)
    if as_json:
        out.print_json(data=found)
    elif not found:
        out.print("no sweeps")
    else:
        out.print(sweeps_table(found))


def trials_table(sweep: dict[str, Any]) -> Table:
    table = Table(box=None, header_style="bold")
    for column in ("trial", "run", "status", "steps", sweep["metric"]["name"], "params"):
        table.add_column(column)
    for trial in sweep["trials"]:
        value = trial.get("value")
        status = "stopped early" if trial.get("stopped_early") else trial["status"]
        table.add_row(
            str(trial["number"]),
            str(trial["run_id"] or ""),
            status,
            str(trial.get("steps") or ""),
            "" if value is None else _number(value),
            format_params(trial.get("params") or {}),
        )
    return table


def show(
    sweep_id: SweepArg,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="then follow it as `sweep SPEC --follow` does")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="the sweep as JSON (API shape)")] = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """A sweep's status, progress, best so far and trials (the stopped-early ones said)."""
    with connect(server, token) as api:
        found = api.json(ep.SWEEP(sweep_id=sweep_id))
        if as_json:
            out.print_json(data=found)
        else:
            out.print(f"sweep {sweep_id} {found['status']}: {progress_line(found)}", markup=False)
            out.print(best_line(found), markup=False)
            if found["trials"]:
                out.print(trials_table(found))
        if follow and found["status"] == "running":
            try:
                code = follow_sweep(api, sweep_id, console=err)
            except KeyboardInterrupt:
                raise typer.Exit(EXIT_INTERRUPTED) from None
            raise typer.Exit(code)


def cancel(sweep_id: SweepArg, server: ServerOpt = None, token: TokenOpt = None) -> None:
    """Cancel a sweep: no new trials, queued ones cancelled, running ones stopped."""
    with connect(server, token) as api:
        found = api.json(ep.SWEEP_CANCEL(sweep_id=sweep_id))
    out.print(f"sweep {sweep_id} {found['status']}: {progress_line(found)}", markup=False)


def register(app: typer.Typer) -> None:
    for command in (start, ls, show, cancel):
        sweep_app.command()(command)
    app.add_typer(sweep_app, rich_help_panel=CLIENT_PANEL)
