"""`torchyard views list|delete` (torchyard/cli/views.py) as a subprocess against the suite's live
server: the admin's CLI lists its own and the shared views with the URL that opens each, never
a member's private one, and deletes what it may."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from tests.conftest import make_user
from tests.stack import LiveStack
from tests.test_cli import Cli, logged_in_cli

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cli(live_stack: LiveStack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cli]:
    yield logged_in_cli(live_stack, tmp_path_factory.mktemp("cli-views") / "cli.json")


def test_views_list_and_delete(cli: Cli, live_stack: LiveStack) -> None:
    member = make_user()[2]
    with (
        live_stack.admin_client() as admin,
        httpx.Client(base_url=live_stack.base_url, headers=member, timeout=30) as other,
    ):
        config = {"recipe": "tiny_mlp", "params": {}, "seed": 1}
        exp = admin.post("/api/experiments", json={"name": "cli-views", "config": config})
        exp_id = exp.json()["id"]

        def save(client: httpx.Client, name: str, shared: bool) -> int:
            body = {"name": name, "experiment_id": exp_id, "shared": shared, "state": {}}
            r = client.post("/api/views", json=body)
            assert r.status_code == 201, r.text
            return int(r.json()["id"])

        mine = save(admin, "admin's", False)
        shared = save(other, "team", True)
        private = save(other, "member's own", False)

    listed = cli("views", "list", "--experiment", str(exp_id), "--json")
    assert listed.returncode == 0, listed.stderr
    assert {v["id"] for v in json.loads(listed.stdout)} == {mine, shared}
    table = cli("views", "list", "-e", str(exp_id))
    assert table.returncode == 0, table.stderr
    assert f"{live_stack.base_url}/experiments/{exp_id}?view={shared}" in table.stdout
    assert "member's own" not in table.stdout

    hidden = cli("views", "delete", str(private))
    assert hidden.returncode == 1 and f"view {private} not found" in hidden.stderr
    for view_id in (mine, shared):  # the admin's own, and a member's shared one
        done = cli("views", "delete", str(view_id))
        assert done.returncode == 0 and f"view {view_id} deleted" in done.stdout, done.stderr
    assert json.loads(cli("views", "list", "-e", str(exp_id), "--json").stdout) == []
