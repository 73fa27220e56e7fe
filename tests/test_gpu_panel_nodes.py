"""The GPU panel shows a multi-node run on each of its hosts: every node's leased GPUs name
the run, the run's hosts in node order and the node that host is; the queue says a waiting
one's GPUs per host and its hosts. Through the real services (lifecycle.queue, try_start),
as tests/test_gpu_panel.py."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from app.db import session_scope
from app.experiments.config.model import with_seed
from app.experiments.config.validate import validate_config
from app.experiments.models import Experiment
from app.gpus.panel import gpu_panel
from app.gpus.schemas import GpuPanelOut
from app.gpus.service import StartOutcome
from app.runs.state import lifecycle
from app.timeutil import utcnow
from tests.conftest import make_user
from tests.test_gpu_panel import NEVER_STARVES, TTL, Made, host, remove, start_on, user_named


@pytest.fixture
def made() -> Iterator[Made]:
    made = Made([], [])
    yield made
    remove(made)


def queue_multi_node(made: Made, username: str, *, nodes: int, gpus: int) -> int:
    """Queued as the scheduler sees it (app.runs.service refuses nodes > 1 until the launch is
    wired: docs/multi-node.md), through app.runs.state.lifecycle as create_run would."""
    config = {
        "recipe": "tiny_mlp",
        "params": {},
        "resources": {"nodes": nodes, "gpus": gpus, "nproc": gpus},
    }
    with session_scope() as session:
        owner = user_named(session, username)
        exp = Experiment(name="gpu-panel-nodes", config=config, owner_id=owner.id)
        session.add(exp)
        session.flush()
        run = lifecycle.queue(
            session,
            experiment_id=exp.id,
            owner_id=owner.id,
            config=with_seed(validate_config(config, loc_prefix=())),
            priority=10_000,
        )
        made.run_ids.append(run.id)
        return run.id


def panel() -> GpuPanelOut:
    with session_scope() as session:
        return gpu_panel(
            session, now=utcnow(), lease_ttl_seconds=TTL, starvation_seconds=NEVER_STARVES
        )


def test_a_multi_node_run_shows_on_each_of_its_hosts_with_its_node(made: Made) -> None:
    username = make_user()[0]
    a, b, c = host(made, [0, 1]), host(made, [0, 1]), host(made, [0, 1])
    run_id = queue_multi_node(made, username, nodes=2, gpus=2)
    got = panel()
    queued = [q for q in got.queue if q.run_id == run_id]
    assert [(q.gpus, q.nodes) for q in queued] == [(2, 2)]
    assert start_on(run_id, b, [0, 1]).outcome is StartOutcome.STARTED  # b asked: node 0
    hosts = {h.host: h for h in panel().hosts}
    node_hosts = [h for h in (a, b, c) if any(g.run_id == run_id for g in hosts[h].gpus)]
    assert len(node_hosts) == 2 and b in node_hosts
    order = [b] + [h for h in node_hosts if h != b]
    for node, name in enumerate(order):
        gpus = hosts[name].gpus
        assert [(g.index, g.state, g.run_id, g.owner) for g in gpus] == [
            (0, "leased", run_id, username),
            (1, "leased", run_id, username),
        ]
        assert all(g.run_hosts == order and g.node == node for g in gpus)
    free = next(h for h in (a, c) if h not in node_hosts)
    assert [(g.state, g.run_hosts, g.node) for g in hosts[free].gpus] == [("free", [], None)] * 2


def test_a_single_host_runs_gpus_name_no_nodes(made: Made) -> None:
    username = make_user()[0]
    a = host(made, [0])
    run_id = queue_multi_node(made, username, nodes=1, gpus=1)
    assert start_on(run_id, a, [0]).outcome is StartOutcome.STARTED
    (gpu,) = {h.host: h for h in panel().hosts}[a].gpus
    assert gpu.run_id == run_id and gpu.run_hosts == [] and gpu.node is None
