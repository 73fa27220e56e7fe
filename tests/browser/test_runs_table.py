"""The experiment page's runs table: the params that differ as columns, sort by one (in the
API's SQL), select runs and compare, tag or delete them (app/static/experiment_runs.js)."""

from __future__ import annotations

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.factories import make_experiment_runs

pytestmark = [pytest.mark.slow, pytest.mark.browser]

LRS = [0.3, 0.1, 0.2, 0.05]
HOSTILE = '<img src=x onerror="window.pwned=1">'


def _sweep(api: httpx.Client, name: str, lrs: list[float] = LRS) -> tuple[int, list[int]]:
    """An experiment and four finished runs of it with different lrs, inserted directly (as
    app.runs.state.lifecycle.queue records params) with a loss each: no training needed."""
    base = {"recipe": "tiny_mlp", "params": {"epochs": 1, "lr": 0.1}, "seed": 1}
    configs = [
        {**base, "params": {"epochs": 1, "lr": lr, HOSTILE: i % 2}} for i, lr in enumerate(lrs)
    ]
    return make_experiment_runs(
        configs, per_run=lambda i: {"Loss/train": [(1, lrs[i] * 10)]}, name=name
    )


def _shown(page: Page) -> list[int]:
    rows = page.locator("table#runs tbody tr[data-run-id]")
    return [int(v) for v in rows.evaluate_all("(rs) => rs.map((r) => r.dataset.runId)")]


