"""Under torchrun a rank's progress bar is one line in the log: a line redrawn with "\\r" is
held and written once, whole, in its last state (torchrun's copy split it on every "\\r" and
mixed its pieces with other ranks' lines)."""

from __future__ import annotations

import io
import subprocess
import textwrap
from pathlib import Path

from tests.test_recipes import job_launch
from torchyard.runtime.output import ProgressLinesHeld


def written(*writes: str, release: bool = False) -> str:
    inner = io.StringIO()
    stream = ProgressLinesHeld(inner)
    for text in writes:
        stream.write(text)
    if release:
        stream.release()
    return inner.getvalue()


def test_a_redrawn_line_is_written_once_in_its_last_state() -> None:
    assert written("\r 10%", "\r 50%", "\r100%", "\n") == "100%\n"
    assert written("a\rb\nc\n") == "b\nc\n"
    assert written("10%\r", "\n") == "10%\n"


def test_lines_and_partial_writes_without_a_return_pass_straight_through() -> None:
    assert written("plain\n") == "plain\n"
    assert written("last words without a newline") == "last words without a newline"


def test_a_line_still_redrawn_at_exit_is_written_as_it_stands() -> None:
    assert written("\r 30%", "\r 40%") == ""
    assert written("\r 30%", "\r 40%", release=True) == " 40%\n"


def test_a_progress_bar_under_torchrun_is_one_line_per_rank(tmp_path: Path) -> None:
    script = tmp_path / "bar.py"
    script.write_text(
        textwrap.dedent(
            """
            import sys, time
            for p in range(0, 101, 10):
                sys.stderr.write(f"\\r{p:3d}%")
                sys.stderr.flush()
                time.sleep(0.01)
            sys.stderr.write("\\n")
            print("done")
            """
        )
    )
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    launch = job_launch(
        run_dir, {"script": "bar.py", "resources": {"nproc": 2, "gpus": 0}}, script=script
    )
    log = tmp_path / "output.log"
    with open(log, "wb") as out:
        code = subprocess.run(
            launch.argv, cwd=run_dir, env=launch.env, stdout=out, stderr=subprocess.STDOUT
        ).returncode
    assert code == 0, log.read_text()
    lines = log.read_text().splitlines()
    bars = [line for line in lines if "%" in line]
    assert sorted(bars) == ["[rank0]: 100%", "[rank1]: 100%"], lines
    assert sorted(line for line in lines if "done" in line) == ["[rank0]: done", "[rank1]: done"]
