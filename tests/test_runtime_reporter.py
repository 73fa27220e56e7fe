"""The metric reporter: exact line format, order, background writing, drain, errors."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from torchyard.runtime.reporter import Reporter, ReporterError

REPO = Path(__file__).resolve().parent.parent


def read_lines(path: Path) -> list[dict]:
    text = path.read_text(encoding="utf-8")
    assert text == "" or text.endswith("\n")
    return [json.loads(line) for line in text.splitlines()]


def test_metrics_line_has_the_documented_shape(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    before = time.time()
    with Reporter(path, enabled=True) as reporter:
        reporter.log(12, {"train/loss": 0.41, "train/acc": 0.88})
    (line,) = read_lines(path)
    assert set(line) == {"type", "step", "time", "values"}
    assert line["type"] == "metrics" and line["step"] == 12
    assert before <= line["time"] <= time.time()
    assert line["values"] == {"train/loss": 0.41, "train/acc": 0.88}


def test_values_are_converted_to_float_nan_becomes_null_and_inf_its_token(tmp_path: Path) -> None:
    """Issue 41: a diverging loss reaches the server as +/-inf (torchyard.contract.SPOOL_INF),
    as JSON strings: every line stays JSON (no bare NaN or Infinity token)."""
    path = tmp_path / "metrics.jsonl"
    with Reporter(path, enabled=True) as reporter:
        reporter.log(1, a=np.float32(0.5), b=torch.tensor(2.0), c=3, d=True)
        reporter.log(2, {"nan": math.nan, "inf": math.inf, "-inf": -math.inf, "x": 1e-300})
    first, second = read_lines(path)
    assert first["values"] == {"a": 0.5, "b": 2.0, "c": 3.0, "d": 1.0}
    assert all(isinstance(v, float) for v in first["values"].values())
    assert second["values"] == {"nan": None, "inf": "Infinity", "-inf": "-Infinity", "x": 1e-300}
    for raw in path.read_text().splitlines():
        json.loads(raw, parse_constant=pytest.fail)  # strict JSON: no NaN/Infinity tokens


def test_float_values_round_trip_exactly_and_keys_are_json_escaped(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    values = [0.1 + 0.2, 1 / 3, 1e16, -0.0, 123456789.123456789]
    with Reporter(path, enabled=True) as reporter:
        for step, value in enumerate(values, start=1):
            reporter.log(step, {'odd "key"\\/é': value})
    got = [line["values"]['odd "key"\\/é'] for line in read_lines(path)]
    assert got == values


def test_a_bad_value_fails_in_the_caller_not_in_the_writer(tmp_path: Path) -> None:
    with Reporter(tmp_path / "m.jsonl", enabled=True) as reporter:
        with pytest.raises(TypeError):
            reporter.log(1, loss=[1.0])
        with pytest.raises(ValueError, match="steps start at 1"):
            reporter.log(0, loss=1.0)
        reporter.log(1, loss=1.0)  # still usable
    assert len(read_lines(tmp_path / "m.jsonl")) == 1


def test_lines_keep_the_order_of_the_calls_with_checkpoints_in_between(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    with Reporter(path, enabled=True) as reporter:
        for step in range(1, 5001):
            reporter.log(step, loss=step)
            if step % 1000 == 0:
                reporter.record_checkpoint(
                    name=f"epoch-{step // 1000:04d}.pt",
                    path=f"checkpoints/epoch-{step // 1000:04d}.pt",
                    epoch=step // 1000,
                    step=step,
                    size_bytes=48211,
                )
    lines = read_lines(path)
    assert [x["step"] for x in lines if x["type"] == "metrics"] == list(range(1, 5001))
    for index, line in enumerate(lines):
        if line["type"] == "checkpoint":
            previous = lines[index - 1]
            assert previous["type"] == "metrics" and previous["step"] == line["step"]
    ckpt = next(x for x in lines if x["type"] == "checkpoint")
    assert set(ckpt) == {"type", "name", "path", "epoch", "step", "size_bytes", "time"}
    assert ckpt == {
        **ckpt,
        "name": "epoch-0001.pt",
        "path": "checkpoints/epoch-0001.pt",
        "epoch": 1,
        "step": 1000,
        "size_bytes": 48211,
    }


def test_the_writer_thread_writes_without_close_or_flush(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    reporter = Reporter(path, enabled=True, interval=0.05)
    try:
        reporter.log(1, loss=1.0)
        reporter.log(2, loss=2.0)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and path.read_text().count("\n") < 2:
            time.sleep(0.01)
        assert [x["step"] for x in read_lines(path)] == [1, 2]
    finally:
        reporter.close()


def test_log_does_not_write_itself(tmp_path: Path) -> None:
    """The hot path only buffers: with a writer that wakes once a minute, nothing reaches
    the file until flush()."""
    path = tmp_path / "metrics.jsonl"
    reporter = Reporter(path, enabled=True, interval=60)
    try:
        # No wait for the writer thread: its loop begins with the minute's wait, so whether it
        # has started or not, only log() itself could write here.
        for step in range(1, 101):
            reporter.log(step, loss=1.0)
        assert path.read_text() == ""
        reporter.flush()
        assert len(read_lines(path)) == 100
    finally:
        reporter.close()


def test_flush_makes_every_earlier_point_visible(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    with Reporter(path, enabled=True, interval=60) as reporter:
        for step in range(1, 1001):
            reporter.log(step, loss=1.0)
            if step % 250 == 0:
                reporter.flush()
                assert len(read_lines(path)) == step


def test_a_writer_that_falls_behind_makes_log_wait_instead_of_growing(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    with Reporter(path, enabled=True, interval=60, max_pending=10) as reporter:
        for step in range(1, 26):
            reporter.log(step, loss=1.0)
        assert len(read_lines(path)) >= 11


def test_appends_to_an_existing_spool(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    with Reporter(path, enabled=True) as reporter:
        reporter.log(1, loss=1.0)
    with Reporter(path, enabled=True) as reporter:
        reporter.log(2, loss=2.0)
    assert [x["step"] for x in read_lines(path)] == [1, 2]


def test_disabled_reporter_is_a_no_op_twin(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    for reporter in (Reporter(path, enabled=False), Reporter(None, enabled=True)):
        assert reporter.enabled is False
        reporter.log(1, loss=1.0)
        reporter.record_checkpoint(
            name="a.pt", path="checkpoints/a.pt", epoch=1, step=1, size_bytes=1
        )
        reporter.flush()
        reporter.close()
    assert not path.exists()


def test_log_after_close_raises(tmp_path: Path) -> None:
    reporter = Reporter(tmp_path / "m.jsonl", enabled=True)
    reporter.close()
    reporter.close()  # idempotent
    with pytest.raises(ValueError, match="closed"):
        reporter.log(1, loss=1.0)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_write_error_is_raised_on_the_next_log_and_on_close() -> None:
    """/dev/full fails every write with ENOSPC: a real full disk, no mocks."""
    reporter = Reporter("/dev/full", enabled=True, interval=0.01)
    reporter.log(1, loss=1.0)
    deadline = time.monotonic() + 5
    with pytest.raises(ReporterError) as raised:
        while time.monotonic() < deadline:
            reporter.log(2, loss=1.0)
            time.sleep(0.01)
    assert isinstance(raised.value.__cause__, OSError)
    with pytest.raises(ReporterError):
        reporter.flush()
    with pytest.raises(ReporterError):
        reporter.close()


def run_python(code: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_script_that_never_closes_still_gets_every_point_written(tmp_path: Path) -> None:
    """atexit drains the buffer; the daemon thread does not keep the process alive."""
    path = tmp_path / "metrics.jsonl"
    code = (
        "from torchyard.runtime.reporter import Reporter\n"
        f"r = Reporter({str(path)!r}, enabled=True, interval=60)\n"
        "for step in range(1, 10001):\n"
        "    r.log(step, loss=step / 7)\n"
    )
    result = run_python(code, tmp_path)
    assert result.returncode == 0, result.stderr
    lines = read_lines(path)
    assert [x["step"] for x in lines] == list(range(1, 10001))
    assert lines[-1]["values"]["loss"] == 10000 / 7


def test_a_crash_keeps_every_point_logged_before_it(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    code = (
        "from torchyard.runtime.reporter import Reporter\n"
        f"r = Reporter({str(path)!r}, enabled=True, interval=60)\n"
        "for step in range(1, 101):\n"
        "    r.log(step, loss=1.0)\n"
        "raise RuntimeError('boom')\n"
    )
    result = run_python(code, tmp_path)
    assert result.returncode == 1 and "RuntimeError: boom" in result.stderr
    assert len(read_lines(path)) == 100


def test_the_scripts_config_is_one_line_after_the_points_before_it(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    with Reporter(path, enabled=True) as reporter:
        reporter.log(1, {"a": 1.0})
        reporter.record_config({"lr": 0.1, "model": {"depth": 3}})
    lines = read_lines(path)
    assert [line["type"] for line in lines] == ["metrics", "config"]
    assert lines[1]["values"] == {"lr": 0.1, "model": {"depth": 3}}
    Reporter(None).record_config({"lr": 0.1})  # the no-op twin: nothing, nowhere
