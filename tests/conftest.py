"""Test harness: a real database (SQLite file, or PostgreSQL from TORCHYARD_DATABASE_URL), the
real app in-process for API tests, and for end-to-end tests a real uvicorn server and a real
Celery worker process on the real broker (the SQLite broker, or Redis from
TORCHYARD_BROKER_URL).

In-process API tests enqueue to kombu's in-memory transport, so runs they create for their own
checks never reach the shared worker; everything a worker runs goes through the live stack.
"""

from __future__ import annotations

import os
import secrets
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import Engine, bindparam
from sqlalchemy.orm import Session, sessionmaker

from tests.databases import rolled_back, savepoint_engine
from tests.phases import FIRST_STREAM_BROWSER_MODULES, SECOND_STREAM_MODULES, TIMED_MODULES
from tests.stack import LiveStack, running_stack
from tests.waits import wait_for

# Each module's time at the end of a run (CI keeps only the log's tail).
pytest_plugins = ("tests.module_times", "tests.table_owners")

BASE_DIR = Path(tempfile.mkdtemp(prefix="torchyard-tests-"))
DATA_DIR = BASE_DIR / "data"
# User scripts run from here (worker.workspace); the in-process app and the live stack share it.
WORKSPACE_DIR = BASE_DIR / "workspace"
DATABASE_URL = os.environ.get("TORCHYARD_DATABASE_URL") or f"sqlite:///{DATA_DIR / 'torchyard.db'}"
BROKER_URL = os.environ.get("TORCHYARD_BROKER_URL") or f"sqla+sqlite:///{DATA_DIR / 'broker.db'}"
ADMIN_PASSWORD = "admin-" + secrets.token_hex(8)

os.environ.update(
    TORCHYARD_DATA_DIR=str(DATA_DIR),
    TORCHYARD_DATABASE_URL=DATABASE_URL,
    TORCHYARD_BROKER_URL="memory://",
    TORCHYARD_ADMIN_PASSWORD=ADMIN_PASSWORD,
    TORCHYARD_WORKSPACE_DIR=str(WORKSPACE_DIR),
    # Tests build "running" runs by hand; only tests/test_liveness.py's own stack reaps.
    TORCHYARD_REAP_INTERVAL_SECONDS="0",
    # Nor re-sends a queued run (app.runs.state.dispatch): runs the in-process API queued (sent to
    # the memory broker) would reach the live stack's worker; tests/test_queue_faults.py's
    # own stack re-sends.
    TORCHYARD_QUEUE_RESEND_SECONDS="0",
    # Nor does anything deliver notifications, but the stacks of tests/test_e2e_notifications.py
    # (a delivery thread with this process's settings would send their messages elsewhere).
    TORCHYARD_NOTIFY_POLL_SECONDS="0",
    # Nor advances sweeps on a timer in this process: the in-process app's sessions are one
    # connection in an API test (conftest db_sessions), which a round on a thread of its own
    # would use at the same time as the test's requests. The live stack's processes advance
    # (live_stack below); tests/test_e2e_sweeps.py's stacks set their own.
    TORCHYARD_SWEEP_ADVANCE_SECONDS="0",
    # Nor writes token uses on a timer, for the same reason (its round overlapped whatever API
    # test ran a minute in: "no such savepoint"); the app's exit still writes them, on the
    # test's own thread. The live stack's API flushes every minute as the product does.
    TORCHYARD_TOKEN_USE_FLUSH_SECONDS="0",
    # Nor checks sessions' time and idle limits, for the same reason; tests/test_e2e_sessions.py's
    # idle test starts an API of its own that checks every second.
    TORCHYARD_SESSION_CHECK_SECONDS="0",
    # argon2 at its least cost (app/auth/security.py): the suite hashes ~500 passwords a pass,
    # ~0.19 s of CPU each at the product's cost; what is tested is the hashing's use, not its cost.
    TORCHYARD_PASSWORD_HASH_TIME_COST="1",
    TORCHYARD_PASSWORD_HASH_MEMORY_KIB="64",
    # The third-party code the e2e tests run unmodified (Lightning, HF, matplotlib), from the
    # test venv as a team's image would have it (worker/job_base.py); MLflow is in every job's
    # base already (the default install: tests/test_e2e_mlflow_job.py runs on it); SQLAlchemy,
    # Celery and the rest of the server stay out of every job's sight.
    TORCHYARD_JOB_PACKAGES="lightning,transformers,accelerate,matplotlib,pillow",
    # Every job of the live stack runs sandboxed (worker/sandbox.py): the worker refuses to
    # start without bubblewrap, so the suite fails rather than quietly testing unisolated jobs.
    # Off only on a machine without bwrap outside CI (`make test` installs it).
    TORCHYARD_JOB_ISOLATION=os.environ.get("TORCHYARD_JOB_ISOLATION")
    or ("bwrap" if os.environ.get("CI") == "true" or shutil.which("bwrap") else "auto"),
)
DATA_DIR.mkdir(parents=True, exist_ok=True)
WORKSPACE_DIR.mkdir(parents=True, exist_ok=True)
REPO = Path(__file__).resolve().parent.parent

