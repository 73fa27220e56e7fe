"""Which module each test module tests, by its name (docs/testing.md, "Where a test lives").

The rule: `tests/test_<module>[_<topic>].py`, where `<module>` names one module of the source
packages (SOURCE_PACKAGES, or a helper of tests/ itself) by its dotted path with `_` for `.`,
shortened from the left as far as it still names one module only. app/runs/deletion.py is
`test_deletion`, `test_runs_deletion` or `test_app_runs_deletion`; app/runs/api.py is
`test_runs_api` (`api` alone names a dozen modules); a package names itself and its
`__init__` (`test_cli_<topic>` for app/cli). The longest prefix of the name that names a module
wins: `test_streams_events_resume` tests app/runs/streams/events.py, its topic "resume".

A test module that tests no one module (end-to-end runs, fault injection, rules over the whole
source) is in CROSS_CUTTING with what it covers instead; one whose name breaks the rule but
which others were editing when the rule came (issue 38) is in TO_RENAME with its name by the
rule. tests/test_layout.py fails on a test module that is in neither and maps to no module,
on a listed name that no longer exists or maps after all, and on a planned name that breaks
the rule. The subfolders are cross-cutting by what they are: tests/browser (pages in a real
browser), tests/hostile (the standing attacks), tests/js (the front-end's modules, by file).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# The packages whose modules tests mirror; `migrations` is Alembic's versions and env.
SOURCE_PACKAGES = ("app", "worker", "torchyard", "migrations")

CROSS_CUTTING: dict[str, str] = {
    # rules read from the whole source, or over every route
    "test_architecture": "layering and ownership rules over app, worker and torchyard",
    "test_authz_matrix": "who may call every route",
    "test_api_schema": "every JSON route fuzzed against its OpenAPI schema",
    "test_module_size": "line counts of every module",
    "test_static_modules": "the front-end's ES module imports",
    "test_hostile_input": "hostile bodies, paths and queries on every kind of route",
    "test_http_hardening": "limits, headers and methods of the whole HTTP surface",
    "test_path_safety": "a run's files never leave its folder, through every route",
    "test_reads_write_nothing": "no GET of any route writes the database",
    "test_deploy": "the compose file and Dockerfiles",
    "test_make_apt": "the Makefile's apt steps (make sandbox, browser, slurm)",
    "test_wheel": "the built wheel's contents",
    "test_requirements": "the dependency pins",
    # the test suite's own rules
    "test_local_only": "conftest's LOCAL_ONLY_MODULES against the modules' imports",
    "test_layout": "this module: test modules mirror the source",
    # a real server, worker and jobs end to end; faults injected into them
    "test_agent_services": "the app services the worker changes data through",
    "test_chaos": "workers killed and frozen under running jobs",
    "test_event_stream_fairness": "event streams beside ingestion on a live stack",
    "test_fencing": "a fenced worker's writes refused, across lifecycle and ingest",
    "test_fencing_e2e": "a frozen worker fenced on a live stack",
    "test_gpu_leases": "GPU leases across real workers and jobs",
    "test_fairshare_worker": "fair share's interleaving by user on a real worker",
    "test_e2e_host_share": "a job's CPU share, full disk and cgroups on a host with other work",
    "test_multi_node": "multi-node DDP across namespace hosts",
    "test_no_secrets_leak": "what a job's environment and files hold",
    "test_no_worker": "the API with no worker at all",
    "test_pg_restart": "a PostgreSQL restart under a running job",
    "test_queue_faults": "queued runs lost by the broker, re-sent",
    "test_queue_faults_redis": "a Redis of the test's own refusing, killed and restarted",
    "test_resume": "resume from a checkpoint, API to a real job",
    "test_resume_overrides": "resume with overrides, API to a real job",
    "test_separate_hosts": "server and workers on separate hosts",
    "test_script_configs": "script configs from the API to the run",
    "test_workspace": "a script's path: the app's check and the worker's work dir",
    "test_js_contract": "the front-end's URL builders and call sites against /openapi.json",
    "test_packaging": "pyproject's package list, the wheel of a used clone, the base install",
    "test_table_ownership": "docs/architecture.md's owners, the guard over every write",
    "test_sessions_pages": "sessions on the pages: the GPU page's form, the run page's lab link",
}
for _e2e in (
    "code config_env ddp ddp_exit efficiency environments hf hostile_output isolation job_output"
    " lightning limits mlflow_job notifications retention runs script_folder scripts sessions"
    " submit_code"
    " sweeps tensorboard_media"
).split():
    CROSS_CUTTING[f"test_e2e_{_e2e}"] = "end to end: a real server, worker and jobs"

# Named before the rule; the name by the rule, for when nobody else is editing them.
TO_RENAME: dict[str, str] = {
    "test_run_nodes": "test_runs_nodes",
    "test_gpu_panel": "test_gpus_panel",
    "test_gpu_panel_nodes": "test_gpus_panel_nodes",
    "test_gpu_requests": "test_gpus_scheduler_requests",
    "test_gpu_service": "test_gpus_service",
    "test_sse_resume": "test_streams_events_resume",
    "test_api_shutdown": "test_ops_shutdown",
    "test_artifacts": "test_app_artifacts",
    "test_code_snapshots": "test_app_code_snapshots",
}


def module_names(repo: Path = REPO) -> dict[str, str]:
    """Every name a test may use for a module (each left-shortened form of its dotted path,
    `_` for `.`) -> the module's path; a form that names more than one module is left out."""
    forms: dict[str, set[str]] = defaultdict(set)
    sources = [(repo / package, package) for package in SOURCE_PACKAGES]
    for root, prefix in [*sources, (repo / "tests", "tests")]:
        for path in root.rglob("*.py"):
            parts = [prefix, *path.relative_to(root).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            if prefix == "tests" and (path.parent != root or parts[-1].startswith("test_")):
                continue  # tests' own helpers only: tests/<helper>.py
            for start in range(len(parts)):
                forms["_".join(parts[start:])].add(str(path.relative_to(repo)))
    return {form: paths.pop() for form, paths in forms.items() if len(paths) == 1}


def module_under_test(test_name: str, names: dict[str, str]) -> str | None:
    """The module `tests/<test_name>.py` tests by the rule (the longest prefix of its name
    that names one module), or None."""
    words = test_name.removeprefix("test_").split("_")
    for end in range(len(words), 0, -1):
        found = names.get("_".join(words[:end]))
        if found is not None:
            return found
    return None


def suite_modules(repo: Path = REPO) -> list[str]:
    return sorted(path.stem for path in (repo / "tests").glob("test_*.py"))
