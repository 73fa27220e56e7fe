"""The run page's output filter for a multi-node run: a node picks that node's log (its ranks
in the rank filter), a rank its lines, and a node other than 0 shows its new lines as they are
shipped (polled: the stream follows node 0's log)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect
from sqlalchemy import update

from app.db import session_scope
from app.runs.files import log_store
from app.runs.models import Run
from tests.conftest import DATA_DIR
from tests.factories import make_run

pytestmark = [pytest.mark.slow, pytest.mark.browser]

CONFIG = {"recipe": "tiny_mlp", "params": {}, "resources": {"nodes": 2, "nproc": 2, "gpus": 0}}
NODE_0 = "[rank0]: zero\n[rank1]: one\n"
NODE_1 = "[rank2]: two\n[rank3]: three\n"


def ship_node_1(run_id: int, path: Path, text: str) -> None:
    with path.open("a") as f:
        f.write(text)
    with session_scope() as session:
        assert log_store.ship(session, run_id=run_id, log_path=path, final=True, node=1)


@pytest.fixture
def running_run() -> Iterator[int]:
    """A running 2-node run no worker holds, finished afterwards (so no reaper hands it on)."""
    run_id = make_run(config=CONFIG, status="running")
    yield run_id
    with session_scope() as session:
        session.execute(update(Run).where(Run.id == run_id).values(status="cancelled"))


def test_the_output_filters_by_node_and_rank_and_follows_another_node(
    admin_page: Page, tmp_path: Path, running_run: int
) -> None:
    run_id = running_run
    run_dir = DATA_DIR / "runs" / str(run_id)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "output.log").write_text(NODE_0)  # node 0's, on the API's disk
    node_1_log = tmp_path / "node1.log"  # node 1's, on its own host: shipped
    ship_node_1(run_id, node_1_log, NODE_1)

    page = admin_page
    page.goto(f"/runs/{run_id}")
    tail, node, rank = (
        page.locator("#log-tail"),
        page.locator("#log-node"),
        page.locator("#log-rank"),
    )
    expect(tail).to_have_text(NODE_0)
    expect(rank.locator("option")).to_have_text(["all", "rank 0", "rank 1"])

    node.select_option("1")
    expect(tail).to_have_text(NODE_1)
    expect(rank.locator("option")).to_have_text(["all", "rank 2", "rank 3"])
    rank.select_option("3")
    expect(tail).to_have_text("[rank3]: three\n")
    ship_node_1(run_id, node_1_log, "[rank2]: two more\n[rank3]: three more\n")
    expect(tail).to_have_text("[rank3]: three\n[rank3]: three more\n")  # polled

    node.select_option("0")
    expect(tail).to_have_text(NODE_0)
    expect(rank.locator("option")).to_have_text(["all", "rank 0", "rank 1"])
    rank.select_option("1")
    expect(tail).to_have_text("[rank1]: one\n")


def test_a_single_host_run_has_no_node_filter(admin_page: Page) -> None:
    run_id = make_run(status="succeeded")
    admin_page.goto(f"/runs/{run_id}")
    expect(admin_page.locator("#log-rank")).to_be_visible()
    expect(admin_page.locator("#log-node")).to_have_count(0)
