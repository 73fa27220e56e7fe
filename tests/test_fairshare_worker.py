"""Fair share end to end (issue 42): a real server and a real worker with two fake GPUs
("0,1"), real jobs, two members. The first submits four short runs, then the second four;
without fair share the first would hold both GPUs until all four were done. Judged from what
the runs recorded (started_at): the starts interleave by user. The GPU-time split itself is
measured through the scheduling service on a controlled clock (tests/test_fairshare.py)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from sqlalchemy import delete

from app.db import session_scope
from app.gpus.models import WorkerHost
from tests.conftest import ADMIN_PASSWORD, BASE_DIR, make_user
from tests.stack import (
    LiveStack,
    fake_gpu_stack,
    own_broker_url,
)
from tests.test_gpu_leases import finished, submit, when

pytestmark = pytest.mark.slow

FAIR_BROKER_URL = own_broker_url(BASE_DIR / "fair-broker.db")
LOG_DIR = BASE_DIR / "logs-fair"


def env(**extra: str) -> dict[str, str]:
    return dict(
        os.environ,
        TORCHYARD_BROKER_URL=FAIR_BROKER_URL,
        TORCHYARD_LEASE_TTL_SECONDS="5",
        TORCHYARD_RUN_HEARTBEAT_SECONDS="1",
        TORCHYARD_FAIR_SHARE_HALF_LIFE_HOURS="24",
        PYTHONUNBUFFERED="1",
        **extra,
    )


@pytest.fixture(scope="module")
def live(database: str) -> Iterator[LiveStack]:
    try:
        with fake_gpu_stack(
            env(), LOG_DIR, host="fair-a", gpus="0,1", concurrency=3, admin_password=ADMIN_PASSWORD
        ) as stack:
            yield stack
    finally:
        # Not live for the modules after this one (a host heartbeated within their lease TTL
        # would be offered their runs: tests/test_gpu_panel_nodes.py places nodes by name).
        with session_scope() as session:
            session.execute(delete(WorkerHost).where(WorkerHost.host == "fair-a"))


def test_two_users_runs_interleave_on_two_gpus(live: LiveStack) -> None:
    first, second = make_user(), make_user()
    ids: dict[int, str] = {}
    for (name, _, headers), tag in ((first, "a"), (second, "b")):
        with live.client(headers) as client:
            for i in range(4):
                ids[submit(client, f"fair-{tag}{i}", 1, 6, 0.2)] = name
    with live.admin_client() as admin:
        runs = [finished(admin, run_id) for run_id in ids]
        table = admin.get("/api/fair-share").json()
    order = [ids[r["id"]] for r in sorted(runs, key=lambda r: when(r, "started_at"))]
    a, b = first[0], second[0]
    # The first user's first run starts first. Their second starts beside it at once on an
    # idle box; on a starved one the worker may ask for its next run only once all eight are
    # queued, and then the second user, with nothing running, comes first (stop 52's CI):
    # either way the second user's first run is among the first three to start, and their
    # second starts before the first user's fourth (first come, first served would start all
    # four of the first user's before any of the second's). The exact pairs depend on the
    # runs' real lengths, which fair share charges: tests/test_fairshare.py measures the split
    # on a controlled clock.
    assert order[0] == a and b in order[:3], order
    starts_of = {who: [i for i, owner in enumerate(order) if owner == who] for who in (a, b)}
    assert starts_of[b][1] < starts_of[a][3], order
    assert order.count(a) == order.count(b) == 4
    users = {u["username"]: u for u in table["users"]}
    assert users[a]["gpu_hours"] > 0 and users[b]["gpu_hours"] > 0
