"""runs.env_build_started_at, env_build_line, training_started_at: environment builds visible

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-30 00:00:00

A run's environment may take minutes to build after the run started (its GPUs leased). These
say when the build began and pip's last line while it works (the "building environment"
phase), and when the job itself started: the run's duration counts from there, the build's
time is shown apart (issue 29). Existing runs had no build phase of their own: their training
started when they did. Downgrade drops the three columns (durations count from started_at
again, as before).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "runs", sa.Column("env_build_started_at", sa.DateTime(timezone=True), nullable=True)
    )
    op.add_column("runs", sa.Column("env_build_line", sa.String(500), nullable=True))
    op.add_column(
        "runs", sa.Column("training_started_at", sa.DateTime(timezone=True), nullable=True)
    )
    op.execute("UPDATE runs SET training_started_at = started_at")


def downgrade() -> None:
    op.drop_column("runs", "training_started_at")
    op.drop_column("runs", "env_build_line")
    op.drop_column("runs", "env_build_started_at")
