"""What `torchyard up` says as it stops (torchyard/compose/farewell.py): each run whose job
trains on after Ctrl-C, and how to stop it (issue 41: "torchyard stopped" alone read as if
the jobs had stopped too)."""

from __future__ import annotations

import socket

from sqlalchemy import select

from app.auth.models import User
from app.db import session_scope
from app.runs.models import Run
from tests.conftest import make_user
from tests.factories import add_run
from torchyard.compose.farewell import LeftRunning, farewell, left_running


def test_the_lines_name_each_job_left_training_and_how_to_stop_it() -> None:
    runs = [LeftRunning(12, "warmup", 4242), LeftRunning(13, None, None)]
    assert farewell(runs, kept=True) == [
        "2 jobs train on without torchyard: run 12 'warmup' (pid 4242), run 13.",
        "Their points wait in their run folders: the next `torchyard up` takes them over.",
        "To stop one: `torchyard up`, then `torchyard cancel 12` (or Cancel on its page); to "
        "stop them with torchyard, set TORCHYARD_KEEP_JOBS_ON_WORKER_STOP=0.",
    ]
    assert farewell(runs[1:], kept=True)[0] == "1 job trains on without torchyard: run 13."
    assert farewell([], kept=True) == []
    assert farewell(runs, kept=False) == []  # the worker stopped them itself


def test_the_runs_left_are_this_hosts_running_ones() -> None:
    username, _, _ = make_user()
    with session_scope() as session:
        owner = session.scalars(select(User.id).where(User.username == username)).one()
        here = add_run(session, owner_id=owner, status="running")
        elsewhere = add_run(session, owner_id=owner, status="running")
        done = add_run(session, owner_id=owner, status="succeeded")
        for run_id, host in ((here, socket.gethostname()), (elsewhere, "other-host"), (done, None)):
            session.get_one(Run, run_id).worker_host = host or socket.gethostname()
        session.get_one(Run, here).pid = 4242
    left = {r.run_id: r for r in left_running()}
    assert left[here] == LeftRunning(here, None, 4242)
    assert elsewhere not in left and done not in left
