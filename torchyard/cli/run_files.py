"""`torchyard files RUN [PATH]`: what a run wrote under its working directory, and one of it.

The files a script writes (a Lightning `.ckpt`, a `model.pt`, a `checkpoint-500/` folder) are
the run's output as much as the checkpoints the SDK records, so the CLI offers what
`GET /api/runs/{id}/files` offers: the list, and any file or folder (a folder arrives as the
server's .tar.gz). `newest_checkpoint_file` is the fallback `download` uses for runs whose
checkpoints are only files.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Annotated, Any

import typer
from rich.table import Table

from torchyard.cli import endpoints as ep
from torchyard.cli.client import Api, ApiError, CliError
from torchyard.cli.common import CLIENT_PANEL, RunArg, ServerOpt, TokenOpt, connect, human_size, out


def list_files(api: Api, run_id: int) -> list[dict[str, Any]]:
    return list(api.json(ep.RUN_FILES(run_id=run_id)))


def newest_checkpoint_file(files: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The checkpoint-like file (`*.pt`, `*.pth`, `*.ckpt`, inside `checkpoint-*/`: the
    server marks them) written last; among equal times the last listed."""
    marked = [f for f in files if f.get("checkpoint")]
    if not marked:
        return None
    ranked = sorted(enumerate(marked), key=lambda pair: (pair[1]["modified_at"], pair[0]))
    return ranked[-1][1]


def file_url(run_id: int, path: str) -> ep.Call:
    return ep.RUN_FILE(run_id=run_id, path=path)


def fetch_to(api: Api, url: ep.Call, target: Path) -> int:
    """Stream `url` into `target` through a `.part` file: a complete file or none."""
    partial = target.with_name(target.name + ".part")
    written = 0
    try:
        with api.stream(url) as response, open(partial, "wb") as f:
            for chunk in response.iter_bytes(1 << 20):
                f.write(chunk)
                written += len(chunk)
        partial.replace(target)
    except OSError as e:
        raise CliError(f"cannot write {target}: {e.strerror or e}") from e
    finally:
        partial.unlink(missing_ok=True)
    return written


def _is_folder(files: list[dict[str, Any]], path: str) -> bool:
    prefix = path.rstrip("/") + "/"
    return not any(f["path"] == path for f in files) and any(
        f["path"].startswith(prefix) for f in files
    )


def _table(files: list[dict[str, Any]]) -> Table:
    table = Table(box=None, pad_edge=False)
    for column in ("PATH", "SIZE", "MODIFIED", ""):
        table.add_column(column, justify="right" if column == "SIZE" else "left")
    for f in files:
        mark = "checkpoint" if f.get("checkpoint") else ""
        table.add_row(f["path"], human_size(f["size_bytes"]), f["modified_at"][:19], mark)
    return table


def files(
    run: RunArg,
    path: Annotated[
        str | None,
        typer.Argument(help="a file or folder to download (default: list the run's files)"),
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output", "-o", help="file or directory (default: ./<name>, a folder as .tar.gz)"
        ),
    ] = None,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """List the files a run wrote under its working directory, or download one (a folder
    comes as a .tar.gz of its files)."""
    with connect(server, token) as api:
        listing = list_files(api, run)
        if path is None:
            if not listing:
                status = api.json(ep.RUN(run_id=run))["status"]
                later = " yet" if status in ("queued", "running") else ""
                out.print(f"run {run} has no files{later}")
                return
            out.print(_table(listing))
            return
        folder = _is_folder(listing, path)
        name = PurePosixPath(path.rstrip("/")).name + (".tar.gz" if folder else "")
        target = output or Path(name)
        if target.is_dir():
            target = target / name
        try:
            size = fetch_to(api, file_url(run, path.rstrip("/")), target)
        except ApiError as e:
            if e.status == 404:
                known = ", ".join(f["path"] for f in listing[:10]) or "none"
                raise CliError(f"run {run} has no file {path!r} (it has: {known})") from e
            raise
    kind = "folder" if folder else "file"
    out.print(f"saved {target} ({human_size(size)}, run {run} {kind} {path})")


def register(app: typer.Typer) -> None:
    app.command(rich_help_panel=CLIENT_PANEL)(files)