def test_sort_by_a_param_select_compare_tag_and_delete(admin_page: Page, api: httpx.Client) -> None:
    exp_id, ids = _sweep(api, "browser-runs-table")
    by_lr = [run_id for _, run_id in sorted(zip(LRS, ids, strict=True))]
    page = admin_page
    page.goto(f"/experiments/{exp_id}")
    expect(page.locator("#runs-section[data-loaded]")).to_have_count(1)
    assert _shown(page) == ids[::-1]  # newest first
    # The differing params are columns (lr and the hostile key, as text); epochs is the same.
    expect(page.locator('table#runs th[data-param="params.lr"]')).to_have_count(1)
    expect(page.locator('table#runs th[data-param="params.epochs"]')).to_have_count(0)
    params = page.locator("table#runs th[data-param]")
    assert params.evaluate_all("(ths) => ths.map((t) => t.dataset.param)") == [
        f"params.{HOSTILE}",
        "params.lr",
    ]
    assert params.first.inner_text() == f"params.{HOSTILE}"  # text, not a tag
    # The summary of a key no recipe logs is a column by default (loss: its last value).
    expect(page.locator('table#runs th[data-summary="Loss/train.last"]')).to_have_count(1)
    # Every row has the same colour on every page: runColor (lib/format.js) by the run id.
    swatch = page.locator(f'table#runs tr[data-run-id="{ids[0]}"] .run-swatch')
    color = page.evaluate(
        "async (id) => (await import('/static/lib/format.js')).runColor(id)", ids[0]
    )
    assert swatch.evaluate("(e) => e.style.backgroundColor") == page.evaluate(
        "(c) => { const d = document.createElement('div'); d.style.color = c; "
        "return d.style.color; }",
        color,
    )

    page.click('table#runs th[data-param="params.lr"] button.sort')
    expect(page.locator('table#runs th[data-param="params.lr"]')).to_have_attribute(
        "aria-sort", "ascending"
    )
    assert _shown(page) == by_lr
    page.click('table#runs th[data-param="params.lr"] button.sort')
    expect(page.locator('table#runs th[data-param="params.lr"]')).to_have_attribute(
        "aria-sort", "descending"
    )
    assert _shown(page) == by_lr[::-1]
    assert page.evaluate("window.pwned") is None

    # The filter language (app/runs/query/filter_lang.py): bare param and metric keys, and/or, in.
    rows = page.locator("table#runs tbody tr")
    page.fill("#runs-filter", "lr>=0.1 and Loss/train<2.5")  # the loss is lr * 10
    page.click("#runs-apply")
    expect(rows).to_have_count(2)
    assert sorted(_shown(page)) == sorted(by_lr[1:3])
    page.fill("#runs-filter", "lr in (0.3, 0.05) or Loss/train.max<1.5")
    page.click("#runs-apply")
    expect(rows).to_have_count(3)
    # The builder appends a condition that holds for all the box held.
    page.fill("#runs-filter-key", "lr")
    page.select_option("#runs-filter-op", ">")
    page.fill("#runs-filter-value", "0.06")
    page.click("#runs-filter-add")
    expect(page.locator("#runs-filter")).to_have_value(
        "(lr in (0.3, 0.05) or Loss/train.max<1.5) and lr>0.06"
    )
    expect(rows).to_have_count(2)
    assert sorted(_shown(page)) == sorted([by_lr[1], by_lr[3]])
    # A refused filter: the API's 422 with the position, and no rows left under it.
    page.fill("#runs-filter", "Loss/train.max>")
    page.click("#runs-apply")
    expect(page.locator("#runs-error")).to_contain_text(
        "filter: position 15: expected a value after '>'"
    )
    expect(rows).to_have_count(0)
    page.fill("#runs-filter", "")
    page.click("#runs-apply")
    expect(page.locator("table#runs tbody tr")).to_have_count(4)
    expect(page.locator("#runs-error")).to_be_hidden()

    chosen = by_lr[:3]
    for run_id in chosen:
        page.check(f'table#runs tr[data-run-id="{run_id}"] input.run-select')
    expect(page.locator("#runs-selected-count")).to_have_text("3 selected")
    page.click("#runs-compare")
    page.wait_for_url("**/compare?runs=*")
    assert page.url.split("runs=")[1].split("&")[0].split(",") == [
        str(i) for i in sorted(chosen, key=by_lr[::-1].index)
    ]
    for run_id in chosen:
        expect(page.locator(f'input[name=run][value="{run_id}"]')).to_be_checked()

    page.goto(f"/experiments/{exp_id}")
    expect(page.locator("#runs-section[data-loaded]")).to_have_count(1)
    tagged = ids[1]
    page.check(f'table#runs tr[data-run-id="{tagged}"] input.run-select')
    page.fill("#runs-tag-input", "best-lr")
    page.click("#runs-tag-selected")
    expect(page.locator(f'table#runs tr[data-run-id="{tagged}"] .run-tags .badge')).to_have_text(
        ["best-lr"]
    )
    assert api.get(f"/api/runs/{tagged}").json()["tags"] == ["best-lr"]
    page.select_option("#runs-status", "succeeded")
    page.fill("#runs-tag", "best-lr")
    page.click("#runs-apply")
    expect(page.locator("table#runs tbody tr")).to_have_count(1)
    page.fill("#runs-tag", "")
    page.click("#runs-apply")
    expect(page.locator("table#runs tbody tr")).to_have_count(4)

    # Delete: asks first; a dismissed dialog deletes nothing.
    gone = ids[2]
    page.uncheck(f'table#runs tr[data-run-id="{tagged}"] input.run-select')
    page.check(f'table#runs tr[data-run-id="{gone}"] input.run-select')
    page.once("dialog", lambda dialog: dialog.dismiss())
    page.click("#runs-delete")
    assert api.get(f"/api/runs/{gone}").status_code == 200
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("#runs-delete")
    expect(page.locator(f'table#runs tr[data-run-id="{gone}"]')).to_have_count(0)
    expect(page.locator("#runs-notice")).to_contain_text("Deleted 1 run")
    assert api.get(f"/api/runs/{gone}").status_code == 404
    assert _shown(page) == [i for i in ids[::-1] if i != gone]


