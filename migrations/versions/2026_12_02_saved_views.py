"""saved_views: named, shareable states of an experiment page, one default per experiment

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-02 00:00:00

A filter, sort, column set, grouping and chart setup was lost on reload and could not be
sent to a teammate. Each row is one saved state (app/saved_views); `default_of` is unique so
an experiment has at most one default view. Downgrade drops the table.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "saved_views",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("owner_id", sa.Integer(), nullable=False),
        sa.Column("experiment_id", sa.Integer(), nullable=True),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("shared", sa.Boolean(), nullable=False),
        sa.Column("state", sa.JSON(), nullable=False),
        sa.Column("default_of", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["owner_id"],
            ["users.id"],
            name=op.f("fk_saved_views_owner_id_users"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["experiment_id"],
            ["experiments.id"],
            name=op.f("fk_saved_views_experiment_id_experiments"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["default_of"],
            ["experiments.id"],
            name=op.f("fk_saved_views_default_of_experiments"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_saved_views")),
        sa.UniqueConstraint("default_of", name=op.f("uq_saved_views_default_of")),
    )
    op.create_index(op.f("ix_saved_views_owner_id"), "saved_views", ["owner_id"], unique=False)
    op.create_index(
        op.f("ix_saved_views_experiment_id"), "saved_views", ["experiment_id"], unique=False
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_saved_views_experiment_id"), table_name="saved_views")
    op.drop_index(op.f("ix_saved_views_owner_id"), table_name="saved_views")
    op.drop_table("saved_views")
