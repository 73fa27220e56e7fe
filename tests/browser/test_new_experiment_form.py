"""The new-experiment form shows the API's validation error next to the field and creates
nothing."""

from __future__ import annotations

import httpx
import pytest
from playwright.sync_api import Page, expect

pytestmark = [pytest.mark.slow, pytest.mark.browser]


def server_message(api: httpx.Client, params: dict, field: str) -> str:
    """What the API itself says about this config (it creates nothing either: 422)."""
    r = api.post(
        "/api/experiments",
        json={"name": "probe", "config": {"recipe": "tiny_mlp", "params": params}},
    )
    assert r.status_code == 422, r.text
    for error in r.json()["detail"]:
        loc = [str(part) for part in error["loc"] if part not in ("body", "config")]
        if ".".join(loc) == field:
            return str(error["msg"])
    raise AssertionError(f"no error for {field}: {r.text}")


@pytest.mark.parametrize(
    ("field", "value"),
    [("params.lr", "-1"), ("params.epochs", "0")],
)
def test_invalid_param_shows_the_server_message_next_to_the_field_and_creates_nothing(
    admin_page: Page, api: httpx.Client, field: str, value: str
) -> None:
    name = field.split(".", 1)[1]
    expected = server_message(api, {name: float(value) if name == "lr" else int(value)}, field)
    before = len(api.get("/api/experiments").json())
    runs_before = api.get("/api/runs", params={"limit": 1}).json()["runs"]  # the newest

    page = admin_page
    page.goto("/experiments/new")
    page.fill("input[name=name]", f"browser-invalid-{name}")
    page.select_option("select[name=recipe]", "tiny_mlp")
    page.fill(f'[name="{field}"]', value)
    page.click("#create-and-launch")

    error = page.locator(f'.field-error[data-field="{field}"]')
    expect(error).to_be_visible(timeout=10_000)
    expect(error).to_contain_text(expected)
    assert page.url.endswith("/experiments/new"), page.url
    # Only that field is flagged, and the user's input is still there to fix.
    flagged = page.eval_on_selector_all(
        ".field-error",
        "els => els.filter((e) => e.textContent.trim()).map((e) => e.dataset.field)",
    )
    assert flagged == [field], flagged
    assert page.input_value(f'[name="{field}"]') == value
    assert len(api.get("/api/experiments").json()) == before
    assert api.get("/api/runs", params={"limit": 1}).json()["runs"] == runs_before


SCRIPT = """
import argparse
from torchyard.sdk import init

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=1)
parser.add_argument("--tag", default="")
parser.add_argument("--loud", action="store_true")
args = parser.parse_args()
run = init()
for step in range(1, args.epochs * 5 + 1):
    run.log(step=step, **{"train/loss": 1.0 / step})
print(f"script done: tag={args.tag} loud={args.loud} epochs={args.epochs}")
"""


def test_a_workspace_script_from_the_form_escapes_are_refused_then_it_runs(
    admin_page: Page, api: httpx.Client
) -> None:
    from tests.conftest import WORKSPACE_DIR

    (WORKSPACE_DIR / "form").mkdir(exist_ok=True)
    (WORKSPACE_DIR / "form" / "train.py").write_text(SCRIPT)
    before = len(api.get("/api/experiments").json())

    page = admin_page
    page.goto("/experiments/new")
    page.select_option("select[name=recipe]", "__script__")
    page.fill("input[name=name]", "browser-script")
    page.fill("input[name=script]", "../outside.py")
    page.click("#create-and-launch")
    error = page.locator('.field-error[data-field="script"]')
    expect(error).to_contain_text("leaves the workspace", timeout=10_000)
    assert len(api.get("/api/experiments").json()) == before  # nothing created

    page.fill("input[name=script]", "form/train.py")
    page.fill("input[name=args]", "--tag 'two words'")
    page.fill("textarea[name=params]", "epochs=2\nloud=true")
    page.click("#create-and-launch")
    page.wait_for_url("**/runs/*", timeout=15_000)
    run_id = int(page.url.rsplit("/", 1)[1])
    expect(page.locator("#run-status")).to_have_attribute(
        "data-status", "succeeded", timeout=90_000
    )
    run = api.get(f"/api/runs/{run_id}").json()
    assert run["config"]["script"] == "form/train.py"
    assert run["config"]["args"] == ["--tag", "two words"]
    assert run["config"]["params"] == {"epochs": 2, "loud": True}
    assert (
        "script done: tag=two words loud=True epochs=2" in api.get(f"/api/runs/{run_id}/logs").text
    )
    loss = api.get(f"/api/runs/{run_id}/metrics").json()["series"]["train/loss"]
    assert loss["step"] == list(range(1, 11))


def test_the_pool_select_offers_the_live_pools_and_the_run_waits_for_its_pools_worker(
    admin_page: Page, api: httpx.Client
) -> None:
    """A worker of another pool is live (its host's heartbeat, written here): the form offers
    it beside `local` (the default); the run launched on it is that pool's, and with that
    worker gone its page says it waits for one (the live stack's local worker never takes
    it)."""
    from sqlalchemy import delete

    from app.db import session_scope
    from app.gpus.models import WorkerHost
    from app.gpus.scheduler import no_live_worker
    from app.gpus.service import touch_host
    from app.timeutil import utcnow

    pool, host = "browser-pool", "browser-pool-host"

    def forget_host() -> None:
        with session_scope() as session:
            session.execute(delete(WorkerHost).where(WorkerHost.host == host))

    with session_scope() as session:
        touch_host(session, host=host, gpus=[], now=utcnow(), pool=pool)
    run_id = 0
    try:
        page = admin_page
        page.goto("/experiments/new")
        select = page.locator("select[name='resources.pool']")
        expect(select).to_have_value("local")
        values = select.locator("option").evaluate_all("els => els.map((e) => e.value)")
        assert values[0] == "local" and pool in values
        expect(select.locator(f"option[value='{pool}']")).to_have_text(f"{pool} (1 host)")
        page.fill("input[name=name]", "browser-pool-run")
        page.select_option("select[name=recipe]", "tiny_mlp")
        select.select_option(pool)
        page.click("#create-and-launch")
        page.wait_for_url("**/runs/*", timeout=15_000)
        run_id = int(page.url.rsplit("/", 1)[1])
        run = api.get(f"/api/runs/{run_id}").json()
        assert run["config"]["resources"]["pool"] == pool and run["status"] == "queued"
        forget_host()
        reason = no_live_worker(pool, ever_served=False)
        assert api.get(f"/api/runs/{run_id}").json()["queue_reason"] == reason
        page.reload()
        expect(page.locator("body")).to_contain_text(f"no live worker serves pool '{pool}'")
    finally:
        forget_host()
        if run_id:
            api.post(f"/api/runs/{run_id}/cancel")
