"""resource_ceilings: what a role or a user may ask of a run's limits

Revision ID: 0027
Revises: 0026
Create Date: 2026-12-10 00:00:00

Members chose their own limits (memory_gb 65536, cpus 4096 on a 2-core box: issue 37). An
admin now sets ceilings per role and per user; a field left null falls back to the role's,
then to the box's default (app/users/ceilings.py). Downgrade drops the table.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0027"
down_revision: str | None = "0026"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "resource_ceilings",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=True),
        sa.Column("user_id", sa.Integer(), nullable=True),
        sa.Column("memory_gb", sa.Float(), nullable=True),
        sa.Column("cpus", sa.Float(), nullable=True),
        sa.Column("disk_gb", sa.Float(), nullable=True),
        sa.Column("max_processes", sa.Integer(), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint(
            "(role IS NULL) <> (user_id IS NULL)", name="ck_resource_ceilings_scope"
        ),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("role"),
        sa.UniqueConstraint("user_id"),
    )


def downgrade() -> None:
    op.drop_table("resource_ceilings")
