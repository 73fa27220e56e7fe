"""The log shipped to the database (app.runs.log_store.ship -> run_log_chunks) reads exactly
like the file it came from (app.runs.logs): the same bytes for every offset, tail and rank,
and the routes serve it when the run directory is not on the API's disk."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from sqlalchemy import func, select

from app.db import session_scope
from app.runs import log_store, logs
from app.runs.models import Run, RunLogChunk
from app.settings import get_settings
from tests.factories import make_run
from tests.test_runs_api import new_experiment, tiny
from tests.test_runs_logs import random_log, reference


def ship(run_id: int, log: Path, *, final: bool = False) -> bool:
    with session_scope() as session:
        return log_store.ship(session, run_id=run_id, log_path=log, final=final)


def ship_all(run_id: int, log: Path) -> None:
    while ship(run_id, log, final=True):
        pass


def chunks_of(run_id: int) -> list[tuple[int, bytes]]:
    with session_scope() as session:
        rows = session.execute(
            select(RunLogChunk.offset, RunLogChunk.data)
            .where(RunLogChunk.run_id == run_id)
            .order_by(RunLogChunk.offset)
        ).all()
    return [(int(o), bytes(d)) for o, d in rows]


def assert_tiles(run_id: int, data: bytes) -> None:
    """The chunks are the file's bytes, back to back from 0, and log_offset is their end."""
    position = 0
    for offset, piece in chunks_of(run_id):
        assert offset == position
        position += len(piece)
    assert b"".join(p for _, p in chunks_of(run_id)) == data
    with session_scope() as session:
        assert session.scalar(select(Run.log_offset).where(Run.id == run_id)) == len(data)


def read_both(
    path: Path, run_id: int, *, rank: int | None, offset: int, tail: int | None
) -> list[tuple[bytes, int]]:
    got = []
    for source in (logs.FileLogSource(path), log_store.ChunkLogSource(run_id)):
        if rank is None:
            piece = logs.read_all(source, offset=offset, tail=tail)
        else:
            piece = logs.read_rank(source, rank=rank, offset=offset, tail=tail)
        got.append((b"".join(piece.body), piece.end))
    return got


