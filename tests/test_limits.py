"""worker/limits.py: the errors that name a limit, the keeper's options and what the keeper
does with them (a real keeper, a real sandbox with a sized /tmp), the disk measured."""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.test_cgroups import made_long_ago
from tests.waits import wait_for
from worker import cgroups
from worker.launcher import Launch
from worker.limits import (
    Guard,
    RunLimits,
    cgroup_name,
    describe,
    installation_parent,
    keeper_options,
    prepare,
    sweep,
    tmp_bytes,
)
from worker.limits import decide as decide_limits
from worker.process import JobProcess
from worker.sandbox import SandboxSpec, decide, interpreter_paths, wrap

LIMITS = RunLimits(memory_gb=8, cpus=4, disk_gb=50, max_processes=4096)
MB = 1000**2


def test_each_error_names_its_limit() -> None:
    assert LIMITS.out_of_memory() == "out of memory: the run's limit is 8 GiB"
    assert LIMITS.too_many_processes() == "too many processes: the run's limit is 4096"
    assert LIMITS.disk_full() == "disk full: the run's limit is 50 GB"
    small = RunLimits(memory_gb=0.5, cpus=0.5, disk_gb=0.2, max_processes=200)
    assert small.out_of_memory() == "out of memory: the run's limit is 0.5 GiB"
    assert small.disk_full() == "disk full: the run's limit is 0.2 GB"
    assert small.disk_bytes == 200 * MB and small.memory_bytes == 512 * 1024**2


def test_limits_travel_through_the_job_record_as_json() -> None:
    held = RunLimits(1, 2, 3, 64, cgroup=("/sys/fs/cgroup/memory/t/x", "/sys/fs/cgroup/pids/t/x"))
    assert RunLimits.loads(json.loads(held.dumps())) == held


def test_a_cgroup_name_tells_two_deployments_runs_apart(tmp_path: Path) -> None:
    one = cgroup_name(tmp_path / "a", 7, 2)
    assert one.endswith("-run-7-2") and one == cgroup_name(tmp_path / "a", 7, 2)
    assert one != cgroup_name(tmp_path / "b", 7, 2)


def test_the_keeper_enters_the_cgroup_or_falls_back_to_rlimits() -> None:
    fsize = f"--rlimit={resource.RLIMIT_FSIZE}={50 * 1000**3}"
    held = RunLimits(8, 4, 50, 4096, cgroup=("/cg/memory/x", "/cg/pids/x"))
    assert keeper_options(held, own_uid=True, gpus=False) == [
        "--cgroup=/cg/memory/x",
        "--cgroup=/cg/pids/x",
        fsize,
    ]
    nproc = f"--rlimit={resource.RLIMIT_NPROC}=4096"
    address = f"--rlimit={resource.RLIMIT_AS}={8 * 1024**3}"
    assert keeper_options(LIMITS, own_uid=True, gpus=False) == [fsize, nproc, address]
    # The worker's own uid is shared with its other processes; CUDA reserves address space.
    assert keeper_options(LIMITS, own_uid=False, gpus=True) == [fsize]


def keeper(tmp_path: Path, options: list[str], code: str) -> tuple[int, str]:
    exit_file = tmp_path / "exit"
    done = subprocess.run(
        [sys.executable, "-I", "-m", "worker.keeper", "--exit-file", str(exit_file), *options]
        + ["--", sys.executable, "-c", code],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])},
        capture_output=True,
        text=True,
        timeout=60,
    )
    return int(exit_file.read_text()), done.stderr


def test_a_file_cannot_grow_past_disk_gb_and_the_run_says_disk_full(tmp_path: Path) -> None:
    limits = RunLimits(8, 4, 0.001, 4096)  # 1 MB
    code, stderr = keeper(
        tmp_path,
        keeper_options(limits, own_uid=False, gpus=True),
        "open('big', 'wb').write(b'0' * 2_000_000)",
    )
    # Python ignores SIGXFSZ: the write fails (EFBIG) instead of killing the writer.
    assert code == 1 and "File too large" in stderr, stderr
    assert (tmp_path / "big").stat().st_size == 1_000_000
    assert Guard(limits, tmp_path, disk_interval=1).verdict(code) == limits.disk_full()


def test_a_job_whose_cgroup_cannot_be_entered_never_starts(tmp_path: Path) -> None:
    code, stderr = keeper(
        tmp_path, [f"--cgroup={tmp_path / 'missing'}"], "open('started', 'w').write('x')"
    )
    assert code == 126 and "could not apply the run's limits" in stderr
    assert not (tmp_path / "started").exists()


def test_the_disk_check_counts_the_run_folder(tmp_path: Path) -> None:
    limits = RunLimits(8, 4, 0.002, 4096)  # 2 MB
    guard = Guard(limits, tmp_path, disk_interval=1)
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "a.bin").write_bytes(os.urandom(1_500_000))
    assert guard.verdict(1) is None
    (tmp_path / "b.bin").write_bytes(os.urandom(1_000_000))
    assert guard.verdict(1) == limits.disk_full()
    assert guard.disk_used >= 2_500_000


