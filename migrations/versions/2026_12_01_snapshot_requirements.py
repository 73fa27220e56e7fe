"""code_snapshots.requirements (checked when a config names it), an index for the user quota

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-01 00:00:00

A requirements.txt inside a code snapshot with `-e .`, `--extra-index-url` or a `pkg @
file://...` line was refused only when the run started; the same line in the config is a 422
at once. The upload now keeps the file's text (read while every member is checked), and the
config's check reads it with the config's rules (app.experiments.requirements). Rows from
before keep NULL: the worker checks their file at start as before. The index on uploaded_by
serves the per-user quota's sum. Downgrade drops both.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("code_snapshots", sa.Column("requirements", sa.Text(), nullable=True))
    # The per-user quota sums the snapshots a user uploaded (app/users/quota.py).
    op.create_index(
        op.f("ix_code_snapshots_uploaded_by"), "code_snapshots", ["uploaded_by"], unique=False
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_code_snapshots_uploaded_by"), table_name="code_snapshots")
    op.drop_column("code_snapshots", "requirements")
