"""Images a job logged with TensorBoard (``add_image``, ``add_figure``): stored in the database
by the worker (so the API serves them whatever host ran the job), listed and served by the API.

Everything about them is hostile, so what is kept has caps (app.settings), and each cap hit is
said once in the run's log by the worker (worker.tensorboard_events):
- only PNG and JPEG, by their magic bytes (what the API serves is what was checked here);
- at most ``tb_image_max_bytes`` per image: a larger one is not kept;
- at most ``tb_images_per_tag`` per tag: past it the older steps are thinned out (every other
  one dropped, the newest always kept), so what is kept spreads over the whole run;
- at most MAX_TAGS tags: images of further tags are not kept;
- at most ``tb_images_max_run_bytes`` in all per run: later images are not kept.
One image per (tag, step): a newer one for the same step replaces it.
"""

from __future__ import annotations

import enum
import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, func, insert, select, tuple_
from sqlalchemy.orm import Session

from app.metrics.ingest import clip_key
from app.runs.models import RunImage

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
JPEG_MAGIC = b"\xff\xd8\xff"
MAX_TAGS = 100
MAX_SIDE = 65535


class ImageLimit(enum.Enum):
    """A cap an image met (see the module docstring)."""

    NOT_PNG_OR_JPEG = "not PNG or JPEG"
    TOO_LARGE = "too large"
    THINNED = "thinned"
    TOO_MANY_TAGS = "too many tags"
    RUN_FULL = "run full"


@dataclass(frozen=True)
class Caps:
    image_bytes: int
    per_tag: int
    run_bytes: int
    tags: int = MAX_TAGS


@dataclass(frozen=True)
class Image:
    tag: str
    step: int
    wall_time: float
    width: int  # as the summary says; a PNG's own header wins
    height: int
    data: bytes


def media_type(data: bytes) -> str | None:
    """image/png or image/jpeg by the data's magic bytes; None for anything else."""
    if data.startswith(PNG_MAGIC):
        return "image/png"
    if data.startswith(JPEG_MAGIC):
        return "image/jpeg"
    return None


def _size(image: Image) -> tuple[int, int]:
    data = image.data
    if data.startswith(PNG_MAGIC) and len(data) >= 24 and data[12:16] == b"IHDR":
        width, height = struct.unpack(">II", data[16:24])
    else:
        width, height = image.width, image.height
    return min(max(int(width), 0), MAX_SIDE), min(max(int(height), 0), MAX_SIDE)


def store_images(
    session: Session, *, run_id: int, images: Sequence[Image], caps: Caps
) -> dict[ImageLimit, str]:
    """Keep what the caps allow of ``images`` (in the caller's transaction); returns each cap
    met with one tag it was met for."""
    hit: dict[ImageLimit, str] = {}
    latest: dict[tuple[str, int], Image] = {}
    for image in images:
        tag = clip_key(image.tag) or "image"
        if media_type(image.data) is None:
            hit.setdefault(ImageLimit.NOT_PNG_OR_JPEG, tag)
        elif len(image.data) > caps.image_bytes:
            hit.setdefault(ImageLimit.TOO_LARGE, tag)
        else:
            latest.pop((tag, image.step), None)  # a newer one for the step: it goes last
            latest[(tag, image.step)] = image
    # A batch holds at most `per_tag` images of a tag: the newest (thinning would drop the
    # others); so no statement below ever names more than per_tag x tags rows.
    by_tag: dict[str, list[tuple[str, int]]] = {}
    for key in sorted(latest, key=lambda k: k[1]):
        by_tag.setdefault(key[0], []).append(key)
    for tag, keys in by_tag.items():
        if len(keys) > caps.per_tag:
            hit.setdefault(ImageLimit.THINNED, tag)
            for key in keys[: -caps.per_tag]:
                del latest[key]
    if not latest:
        return hit
    session.flush()
    of_run = RunImage.run_id == run_id
    pairs = list(latest)
    for i in range(0, len(pairs), 400):  # under every database's limit of bound parameters
        replaced = tuple_(RunImage.tag, RunImage.step).in_(pairs[i : i + 400])
        session.execute(delete(RunImage).where(of_run, replaced))
    total = session.scalar(select(func.coalesce(func.sum(RunImage.size_bytes), 0)).where(of_run))
    tags = set(session.scalars(select(RunImage.tag).where(of_run).distinct()))
    rows: list[dict[str, Any]] = []
    for (tag, step), image in latest.items():
        if tag not in tags and len(tags) >= caps.tags:
            hit.setdefault(ImageLimit.TOO_MANY_TAGS, tag)
            continue
        if int(total or 0) + len(image.data) > caps.run_bytes:
            hit.setdefault(ImageLimit.RUN_FULL, tag)
            continue
        tags.add(tag)
        total = int(total or 0) + len(image.data)
        width, height = _size(image)
        rows.append(
            dict(
                run_id=run_id,
                tag=tag,
                step=step,
                wall_time=image.wall_time if math.isfinite(image.wall_time) else 0.0,
                width=width,
                height=height,
                size_bytes=len(image.data),
                data=image.data,
            )
        )
    if rows:
        session.execute(insert(RunImage), rows)
    for tag in {r["tag"] for r in rows}:
        if _thin(session, run_id=run_id, tag=tag, keep=caps.per_tag):
            hit.setdefault(ImageLimit.THINNED, tag)
    return hit


def _thin(session: Session, *, run_id: int, tag: str, keep: int) -> bool:
    """Drop every other older image of the tag until at most ``keep`` are left, the newest
    always kept; True if any was dropped."""
    ids = list(
        session.scalars(
            select(RunImage.id)
            .where(RunImage.run_id == run_id, RunImage.tag == tag)
            .order_by(RunImage.step)
        )
    )
    kept = ids
    while len(kept) > max(keep, 1):
        kept = (kept[:-1][::2] if keep > 1 else []) + kept[-1:]
    dropped = set(ids) - set(kept)
    if dropped:
        session.execute(delete(RunImage).where(RunImage.id.in_(dropped)))
    return bool(dropped)


def list_images(session: Session, *, run_id: int) -> dict[str, list[dict[str, Any]]]:
    """tag -> [{id, step, wall_time, width, height, size_bytes}], steps ascending."""
    stmt = (
        select(
            RunImage.tag,
            RunImage.id,
            RunImage.step,
            RunImage.wall_time,
            RunImage.width,
            RunImage.height,
            RunImage.size_bytes,
        )
        .where(RunImage.run_id == run_id)
        .order_by(RunImage.tag, RunImage.step)
    )
    fields = ("id", "step", "wall_time", "width", "height", "size_bytes")
    found: dict[str, list[dict[str, Any]]] = {}
    for tag, *rest in session.execute(stmt):
        found.setdefault(tag, []).append(dict(zip(fields, rest, strict=True)))
    return found


def image_data(session: Session, *, run_id: int, image_id: int) -> bytes | None:
    stmt = select(RunImage.data).where(RunImage.run_id == run_id, RunImage.id == image_id)
    data = session.scalar(stmt)
    return bytes(data) if data is not None else None


def drop_first_images(session: Session, *, run_id: int, count: int) -> int:
    """Up to ``count`` of the run's first images (a deleted run's, a short
    transaction's worth at a time: app.runs.deletion); how many went."""
    first = list(
        session.scalars(
            select(RunImage.id).where(RunImage.run_id == run_id).order_by(RunImage.id).limit(count)
        )
    )
    if first:
        session.execute(delete(RunImage).where(RunImage.run_id == run_id, RunImage.id <= first[-1]))
    return len(first)
