"""The experiment page's runs table: the params that differ as columns, sort by one (in the
API's SQL), select runs and compare, tag or delete them (app/static/experiment_runs.js)."""

from __future__ import annotations

from typing import Any

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
    ) == {"all": ["Loss/train", "other/extra"], "held": ["Loss/train"], "more": False}
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


def _mixed(name: str) -> tuple[int, list[int], list[int]]:
    """An experiment mixing two job runs (the whole launch config as params, train/ and val/
    keys) with three runs an MLflow client logged (params and tags as strings, its own system
    tags among them; val/ keys only), as app/mlflow records them."""
    from app.db import session_scope
    from app.metrics.service import ingest_points
    from app.runs.models import Run
    from app.runs.query.params import record_logged

    params: dict[str, Any] = {"epochs": 2, "lr": 0.1, "batch_size": 64, "hidden": 32}
    base: dict[str, Any] = {
        "recipe": "tiny_mlp",
        "params": params,
        "seed": 1,
        "deterministic": True,
        "resources": {"gpus": 0, "nproc": 1, "memory_gb": 8, "cpus": 4},
    }
    configs = [base, {**base, "params": {**params, "lr": 0.01}}]
    job_series = {"train/loss": [(1, 0.5)], "train/acc": [(1, 0.8)], "val/acc": [(1, 0.7)]}
    exp_id, jobs = make_experiment_runs(configs, job_series, name=name)
    logged: list[int] = []
    with session_scope() as session:
        owner_id = session.get_one(Run, jobs[0]).owner_id
        for i, lr in enumerate(("0.1", "0.2", "0.3")):
            run = Run(experiment_id=exp_id, owner_id=owner_id, status="succeeded", config={})
            run.seed = 0
            run.name = f"ext-{i + 1}"
            session.add(run)
            session.flush()
            values = {"params.lr": lr, "tags.mlflow.source.name": f"train_{i}.py"}
            values["tags.mlflow.user"] = f"user{i}"
            record_logged(session, run_id=run.id, values=values, source="mlflow")
            logged.append(run.id)
    for run_id in logged:
        with session_scope() as session:
            points = [("val/acc", 1, 0.6, 1e9), ("val/loss", 1, 0.9, 1e9)]
            ingest_points(session, run_id=run_id, points=points)
    return exp_id, jobs, logged


def test_a_mixed_experiments_table_comes_first_with_its_real_columns(admin_page: Page) -> None:
    exp_id, _, logged = _mixed("browser-runs-mixed")
    page = admin_page
    page.set_viewport_size({"width": 1440, "height": 900})
    page.goto(f"/experiments/{exp_id}")
    expect(page.locator("#runs-section[data-loaded]")).to_have_count(1)
    # The one param that differs among the runs having it; not the jobs' shared config keys
    # (the MLflow runs lack them), never MLflow's system tags.
    params = page.locator("table#runs th[data-param]")
    assert params.evaluate_all("(ths) => ths.map((t) => t.dataset.param)") == ["params.lr"]
    # The loss and the accuracy most runs logged: val/acc (all five), val/loss (three of five).
    summaries = page.locator("table#runs th[data-summary]")
    assert summaries.evaluate_all("(ths) => ths.map((t) => t.dataset.summary)") == [
        "val/loss.last",
        "val/acc.max",
    ]
    # The table is the first thing shown: its rows in the first screen, above the config,
    # the launch form and the sweeps.
    rows = page.locator("table#runs tbody tr[data-run-id]")
    expect(rows).to_have_count(5)
    last_row = rows.last.bounding_box()
    assert last_row is not None and last_row["y"] + last_row["height"] <= 900, last_row
    for below in ("#experiment-config", "#launch-form", "#sweeps-section"):
        box = page.locator(below).bounding_box()
        assert box is not None and box["y"] > last_row["y"], below

    # `/` goes to the filter box; a plain word there is a name search.
    page.locator("body").click(position={"x": 5, "y": 5})
    page.keyboard.press("/")
    expect(page.locator("#runs-filter")).to_be_focused()
    page.keyboard.type("ext-2")
    page.keyboard.press("Enter")
    expect(rows).to_have_count(1)
    assert _shown(page) == [logged[1]]

    # An unknown key says so, with the nearest known key and the keys the runs have.
    for key, typed, near in (("val/accuracy", ">0.5", "val/acc"), ("LR", "<0.05", "lr")):
        page.fill("#runs-filter", key + typed)
        page.click("#runs-apply")
        error = page.locator("#runs-error")
        expect(error).to_contain_text(f"no run here has the key '{key}'")
        expect(error).to_contain_text(f"did you mean {near}?")
        expect(error).to_contain_text("Keys: name, tags, status, id, batch_size")
        expect(rows).to_have_count(0)
