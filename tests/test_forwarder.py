"""worker.forwarder: the spool's lines into the database. Each pump a unit of work of its own,
as the worker's are, on the db_sessions fixture (rolled back after the test)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from sqlalchemy.orm import Session, sessionmaker

from app.metrics.service import count_points, read_series
from app.runs.models import Run
from app.runs.nodes import holds_node_0
from app.runs.service import checkpoints_of
from app.runs.state.notices import notice_lines
from app.settings import get_settings
from tests.factories import admin_run
from worker.forwarder import forward
from worker.liveness import salvage_spool


def line(step: int, **values: object) -> str:
    return json.dumps({"type": "metrics", "step": step, "time": 1000.0 + step, "values": values})


def pump(sessions: sessionmaker[Session], run_id: int, path: Path) -> int:
    with sessions.begin() as session:
        return forward(session, run_id=run_id, metrics_path=path)


def new_run(sessions: sessionmaker[Session]) -> int:
    with sessions.begin() as session:
        return admin_run(session)


def test_forwards_complete_lines_only_and_resumes_from_its_offset(
    tmp_path: Path, db_sessions: sessionmaker[Session]
) -> None:
    run_id = new_run(db_sessions)
    path = tmp_path / "metrics.jsonl"
    assert pump(db_sessions, run_id, path) == 0  # no file yet
    path.write_text(line(1, **{"train/loss": 2.0}) + "\n" + line(2, **{"train/loss": 1.5})[:10])
    assert pump(db_sessions, run_id, path) == 1
    with path.open("a") as f:
        f.write(line(2, **{"train/loss": 1.5})[10:] + "\n" + line(3, **{"train/loss": None}) + "\n")
    assert pump(db_sessions, run_id, path) == 2
    assert pump(db_sessions, run_id, path) == 0
    with db_sessions.begin() as session:
        series = read_series(session, run_id=run_id)
    assert series["train/loss"] == {"step": [1, 2, 3], "value": [2.0, 1.5, None]}


def test_replaying_the_spool_doubles_nothing(
    tmp_path: Path, db_sessions: sessionmaker[Session]
) -> None:
    run_id = new_run(db_sessions)
    path = tmp_path / "metrics.jsonl"
    ckpt = {
        "type": "checkpoint",
        "name": "epoch-0001.pt",
        "path": "checkpoints/epoch-0001.pt",
        "epoch": 1,
        "step": 2,
        "size_bytes": 10,
        "time": 1.0,
    }
    path.write_text("\n".join([line(1, a=1.0, b=2.0), line(2, a=0.5), json.dumps(ckpt)]) + "\n")
    assert pump(db_sessions, run_id, path) == 3
    with db_sessions.begin() as session:
        session.get_one(Run, run_id).metrics_offset = 0  # as if the offset had been lost
    assert pump(db_sessions, run_id, path) == 3
    with db_sessions.begin() as session:
        assert count_points(session, run_id=run_id) == 3
        assert [c.name for c in checkpoints_of(session, run_id=run_id)] == ["epoch-0001.pt"]


def test_a_last_line_without_its_newline_is_not_yet_written(
    tmp_path: Path, db_sessions: sessionmaker[Session]
) -> None:
    """The job's writer ends every line with its newline; a line without one is not finished
    (a write cut short, or still in progress), even when it already parses as JSON."""
    run_id = new_run(db_sessions)
    path = tmp_path / "metrics.jsonl"
    path.write_text(line(1, a=1.0) + "\n" + line(2, a=2.55))
    assert pump(db_sessions, run_id, path) == 1
    assert pump(db_sessions, run_id, path) == 0
    with db_sessions.begin() as session:
        assert read_series(session, run_id=run_id)["a"] == {"step": [1], "value": [1.0]}
        assert session.get_one(Run, run_id).metrics_offset == len(line(1, a=1.0)) + 1
    with path.open("a") as f:
        f.write("\n")
    assert pump(db_sessions, run_id, path) == 1
    with db_sessions.begin() as session:
        assert read_series(session, run_id=run_id)["a"] == {"step": [1, 2], "value": [1.0, 2.55]}


def test_malformed_lines_are_skipped_and_the_others_of_the_batch_arrive(
    tmp_path: Path, db_sessions: sessionmaker[Session]
) -> None:
    run_id = new_run(db_sessions)
    path = tmp_path / "metrics.jsonl"
    lines = [
        line(1, a=1.0),
        "not json {",
        "",
        "[1, 2]",
        '{"type": "metrics", "values": {"a": 9.0}}',  # no step
        '"a string"',
        '{"type": "metrics", "step": 3, "time": 1.0, "values": "abc"}',  # values not an object
        line(2, a=2.0),
        json.dumps({"type": "note", "text": "an unknown record type is ignored"}),
    ]
    path.write_text("\n".join(lines) + "\n")
    assert pump(db_sessions, run_id, path) == len(lines)
    with db_sessions.begin() as session:
        assert read_series(session, run_id=run_id) == {"a": {"step": [1, 2], "value": [1.0, 2.0]}}


def test_nan_is_stored_as_null_infinity_as_itself_ints_as_floats_and_a_non_number_skips_its_line(
    tmp_path: Path, db_sessions: sessionmaker[Session]
) -> None:
    """The job writes null for NaN and "Infinity"/"-Infinity" for +/-inf (issue 41), but a
    hand-written line (json.dumps with its defaults) may carry the bare tokens NaN and Infinity,
    which are not JSON: they read the same. A value that is not a number at all (text, a list,
    a string near the tokens) makes the line one the job did not write: skipped and counted."""
    run_id = new_run(db_sessions)
    path = tmp_path / "metrics.jsonl"
    nonfinite = line(2, a=float("nan"), b=float("inf"), c=-float("inf"))
    tokens = line(3, a=None, b="Infinity", c="-Infinity")
    words = line(4, a="text", b=None, c=[1])
    near = line(5, b="inf")
    path.write_text("\n".join([line(1, a=1.0, b=2, c=True), nonfinite, tokens, words, near, ""]))
    assert pump(db_sessions, run_id, path) == 5
    with db_sessions.begin() as session:
        series = read_series(session, run_id=run_id)
        assert notice_lines(session.get_one(Run, run_id).notices) == [
            "2 lines skipped: a metric value is not a number"
        ]
    big = sys.float_info.max  # +/-inf as torchyard's JSON carries them (app/metrics/finite.py)
    assert series == {
        "a": {"step": [1, 2, 3], "value": [1.0, None, None]},
        "b": {"step": [1, 2, 3], "value": [2.0, big, big]},
        "c": {"step": [1, 2, 3], "value": [1.0, -big, -big]},
    }
    assert all(type(v) is float for s in series.values() for v in s["value"] if v is not None)


def test_the_reapers_salvage_forwards_only_node_0s_folder_of_a_multi_node_run(
    tmp_path: Path, db_sessions: sessionmaker[Session], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Node 1's host has a folder of the run too; salvaged as the run's (node 0's), its spool
    and log would land on node 0's offsets. Only the host of node 0 (runs.worker_host), or any
    host of a single-host run, salvages."""
    monkeypatch.setattr(get_settings(), "data_dir", tmp_path)
    config = {"recipe": "tiny_mlp", "params": {}, "resources": {"nodes": 2, "nproc": 1, "gpus": 0}}
    with db_sessions.begin() as session:
        multi, single = admin_run(session, config), admin_run(session)
        for run_id in (multi, single):
            session.get_one(Run, run_id).worker_host = "node0-host"
    for run_id in (multi, single):
        run_dir = get_settings().run_dir(run_id)
        run_dir.mkdir(parents=True)
        (run_dir / "metrics.jsonl").write_text(line(1, **{"train/loss": 1.0}) + "\n")

    def salvaged_on(host: str, run_id: int) -> int:
        monkeypatch.setattr(get_settings(), "worker_host", host)
        with db_sessions.begin() as session:
            assert holds_node_0(session, run_id=run_id, host=host) == (
                host == "node0-host" or run_id == single
            )
            salvage_spool(session, run_id)
        with db_sessions.begin() as session:
            return count_points(session, run_id=run_id)

    assert salvaged_on("node1-host", multi) == 0
    assert salvaged_on("node0-host", multi) == 1
    assert salvaged_on("elsewhere", single) == 1
