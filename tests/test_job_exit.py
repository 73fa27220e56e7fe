"""How a finished job ends: status 0 without the interpreter's teardown, but with everything a
normal exit would still do (the script's non-daemon threads joined, atexit handlers run,
output flushed) and with the failure paths unchanged.

The teardown is skipped because a DDP model keeps gloo's threads alive past
destroy_process_group, and finalising under them aborted a finished rank in CI
(torchyard/job.exit_skipping_teardown).
"""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

import pytest

from tests.test_job_entry import run_script

SCRIPT = textwrap.dedent(
    """
    import atexit, os, sys, threading, time
    from pathlib import Path

    import torch
    from torch import nn

    from torchyard.sdk import init

    run = init()
    out = Path(os.environ["EXIT_TEST_DIR"])
    model = nn.parallel.DistributedDataParallel(nn.Linear(4, 2)) if run.world_size > 1 else None
    if model is not None:
        model(torch.randn(8, 4)).sum().backward()

    def late_writer():
        time.sleep(0.3)
        (out / f"thread-{run.rank}").write_text("done")

    threading.Thread(target=late_writer).start()
    atexit.register(lambda: (out / f"atexit-{run.rank}").write_text("ran"))
    run.log(step=1, loss=0.5)
    sys.stdout.write(f"last words of rank {run.rank} without a newline")
    if os.environ.get("EXIT_TEST_MODE") == "sys.exit(0)":
        sys.exit(0)
    if os.environ.get("EXIT_TEST_MODE") == "sys.exit(3)":
        sys.exit(3)
    """
)


def run_script_job(tmp_path: Path, nproc: int, mode: str = "") -> subprocess.CompletedProcess:
    env = {"EXIT_TEST_DIR": str(tmp_path), "EXIT_TEST_MODE": mode}
    return run_script(tmp_path, SCRIPT, nproc=nproc, env=env)[1]


@pytest.mark.slow
def test_a_finished_ddp_script_exits_zero_after_its_threads_and_atexit_handlers(
    tmp_path: Path,
) -> None:
    result = run_script_job(tmp_path, nproc=2)
    assert result.returncode == 0, result.stderr
    for rank in (0, 1):
        assert (tmp_path / f"thread-{rank}").read_text() == "done"
        assert (tmp_path / f"atexit-{rank}").read_text() == "ran"
        assert f"last words of rank {rank} without a newline" in result.stdout + result.stderr
    # Under torchrun a rank's stderr is its stdout (one ordered stream, torchyard.job).
    assert "run 1 finished" in result.stdout + result.stderr
    spool = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert len(spool) == 1


@pytest.mark.parametrize(("mode", "code"), [("sys.exit(0)", 0), ("sys.exit(3)", 3)])
def test_sys_exit_in_a_script_keeps_its_meaning(tmp_path: Path, mode: str, code: int) -> None:
    result = run_script_job(tmp_path, nproc=1, mode=mode)
    assert result.returncode == code, result.stderr
    assert (tmp_path / "atexit-0").read_text() == "ran"
    assert (tmp_path / "thread-0").read_text() == "done"
    assert "last words of rank 0 without a newline" in result.stdout
    finished = "run 1 finished" in result.stdout + result.stderr
    assert finished is (code == 0)
    assert ("run failed: SystemExit: 3" in result.stdout + result.stderr) is (code == 3)
