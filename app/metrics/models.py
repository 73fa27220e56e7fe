"""Metric storage: an integer key id per (run, key), and points unique per (key id, step).

Integer key ids keep the hot index narrow (design: integer keys insert faster than text), and
the (key_id, step) primary key both orders a series for reading and makes re-ingesting the
spool idempotent.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Double,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column

from app.orm_base import Base


class MetricKey(Base):
    """A run's metric key and its summary: the last value (at the highest step), the min and
    the max of the stored points, and that highest step. The summary lives on the key's own
    row (one per run and key already) and is kept up to date by ingest, one UPDATE per key and
    batch (app.metrics.summary.update_summaries), so listing runs never scans points. NULL
    min/max: no value but NaN yet (+/-inf count: a diverging loss's max is inf); NULL
    last_step: no point yet."""

    __tablename__ = "metric_keys"
    __table_args__ = (
        UniqueConstraint("run_id", "key"),
        Index("ix_metric_keys_key_last", "key", "last_value"),
        Index("ix_metric_keys_key_min", "key", "min_value"),
        Index("ix_metric_keys_key_max", "key", "max_value"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    key: Mapped[str] = mapped_column(String(255))
    last_value: Mapped[float | None] = mapped_column(Double)
    min_value: Mapped[float | None] = mapped_column(Double)
    max_value: Mapped[float | None] = mapped_column(Double)
    last_step: Mapped[int | None] = mapped_column(BigInteger)


class Metric(Base):
    """One point. No foreign key on key_id: checking it was ~40% of PostgreSQL's ingest time
    (83k -> 130k points/s without it, bench/ingest.py); whoever deletes metric keys deletes
    their points. On SQLite the table is WITHOUT ROWID, so a read by (key_id, step) is one
    B-tree walk instead of index + table (downsampling 0.30 -> 0.13 s for 500k points)."""

    __tablename__ = "metrics"
    __table_args__ = {"sqlite_with_rowid": False}

    key_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    step: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    # NULL is a NaN: stored, shown as a gap; +/-inf are stored as they are (app/metrics/finite.py).
    value: Mapped[float | None] = mapped_column(Double)
    wall_time: Mapped[float] = mapped_column(Double)


class MetricOverview(Base):
    """A series' overview, kept by ingest (app.metrics.overview) so that an overlay of many
    runs reads one row per series instead of its points: the series' first and last points
    and, per bucket of `width` steps (buckets aligned on multiples of `width`, a power of
    two), its min and max points; at most overview.points.MAX_BUCKETS buckets hold points, so `data`
    is at most ~49 KB. `data` is the points' steps (int64), values (float64, NaN for NULL)
    and wall times (float64), each array after the other, little-endian. Width 1: every
    point of the series is there."""

    __tablename__ = "metric_overviews"

    key_id: Mapped[int] = mapped_column(
        ForeignKey("metric_keys.id", ondelete="CASCADE"), primary_key=True
    )
    width: Mapped[int] = mapped_column(BigInteger)
    data: Mapped[bytes] = mapped_column(LargeBinary)
