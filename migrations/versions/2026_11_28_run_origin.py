"""runs get origin: "mlflow" for a run a client logs through the MLflow API (no job of
torchyard's runs it), so the reaper leaves it to its client and pages can say where it came
from

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-28 10:00:00

Existing runs keep NULL (torchyard jobs). Downgrade drops the column: external runs then look
like jobs whose worker is gone, and a running one is failed by the next reaper pass.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("runs", sa.Column("origin", sa.String(length=16), nullable=True))


def downgrade() -> None:
    op.drop_column("runs", "origin")
