"""Pages that never overflow (issue 31): at 1440 px with 20 differing params and a
200-character name, and at 390 px, no page is wider than the viewport; the runs table scrolls in
its own frame with the name column fixed; the menu reaches every nav link at 390 px. The same
pages are photographed for docs/ui.md (docs/screenshots/narrow-*.png, small: 390 px wide)."""

from __future__ import annotations

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import SCREENSHOTS
from tests.conftest import WORKSPACE_DIR, wait_for_status

pytestmark = [pytest.mark.slow, pytest.mark.browser]

PARAMS = 20
LONG = "n" * 200  # one unbroken 200-character name
# Photographed at 390 px for docs/ui.md: (page name, url key).
SHOTS = ("experiments", "experiment", "run", "sweep")


@pytest.fixture(scope="module")
def wide_data(api: httpx.Client) -> dict[str, int]:
    """An experiment (200-character name) of script runs whose 20 params all differ, their
    names 200 characters too, and a sweep over one of them; every run cancelled or ended: the
    pages need their rows, not their training."""
    (WORKSPACE_DIR / "widths_noop.py").write_text("# ends at once: its flags unread\n")
    params = {f"param_{i:02d}_with_a_long_name": i for i in range(PARAMS)}
    config = {"script": "widths_noop.py", "params": params, "seed": 1}
    exp = api.post("/api/experiments", json={"name": LONG, "config": config})
    assert exp.status_code == 201, exp.text
    exp_id = exp.json()["id"]
    run_ids = []
    for n in range(2):
        other = {k: v * 1000 + n + 0.123456789 for k, v in params.items()}
        r = api.post(f"/api/experiments/{exp_id}/runs", json={"overrides": {"params": other}})
        assert r.status_code == 201, r.text
        run_id = r.json()["id"]
        api.post(f"/api/runs/{run_id}/cancel")
        assert api.patch(f"/api/runs/{run_id}", json={"name": f"{n}{LONG[1:]}"}).status_code == 200
        run_ids.append(run_id)
    sweep = api.post(
        "/api/sweeps",
        json={
            "experiment_id": exp_id,
            "method": "random",
            "metric": {"name": "val/" + "m" * 60, "goal": "maximize"},
            "parameters": {"params.param_00_with_a_long_name": {"values": [1, 2]}},
            "max_runs": 1,
            "max_concurrent": 1,
        },
    )
    assert sweep.status_code == 201, sweep.text
    sweep_id = sweep.json()["id"]
    api.post(f"/api/sweeps/{sweep_id}/cancel")
    for run_id in run_ids:
        wait_for_status(api, run_id, {"cancelled", "failed", "succeeded"})
    return {"experiment": exp_id, "run": run_ids[0], "other": run_ids[1], "sweep": sweep_id}


def _urls(data: dict[str, int]) -> dict[str, str]:
    return {
        "experiments": "/",
        "new-experiment": "/experiments/new",
        "experiment": f"/experiments/{data['experiment']}",
        "run": f"/runs/{data['run']}",
        "compare": f"/compare?runs={data['run']},{data['other']}",
        "compare-picker": "/compare",  # no runs chosen: the picker alone
        "sweep": f"/sweeps/{data['sweep']}",
        "gpus": "/gpus",
        "fleet": "/fleet?window=30d",
        "users": "/admin/users",
        "account": "/account",  # the API tokens live here
        "notifications": "/account/notifications",
        "api-docs": "/docs",
    }


def _overflow(page: Page) -> int:
    """How far the page is wider than the viewport (0: not at all)."""
    return int(page.evaluate("document.scrollingElement.scrollWidth - window.innerWidth"))


def _culprits(page: Page) -> list[str]:
    """The innermost elements reaching past the viewport's right edge (for the message)."""
    return page.evaluate(
        """() => {
            const past = (e) => e.getBoundingClientRect().right > innerWidth + 1;
            const framed = (e) => {  // inside a frame that scrolls or clips: not the page's
                for (let p = e.parentElement; p && p !== document.body; p = p.parentElement) {
                    if (getComputedStyle(p).overflowX !== "visible") return true;
                }
                return false;
            };
            return [...document.querySelectorAll("body *")]
            .filter((e) => past(e) && !framed(e) && ![...e.children].some(past))
            .slice(0, 5)
            .map((e) => `${e.tagName.toLowerCase()}#${e.id}.${e.className}`
                + ` right=${Math.round(e.getBoundingClientRect().right)}`);
        }"""
    )


def _settled(page: Page, url: str) -> None:
    page.goto(url)
    page.wait_for_load_state("networkidle")
    if page.locator("#runs-section").count():
        expect(page.locator("#runs-section")).to_have_attribute("data-loaded", "1")


