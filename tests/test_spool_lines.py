"""Every line of a job's metrics spool is checked (worker.spool_lines): a bad one is skipped
and counted on the run by reason, the good lines around it are kept, and nothing in a line
can fail the batch. The per-run limits (metric keys, log bytes, spool line size) hold, each
said on the run."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from sqlalchemy.orm import Session, sessionmaker

from app.db import session_scope
from app.metrics.service import read_series
from app.runs.files import log_store
from app.runs.models import Run
from app.runs.query.params import params_by_run, record_config
from app.runs.state import notices
from app.runs.state.notices import notice_lines
from app.settings import get_settings
from tests.factories import admin_run, make_run
from worker import spool_lines
from worker import spool_lines as sl
from worker.forwarder import forward
from worker.spool_lines import BadLine, check_line, parse_spool

GOOD = {"type": "metrics", "step": 1, "time": 1.0, "values": {"a": 1.0}}
CKPT = {
    "type": "checkpoint",
    "name": "e1.pt",
    "path": "checkpoints/e1.pt",
    "epoch": 1,
    "step": 2,
    "size_bytes": 10,
}


def metrics(step: int = 1, /, **values: object) -> bytes:
    return json.dumps({"type": "metrics", "step": step, "time": 1.0, "values": values}).encode()


# Each shape the issue reproduced, and the reason it is counted under.
BAD_SHAPES = [
    (b"[1]", sl.NOT_OBJECT),
    (b'"text"', sl.NOT_OBJECT),
    (b"not json {", sl.NOT_JSON),
    (metrics(**{"k" * 300: 1.0}), sl.BAD_KEY_LENGTH),
    (metrics(**{"": 1.0}), sl.BAD_KEY_LENGTH),
    (metrics(**{"train/loss": 0.5, "sys/cpu_percent": 1.0}), sl.RESERVED_KEY),
    (metrics(a="a string"), sl.BAD_VALUE),
    # Only the two exact tokens are infinities (issue 41): anything near them is refused.
    (metrics(a="infinity"), sl.BAD_VALUE),
    (metrics(a="inf"), sl.BAD_VALUE),
    (metrics(a=" Infinity"), sl.BAD_VALUE),
    (metrics(a="Infinity\u0000"), sl.BAD_VALUE),
    (metrics(a="+Infinity"), sl.BAD_VALUE),
    (metrics(a="NaN"), sl.BAD_VALUE),
    (metrics(a=""), sl.BAD_VALUE),
    (metrics(a=[1]), sl.BAD_VALUE),
    (metrics(a=10**400), sl.BAD_VALUE),
    (metrics(10**30), sl.BAD_STEP),
    (metrics(2**63), sl.BAD_STEP),
    (metrics(2**64 + 5), sl.BAD_STEP),  # orjson reads it as a float
    (json.dumps({**GOOD, "step": True}).encode(), sl.BAD_STEP),
    (json.dumps({**GOOD, "step": "3"}).encode(), sl.BAD_STEP),
    (b'{"type": "metrics", "step": 1, "time": 1, "values": {"\\ud800": 1.0}}', sl.BAD_KEY_TEXT),
    (b'{"type": "metrics", "step": 1, "time": 1, "values": {"a\\u0000b": 1.0}}', sl.BAD_KEY_TEXT),
    (b'{"type": "metrics", "step": 1, "time": Infinity, "values": {"a": 1.0}}', sl.BAD_TIME),
    (json.dumps({**GOOD, "values": None}).encode(), sl.BAD_VALUES),
    (json.dumps(dict(CKPT, epoch=None)).encode(), sl.bad_checkpoint("epoch")),
    (json.dumps({**CKPT, "epoch": 2**40}).encode(), sl.bad_checkpoint("epoch")),
    (json.dumps({**CKPT, "name": 5}).encode(), sl.bad_checkpoint("name")),
    (json.dumps({**CKPT, "size_bytes": -1}).encode(), sl.bad_checkpoint("size_bytes")),
    (b'{"type": "config", "values": "lr=1"}', sl.BAD_CONFIG),
    (b'{"type": "config", "values": {"k": "\\ud800"}}', sl.BAD_CONFIG),
    (b'{"type": "config", "values": ' + b'{"a": ' * 900 + b"1" + b"}" * 901, sl.BAD_CONFIG),
]  # fmt: skip


@pytest.mark.parametrize(("raw", "reason"), BAD_SHAPES)
def test_the_line_validator_names_why_a_line_is_refused(raw: bytes, reason: str) -> None:
    with pytest.raises(BadLine) as refused:
        check_line(raw)
    assert refused.value.reason == reason


def test_the_line_validator_takes_good_lines_as_stored() -> None:
    nan = b'{"type": "metrics", "step": -3, "time": 5, "values": {"a": NaN, "b": true, "c": 2}}'
    assert check_line(nan) == (-3, 5.0, {"a": None, "b": 1.0, "c": 2.0})
    tokens = b'{"type": "metrics", "step": 1, "time": 5, "values": {"a": Infinity, "b": -Infinity}}'
    assert check_line(tokens) == (1, 5.0, {"a": math.inf, "b": -math.inf})
    assert check_line(metrics(1, a="Infinity", b="-Infinity")) == (
        1,
        1.0,
        {"a": math.inf, "b": -math.inf},
    )
    assert check_line(json.dumps(CKPT).encode()) == CKPT
    assert check_line(b'{"type": "note", "text": "a newer record type"}') is None
    assert check_line(metrics(2**63 - 1, **{"é/ключ": 1.5})) == (
        2**63 - 1,
        1.0,
        {"é/ключ": 1.5},
    )


def test_a_chunk_keeps_its_good_lines_and_counts_the_bad_ones_by_reason() -> None:
    lines = [metrics(1, a=1.0), *(raw for raw, _ in BAD_SHAPES), metrics(2, a=2.0)]
    parsed = parse_spool(b"\n".join(lines) + b"\n")
    assert [(s, v) for s, _, v in parsed.steps] == [(1, {"a": 1.0}), (2, {"a": 2.0})]
    expected: dict[str, int] = {}
    for _, reason in BAD_SHAPES:
        expected[reason] = expected.get(reason, 0) + 1
    assert dict(parsed.skipped) == expected


def test_infinities_tokens_take_the_fast_path_and_a_near_token_only_refuses_its_line() -> None:
    """Issue 41: the job writes +/-inf as "Infinity"/"-Infinity" (JSON strings, so a diverging
    run's chunk still parses in one orjson call); any other string refuses just its line."""
    good = metrics(1, a="Infinity", b=1.0) + b"\n" + metrics(2, a="-Infinity", b=None) + b"\n"
    assert sl._fast(good, 2) is not None  # no fall back to line by line
    parsed = parse_spool(good)
    assert [v for _, _, v in parsed.steps] == [
        {"a": math.inf, "b": 1.0},
        {"a": -math.inf, "b": None},
    ]
    assert parsed.non_finite and not parsed.skipped
    assert parse_spool(metrics(1, a=1.0, b=True) + b"\n").non_finite is False
    assert parse_spool(metrics(1, a="Infinity") + b"\n").non_finite is True  # no null: inf alone

    mixed = good + metrics(3, a="inf") + b"\n" + metrics(4, a="Infinity") + b"\n"
    assert sl._fast(mixed, 4) is None
    parsed = parse_spool(mixed)
    assert [(s, v["a"]) for s, _, v in parsed.steps] == [
        (1, math.inf),
        (2, -math.inf),
        (4, math.inf),
    ]
    assert dict(parsed.skipped) == {sl.BAD_VALUE: 1}


# Each pump a unit of work of its own, as the worker's are, on db_sessions (rolled back).
def pump(sessions: sessionmaker[Session], run_id: int, path: Path, final: bool = False) -> int:
    with sessions.begin() as session:
        return forward(session, run_id=run_id, metrics_path=path, final=final)


def new_run(sessions: sessionmaker[Session]) -> int:
    with sessions.begin() as session:
        return admin_run(session)


def run_notices(sessions: sessionmaker[Session], run_id: int) -> list[str]:
    with sessions() as session:
        run = session.get(Run, run_id)
        assert run is not None
        return notice_lines(run.notices)


def test_each_bad_shape_in_a_spool_is_skipped_counted_and_the_good_points_kept(
    tmp_path: Path, db_sessions: sessionmaker[Session]
) -> None:
    run_id = new_run(db_sessions)
    path = tmp_path / "metrics.jsonl"
    good_steps = list(range(1, len(BAD_SHAPES) + 2))
    lines = []
    for i, (raw, _) in enumerate(BAD_SHAPES):
        lines += [metrics(good_steps[i], a=float(i)), raw]
    lines.append(metrics(good_steps[-1], a=-1.0))
    path.write_bytes(b"\n".join(lines) + b"\n")
    while pump(db_sessions, run_id, path):
        pass
    with db_sessions.begin() as session:
        series = read_series(session, run_id=run_id)
        assert session.get_one(Run, run_id).metrics_offset == path.stat().st_size
    assert series == {
        "a": {"step": good_steps, "value": [float(i) for i in range(len(BAD_SHAPES))] + [-1.0]}
    }
    said = run_notices(db_sessions, run_id)
    assert "2 lines skipped: not a JSON object" in said
    assert f"2 lines skipped: {spool_lines.BAD_KEY_TEXT}" in said
    assert f"1 line skipped: {spool_lines.bad_checkpoint('name')}" in said
    assert sum(int(n.split()[0]) for n in said) == len(BAD_SHAPES)


def test_a_20_mib_line_is_skipped_without_stopping_ingestion(
    tmp_path: Path, db_sessions: sessionmaker[Session]
) -> None:
    """Written in two pieces (the job is still writing it when the forwarder first looks),
    longer than the 16 MiB read window: skipped once, counted once, the points after it come."""
    run_id = new_run(db_sessions)
    path = tmp_path / "metrics.jsonl"
    huge = b'{"type": "metrics", "step": 2, "time": 1, "values": {"a": "' + b"x" * (20 << 20)
    path.write_bytes(metrics(1, a=1.0) + b"\n" + huge[: 3 << 20])
    assert pump(db_sessions, run_id, path)
    with path.open("ab") as f:
        f.write(huge[3 << 20 :] + b'"}}\n' + metrics(3, a=3.0) + b"\n")
    while pump(db_sessions, run_id, path):
        pass
    with db_sessions.begin() as session:
        assert read_series(session, run_id=run_id) == {"a": {"step": [1, 3], "value": [1.0, 3.0]}}
    limit = get_settings().spool_line_max_bytes
    assert run_notices(db_sessions, run_id) == [f"1 line skipped: {spool_lines.too_long(limit)}"]


def test_keys_past_the_per_run_limit_are_not_stored_and_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, db_sessions: sessionmaker[Session]
) -> None:
    monkeypatch.setattr(get_settings(), "max_metric_keys_per_run", 3)
    run_id = new_run(db_sessions)
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(
        metrics(1, a=1.0, b=1.0) + b"\n" + metrics(2, a=2.0, c=2.0, d=2.0, e=2.0) + b"\n"
    )
    pump(db_sessions, run_id, path)
    with db_sessions.begin() as session:
        series = read_series(session, run_id=run_id)
    assert sorted(series) == ["a", "b", "c"] and series["a"]["step"] == [1, 2]
    assert run_notices(db_sessions, run_id) == [
        "metric key limit reached (3 keys per run): 2 points of further keys not stored"
    ]


