"""runs get a name, tags, notes and a sweep id; metric keys get their summary (last, min, max,
step), backfilled from the stored points

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-24 02:10:00

metric_keys.last_value/min_value/max_value/last_step: the summary of each series, kept up to
date by ingest from now on (app.metrics.summary), so the runs list sorts and filters by it
without reading points; indexed by (key, value) for sorting. runs.name, runs.notes, run_tags
(a row per tag, indexed by tag for the tag filter) and runs.sweep_id (nullable, no foreign key
until issue 19 adds sweeps).
Downgrade drops all of it: names, tags and notes are lost; summaries are derived data.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_SUMMARY_INDEXES = {
    "ix_metric_keys_key_last": "last_value",
    "ix_metric_keys_key_min": "min_value",
    "ix_metric_keys_key_max": "max_value",
}


def upgrade() -> None:
    # Plain ALTER TABLE (as 0008): a batch copy of a parent table on SQLite with foreign keys on
    # would cascade its DROP to the children.
    for column in ("last_value", "min_value", "max_value"):
        op.add_column("metric_keys", sa.Column(column, sa.Double(), nullable=True))
    op.add_column("metric_keys", sa.Column("last_step", sa.BigInteger(), nullable=True))
    # Backfill from the points: one pass per column, each an index walk of (key_id, step).
    op.execute(
        "UPDATE metric_keys SET "
        "min_value = (SELECT min(m.value) FROM metrics m WHERE m.key_id = metric_keys.id), "
        "max_value = (SELECT max(m.value) FROM metrics m WHERE m.key_id = metric_keys.id), "
        "last_step = (SELECT max(m.step) FROM metrics m WHERE m.key_id = metric_keys.id)"
    )
    op.execute(
        "UPDATE metric_keys SET last_value = (SELECT m.value FROM metrics m "
        "WHERE m.key_id = metric_keys.id AND m.step = metric_keys.last_step) "
        "WHERE last_step IS NOT NULL"
    )
    for name, column in _SUMMARY_INDEXES.items():
        op.create_index(name, "metric_keys", ["key", column])
    op.add_column("runs", sa.Column("name", sa.String(200), nullable=True))
    op.add_column("runs", sa.Column("notes", sa.Text(), nullable=True))
    op.add_column("runs", sa.Column("sweep_id", sa.Integer(), nullable=True))
    op.create_index("ix_runs_sweep_id", "runs", ["sweep_id"])
    op.create_table(
        "run_tags",
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("tag", sa.String(64), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name=op.f("fk_run_tags_run_id_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("run_id", "tag", name=op.f("pk_run_tags")),
    )
    op.create_index("ix_run_tags_tag", "run_tags", ["tag"])


def downgrade() -> None:
    op.drop_index("ix_run_tags_tag", table_name="run_tags")
    op.drop_table("run_tags")
    op.drop_index("ix_runs_sweep_id", table_name="runs")
    for column in ("sweep_id", "notes", "name"):
        op.drop_column("runs", column)
    for name in _SUMMARY_INDEXES:
        op.drop_index(name, table_name="metric_keys")
    for column in ("last_step", "max_value", "min_value", "last_value"):
        op.drop_column("metric_keys", column)
