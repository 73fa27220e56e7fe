"""worker_hosts.executor: how each worker host runs its pool's runs (issue 40, Slurm pools)

Revision ID: 0030
Revises: 0029
Create Date: 2026-12-13 00:00:00

A worker records its executor (TORCHYARD_WORKER_EXECUTOR) with its host's heartbeat. A pool
whose live hosts hand runs to an outside scheduler (`slurm`) is not placed on GPUs by torchyard:
its submit host has none, Slurm schedules. Hosts of before executors existed ran processes
(the server default). Downgrade drops the column.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0030"
down_revision: str | None = "0029"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "worker_hosts",
        sa.Column("executor", sa.String(length=16), nullable=False, server_default="process"),
    )


def downgrade() -> None:
    with op.batch_alter_table("worker_hosts") as batch:
        batch.drop_column("executor")
