"""worker_hosts.pool: the pool each worker host serves (issue 40, pools)

Revision ID: 0028
Revises: 0027
Create Date: 2026-12-11 00:00:00

Every worker serves one pool (TORCHYARD_WORKER_POOL) and records it with its host's heartbeat;
the scheduler places a run only on hosts of the run's `resources.pool`. Hosts of before pools
existed are the 'local' pool's (the server default). Downgrade drops the column.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0028"
down_revision: str | None = "0027"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "worker_hosts",
        sa.Column("pool", sa.String(length=32), nullable=False, server_default="local"),
    )


def downgrade() -> None:
    with op.batch_alter_table("worker_hosts") as batch:
        batch.drop_column("pool")
