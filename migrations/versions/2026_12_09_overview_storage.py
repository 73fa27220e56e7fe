"""metric_overviews.data: stored uncompressed on PostgreSQL (STORAGE EXTERNAL)

Revision ID: 0026
Revises: 0025
Create Date: 2026-12-09 00:00:00

Every ingest batch rewrites each touched key's overview (app/metrics/overview/stored.py), up to
1,024 buckets' minima and maxima: ~50 KB of float bytes a key. PostgreSQL's default storage
for bytea (EXTENDED) runs each such value through pglz before TOASTing it, and random floats
hardly compress: with twelve runs flooding, that compression was most of the database's CPU
(31 ms a 4,000-point batch of 20 keys; 9.6 ms uncompressed; issue 27, bench/flood.py).
EXTERNAL keeps the out-of-line storage without the compression. New values only: rows written
before stay compressed until their next rewrite, which the next batch of their key does.
SQLite has no such setting. Downgrade restores EXTENDED.
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0026"
down_revision: str | None = "0025"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _storage(kind: str) -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"ALTER TABLE metric_overviews ALTER COLUMN data SET STORAGE {kind}")


def upgrade() -> None:
    _storage("EXTERNAL")


def downgrade() -> None:
    _storage("EXTENDED")
