"""100,000 runs in one experiment (issue 43): the experiment page's first rows, a filter and a
sort by a metric summary on the page, the API's top 100 by a metric, and the page's memory.

Targets: first rows < 1 s; a filter or a sort by any metric summary < 1 s (on the page: the
action -> the table rebuilt from GET /api/runs); GET /api/runs top 100 by a metric < 0.2 s;
the page's memory bounded (Chromium's JS heap and DOM nodes after the load and after each
filter or sort, read through the DevTools protocol).

The data: --runs runs of one experiment, --params params a run (run_params rows) and --keys
metric keys with their summaries, by bench/runs_list.fill -- rows straight into the tables, as
every runs-at-scale bench here builds them (the API's per-run path costs ~10-20 ms a run on
this box: 100,000 runs through it would take most of an hour). Building is timed and printed;
with --reuse a database built before at the same size (--data-dir) is kept. Each side is a
server of its own (uvicorn, no worker): SQLite in --data-dir, or --database-url (PostgreSQL,
a database of its own; it is migrated, filled and ANALYZEd, as autovacuum would). Every figure:
median of --repeats with min-max, and the load average read when it was taken.

    .venv/bin/python bench/scale_runs.py [--runs 100000] [--data-dir DIR] [--reuse] \\
        [--database-url postgresql+psycopg://postgres@127.0.0.1:5432/DB]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.runs_list import analyze, fill  # noqa: E402

PAGE_TARGET_S = 1.0
API_TARGET_S = 0.2
METRIC = "val/acc"
API_QUERIES: list[tuple[str, dict[str, str]]] = [
    ("top 100 by val/acc max", {"sort": f"-summary.{METRIC}.max"}),
    ("top 100 by train/k3 min (another key)", {"sort": "summary.train/k3.min"}),
    ("filter lr>0.01, top 100 by val/acc last",
     {"sort": f"-summary.{METRIC}.last", "filter": "params.params.lr>0.01"}),
    ("filter on a summary (val/acc max>0.9)", {"sort": "-id", "filter": f"{METRIC}.max>0.9"}),
    # What the page asks when its filter box says lr>0.01: newest first, its columns' summaries.
    ("the page's filter lr>0.01, newest first",
     {"sort": "-id", "filter": "params.params.lr>0.01", "summary_first": "0",
      "summary_keys": METRIC}),
]  # fmt: skip

LOADED = """(before) => {
    const s = document.getElementById("runs-section");
    const rows = document.querySelector("#runs tbody tr[data-run-id]");
    return s && s.dataset.loaded && s.dataset.loaded !== before && rows
        && !s.hasAttribute("aria-busy") ? performance.now() : false;
}"""


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load {one:.1f}/{five:.1f}/{fifteen:.1f}"


def figure(label: str, times: list[float], target: float, loads: list[str]) -> float:
    median = statistics.median(times)
    print(
        f"  {label}: median of {len(times)} {median * 1000:.1f} ms (min {min(times) * 1000:.1f},"
        f" max {max(times) * 1000:.1f}); {median / target:.2f}x the {target * 1000:.0f} ms "
        f"target; {loads[len(loads) // 2]}",
        flush=True,
    )
    return median


def build(url: str, marker: Path, args: argparse.Namespace) -> None:
    from app.migrate import upgrade

    if args.reuse and marker.exists():
        print(f"reusing the {marker.name} data ({marker.read_text().strip()})", flush=True)
        return
    if marker.exists() or (url.startswith("sqlite") and (args.data_dir / "own.db").exists()):
        sys.exit(f"{args.data_dir} holds data already: --reuse, or a fresh --data-dir")
    upgrade(url)
    t0 = time.perf_counter()
    fill(url, runs=args.runs, params=args.params, keys=args.keys)
    if url.startswith("postgresql"):
        analyze(url)
    took = time.perf_counter() - t0
    marker.write_text(f"built in {took:.1f} s, {load()}\n")
    print(f"built {args.runs:,} runs x {args.params} params x {args.keys} keys in {took:.1f} s"
          f" ({load()})", flush=True)  # fmt: skip


@contextmanager
def server(url: str, directory: Path) -> Iterator[str]:
    """uvicorn serving the app over `url`, no worker (what tests/own_server.py starts, with
    the database named)."""
    from tests.stack import free_port, start_logged, stop_process, wait_healthy
    from torchyard.compose.processes import server_argv

    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHYARD_")} | {
        "TORCHYARD_DATA_DIR": str(directory / "data"),
        "TORCHYARD_DATABASE_URL": url,
        "TORCHYARD_BROKER_URL": "memory://",
        "TORCHYARD_WORKSPACE_DIR": str(directory / "workspace"),
        "TORCHYARD_REAP_INTERVAL_SECONDS": "0",
    }
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = directory / "server.log"
    proc = start_logged(server_argv("127.0.0.1", port), env, log)
    try:
        wait_healthy(base, proc, log)
        yield base
    finally:
        stop_process(proc)


def api_side(base: str, repeats: int) -> dict[str, float]:
    import httpx

    with httpx.Client(base_url=base, timeout=120) as client:
        body = {"username": "bench", "password": "bench-password"}
        token = client.post("/api/auth/token", data=body).json()["access_token"]
        client.headers["Authorization"] = f"Bearer {token}"
        out = {}
        for label, extra in API_QUERIES:
            query = {"experiment_id": "1", "limit": "100", **extra}
            times, loads = [], []
            for i in range(repeats + 1):
                t0 = time.perf_counter()
                r = client.get("/api/runs", params=query)
                took = time.perf_counter() - t0
                assert r.status_code == 200, r.text
                if i:  # the first warms caches
                    times.append(took)
                    loads.append(load())
            runs = r.json()["runs"]
            assert runs, label
            print(f"    {label}: {len(runs)} runs, {len(r.content) / 1024:.0f} KB", flush=True)
            out[label] = figure(f"API {label}", times, API_TARGET_S, loads)
    return out


def memory(page: Any, cdp: Any) -> str:
    got = {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}
    rows = page.evaluate("() => document.querySelectorAll('#runs tbody tr').length")
    return (
        f"JS heap {got['JSHeapUsedSize'] / 2**20:.1f} MB used of "
        f"{got['JSHeapTotalSize'] / 2**20:.1f} MB, {int(got['Nodes']):,} DOM nodes, {rows} rows"
    )


def timed(page: Any, act: Callable[[], None]) -> float:
    before = page.evaluate("() => document.getElementById('runs-section').dataset.loaded")
    t0 = page.evaluate("() => performance.now()")
    act()
    at = page.wait_for_function(LOADED, arg=before, polling="raf", timeout=120_000)
    return (float(at.json_value()) - float(t0)) / 1000


def page_side(browser: Any, base: str, repeats: int) -> dict[str, float]:
    from bench.experiment_page import torchyard_login

    firsts, filters, sorts, loads, heaps = [], [], [], [], []
    for i in range(repeats + 1):
        context = browser.new_context(viewport={"width": 1440, "height": 900}, base_url=base)
        page = context.new_page()
        cdp = context.new_cdp_session(page)
        cdp.send("Performance.enable")
        torchyard_login(page)
        page.goto("/experiments/1", wait_until="commit")
        got = page.wait_for_function(LOADED, arg="", polling="raf", timeout=120_000)
        first = float(got.json_value()) / 1000
        after_load = memory(page, cdp)

        def filter_(page: Any = page) -> None:
            page.fill("#runs-filter", "params.params.lr>0.01")
            page.press("#runs-filter", "Enter")

        took_filter = timed(page, filter_)
        sort = page.locator(f'#runs thead button.sort[data-sort^="summary.{METRIC}"]').first

        def click(sort: Any = sort) -> None:
            sort.click()

        took_sort = timed(page, click)
        after = memory(page, cdp)
        context.close()
        if i:  # the first warms the server's caches
            firsts.append(first)
            filters.append(took_filter)
            sorts.append(took_sort)
            loads.append(load())
            heaps.append(f"after load: {after_load}; after filter+sort: {after}")
            print(f"    load {i}: first rows {first:.3f} s, filter {took_filter:.3f} s, sort"
                  f" {took_sort:.3f} s; {heaps[-1]}", flush=True)  # fmt: skip
    return {
        "first rows": figure("page first rows", firsts, PAGE_TARGET_S, loads),
        "filter": figure("page filter lr>0.01", filters, PAGE_TARGET_S, loads),
        "sort": figure(f"page sort by {METRIC}", sorts, PAGE_TARGET_S, loads),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--params", type=int, default=10)
    parser.add_argument("--keys", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--data-dir", type=Path, default=Path("/tmp/torchyard-scale-runs"))
    parser.add_argument("--reuse", action="store_true", help="keep the data built before")
    parser.add_argument("--database-url", default=None, help="PostgreSQL; default SQLite")
    parser.add_argument("--skip-page", action="store_true", help="the API figures only")
    args = parser.parse_args()
    args.data_dir.mkdir(parents=True, exist_ok=True)
    url = args.database_url or f"sqlite:///{args.data_dir / 'own.db'}"
    os.environ["TORCHYARD_DATABASE_URL"] = url  # read once, when app.settings is imported
    os.environ.setdefault("TORCHYARD_DATA_DIR", str(args.data_dir / "data"))
    os.environ.setdefault("TORCHYARD_BROKER_URL", "memory://")
    stack = url.split(":")[0].split("+")[0]
    marker = args.data_dir / f"built-{stack}-{args.runs}x{args.params}x{args.keys}"
    print(f"{stack}: {args.runs:,} runs in one experiment; {load()}", flush=True)
    build(url, marker, args)
    with server(url, args.data_dir) as base:
        api_side(base, args.repeats)
        if not args.skip_page:
            from playwright.sync_api import sync_playwright

            from tests.stack import launch_chromium

            with sync_playwright() as pw:
                browser = launch_chromium(pw)
                try:
                    page_side(browser, base, args.repeats)
                finally:
                    browser.close()
    print(f"done; {load()}", flush=True)


if __name__ == "__main__":
    main()
