"""Code snapshots in the database: registering an upload, the check a config's ``code`` gets,
and removing what nothing refers to any more. Functions flush; the caller commits (except
``remove_unused``, which runs after a deletion in its own short transactions, as the deletion
itself does).

A snapshot is referred to by the configs of runs and experiments (``"code": "sha256:..."``);
the digest is 64 hex digits, so a text search of the stored JSON finds exactly those rows and
no counter has to be kept in step. A snapshot nothing refers to is removed when a deletion
leaves it so, or when a later deletion finds it unused (an upload never submitted), once it
was last uploaded or named by a config ``code_unused_grace_seconds`` ago: a config saved by a
concurrent transaction touches ``last_used_at`` first, and PostgreSQL re-checks that column
(not the subqueries) when the DELETE waits on its row lock.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import CursorResult, String, cast, delete, exists, func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.code import store
from app.code.models import CodeSnapshot
from app.code.tarcheck import Contents
from app.db import session_scope
from app.experiments.config.model import config_code, run_config
from app.experiments.models import Experiment
from app.runs.models import Run
from app.settings import get_settings
from app.timeutil import utcnow


@dataclass(frozen=True)
class Registered:
    digest: str
    size_bytes: int
    created: bool  # False: the same bytes were stored already


def register(
    session: Session, *, digest: str, size_bytes: int, contents: Contents, user_id: int
) -> Registered:
    """Record a checked archive (already put in place by the caller) once; a second upload of
    the same bytes only marks the snapshot used now."""
    now = utcnow()
    if touch(session, digest):
        return Registered(digest, size_bytes, created=False)
    row = CodeSnapshot(
        digest=digest,
        size_bytes=size_bytes,
        unpacked_bytes=contents.unpacked_bytes,
        file_count=len(contents.files),
        files=[[path, size] for path, size in contents.files],
        requirements=contents.requirements,
        uploaded_by=user_id,
        created_at=now,
        last_used_at=now,
    )
    try:
        with session.begin_nested():
            session.add(row)
    except IntegrityError:  # the same bytes uploaded concurrently: theirs is ours
        return Registered(digest, size_bytes, created=False)
    return Registered(digest, size_bytes, created=True)


def touch(session: Session, digest: str) -> bool:
    """Mark the snapshot used now (a deletion leaves it alone for the grace period); False
    when there is no such snapshot."""
    touched: CursorResult[Any] = session.execute(  # type: ignore[assignment]
        update(CodeSnapshot).where(CodeSnapshot.digest == digest).values(last_used_at=utcnow())
    )
    return bool(touched.rowcount)


@dataclass(frozen=True)
class Used:
    """What a config's check needs of a snapshot: its file paths, its requirements.txt."""

    files: set[str]
    requirements: str | None


def use(session: Session, digest: str) -> Used | None:
    """A config names ``digest``: the snapshot's file paths and requirements.txt (and it is
    marked used now, which keeps a concurrent deletion off it), or None when there is none."""
    if not touch(session, digest):
        return None
    row = session.execute(
        select(CodeSnapshot.files, CodeSnapshot.requirements).where(CodeSnapshot.digest == digest)
    ).one()
    return Used({str(entry[0]) for entry in row.files or []}, row.requirements)


def stored_bytes_by(session: Session, user_id: int) -> int:
    """The stored size of the snapshots the user uploaded first (their quota's code part)."""
    total = session.scalar(
        select(func.coalesce(func.sum(CodeSnapshot.size_bytes), 0)).where(
            CodeSnapshot.uploaded_by == user_id
        )
    )
    return int(total or 0)


def get(session: Session, digest: str) -> CodeSnapshot | None:
    return session.get(CodeSnapshot, digest) if store.is_digest(digest) else None


def run_code(run: Run) -> str | None:
    """The digest a run's config names, when it has code."""
    config = run_config(run.config or {})
    code = config_code(config)
    return code if code is not None and store.is_digest(code) else None


PAGE_FILES = 500


@dataclass(frozen=True)
class CodeView:
    """The run page's "Code" section: the snapshot's files (the first PAGE_FILES) and size."""

    digest: str
    stored: bool
    files: list[tuple[str, int]]
    file_count: int
    size_bytes: int
    unpacked_bytes: int


def code_view(session: Session, run: Run) -> CodeView | None:
    digest = run_code(run)
    if digest is None:
        return None
    row = session.get(CodeSnapshot, digest)
    if row is None:
        return CodeView(digest, False, [], 0, 0, 0)
    files = [(str(p), int(s)) for p, s in (row.files or [])[:PAGE_FILES]]
    return CodeView(digest, True, files, row.file_count, row.size_bytes, row.unpacked_bytes)


def _referenced(digest: Any) -> Any:
    """Whether any run's or experiment's config names ``digest`` (a column or a value)."""
    return exists().where(cast(Run.config, String).contains(digest)) | exists().where(
        cast(Experiment.config, String).contains(digest)
    )


def remove_unused() -> int:
    """Remove every snapshot no run or experiment refers to and not used within the grace
    period; returns the bytes freed (archives in the data dir and the artifact store)."""
    cutoff = utcnow() - timedelta(seconds=get_settings().code_unused_grace_seconds)
    freed = 0
    with session_scope() as session:
        candidates = list(
            session.scalars(
                select(CodeSnapshot.digest).where(
                    CodeSnapshot.last_used_at <= cutoff, ~_referenced(CodeSnapshot.digest)
                )
            )
        )
    for digest in candidates:
        with session_scope() as session:
            gone: CursorResult[Any] = session.execute(  # type: ignore[assignment]
                delete(CodeSnapshot).where(
                    CodeSnapshot.digest == digest,
                    CodeSnapshot.last_used_at <= cutoff,
                    ~_referenced(CodeSnapshot.digest),
                )
            )
        if gone.rowcount:
            freed += store.remove(digest)
    return freed