def test_a_log_past_its_limit_is_cut_with_a_note_and_stays_cut(
    tmp_path: Path, db_sessions: sessionmaker[Session]
) -> None:
    run_id = new_run(db_sessions)
    log = tmp_path / "output.log"
    log.write_bytes(b"line\n" * 2000)  # 10,000 bytes
    with db_sessions.begin() as session:
        log_store.limit(session, run_id=run_id, log_path=log, max_bytes=4096)
    data = log.read_bytes()
    assert data[:4096] == (b"line\n" * 2000)[:4096]
    assert data[4096:] == (
        b"\ntorchyard: the log reached its limit of 4 KiB; the rest of this run's output is not"
        b" kept\n"
    )
    with log.open("ab") as f:  # the job goes on writing
        f.write(b"more\n" * 100)
    with db_sessions.begin() as session:
        log_store.limit(session, run_id=run_id, log_path=log, max_bytes=4096)
    assert log.read_bytes() == data
    assert run_notices(db_sessions, run_id) == [
        "log limit reached (4 KiB): the output after it is not kept"
    ]


def test_the_notes_are_in_the_runs_api_answer_and_on_its_page(client) -> None:
    from tests.conftest import make_user
    from tests.test_pages import login

    name, password, headers = make_user()
    run_id = make_run()
    with session_scope() as session:
        run = session.get(Run, run_id)
        assert run is not None
        notices.add_skipped(run, {"<b>not</b> a JSON object": 2})
        notices.log_cut(run, limit=1 << 30, kept=(1 << 30) + 90)
    said = [
        "2 lines skipped: <b>not</b> a JSON object",
        "log limit reached (1 GiB): the output after it is not kept",
    ]
    assert client.get(f"/api/runs/{run_id}", headers=headers).json()["notices"] == said
    login(client, name, password)
    page = client.get(f"/runs/{run_id}").text
    assert "<li>2 lines skipped: &lt;b&gt;not&lt;/b&gt; a JSON object</li>" in page
    assert "<li>log limit reached (1 GiB): the output after it is not kept</li>" in page