# Test modules whose subject is not the database or the broker, named by their path under
# tests/ (dots for slashes: the browser tests' names repeat some of the others'). The PostgreSQL
# + Redis pass (`make test-services`) leaves them out with `-m "not local_only"`, since they
# would only repeat what the first pass showed; each says why it is here (and
# tests/test_local_only.py fails on a module that reaches neither, by its imports and fixture
# names, and is not here). What stays in both passes is what exercises the database or the
# broker: the API in-process, ingest, listing, leases, lifecycle, liveness, the sweeps
# driver, deletion, migrations, PG restart, separate hosts. Single tests whose subject is not
# the database are marked `local_only` where they are (test_e2e_runs: training quality and
# seeding; test_e2e_sweeps: the samplers' quality).
LOCAL_ONLY_MODULES = frozenset(
    {
        # the launcher, the in-job runtime and recipes, how a job starts, ends and writes its
        # output, third-party training code, pure scheduling, path checks, packaging
        "test_api_docs",  # static files of /docs and /redoc
        # `torchyard import mlflow`: its subject is reading MLflow (a real MLflow server takes
        # a minute to start); what it writes goes through the MLflow API, tested on both
        "test_mlflow_source",
        "test_cli_importers",  # the import command's missing extras, in a subprocess
        # `torchyard.init(config=...)` in a job: its subject is the SDK's config record; the
        # params it writes are stored by the ingest path that the quick tests show on both
        "test_torchyard_sdk_config",
        "test_tensorboard_source",  # `torchyard import tensorboard` and `wandb`: the readers;
        "test_wandb_source",  # what they write goes through the MLflow API, tested on both
        "test_aim_source",  # `torchyard import aim`, run from .venv-aim (make aim-venv)
        "test_tarcheck",  # snapshot archives checked and extracted into tmp_path
        "test_slurm_batch",  # a Slurm job's options and batch script, on paper
        "test_settings_pools",  # a worker's pool settings, validated
        "test_slurm_cluster",  # the Slurm test bed: munged, slurmctld, slurmd of its own
        "test_slurm_commands",  # worker/slurm/commands.py on a private Slurm cluster
        "test_app_errors",  # the field error builder and its location text
        "test_filter_tokens",  # the filter languages' one tokenizer
        "test_end_rules",  # a session's end rules on a run in memory
        "test_filter_grammar",  # the filter languages' one parser (SQL compiled, not run)
        "test_js_contract",  # the front-end's URL builders against /openapi.json (node)
        "test_cli",  # the client CLI's flags, follow loop, exit codes (its API: in-process)
        "test_cli_export",  # `torchyard export` (GET /api/runs and metrics: their own tests)
        "test_export_types",  # the export's column types, pure
        "test_packaging",  # the wheel and its base install (its own SQLite server)
        "test_cli_contract",  # the CLI's endpoints against the app's OpenAPI document
        "test_cli_imports",  # what the client CLI imports
        "test_cli_pack",  # packing a code folder, against a stand-in server
        "test_cli_run_files",  # `torchyard files`, download's fallback (the files API: its own)
        "test_cli_runs",  # `torchyard edit` and `ls` (PATCH and the filters: test_query_listing)
        "test_cli_tokens",  # `torchyard token create` (POST /api/tokens: test_auth's)
        "test_cli_users",  # the CLI; its reset-password boxes are SQLite in either pass
        "test_cli_up",  # `torchyard up` supervising its children (kill, Ctrl-C)
        "test_deploy",  # the compose file and Dockerfiles
        "test_api_shutdown",  # SIGTERM ends the streams (its own SQLite server)
        "test_supervisor_cpu_hog",  # the serving path under a CPU hog (its own SQLite server)
        "test_e2e_code",  # a job in its own copy of a snapshot (snapshots: test_code_snapshots)
        "test_e2e_config_env",  # a config's env in the job's process (launcher, sandbox)
        "test_e2e_ddp",  # torchrun: one run of 2 ranks against 1 process
        "test_e2e_ddp_exit",  # DDP scripts end when their work ends
        # multi-node DDP across namespace hosts (one cluster, 8 tests: 595 s at load 2-12):
        # torchrun, Gloo, the nodes' workers and the job's network (its broker Redis); the
        # barrier, the gang's leases and failing as one on PostgreSQL too: test_run_nodes,
        # test_gpu_service
        "test_multi_node",
        "test_e2e_environments",  # pip environments built for a run
        "test_e2e_hf",  # Hugging Face Trainer, unmodified
        "test_e2e_isolation",  # the bwrap sandbox around jobs
        "test_e2e_limits",  # cgroups and rlimits on real jobs (the logins beside: any stack)
        "test_cgroups",  # the real cgroupfs
        "test_keeper",  # the job's keeper: its exit file on a full tmpfs, its cgroups
        "test_slots",  # a worker's run slots and build places (pure counts)
        "test_e2e_host_share",  # cgroup CPU weights, a full tmpfs, cgroup sweeps on real jobs
        "test_ingest_fast_paths",  # byte checks, batch validation, overview extend (pure)
        "test_held_keys",  # which summaries the experiment page holds (pure)
        "test_overview_batch",  # one-pass overview extension against the per-key way (pure)
        "test_overview_many",  # many overviews viewed at once against the per-series view (pure)
        "test_limits",  # limits' enforcement choice, keeper options, the sweep
        "test_job_base",  # what a job's Python sees
        "test_filter_lang",  # the filter parser (its SQL: test_filter_sql, both stacks)
        "test_freezing",  # the test helper that freezes a process between SQLite writes
        "test_phase",  # a run's phase and durations from its timestamps
        "test_env_build",  # pip's error text, the build's heartbeat
        "test_env_handoff",  # the job's first process takes its environment from a memfd
        "test_member_view",  # the host's paths of a run as a member is shown them
        "test_privileged_env",  # what root's helpers get; the handoff's argv
        "hostile.test_root_never_sees_a_runs_env",  # a member's library in a root chain
        "hostile.test_attacks",  # the suite's list names real tests, the docs list them all
        "test_e2e_job_output",  # a script's logging and errors in its log
        "test_e2e_hostile_output",  # hostile spool and log files, read by the worker
        "test_no_secrets_leak",  # what a job's environment and files hold
        "test_e2e_retention",  # a real job's kept files (the rows: test_checkpoint_records)
        "test_cli_experiments",  # the CLI's experiment commands (their API: in-process, both)
        "test_e2e_lightning",  # PyTorch Lightning, unmodified
        "test_e2e_mlflow_job",  # MLflow inside a job writes its spool (ingest: test_forwarder)
        "test_e2e_script_folder",  # a script's own folder first on sys.path
        "test_e2e_scripts",  # SummaryWriter / SDK / DDP user scripts
        "test_e2e_submit_code",  # the CLI's git capture and packing, end to end
        "test_e2e_tensorboard_media",  # SummaryWriter hparams and images through a job
        "test_environments",  # the host's environment cache (pip, file locks)
        "test_job_entry",
        "test_job_errors",
        "test_job_exit",
        "test_job_files",
        "test_job_imports",
        "test_job_network",  # what a sandboxed job reaches (the services' ports on both stacks)
        "test_job_firewall",  # a multi-node job's nftables rules, in a namespace of its own
        "test_process",
        "test_ingest_mark",  # the spool's backpressure: files in a temporary folder
        "test_launcher",
        "test_layout",  # test modules' names against the source's (tests/layout.py)
        "test_local_only",  # this list itself
        "test_mlflow_store",  # the in-job tracking store (a file writer)
        "test_module_size",  # line counts
        "test_recipes",
        "test_requirements",
        "test_run_log",  # the worker's writes into a run's folder
        "test_runtime_checkpoint",
        "test_runtime_context",
        "test_runtime_output",
        "test_runtime_reporter",
        "test_runtime_seeding",
        "test_sandbox",  # bwrap argv and real sandboxes
        "test_session_job",  # a session's socket folder, prepared in tmp_path
        "test_scheduler",
        "test_settings",  # the worker address and interface settings
        "test_sweeps_sampling_rules",
        "test_tensorboard_defaults",
        "test_tensorboard_events",  # the event-file parser on hostile bytes
        "test_wheel",
        "test_workspace",
        # source rules, pure parsers and models, process supervision: no database reached
        "test_architecture",  # import and layering rules, read from the source
        "test_import_graph",  # the import rules' checker on source trees in tmp_path
        "test_http_layer",  # the HTTP layer's checker on source trees in tmp_path
        "test_contract_paths",  # one way to name a run's files, read from the source
        "test_experiments_config",  # the run config model (its storage: test_experiments_api)
        "test_http_errors",  # domain errors to responses, on an app of its own
        "test_mlflow_search",  # MLflow's filter grammar (run on both databases: test_mlflow_client)
        "test_periodic",  # app.periodic's rounds and wake-ups
        "test_poll_pool",  # the event streams' thread pool, on threads of its own
        "test_phases",  # tests/phases.py, read with the test modules' source
        "test_static_modules",  # the front-end's ES module imports, read from the files
        "test_supervisor",  # `up`'s supervisor over real child processes
        "test_standby",  # `up`'s spare server (its own SQLite stack in either pass)
        # Slow end-to-end modules whose subject is the worker, the job's processes or the
        # scheduling logic, not the database or the broker (issue 38: CI under 40 minutes;
        # docs/testing.md "Which pass runs a slow module"). What they write is stored by
        # services whose quick tests run on both stacks, named after each.
        "test_cli_views",  # the CLI's views commands (the saved views' API: test_saved_views*)
        "test_e2e_efficiency",  # the sampler's idle notice (the Fleet sums: test_fleet_service)
        "test_e2e_notifications",  # webhook/SMTP retries (test_notifications_delivery: both)
        "test_e2e_runs",  # training, cancel within 5 s, a job's traceback, the event stream
        "test_e2e_sessions",  # JupyterLab in the sandbox behind the proxy
        "test_e2e_sweeps",  # samplers, concurrency, a restart (the driver's SQL: test_sweeps_*)
        "test_fairshare_worker",  # a worker's start order (the split: test_fairshare, both)
        "test_netns_hosts",  # the namespace-host test bed (multi-node's: test_run_nodes, both)
        "test_no_worker",  # the scheduler's reason after a TTL (its query: test_gpu_requests)
        "hostile.test_run_env_end_to_end",  # a job's env in the sandbox (its 422s: validation)
    }
)


