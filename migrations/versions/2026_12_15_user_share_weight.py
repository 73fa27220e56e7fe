"""users.share_weight (issue 42, fair share between users)

Revision ID: 0032
Revises: 0031
Create Date: 2026-12-15 00:00:00

An admin's fair-share weight for a user (app/gpus/fairshare.py); null falls back to the
role's weight (TORCHYARD_FAIR_SHARE_ROLE_WEIGHTS, default 1). Downgrade drops the column.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0032"
down_revision: str | None = "0031"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("users", sa.Column("share_weight", sa.Float(), nullable=True))


def downgrade() -> None:
    # Plain ALTER TABLE (SQLite >= 3.35 drops a column in place): a batch would rebuild
    # `users`, which the tables referencing it forbid (foreign_keys=ON).
    op.drop_column("users", "share_weight")
