"""The Makefile's apt steps (apt_install: `make sandbox`, `make browser`, `make slurm`, so
`make up`): no apt at all when the tools are here, only the missing packages otherwise, and a
lock held by another apt run waited for with a message, never a failure at once (issue 41).
apt-get is a stand-in recording its arguments; the tools are stand-ins on a PATH of their own."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.stack import REPO

TOOLS = ("bwrap", "setpriv", "slirp4netns", "ip", "nft")


def _bin(tmp_path: Path, tools: tuple[str, ...]) -> Path:
    """A PATH holding only the commands the recipe needs, the tools given, and apt-get."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("id", "sleep", "env", "python3"):
        found = os.path.realpath(sys.executable) if name == "python3" else shutil.which(name)
        assert found, name
        (bin_dir / name).symlink_to(found)
    for name in tools:
        (bin_dir / name).write_text("#!/bin/sh\n")
        (bin_dir / name).chmod(0o755)
    apt = bin_dir / "apt-get"
    apt.write_text(f'#!/bin/sh\necho "$@" >> {tmp_path / "apt.log"}\n')
    apt.chmod(0o755)
    return bin_dir


def _make(tmp_path: Path, bin_dir: Path, lock: Path) -> subprocess.Popen[str]:
    env = {"PATH": str(bin_dir), "HOME": str(tmp_path)}
    make = shutil.which("make")
    assert make
    return subprocess.Popen(
        [make, "-s", "sandbox", "PYTHON=python3", f"APT_LOCK={lock}", "APT_WAIT=30"],
        cwd=REPO,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )


def _apt_calls(tmp_path: Path) -> list[str]:
    log = tmp_path / "apt.log"
    return log.read_text().splitlines() if log.exists() else []


def test_every_tool_here_runs_no_apt_at_all(tmp_path: Path) -> None:
    proc = _make(tmp_path, _bin(tmp_path, TOOLS), tmp_path / "lock")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert _apt_calls(tmp_path) == [] and err == ""


@pytest.mark.skipif(os.geteuid() != 0, reason="installs as root (else through sudo)")
def test_a_missing_tool_installs_its_package_alone_after_waiting_for_a_held_lock(
    tmp_path: Path,
) -> None:
    lock = tmp_path / "lock"
    with lock.open("a") as held:
        fcntl.lockf(held, fcntl.LOCK_EX | fcntl.LOCK_NB)  # another apt run holds it
        proc = _make(tmp_path, _bin(tmp_path, TOOLS[:-1]), lock)  # nft missing
        assert proc.stderr is not None
        first = proc.stderr.readline()
        assert first.startswith(f"make sandbox: another apt or dpkg run holds {lock}; waiting")
        assert _apt_calls(tmp_path) == []  # nothing ran while the lock was held
        fcntl.lockf(held, fcntl.LOCK_UN)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "make sandbox: installing nftables with apt" in err
    assert _apt_calls(tmp_path) == [
        "-o DPkg::Lock::Timeout=30 update -q",
        "-o DPkg::Lock::Timeout=30 install -y -q --no-install-recommends nftables",
    ]
