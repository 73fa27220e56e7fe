"""Property-based fuzzing of the whole REST API against its own OpenAPI document.

schemathesis reads /openapi.json from the real app (in-process, over ASGI, on the suite's real
database) and generates requests for every /api operation: valid ones from the documented
schemas and invalid ones (wrong types, missing fields, out-of-range numbers, odd strings). The
run is repeated with a valid bearer token and with none. Every response must be: not a 5xx;
a status code the document declares; the declared content type and headers; a body that
matches the declared schema; a 4xx for invalid input; a 401 without credentials.

Generation is derandomized (a fixed seed, no example database), so CI sees the same cases on
every run; the number of examples per operation is bounded. The module runs in the PostgreSQL +
Redis pass only (tests/conftest.py POSTGRES_ONLY_MODULES): about two minutes on a 2-core box.
docs/api-fuzzing.md has the command, what was found and fixed, and the numbers; with
TORCHYARD_API_FUZZ_REPORT=<path> the test writes the per-operation case counts and status codes
of the run there (docs/api-fuzzing-latest.txt is one).

Path ids are generated integers; most of them are folded onto a small world of rows owned by
the fuzzing user (an experiment, finished runs with metrics, logs and a checkpoint, a queued
run, another user's run), so the cases reach the handlers' success paths and not just 404s.
The run's SSE stream only ever gets finished runs (or missing ones), where it ends by itself;
the live pages' streams (experiment, sweep, GPU panel) are left out (PAGE_STREAMS).
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis import Case
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    ignored_auth,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from sqlalchemy import delete, select

from tests.conftest import make_user

SEED = 1029
PAGE_STREAMS = r"^/api/(gpus|sweeps/\{sweep_id\}|experiments/\{experiment_id\})/events$"
MAX_EXAMPLES = 50
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    negative_data_rejection,
    ignored_auth,
]
CHECKPOINT_NAME = "epoch-0001.pt"

# For the report: (auth mode, "METHOD /path") -> cases sent; per auth mode, the status codes
# seen and the cases whose checks failed.
CASES: Counter[tuple[str, str]] = Counter()
STATUSES: dict[str, Counter[int]] = {"token": Counter(), "anonymous": Counter()}
FAILED: Counter[str] = Counter()


@dataclass(frozen=True)
class World:
    headers: dict[str, str]
    token_id: int  # the id of the token in `headers`, which DELETE /api/tokens/{id} must spare
    experiment_ids: list[int]
    run_ids: list[int]  # every run the fuzzing user can see, plus another user's
    finished_run_ids: list[int]
    image_ids: list[int]  # TensorBoard images of the finished run
    # What a DELETE is aimed at, so that the rows above outlive the fuzzing: an experiment of
    # its own with two finished runs (deleted on the first hit, 404 after), another user's
    # (403) and the queued run (409).
    deletable_experiment_ids: list[int]
    deletable_run_ids: list[int]


def _seed_world() -> World:
    from app.auth.models import ApiToken, User
    from app.db import session_scope
    from app.experiments.models import Experiment
    from app.metrics.service import ingest_points
    from app.runs.models import Checkpoint, Run, RunImage
    from app.settings import get_settings
    from app.timeutil import utcnow

    username, _password, headers = make_user()
    _other, _, _ = make_user()
    config = {"recipe": "tiny_mlp", "params": {"epochs": 1}, "seed": 7}
    ddp_config = {**config, "resources": {"gpus": 0, "nproc": 2}}
    now = utcnow()
    with session_scope() as session:
        me = session.query(User).filter_by(username=username).one()
        other = session.query(User).filter_by(username=_other).one()
        experiment = Experiment(name="fuzz", config=config, owner_id=me.id)
        theirs = Experiment(name="not yours", config=config, owner_id=other.id)
        session.add_all([experiment, theirs])
        session.flush()

        def run(owner: User, exp: Experiment, status: str, cfg: dict[str, Any], **kw: Any) -> Run:
            r = Run(
                experiment_id=exp.id,
                owner_id=owner.id,
                status=status,
                config=cfg,
                seed=7,
                **kw,
            )
            session.add(r)
            session.flush()
            return r

        done = run(
            me, experiment, "succeeded", config, started_at=now, finished_at=now, exit_code=0
        )
        failed = run(me, experiment, "failed", config, finished_at=now, exit_code=1, error="boom")
        ddp = run(me, experiment, "cancelled", ddp_config, finished_at=now, cancel_requested=True)
        queued = run(me, experiment, "queued", config)
        foreign = run(other, theirs, "succeeded", config, finished_at=now)
        spare = Experiment(name="fuzz: to delete", config=config, owner_id=me.id)
        session.add(spare)
        session.flush()
        spare_runs = [run(me, spare, "succeeded", config, finished_at=now) for _ in range(2)]

        points: list[tuple[str, int, float | None, float]]
        points = [("train/loss", s, 1.0 / (s + 1), 1.7e9 + s) for s in range(300)]
        points += [("val/acc", s, None if s == 3 else 0.5, 1.7e9 + s) for s in range(0, 300, 50)]
        ingest_points(session, run_id=done.id, points=points)
        run_dir = get_settings().run_dir(done.id)
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "output.log").write_text("epoch 1\nloss 0.1\n\u00e9t\u00e9\n")
        (run_dir / CHECKPOINT_NAME).write_bytes(b"not really a checkpoint")
        session.add(
            Checkpoint(
                run_id=done.id,
                name=CHECKPOINT_NAME,
                epoch=1,
                step=300,
                size_bytes=23,
                path=CHECKPOINT_NAME,
            )
        )
        png = b"\x89PNG\r\n\x1a\n" + b"not a real picture"
        image = RunImage(
            run_id=done.id,
            tag="samples",
            step=3,
            wall_time=1.7e9,
            width=2,
            height=2,
            size_bytes=len(png),
            data=png,
        )
        session.add(image)
        session.flush()
        ddp_dir = get_settings().run_dir(ddp.id)
        ddp_dir.mkdir(parents=True, exist_ok=True)
        (ddp_dir / "output.log").write_text("[rank0]: a\n[rank1]: b\nlauncher line\n[rank0]: c\n")
        token_id = session.scalars(select(ApiToken.id).where(ApiToken.user_id == me.id)).one()
        return World(
            headers=headers,
            token_id=token_id,
            experiment_ids=[experiment.id, theirs.id],
            run_ids=[done.id, failed.id, ddp.id, queued.id, foreign.id],
            finished_run_ids=[done.id, failed.id, ddp.id, foreign.id],
            image_ids=[image.id],
            deletable_experiment_ids=[spare.id, theirs.id],
            deletable_run_ids=[*(r.id for r in spare_runs), queued.id, foreign.id],
        )


@pytest.fixture(scope="module")
def world(database: str) -> Iterator[World]:
    from schemathesis.python.asgi import shutdown_lifespans

    from app.auth.models import LoginAttempt
    from app.db import session_scope
    from app.timeutil import utcnow

    started = utcnow()
    yield _seed_world()
    # The app's lifespan (and its reaper thread) was started by the first call; end it here,
    # not at exit, so it cannot act on the rows of the tests that follow.
    shutdown_lifespans()
    # The fuzzed logins failed by the hundred from "testclient", the address every in-process
    # test logs in from: forget them, or the login rate limit would refuse the next tests.
    with session_scope() as session:
        session.execute(delete(LoginAttempt).where(LoginAttempt.at >= started))


DOCUMENT: dict[str, Any] = {}


def _load_schema() -> Any:
    """The app's own document, the app attached: calls go to it in-process over ASGI. Built
    from app.openapi() (the body of GET /openapi.json) because the server's lifespan needs
    the database, which exists only once the session fixtures ran; the first call starts it."""
    from app.main import create_app

    app = create_app()
    config = schemathesis.Config.from_dict(
        {
            "seed": SEED,
            "generation": {"max-examples": MAX_EXAMPLES, "deterministic": True, "database": "none"},
        }
    )
    DOCUMENT.update(app.openapi())
    loaded = schemathesis.openapi.from_dict(DOCUMENT, config=config)
    loaded.app = app
    # The experiment, sweep and GPU pages' streams do not end while something is live (the
    # world's queued run, a running sweep, the GPU panel always): their path ids and
    # statuses are tested in tests/test_page_events.py and tests/test_authz_matrix.py.
    return loaded.include(path_regex="^/api/").exclude(path_regex=PAGE_STREAMS)


schema = _load_schema()


def _fold(value: Any, ids: list[int], keep_every: int = 4) -> Any:
    """Most generated ints become one of `ids`; every `keep_every`-th one is sent as it is."""
    if isinstance(value, int) and not isinstance(value, bool) and value % keep_every:
        return ids[value % len(ids)]
    return value


def _aim_at_world(case: Case, world: World) -> None:
    params = case.path_parameters
    if params is None:
        return
    deleting = case.operation.method.upper() == "DELETE"
    if "experiment_id" in params:
        ids = world.deletable_experiment_ids if deleting else world.experiment_ids
        params["experiment_id"] = _fold(params["experiment_id"], ids)
    if "run_id" in params:
        if deleting:
            params["run_id"] = _fold(params["run_id"], world.deletable_run_ids)
        elif case.operation.path.endswith("/events"):
            # Only runs whose stream ends: finished ones, or ids that do not exist.
            raw = params["run_id"]
            if isinstance(raw, int) and not isinstance(raw, bool):
                ids = world.finished_run_ids
                params["run_id"] = ids[raw % len(ids)] if raw % 4 else -abs(raw) - 1
        else:
            params["run_id"] = _fold(params["run_id"], world.run_ids)
    if "image_id" in params:
        params["image_id"] = _fold(params["image_id"], world.image_ids)
    if params.get("token_id") == world.token_id:
        params["token_id"] = world.token_id + 1_000_000
    if isinstance(params.get("name"), str) and len(params["name"]) % 2:
        params["name"] = CHECKPOINT_NAME
    body = case.body
    if isinstance(body, dict) and isinstance(checkpoint := body.get("checkpoint"), str):
        if len(checkpoint) % 2:
            body["checkpoint"] = CHECKPOINT_NAME


FUZZ_SETTINGS = settings(
    max_examples=MAX_EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)


def _call_and_check(case: Case, world: World, auth_mode: str) -> None:
    _aim_at_world(case, world)
    headers = dict(world.headers) if auth_mode == "token" else None
    response = case.call(headers=headers, timeout=10)
    CASES[(auth_mode, case.operation.label)] += 1
    STATUSES[auth_mode][response.status_code] += 1
    try:
        case.validate_response(response, checks=CHECKS, headers=headers)
    except BaseException as exc:  # schemathesis' FailureGroup is a BaseExceptionGroup
        if _negative_only_before_sending(exc, case):
            return
        FAILED[auth_mode] += 1
        raise


def _as_sent(value: Any) -> Any:
    """A query value as HTTP carries it: text (None as "", booleans as JSON spells them)."""
    if isinstance(value, list):
        return [_as_sent(v) for v in value]
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _negative_only_before_sending(exc: BaseException, case: Case) -> bool:
    """Schemathesis' "negative" query values include null, false or 0 for a text parameter,
    which HTTP can only send as text: `tag=false` is a fine tag, and a 200 for it is right
    (schemathesis issue 3962, fixed after the 4.32 we pin). Excused only when every failure is
    such an AcceptedNegativeData, the request has no body, and every query value as sent
    fits its declared schema."""
    from jsonschema_rs import Draft202012Validator
    from schemathesis.core.failures import AcceptedNegativeData

    failures = getattr(exc, "exceptions", None)
    if not failures or not all(isinstance(f, AcceptedNegativeData) for f in failures):
        return False
    if case.body is not None and not type(case.body).__name__.startswith("NotSet"):
        return False
    operation = DOCUMENT["paths"][case.operation.path][case.method.lower()]
    declared = {p["name"]: p for p in operation.get("parameters", []) if p["in"] == "query"}
    for name, value in (case.query or {}).items():
        if name not in declared:
            return False
        param_schema = {**declared[name].get("schema", {}), "components": DOCUMENT["components"]}
        sent = _as_sent(value)
        allows_list = "array" in json.dumps(declared[name].get("schema", {}))
        if allows_list and not isinstance(sent, list):
            sent = [sent]
        if not Draft202012Validator(param_schema).is_valid(sent):
            return False
    return True


@schema.parametrize()
@FUZZ_SETTINGS
def test_api_with_a_valid_token(case: Case, world: World) -> None:
    _call_and_check(case, world, "token")


# Without credentials every operation answers 401 before it reads what a case varies (the
# token is checked first), so ten cases per operation find what fifty did, in a fifth of the
# time (57 s of the module's 122 s on SQLite, issue 38's CI budget).
ANONYMOUS_EXAMPLES = 10


@schema.parametrize()
@settings(FUZZ_SETTINGS, max_examples=ANONYMOUS_EXAMPLES)
def test_api_without_credentials(case: Case, world: World) -> None:
    _call_and_check(case, world, "anonymous")


BIG = 2**70  # past every 64-bit integer column


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        # Found while checking the fuzzer's reach: 500s (an integer overflow in the SQLite
        # driver, datetime arithmetic past year 1) that are 422s now, and what PostgreSQL would
        # refuse (NUL in a string that reaches a query).
        (f"/api/runs/{{run}}/metrics?step_min={BIG}", 422),
        (f"/api/runs/{{run}}/metrics?step_max={BIG}&max_points=4", 422),
        ("/api/runs/{run}/metrics?keys=a%00b", 422),
        (f"/api/runs/{{run}}/logs?offset={BIG}", 422),
        (f"/api/runs/{{run}}/logs?tail={BIG}", 422),
        (f"/api/runs/{{run}}/events?log_offset={BIG}", 422),
        (f'/api/runs/{{run}}/events?after={{{{"a":{BIG}}}}}', 422),
        ('/api/runs/{run}/events?after={{"a\\u0000":1}}', 422),
        ("/api/runs/{run}/checkpoints/a%00b", 422),
        ("/api/usage?until=0001-01-05T00:00:00Z", 200),
        ("/api/usage?since=0001-01-01T00:00:00%2B23:59", 422),
        ("/api/usage?until=9999-12-31T23:59:59-23:59", 422),
        ("/api/usage?until=0.5", 422),
        ("/api/usage?since=2026-01-01", 422),
    ],
)
def test_edge_values_are_client_errors(client, world: World, url: str, expected: int) -> None:
    r = client.get(url.format(run=world.finished_run_ids[0]), headers=world.headers)
    assert r.status_code == expected, r.text
    if expected == 422:
        assert r.json()["detail"][0]["loc"][0] in ("query", "path")


@pytest.fixture(scope="module", autouse=True)
def _report() -> Iterator[None]:
    """With TORCHYARD_API_FUZZ_REPORT=<path>: what was sent and what came back, per pass."""
    started = time.monotonic()
    yield
    target = os.environ.get("TORCHYARD_API_FUZZ_REPORT")
    if not target or not CASES:
        return
    database = os.environ.get("TORCHYARD_DATABASE_URL", "").split(":", 1)[0]
    lines = [
        f"schemathesis {schemathesis.__version__}, seed {SEED}, max_examples {MAX_EXAMPLES} "
        f"per operation and pass, database {database}, {time.monotonic() - started:.0f} s",
        "checks: " + ", ".join(check.__name__ for check in CHECKS),
    ]
    for mode in ("token", "anonymous"):
        counts = {label: n for (m, label), n in CASES.items() if m == mode}
        statuses = ", ".join(f"{code}: {n}" for code, n in sorted(STATUSES[mode].items()))
        server_errors = sum(n for code, n in STATUSES[mode].items() if code >= 500)
        lines += [
            "",
            f"[{mode}] {sum(counts.values())} cases over {len(counts)} operations; "
            f"{server_errors} server errors; {FAILED[mode]} failed checks",
            f"  status codes: {statuses}",
        ]
        lines += [f"  {n:5d}  {label}" for label, n in sorted(counts.items(), key=_by_path)]
    Path(target).write_text("\n".join(lines) + "\n")


def _by_path(item: tuple[str, int]) -> tuple[str, str]:
    method, _, path = item[0].partition(" ")
    return path, method
