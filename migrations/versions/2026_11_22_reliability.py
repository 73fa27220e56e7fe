"""run heartbeats and attempts, shipped log chunks, checkpoint store URIs, login attempts

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-22 02:20:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("attempt", sa.Integer(), nullable=False, server_default="1"))
        batch_op.add_column(
            sa.Column("log_offset", sa.BigInteger(), nullable=False, server_default="0")
        )
    with op.batch_alter_table("checkpoints", schema=None) as batch_op:
        batch_op.add_column(sa.Column("uri", sa.String(length=1000), nullable=True))
    op.create_table(
        "run_log_chunks",
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("offset", sa.BigInteger(), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("run_id", "offset"),
    )
    op.create_table(
        "login_attempts",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("username", sa.String(length=255), nullable=False),
        sa.Column("client", sa.String(length=64), nullable=False),
        sa.Column("succeeded", sa.Boolean(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_login_attempts_username_at", "login_attempts", ["username", "at"])
    op.create_index("ix_login_attempts_client_at", "login_attempts", ["client", "at"])


def downgrade() -> None:
    op.drop_index("ix_login_attempts_client_at", table_name="login_attempts")
    op.drop_index("ix_login_attempts_username_at", table_name="login_attempts")
    op.drop_table("login_attempts")
    op.drop_table("run_log_chunks")
    with op.batch_alter_table("checkpoints", schema=None) as batch_op:
        batch_op.drop_column("uri")
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("log_offset")
        batch_op.drop_column("attempt")
        batch_op.drop_column("heartbeat_at")
