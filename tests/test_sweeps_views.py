"""The sweep page and its links in-process: GET /sweeps/{id} carries the sweep as the API gives
it (for app/static/sweep.js) and a Cancel button only for its owner; the experiment page lists
its sweeps; a trial's run page links its sweep. Trials are queued on the in-memory broker and
never trained (tests/browser/test_sweep_page.py draws a finished one)."""

from __future__ import annotations

import html
import json
import re

from tests.conftest import make_user
from tests.test_pages import login, new_experiment


def start_sweep(client, headers, experiment_id: int) -> dict:
    body = {
        "experiment_id": experiment_id,
        "method": "random",
        "metric": {"name": "val/acc", "goal": "maximize"},
        "parameters": {"params.lr": {"distribution": "log_uniform", "min": 1e-3, "max": 1e-1}},
        "max_runs": 3,
        "max_concurrent": 1,
        "seed": 2,
    }
    r = client.post("/api/sweeps", json=body, headers=headers)
    assert r.status_code == 201, r.text
    return client.get(f"/api/sweeps/{r.json()['id']}", headers=headers).json()


def page_data(text: str) -> dict:
    found = re.search(r'<script type="application/json" id="sweep-data">(.*?)</script>', text, re.S)
    assert found, text[:2000]
    return json.loads(html.unescape(found.group(1)))


def test_the_sweep_page_links_and_cancel_button(client) -> None:
    username, password, headers = make_user()
    login(client, username, password)
    experiment = new_experiment(client, headers, name="swept", params={"epochs": 1})
    sweep = start_sweep(client, headers, experiment["id"])
    sweep_id, run_id = sweep["id"], sweep["trials"][0]["run_id"]

    page = client.get(f"/sweeps/{sweep_id}")
    assert page.status_code == 200
    data = page_data(page.text)
    assert data["id"] == sweep_id and data["planned_runs"] == 3
    assert [t["run_id"] for t in data["trials"]] == [run_id]
    assert 'id="cancel-sweep"' in page.text and "/static/sweep.js" in page.text

    # The trials are THE runs table, scoped to the sweep (app/static/experiment_runs.js)
    assert f'<section id="runs-section" data-sweep-id="{sweep_id}"' in page.text
    assert f'<tr data-run-id="{run_id}">' in page.text and "/static/experiment_runs.js" in page.text
    listed = client.get(f"/experiments/{experiment['id']}").text
    assert f'<tr data-sweep-id="{sweep_id}" data-status="running">' in listed
    assert f'href="/sweeps/{sweep_id}"' in listed and "/static/experiment_sweeps.js" in listed
    assert '<td class="num sweep-progress">0 / 3</td>' in listed
    assert 'id="sweep-form"' in listed and "/static/sweep_form.js" in listed
    run_page = client.get(f"/runs/{run_id}").text
    assert f'<a id="sweep-link" href="/sweeps/{sweep_id}">' in run_page

    client.post("/logout", data={}, follow_redirects=False)
    client.cookies.clear()
    other, other_password, _ = make_user()
    login(client, other, other_password)
    assert 'id="cancel-sweep"' not in client.get(f"/sweeps/{sweep_id}").text
    assert 'id="sweep-form"' not in client.get(f"/experiments/{experiment['id']}").text
    missing = client.get("/sweeps/999999")
    assert missing.status_code == 404 and "sweep 999999 not found" in missing.text
    assert client.get("/sweeps/abc").status_code == 404


def test_a_trial_stopped_early_is_marked_in_the_runs_table_and_the_api(client) -> None:
    """The mark comes from the run's notice (app/sweeps/early_stop.py writes it): the sweep
    page's server rows carry it, and GET /api/runs?sweep_id= gives the reason for the script."""
    from app.db import session_scope
    from app.runs.models import Run
    from app.runs.state import notices
    from app.timeutil import utcnow

    username, password, headers = make_user()
    login(client, username, password)
    experiment = new_experiment(client, headers, name="stopped", params={"epochs": 1})
    sweep = start_sweep(client, headers, experiment["id"])
    run_id = sweep["trials"][0]["run_id"]
    reason = "stopped early by the sweep (median rule: <b>worse</b> than the median)"
    with session_scope() as session:
        run = session.get(Run, run_id)
        assert run is not None
        notices.stopped_early(run, reason, at=utcnow())

    listed = client.get("/api/runs", params={"sweep_id": sweep["id"]}, headers=headers).json()
    assert [(r["id"], r["stopped_early"]) for r in listed["runs"]] == [(run_id, reason)]
    page = client.get(f"/sweeps/{sweep['id']}").text
    assert f'<tr data-run-id="{run_id}" class="stopped-early">' in page
    assert f'title="{html.escape(reason)}">stopped early</span>' in page
    assert "<b>worse</b>" not in page  # the reason is text, never markup
