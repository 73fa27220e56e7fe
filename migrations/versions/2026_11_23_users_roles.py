"""users get a role (admin, member, viewer) instead of is_admin and may hold an invite; tokens
remember their last use

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-23 22:15:00

Existing admins (the bootstrapped `admin`) become role admin, every other user member.
Downgrade: admins get is_admin back; members and viewers become plain users (the old schema
has no read-only users, so a viewer may write again after a downgrade).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

users = sa.table(
    "users",
    sa.column("is_admin", sa.Boolean()),
    sa.column("role", sa.String(16)),
)


def upgrade() -> None:
    # Plain ALTER TABLE, no batch mode: SQLite (>= 3.35) drops a column in place, while a
    # batch would rebuild `users`, which the tables referencing it forbid (foreign_keys=ON).
    op.add_column(
        "users", sa.Column("role", sa.String(16), nullable=False, server_default="member")
    )
    op.execute(users.update().where(users.c.is_admin.is_(True)).values(role="admin"))
    op.drop_column("users", "is_admin")
    op.add_column("users", sa.Column("invite_hash", sa.String(64)))
    op.add_column("users", sa.Column("invite_expires_at", sa.DateTime(timezone=True)))
    op.create_index("uq_users_invite_hash", "users", ["invite_hash"], unique=True)
    op.add_column("api_tokens", sa.Column("last_used_at", sa.DateTime(timezone=True)))


def downgrade() -> None:
    op.drop_column("api_tokens", "last_used_at")
    op.drop_index("uq_users_invite_hash", table_name="users")
    op.drop_column("users", "invite_expires_at")
    op.drop_column("users", "invite_hash")
    op.add_column(
        "users", sa.Column("is_admin", sa.Boolean(), nullable=False, server_default=sa.false())
    )
    op.execute(users.update().where(users.c.role == "admin").values(is_admin=True))
    op.drop_column("users", "role")
