"""How this worker holds its jobs, decided once per process: the sandbox (worker.sandbox), the
job network (worker.job_network) and the resource limits (worker.limits); and the lines the
worker says about them at start (`torchyard up` shows them)."""

from __future__ import annotations

import sys

from app.settings import get_settings
from worker import job_network, limits, sandbox


def job_limits() -> limits.Enforcement:
    """How this worker holds jobs to their limits (probed once per process)."""
    settings = get_settings()
    return limits.decide(settings.job_cgroups, settings.job_cgroup_parent)


def job_isolation() -> sandbox.Isolation:
    """Whether this worker sandboxes its jobs (probed once per process)."""
    settings = get_settings()
    return sandbox.decide(settings.job_isolation, settings.job_uid_base)


def network_plan() -> job_network.Plan:
    """What this worker's sandboxed jobs reach over the network (asked once per process)."""
    settings = get_settings()
    return job_network.plan(settings.job_network, settings.service_urls)


def announce_isolation() -> None:
    """Says at start whether jobs are sandboxed and why, and what their network reaches; with
    job_isolation "bwrap" a worker that cannot sandbox refuses to start (exit 2) rather than
    run jobs unisolated."""
    isolation = job_isolation()
    refused = not isolation.enabled and get_settings().job_isolation == "bwrap"
    # On stdout with the rest of the worker's start banner (`torchyard up` shows it); a
    # refusal says its lines on stderr.
    stream = sys.stderr if refused else sys.stdout
    print(sandbox.describe(isolation), file=stream, flush=True)
    if not refused:
        print(limits.describe(job_limits()), file=stream, flush=True)
        limits.sweep(job_limits(), get_settings().data_dir)
    for line in job_network.describe(
        network_plan(), get_settings().service_urls, sandboxed=isolation.enabled
    ):
        print(line, file=stream, flush=True)
    if refused:
        print(
            "refusing to start: TORCHYARD_JOB_ISOLATION=bwrap requires the sandbox "
            "(docs/security.md)",
            file=sys.stderr,
            flush=True,
        )
        raise SystemExit(2)
