"""Client commands about runs: ls, edit (name, tags, notes), logs, download."""

from __future__ import annotations

import json
import sys
import time
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path, PurePosixPath
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn
from rich.table import Table

from torchyard.cli import endpoints as ep
from torchyard.cli.client import Api, CliError
from torchyard.cli.common import (
    CLIENT_PANEL,
    EXIT_INTERRUPTED,
    RunArg,
    ServerOpt,
    TokenOpt,
    connect,
    err,
    find_checkpoint,
    human_size,
    no_checkpoints,
    out,
)
from torchyard.cli.run_files import fetch_to, file_url, list_files, newest_checkpoint_file
from torchyard.cli.watch import FINISHED

LOG_POLL_SECONDS = 0.5
PROGRESS_FROM_BYTES = 1_000_000  # smaller downloads finish before a bar would help
STATUS_STYLE = {
    "queued": "cyan",
    "running": "blue",
    "succeeded": "green",
    "failed": "red",
    "cancelled": "yellow",
}


class Status(StrEnum):
    queued = "queued"
    running = "running"
    succeeded = "succeeded"
    failed = "failed"
    cancelled = "cancelled"


def _parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    parsed = datetime.fromisoformat(value)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)  # the server stores UTC


def _duration(run: dict[str, Any]) -> str:
    """Training's time, from the job's start (the environment's build is `_build`'s)."""
    # A server before issue 29 has no training_started_at: its duration counts from the start.
    started = _parse_time(run.get("training_started_at", run.get("started_at")))
    if started is None:
        return ""
    ended = _parse_time(run.get("finished_at")) or datetime.now(UTC)
    return _clock((ended - started).total_seconds())


def _build(run: dict[str, Any]) -> str:
    """The environment's build time; while it builds, "building"."""
    if run.get("phase") == "building environment":
        return "building"
    seconds = run.get("env_build_seconds")
    return _clock(seconds) if seconds is not None else ""


