"""runs get disk_bytes: what the run's folder holds on disk, measured by its worker when the
run ends, so pages show disk use per run, experiment and user without walking folders

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-25 02:00:00

Existing runs keep NULL (shown as the sum of their checkpoints' sizes). Downgrade drops the
column: the measurements are lost, nothing else.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("runs", sa.Column("disk_bytes", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    op.drop_column("runs", "disk_bytes")