def test_tmp_is_not_measured_through_a_process_whose_root_is_still_the_hosts(
    tmp_path: Path,
) -> None:
    """Issue 37: bwrap's init measured before it entered the sandbox's root gave the host's
    /tmp file system's whole use, and a run that wrote nothing failed "disk full"."""
    (tmp_path / "big.bin").write_bytes(os.urandom(1_000_000))
    host_side = subprocess.Popen(["sleep", "30"], cwd=tmp_path)
    try:
        assert tmp_bytes(host_side.pid) == 0
        guard = Guard(RunLimits(8, 4, 0.002, 4096), tmp_path / "nothing", disk_interval=1)
        guard.disk_used = tmp_bytes(host_side.pid)
        assert guard.verdict(0) is None
    finally:
        host_side.kill()
        host_side.wait()


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
def test_the_jobs_tmp_and_shm_have_the_runs_sizes() -> None:
    isolation = decide("auto", 200000)
    if not isolation.enabled or not isolation.sized_tmpfs:
        pytest.skip(f"no sandbox with sized tmpfs here: {isolation.reason}")
    root = Path(tempfile.mkdtemp(prefix="torchyard-limits-"))
    try:
        root.chmod(0o755)
        run_dir = root / "run"
        run_dir.mkdir()
        uid = 200003 if isolation.as_root else None
        if uid is not None:
            os.chown(run_dir, uid, uid)
        spec = SandboxSpec(
            run_dir=run_dir,
            home=run_dir,
            read_only=interpreter_paths(),
            uid=uid,
            bwrap=isolation.bwrap,
            setpriv=isolation.setpriv,
            tmp_bytes=8 * 1024**2,
            shm_bytes=4 * 1024**2,
        )
        code = (
            "import os, time\n"
            "for d in ('/tmp', '/dev/shm'):\n"
            "    s = os.statvfs(d); print(d, s.f_blocks * s.f_frsize)\n"
            "try:\n"
            "    open('/tmp/fill', 'wb').write(b'0' * 16 * 2**20)\n"
            "except OSError as exc:\n"
            "    print('refused', exc.errno, flush=True)\n"
            "while not os.path.exists('measured'):\n"
            "    time.sleep(0.05)\n"
        )
        launch = wrap(Launch([sys.executable, "-c", code], dict(os.environ), run_dir), spec)
        log = root / "job.log"
        job = JobProcess(launch, log_path=log, cwd=run_dir, token="t", sandboxed=True)
        wait_for(lambda: "refused" in log.read_text(), timeout=60, what=log.read_text)
        # The worker's measure of the job's own /tmp: what the job wrote (up to its size).
        assert 7 * 1024**2 < tmp_bytes(job.members()[0]) <= 8 * 1024**2
        (run_dir / "measured").touch()
        assert job.wait() == 0, log.read_text()
        lines = log.read_text().splitlines()
        assert lines == [f"/tmp {8 * 1024**2}", f"/dev/shm {4 * 1024**2}", "refused 28"], lines
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_the_worker_says_at_start_how_it_holds_jobs_to_their_limits() -> None:
    off = describe(decide_limits("off", "torchyard"))
    assert off.startswith("job limits: rlimits only (cgroups are off (TORCHYARD_JOB_CGROUPS=off))")
    parent = f"torchyard-test-{os.getpid()}"
    here = decide_limits("auto", parent, 400)
    try:
        if os.geteuid() == 0 and cgroups.find_hierarchy() is not None:
            assert here.hierarchy is not None, here.reason
            said = describe(here)
            assert said.startswith("job limits: a cgroup per run (cgroup v"), said
            assert said.endswith(
                "the jobs together weigh 400 against 100 for each other busy "
                "group of the host (TORCHYARD_JOB_CPU_WEIGHT)"
            ), said
    finally:
        if here.hierarchy is not None:
            cgroups.remove([root / parent for _, root in here.hierarchy.roots])


def test_each_installation_has_a_parent_cgroup_of_its_own(tmp_path: Path) -> None:
    one = installation_parent("torchyard", tmp_path / "a")
    assert one.startswith("torchyard-") and one == installation_parent("torchyard", tmp_path / "a")
    assert one != installation_parent("torchyard", tmp_path / "b")


def test_the_installations_cpu_weight_is_set_on_its_parent(tmp_path: Path) -> None:
    parent = installation_parent(f"torchyard-test-{os.getpid()}", tmp_path)
    here = decide_limits("auto", parent, 250)
    if here.hierarchy is None:
        pytest.skip(f"no cgroups here: {here.reason}")
    try:
        assert not here.weight_failed
        roots = dict(here.hierarchy.roots)
        if here.hierarchy.version == 1:
            assert (roots["cpu"] / parent / "cpu.shares").read_text().strip() == "2560"
        else:
            assert (roots["unified"] / parent / "cpu.weight").read_text().strip() == "250"
    finally:
        cgroups.remove([root / parent for _, root in here.hierarchy.roots])


def test_a_starting_worker_sweeps_its_deployments_empty_cgroups(tmp_path: Path) -> None:
    here = decide_limits("auto", f"torchyard-test-{os.getpid()}")
    if here.hierarchy is None:
        pytest.skip(f"no cgroups here: {here.reason}")
    roots = here.hierarchy.roots
    legacy = f"torchyard-test-legacy-{os.getpid()}"
    held = prepare(here, LIMITS, cgroup_name(tmp_path / "data", 3, 1))
    another = prepare(here, LIMITS, cgroup_name(tmp_path / "other", 3, 1))
    try:
        assert all(Path(f).is_dir() for f in held.cgroup + another.cgroup)
        made_long_ago([Path(f) for f in held.cgroup + another.cgroup])
        # ... and one of its own under the parent every installation shared before (issue 39).
        old = [root / legacy / cgroup_name(tmp_path / "data", 2, 1) for _, root in roots]
        for folder in old:
            folder.mkdir(parents=True)
        made_long_ago(old)
        sweep(here, tmp_path / "data", legacy)
        assert not any(Path(f).exists() for f in held.cgroup + tuple(map(str, old)))
        assert all(Path(f).is_dir() for f in another.cgroup)  # another deployment's
    finally:
        cgroups.remove([root / here.parent for _, root in here.hierarchy.roots])
        cgroups.remove([root / legacy for _, root in here.hierarchy.roots])
