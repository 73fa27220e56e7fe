"""mlflow_experiment_tags and mlflow_deleted_experiments (issue 41, MLflow's experiment API)

Revision ID: 0031
Revises: 0030
Create Date: 2026-12-14 00:00:00

MLflow's set-experiment-tag / delete-experiment-tag keep an experiment's tags, and its soft
experiments/delete and restore mark an experiment deleted and back (app/mlflow/models.py).
Downgrade drops both tables.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0031"
down_revision: str | None = "0030"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "mlflow_experiment_tags",
        sa.Column(
            "experiment_id",
            sa.Integer(),
            sa.ForeignKey("experiments.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("key", sa.String(length=250), primary_key=True),
        sa.Column("value", sa.Text(), nullable=False),
    )
    op.create_table(
        "mlflow_deleted_experiments",
        sa.Column(
            "experiment_id",
            sa.Integer(),
            sa.ForeignKey("experiments.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("deleted_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("mlflow_deleted_experiments")
    op.drop_table("mlflow_experiment_tags")
