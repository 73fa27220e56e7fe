"""What a failed run's ``error`` says: the user's exception, first line first.

A job whose script raised records it in ``errors/rank<N>.json`` (torchyard.job: the message
and the traceback with the entry point's frames left out). The first rank to fail is the
cause (the others then fail on their broken process group), so its record is the error.
Those files are written by the job, someone's code: each is read only when it is a regular
file of modest size, and only string fields are taken. A job that died without a record (a
signal, a crash in C++) is described by the last traceback in its output, or its exit code.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from app.runs.files.job_files import FileRefused, folder_entries, open_job_file, read_job_file
from torchyard.contract import RunPaths, rank_prefix

ERROR_TAIL_LINES = 30
MAX_RECORD_BYTES = 256 * 1024
MAX_ERROR_CHARS = 16_000

_RANK_TRACEBACK = re.compile(r"^(\[rank\d+\]: )+Traceback \(most recent call last\)", re.M)


# Less than this free on the run folder's disk when its job failed: the disk was full, and the
# job's own last words (its traceback, its error record) may not have reached the disk.
DISK_FULL_BYTES = 1024**2


def run_error(run_dir: Path, log_path: Path, code: int | None) -> str:
    full = disk_full(run_dir)
    record = first_failure(RunPaths(run_dir).errors)
    if record is not None:
        where = f"(rank {record['rank']}) " if record["rank"] else ""
        text = f"{record['message']}\n\n{where}{record['traceback']}".rstrip()
    else:
        text = error_tail(log_path) or f"the job exited with code {code}"
    return (f"{full}\n\n{text}" if full else text)[:MAX_ERROR_CHARS]


def disk_full(run_dir: Path) -> str:
    """Said first when the disk of the run's folder is full as its job fails (issue 39): the
    likely cause, which the job's output may not show (it could not be written)."""
    try:
        stat = os.statvfs(run_dir)
    except OSError:
        return ""
    if stat.f_bavail * stat.f_frsize >= DISK_FULL_BYTES:
        return ""
    return "the disk of the run's folder is full (no space left on device)"


def first_failure(errors_dir: Path) -> dict[str, Any] | None:
    """The earliest well-formed record in ``errors_dir``, None when there is none."""
    found: list[dict[str, Any]] = []
    try:
        entries = folder_entries(errors_dir.parent, errors_dir.name)
    except (OSError, FileRefused):
        return None
    for name, _info in entries[:1024]:
        record = _read_record(errors_dir, name)
        if record is not None:
            found.append(record)
    return min(found, key=lambda r: (r["time"], r["rank"])) if found else None


def _read_record(errors_dir: Path, name: str) -> dict[str, Any] | None:
    if not name.endswith(".json"):
        return None
    raw = read_job_file(errors_dir / name, MAX_RECORD_BYTES)
    if raw is None:
        return None
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    message, traceback = data.get("message"), data.get("traceback")
    rank, when = data.get("rank"), data.get("time")
    if not isinstance(message, str) or not isinstance(traceback, str):
        return None
    if not isinstance(rank, int) or isinstance(rank, bool) or not 0 <= rank < 1 << 20:
        return None
    if not isinstance(when, int | float) or isinstance(when, bool) or when != when:
        return None
    return {"message": message, "traceback": traceback, "rank": rank, "time": float(when)}


def error_tail(log_path: Path) -> str:
    """The last lines of the job's output, from its last traceback when there is one.

    Under torchrun the last traceback is torchrun's own summary ("ChildFailedError"); the
    cause is the last traceback of a rank, so that rank's lines are what the user needs. A
    line may carry the rank's prefix twice (torch's own excepthook adds one when the script
    set up the process group itself): the lines are matched by the prefix, once or more.
    """
    try:
        with open_job_file(log_path) as f:  # a FIFO in its place must not stall the worker
            f.seek(max(0, os.fstat(f.fileno()).st_size - 64_000))
            text = f.read(64_000).decode("utf-8", "replace")
    except (FileNotFoundError, FileRefused):
        return ""
    ranked = list(_RANK_TRACEBACK.finditer(text))
    if ranked:
        prefix = ranked[-1].group(1)
        rank_lines = text[ranked[-1].start() :].splitlines()
        lines = [_strip_prefix(line, prefix) for line in rank_lines if line.startswith(prefix)]
        rank = int(prefix[len("[rank") : prefix.index("]")])
        lines = [f"{rank_prefix(rank)}{line}" for line in lines]
    else:
        start = text.rfind("Traceback (most recent call last)")
        lines = (text[start:] if start >= 0 else text).rstrip().splitlines()
    return "\n".join(lines[-ERROR_TAIL_LINES:])


def _strip_prefix(line: str, prefix: str) -> str:
    while line.startswith(prefix):
        line = line[len(prefix) :]
    return line
