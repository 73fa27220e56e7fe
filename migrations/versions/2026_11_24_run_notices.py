"""runs get notices: what ingestion kept out of a run (spool lines skipped and why, a per-run
limit hit, an error), shown on the run page and in GET /api/runs/{id}

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-24 01:30:00

Downgrade drops the column: the notes are lost, nothing else.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("runs", sa.Column("notices", sa.JSON(), nullable=True))


def downgrade() -> None:
    op.drop_column("runs", "notices")
