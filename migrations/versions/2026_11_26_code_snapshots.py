"""code_snapshots: users' own code, uploaded once (POST /api/code) and run by any number of
runs (config "code": "sha256:...")

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-26 04:40:00

Downgrade drops the table: runs whose config names a snapshot can then no longer be
downloaded or run again; the archives stay on disk (or in the artifact store) until removed
by hand (<data_dir>/code, <store>/code).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "code_snapshots",
        sa.Column("digest", sa.String(length=71), nullable=False),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("unpacked_bytes", sa.BigInteger(), nullable=False),
        sa.Column("file_count", sa.Integer(), nullable=False),
        sa.Column("files", sa.JSON(), nullable=False),
        sa.Column("uploaded_by", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["uploaded_by"],
            ["users.id"],
            name=op.f("fk_code_snapshots_uploaded_by_users"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("digest", name=op.f("pk_code_snapshots")),
    )


def downgrade() -> None:
    op.drop_table("code_snapshots")
