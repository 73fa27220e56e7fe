"""run_nodes: each node of a multi-node run's attempt (its barrier, port, heartbeat, end)

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-08 00:00:00

A multi-node run's nodes report ready here before any starts (node 0 with the rendezvous
port it picked), heartbeat while their job trains and record how it ended, so that the run
starts, fails and cancels as one (app.runs.nodes, docs/multi-node.md). Downgrade drops it.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0025"
down_revision: str | None = "0024"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "run_nodes",
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("node", sa.Integer(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("gpu_indices", sa.String(length=255), nullable=False),
        sa.Column("taken_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("ready_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("port", sa.Integer(), nullable=True),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("failed_at", sa.Double(), nullable=True),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("run_id", "node"),
    )


def downgrade() -> None:
    op.drop_table("run_nodes")
