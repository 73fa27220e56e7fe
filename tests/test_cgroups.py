"""worker/cgroups.py on this machine's real cgroupfs: the layout found, limits written,
processes held to them (a fork bomb at pids.max, a hog killed at its memory limit) and the
counters that say so, folders removed with what was left inside."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from worker import cgroups
from worker.cgroups import Hierarchy, Limits

HIERARCHY = cgroups.find_hierarchy()
needs_cgroups = pytest.mark.skipif(
    HIERARCHY is None or os.geteuid() != 0, reason="needs root and a cgroup hierarchy"
)
MIB = 1024**2


def test_a_unified_hierarchy_with_the_controllers_is_v2(tmp_path: Path) -> None:
    root = tmp_path / "unified"
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpuset cpu io memory hugetlb pids rdma\n")
    mounts = tmp_path / "mounts"
    mounts.write_text(f"cgroup2 {root} cgroup2 rw,nosuid,nodev,noexec,relatime 0 0\n")
    assert cgroups.find_hierarchy(mounts) == Hierarchy(2, (("unified", root),))


def test_v1_needs_each_controller_and_a_bare_unified_mount_is_not_v2(tmp_path: Path) -> None:
    unified = tmp_path / "unified"
    unified.mkdir()
    (unified / "cgroup.controllers").write_text("\n")  # systemd's hybrid layout
    lines = [f"cgroup2 {unified} cgroup2 rw 0 0"]
    lines += [f"cgroup /c/{c} cgroup rw,relatime,{c} 0 0" for c in ("memory", "cpu")]
    mounts = tmp_path / "mounts"
    mounts.write_text("\n".join(lines) + "\n")
    assert cgroups.find_hierarchy(mounts) is None  # no pids
    mounts.write_text("\n".join([*lines, "cgroup /c/pids cgroup rw,pids 0 0"]) + "\n")
    found = cgroups.find_hierarchy(mounts)
    assert found is not None and found.version == 1
    assert dict(found.roots) == {c: Path(f"/c/{c}") for c in ("memory", "cpu", "pids")}


@pytest.fixture
def parent() -> Iterator[str]:
    """A parent folder of this test's own, removed afterwards."""
    assert HIERARCHY is not None
    name = f"torchyard-test-{os.getpid()}"
    yield name
    cgroups.remove([root / name for _, root in HIERARCHY.roots])


def _in_cgroup(folders: tuple[Path, ...], code: str) -> subprocess.CompletedProcess[str]:
    """A Python child that enters the folders before it runs `code` (as worker.keeper does)."""
    enter = f"import os\nfor f in {[str(f) for f in folders]!r}:\n"
    enter += "    open(os.path.join(f, 'cgroup.procs'), 'w').write(str(os.getpid()))\n"
    return subprocess.run(
        [sys.executable, "-c", enter + code], capture_output=True, text=True, timeout=120
    )


@needs_cgroups
def test_limits_are_written_and_removal_kills_what_is_left(parent: str) -> None:
    assert HIERARCHY is not None
    folders = cgroups.create(HIERARCHY, parent, "run-1-1", Limits(300 * MIB, 0.5, 64))
    assert all(f.is_dir() for f in folders)
    by_name = {f.parent.parent.name if HIERARCHY.version == 1 else "": f for f in folders}
    if HIERARCHY.version == 1:
        assert (by_name["memory"] / "memory.limit_in_bytes").read_text().strip() == str(300 * MIB)
        assert (by_name["cpu"] / "cpu.cfs_quota_us").read_text().strip() == "50000"
        assert (by_name["pids"] / "pids.max").read_text().strip() == "64"
    else:
        assert (folders[0] / "memory.max").read_text().strip() == str(300 * MIB)
        assert (folders[0] / "cpu.max").read_text().split() == ["50000", "100000"]
    sleeper = subprocess.Popen(["sleep", "300"])
    cgroups.join(folders, sleeper.pid)
    assert cgroups.pids(folders) == {sleeper.pid}
    assert cgroups.remove(folders)
    assert sleeper.wait(timeout=10) == -9
    assert not any(f.exists() for f in folders)
    assert cgroups.remove(folders)  # again: nothing to do