# Test modules whose subject is PostgreSQL itself (a restart of the server, its connections
# cut): the PostgreSQL + Redis pass only. The embedded pass touches no PostgreSQL at all (`-m
# "not postgres_only"`, no TORCHYARD_TEST_POSTGRES_URL: its metrics-store tests run on SQLite
# there, on both databases in the other pass), so the two passes may run at once without a
# PostgreSQL restart landing under one of its tests.
POSTGRES_ONLY_MODULES = frozenset(
    {
        "test_db_connections_cut",  # pg_terminate_backend on its own database
        "test_pg_restart",  # pg_ctlcluster restart under a running job
        # The API fuzz (~140 operations x 50 cases) runs once, on PostgreSQL: the stricter
        # store (NUL bytes in text, integer ranges and types refused where SQLite stores them),
        # so a handler that trusts the database to refuse bad input fails there first. It took
        # 159 s of the embedded quick stream and 124 s of the services one (issue 38's CI).
        "test_api_schema",
    }
)


# Slow test modules whose scenario runs once, on the team stack (PostgreSQL + Redis), not on
# both. A Slurm pool is for a team that outgrew one box, so its worker serves the team stack;
# what the pool writes goes through the same run services that the quick tests show on both
# databases. Each module starts a Slurm cluster of its own, and running them twice cost about
# 8 minutes of CI's CPU (issue 38: CI under 40 minutes). The Slurm pieces that touch no
# database (test_slurm_commands, test_slurm_cluster, test_slurm_batch) are local_only above.
SERVICES_ONLY_MODULES = frozenset(
    {
        "test_slurm_executor",
        "test_slurm_executor_ops",
        "test_slurm_executor_multi_node",
        "test_slurm_executor_side_by_side",
        "test_slurm_boundary",
        "test_slurm_boundary_service_account",
        "test_slurm_track_forgotten",
        # hosts that share only the database and the broker over the network: a deployment of
        # the team stack alone (the embedded stack's SQLite file is one box's)
        "test_separate_hosts",
        # Workers that die, freeze or shut down under running jobs, the next worker (or host)
        # taking over: several workers on one queue are the team stack's deployment, and the
        # reaper's, fencing's and requeue's SQL runs on both stacks in test_lifecycle
        # and test_fencing; on the embedded stack, test_cli_up kills and restarts
        # `up`'s worker mid-run. About 150 s and 60 s a pass (issue 42's CI).
        "test_liveness",
        "test_fencing_e2e",
        # its own redis-server, killed and restarted: Redis is the subject (skipped elsewhere)
        "test_queue_faults_redis",
    }
)