def test_lines_just_over_the_limit_are_skipped_and_lines_at_it_kept(tmp_path: Path) -> None:
    from worker.forwarder import read_complete_lines

    limit = 1000
    for length in (limit - 1, limit, limit + 1, 2 * limit, 3 * limit + 7):
        for before in (0, 1, 333, limit // 2):
            data = b"a" * before + b"\n" + b"x" * length + b"\n" + b"b\n"
            path = tmp_path / "spool"
            path.write_bytes(data)
            read = read_complete_lines(path, 0, limit)
            kept = [line for line in data.split(b"\n")[:-1] if len(line) <= limit]
            assert read.chunk == b"".join(line + b"\n" for line in kept), (length, before)
            assert read.too_long == (length > limit) and read.offset == len(data)


def test_a_line_longer_than_the_read_window_with_the_largest_limit_is_skipped(
    tmp_path: Path,
) -> None:
    from worker.forwarder import MAX_CHUNK_BYTES, read_complete_lines

    path = tmp_path / "spool"
    path.write_bytes(b"x" * (MAX_CHUNK_BYTES + 5))  # no newline yet
    read = read_complete_lines(path, 0, MAX_CHUNK_BYTES)
    assert read.too_long == 1 and read.offset == MAX_CHUNK_BYTES + 1
    with path.open("ab") as f:
        f.write(b"\nok\n")
    read = read_complete_lines(path, read.offset, MAX_CHUNK_BYTES)
    assert read.chunk == b"ok\n" and read.too_long == 0 and read.offset == path.stat().st_size


def test_a_config_line_is_the_runs_params_beside_the_launchs_which_win(
    tmp_path: Path, db_sessions: sessionmaker[Session]
) -> None:
    """torchyard.init(config=...)'s line: keys flattened under params., the launch's kept where
    it gave one (and the difference said on the run), a later line's value winning."""
    run_id = new_run(db_sessions)
    with db_sessions.begin() as session:
        record_config(session, run_id=run_id, config={"params": {"lr": 0.1, "epochs": 2}})
    config = {"lr": 0.5, "epochs": 2, "model": {"depth": 3, "act": "relu"}, "tags": ["a"]}
    lines = [
        {"type": "config", "values": {**config, "batch_size": 32}},
        {"type": "config", "values": {"batch_size": 64}},
        {"type": "config", "values": [1]},  # refused, counted
    ]
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    while pump(db_sessions, run_id, path):
        pass
    with db_sessions() as session:
        params = params_by_run(session, [run_id])[run_id]
    assert params == {
        "params.lr": 0.1,
        "params.epochs": 2,
        "params.model.depth": 3,
        "params.model.act": "relu",
        "params.tags": ["a"],
        "params.batch_size": 64,
    }
    assert run_notices(db_sessions, run_id) == [
        f"1 line skipped: {spool_lines.BAD_CONFIG}",
        "params.lr: the launch's 0.1 is used; the script's torchyard.init(config=...) gave 0.5",
    ]
