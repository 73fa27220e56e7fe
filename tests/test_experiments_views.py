"""The experiment page at scale (app/experiments/views.py, issue 31): it holds the newest runs
only (the table's first page as rows, the curves' runs with that page's cursor), and counts by
counting. Before, every run was a row of the HTML (4.5 MB at 10,000 runs).

In-process, logged in as a browser is; runs written straight into the table (never executed).
"""

from __future__ import annotations

import html as html_lib
import json
import re

from app.db import session_scope
from app.runs.models import Run
from tests.conftest import make_user
from tests.page_modules import assert_modules_preloaded
from tests.test_pages import login, new_experiment, row_ids


def _me(client, headers) -> int:
    return int(client.get("/api/users/me", headers=headers).json()["id"])


def _add_runs(experiment_id: int, owner_id: int, count: int) -> list[int]:
    with session_scope() as session:
        runs = [
            Run(
                experiment_id=experiment_id,
                owner_id=owner_id,
                status="succeeded",
                config={},
                seed=0,
            )
            for _ in range(count)
        ]
        session.add_all(runs)
        session.flush()
        return [r.id for r in runs]


def _add_keys(run_ids: list[int], keys: list[str]) -> None:
    """Each run's summary of each key (last 0.5, min 0.1, max 0.9 at step 9)."""
    from app.metrics.models import MetricKey

    with session_scope() as session:
        session.add_all(
            MetricKey(run_id=rid, key=k, last_value=0.5, min_value=0.1, max_value=0.9, last_step=9)
            for rid in run_ids
            for k in keys
        )


def _json_of(page: str, element_id: str) -> object:
    found = re.search(rf'<script type="application/json" id="{element_id}">(.*?)</script>', page)
    assert found, element_id
    return json.loads(html_lib.unescape(found.group(1)))


def test_the_page_holds_the_newest_page_of_runs_and_counts_them_all(client) -> None:
    name, password, headers = make_user()
    teammate, _, their_headers = make_user()
    login(client, name, password)
    exp = new_experiment(client, headers)
    # the teammate's runs are the oldest: on no page the server renders
    old = _add_runs(exp["id"], _me(client, their_headers), 30)
    mine = _add_runs(exp["id"], _me(client, headers), 220)

    page = client.get(f"/experiments/{exp['id']}").text
    newest = sorted(old + mine, reverse=True)
    assert row_ids(page, "data-run-id") == newest[:40]  # SHOWN_ROWS; the script shows 100
    assert f"and its {len(newest)} runs" in page and f"{len(newest)} runs</span>" in page
    # the table names whoever launched a run it may list later
    assert teammate in html_lib.unescape(page.split("data-owners='")[1].split("'")[0])
    curves = _json_of(page, "experiment-curves-runs")
    assert isinstance(curves, list) and [r["id"] for r in curves] == newest[:200]
    first = _json_of(page, "runs-first-page")
    assert isinstance(first, dict) and first["take"] == 100
    # its cursor goes on where the page's rows end, as the API's own next page would
    r = client.get(
        "/api/runs",
        params={"experiment_id": exp["id"], "sort": "-id", "limit": 100, "cursor": first["next"]},
        headers=headers,
    )
    assert r.status_code == 200, r.text
    assert [run["id"] for run in r.json()["runs"]] == newest[100:200]


def test_every_module_of_the_page_is_preloaded(client) -> None:
    name, password, headers = make_user()
    login(client, name, password)
    exp = new_experiment(client, headers)
    _add_runs(exp["id"], _me(client, headers), 1)
    page = client.get(f"/experiments/{exp['id']}").text
    # the deepest of the import chains, and a module every entry's chain reaches
    assert_modules_preloaded(
        page, ("/static/experiment_runs.js", "/static/lib/groups.js", "/static/lib/api.js")
    )


def test_the_page_holds_the_names_of_every_key_and_the_summaries_of_its_first_columns_only(
    client,
) -> None:
    """20 keys a run made the held runs 662 KB of a 722 KB page (issue 31): the page names the
    keys and holds the summaries of those its table and parallel coordinates show first."""

    name, password, headers = make_user()
    login(client, name, password)
    exp = new_experiment(client, headers)
    ids = _add_runs(exp["id"], _me(client, headers), 3)
    keys = [
        "train/loss",
        "train/acc",
        "val/loss",
        "val/acc",
        *(f"extra/k{i:02d}" for i in range(20)),
    ]
    _add_keys(ids, keys)

    page = client.get(f"/experiments/{exp['id']}").text
    named = _json_of(page, "experiment-metric-keys")
    assert isinstance(named, dict)
    assert sorted(named["all"]) == sorted(keys)
    # every loss and accuracy (the table counts the runs logging each: issue 41) and the first
    # validation key, not the extra/ keys, in the pages' key order (lib/format.js compareKeys)
    held = ["train/acc", "train/loss", "val/acc", "val/loss"]
    assert named["held"] == held
    curves = _json_of(page, "experiment-curves-runs")
    assert isinstance(curves, list) and len(curves) == 3
    for run in curves:
        assert sorted(run["summary"]) == held
        assert run["summary"]["val/acc"] == {"last": 0.5, "min": 0.1, "max": 0.9, "step": 9}
    # the API still gives every key's summary (design.md: up to 50 in a list)
    listed = client.get("/api/runs", params={"experiment_id": exp["id"]}, headers=headers).json()
    assert all(len(r["summary"]) == len(keys) for r in listed["runs"])


def test_the_page_names_its_first_keys_only_and_the_pickers_search_the_others(client) -> None:
    """issue 43: 100 runs logging 1,000 keys each made the page 453 KB, every listed key's name
    twice (a datalist and the metric keys). It names PAGE_KEYS in the pages' key order, says
    there are more, and the key search finds one it does not name."""
    from app.experiments.views import PAGE_KEYS

    name, password, headers = make_user()
    login(client, name, password)
    exp = new_experiment(client, headers)
    ids = _add_runs(exp["id"], _me(client, headers), 3)
    keys = ["train/loss", *(f"grad/layer_{i:03d}/norm" for i in range(99))]
    _add_keys(ids, keys)
    page = client.get(f"/experiments/{exp['id']}").text
    named = _json_of(page, "experiment-metric-keys")
    assert isinstance(named, dict) and named["more"] is True
    assert named["all"] == sorted(keys)[:PAGE_KEYS]  # grad/ before train/ (compareKeys)
    assert named["held"] == ["train/loss"]
    assert 'id="best-metric-keys"></datalist>' in page  # filled as the owner types
    assert "grad/layer_098/norm" not in page
    found = client.get(
        f"/api/experiments/{exp['id']}/keys", params={"q": "layer_098"}, headers=headers
    ).json()
    assert found == {"keys": ["grad/layer_098/norm"], "more": False}
