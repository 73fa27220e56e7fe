"""metric_overviews: each series' overview, kept at ingest for the overlays of many runs

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-07 00:00:00

One row per metric key (app/metrics/overview/): the series' ends and its buckets' min and max
points, so a fresh server's overlay of 100 runs reads 200 rows instead of downsampling 2M
points (issue 31). The series stored before are backfilled here, key by key in chunks, with
the builder ingest uses (a series without an overview would still draw, read the live way, but
a finished run's never gets one from ingest). Downgrade drops the table.

Written as 0024 after 0021 (0022 and 0023 are other branches' slots); the chain is joined at
merge.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0024"
down_revision: str | None = "0023"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_CHUNK = 200  # keys built per pass: bounded memory whatever the database holds


def upgrade() -> None:
    op.create_table(
        "metric_overviews",
        sa.Column("key_id", sa.Integer(), nullable=False),
        sa.Column("width", sa.BigInteger(), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(["key_id"], ["metric_keys.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("key_id"),
    )
    from app.metrics.overview.stored import build_overviews

    conn = op.get_bind()
    last = 0
    while True:
        ids = list(
            conn.execute(
                sa.text("SELECT id FROM metric_keys WHERE id > :last ORDER BY id LIMIT :n"),
                {"last": last, "n": _CHUNK},
            ).scalars()
        )
        if not ids:
            break
        build_overviews(conn, key_ids=ids)
        last = ids[-1]


def downgrade() -> None:
    op.drop_table("metric_overviews")
