"""The run page's config, variant link and parent link, in-process: hostile config text stays
text, the variant form is prefilled from the run (and only for who may launch), and a resumed
run links its parent with the checkpoint's step for the parent's curve."""

from __future__ import annotations

from sqlalchemy import update

from app.db import session_scope
from app.runs.models import Run
from tests.test_resume_overrides import add_checkpoint
from tests.test_runs_views import logged_in, new_run

HOSTILE = "'\"><img src=x onerror=alert(1)></pre><script>alert(2)</script>"


def test_config_and_variant_form_show_hostile_values_as_text(app) -> None:
    client, headers = logged_in(app)
    run = new_run(client, headers)
    config = {**run["config"], "params": {**run["config"]["params"], "note": HOSTILE}}
    with session_scope() as session:
        session.execute(update(Run).where(Run.id == run["id"]).values(config=config))
    page = client.get(f"/runs/{run['id']}").text
    assert 'id="run-config"' in page and 'id="launch-variant"' in page
    assert f'href="/experiments/new?variant_of={run["id"]}"' in page
    form = client.get(f"/experiments/new?variant_of={run['id']}")
    assert form.status_code == 200
    assert f'data-variant-of="{run["id"]}"' in form.text
    assert f'data-experiment-id="{run["experiment_id"]}"' in form.text
    for html in (page, form.text):
        assert "<img src=x" not in html and "<script>alert(2)" not in html
        assert "onerror=alert(1)></pre>" not in html


def test_variant_form_of_another_users_run_is_refused_and_not_offered(app) -> None:
    client, headers = logged_in(app)
    run = new_run(client, headers)
    other, _ = logged_in(app)
    assert other.get(f"/experiments/new?variant_of={run['id']}").status_code == 403
    assert 'id="launch-variant"' not in other.get(f"/runs/{run['id']}").text


def test_a_resumed_runs_page_links_its_parent_and_the_checkpoint_step(app) -> None:
    client, headers = logged_in(app)
    run = new_run(client, headers)
    add_checkpoint(run["id"], "epoch-0003.pt", epoch=3, step=42)
    body = {"checkpoint": "epoch-0003.pt", "overrides": {"params": {"epochs": 9}}}
    child = client.post(f"/api/runs/{run['id']}/resume", json=body, headers=headers).json()
    page = client.get(f"/runs/{child['id']}").text
    assert (
        f'href="/runs/{run["id"]}">Resumed from run {run["id"]}, checkpoint epoch-0003.pt' in page
    )
    assert f'data-parent-run="{run["id"]}" data-parent-step="42"' in page
    assert "data-parent-run" not in client.get(f"/runs/{run['id']}").text
