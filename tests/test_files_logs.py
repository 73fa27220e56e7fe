"""Reading output.log by rank: app/runs/files/logs.py against a plain in-memory reference, and the
`GET /api/runs/{id}/logs?rank=` route on top of it."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from app.runs.files import logs
from tests.test_runs_api import new_experiment, tiny


def reference(data: bytes, rank: int, offset: int, tail: int | None) -> tuple[bytes, int]:
    """Whole lines that start at or after offset and end before the end; then the tail."""
    start = min(offset, len(data))
    if start > 0 and data[start - 1 : start] != b"\n":
        nl = data.find(b"\n", start)
        start = nl + 1 if nl >= 0 else len(data)
    end = data.rfind(b"\n", start) + 1 or start
    lines = data[start:end].splitlines(keepends=True)
    text = b"".join(line for line in lines if line.startswith(b"[rank%d]: " % rank))
    return (text[-tail:] if tail is not None else text), end


def random_log(rng: random.Random) -> bytes:
    lines = []
    for _ in range(rng.randrange(0, 60)):
        who = rng.choice(["[rank0]: ", "[rank1]: ", "[rank10]: ", "", "[rank1]:"])
        body = "x" * rng.choice([0, 1, 5, 40, 300])
        lines.append(f"{who}{body}{rng.random()}\n")
    text = "".join(lines)
    if rng.random() < 0.5:
        text += "[rank1]: still being written"
    return text.encode()


def read(path: Path, rank: int, offset: int, tail: int | None) -> tuple[bytes, int]:
    got = logs.read_rank(path, rank=rank, offset=offset, tail=tail)
    return b"".join(got.body), got.end


def test_rank_reads_match_the_reference_across_block_boundaries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(logs, "BLOCK", 64)  # many blocks, lines longer than one block
    rng = random.Random(4)
    path = tmp_path / "output.log"
    for _ in range(300):
        data = random_log(rng)
        path.write_bytes(data)
        offset = rng.choice([0, 0, rng.randrange(0, len(data) + 1)])
        tail = rng.choice([None, 1, 10, 100, 10_000])
        rank = rng.choice([0, 1])
        assert read(path, rank, offset, tail) == reference(data, rank, offset, tail), (
            data,
            rank,
            offset,
            tail,
        )


def test_a_partial_last_line_waits_and_the_next_read_continues_at_its_start(
    tmp_path: Path,
) -> None:
    path = tmp_path / "output.log"
    path.write_bytes(b"[rank0]: a\n[rank1]: b\n[rank1]: c is still bei")
    text, end = read(path, 1, 0, None)
    assert text == b"[rank1]: b\n" and end == len(b"[rank0]: a\n[rank1]: b\n")
    with open(path, "ab") as f:
        f.write(b"ng written\n[rank0]: d\n")
    assert read(path, 1, end, None) == (b"[rank1]: c is still being written\n", path.stat().st_size)


def test_missing_log_reads_empty(tmp_path: Path) -> None:
    assert read(tmp_path / "nope.log", 0, 0, None) == (b"", 0)
    got = logs.read_all(tmp_path / "nope.log", offset=0, tail=None)
    assert b"".join(got.body) == b"" and got.end == 0


def write_log(run_id: int, text: str) -> None:
    from app.runs.service import log_path

    path = log_path(run_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


LOG = "torchrun says hi\n[rank0]: zero 1\n[rank1]: one 1\n[rank0]: zero 2\n[rank1]: one 2\n"


def test_logs_by_rank_through_the_api(client, user_headers) -> None:
    config = {**tiny(), "resources": {"nproc": 2, "gpus": 0}}
    run = client.post(
        f"/api/experiments/{new_experiment(client, user_headers, config)['id']}/runs",
        headers=user_headers,
    ).json()
    write_log(run["id"], LOG)
    url = f"/api/runs/{run['id']}/logs"
    r = client.get(url, headers=user_headers)
    assert r.text == LOG and r.headers["x-log-size"] == str(len(LOG))
    r = client.get(url, params={"rank": 1}, headers=user_headers)
    assert r.text == "[rank1]: one 1\n[rank1]: one 2\n" and r.headers["x-log-size"] == str(len(LOG))
    r = client.get(url, params={"rank": 0, "tail": 16}, headers=user_headers)
    assert r.text == "[rank0]: zero 2\n"
    offset = LOG.index("[rank0]: zero 2")
    r = client.get(url, params={"rank": 1, "offset": offset}, headers=user_headers)
    assert r.text == "[rank1]: one 2\n"
    r = client.get(url, params={"rank": 2}, headers=user_headers)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "rank"]


def test_a_single_process_run_is_all_rank_0(client, user_headers) -> None:
    run = client.post(
        f"/api/experiments/{new_experiment(client, user_headers)['id']}/runs",
        headers=user_headers,
    ).json()
    write_log(run["id"], "plain line\n2025 [rank 0] INFO x: hi\n")
    url = f"/api/runs/{run['id']}/logs"
    assert client.get(url, params={"rank": 0}, headers=user_headers).text == (
        "plain line\n2025 [rank 0] INFO x: hi\n"
    )
    assert client.get(url, params={"rank": 1}, headers=user_headers).status_code == 422


def test_a_progress_bar_reads_as_its_last_state(client, user_headers) -> None:
    run = client.post(
        f"/api/experiments/{new_experiment(client, user_headers)['id']}/runs",
        headers=user_headers,
    ).json()
    bar = "".join(f"\r{p:3d}%|{'#' * (p // 10):10}|" for p in range(0, 101, 5))
    write_log(run["id"], f"start\n{bar}\ndone\r\nnext: 10%\rnext: 20%\r")
    got = client.get(f"/api/runs/{run['id']}/logs", headers=user_headers)
    assert got.text == "start\n100%|##########|\ndone\r\nnext: 20%\r"
    assert int(got.headers["x-log-size"]) == len(f"start\n{bar}\ndone\r\nnext: 10%\rnext: 20%\r")


def test_a_ranks_progress_bar_keeps_its_prefix() -> None:
    data = b"[rank1]: \r 10%\r 50%\r100%\nplain\n"
    assert logs.collapse_carriage_returns(data) == b"[rank1]: 100%\nplain\n"
