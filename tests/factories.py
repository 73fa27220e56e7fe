"""Rows for tests and benches: the one place that builds an experiment + run by hand."""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from app.auth.models import User
from app.db import session_scope
from app.experiments.models import Experiment
from app.runs.models import Run

# A run's limits as its stored config has them when it names none (the settings' defaults).
DEFAULT_LIMITS = {
    "memory_gb": 8.0,
    "cpus": 4.0,
    "disk_gb": 50.0,
    "max_processes": 4096,
    "time_limit_minutes": None,
}


def add_owned_run(session: Session) -> int:
    """A queued run of a new user of its own, in the caller's session."""
    user = User(username=f"u-{secrets.token_hex(6)}", password_hash="-")
    session.add(user)
    session.flush()
    return add_run(session, owner_id=user.id)


def add_run(
    session: Session,
    *,
    owner_id: int,
    config: dict[str, Any] | None = None,
    status: str = "queued",
    experiment_id: int | None = None,
) -> int:
    """A run owned by `owner_id`, of `experiment_id` or of a new experiment; flushes, the
    caller commits."""
    config = config if config is not None else {}
    if experiment_id is None:
        exp = Experiment(name="factory", config=config, owner_id=owner_id)
        session.add(exp)
        session.flush()
        experiment_id = exp.id
    run = Run(
        experiment_id=experiment_id,
        owner_id=owner_id,
        status=status,
        config=config,
        seed=config.get("seed", 0),
    )
    session.add(run)
    session.flush()
    return run.id


def admin_run(
    session: Session,
    config: dict[str, Any] | None = None,
    status: str = "running",
    experiment_id: int | None = None,
) -> int:
    """A run of the suite's admin; flushes, the caller commits (or the `db` fixture rolls it
    back)."""
    owner = session.query(User).filter_by(username="admin").one()
    return add_run(
        session,
        owner_id=owner.id,
        status=status,
        config=config or {"recipe": "tiny_mlp", "params": {}, "seed": 1},
        experiment_id=experiment_id,
    )


def make_run(
    config: dict[str, Any] | None = None,
    status: str = "running",
    experiment_id: int | None = None,
) -> int:
    """A run of the suite's admin in the suite's database, committed."""
    with session_scope() as session:
        return admin_run(session, config, status, experiment_id)


def add_metric_keys(session: Session, *, run_id: int, keys: list[str]) -> None:
    """One point (step 1) for each key, inserted directly: a run with 100,000 keys in a
    second, for the tests of what such a run does to streams and pages."""
    from sqlalchemy import insert, select

    from app.metrics.models import Metric, MetricKey

    session.execute(insert(MetricKey), [{"run_id": run_id, "key": k} for k in keys])
    ids = session.scalars(select(MetricKey.id).where(MetricKey.run_id == run_id)).all()
    session.execute(
        insert(Metric), [{"key_id": i, "step": 1, "value": 0.5, "wall_time": 1.0} for i in ids]
    )


def spooled_points(run_dir: Path) -> int:
    """Every point a run's rank 0 wrote to its spool, all attempts' spools included."""
    count = 0
    for spool in run_dir.glob("metrics*.jsonl"):
        for line in spool.read_text().splitlines():
            record = json.loads(line)
            if record["type"] == "metrics":
                count += len(record["values"])
    return count


def make_experiment_runs(
    configs: list[dict[str, Any]],
    series: dict[str, list[tuple[int, float]]] | None = None,
    *,
    status: str = "succeeded",
    per_run: Any = None,
    name: str = "overlay",
) -> tuple[int, list[int]]:
    """One experiment of the suite's admin with a run per config, its params recorded as the
    runs list shows them, and points inserted directly (ingest_points, the forwarder's path):
    `series` for every run, or `per_run(index)` -> that run's series. For the overlay pages'
    tests and bench."""
    from app.metrics.service import ingest_points
    from app.runs.query.params import record_config

    with session_scope() as session:
        owner = session.query(User).filter_by(username="admin").one()
        exp = Experiment(name=name, config=configs[0], owner_id=owner.id)
        session.add(exp)
        session.flush()
        ids = []
        for config in configs:
            run = Run(
                experiment_id=exp.id,
                owner_id=owner.id,
                status=status,
                config=config,
                seed=config.get("seed", 0),
            )
            session.add(run)
            session.flush()
            record_config(session, run_id=run.id, config=config)
            ids.append(run.id)
        exp_id = exp.id
    for i, run_id in enumerate(ids):
        points = per_run(i) if per_run is not None else series or {}
        rows = [(k, step, value, 1e9 + step) for k, pts in points.items() for step, value in pts]
        if rows:
            with session_scope() as session:
                ingest_points(session, run_id=run_id, points=rows)
    return exp_id, ids
