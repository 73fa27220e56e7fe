"""worker_hosts.address: how the other hosts reach a worker's jobs (multi-node runs)

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-04 00:00:00

Each worker heartbeat writes its TORCHYARD_WORKER_ADDRESS (default: the host's primary
address), the address a multi-node run's nodes meet at on node 0 (docs/multi-node.md). Rows
from before, and workers of before, leave NULL. Downgrade drops the column.

Written as 0021 after 0020 (issue 30's slot); this branch's head was 0018, so it revises that
until the chain is joined at merge.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("worker_hosts", sa.Column("address", sa.String(length=255), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("worker_hosts") as batch:
        batch.drop_column("address")