def _clock(total: float) -> str:
    seconds = int(total)
    hours, rest = divmod(max(seconds, 0), 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


def _gpus(run: dict[str, Any]) -> str:
    """Its GPUs; a run handed to Slurm names its Slurm job (external_id)."""
    job = f" (slurm job {run['external_id']})" if run.get("external_id") else ""
    if run.get("gpu_indices"):
        return str(run["gpu_indices"]) + job
    wanted = ((run.get("config") or {}).get("resources") or {}).get("gpus", 0)
    return (f"{wanted} wanted" if wanted and run["status"] == "queued" else "cpu") + job


def _runs_table(runs: list[dict[str, Any]], experiments: dict[int, dict[str, Any]]) -> Table:
    owners = {e["owner_id"]: e["owner"] for e in experiments.values()}
    table = Table(box=None, header_style="bold")
    columns = ("id", "experiment", "status", "created", "build", "duration", "owner", "gpus")
    for column in columns:
        table.add_column(column, justify="right" if column == "id" else "left")
    for run in runs:
        experiment = experiments.get(run["experiment_id"])
        label = f"{experiment['name']} (#{run['experiment_id']})" if experiment else ""
        created = _parse_time(run["created_at"])
        table.add_row(
            str(run["id"]),
            label or f"#{run['experiment_id']}",
            f"[{STATUS_STYLE.get(run['status'], 'white')}]{run['status']}[/]" + _estimate(run),
            created.astimezone().strftime("%Y-%m-%d %H:%M") if created else "",
            _build(run),
            _duration(run),
            owners.get(run["owner_id"], f"#{run['owner_id']}"),
            _gpus(run),
        )
    return table


def _estimate(run: dict[str, Any]) -> str:
    """A queued run's expected start as a suffix of its status: " ~14:05" (local time) or
    " (no estimate)"; what it rests on: `torchyard ls --json`, estimate_basis."""
    start = _parse_time(run.get("estimated_start"))
    if start is not None:
        return f" ~{start.astimezone().strftime('%H:%M:%S')}"
    return " (no estimate)" if run.get("estimate_basis") else ""


def ls(
    status: Annotated[Status | None, typer.Option(help="only runs in this state")] = None,
    limit: Annotated[int, typer.Option(min=1, help="at most this many")] = 20,
    as_json: Annotated[bool, typer.Option("--json", help="the runs as JSON (API shape)")] = False,
    owner: Annotated[
        str | None, typer.Option(help="'me' or a username (default: everyone's)")
    ] = None,
    tag: Annotated[list[str] | None, typer.Option(help="only runs with this tag")] = None,
    where: Annotated[
        list[str] | None,
        typer.Option(
            "--filter",
            help='the filter language, e.g. "val/acc>0.9 and (lr<=0.01 or tags~best)", '
            "'name in (a, b)'; repeat: all must hold",
        ),
    ] = None,
    sort: Annotated[
        str, typer.Option(help="a field, params.<key> or summary.<key>.<last|min|max>; - desc")
    ] = "-id",
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """List runs on the box, newest first (the team's; --owner me for yours)."""
    query: dict[str, Any] = {"sort": sort, "tag": tag or [], "filter": where or []}
    if owner:
        query["owner"] = owner
    if status:
        query["status"] = status.value
    with connect(server, token) as api:
        runs: list[dict[str, Any]] = []
        cursor = None
        while len(runs) < limit:  # page by page: the API sends at most 1000 at a time
            params = {**query, "limit": min(1000, limit - len(runs))}
            page = api.json(ep.RUNS(), params={**params, "cursor": cursor} if cursor else params)
            runs += page["runs"]
            cursor = page["next"]
            if cursor is None:
                break
        if as_json:
            sys.stdout.write(json.dumps(runs, indent=2) + "\n")
            return
        experiments = {e["id"]: e for e in api.json(ep.EXPERIMENTS())}
    if not runs:
        err.print("no runs" + (f" with status {status}" if status else ""))
        return
    out.print(_runs_table(runs, experiments))


def edit(
    run: RunArg,
    name: Annotated[str | None, typer.Option(help="the run's name ('' clears it)")] = None,
    tag: Annotated[
        list[str] | None, typer.Option(help="a tag (repeat); replaces the run's tags")
    ] = None,
    clear_tags: Annotated[bool, typer.Option("--clear-tags", help="remove every tag")] = False,
    notes: Annotated[str | None, typer.Option(help="notes ('' clears them; - reads stdin)")] = None,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Set a run's name, tags or notes (yours, or any run as an admin)."""
    body: dict[str, Any] = {}
    if name is not None:
        body["name"] = name
    if tag or clear_tags:
        body["tags"] = [] if clear_tags else tag
    if notes is not None:
        body["notes"] = sys.stdin.read() if notes == "-" else notes
    if not body:
        raise CliError("nothing to change: give --name, --tag, --clear-tags or --notes")
    with connect(server, token) as api:
        result = api.json(ep.RUN_EDIT(run_id=run), json=body)
    tags = ", ".join(result["tags"]) or "none"
    out.print(f"run {run}: name {result['name'] or '-'}; tags {tags}")


def _read_logs(api: Api, run: int, params: dict[str, Any]) -> tuple[str, int]:
    response = api.request(ep.RUN_LOGS(run_id=run), params=params)
    return response.text, int(response.headers.get("X-Log-Size", 0))


def logs(
    run: RunArg,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="keep printing new output until the run ends")
    ] = False,
    rank: Annotated[
        int | None, typer.Option(min=0, help="only this (global) DDP rank's lines")
    ] = None,
    node: Annotated[
        int | None, typer.Option(min=0, help="a multi-node run's node (default: node 0)")
    ] = None,
    tail: Annotated[int | None, typer.Option(min=1, help="start with the last N bytes")] = None,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Print a run's output (stdout and stderr of every process) as it was written. A
    multi-node run has one output per node: --node picks it (--rank alone picks the rank's)."""
    base: dict[str, Any] = {"rank": rank} if rank is not None else {}
    if node is not None:
        base["node"] = node
    with connect(server, token) as api:
        text, offset = _read_logs(api, run, {**base, "tail": tail} if tail else base)
        sys.stdout.write(text)
        sys.stdout.flush()
        try:
            while follow:
                # Status first: when the run had finished before this read, the read got all.
                finished = api.json(ep.RUN(run_id=run))["status"] in FINISHED
                text, offset = _read_logs(api, run, {**base, "offset": offset})
                sys.stdout.write(text)
                sys.stdout.flush()
                if finished and not text:
                    break
                if not text:
                    time.sleep(LOG_POLL_SECONDS)
        except KeyboardInterrupt:
            raise typer.Exit(EXIT_INTERRUPTED) from None


def download(
    run: RunArg,
    checkpoint: Annotated[
        str | None, typer.Argument(help="checkpoint name (default: the newest)")
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="file or directory (default: ./<checkpoint name>)"),
    ] = None,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Download a checkpoint (torch.load(f, weights_only=True) reads it). Without a name: the
    newest checkpoint, or for a run that recorded none (a Lightning or Hugging Face script)
    the newest checkpoint-like file it wrote (`*.pt`, `*.pth`, `*.ckpt`)."""
    with connect(server, token) as api:
        if checkpoint is None and not api.json(ep.RUN_CHECKPOINTS(run_id=run)):
            written = newest_checkpoint_file(list_files(api, run))
            if written is None:
                raise CliError(no_checkpoints(api, run) + " nor checkpoint-like files")
            name = PurePosixPath(written["path"]).name
            target = output / name if output is not None and output.is_dir() else output
            target = target or Path(name)
            size = fetch_to(api, file_url(run, written["path"]), target)
            out.print(f"saved {target} ({human_size(size)}, run {run} file {written['path']})")
            return
        found = find_checkpoint(api, run, checkpoint)
        name = found["name"]
        target = output or Path(name)
        if target.is_dir():
            target = target / name
        partial = target.with_name(target.name + ".part")
        try:
            call = ep.RUN_CHECKPOINT(run_id=run, name=name)
            size = _fetch(api, call, partial, found["size_bytes"])
            partial.replace(target)  # a complete file or none: never a truncated checkpoint
        except OSError as e:
            raise CliError(f"cannot write {target}: {e.strerror or e}") from e
        finally:
            partial.unlink(missing_ok=True)
    out.print(f"saved {target} ({human_size(size)}, run {run} checkpoint {name})")


def _fetch(api: Api, path: ep.Call, dest: Path, total: int) -> int:
    """Stream `path` into `dest`, with a progress bar (stderr) for large files. `total` is
    the listed size: Content-Length may be the compressed size (the server gzips)."""
    with api.stream(path) as response, open(dest, "wb") as f:
        progress = Progress(
            "{task.description}",
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            console=err,
            disable=total < PROGRESS_FROM_BYTES,
        )
        written = 0
        with progress:
            task = progress.add_task(dest.name.removesuffix(".part"), total=total)
            for chunk in response.iter_bytes(1 << 20):
                f.write(chunk)
                written += len(chunk)
                progress.update(task, completed=written)
    if written != total:
        raise CliError(f"the download has {written} bytes, the checkpoint {total}")
    return written


def register(app: typer.Typer) -> None:
    for command in (ls, edit, logs, download):
        app.command(rich_help_panel=CLIENT_PANEL)(command)
