"""A run's system series (worker/system_metrics.py): the sampler over a real process tree
(a busy child, a child holding memory), the GPU series from the NVML stand-in, the points as
the worker stores them (and across a requeue), and end to end through the real worker (a CPU
run of the live stack, which samples every second: tests/conftest.py; a job whose memory is
in a detached grandchild). The GPU series end to end, on a fake inventory with the stand-in,
is in tests/test_gpu_leases.py; a job's own sys/ keys are refused in test_spool_lines.py and
test_tensorboard_events.py."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest
from sqlalchemy import update

import tests.nvml_standin as standin
from app.db import session_scope
from app.gpus.models import GpuLease
from app.metrics.ingest import ingest_points
from app.metrics.service import count_points, list_keys, read_series
from app.metrics.system_series import series_start
from app.runs.models import Run
from app.runs.state import lifecycle, recovery
from app.settings import get_settings
from app.timeutil import utcnow
from tests.conftest import WORKSPACE_DIR, wait_for_status
from tests.factories import make_run
from worker import gpus
from worker.system_metrics import (
    CPU_PERCENT,
    RSS_MB,
    ProcessTreeSampler,
    SystemSeries,
    gpu_values,
    read_proc,
)

BUSY = "while True: pass"
# Touches every page of 200 MiB, says so, then sleeps: RSS holds the whole buffer.
HOLD = (
    "import sys, time; b = bytearray(200 * 1024 * 1024)\n"
    "for i in range(0, len(b), 4096): b[i] = 1\n"
    "print('ready', flush=True); time.sleep(60)"
)


@pytest.fixture
def children() -> Iterator[list[subprocess.Popen]]:
    """A busy child and a child holding 200 MiB, stopped after the test."""
    busy = subprocess.Popen([sys.executable, "-c", BUSY])
    hold = subprocess.Popen([sys.executable, "-c", HOLD], stdout=subprocess.PIPE, text=True)
    try:
        assert hold.stdout is not None and hold.stdout.readline().strip() == "ready"
        yield [busy, hold]
    finally:
        for proc in (busy, hold):
            proc.kill()
            proc.wait()
        if hold.stdout is not None:
            hold.stdout.close()


def test_the_tree_sampler_sums_cpu_over_wall_time_and_rss(children) -> None:
    busy, hold = children
    sampler = ProcessTreeSampler()
    first = sampler.sample([busy.pid, hold.pid])
    # The first sample: each process at its average since it started (busy spun since then).
    assert first[CPU_PERCENT] > 10
    time.sleep(1.5)
    got = sampler.sample([busy.pid, hold.pid, 2**22 + 7])  # a pid that is no process: skipped
    # One spinning process is at most one core (100); on a shared box it gets less.
    assert 15 < got[CPU_PERCENT] <= 100 * (os.cpu_count() or 1) + 5, got
    assert 200 <= got[RSS_MB] < 1000, got
    # The idle holder alone: its memory, and next to no CPU.
    sampler.sample([hold.pid])
    time.sleep(1.0)
    idle = sampler.sample([hold.pid])
    assert idle[CPU_PERCENT] < 10 and 200 <= idle[RSS_MB] < 500, idle


def test_a_process_started_between_samples_counts_whole_and_a_gone_one_not() -> None:
    sampler = ProcessTreeSampler()
    assert sampler.sample([]) == {}  # nothing alive: no point (not a 0 MiB one)
    window = time.monotonic()
    # Spins 0.3 s of CPU (however long a loaded box takes), then idles: all of that CPU
    # falls in the next window.
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time\nwhile time.process_time() < 0.3: pass\n"
            "print('spun', flush=True)\ntime.sleep(30)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "spun"
        proc = read_proc(child.pid)
        got = sampler.sample([child.pid])
        elapsed = time.monotonic() - window
        assert proc is not None and proc.cpu_seconds >= 0.25  # /proc counts in ticks
        assert got[CPU_PERCENT] >= 100 * proc.cpu_seconds / elapsed * 0.9, (got, elapsed)
    finally:
        child.kill()
        child.wait()
        if child.stdout is not None:
            child.stdout.close()
    assert read_proc(child.pid) is None
    assert sampler.sample([child.pid]) == {}


def test_gpu_values_are_the_leased_gpus_from_the_nvml_edge() -> None:
    got = gpu_values((1, 3), standin)
    assert got == {
        "sys/gpu1/util": 20.0,
        "sys/gpu1/mem_mb": 2048.0,
        "sys/gpu1/power_w": 51.0,
        "sys/gpu3/util": 40.0,
        "sys/gpu3/mem_mb": 4096.0,
        "sys/gpu3/power_w": 53.0,
    }
    assert gpu_values((), standin) == {}
    assert gpu_values((99,), standin) == {}  # a GPU NVML does not list


def test_the_nvml_module_setting_replaces_every_nvml_call(monkeypatch) -> None:
    monkeypatch.setattr(get_settings(), "nvml_module", "tests.nvml_standin")
    assert gpus.nvml_gpus() == tuple(range(8))
    stats = gpus.read_gpu_stats()
    assert stats is not None and stats[2]["power_w"] == 52.0 and stats[2]["utilization"] == 30.0
    # By path: a worker started with -P (no current directory on sys.path) loads it too.
    monkeypatch.setattr(get_settings(), "nvml_module", standin.__file__)
    assert gpu_values((0,), None)["sys/gpu0/power_w"] == 50.0
    monkeypatch.setattr(get_settings(), "nvml_module", "no_such_nvml_module")
    assert gpus.read_gpu_stats() is None and gpus.nvml_gpus() == ()
    monkeypatch.setattr(get_settings(), "nvml_module", "/nonexistent/nvml.py")
    assert gpus.read_gpu_stats() is None


def test_points_are_stored_at_whole_seconds_since_the_run_started(children) -> None:
    busy, hold = children
    run_id = make_run(status="running")
    with session_scope() as session:
        session.execute(
            update(Run)
            .where(Run.id == run_id)
            .values(started_at=utcnow() - timedelta(seconds=42), gpu_indices="0,2")
        )
    series = SystemSeries(run_id, interval=1.0, nvml=standin)
    assert series.due() and not series.due()  # at once, then after the interval
    with session_scope() as session:
        assert series.record(session, [busy.pid, hold.pid]) == 8  # cpu, rss, 3 per GPU
    with session_scope() as session:
        assert list_keys(session, run_id=run_id) == [
            "sys/cpu_percent",
            "sys/gpu0/mem_mb",
            "sys/gpu0/power_w",
            "sys/gpu0/util",
            "sys/gpu2/mem_mb",
            "sys/gpu2/power_w",
            "sys/gpu2/util",
            "sys/rss_mb",
        ]
        got = read_series(session, run_id=run_id)
    assert got["sys/rss_mb"]["step"][0] in (42, 43)
    assert got["sys/rss_mb"]["value"][0] >= 200
    assert got["sys/gpu2/util"]["value"] == [30.0]


def test_a_requeued_run_keeps_its_series_and_the_next_attempt_continues_after_them() -> None:
    run_id = make_run(status="running")
    first = utcnow() - timedelta(seconds=200)
    with session_scope() as session:
        session.execute(update(Run).where(Run.id == run_id).values(started_at=first))
        t0 = first.timestamp()
        points = [(k, s, 1.0, t0 + s) for k in (CPU_PERCENT, RSS_MB) for s in range(61)]
        points += [("train/loss", s, 1.0, t0 + s) for s in range(1, 6)]
        ingest_points(session, run_id=run_id, points=points)
    with session_scope() as session:  # no checkpoint: every training step goes
        run = session.get(Run, run_id)
        assert run is not None and recovery.requeue(session, run=run, reason="worker lost")
    with session_scope() as session:
        assert count_points(session, run_id=run_id, key="train/loss") == 0
        assert count_points(session, run_id=run_id, key=CPU_PERCENT) == 61  # seconds, kept
        again = utcnow() - timedelta(seconds=5)
        assert lifecycle.start(session, run_id=run_id, host="h", gpu_indices="", started_at=again)
    series = SystemSeries(run_id, interval=10.0)
    with session_scope() as session:
        assert series.record(session, [os.getpid()]) == 2
    with session_scope() as session:
        steps = read_series(session, run_id=run_id, keys=[CPU_PERCENT])[CPU_PERCENT]["step"]
    assert steps[:61] == list(range(61)) and steps[61:] in ([66], [67])  # 61 + 5 s


def test_each_node_of_a_multi_node_run_stores_its_own_series_and_gpus() -> None:
    """Node k's sampler writes sys/node<k>/..., with the GPUs its own host leases (the run's
    gpu_indices are node 0's); node 0's are labelled too, so neither hides the other."""
    config = {"recipe": "tiny_mlp", "params": {}, "resources": {"nodes": 2, "nproc": 2, "gpus": 2}}
    run_id = make_run(config=config, status="running")
    host_a, host_b = f"a-{run_id}", f"b-{run_id}"
    with session_scope() as session:
        session.execute(
            update(Run)
            .where(Run.id == run_id)
            .values(started_at=utcnow() - timedelta(seconds=9), gpu_indices="0,1")
        )
        for host, index in [(host_a, 0), (host_a, 1), (host_b, 2), (host_b, 3)]:
            session.add(GpuLease(host=host, gpu_index=index, run_id=run_id))
    for node, host in ((0, host_a), (1, host_b)):
        series = SystemSeries(run_id, interval=1.0, nvml=standin, node=node, host=host)
        with session_scope() as session:
            assert series.record(session, [os.getpid()]) == 8
    with session_scope() as session:
        keys = list_keys(session, run_id=run_id)
    assert not [k for k in keys if not k.startswith(("sys/node0/", "sys/node1/"))]
    assert {k.split("/")[2] for k in keys if k.startswith("sys/node0/")} == {
        "cpu_percent", "rss_mb", "gpu0", "gpu1"
    }  # fmt: skip
    assert {k.split("/")[2] for k in keys if k.startswith("sys/node1/")} == {
        "cpu_percent", "rss_mb", "gpu2", "gpu3"
    }  # fmt: skip
    with session_scope() as session:  # a later attempt of node 1 continues after its own
        start = series_start(session, run_id=run_id, keys=(CPU_PERCENT,), node=1, host=host_b)
    assert start is not None and start.key(CPU_PERCENT) == "sys/node1/cpu_percent"
    assert start.gpu_indices == (2, 3)


# --- end to end: the live stack's worker samples every second ---------------------------------


@pytest.mark.slow
@pytest.mark.local_only  # the sampler over a real job; its rows: quick tests, both stacks
def test_a_cpu_run_records_cpu_and_rss_every_interval(live_stack) -> None:
    config = {
        "recipe": "tiny_mlp",
        "params": {"epochs": 1, "steps_per_epoch": 40, "step_sleep": 0.1},
    }
    with live_stack.admin_client() as api:
        exp = api.post("/api/experiments", json={"name": "sysmetrics", "config": config})
        assert exp.status_code == 201, exp.text
        run = api.post(f"/api/experiments/{exp.json()['id']}/runs", json={}).json()
        done = wait_for_status(api, run["id"], {"succeeded", "failed", "cancelled"}, timeout=180)
        assert done["status"] == "succeeded", done
        got = api.get(
            f"/api/runs/{run['id']}/metrics", params={"keys": f"{CPU_PERCENT},{RSS_MB}"}
        ).json()["series"]
        summary = api.get(f"/api/runs/{run['id']}").json()["summary"]
    assert_series_every_second(got, done)
    assert max(got[CPU_PERCENT]["value"]) > 1  # torch's import and the steps cost CPU
    # a python with torch loaded; the first sample may precede torch's import and the last
    # follow the interpreter's exit (only the job's shell left: 1.7 MB seen in CI under load)
    assert min(got[RSS_MB]["value"][1:-1]) > 20
    assert summary[RSS_MB]["max"] == max(got[RSS_MB]["value"])  # in the summary like any key


def assert_series_every_second(got: dict, run: dict) -> None:
    """About one point per second of the run's time in training (a loaded box may be late:
    a third may go missing), at distinct whole seconds from its start."""
    seconds = (
        datetime.fromisoformat(run["finished_at"]) - datetime.fromisoformat(run["started_at"])
    ).total_seconds()
    for key in (CPU_PERCENT, RSS_MB):
        steps = got[key]["step"]
        assert steps == sorted(set(steps)), steps
        assert len(steps) >= max(2, int(seconds * 2 / 3) - 2), (key, steps, seconds)
        assert 0 <= steps[0] and steps[-1] <= seconds + 1, (key, steps, seconds)


# A script whose memory is in a detached grandchild (its own session, as a daemon or a
# dataloader worker could be): the worker's series count the job's whole process tree.
TREE_SCRIPT = """
import subprocess, sys, time
HOLD = (
    "b = bytearray(512 * 1024 * 1024)\\n"
    "for i in range(0, len(b), 4096): b[i] = 1\\n"
    "print('held', flush=True)\\n"
    "import time; time.sleep(60)"
)
hold = subprocess.Popen([sys.executable, "-c", HOLD], start_new_session=True,
                        stdout=subprocess.PIPE, text=True)
assert hold.stdout.readline().strip() == "held"
time.sleep(4)
hold.kill()
hold.wait()
"""


@pytest.mark.slow
@pytest.mark.local_only  # the sampler over a real job; its rows: quick tests, both stacks
def test_the_series_count_a_detached_grandchild_of_the_job(live_stack) -> None:
    folder = WORKSPACE_DIR / "sysmetrics"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tree.py").write_text(TREE_SCRIPT)
    with live_stack.admin_client() as api:
        config = {"script": "sysmetrics/tree.py"}
        exp = api.post("/api/experiments", json={"name": "sys-tree", "config": config})
        assert exp.status_code == 201, exp.text
        run = api.post(f"/api/experiments/{exp.json()['id']}/runs", json={}).json()
        done = wait_for_status(api, run["id"], {"succeeded", "failed", "cancelled"}, timeout=180)
        assert done["status"] == "succeeded", done
        rss = api.get(f"/api/runs/{run['id']}/metrics", params={"keys": RSS_MB}).json()
    values = rss["series"][RSS_MB]["value"]
    assert max(values) >= 512, values  # the grandchild's 512 MiB, held for 4 s
