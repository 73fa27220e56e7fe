"""experiments.best_metric / best_mode: the experiment's own choice of its "best" metric

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-06 00:00:00

The experiments list's best column judged every experiment by its newest sweep's metric or its
config's checkpoints.metric; an experiment with neither (or the wrong one) had no say. These
columns hold the owner's choice (PATCH /api/experiments/{id}), used before either. NULL: no
choice, as every row from before. Downgrade drops both columns (the choices are lost; the
column falls back to the sweep's / checkpoint metric as before).

Written as 0023 after 0021: 0022 is another branch's slot; the chain is joined at merge.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0023"
down_revision: str | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("experiments") as batch:
        batch.add_column(sa.Column("best_metric", sa.String(length=255), nullable=True))
        batch.add_column(sa.Column("best_mode", sa.String(length=8), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("experiments") as batch:
        batch.drop_column("best_mode")
        batch.drop_column("best_metric")
