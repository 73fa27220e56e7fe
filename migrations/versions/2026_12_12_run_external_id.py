"""run_external_id: a run attempt's job in an outside scheduler (issue 40)

Revision ID: 0029
Revises: 0028
Create Date: 2026-12-12 00:00:00

A Slurm pool's worker hands each run attempt to Slurm as one batch job: the run records the
job's id (runs.external_id) and, while Slurm holds it pending, Slurm's reason and start
estimate (runs.external_reason, its queue reason). Downgrade drops both columns.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0029"
down_revision: str | None = "0028"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("runs", sa.Column("external_id", sa.String(length=64), nullable=True))
    op.add_column("runs", sa.Column("external_reason", sa.String(length=255), nullable=True))


def downgrade() -> None:
    op.drop_column("runs", "external_reason")
    op.drop_column("runs", "external_id")
