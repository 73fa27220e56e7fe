"""code_snapshots: one row per stored snapshot, keyed by the digest of its bytes.

The file list is kept here (paths and sizes) so that the run page and the config check
("is ``script`` in this snapshot?") never open the archive, which may be on the artifact
store. Which runs and experiments use a snapshot is read from their configs
(app.code.service.unreferenced), so the row needs no counter that could drift.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, DateTime, ForeignKey, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from app.orm_base import Base
from app.timeutil import utcnow


class CodeSnapshot(Base):
    __tablename__ = "code_snapshots"

    # "sha256:<64 hex>" of the stored .tar.gz
    digest: Mapped[str] = mapped_column(String(71), primary_key=True)
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    unpacked_bytes: Mapped[int] = mapped_column(BigInteger)
    file_count: Mapped[int] = mapped_column(Integer)
    # [[path, size], ...] of the regular files, in archive order
    files: Mapped[list[Any]] = mapped_column(JSON)
    # The text of its root requirements.txt (read at upload), checked whenever a config names
    # the snapshot; NULL: none, or uploaded before this column (the worker checks it then).
    requirements: Mapped[str | None] = mapped_column(Text, nullable=True)
    uploaded_by: Mapped[int | None] = mapped_column(
        ForeignKey("users.id", ondelete="SET NULL"), nullable=True, index=True
    )
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    # Uploaded again or named by a config: a deletion leaves it alone for a grace period.
    last_used_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