def test_summary_columns_are_picked_and_sorted_server_side(
    admin_page: Page, api: httpx.Client
) -> None:
    exp_id, ids = _sweep(api, "browser-runs-columns")
    page = admin_page
    page.goto(f"/experiments/{exp_id}")
    expect(page.locator("#runs-section[data-loaded]")).to_have_count(1)
    page.click("#runs-columns summary")
    page.uncheck('#runs-column-picker input[data-summary="Loss/train.last"]')
    expect(page.locator('table#runs th[data-summary="Loss/train.last"]')).to_have_count(0)
    page.check('#runs-column-picker input[data-summary="Loss/train.max"]')
    header = page.locator('table#runs th[data-summary="Loss/train.max"]')
    header.locator("button.sort").click()
    expect(header).to_have_attribute("aria-sort", "ascending")
    assert _shown(page) == [run_id for _, run_id in sorted(zip(LRS, ids, strict=True))]
    shown = page.evaluate(
        """() => {
            const ths = [...document.querySelectorAll("table#runs thead th")];
            const at = ths.findIndex((th) => th.dataset.summary === "Loss/train.max");
            return [...document.querySelectorAll("table#runs tbody tr")]
                .map((tr) => tr.children[at].textContent);
        }"""
    )
    assert shown == ["0.5", "1", "2", "3"]  # lr * 10, the one point's value
    page.reload()  # the picked columns are remembered for the experiment
    expect(page.locator("#runs-section[data-loaded]")).to_have_count(1)
    assert page.locator("table#runs th[data-summary]").evaluate_all(
        "(ths) => ths.map((t) => t.dataset.summary)"
    ) == ["Loss/train.max"]


def test_a_column_of_a_key_the_page_does_not_hold_is_listed_from_the_api(
    admin_page: Page, api: httpx.Client
) -> None:
    """The page holds the summaries of its default columns' keys only (issue 31): its table
    shows them without a list request, and a column of another key lists the runs again with
    that key's summaries (summary_keys=)."""
    configs = [{"recipe": "tiny_mlp", "params": {"lr": lr}, "seed": 1} for lr in LRS]
    exp_id, ids = make_experiment_runs(
        configs,
        per_run=lambda i: {"Loss/train": [(1, LRS[i] * 10)], "other/extra": [(1, i + 0.5)]},
        name="browser-runs-held-keys",
    )
    page = admin_page
    lists: list[str] = []
    page.on("request", lambda r: lists.append(r.url) if "/api/runs?" in r.url else None)
    page.goto(f"/experiments/{exp_id}")
    expect(page.locator("#runs-section[data-loaded]")).to_have_count(1)
    assert page.evaluate(
        "() => JSON.parse(document.getElementById('experiment-metric-keys').textContent)"
    ) == {"all": ["Loss/train", "other/extra"], "held": ["Loss/train"]}
    expect(page.locator('table#runs th[data-summary="Loss/train.last"]')).to_have_count(1)
    assert lists == []  # the held first page
    page.click("#runs-columns summary")
    page.check('#runs-column-picker input[data-summary="other/extra.last"]')
    expect(page.locator('table#runs th[data-summary="other/extra.last"]')).to_have_count(1)
    shown = page.evaluate(
        """() => {
            const ths = [...document.querySelectorAll("table#runs thead th")];
            const at = ths.findIndex((th) => th.dataset.summary === "other/extra.last");
            return [...document.querySelectorAll("table#runs tbody tr")]
                .map((tr) => tr.children[at].textContent);
        }"""
    )
    assert shown == ["3.5", "2.5", "1.5", "0.5"], shown  # newest first: run i logged i + 0.5
    assert any("summary_keys=other%2Fextra" in url for url in lists), lists


def test_more_runs_than_a_page_load_by_the_cursor(admin_page: Page, api: httpx.Client) -> None:
    """100 a page; "Load more" and "Load all" follow the API's `next` cursor, in sort order."""
    lrs = [round(0.001 * (i + 1), 6) for i in range(230)]
    exp_id, ids = _sweep(api, "browser-runs-paging", lrs)
    page = admin_page
    page.goto(f"/experiments/{exp_id}")
    expect(page.locator("#runs-section[data-loaded]")).to_have_count(1)
    assert _shown(page) == ids[::-1][:100]
    page.click("#runs-more")
    expect(page.locator("table#runs tbody tr")).to_have_count(200)
    assert _shown(page) == ids[::-1][:200]
    page.click('table#runs th[data-param="params.lr"] button.sort')  # back to one page
    expect(page.locator('table#runs th[data-param="params.lr"]')).to_have_attribute(
        "aria-sort", "ascending"
    )
    assert _shown(page) == ids[:100]
    page.click("#runs-all")
    expect(page.locator("table#runs tbody tr")).to_have_count(230)
    assert _shown(page) == ids
    expect(page.locator("#runs-more")).to_be_hidden()
    expect(page.locator("#runs-count")).to_have_text("230 runs")
