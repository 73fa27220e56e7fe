"""The run page in headless Chromium: load time with 4 x 200,000 points, bytes per series, and
live latency from the job's log() to the point arriving in the page.

Starts a real server and a real Celery worker (SQLite database, SQLite broker) in a temporary
data dir, and Debian's /usr/bin/chromium through Playwright for Python, logged in through the
login form.

(i)   A run with 4 series x 200,000 points, ingested with app.metrics.service.ingest_points
      (the forwarder's path) into the real database. Time from navigation start to all four
      charts drawn (`.metric-chart[data-points]` > 0, read with performance.now(), whose origin
      is the navigation start): the first run page of a fresh browser profile right after
      logging in (nothing of the chart library cached: target < 1.2 s), the same after the
      list page went idle, and warm loads (target < 1.5 s).
(ii)  Bytes sent for the default view: the compressed (gzip) size of the page's
      /api/runs/{id}/metrics responses (Resource Timing's encodedBodySize), per series, checked
      against a plain httpx request with Accept-Encoding: gzip. Target < 300 KB per series.
(iii) Live latency: a tiny_mlp run with step_sleep while its page is open. The page announces
      every live point as a `ty:live` event ({key, steps, receivedAt}), recorded from the start
      by an init script; the job's log() time for
      each step is the "time" field of the run's metrics.jsonl. Target p95 < 1 s.

    .venv/bin/python bench/ui_run_page.py [--points 200000] [--keys 4] [--first 3] [--warm 5]
        [--zooms 0] [--live-steps 300] [--step-sleep 0.05] [--database-url EMPTY_POSTGRES_DB]

(iv)  With --zooms N (issue 43): N walks of drag-zooms on train/loss, each 10x narrower around
      its one-step spike, from the whole run down to fewer steps than the chart is wide
      (bench/ui_run_page_zoom.py): each step's time from the mouse's release to the chart
      redrawn with the range's answer (target < 200 ms), the steps it asked for, the points
      drawn (every one once fewer than the chart's width) and the spike kept.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

KEYS: tuple[str, ...] = ("train/loss", "train/acc", "val/loss", "val/acc")
# --keys beyond the four above: extra/k04, extra/k05, ... (issue 43: 20 keys of 1,000,000 steps)
SPIKE_VALUE = 50.0  # one step of train/loss: no view, at any zoom, may lose it
LOAD_TARGET_S = 1.5
# A fresh browser (empty cache) opening its first page with charts: issue 17.
FIRST_LOAD_TARGET_S = 1.2
BYTES_TARGET = 300 * 1024
LATENCY_TARGET_S = 1.0
BATCH = 20_000

ALL_DRAWN = """(keys) => {
    for (const key of keys) {
        const el = document.querySelector(`.metric-chart[data-key="${key}"]`);
        if (!el || !(Number(el.dataset.points) > 0)) return false;
    }
    return performance.now();
}"""


def report(label: str, value: float, target: float, unit: str) -> None:
    print(f"{label}: {value:.3f} {unit}; target < {target:g} {unit}; ratio {value / target:.2f}")


def spike_step(n_points: int) -> int:
    return int(n_points * 0.61) + 7


def make_big_run(n_points: int) -> int:
    """A finished run with len(KEYS) series of n_points each, one spike in train/loss (the
    points through ingest_points, the forwarder's path, in batches of BATCH)."""
    from app.db import session_scope
    from app.metrics.service import ingest_points
    from tests.factories import make_run

    run_id = make_run({"recipe": "tiny_mlp", "params": {}, "seed": 1}, status="succeeded")
    t0 = time.perf_counter()
    wall0 = time.time() - n_points * 0.01
    extra = [(k, key) for k, key in enumerate(KEYS) if k >= 4]
    spike = spike_step(n_points)
    for start in range(1, n_points + 1, BATCH):
        points = []
        for step in range(start, min(start + BATCH, n_points + 1)):
            wall = wall0 + step * 0.01
            decay = math.exp(-step / (n_points / 5))
            points += [
                ("train/loss", step, 2.0 * decay + 0.05 * math.sin(step), wall),
                ("train/acc", step, 1.0 - 0.7 * decay + 0.02 * math.cos(step), wall),
                ("val/loss", step, 2.1 * decay + 0.03, wall),
                ("val/acc", step, 0.95 - 0.7 * decay, wall),
            ]
            points += [(key, step, decay + 0.01 * k * math.sin(step / k), wall) for k, key in extra]
            if step == spike:
                points[-len(KEYS)] = ("train/loss", step, SPIKE_VALUE, wall)
        with session_scope() as session:
            ingest_points(session, run_id=run_id, points=points)
    elapsed = time.perf_counter() - t0
    total = n_points * len(KEYS)
    print(f"ingested {total:,} points in {elapsed:.1f} s ({total / elapsed:,.0f} points/s)")
    return run_id


def log_in(page, password: str) -> None:
    page.goto("/login")
    page.fill("#username", "admin")
    page.fill("#password", password)
    with page.expect_navigation():
        page.click("form#login-form button[type=submit]")
    if "/login" in page.url:
        raise RuntimeError("login failed")


def load_time_ms(page, run_id: int) -> float:
    page.goto(f"/runs/{run_id}", wait_until="commit")
    handle = page.wait_for_function(ALL_DRAWN, arg=list(KEYS), polling="raf", timeout=60_000)
    return float(handle.json_value())


BREAKDOWN = """() => {
    const nav = performance.getEntriesByType("navigation")[0];
    const out = {"HTML received": nav.responseEnd,
                 "DOMContentLoaded": nav.domContentLoadedEventEnd};
    for (const e of performance.getEntriesByType("resource")) {
        const path = new URL(e.name).pathname;
        if (path.endsWith(".js") || path.endsWith("/metrics")) {
            out[`${path.split("/").pop()} fetched`] = e.responseEnd;
        }
    }
    return out;
}"""


def breakdown(page) -> str:
    marks = page.evaluate(BREAKDOWN)
    return ", ".join(f"{k} {v / 1000:.3f}" for k, v in sorted(marks.items(), key=lambda kv: kv[1]))


def metrics_bytes(page, run_id: int) -> tuple[int, int, list[str]]:
    """(compressed body bytes, decoded body bytes, urls) of the page's metrics requests."""
    entries = page.evaluate(
        """(prefix) => performance.getEntriesByType("resource")
            .filter((e) => new URL(e.name).pathname === prefix)
            .map((e) => [e.name, e.encodedBodySize, e.decodedBodySize])""",
        f"/api/runs/{run_id}/metrics",
    )
    return (
        sum(e[1] for e in entries),
        sum(e[2] for e in entries),
        [e[0] for e in entries],
    )


def gzip_size_via_httpx(stack, token: str, url: str) -> int:
    import httpx

    headers = {"Authorization": f"Bearer {token}", "Accept-Encoding": "gzip"}
    with httpx.Client(base_url=stack.base_url, headers=headers, timeout=60) as client:
        with client.stream("GET", url) as r:
            r.raise_for_status()
            raw = b"".join(r.iter_raw())
            encoding = r.headers.get("content-encoding")
    if encoding == "gzip":
        gzip.decompress(raw)  # it is what it says
    return len(raw)


# The run page's charts announce each batch of live points (app/static/run/charts.js): kept
# here, one entry per point, for the measurement (the page itself keeps no such list).
LIVE_RECORDER = """document.addEventListener("ty:live", (e) => {
  const live = window.benchLive || (window.benchLive = []);
  const {key, steps, receivedAt} = e.detail;
  for (const step of steps) live.push({key, step, receivedAt});
});"""


def live_latency(stack, api, page, data_dir: Path, steps: int, sleep: float) -> list[float]:
    config = {
        "recipe": "tiny_mlp",
        "params": {"epochs": 1, "steps_per_epoch": steps, "step_sleep": sleep},
    }
    exp = api.post("/api/experiments", json={"name": "bench-live", "config": config}).json()
    run = api.post(f"/api/experiments/{exp['id']}/runs", json={}).json()
    page.add_init_script(LIVE_RECORDER)
    page.goto(f"/runs/{run['id']}")
    deadline = time.monotonic() + 120 + steps * sleep
    while time.monotonic() < deadline:
        status = api.get(f"/api/runs/{run['id']}").json()["status"]
        if status not in ("queued", "running"):
            break
        time.sleep(0.2)
    if status != "succeeded":
        raise RuntimeError(f"live run ended {status}")
    page.wait_for_timeout(1500)  # the last points and the final status reach the page
    live, origin = page.evaluate("() => [window.benchLive || [], performance.timeOrigin]")
    logged: dict[int, float] = {}
    with open(data_dir / "runs" / str(run["id"]) / "metrics.jsonl") as f:
        for line in f:
            record = json.loads(line)
            if record.get("type") == "metrics":
                logged[int(record["step"])] = float(record["time"])
    latencies = []
    for point in live:
        received = float(point["receivedAt"])
        if received < 1e12:  # performance.now() rather than Date.now(): make it epoch ms
            received += origin
        if int(point["step"]) in logged:
            latencies.append(received / 1000 - logged[int(point["step"])])
    print(
        f"live run {run['id']}: {len(logged)} steps logged, {len(live)} live points in the page "
        f"({len(latencies)} matched to a log() time)"
    )
    if not latencies:
        raise RuntimeError("the page announced no live point (ty:live)")
    return latencies


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--points", type=int, default=200_000, help="points per series")
    parser.add_argument("--first", type=int, default=3, help="first loads (fresh cache)")
    parser.add_argument("--warm", type=int, default=5, help="warm loads to time")
    parser.add_argument("--keys", type=int, default=4, help="series (4 named, then extra/kNN)")
    parser.add_argument(
        "--zooms", type=int, default=0, help="zoom walks (each 10x a step down to one pixel)"
    )
    parser.add_argument("--live-steps", type=int, default=300, help="0: no live part")
    parser.add_argument("--step-sleep", type=float, default=0.05)
    parser.add_argument(
        "--database-url", default=None, help="an empty PostgreSQL database (default: SQLite)"
    )
    args = parser.parse_args()
    global KEYS
    KEYS = KEYS[:4] + tuple(f"extra/k{k:02d}" for k in range(4, args.keys))
    from tests.stack import CHROMIUM

    if not CHROMIUM.exists():
        sys.exit(f"{CHROMIUM} is missing: `make browser` installs Debian's chromium")
    data_dir = Path(tempfile.mkdtemp(prefix="torchyard-bench-"))
    password = "bench-password"
    os.environ.update(TORCHYARD_DATA_DIR=str(data_dir), TORCHYARD_ADMIN_PASSWORD=password)
    for var in ("TORCHYARD_DATABASE_URL", "TORCHYARD_BROKER_URL"):
        os.environ.pop(var, None)
    if args.database_url:  # the team stack's database; the broker stays the SQLite one
        os.environ["TORCHYARD_DATABASE_URL"] = args.database_url

    from playwright.sync_api import sync_playwright

    from app.prestart import prestart
    from tests.stack import launch_chromium, running_stack

    prestart()
    run_id = make_big_run(args.points)
    with (
        running_stack(dict(os.environ), data_dir / "logs", admin_password=password) as stack,
        stack.admin_client() as api,
        sync_playwright() as playwright,
    ):
        browser = launch_chromium(playwright)
        context: Any = None
        try:
            # (i) load time: first run-page loads, each in a fresh context (empty cache: the
            # chart library is loaded by chart pages only), then warm loads.
            firsts: list[float] = []
            for _ in range(args.first):
                if firsts:
                    context.close()
                context = browser.new_context(
                    viewport={"width": 1280, "height": 900}, base_url=stack.base_url
                )
                page = context.new_page()
                log_in(page, password)
                firsts.append(load_time_ms(page, run_id))
                print(f"    first load at {firsts[-1] / 1000:.3f} s; marks (s): {breakdown(page)}")
            # A user reaches a run page from another page of the app, each of which prefetches
            # the chart library: first run-page visit once the experiments list has loaded.
            prefetched = []
            for _ in range(args.first):
                context.close()
                context = browser.new_context(
                    viewport={"width": 1280, "height": 900}, base_url=stack.base_url
                )
                page = context.new_page()
                log_in(page, password)
                page.wait_for_load_state("networkidle")
                prefetched.append(load_time_ms(page, run_id))
                print(f"    first visit after the list page at {prefetched[-1] / 1000:.3f} s")
            encoded, decoded, urls = metrics_bytes(page, run_id)
            warm = [load_time_ms(page, run_id) for _ in range(args.warm)]
            print(f"    last warm load at {warm[-1] / 1000:.3f} s; marks (s): {breakdown(page)}")
            points = page.evaluate(
                """(keys) => keys.map((k) =>
                    Number(document.querySelector(`.metric-chart[data-key="${k}"]`)
                        .dataset.points))""",
                list(KEYS),
            )
            print(f"run {run_id}: {len(KEYS)} series x {args.points:,} points; plotted {points}")
            for label, times in (
                (
                    "first run page of a fresh browser (empty cache), right after logging in",
                    firsts,
                ),
                ("first run page after the list page went idle", prefetched),
                ("warm", warm),
            ):
                report(
                    f"(i) navigation -> {len(KEYS)} charts drawn, {label} (median of {len(times)}; "
                    f"min {min(times) / 1000:.3f}, max {max(times) / 1000:.3f})",
                    statistics.median(times) / 1000,
                    FIRST_LOAD_TARGET_S if times is firsts else LOAD_TARGET_S,
                    "s",
                )

            # (ii) bytes for the default view.
            print(f"metrics requests of the page: {urls}")
            per_series = encoded / len(KEYS)
            print(
                f"    compressed {encoded:,} B, uncompressed {decoded:,} B for {len(KEYS)} series"
            )
            report("(ii) bytes per series (gzip, as sent)", per_series / 1024, 300, "KB")
            if urls:
                path = urls[0].removeprefix(stack.base_url)
                size = gzip_size_via_httpx(stack, stack.admin_token(), path)
                print(f"    httpx with Accept-Encoding: gzip, {path}: {size:,} B")

            print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
            if args.zooms:
                from bench.ui_run_page_zoom import zoom_walks

                zoom_walks(page, run_id, spike_step(args.points), SPIKE_VALUE, args.zooms)
            if not args.live_steps:
                return
            # (iii) live latency log() -> page.
            latencies = live_latency(stack, api, page, data_dir, args.live_steps, args.step_sleep)
            p50, p95 = statistics.median(latencies), percentile(latencies, 0.95)
            print(
                f"    latency over {len(latencies)} points: min {min(latencies):.3f} s, "
                f"max {max(latencies):.3f} s"
            )
            report("(iii) log() -> page, p50", p50, LATENCY_TARGET_S, "s")
            report("(iii) log() -> page, p95", p95, LATENCY_TARGET_S, "s")
        finally:
            if context is not None:
                context.close()
            browser.close()


if __name__ == "__main__":
    main()
