"""run_log_chunks.node: each node of a multi-node run ships its own output.log

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-05 00:00:00

A multi-node run has one output.log per host (docs/multi-node.md): node k's worker ships its
file as chunks with node = k, tiled on their own offsets, so the primary key becomes
(run_id, node, offset). Existing chunks are node 0's (every run so far ran on one host).
Downgrade drops node > 0's chunks (the old key has no room for them) and the column.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0022"
down_revision: str | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("run_log_chunks", recreate="auto") as batch:
        batch.add_column(
            sa.Column("node", sa.SmallInteger(), nullable=False, server_default=sa.text("0"))
        )
        batch.drop_constraint("pk_run_log_chunks", type_="primary")
        batch.create_primary_key("pk_run_log_chunks", ["run_id", "node", "offset"])


def downgrade() -> None:
    op.execute("DELETE FROM run_log_chunks WHERE node <> 0")
    with op.batch_alter_table("run_log_chunks", recreate="auto") as batch:
        batch.drop_constraint("pk_run_log_chunks", type_="primary")
        batch.create_primary_key("pk_run_log_chunks", ["run_id", "offset"])
        batch.drop_column("node")
