"""The run page's zoom, timed in Chromium (bench/ui_run_page.py --zooms N, issue 43): walks of
drag-zooms into train/loss, each 10x narrower than the one before and centred on the series'
one-step spike, until the range holds fewer steps than the chart is wide. For each step: the
time from the mouse's release to the chart redrawn with the range's answer (target < 200 ms),
the steps the request named against the range dragged (only that range is read), the points
drawn (every step once the range is narrower than the chart) and whether the spike is in them.
"""

from __future__ import annotations

import math
import os
import statistics
from typing import Any
from urllib.parse import parse_qs, urlparse

STEP_TARGET_S = 0.2
CHART = '.metric-chart[data-key="train/loss"]'
STATE = f"""() => {{
    const el = document.querySelector('{CHART}');
    const x = el.data[0].x, y = el.data[0].y;
    let top = -Infinity;
    for (const v of y) if (v != null && v > top) top = v;
    return {{n: x.length, first: x[0], last: x[x.length - 1], top,
             range: el.layout.xaxis.range || null, width: el.querySelector(".u-over").clientWidth}};
}}"""
REDRAWN = f"""() => {{
    const el = document.querySelector('{CHART}');
    return el.data !== window.benchHeld && performance.now() - window.benchT0;
}}"""


def zoom_step(page: Any, lo: float, hi: float, target_lo: float, target_hi: float) -> float:
    """Drag from target_lo to target_hi on a chart showing [lo, hi]; seconds to the redraw."""
    over = page.locator(CHART).locator(".u-over")
    box = over.bounding_box()
    assert box is not None
    y = box["y"] + box["height"] / 2

    def px(v: float) -> float:
        return box["x"] + box["width"] * (v - lo) / (hi - lo)

    page.mouse.move(px(target_lo), y)
    page.mouse.down()
    page.mouse.move(px(target_hi), y, steps=3)
    page.evaluate(
        f"() => {{ window.benchHeld = document.querySelector('{CHART}').data;"
        " window.benchT0 = performance.now(); }"
    )
    page.mouse.up()
    handle = page.wait_for_function(REDRAWN, polling="raf", timeout=30_000)
    return float(handle.json_value()) / 1000


def zoom_walks(page: Any, run_id: int, spike: int, spike_value: float, walks: int) -> None:
    asked: list[dict[str, list[str]]] = []
    page.on(
        "request",
        lambda r: (
            asked.append(parse_qs(urlparse(r.url).query))
            if f"/api/runs/{run_id}/metrics" in r.url and "step_min" in r.url
            else None
        ),
    )
    page.locator(CHART).scroll_into_view_if_needed()
    by_depth: dict[int, list[float]] = {}
    lost = 0
    for walk in range(walks):
        page.locator(CHART).locator(".u-over").dblclick()  # back to the overview
        page.wait_for_function(f"() => !({STATE})().range")
        state = page.evaluate(STATE)
        assert state["top"] == spike_value, f"the overview lost the spike: {state}"
        lo, hi = float(state["first"]), float(state["last"])
        depth = 0
        while True:
            span = (hi - lo) / 10
            # the spike inside, off centre by a walk-dependent fraction (not always the same)
            a = max(lo, spike - span * (0.3 + 0.1 * walk))
            b = min(hi, a + span)
            took = zoom_step(page, lo, hi, a, b)
            state = page.evaluate(STATE)
            lo, hi = state["range"]
            want = [str(math.ceil(lo)), str(math.floor(hi))]
            got = [asked[-1]["step_min"][0], asked[-1]["step_max"][0]]
            steps = math.floor(hi) - math.ceil(lo) + 1
            full = state["n"] == steps
            kept = state["top"] == spike_value
            lost += not kept
            depth += 1
            by_depth.setdefault(depth, []).append(took)
            print(
                f"    walk {walk + 1} zoom {depth}: {steps:,} steps, asked {got} for {want}, "
                f"{state['n']:,} points drawn{' (every step)' if full else ''}, "
                f"spike {'kept' if kept else 'LOST'}, {took * 1000:.0f} ms"
            )
            assert got == want, f"the request named {got}, the range {want}"
            if steps < state["width"]:
                assert full, f"{steps} steps narrower than {state['width']} px, {state['n']}"
                break
    every = [t for ts in by_depth.values() for t in ts]
    for depth, times in sorted(by_depth.items()):
        print(
            f"    zoom {depth}: median {statistics.median(times) * 1000:.0f} ms "
            f"(min {min(times) * 1000:.0f}, max {max(times) * 1000:.0f})"
        )
    worst = max(statistics.median(ts) for ts in by_depth.values())
    print(
        f"(iv) zoom step, mouse release -> redrawn with the range, worst depth's median of "
        f"{walks}: {worst:.3f} s; all {len(every)} steps: median "
        f"{statistics.median(every):.3f}, min {min(every):.3f}, max {max(every):.3f}; "
        f"target < {STEP_TARGET_S} s; ratio {worst / STEP_TARGET_S:.2f}; spike lost {lost} times; "
        f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
