"""Add to and read the database's counters (app/ops/models.py).

`add` is one upsert in the caller's transaction, so a count is exactly as durable as what it
counts (points ingested and their count commit together). SHARDS rows per counter: the
forwarders of different runs update different rows instead of queueing on one row lock.
"""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from app.ops.models import OpsCounter

POINTS_INGESTED = "points_ingested"
SHARDS = 16


def add(session: Session, *, name: str, amount: int, key: int) -> None:
    """Count `amount` more of `name`; `key` (a run id) picks the shard."""
    if amount <= 0:
        return
    insert = pg_insert if session.get_bind().dialect.name == "postgresql" else sqlite_insert
    stmt = insert(OpsCounter).values(name=name, shard=key % SHARDS, value=amount)
    stmt = stmt.on_conflict_do_update(
        index_elements=["name", "shard"], set_={"value": OpsCounter.value + stmt.excluded.value}
    )
    session.execute(stmt)


def total(session: Session, *, name: str) -> int:
    found = session.scalar(select(func.sum(OpsCounter.value)).where(OpsCounter.name == name))
    return int(found or 0)
