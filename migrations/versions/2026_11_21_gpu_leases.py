"""gpu leases, worker hosts, run priority and gpu indices

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-21 23:40:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "gpu_leases",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("gpu_index", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("acquired_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name=op.f("fk_gpu_leases_run_id_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_gpu_leases")),
        sa.UniqueConstraint("host", "gpu_index", name="uq_gpu_leases_host_gpu_index"),
    )
    with op.batch_alter_table("gpu_leases", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_gpu_leases_run_id"), ["run_id"], unique=False)

    op.create_table(
        "worker_hosts",
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("gpus", sa.JSON(), nullable=False),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("host", name=op.f("pk_worker_hosts")),
    )
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("priority", sa.Integer(), server_default="0", nullable=False))
        batch_op.add_column(sa.Column("gpu_indices", sa.String(length=255), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("gpu_indices")
        batch_op.drop_column("priority")
    op.drop_table("worker_hosts")
    with op.batch_alter_table("gpu_leases", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_gpu_leases_run_id"))
    op.drop_table("gpu_leases")
