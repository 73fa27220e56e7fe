"""worker hosts carry per-GPU stats (memory, utilization, compute processes)

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-21 23:59:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("worker_hosts", schema=None) as batch_op:
        batch_op.add_column(sa.Column("gpu_stats", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("worker_hosts", schema=None) as batch_op:
        batch_op.drop_column("gpu_stats")
