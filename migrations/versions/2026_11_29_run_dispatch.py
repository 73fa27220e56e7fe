"""runs.dispatch and runs.task_seen_at: queue reconciliation (issue 27)

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-28 00:00:00

A queued run's broker message can be lost (a broker flush or restart, a killed worker's
unacknowledged message). dispatch numbers the run's current message (each message carries it;
an older one is dropped on delivery) and task_seen_at says when that message last came by a
worker: a queued run not seen for a while is sent again (app.runs.state.dispatch). Downgrade drops
both columns: messages still carrying a dispatch number are then run as before (the task
ignores what it does not know), so nothing is lost but the reconciliation itself.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("runs", sa.Column("dispatch", sa.Integer(), nullable=False, server_default="0"))
    op.add_column("runs", sa.Column("task_seen_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    op.drop_column("runs", "task_seen_at")
    op.drop_column("runs", "dispatch")
