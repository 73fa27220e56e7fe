"""`torchyard sweep SPEC [--follow]`: start a hyperparameter sweep from a YAML/JSON file that
holds the POST /api/sweeps body (docs/sweeps.md), and optionally watch it until it ends.

Following polls GET /api/sweeps/{id} (a sweep has no event stream: its news is a trial ending,
every few seconds at most) and draws a bar over the trials (done of planned) with the running,
stopped-early and failed counts and the best value so far. Exit 0 when the sweep finished, 3
when it was cancelled; a failed trial does not fail the sweep (it counts, the sweep goes on).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from app.cli.client import Api, Unreachable
from app.cli.common import CLIENT_PANEL, EXIT_INTERRUPTED, ServerOpt, TokenOpt, connect, err, out
from app.cli.specs import SpecError, read_document

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
                sweep = api.get(f"/api/sweeps/{sweep_id}")
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


def sweep(
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
        created = api.post("/api/sweeps", json=body)
        sweep_id = int(created["id"])
        if quiet:
            out.print(sweep_id)
        else:
            out.print(f"sweep {sweep_id} {created['status']}: {api.server}/sweeps/{sweep_id}")
        if not follow:
            return
        try:
            code = follow_sweep(api, sweep_id, console=err)
        except KeyboardInterrupt:
            err.print(f"stopped following; sweep {sweep_id} goes on")
            raise typer.Exit(EXIT_INTERRUPTED) from None
        raise typer.Exit(code)


def register(app: typer.Typer) -> None:
    app.command(rich_help_panel=CLIENT_PANEL)(sweep)