def module_key(module_name: str) -> str:
    """`tests.browser.test_pages` -> `browser.test_pages`: the key LOCAL_ONLY_MODULES uses."""
    return module_name.removeprefix("tests.")


def is_local_only(key: str) -> bool:
    """Listed, or a browser test (tests/browser/): the UI in a real browser, its DOM, charts
    and forms, over an API whose every route is tested on both stacks. Nine browser modules
    ran in the services pass too for want of a line in the list (stop 36): a rule now."""
    return key in LOCAL_ONLY_MODULES or key.startswith("browser.")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "local_only: its subject is not the database or the broker (first pass only)"
    )
    config.addinivalue_line(
        "markers", "postgres_only: its subject is PostgreSQL itself (the services pass only)"
    )
    config.addinivalue_line(
        "markers",
        "services_only: a slow scenario the services pass shows for both stacks (not in the first)",
    )
    config.addinivalue_line(
        "markers", "timed: a slow test with a tight time bound, run alone (tests/phases.py)"
    )
    config.addinivalue_line(
        "markers", "browser_first: a browser test of the first quick stream (tests/phases.py)"
    )
    config.addinivalue_line(
        "markers", "second_stream: after the services pass's untimed slow tests (tests/phases.py)"
    )
    config.addinivalue_line(
        "markers",
        "committed(reason): the in-process app commits to the suite's database in this test "
        "(other processes must see its rows, or its subject is the commit itself); the reason "
        "is required",
    )
    config.addinivalue_line(
        "markers", "hostile: the standing hostile-member suite (tests/hostile/attacks.py)"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    from tests.hostile.attacks import hostile_tests

    hostile = hostile_tests()
    for item in items:
        module = getattr(item, "module", None)  # a Function's; other items have none
        key = module_key(module.__name__) if module is not None else ""
        if key.startswith("hostile.") or item.nodeid.split("[")[0] in hostile:
            item.add_marker(pytest.mark.hostile)
        if is_local_only(key):
            item.add_marker(pytest.mark.local_only)
        if key in POSTGRES_ONLY_MODULES:
            item.add_marker(pytest.mark.postgres_only)
        if key in SERVICES_ONLY_MODULES:
            item.add_marker(pytest.mark.services_only)
        if key in TIMED_MODULES and item.get_closest_marker("slow") is not None:
            item.add_marker(pytest.mark.timed)
        if key in SECOND_STREAM_MODULES:
            item.add_marker(pytest.mark.second_stream)
        if key.startswith("browser.") and key[len("browser.") :] in FIRST_STREAM_BROWSER_MODULES:
            item.add_marker(pytest.mark.browser_first)


def _reset_postgres(url: str) -> None:
    from sqlalchemy import create_engine, text

    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text("DROP SCHEMA IF EXISTS public CASCADE"))
        conn.execute(text("CREATE SCHEMA public"))
    engine.dispose()


