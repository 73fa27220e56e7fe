"""runs get their params as rows (config and reported hparams) and their TensorBoard images

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-24 01:30:00

run_params: one row per (run, dotted key), the JSON value plus a number and a text column to
sort and filter by. Existing runs get their config's params (the config flattened, as
app.runs.query.params does when a run is queued); a job's reported hparams only come with new runs.
run_images: the PNG/JPEG images jobs logged with TensorBoard.
Downgrade: both tables dropped (the params are still in each run's config; images are lost).
"""

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

MAX_VALUE_CHARS = 1000


def _flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """A frozen copy of app.runs.query.params.flatten (this migration must not change with it)."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, Mapping):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _row(run_id: int, key: str, value: Any) -> dict[str, Any]:
    number = text = None
    if isinstance(value, bool):
        number = float(value)
    elif isinstance(value, int | float):
        number = float(value) if math.isfinite(float(value)) else None
        value = value if number is not None else None
    elif value is not None and not isinstance(value, str):
        dumped = json.dumps(value, default=str)
        value = value if len(dumped) <= MAX_VALUE_CHARS else dumped[: MAX_VALUE_CHARS - 1] + "…"
    if isinstance(value, str):
        value = value.replace("\x00", "\ufffd")
        if len(value) > MAX_VALUE_CHARS:
            value = value[: MAX_VALUE_CHARS - 1] + "…"
        text = value[:255]
    return dict(
        run_id=run_id,
        key=key[:255],
        source="config",
        value=value,
        value_num=number,
        value_text=text,
    )


def upgrade() -> None:
    params = op.create_table(
        "run_params",
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("key", sa.String(255), nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("value", sa.JSON(), nullable=True),
        sa.Column("value_num", sa.Double(), nullable=True),
        sa.Column("value_text", sa.String(255), nullable=True),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name=op.f("fk_run_params_run_id_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("run_id", "key", name=op.f("pk_run_params")),
    )
    op.create_index("ix_run_params_key_num", "run_params", ["key", "value_num"])
    op.create_index("ix_run_params_key_text", "run_params", ["key", "value_text"])
    op.create_table(
        "run_images",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("tag", sa.String(255), nullable=False),
        sa.Column("step", sa.BigInteger(), nullable=False),
        sa.Column("wall_time", sa.Double(), nullable=False),
        sa.Column("width", sa.Integer(), nullable=False),
        sa.Column("height", sa.Integer(), nullable=False),
        sa.Column("size_bytes", sa.Integer(), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name=op.f("fk_run_images_run_id_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_run_images")),
        sa.UniqueConstraint("run_id", "tag", "step", name=op.f("uq_run_images_run_id")),
    )
    runs = sa.table("runs", sa.column("id", sa.Integer()), sa.column("config", sa.JSON()))
    conn = op.get_bind()
    batch: list[dict[str, Any]] = []
    for run_id, config in conn.execute(sa.select(runs.c.id, runs.c.config).order_by(runs.c.id)):
        if isinstance(config, Mapping):
            batch.extend(_row(run_id, k, v) for k, v in _flatten(config).items())
        if len(batch) >= 5000:
            conn.execute(params.insert(), batch)
            batch = []
    if batch:
        conn.execute(params.insert(), batch)


def downgrade() -> None:
    op.drop_table("run_images")
    op.drop_index("ix_run_params_key_text", table_name="run_params")
    op.drop_index("ix_run_params_key_num", table_name="run_params")
    op.drop_table("run_params")