def test_file_and_chunks_read_the_same_for_every_offset_tail_and_rank(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(logs, "BLOCK", 64)  # reads cross chunk and block boundaries
    monkeypatch.setattr(log_store, "SHIP_BYTES", 200)
    monkeypatch.setattr(log_store, "CHUNK_BYTES", 500)
    monkeypatch.setattr(log_store, "MAX_SMALL_CHUNKS", 4)
    rng = random.Random(7)
    for _ in range(12):
        run_id = make_run()
        path = tmp_path / f"{run_id}.log"
        path.write_bytes(b"")
        data = b""
        for _ in range(rng.randrange(1, 6)):  # the job appends, the forwarder ships, in turns
            more = random_log(rng)
            with open(path, "ab") as f:
                f.write(more)
            data += more
            ship(run_id, path)
        ship_all(run_id, path)
        assert_tiles(run_id, data)
        for _ in range(25):
            offset = rng.choice([0, rng.randrange(0, len(data) + 2)])
            tail = rng.choice([None, 1, 10, 100, 10_000])
            rank = rng.choice([None, 0, 1])
            via_file, via_chunks = read_both(path, run_id, rank=rank, offset=offset, tail=tail)
            assert via_file == via_chunks, (data, rank, offset, tail)
            if rank is not None:
                assert via_file == reference(data, rank, offset, tail)


def test_while_the_job_runs_only_whole_lines_ship_and_the_final_drain_sends_the_rest(
    tmp_path: Path,
) -> None:
    run_id = make_run()
    path = tmp_path / "output.log"
    assert not ship(run_id, path)  # no log yet
    path.write_bytes(b"one\ntw")
    assert ship(run_id, path) and chunks_of(run_id) == [(0, b"one\n")]
    assert not ship(run_id, path)  # "tw" waits for its newline
    with open(path, "ab") as f:
        f.write(b"o\nthree, the last line, with no newline")
    assert ship(run_id, path)
    assert not ship(run_id, path)
    assert ship(run_id, path, final=True)
    assert not ship(run_id, path, final=True)
    assert_tiles(run_id, path.read_bytes())


def test_one_call_ships_a_bounded_window_and_a_line_longer_than_it_still_goes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(log_store, "SHIP_BYTES", 100)
    run_id = make_run()
    path = tmp_path / "output.log"
    data = b"x" * 250 + b"\n" + b"short\n" * 30
    path.write_bytes(data)
    calls = 0
    while ship(run_id, path):
        calls += 1
    assert calls >= len(data) // 100
    assert all(len(piece) <= 100 for _, piece in chunks_of(run_id)[:3])
    assert_tiles(run_id, data)


def test_a_trickling_log_is_merged_into_few_chunks(tmp_path: Path) -> None:
    run_id = make_run()
    path = tmp_path / "output.log"
    line = b"2026-11-22 12:00:00 [rank 0] INFO torchyard.recipes.training: step 123 loss 0.1234\n"
    with open(path, "ab") as f:
        for _ in range(2000):  # a line per forwarding interval: 2000 calls, ~160 KB
            f.write(line)
            f.flush()
            assert ship(run_id, path)
    rows = chunks_of(run_id)
    assert len(rows) <= 2 + log_store.MAX_SMALL_CHUNKS
    assert sum(len(p) >= log_store.CHUNK_BYTES for _, p in rows) >= 2
    assert_tiles(run_id, path.read_bytes())


# --- the routes, for a run whose directory is on another host ----------------------------

LOG = "torchrun says hi\n[rank0]: zero 1\n[rank1]: one 1\n[rank0]: zero 2\n[rank1]: one 2\n"


def remote_run(client, headers, tmp_path: Path, text: str, nproc: int = 2) -> int:  # type: ignore[no-untyped-def]
    """A run whose log exists only as shipped chunks (the worker's disk is elsewhere)."""
    config = {**tiny(), "resources": {"nproc": nproc, "gpus": 0}}
    exp = new_experiment(client, headers, config)
    run = client.post(f"/api/experiments/{exp['id']}/runs", headers=headers).json()
    worker_log = tmp_path / f"worker-{run['id']}.log"
    worker_log.write_text(text)
    ship_all(run["id"], worker_log)
    assert not (get_settings().run_dir(run["id"]) / "output.log").exists()
    return int(run["id"])


def test_logs_route_serves_shipped_chunks_with_offsets_tails_and_ranks(
    client, user_headers, tmp_path: Path
) -> None:
    run_id = remote_run(client, user_headers, tmp_path, LOG)
    url = f"/api/runs/{run_id}/logs"
    r = client.get(url, headers=user_headers)
    assert r.text == LOG and r.headers["x-log-size"] == str(len(LOG))
    r = client.get(url, params={"tail": 15}, headers=user_headers)
    assert r.text == "[rank1]: one 2\n" and r.headers["x-log-size"] == str(len(LOG))
    assert client.get(url, params={"offset": 17}, headers=user_headers).text == LOG[17:]
    r = client.get(url, params={"rank": 1}, headers=user_headers)
    assert r.text == "[rank1]: one 1\n[rank1]: one 2\n" and r.headers["x-log-size"] == str(len(LOG))
    r = client.get(url, params={"rank": 0, "tail": 16}, headers=user_headers)
    assert r.text == "[rank0]: zero 2\n"
    r = client.get(url, params={"offset": len(LOG) + 100}, headers=user_headers)
    assert r.status_code == 200 and r.text == "" and r.headers["x-log-size"] == str(len(LOG))


def test_events_stream_the_shipped_log_from_the_clients_offset(
    client, user_headers, tmp_path: Path
) -> None:
    run_id = remote_run(client, user_headers, tmp_path, LOG)
    with session_scope() as session:
        run = session.get(Run, run_id)
        assert run is not None
        run.status = "succeeded"  # a finished run: the stream ends after the last log bytes

    def streamed(log_offset: int) -> str:
        text, event = "", None
        url = f"/api/runs/{run_id}/events"
        params = {"log_offset": log_offset}
        with client.stream("GET", url, params=params, headers=user_headers) as stream:
            for line in stream.iter_lines():
                if line.startswith("event: "):
                    event = line[7:]
                elif line.startswith("data: ") and event == "log":
                    payload = json.loads(line[6:])
                    text += payload["text"]
                    assert payload["offset"] == len(LOG)
        return text

    assert streamed(0) == LOG
    assert streamed(17) == LOG[17:]


def test_the_local_file_wins_when_the_run_directory_is_here(
    client, user_headers, tmp_path: Path
) -> None:
    run_id = remote_run(client, user_headers, tmp_path, "shipped\n", nproc=1)
    local = get_settings().run_dir(run_id) / "output.log"
    local.parent.mkdir(parents=True, exist_ok=True)
    local.write_text("shipped\nand more, not shipped yet\n")
    assert isinstance(logs.log_source(run_id), logs.FileLogSource)
    r = client.get(f"/api/runs/{run_id}/logs", headers=user_headers)
    assert r.text == "shipped\nand more, not shipped yet\n"
    with session_scope() as session:
        count = session.scalar(
            select(func.count()).select_from(RunLogChunk).where(RunLogChunk.run_id == run_id)
        )
    assert count == 1
