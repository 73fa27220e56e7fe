"""sweeps and sweep_trials: hyperparameter sweeps whose trials are ordinary runs (issue 19)

Revision ID: 0012
Revises: 0010 (while the code_snapshots migration 0011 is on another branch; re-linked to
0011 at merge)
Create Date: 2026-11-26 05:00:00

runs.sweep_id (0009) stays without a foreign key: adding one on SQLite means a batch copy of
the runs table, whose DROP would cascade to every child table (see 0009); sweep_trials.run_id
is the link the database enforces (SET NULL when a run is deleted). Downgrade drops both
tables: the sweeps are lost, their runs stay (with a dangling sweep_id, as before 0012).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "sweeps",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("experiment_id", sa.Integer(), nullable=False),
        sa.Column("owner_id", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("method", sa.String(16), nullable=False),
        sa.Column("metric", sa.String(255), nullable=False),
        sa.Column("goal", sa.String(16), nullable=False),
        sa.Column("parameters", sa.JSON(), nullable=False),
        sa.Column("max_runs", sa.Integer(), nullable=False),
        sa.Column("max_concurrent", sa.Integer(), nullable=False),
        sa.Column("early_stop", sa.JSON(), nullable=True),
        sa.Column("seed", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("advanced_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["experiment_id"],
            ["experiments.id"],
            name="fk_sweeps_experiment_id_experiments",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(["owner_id"], ["users.id"], name="fk_sweeps_owner_id_users"),
        sa.PrimaryKeyConstraint("id", name="pk_sweeps"),
    )
    op.create_index("ix_sweeps_experiment_id", "sweeps", ["experiment_id"])
    op.create_index("ix_sweeps_owner_id", "sweeps", ["owner_id"])
    op.create_index("ix_sweeps_status", "sweeps", ["status"])
    op.create_table(
        "sweep_trials",
        sa.Column("sweep_id", sa.Integer(), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=True),
        sa.Column("params", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(
            ["sweep_id"], ["sweeps.id"], name="fk_sweep_trials_sweep_id_sweeps", ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name="fk_sweep_trials_run_id_runs", ondelete="SET NULL"
        ),
        sa.PrimaryKeyConstraint("sweep_id", "number", name="pk_sweep_trials"),
        sa.UniqueConstraint("run_id", name="uq_sweep_trials_run_id"),
    )


def downgrade() -> None:
    op.drop_table("sweep_trials")
    op.drop_index("ix_sweeps_status", table_name="sweeps")
    op.drop_index("ix_sweeps_owner_id", table_name="sweeps")
    op.drop_index("ix_sweeps_experiment_id", table_name="sweeps")
    op.drop_table("sweeps")
