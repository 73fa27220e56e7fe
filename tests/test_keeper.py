"""worker/keeper.py on its own: the job's exit status recorded with the disk full (its bytes
were taken at the keeper's start), and the job's cgroups removed by the keeper when it ends
unless a limit was hit (the worker reads those counters to name it). Issue 39."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from worker import cgroups
from worker.keeper import read_exit_file

HIERARCHY = cgroups.find_hierarchy()
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs, makes cgroups: root")
MIB = 1024**2


def keeper(*options: str, command: list[str]) -> int:
    argv = [sys.executable, "-I", "-m", "worker.keeper", *options, "--", *command]
    repo = Path(__file__).resolve().parent.parent
    return subprocess.run(argv, cwd=repo, timeout=60, capture_output=True).returncode


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs of this test's own."""
    mount = tmp_path / "tiny"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], check=True)
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


@as_root
def test_a_job_that_fills_the_disk_has_its_exit_status_recorded(tiny_disk: Path) -> None:
    exit_file = tiny_disk / "7.exit"
    fill = f"head -c 4M /dev/zero > {tiny_disk / 'fill'}; exit 3"
    assert keeper(f"--exit-file={exit_file}", command=["sh", "-c", fill]) == 3
    assert os.statvfs(tiny_disk).f_bavail == 0  # full while the keeper wrote the status
    assert read_exit_file(exit_file) == 3


def test_an_exit_file_not_written_yet_says_nothing(tmp_path: Path) -> None:
    exit_file = tmp_path / "8.exit"
    exit_file.write_text(" " * 15 + "\n")  # reserved at the keeper's start
    assert read_exit_file(exit_file) is None


@pytest.fixture
def parent() -> Iterator[str]:
    if HIERARCHY is None or os.geteuid() != 0:
        pytest.skip("needs root and a cgroup hierarchy")
    name = f"torchyard-keeper-test-{os.getpid()}"
    yield name
    cgroups.remove([root / name for _, root in HIERARCHY.roots])


def test_the_keeper_removes_its_jobs_cgroups_when_it_ends(parent: str) -> None:
    assert HIERARCHY is not None
    folders = cgroups.create(HIERARCHY, parent, "run-1-1", cgroups.Limits(256 * MIB, 1.0, 64))
    options = [f"--cgroup={f}" for f in folders]
    assert keeper(*options, command=["true"]) == 0
    assert not any(f.exists() for f in folders)


def test_a_cgroup_whose_limit_was_hit_is_left_to_the_worker(parent: str) -> None:
    assert HIERARCHY is not None
    folders = cgroups.create(HIERARCHY, parent, "run-2-1", cgroups.Limits(64 * MIB, 1.0, 64))
    hog = [sys.executable, "-c", "held = [bytearray(16 * 2**20) for _ in range(16)]"]
    assert keeper(*[f"--cgroup={f}" for f in folders], command=hog) == -9
    assert all(f.exists() for f in folders)
    assert cgroups.oom_kills(folders) >= 1  # what the worker names the limit by
    assert cgroups.remove(folders)
