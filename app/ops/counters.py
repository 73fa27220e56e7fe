"""Add to and read the database's counters (app/ops/models.py).

`add` is one upsert in the caller's transaction, so a count is exactly as durable as what it
counts (points ingested and their count commit together). SHARDS rows per counter: the
forwarders of different runs update different rows instead of queueing on one row lock.
"""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.ops.models import OpsCounter

POINTS_INGESTED = "points_ingested"
SHARDS = 16


# The driver's own statement: built and compiled per call, Core's upsert was 10% of an
# ingest batch's time (issue 29). The same text on both databases, but for the placeholders.
_UPSERT = (
    "INSERT INTO ops_counters (name, shard, value) VALUES ({0}, {0}, {0}) "
    "ON CONFLICT (name, shard) DO UPDATE SET value = ops_counters.value + excluded.value"
)


def add(session: Session, *, name: str, amount: int, key: int) -> None:
    """Count `amount` more of `name`; `key` (a run id) picks the shard."""
    if amount <= 0:
        return
    conn = session.connection()
    mark = "?" if conn.dialect.paramstyle == "qmark" else "%s"
    conn.exec_driver_sql(_UPSERT.format(mark), (name, key % SHARDS, amount))


def total(session: Session, *, name: str) -> int:
    found = session.scalar(select(func.sum(OpsCounter.value)).where(OpsCounter.name == name))
    return int(found or 0)