def _menu_reaches_every_link(page: Page) -> None:
    """At 390 px the nav links are behind the menu button, and the open menu shows them all
    and logout, still no wider than the screen."""
    links = page.locator("#main-nav a")
    expect(links.first).to_be_hidden()  # behind the menu
    page.click("#menu-toggle")
    assert links.count() >= 5
    for i in range(links.count()):
        expect(links.nth(i)).to_be_visible()
    expect(page.locator("#logout")).to_be_visible()
    assert _overflow(page) <= 0


def _at(page: Page, width: int, url: str) -> Page:
    page.set_viewport_size({"width": width, "height": 900})
    _settled(page, url)
    return page


@pytest.mark.parametrize("width", [1440, 390])
def test_no_page_is_wider_than_the_viewport(
    admin_page: Page, wide_data: dict[str, int], width: int
) -> None:
    page = admin_page
    page.set_viewport_size({"width": width, "height": 900})
    wider = {}  # every page that overflows, not just the first
    for name, url in _urls(wide_data).items():
        _settled(page, url)
        if _overflow(page) > 0:
            wider[name] = (_overflow(page), _culprits(page))
        if width == 390 and name in SHOTS:
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SCREENSHOTS / f"narrow-{name}.png"))
        if width == 390 and name == "users":  # a page with every nav link (an admin's)
            _menu_reaches_every_link(page)
    page.context.clear_cookies()
    _settled(page, "/login")
    if _overflow(page) > 0:
        wider["login"] = (_overflow(page), _culprits(page))
    assert not wider, f"pages wider than {width} px, by px: {wider}"


def test_runs_table_scrolls_in_its_frame_with_the_name_column_fixed(
    admin_page: Page, wide_data: dict[str, int]
) -> None:
    page = _at(admin_page, 1440, f"/experiments/{wide_data['experiment']}")
    expect(page.locator("table#runs th[data-param]")).to_have_count(PARAMS)
    row = f"table#runs tr[data-run-id='{wide_data['run']}']"
    frame = page.evaluate(
        """(row) => {
            const table = document.querySelector("table#runs");
            const frame = table.parentElement;
            const style = getComputedStyle(frame);
            const link = document.querySelector(row + " td.run-name a");
            const cell = link.closest("td");
            return {overflow: style.overflowX, wider: frame.scrollWidth > frame.clientWidth,
                    sticky: getComputedStyle(cell).position, title: link.title,
                    cellWidth: cell.getBoundingClientRect().width};
        }""",
        row,
    )
    assert frame["overflow"] == "auto" and frame["wider"], frame
    assert frame["sticky"] == "sticky", frame
    assert frame["title"].endswith(LONG[1:]), frame  # the whole name on hover
    assert frame["cellWidth"] < 400, frame  # cut, not 200 characters wide
    before = page.locator(f"{row} td.run-name a").bounding_box()
    page.evaluate("document.querySelector('table#runs').parentElement.scrollLeft = 2000")
    # stuck at the frame's left edge (the checkbox column scrolled under it), not gone
    after = page.locator(f"{row} td.run-name a").bounding_box()
    left = page.evaluate(
        "document.querySelector('table#runs').parentElement.getBoundingClientRect().left"
    )
    assert before and after and before["x"] > left, (before, left)
    assert abs(after["x"] - before["x"]) < 60 and after["x"] >= left, (before, after, left)


WORDS_SPLIT = """(selector) => {
    // Each word of the element's text that the browser broke over two lines (issue 41).
    const split = [];
    const root = document.querySelector(selector);
    const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
        for (const m of node.data.matchAll(/\\S+/g)) {
            const range = document.createRange();
            range.setStart(node, m.index);
            range.setEnd(node, m.index + m[0].length);
            const tops = new Set([...range.getClientRects()].map((r) => Math.round(r.top)));
            if (tops.size > 1) split.push(m[0]);
        }
    }
    return split;
}"""


def test_the_run_title_and_its_status_badge_wrap_at_word_boundaries(
    admin_page: Page, wide_data: dict[str, int]
) -> None:
    page = _at(admin_page, 390, f"/runs/{wide_data['run']}")
    assert page.evaluate(WORDS_SPLIT, ".run-title h1") == []
    badge = page.locator("#run-status").bounding_box()
    assert badge is not None and badge["height"] < 30, badge  # one line
    _settled(page, f"/experiments/{wide_data['experiment']}")
    assert page.evaluate(WORDS_SPLIT, "table#runs tbody .badge") == []
