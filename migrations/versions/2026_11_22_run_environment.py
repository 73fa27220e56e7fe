"""runs carry their reproducibility record and TensorBoard event-file offsets

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-22 01:40:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("environment", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("tb_offsets", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("tb_offsets")
        batch_op.drop_column("environment")
