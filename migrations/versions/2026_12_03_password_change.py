"""users.must_change_password: a generated password must be changed at first login

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-03 00:00:00

A password the server generated (`torchyard up`'s admin, a user added without one, an admin's
reset) has been seen by someone other than its user: until they set their own, the API
answers 403 to everything but the password change, and the pages lead to the account page.
Existing users keep working (false). Downgrade drops the column.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "users",
        sa.Column("must_change_password", sa.Boolean(), nullable=False, server_default=sa.false()),
    )


def downgrade() -> None:
    # Plain ALTER TABLE (SQLite >= 3.35 drops a column in place): a batch would rebuild
    # `users`, which the tables referencing it forbid (foreign_keys=ON).
    op.drop_column("users", "must_change_password")
