"""The log shipped to the database (app.runs.files.log_store.ship -> run_log_chunks) reads exactly
like the file it came from (app.runs.files.logs): the same bytes for every offset, tail and rank,
and the routes serve it when the run directory is not on the API's disk."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from sqlalchemy import func, select

from app.db import session_scope
from app.runs.files import log_store, logs
from app.runs.models import Run, RunLogChunk, RunStatus
from app.settings import get_settings
from tests.factories import make_run
from tests.test_files_logs import random_log, reference
from tests.test_runs_api import new_experiment, tiny


def ship(run_id: int, log: Path, *, final: bool = False, node: int = 0) -> bool:
    with session_scope() as session:
        return log_store.ship(session, run_id=run_id, log_path=log, final=final, node=node)


def ship_all(run_id: int, log: Path) -> None:
    while ship(run_id, log, final=True):
        pass


def chunks_of(run_id: int, node: int = 0) -> list[tuple[int, bytes]]:
    with session_scope() as session:
        rows = session.execute(
            select(RunLogChunk.offset, RunLogChunk.data)
            .where(RunLogChunk.run_id == run_id, RunLogChunk.node == node)
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
    """12 logs shipped in turns with the job's appends, each read 12 ways at random (offset,
    tail, rank): 144 reads, each of the 15 combinations of tail and rank 3 times or more (25
    reads a log, 300 in all, were half of the test's 14 s on PostgreSQL)."""
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
        for _ in range(12):
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
    """A line per forwarding interval: 200 ships, each far below CHUNK_BYTES, merge into a
    few chunks, by count (MAX_SMALL_CHUNKS ships: ~50 KB) and by size (64 KB). Lines of ~800
    bytes fill the chunks in a tenth of the ships 80-byte lines take (2,000: 31 s on
    PostgreSQL), and still trickle."""
    run_id = make_run()
    path = tmp_path / "output.log"
    line = b"2026-11-22 12:00:00 [rank 0] INFO torchyard.recipes.training: step 123"
    line += b" loss 0.1234" * 60 + b"\n"
    with open(path, "ab") as f:
        for _ in range(200):  # a line per forwarding interval: 200 calls, ~160 KB
            f.write(line)
            f.flush()
            assert ship(run_id, path)
    rows = chunks_of(run_id)
    assert len(rows) <= 2 + log_store.MAX_SMALL_CHUNKS
    assert sum(len(p) >= log_store.CHUNK_BYTES for _, p in rows) >= 2
    assert_tiles(run_id, path.read_bytes())


# --- the routes, for a run whose directory is on another host ----------------------------

LOG = "torchrun says hi\n[rank0]: zero 1\n[rank1]: one 1\n[rank0]: zero 2\n[rank1]: one 2\n"


def remote_run(client, headers, tmp_path: Path, text: str, nproc: int = 2) -> int:
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


@pytest.mark.committed("the event stream polls on threads of their own")
def test_events_stream_the_shipped_log_from_the_clients_offset(
    client, user_headers, tmp_path: Path
) -> None:
    run_id = remote_run(client, user_headers, tmp_path, LOG)
    with session_scope() as session:
        run = session.get(Run, run_id)
        assert run is not None
        run.status = RunStatus.succeeded  # a finished run: the stream ends after the last log bytes

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


# --- a multi-node run: one log per node ----------------------------------------------------

MULTI_NODE = {**tiny(), "resources": {"nodes": 2, "nproc": 2, "gpus": 0}}
NODE_LOGS = {
    0: "torchrun 0\n[rank0]: zero a\n[rank1]: one a\n[rank0]: zero b\n",
    1: "torchrun 1\n[rank2]: two a\n[rank3]: three a\n[rank3]: three b\n",
}


def multi_node_run(tmp_path: Path) -> int:
    """A 2-node x 2-process run whose two logs exist only as shipped chunks."""
    run_id = make_run(config=MULTI_NODE)
    for node, text in NODE_LOGS.items():
        path = tmp_path / f"node{node}.log"
        path.write_text(text)
        while ship(run_id, path, final=True, node=node):
            pass
    return run_id


def test_each_node_ships_its_own_log_tiled_on_its_own_offsets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(log_store, "SHIP_BYTES", 50)
    monkeypatch.setattr(log_store, "CHUNK_BYTES", 120)
    monkeypatch.setattr(log_store, "MAX_SMALL_CHUNKS", 3)
    run_id = make_run(config=MULTI_NODE)
    rng = random.Random(3)
    paths = {k: tmp_path / f"node{k}.log" for k in (0, 1)}
    data = {k: b"" for k in paths}
    for _ in range(30):  # the two hosts append and ship in any order
        node = rng.choice([0, 1])
        more = random_log(rng)[:200]
        with open(paths[node], "ab") as f:
            f.write(more)
        data[node] += more
        ship(run_id, paths[node], node=node)
    for node, path in paths.items():
        while ship(run_id, path, final=True, node=node):
            pass
    assert_tiles(run_id, data[0])  # node 0's: runs.log_offset, as on one host
    position = 0
    for offset, piece in chunks_of(run_id, node=1):  # node 1's tile its own file
        assert offset == position
        position += len(piece)
    assert b"".join(p for _, p in chunks_of(run_id, node=1)) == data[1]
    assert any(len(p) > 50 for _, p in chunks_of(run_id, node=1))  # merged, as node 0's are
    with session_scope() as session:
        assert log_store.shipped_bytes(session, run_id=run_id, node=1) == len(data[1])
    source = log_store.ChunkLogSource(run_id, 1)
    assert source.size() == len(data[1]) and source.read(0, len(data[1]) + 10) == data[1]
    for offset in (0, 7, len(data[1]) // 2):
        via_file, via_chunks = [
            b"".join(logs.read_rank(s, rank=1, offset=offset, tail=None).body)
            for s in (logs.FileLogSource(paths[1]), source)
        ]
        assert via_file == via_chunks


def test_a_nodes_log_is_cut_once_at_the_limit_and_never_ships_past_its_note(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(get_settings(), "max_log_bytes", 4096)
    run_id = make_run(config=MULTI_NODE)
    path = tmp_path / "node1.log"
    path.write_bytes(b"[rank2]: spam\n" * 400)  # 5600 bytes
    with session_scope() as session:
        log_store.limit(session, run_id=run_id, log_path=path, max_bytes=4096, node=1)
    cut = path.read_bytes()
    assert len(cut) > 4096 and cut.endswith(b"the rest of this run's output is not kept\n")
    with open(path, "ab") as f:
        f.write(b"[rank3]: more after the cut\n")
    while ship(run_id, path, final=True, node=1):
        pass
    assert log_store.ChunkLogSource(run_id, 1).read(0, 10_000) == cut  # not what came after
    with session_scope() as session:
        log_store.limit(session, run_id=run_id, log_path=path, max_bytes=4096, node=1)
        run = session.get(Run, run_id)
        assert run is not None and "log" not in (run.notices or {})  # the run's cut is node 0's
    assert path.read_bytes() == cut  # cut again where it was, the note once


def test_logs_route_reads_each_node_and_a_rank_picks_its_node(
    client, admin_headers, tmp_path: Path
) -> None:
    run_id = multi_node_run(tmp_path)
    url = f"/api/runs/{run_id}/logs"

    def get(**params: int) -> tuple[int, str, int]:
        r = client.get(url, params=params, headers=admin_headers)
        return r.status_code, r.text, int(r.headers.get("x-log-size", -1))

    assert get() == (200, NODE_LOGS[0], len(NODE_LOGS[0]))  # node 0's: the run's own
    assert get(node=1) == (200, NODE_LOGS[1], len(NODE_LOGS[1]))
    assert get(node=1, tail=17) == (200, "[rank3]: three b\n", len(NODE_LOGS[1]))
    assert get(rank=3)[:2] == (200, "[rank3]: three a\n[rank3]: three b\n")
    assert get(node=1, rank=2)[:2] == (200, "[rank2]: two a\n")
    assert get(rank=1)[:2] == (200, "[rank1]: one a\n")
    offset = NODE_LOGS[1].index("[rank3]: three b")
    assert get(rank=3, offset=offset)[1] == "[rank3]: three b\n"
    for params, field, says in [
        ({"rank": 4}, "rank", "rank must be below 4"),
        ({"node": 2}, "node", "node must be below 2"),
        ({"node": 0, "rank": 2}, "rank", "rank 2 runs on node 1, not node 0"),
    ]:
        r = client.get(url, params=params, headers=admin_headers)
        assert r.status_code == 422, params
        assert r.json()["detail"][0]["loc"] == ["query", field] and says in r.text


def test_a_single_host_run_has_only_node_0(client, user_headers, tmp_path: Path) -> None:
    run_id = remote_run(client, user_headers, tmp_path, LOG)
    url = f"/api/runs/{run_id}/logs"
    assert client.get(url, params={"node": 0}, headers=user_headers).text == LOG
    r = client.get(url, params={"node": 1}, headers=user_headers)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "node"]
