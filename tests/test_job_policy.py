"""What the worker says at start about running as root (worker/job_policy.py): our own line
instead of Celery's superuser warning (issue 41: "absolutely not recommended" beside "jobs run
sandboxed")."""

from __future__ import annotations

import os
import warnings

import pytest
from celery.platforms import check_privileges

from worker import sandbox
from worker.job_policy import quiet_celery_root_warning, root_line

SANDBOXED = sandbox.Isolation(True, "jobs run in a bubblewrap sandbox", as_root=True)
OPEN = sandbox.Isolation(False, "bubblewrap is not installed")


def test_root_says_why_and_that_no_job_runs_as_root() -> None:
    assert root_line(SANDBOXED, euid=1000, uid_base=770000) is None
    line = root_line(SANDBOXED, euid=0, uid_base=770000)
    assert line is not None and line.startswith("worker runs as root: only to set up")
    assert "uid 770000 + run id" in line and "never as root" in line
    warning = root_line(OPEN, euid=0, uid_base=770000)
    assert (
        warning is not None
        and warning.startswith("WARNING: ")
        and "every job runs as root" in warning
    )


@pytest.mark.skipif(os.geteuid() != 0, reason="Celery warns only a worker started as root")
def test_celerys_superuser_warning_is_left_out() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_privileges({"json"})
    assert any("superuser privileges" in str(w.message) for w in caught)  # Celery's, as root
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quiet_celery_root_warning()
        check_privileges({"json"})
    assert not [w for w in caught if "superuser privileges" in str(w.message)]
