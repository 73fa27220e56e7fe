"""Rows for tests, made through the real services."""

from __future__ import annotations

from app.auth.models import User
from app.db import session_scope
from app.experiments.models import Experiment
from app.runs.models import Run


def make_run(config: dict | None = None, status: str = "running") -> int:
    config = config or {"recipe": "tiny_mlp", "params": {}, "seed": 1}
    with session_scope() as session:
        owner = session.query(User).filter_by(username="admin").one()
        exp = Experiment(name="factory", config=config, owner_id=owner.id)
        session.add(exp)
        session.flush()
        run = Run(
            experiment_id=exp.id,
            owner_id=owner.id,
            status=status,
            config=config,
            seed=config.get("seed", 1),
        )
        session.add(run)
        session.flush()
        return run.id