@pytest.fixture(scope="session", autouse=True)
def database() -> Iterator[str]:
    """The schema at Alembic head (never create_all) and the admin bootstrapped."""
    if DATABASE_URL.startswith("postgresql"):
        _reset_postgres(DATABASE_URL)
    from app.prestart import prestart

    prestart()
    yield DATABASE_URL
    from app.db import get_engine

    get_engine().dispose()


@pytest.fixture(scope="session")
def rollback_engine(database: str) -> Iterator[Engine]:
    engine = savepoint_engine(database)
    yield engine
    engine.dispose()


@pytest.fixture
def db_sessions(rollback_engine: Engine) -> Iterator[sessionmaker[Session]]:
    """Sessions on the suite's database whose writes, commits included, are rolled back when
    the test ends (tests.databases.rolled_back), and every session the app opens in this
    process meanwhile comes from them (app.db.sessions_bound_to): the request dependency, and
    `session_scope` in background tasks, event streams and the API's periodic rounds. So a
    test may write through the API, through services or both, and the next test sees none of
    it. One connection serves them all: an in-process request blocks the test's thread until
    it ends, so their sessions nest (SAVEPOINTs) and never overlap. Not for code in other
    processes (the live stack's server and worker): they see committed rows only (mark the
    test `committed`)."""
    from app.db import sessions_bound_to

    before = _run_folders()
    with rolled_back(rollback_engine) as sessions, sessions_bound_to(sessions):
        yield sessions
    _remove_rolled_back_folders(rollback_engine, _run_folders() - before)


