"""`torchyard experiments edit` (torchyard/cli/experiments.py) as a subprocess against the suite's
live server: the admin's CLI sets an experiment's own best metric, clears it, and a member's
try on someone else's experiment is the server's refusal in one line."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import make_user
from tests.stack import LiveStack
from tests.test_cli import Cli, logged_in_cli

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cli(live_stack: LiveStack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cli]:
    yield logged_in_cli(live_stack, tmp_path_factory.mktemp("cli-experiments") / "cli.json")


def test_experiments_edit_sets_and_clears_the_best_metric(cli: Cli, live_stack: LiveStack) -> None:
    member = make_user()[2]
    config = {"recipe": "tiny_mlp", "params": {}, "seed": 1}
    with httpx.Client(base_url=live_stack.base_url, headers=member, timeout=30) as theirs:
        r = theirs.post("/api/experiments", json={"name": "cli-best", "config": config})
        assert r.status_code == 201, r.text
        exp_id = str(r.json()["id"])

        # the admin may edit anyone's experiment
        done = cli("experiments", "edit", exp_id, "--best", "val/loss", "--mode", "min")
        assert done.returncode == 0, done.stderr
        assert f"experiment {exp_id} ('cli-best'): best val/loss (min)" in done.stdout
        got = theirs.get(f"/api/experiments/{exp_id}").json()
        assert got["best"] == {"metric": "val/loss", "mode": "min"}

        renamed = cli("experiments", "edit", exp_id, "--name", "cli-best-2")
        assert renamed.returncode == 0 and "'cli-best-2'" in renamed.stdout, renamed.stderr
        assert theirs.get(f"/api/experiments/{exp_id}").json()["best"]["metric"] == "val/loss"

        cleared = cli("experiments", "edit", exp_id, "--no-best")
        assert cleared.returncode == 0, cleared.stderr
        assert "no best metric of its own" in cleared.stdout
        assert theirs.get(f"/api/experiments/{exp_id}").json()["best"] is None

    nothing = cli("experiments", "edit", exp_id)
    assert nothing.returncode == 2 and "nothing to change" in nothing.stderr
    both = cli("experiments", "edit", exp_id, "--best", "val/acc", "--no-best")
    assert both.returncode == 2 and "not both" in both.stderr
    bad = cli("experiments", "edit", exp_id, "--best", "val/acc", "--mode", "maximize")
    assert bad.returncode == 2, bad.stderr

    # a member's CLI on the admin's experiment: the 403 in one line, exit 1
    with live_stack.admin_client() as admin:
        mine = admin.post("/api/experiments", json={"name": "cli-best-admin", "config": config})
        admin_exp = str(mine.json()["id"])
    refused = Cli(live_stack, Path(cli.env["TORCHYARD_CLI_CONFIG"] + ".member"))
    refused.env["TORCHYARD_URL"] = live_stack.base_url
    refused.env["TORCHYARD_TOKEN"] = member["Authorization"].removeprefix("Bearer ")
    answer = refused("experiments", "edit", admin_exp, "--best", "val/acc")
    assert answer.returncode == 1, answer.stdout
    assert "belongs to another user" in answer.stderr and "Traceback" not in answer.stderr