@needs_cgroups
def test_a_nested_parent_is_made_level_by_level_and_weighs_among_its_siblings(
    parent: str,
) -> None:
    """TORCHYARD_JOB_CGROUP_PARENT below another group (as Docker's --cgroup-parent): the
    installation's parent and the job's folder are made inside it, the weight is written at the
    installation's level, and the job's processes are inside the outer group."""
    assert HIERARCHY is not None
    nested = f"{parent}/torchyard-abc"
    cgroups.set_weight(HIERARCHY, nested, 400)
    folders = cgroups.create(HIERARCHY, nested, "run-1-1", Limits(300 * MIB, 0.5, 64))
    roots = dict(HIERARCHY.roots)
    if HIERARCHY.version == 1:
        assert (roots["cpu"] / nested / "cpu.shares").read_text().strip() == "4096"
        assert (roots["cpu"] / nested / "run-1-1") in folders
    sleeper = subprocess.Popen(["sleep", "300"])
    cgroups.join(folders, sleeper.pid)
    assert cgroups.pids(folders) == {sleeper.pid}
    for folder, (_, root) in zip(folders, HIERARCHY.roots, strict=True):
        assert folder.parent.parent == root / parent  # inside the outer group
    assert cgroups.remove(folders)
    assert sleeper.wait(timeout=10) == -9
    assert cgroups.remove([root / nested for _, root in HIERARCHY.roots])


@needs_cgroups
def test_a_fork_bomb_is_held_at_pids_max_and_counted(parent: str) -> None:
    assert HIERARCHY is not None
    folders = cgroups.create(HIERARCHY, parent, "bomb", Limits(512 * MIB, 1.0, 50))
    done = _in_cgroup(
        folders,
        "import time\nn = 0\n"
        "try:\n"
        "    for _ in range(5000):\n"
        "        if os.fork() == 0:\n"
        "            os.close(1); os.close(2); time.sleep(300); os._exit(0)\n"
        "        n += 1\n"
        "except OSError:\n"
        "    print(n)\n",
    )
    assert done.returncode == 0, done.stderr
    assert 0 < int(done.stdout) < 50  # held at the limit, the parent counted in it
    assert cgroups.forks_refused(folders) >= 1
    assert cgroups.oom_kills(folders) == 0
    assert len(cgroups.pids(folders)) == int(done.stdout)  # the sleepers
    assert cgroups.remove(folders)


@needs_cgroups
def test_a_memory_hog_is_killed_at_its_limit_and_counted(parent: str) -> None:
    assert HIERARCHY is not None
    folders = cgroups.create(HIERARCHY, parent, "hog", Limits(128 * MIB, 1.0, 64))
    done = _in_cgroup(folders, "held = [bytearray(16 * 2**20) for _ in range(64)]\n")
    assert done.returncode == -9, (done.returncode, done.stderr)
    assert cgroups.oom_kills(folders) >= 1
    assert cgroups.forks_refused(folders) == 0
    assert cgroups.remove(folders)


@needs_cgroups
def test_the_probe_says_this_machine_can(parent: str) -> None:
    assert HIERARCHY is not None
    assert cgroups.probe(HIERARCHY, parent) is None


def made_long_ago(folders: Sequence[Path]) -> None:
    """As if made before cgroups.LEFTOVER_AGE_SECONDS."""
    then = time.time() - cgroups.LEFTOVER_AGE_SECONDS - 60
    for folder in folders:
        os.utime(folder, (then, then))


@needs_cgroups
def test_leftover_empty_cgroups_go_and_busy_ones_stay(parent: str) -> None:
    assert HIERARCHY is not None
    empty = cgroups.create(HIERARCHY, parent, "abc-run-1-1", Limits(64 * MIB, 1.0, 16))
    busy = cgroups.create(HIERARCHY, parent, "abc-run-2-1", Limits(64 * MIB, 1.0, 16))
    other = cgroups.create(HIERARCHY, parent, "xyz-run-1-1", Limits(64 * MIB, 1.0, 16))
    # Just made for a job whose keeper has not entered it yet (another worker's): it stays.
    young = cgroups.create(HIERARCHY, parent, "abc-run-3-1", Limits(64 * MIB, 1.0, 16))
    made_long_ago(empty + busy + other)
    sleeper = subprocess.Popen(["sleep", "300"])
    try:
        cgroups.join(busy, sleeper.pid)
        cgroups.remove_empty(HIERARCHY, parent, "abc-run-")
        assert not any(f.exists() for f in empty)
        assert all(f.exists() for f in busy + other + young) and sleeper.poll() is None
    finally:
        sleeper.kill()
        sleeper.wait()