RUNS_DIR = DATA_DIR / "runs"


def _run_folders() -> set[str]:
    return set(os.listdir(RUNS_DIR)) if RUNS_DIR.is_dir() else set()


def _remove_rolled_back_folders(engine: Engine, new: set[str]) -> None:
    """What a rolled-back test wrote under the runs' folder goes with its rows: SQLite hands
    a rolled-back run's id to the next run, which would find the folder (its files, logs,
    checkpoints) of a run it is not. A folder of a committed run (the live stack's) stays."""
    from sqlalchemy import text

    ids = [int(name) for name in new if name.isdigit()]
    with engine.connect() as conn:
        kept = (
            {
                str(run_id)
                for run_id in conn.execute(
                    text("SELECT id FROM runs WHERE id IN :ids").bindparams(
                        bindparam("ids", expanding=True)
                    ),
                    {"ids": ids},
                ).scalars()
            }
            if ids
            else set()
        )
    for name in new - kept:
        path = RUNS_DIR / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


@pytest.fixture
def db(db_sessions: sessionmaker[Session]) -> Iterator[Session]:
    """One session of db_sessions: commit() inside a test releases a SAVEPOINT, no more."""
    with db_sessions() as session:
        yield session


COMMITTED = "committed"


@pytest.fixture
def app_sessions(request: pytest.FixtureRequest) -> sessionmaker[Session] | None:
    """The sessions the in-process app uses in this test: db_sessions (rolled back at the
    end), unless the test is marked `committed("why")` or is slow (it runs processes of its
    own), when the app commits to the suite's database as in production (None). Taken by
    `client`, `user_headers` and `admin_headers`, so that the users an API test makes are
    rolled back with the rest."""
    marker = request.node.get_closest_marker(COMMITTED)
    # A slow test runs processes of its own (the live stack, workers, jobs) on the same
    # database: the test's open outer transaction would hold SQLite's write lock from them
    # (CI: the live API's upload waited on it until the client timed out), and they could
    # not see what it wrote. Those tests commit, as the product does.
    if marker is None and (
        request.node.get_closest_marker("slow") is not None or "live_stack" in request.fixturenames
    ):
        return None
    if marker is None:
        sessions: sessionmaker[Session] = request.getfixturevalue("db_sessions")
        return sessions
    if not (marker.args and isinstance(marker.args[0], str) and marker.args[0].strip()):
        raise pytest.UsageError(f"{request.node.nodeid}: committed(...) needs its reason")
    return None


