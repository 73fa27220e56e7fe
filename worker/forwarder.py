"""Moves what the job appended to metrics.jsonl into the database, in batches.

The job never talks to the database; this reads complete lines from the last committed offset
(kept on the run row, so a restarted worker resumes instead of replaying), bulk-inserts the
points and records checkpoints, and advances the offset in the same transaction.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.metrics.service import ingest_points
from app.runs.models import Checkpoint, Run

log = logging.getLogger(__name__)

MAX_CHUNK_BYTES = 16 * 1024 * 1024


def read_complete_lines(path: Path, offset: int) -> tuple[list[bytes], int]:
    """Complete lines after `offset`, and the offset after the last of them."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            chunk = f.read(MAX_CHUNK_BYTES)
    except FileNotFoundError:
        return [], offset
    end = chunk.rfind(b"\n")
    if end < 0:
        return [], offset
    return chunk[: end + 1].splitlines(), offset + end + 1


def forward(session: Session, *, run_id: int, metrics_path: Path) -> int:
    """One batch: returns the number of lines moved (0 when the file has nothing new)."""
    run = session.get(Run, run_id)
    if run is None:
        return 0
    lines, new_offset = read_complete_lines(metrics_path, run.metrics_offset)
    if not lines:
        return 0
    points: list[tuple[str, int, float | None, float]] = []
    known = set(session.scalars(select(Checkpoint.name).where(Checkpoint.run_id == run_id)))
    for raw in lines:
        try:
            record = json.loads(raw)
        except ValueError:
            log.warning("run %s: skipping a malformed metrics line: %r", run_id, raw[:200])
            continue
        kind = record.get("type")
        if kind == "metrics":
            step, wall = int(record["step"]), float(record["time"])
            points.extend((k, step, v, wall) for k, v in record["values"].items())
        elif kind == "checkpoint" and record["name"] not in known:
            known.add(record["name"])
            session.add(
                Checkpoint(
                    run_id=run_id,
                    name=record["name"],
                    epoch=int(record["epoch"]),
                    step=int(record["step"]),
                    size_bytes=int(record["size_bytes"]),
                    path=record["path"],
                )
            )
    if points:
        ingest_points(session, run_id=run_id, points=points)
    run.metrics_offset = new_offset
    session.flush()
    return len(lines)
