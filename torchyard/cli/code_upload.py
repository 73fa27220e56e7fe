"""`torchyard submit --code DIR`: pack DIR, upload the snapshot, and say where it came from.

The config then carries `code` (the snapshot's `sha256:` digest, which the script path is
relative to) and `code_origin` (the client's git commit, branch, remote and uncommitted diff:
what the server records as the run's git state, since the server's own workspace has nothing
to do with this code). The git state is read with the function the worker uses for a
workspace script (torchyard.git_state), so a run's record looks the same whether its code came
from the workspace or from a laptop.
"""

from __future__ import annotations

import posixpath
from pathlib import Path
from typing import Any, BinaryIO

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TaskID,
    TransferSpeedColumn,
)

from torchyard.cli import endpoints as ep
from torchyard.cli.client import Api, ApiError, CliError
from torchyard.cli.common import human_size
from torchyard.cli.pack import Packed, PackError, PackLimits, pack
from torchyard.git_state import git_state

PROGRESS_FROM_BYTES = 1024 * 1024  # smaller uploads finish before a bar would help
SHOWN_LEFT_OUT = 10
ORIGIN_KEYS = ("commit", "branch", "remote", "dirty", "diff", "diff_truncated")


def code_origin(directory: Path) -> dict[str, Any] | None:
    """The git state of the checkout holding `directory` as the config's `code_origin`, or
    None outside a git checkout (or before its first commit)."""
    state = git_state(directory)
    if state is None:
        return None
    origin = {key: state.get(key) for key in ORIGIN_KEYS}
    origin["branch"] = origin["branch"] or None  # "" when git could not say
    return origin


class _Counting:
    """The packed file as httpx's multipart reads it, counting the bytes sent. `fileno` is
    kept so httpx learns the length from fstat and sends a Content-Length, not chunks."""

    def __init__(self, file: BinaryIO, progress: Progress, task: TaskID) -> None:
        self.file = file
        self.progress = progress
        self.task = task

    def fileno(self) -> int:
        return self.file.fileno()

    def seek(self, offset: int, whence: int = 0) -> int:
        position = self.file.seek(offset, whence)
        self.progress.update(self.task, completed=position)
        return position

    def tell(self) -> int:
        return self.file.tell()

    def read(self, size: int = -1) -> bytes:
        chunk = self.file.read(size)
        self.progress.advance(self.task, len(chunk))
        return chunk


def upload(api: Api, packed: Packed, console: Console) -> dict[str, Any]:
    """POST the snapshot to /api/code, with a progress bar on a terminal for large ones."""
    show = console.is_terminal and packed.size_bytes >= PROGRESS_FROM_BYTES
    progress = Progress(
        "uploading code",
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        console=console,
        disable=not show,
        transient=True,
    )
    with progress, packed.path.open("rb") as f:
        task = progress.add_task("upload", total=packed.size_bytes)
        body = _Counting(f, progress, task)
        files = {"file": ("code.tar.gz", body, "application/gzip")}
        try:
            answer = api.json(ep.CODE_UPLOAD(), files=files)
        except ApiError as e:
            if e.status == 413:
                raise CliError(
                    f"the server refused the code snapshot ({human_size(packed.size_bytes)} "
                    f"compressed) as too large (413): {e.detail}; add what should stay home "
                    "to .gitignore, or pack a smaller directory with --code"
                ) from e
            raise
    if not isinstance(answer, dict) or not str(answer.get("digest", "")).startswith("sha256:"):
        raise CliError(f"the server answered /api/code without a digest: {answer!r}")
    return answer


def describe(packed: Packed, directory: Path) -> list[str]:
    """What was packed and what was left out, as lines for stderr."""
    source = "as git tracks it" if packed.in_git else "not a git checkout: every file"
    lines = [
        f"packed {directory} ({source}): {len(packed.files)} files, "
        f"{human_size(packed.total_bytes)} -> {human_size(packed.size_bytes)} compressed"
    ]
    if packed.left_out:
        lines.append(f"left out {len(packed.left_out)}:")
        for item in packed.left_out[:SHOWN_LEFT_OUT]:
            lines.append(f"  {item.path}: {item.reason}")
        if len(packed.left_out) > SHOWN_LEFT_OUT:
            lines.append(f"  ... and {len(packed.left_out) - SHOWN_LEFT_OUT} more")
    return lines


def ship(
    api: Api,
    directory: Path,
    *,
    script: str | None,
    console: Console,
    limits: PackLimits | None = None,
) -> dict[str, Any]:
    """Pack, check the script is in the snapshot, upload; the config keys to set."""
    try:
        packed = pack(directory, limits)
    except PackError as e:
        raise CliError(str(e)) from e
    try:
        for line in describe(packed, directory):
            console.print(line, markup=False)
        if script is not None and posixpath.normpath(script) not in packed.files:
            near = [f for f in packed.files if f.endswith("/" + Path(script).name)][:3]
            hint = f" (found: {', '.join(near)})" if near else ""
            raise CliError(
                f"the script {script!r} is not in the snapshot of {directory}{hint}; "
                "`script` is relative to the --code directory"
            )
        answer = upload(api, packed, console)
    finally:
        packed.path.unlink(missing_ok=True)
    digest = str(answer["digest"])
    if digest != packed.digest:
        console.print(f"note: the server's digest {digest} differs from the client's", markup=False)
    console.print(f"code {digest} ({human_size(packed.size_bytes)})", markup=False)
    keys: dict[str, Any] = {"code": digest}
    origin = code_origin(directory)
    if origin is not None:
        keys["code_origin"] = origin
        state = "with uncommitted changes" if origin["dirty"] else "clean"
        console.print(
            f"git: {str(origin['commit'])[:12]} on {origin['branch'] or '(detached)'}, {state}",
            markup=False,
        )
    return keys
