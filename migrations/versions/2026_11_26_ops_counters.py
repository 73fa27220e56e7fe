"""ops_counters: monotonic counters kept in the database (points ingested), so GET /metrics
gives the same totals from every API process and counts every worker host's ingestion

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-26 01:00:00

A counter is split into shards (a run's shard is its id modulo a few) so that forwarders of
different runs do not wait on one row's lock under PostgreSQL. Downgrade drops the table: the
totals start over, nothing else is lost.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "ops_counters",
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("shard", sa.Integer(), nullable=False),
        sa.Column("value", sa.BigInteger(), nullable=False, server_default="0"),
        sa.PrimaryKeyConstraint("name", "shard"),
    )


def downgrade() -> None:
    op.drop_table("ops_counters")
