"""How this worker holds its jobs, decided once per process: the sandbox (worker.sandbox), the
job network (worker.job_network) and the resource limits (worker.limits); and the lines the
worker says about them at start (`torchyard up` shows them)."""

from __future__ import annotations

import os
import shutil
import sys
import warnings
from collections.abc import Sequence

from app.settings import get_settings
from worker import job_firewall, job_network, limits, sandbox


def job_limits() -> limits.Enforcement:
    """How this worker holds jobs to their limits (probed once per process)."""
    settings = get_settings()
    parent = limits.installation_parent(settings.job_cgroup_parent, settings.data_dir)
    return limits.decide(settings.job_cgroups, parent, settings.job_cpu_weight)


def job_isolation() -> sandbox.Isolation:
    """Whether this worker sandboxes its jobs (probed once per process)."""
    settings = get_settings()
    return sandbox.decide(settings.job_isolation, settings.job_uid_base)


def network_plan() -> job_network.Plan:
    """What this worker's sandboxed jobs reach over the network (asked once per process)."""
    settings = get_settings()
    return job_network.plan(
        settings.job_network, settings.service_urls, link_local=settings.job_allow_link_local
    )


def multi_node_refusal() -> str | None:
    """Why this worker cannot start a multi-node job with the job network it promises (None:
    it can, or jobs share the host's network anyway: TORCHYARD_JOB_NETWORK=host)."""
    if network_plan().mode == "host":
        return None
    isolation = job_isolation()
    own_uid = isolation.enabled and isolation.as_root
    why = "the worker does not run as root" if isolation.enabled else "jobs are not sandboxed"
    return job_firewall.refusal(nft=job_firewall.nft_path(), run_uid=own_uid, why_no_uid=why)


def multi_node_fence(run_id: int, peers: Sequence[str], port: int) -> job_firewall.Fence | None:
    """The rules of a multi-node job's uid (worker.job_firewall), None in host network mode.
    Asked per run: the host's addresses and the service hosts as they are now."""
    plan = network_plan()
    if plan.mode == "host":
        return None
    settings = get_settings()
    ip = shutil.which("ip")
    blocked = job_network.service_hosts(settings.service_urls)
    if ip is not None:
        blocked |= job_network.host_networks(ip)
    return job_firewall.Fence(
        uid=sandbox.run_uid(run_id, settings.job_uid_base, settings.job_uid_count),
        peers=job_firewall.peer_addresses(peers),
        port=port,
        ephemeral=job_firewall.ephemeral_ports(),
        services=job_firewall.service_endpoints(settings.service_urls),
        blocked=tuple(sorted(blocked)),
        world=plan.mode == "egress",
        source=job_firewall.source_ports(run_id),
    )


def sweep_fences() -> None:
    """At worker start: the rules of this worker's run uids that no process uses any more
    (a worker killed while a multi-node job ran)."""
    isolation, nft = job_isolation(), job_firewall.nft_path()
    if not (isolation.enabled and isolation.as_root and nft):
        return
    settings = get_settings()
    try:
        job_firewall.sweep(nft, settings.job_uid_base, settings.job_uid_count)
    except job_firewall.FirewallError as exc:
        print(f"WARNING: could not sweep old job firewall rules: {exc}", file=sys.stderr)


# Celery's SecurityWarning for a worker started as root ("running the worker with superuser
# privileges: absolutely not recommended"): about Celery's own pickle-era risk, printed beside
# our "jobs run sandboxed" and read as a contradiction (issue 41); our own line replaces it.
CELERY_ROOT_WARNING = r"(?s)\s*You're running the worker with superuser privileges"


def root_line(isolation: sandbox.Isolation, *, euid: int, uid_base: int) -> str | None:
    """What a worker started as root says about it (None when not root): why it is root, and
    that no job runs as root (or, unsandboxed, that every job does)."""
    if euid != 0:
        return None
    if isolation.enabled and isolation.as_root:
        return (
            "worker runs as root: only to set up each job's sandbox; every job runs as its own "
            f"unprivileged user (uid {uid_base} + run id), never as root (broker messages are "
            "JSON, never pickle)"
        )
    return (
        "WARNING: the worker runs as root and jobs are not sandboxed: every job runs as root. "
        "Start torchyard as an ordinary user, or install bubblewrap (make sandbox)"
    )


def quiet_celery_root_warning() -> None:
    """Celery's superuser warning left out (root_line says ours)."""
    from celery.exceptions import SecurityWarning

    warnings.filterwarnings("ignore", message=CELERY_ROOT_WARNING, category=SecurityWarning)


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
    root = root_line(isolation, euid=os.geteuid(), uid_base=get_settings().job_uid_base)
    if root is not None:
        quiet_celery_root_warning()
        print(root, file=stream, flush=True)
    if not refused:
        print(limits.describe(job_limits()), file=stream, flush=True)
        settings = get_settings()
        limits.sweep(job_limits(), settings.data_dir, settings.job_cgroup_parent)
        sweep_fences()
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
