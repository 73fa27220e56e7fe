"""Which host holds which node of a run: a multi-node run's hosts each keep a folder of it,
and only node 0's is the run's own (its spool, log offsets and checkpoints)."""

from __future__ import annotations

from sqlalchemy.orm import Session

from app.experiments.config import run_config
from app.runs.models import Run


def holds_node_0(session: Session, *, run_id: int, host: str) -> bool:
    """Whether this host's folder of the run is the run's own: a single-host run's, or node
    0's of a multi-node run (``runs.worker_host``). Node k > 0's host has a folder too, whose
    spool and log forwarded as the run's would land on node 0's offsets."""
    run = session.get(Run, run_id)
    if run is None:
        return False
    return run_config(run.config or {}).resources.nodes == 1 or run.worker_host == host
