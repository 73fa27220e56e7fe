"""The parallel coordinates (app/static/parcoords.js) in headless Chromium: time to draw N runs
x P differing params (a third categorical, a third log-spread, a third linear) plus a metric
axis, from parcoords.mount until the page paints at its normal pace again, and the same
for a redraw after a new metric pick.

No server: a page with app.css whose /static/ files Playwright serves from app/static (the
modules import each other by URL), synthetic runs shaped like GET /api/runs answers.
Debian's /usr/bin/chromium through Playwright (tests/stack.py). Each size is drawn --loads
times in the same page (the first one pays the JIT's warm-up); the median is reported.

    .venv/bin/python bench/ui_parcoords.py [--loads 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SIZES = ((100, 5), (200, 10), (1000, 10), (1000, 20), (5000, 10))

DRAW = """async ([n, p]) => {
  const {parcoords} = await import("/static/parcoords.js");
  const runs = [];
  for (let i = 0; i < n; i++) {
    const params = {"params.epochs": 10};
    for (let k = 0; k < p; k++) {
      params[`params.p${k}`] = k % 3 === 0 ? ["adam", "sgd", "adamw"][(i + k) % 3]
        : k % 3 === 1 ? 10 ** (-(i % 5) - 1) : (i * 7 + k) % 50;
    }
    runs.push({id: i + 1, name: null, params, summary: {
      "val/acc": {last: i / n, min: 0, max: (i % 97) / 97, step: 1},
      "train/loss": {last: 1 - i / n, min: 0, max: 2, step: 1}}});
  }
  const el = document.getElementById("pc");
  // Painted: frames come at the display's pace again (two in a row < 40 ms apart), so the
  // raster work a draw leaves behind is counted in it, not in the next one.
  const frame = () => new Promise((res) => {
    let last = null;
    const tick = (t) => {
      if (last !== null && t - last < 40) { res(); return; }
      last = t;
      requestAnimationFrame(tick);
    };
    requestAnimationFrame(tick);
  });
  const t0 = performance.now();
  const chart = parcoords.mount(el, runs, {metric: "val/acc.max"});
  return frame().then(() => {
    const t1 = performance.now();
    chart.setMetric("train/loss.last");
    return frame().then(() => ({draw: t1 - t0, metric: performance.now() - t1,
                                lines: el.querySelectorAll("path.pc-line").length}));
  });
}"""


ORIGIN = "http://bench.local"
PAGE = '<link rel="stylesheet" href="/static/app.css"><div id="pc" style="width: 1200px"></div>'
TYPES = {".js": "text/javascript", ".css": "text/css"}


def _serve(route, static: Path) -> None:
    """The page, and the files under /static/ from app/static as the server sends them."""
    path = route.request.url.removeprefix(ORIGIN)
    if not path.startswith("/static/"):
        route.fulfill(body=PAGE, content_type="text/html")
        return
    file = static / path.removeprefix("/static/")
    route.fulfill(path=file, content_type=TYPES.get(file.suffix, "application/octet-stream"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loads", type=int, default=5)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    from tests.stack import launch_chromium

    static = ROOT / "app" / "static"
    with sync_playwright() as pw:
        browser = launch_chromium(pw)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.route(f"{ORIGIN}/**", lambda route: _serve(route, static))
            page.goto(f"{ORIGIN}/")
            print("runs  params  draw ms (median)  new metric ms (median)")
            for n, p in SIZES:
                got = [page.evaluate(DRAW, [n, p]) for _ in range(args.loads)]
                assert all(g["lines"] == n for g in got), got
                draw = statistics.median(g["draw"] for g in got)
                metric = statistics.median(g["metric"] for g in got)
                print(f"{n:5d}  {p:6d}  {draw:16.0f}  {metric:22.0f}")
        finally:
            browser.close()


if __name__ == "__main__":
    main()
