"""The API process of a machine that also keeps run directories (`torchyard up`, the compose
api that shares the workers' runs volume): app.main's app, with this machine's view of its
jobs handed to the reaper (worker.liveness.HostJobs).

The reaper is the server's (app.runs.state.reaper) and decides from the database; only a process on
the jobs' host can tell that a run whose worker is away still trains under its keeper, or
ended while nobody watched, and move what its spool still holds. That knowledge is the host
agent's, so it is composed here, in the composition root (neither app nor worker): app never
imports the worker, and an API on a machine without run directories serves
`app.main:create_app` alone.
"""

from __future__ import annotations

from fastapi import FastAPI

from app.main import create_app as create_api
from app.runs.state.reaper import use_local_jobs
from worker.liveness import HostJobs


def create_app() -> FastAPI:
    use_local_jobs(HostJobs())
    return create_api()