@pytest.fixture(scope="session")
def app() -> FastAPI:
    from app.main import create_app

    return create_app()


@pytest.fixture
def client(app: FastAPI, app_sessions: sessionmaker[Session] | None) -> Iterator[TestClient]:
    """The app in-process, on this test's rolled-back sessions (app_sessions) unless the test
    is marked `committed`; its lifespan (the periodic runner) starts and stops with it, inside
    the binding, so that its last flush is rolled back too."""
    with TestClient(app) as c:
        yield c


@pytest.fixture(scope="module")
def mlflow_server(app: FastAPI) -> Iterator[str]:
    """The app served by uvicorn for this module's tests that speak HTTP themselves (the real
    ``mlflow`` client): tests/mlflow_server.py."""
    from tests.mlflow_server import serving

    with serving(app) as url:
        yield url


@pytest.fixture
def mlflow_login(mlflow_server: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A new member whose token the ``mlflow`` client sends, pointed at mlflow_server; the
    member's headers, for plain HTTP (tests/mlflow_server.py mlflow_member)."""
    from tests.mlflow_server import mlflow_member

    return mlflow_member(mlflow_server, monkeypatch)


def make_user(*, admin: bool = False, role: str = "") -> tuple[str, str, dict[str, str]]:
    """A new user with a token: (username, password, auth headers); role admin with `admin`,
    else `role` (default member)."""
    from app.auth.service import create_user, issue_token
    from app.db import session_scope

    username = f"user-{secrets.token_hex(4)}"
    password = secrets.token_urlsafe(10)
    with session_scope() as session:
        user = create_user(
            session,
            username=username,
            password=password,
            role="admin" if admin else role or "member",
        )
        token = issue_token(session, user=user, ttl_hours=24 * 30)
    return username, password, {"Authorization": f"Bearer {token}"}


@pytest.fixture
def user_headers(app_sessions: sessionmaker[Session] | None) -> dict[str, str]:
    return make_user()[2]


@pytest.fixture
def admin_headers(app_sessions: sessionmaker[Session] | None) -> dict[str, str]:
    return make_user(admin=True)[2]


@pytest.fixture
def restore_torch_state(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """seed_everything changes process-wide flags; put them back for the other tests."""
    import torch

    monkeypatch.setenv("PYTHONHASHSEED", "0")
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    deterministic = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    cudnn = (torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic)
    yield
    torch.use_deterministic_algorithms(deterministic, warn_only=warn_only)
    torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = cudnn


# --- the live stack: real server + real worker ------------------------------------------


@pytest.fixture(scope="session")
def used_clone_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel of a used clone (tests/wheel_build.py), built once for the suite: what the
    wheel holds (tests/test_packaging.py), its base install and its server extra
    (tests/test_wheel.py) are checked on the wheel a user of a used clone builds."""
    from tests.wheel_build import build_used_clone_wheel

    return build_used_clone_wheel(tmp_path_factory.mktemp("wheel"))


@pytest.fixture(scope="session")
def live_stack(database: str) -> Iterator[LiveStack]:
    # Every run environment over the cap: each new one evicts the others no job uses
    # (tests/test_e2e_environments.py). System series every second, so a run of a few
    # seconds has some (tests/test_system_metrics.py).
    env = dict(
        os.environ,
        TORCHYARD_BROKER_URL=BROKER_URL,
        PYTHONUNBUFFERED="1",
        TORCHYARD_ENV_CACHE_MAX_BYTES="1",
        TORCHYARD_SYSTEM_METRICS_INTERVAL_SECONDS="1",
        TORCHYARD_SWEEP_ADVANCE_SECONDS="60",
        TORCHYARD_TOKEN_USE_FLUSH_SECONDS="60",
    )
    with running_stack(env, BASE_DIR / "logs", admin_password=ADMIN_PASSWORD) as stack:
        yield stack


def wait_for_status(
    client: httpx.Client, run_id: int, statuses: set[str], timeout: float = 120
) -> dict:
    """The run as the API shows it once its status is one of `statuses`. A poll that meets a
    kept-alive connection the server closed meanwhile (uvicorn's idle timeout: a starved client
    came back late, stop 51's idle cgroup), or whose answer took longer than the client's
    timeout (a starved server, stop 52's), asks again, as a browser does: `timeout` bounds the
    wait."""
    seen: list[dict] = [{}]

    def reached() -> dict | None:
        try:
            seen[0] = client.get(f"/api/runs/{run_id}").json()
        except (httpx.RemoteProtocolError, httpx.TimeoutException):
            return None
        return seen[0] if seen[0]["status"] in statuses else None

    return wait_for(reached, timeout=timeout, every=0.1, what=lambda: f"run {run_id}: {seen[0]}")


def pids_of_run(run_id: int) -> list[int]:
    """Every live process whose environment says it belongs to this run."""
    return processes_in(DATA_DIR / "runs" / str(run_id))


def processes_in(run_dir: Path) -> list[int]:
    """Live (non-zombie) processes of the job of ``run_dir``'s run: those whose environment
    names it as their run's, and its keeper (worker.keeper, named by its exit file), whose
    environment holds none of the run's (worker.privileged_env) and which is there from the
    spawn on, before the job's own processes have their environment: a test that kills "the
    job too" kills it, or the keeper reports the job's death as the job's own exit."""
    keeper = f"{run_dir.parent.parent / 'jobs' / run_dir.name}.exit"
    found = []
    for proc in psutil.process_iter():
        try:
            argv = proc.cmdline()
            ours = proc.environ().get("TORCHYARD_RUN_DIR") == str(run_dir) or (
                "worker.keeper" in argv and keeper in argv
            )
            if ours and proc.status() not in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
                found.append(proc.pid)
        except psutil.Error:  # gone, or another user's
            continue
    return found


PYTHON = sys.executable
