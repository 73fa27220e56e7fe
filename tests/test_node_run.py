"""worker.node_run with the suite's database."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.db import session_scope
from app.runs import nodes
from tests.connection_cut import cut_once
from tests.test_run_nodes import running_run
from torchyard.contract import METRICS_FILE
from worker.heartbeat import Watched
from worker.launcher import NodeSpec
from worker.node_run import NodeRole, meet


@pytest.mark.postgres_only
def test_a_connection_cut_while_a_node_reads_the_barrier_is_tried_again(tmp_path: Path) -> None:
    """Node k reads the barrier each round while it waits for the others. That read ran in a
    bare session: a connection PostgreSQL ended under it (a failover, the idle-in-transaction
    limit after a freeze) raised out of meet() and failed the whole multi-node run. It is
    tried again as every other write of the node's is."""
    with session_scope() as session:
        run_id = running_run(session)
        assert nodes.report_ready(session, run_id=run_id, attempt=1, node=0, port=29611)
    run = Watched(run_id, 1, tmp_path / METRICS_FILE, has_leases=False, node=1)
    barrier_read = "ORDER BY run_nodes.node"
    try:
        with cut_once(lambda sql: sql.startswith("SELECT run_nodes") and barrier_read in sql):
            met = meet(run, NodeRole(node=1, nodes=2))
        assert isinstance(met, NodeSpec)
        assert met.master_port == 29611
    finally:  # a running run's node left heartbeating would be reaped by later tests
        with session_scope() as session:
            nodes.node_ended(session, run_id=run_id, attempt=1, node=1, exit_code=0)
