"""A run whose ingestion hits an error it cannot skip (here the database itself refuses one of
its rows: a real trigger, no mock) keeps its problem to itself: the reaper still hands over
every lost run, that one included, and salvages the others' spools; the error is said on the
run."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta

import pytest
from sqlalchemy import text, update

from app.db import get_engine, session_scope
from app.metrics.service import read_series
from app.runs.models import Run
from app.runs.state.notices import notice_lines
from app.runs.state.reaper import reap_once
from app.settings import get_settings
from app.timeutil import utcnow
from tests.factories import make_run
from worker.liveness import HostJobs

POISON_KEY = "poison/ingest-bug"


@pytest.fixture
def refused_key() -> Iterator[str]:
    """The database refuses to store the metric key POISON_KEY: a trigger, on either database,
    raising an integrity error (what a refused row is)."""
    engine = get_engine()
    if engine.dialect.name == "sqlite":
        create = [
            "CREATE TRIGGER ty_test_refuse_key BEFORE INSERT ON metric_keys "
            f"WHEN NEW.key = '{POISON_KEY}' BEGIN SELECT RAISE(ABORT, 'refused'); END"
        ]
        drop = ["DROP TRIGGER ty_test_refuse_key"]
    else:
        create = [
            "CREATE FUNCTION ty_test_refuse_key() RETURNS trigger AS $$ BEGIN "
            f"IF NEW.key = '{POISON_KEY}' THEN RAISE EXCEPTION 'refused' "
            "USING ERRCODE = 'check_violation'; END IF; "
            "RETURN NEW; END $$ LANGUAGE plpgsql",
            "CREATE TRIGGER ty_test_refuse_key BEFORE INSERT ON metric_keys "
            "FOR EACH ROW EXECUTE FUNCTION ty_test_refuse_key()",
        ]
        drop = [
            "DROP TRIGGER ty_test_refuse_key ON metric_keys",
            "DROP FUNCTION ty_test_refuse_key()",
        ]
    with engine.begin() as conn:
        for statement in create:
            conn.execute(text(statement))
    yield POISON_KEY
    with engine.begin() as conn:
        for statement in drop:
            conn.execute(text(statement))


def lost_run_with_spool(*values: dict[str, float]) -> int:
    run_id = make_run()
    run_dir = get_settings().run_dir(run_id)
    run_dir.mkdir(parents=True, exist_ok=True)
    lines = [
        json.dumps({"type": "metrics", "step": i + 1, "time": 1.0, "values": v})
        for i, v in enumerate(values)
    ]
    (run_dir / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    with session_scope() as session:
        session.execute(
            update(Run)
            .where(Run.id == run_id)
            .values(heartbeat_at=utcnow() - timedelta(hours=1), started_at=utcnow())
        )
    return run_id


def test_the_reaper_hands_over_every_lost_run_when_one_spool_cannot_be_stored(
    refused_key: str,
) -> None:
    broken = lost_run_with_spool({"a": 1.0}, {refused_key: 2.0})
    fine = lost_run_with_spool({"a": 1.0}, {"a": 2.0})
    handed = {h.run_id for h in reap_once(HostJobs())}
    assert {broken, fine} <= handed
    with session_scope() as session:
        for run_id in (broken, fine):
            run = session.get(Run, run_id)
            assert run is not None and run.status == "failed"
            assert run.error is not None and run.error.startswith("worker lost")
        assert read_series(session, run_id=fine) == {"a": {"step": [1, 2], "value": [1.0, 2.0]}}
        said = notice_lines(session.get(Run, broken).notices)  # type: ignore[union-attr]
    assert len(said) == 1 and said[0].startswith("ingestion stopped by an error: salvage:")
