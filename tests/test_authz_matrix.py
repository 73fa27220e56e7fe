"""Who may call what: anonymous / viewer / member-owner / member-other / admin against every
route of the app.

The table below has one row per (method, path) of the application; a route added without a
row, or a row whose route is gone, fails `test_every_route_is_in_the_matrix`. Each row names
its rule, and the rule fixes what each actor gets (blank: the same as the owner):

    rule         anonymous  viewer  owner  other  admin
    PUBLIC       =          =       ok     =      =      everybody, logged in or not
    USER         401        ok      ok     ok     ok     API, any logged-in user
    WRITER       401        403     ok     ok     ok     API that creates: not viewers
    READ         401        ok      ok     ok     ok     API read of the owner's experiment/run
    OWNED        401        403     ok     403    ok     API write on the owner's experiment/run
    TOKEN        401        404     ok     404    ok     API on the owner's token (not theirs
                                                         to know about)
    ADMIN        401        403     403    403    ok     the users API
    PAGE_USER    303        ok      ok     ok     ok     HTML page (anonymous: to /login?next=)
    PAGE_TOKEN   303        404     ok     404    ok     the owner's token, from a page
    PAGE_ADMIN   303        403     403    403    ok     the users page
    LOGOUT       303        ok      ok     ok     ok     a cookie-only write

The team reads each other's work: every signed-in user reads every experiment, run, curve,
log, file and checkpoint; the owner and admins write; viewers never do.

Every request gets fresh credentials: a bearer token for API routes, the session cookie for
pages. A refused write must leave the database as it was; an allowed one must change it. And
every authenticated non-GET route is also sent with the session cookie but without the CSRF
header (refused with 403, nothing changed) and with it (allowed).
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from sqlalchemy import delete, func, select

from app.auth.models import ApiToken, Role, User
from app.auth.service import create_token
from app.code import store as code_store
from app.code.models import CodeSnapshot
from app.db import session_scope
from app.experiments import service as experiments
from app.experiments.models import Experiment
from app.experiments.schemas import ExperimentCreate
from app.notifications.models import Delivery, NotificationSettings
from app.runs.models import Checkpoint, Run, RunImage
from app.runs.state import lifecycle
from app.saved_views import service as saved_views
from app.saved_views.models import SavedView
from app.saved_views.schemas import ViewCreate, ViewState
from app.settings import get_settings
from app.static_files import chart_asset_url
from app.sweeps import service as sweeps
from app.sweeps.schemas import SweepCreate
from app.users import service as users
from app.users.models import ResourceCeiling
from tests.code_archives import tar_gz
from tests.conftest import make_user
from tests.factories import add_run

# Its event-stream rows poll on the streams' own threads while the next request runs: one
# rolled-back connection cannot serve both (conftest app_sessions), so this module commits.
pytestmark = pytest.mark.committed("event streams poll on threads of their own")

TINY = {"recipe": "tiny_mlp", "params": {"epochs": 1}, "seed": 3}
CKPT = "epoch-0001.pt"
PNG = b"\x89PNG\r\n\x1a\n" + b"a stored image"


@dataclass
class Actor:
    name: str
    user_id: int | None = None
    username: str = ""
    password: str = ""

    def token(self) -> str:
        assert self.user_id is not None
        with session_scope() as session:
            user = session.get(User, self.user_id)
            assert user is not None
            return create_token(session, user=user, ttl_hours=1, name="matrix")[1]


@dataclass
class World:
    """Objects of `owner`; the builders below make fresh ones where a write consumes them.
    `actor` is who sends the request being built (None: anonymous)."""

    owner: Actor
    other: Actor
    admin: Actor
    viewer: Actor
    marker: str
    experiment_id: int = 0
    run_id: int = 0
    image_id: int = 0
    code_run_id: int = 0
    actor: Actor | None = None

    @property
    def sender(self) -> Actor:
        """The actor whose own password a self-service form sends (anonymous: the owner's)."""
        return self.actor or self.owner

    def invite(self) -> str:
        """The secret of a fresh invite link."""
        with session_scope() as session:
            return users.invite_user(session, username=_fresh_name(), role=Role.member)[1]

    def fresh_user(self) -> int:
        """A member for the users API to change."""
        return _actor("target").user_id or 0

    def queued_run(self) -> int:
        with session_scope() as session:
            assert self.owner.user_id is not None
            return add_run(session, owner_id=self.owner.user_id, config=TINY, status="queued")

    def ended_run(self) -> int:
        """A fresh finished run (a delete consumes it), with a file in its folder."""
        with session_scope() as session:
            assert self.owner.user_id is not None
            run_id = add_run(session, owner_id=self.owner.user_id, config=TINY, status="failed")
        run_dir = get_settings().run_dir(run_id)
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "output.log").write_text("bye\n")
        return run_id

    def ended_experiment(self) -> int:
        """A fresh experiment with one finished run (a delete consumes it)."""
        run_id = self.ended_run()
        with session_scope() as session:
            run = session.get(Run, run_id)
            assert run is not None
            return run.experiment_id

    def code_archive(self) -> bytes:
        return tar_gz([("train.py", "file", f"# {self.marker}\n".encode())])

    def code_run(self) -> int:
        """A finished run of the owner's from a stored code snapshot (made once)."""
        if not self.code_run_id:
            data = self.code_archive()
            digest = "sha256:" + hashlib.sha256(data).hexdigest()
            code_store.local_path(digest).parent.mkdir(parents=True, exist_ok=True)
            code_store.local_path(digest).write_bytes(data)
            config = {"script": "train.py", "code": digest, "seed": 1}
            with session_scope() as session:
                assert self.owner.user_id is not None
                self.code_run_id = add_run(
                    session, owner_id=self.owner.user_id, config=config, status="succeeded"
                )
        return self.code_run_id

    def running_session(self) -> int:
        """A fresh running session of the owner's (an extension changes its notices), and no
        run waiting for GPUs (which refuses an extension): earlier modules' are cancelled."""
        with session_scope() as session:
            assert self.owner.user_id is not None
            for run in session.scalars(select(Run).where(Run.status == "queued")):
                if (run.config.get("resources") or {}).get("gpus"):
                    lifecycle.cancel(session, run_id=run.id)
            config = {"session": {"hours": 1}, "seed": 1}
            return add_run(session, owner_id=self.owner.user_id, config=config, status="running")

    def running_sweep(self) -> int:
        """A fresh sweep of the owner's experiment, one trial queued (a cancel consumes it)."""
        with session_scope() as session:
            owner = session.get(User, self.owner.user_id)
            exp = session.get(Experiment, self.experiment_id)
            assert owner is not None and exp is not None
            data = SweepCreate.model_validate(sweep_spec(self))
            return sweeps.create_sweep(session, experiment=exp, owner=owner, data=data).id

    def notify_ready(self) -> str:
        """The sender has a channel to test (a webhook the server refuses to call: no network
        I/O) and no test moments ago (the cooldown)."""
        user_id = self.sender.user_id
        with session_scope() as session:
            session.merge(
                NotificationSettings(
                    user_id=user_id, webhook_url="http://127.0.0.1:9/hook", events=["failed"]
                )
            )
            session.execute(delete(Delivery).where(Delivery.user_id == user_id))
        return "/api/users/me/notifications/test"

    def shared_view(self) -> int:
        """A fresh shared view of the owner's experiment (a delete consumes it)."""
        with session_scope() as session:
            owner = session.get(User, self.owner.user_id)
            assert owner is not None
            data = ViewCreate(
                name="matrix", experiment_id=self.experiment_id, shared=True, state=ViewState()
            )
            return saved_views.create_view(session, owner=owner, data=data).id

    def owner_token_id(self) -> int:
        with session_scope() as session:
            user = session.get(User, self.owner.user_id)
            assert user is not None
            return create_token(session, user=user, ttl_hours=1, name="to-revoke")[0].id


def sweep_spec(w: World) -> dict[str, Any]:
    return {
        "experiment_id": w.experiment_id,
        "method": "grid",
        "metric": {"name": "val/acc", "goal": "maximize"},
        "parameters": {"params.lr": {"values": [0.01, 0.1]}},
        "max_runs": 2,
        "max_concurrent": 1,
    }


def _actor(name: str, *, admin: bool = False, role: str = "") -> Actor:
    username, password, _ = make_user(admin=admin, role=role)
    with session_scope() as session:
        user_id = session.scalar(select(User.id).where(User.username == username))
    return Actor(name, user_id, username, password)


@pytest.fixture(scope="module")
def world() -> World:
    w = World(
        _actor("owner"),
        _actor("other"),
        _actor("admin", admin=True),
        _actor("viewer", role="viewer"),
        secrets.token_hex(6),
    )
    with session_scope() as session:
        owner = session.get(User, w.owner.user_id)
        assert owner is not None
        exp = experiments.create_experiment(
            session,
            owner=owner,
            data=ExperimentCreate(name=f"authz-{w.marker}", config=TINY),
        )
        w.experiment_id = exp.id
        w.run_id = add_run(session, owner_id=owner.id, config=TINY, status="succeeded")
        run_dir = get_settings().run_dir(w.run_id)
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / CKPT).write_bytes(b"checkpoint bytes")
        (run_dir / "work").mkdir(exist_ok=True)
        (run_dir / "work" / CKPT).write_bytes(b"a file the run wrote")
        (run_dir / "output.log").write_text(f"hello from {w.marker}\n")
        session.add(
            Checkpoint(run_id=w.run_id, name=CKPT, epoch=1, step=10, size_bytes=16, path=CKPT)
        )
        image = RunImage(
            run_id=w.run_id,
            tag="samples",
            step=3,
            wall_time=1.0,
            width=1,
            height=1,
            size_bytes=len(PNG),
            data=PNG,
        )
        session.add(image)
        session.flush()
        w.image_id = image.id
    return w


# --- the table -----------------------------------------------------------------------------

Build = Callable[[World], tuple[str, dict[str, Any]]]  # url, extra request kwargs
Check = Callable[[World, Any], bool]  # True when another user's response is as it should be

ACTORS = ("anonymous", "viewer", "owner", "other", "admin")


@dataclass(frozen=True)
class Rule:
    """What each actor gets; 0: the owner's status (`Row.ok`)."""

    name: str
    page: bool = False  # authenticated by the session cookie (pages), not a bearer token
    anonymous: int = 401
    viewer: int = 0
    owner: int = 0
    other: int = 0

    def status(self, actor: str, ok: int) -> int:
        return getattr(self, actor, 0) or ok

    def refuses(self, actor: str) -> bool:
        return getattr(self, actor, 0) != 0


PUBLIC = Rule("public", anonymous=0)
USER = Rule("user")
WRITER = Rule("writer", viewer=403)
READ = Rule("read")
OWNED = Rule("owned", viewer=403, other=403)
TOKEN = Rule("token", viewer=404, other=404)
ADMIN = Rule("admin", viewer=403, owner=403, other=403)
PAGE_USER = Rule("page-user", page=True, anonymous=303)
PAGE_TOKEN = Rule("page-token", page=True, anonymous=303, viewer=404, other=404)
PAGE_ADMIN = Rule("page-admin", page=True, anonymous=303, viewer=403, owner=403, other=403)
LOGOUT = Rule("logout", page=True, anonymous=303)


@dataclass(frozen=True)
class Row:
    rule: Rule
    ok: int  # the owner's (and admin's) status
    build: Build
    other_sees: Check | None = field(default=None)  # checked on member-other's response


# In a build's keyword arguments: read the response as a stream, up to its first event (a live
# page's stream that does not end by itself), then close it.
FIRST_EVENT = "first_event"


def _get(url: str) -> Build:
    return lambda w: (url, {})


def _ids(response: Any) -> list[int]:
    return [item["id"] for item in response.json()]


def _token_ids(actor: Actor) -> set[int]:
    with session_scope() as session:
        return set(session.scalars(select(ApiToken.id).where(ApiToken.user_id == actor.user_id)))


def _fresh_archive() -> bytes:
    """A snapshot never uploaded before: an allowed upload adds a row."""
    return tar_gz([("train.py", "file", f"# {secrets.token_hex(8)}\n".encode())])


def _fresh_name() -> str:
    return f"new-{secrets.token_hex(4)}"


def _same_password(w: World) -> dict[str, Any]:
    """Change one's password to itself: a real write (a new salt), and later rows still log in."""
    return {"current_password": w.sender.password, "new_password": w.sender.password}


MATRIX: dict[tuple[str, str], Row] = {
    # public: the API's health, the docs, the login form and token endpoint, static files
    ("GET", "/api/health"): Row(PUBLIC, 200, _get("/api/health")),
    ("GET", "/api/ready"): Row(PUBLIC, 200, _get("/api/ready")),
    ("GET", "/openapi.json"): Row(PUBLIC, 200, _get("/openapi.json")),
    ("GET", "/docs"): Row(PUBLIC, 200, _get("/docs")),
    ("GET", "/docs/oauth2-redirect"): Row(PUBLIC, 200, _get("/docs/oauth2-redirect")),
    ("GET", "/redoc"): Row(PUBLIC, 200, _get("/redoc")),
    ("GET", "/login"): Row(PUBLIC, 200, _get("/login")),
    ("POST", "/login"): Row(
        PUBLIC,
        303,
        lambda w: (
            "/login",
            {"data": {"username": w.owner.username, "password": w.owner.password}},
        ),
    ),
    ("POST", "/api/auth/token"): Row(
        PUBLIC,
        200,
        lambda w: (
            "/api/auth/token",
            {"data": {"username": w.owner.username, "password": w.owner.password}},
        ),
    ),
    ("GET", "/static"): Row(PUBLIC, 200, _get("/static/app.css")),
    # an invite link is its own credential: the same for everybody
    ("GET", "/invite/{secret}"): Row(PUBLIC, 200, lambda w: (f"/invite/{w.invite()}", {})),
    ("POST", "/invite/{secret}"): Row(
        PUBLIC,
        303,
        lambda w: (f"/invite/{w.invite()}", {"data": {"new_password": "long enough pw"}}),
    ),
    ("GET", "/static/vendor/{prefix}-{version}/{name}"): Row(
        PUBLIC, 200, lambda w: (chart_asset_url("uPlot.js"), {})
    ),
    # any logged-in user; lists show everyone's things (the team sees each other's work)
    ("GET", "/api/me"): Row(USER, 200, _get("/api/me")),
    ("GET", "/metrics"): Row(USER, 200, _get("/metrics")),
    ("GET", "/api/users/me"): Row(
        USER, 200, _get("/api/users/me"), lambda w, r: r.json()["username"] == w.other.username
    ),
    ("GET", "/api/users/me/notifications"): Row(USER, 200, _get("/api/users/me/notifications")),
    ("PUT", "/api/users/me/notifications"): Row(
        USER, 200, lambda w: ("/api/users/me/notifications", {"json": {"stalled_minutes": 12}})
    ),
    ("POST", "/api/users/me/notifications/test"): Row(USER, 200, lambda w: (w.notify_ready(), {})),
    ("GET", "/api/users/me/notifications/deliveries"): Row(
        USER, 200, _get("/api/users/me/notifications/deliveries")
    ),
    ("POST", "/api/users/me/password"): Row(
        USER, 204, lambda w: ("/api/users/me/password", {"json": _same_password(w)})
    ),
    ("GET", "/api/gpus"): Row(USER, 200, _get("/api/gpus")),
    ("GET", "/api/gpus/events"): Row(
        USER, 200, lambda w: ("/api/gpus/events", {FIRST_EVENT: True})
    ),
    ("GET", "/api/usage"): Row(USER, 200, _get("/api/usage")),
    ("GET", "/api/fleet"): Row(USER, 200, _get("/api/fleet")),
    ("GET", "/api/pools"): Row(USER, 200, _get("/api/pools")),
    ("GET", "/api/experiments"): Row(
        USER, 200, _get("/api/experiments"), lambda w, r: w.experiment_id in _ids(r)
    ),
    ("POST", "/api/experiments"): Row(
        WRITER, 201, lambda w: ("/api/experiments", {"json": {"name": "matrix", "config": TINY}})
    ),
    ("POST", "/api/code"): Row(
        WRITER, 201, lambda w: ("/api/code", {"files": {"file": ("c.tar.gz", _fresh_archive())}})
    ),
    ("GET", "/api/runs"): Row(
        USER, 200, _get("/api/runs"), lambda w, r: w.run_id in [x["id"] for x in r.json()["runs"]]
    ),
    ("GET", "/api/tokens"): Row(
        USER, 200, _get("/api/tokens"), lambda w, r: not set(_ids(r)) & _token_ids(w.owner)
    ),
    ("POST", "/api/tokens"): Row(
        USER, 201, lambda w: ("/api/tokens", {"json": {"name": "m", "ttl_hours": 0.5}})
    ),
    # saved views: the owner's shared one is everyone's to open; its owner (or an admin)
    # deletes it; the experiment's owner (or an admin) makes it the default
    ("GET", "/api/views"): Row(USER, 200, _get("/api/views")),
    ("POST", "/api/views"): Row(
        WRITER, 201, lambda w: ("/api/views", {"json": {"name": "m", "state": {"sort": "id"}}})
    ),
    ("GET", "/api/views/{view_id}"): Row(
        READ, 200, lambda w: (f"/api/views/{w.shared_view()}", {})
    ),
    ("DELETE", "/api/views/{view_id}"): Row(
        OWNED, 204, lambda w: (f"/api/views/{w.shared_view()}", {})
    ),
    ("PUT", "/api/views/{view_id}/default"): Row(
        OWNED,
        200,
        lambda w: (f"/api/views/{w.shared_view()}/default", {"json": {"default": True}}),
    ),
    ("DELETE", "/api/tokens/{token_id}"): Row(
        TOKEN, 204, lambda w: (f"/api/tokens/{w.owner_token_id()}", {})
    ),
    # the users API: admins only
    ("GET", "/api/users"): Row(ADMIN, 200, _get("/api/users")),
    ("POST", "/api/users"): Row(
        ADMIN,
        201,
        lambda w: (
            "/api/users",
            {"json": {"username": _fresh_name(), "password": "long enough pw", "role": "viewer"}},
        ),
    ),
    ("PATCH", "/api/users/{user_id}"): Row(
        ADMIN, 200, lambda w: (f"/api/users/{w.fresh_user()}", {"json": {"role": "viewer"}})
    ),
    # fair share (issue 42): everyone reads each user's share; admins set a user's weight
    ("GET", "/api/fair-share"): Row(USER, 200, _get("/api/fair-share")),
    ("PUT", "/api/fair-share/users/{user_id}"): Row(
        ADMIN,
        200,
        lambda w: (f"/api/fair-share/users/{w.fresh_user()}", {"json": {"weight": 2}}),
    ),
    # ceilings on a run's limits: everyone reads their own; admins read and set them all
    ("GET", "/api/ceilings/me"): Row(USER, 200, _get("/api/ceilings/me")),
    ("GET", "/api/ceilings"): Row(ADMIN, 200, _get("/api/ceilings")),
    ("PUT", "/api/ceilings/roles/{role}"): Row(
        ADMIN, 200, lambda w: ("/api/ceilings/roles/viewer", {"json": {"cpus": 3}})
    ),
    ("PUT", "/api/ceilings/users/{user_id}"): Row(
        ADMIN, 200, lambda w: (f"/api/ceilings/users/{w.fresh_user()}", {"json": {"cpus": 3}})
    ),
    # the owner's experiment and run: everyone reads, the owner and admins write
    ("GET", "/api/experiments/{experiment_id}"): Row(
        READ, 200, lambda w: (f"/api/experiments/{w.experiment_id}", {})
    ),
    # the pickers' search of the experiment's metric keys (issue 43)
    ("GET", "/api/experiments/{experiment_id}/keys"): Row(
        READ, 200, lambda w: (f"/api/experiments/{w.experiment_id}/keys?q=loss", {})
    ),
    # nothing of the experiment is active: its stream sends its digest and ends
    ("GET", "/api/experiments/{experiment_id}/events"): Row(
        READ, 200, lambda w: (f"/api/experiments/{w.experiment_id}/events", {})
    ),
    ("PATCH", "/api/experiments/{experiment_id}"): Row(
        OWNED,
        200,
        lambda w: (
            f"/api/experiments/{w.experiment_id}",
            {"json": {"name": _fresh_name(), "best": {"metric": "val/loss", "mode": "min"}}},
        ),
    ),
    ("GET", "/api/experiments/{experiment_id}/runs"): Row(
        READ, 200, lambda w: (f"/api/experiments/{w.experiment_id}/runs", {})
    ),
    # A member launches a run of anyone's experiment: the run is the launcher's.
    ("POST", "/api/experiments/{experiment_id}/runs"): Row(
        WRITER,
        201,
        lambda w: (f"/api/experiments/{w.experiment_id}/runs", {"json": {}}),
        lambda w, r: r.json()["owner_id"] == w.other.user_id,
    ),
    ("GET", "/api/runs/{run_id}"): Row(READ, 200, lambda w: (f"/api/runs/{w.run_id}", {})),
    ("PATCH", "/api/runs/{run_id}"): Row(
        OWNED, 200, lambda w: (f"/api/runs/{w.run_id}", {"json": {"name": _fresh_name()}})
    ),
    ("POST", "/api/runs/{run_id}/cancel"): Row(
        OWNED, 202, lambda w: (f"/api/runs/{w.queued_run()}/cancel", {})
    ),
    ("DELETE", "/api/runs/{run_id}"): Row(OWNED, 204, lambda w: (f"/api/runs/{w.ended_run()}", {})),
    ("DELETE", "/api/experiments/{experiment_id}"): Row(
        OWNED, 204, lambda w: (f"/api/experiments/{w.ended_experiment()}", {})
    ),
    ("POST", "/api/runs/{run_id}/resume"): Row(
        OWNED,
        201,
        # The checkpoint is at epoch 1 of TINY's 1: resuming it needs more epochs.
        lambda w: (
            f"/api/runs/{w.run_id}/resume",
            {"json": {"checkpoint": CKPT, "overrides": {"params": {"epochs": 2}}}},
        ),
    ),
    ("GET", "/api/runs/{run_id}/metrics"): Row(
        READ, 200, lambda w: (f"/api/runs/{w.run_id}/metrics", {})
    ),
    ("GET", "/api/compare/metrics"): Row(
        READ,
        200,
        lambda w: (f"/api/compare/metrics?runs={w.run_id}&keys=train/loss", {}),
        lambda w, r: str(w.run_id) in r.json()["runs"],
    ),
    ("GET", "/api/runs/{run_id}/logs"): Row(
        READ,
        200,
        lambda w: (f"/api/runs/{w.run_id}/logs", {}),
        lambda w, r: w.marker in r.text,
    ),
    ("GET", "/api/runs/{run_id}/environment"): Row(
        READ, 200, lambda w: (f"/api/runs/{w.run_id}/environment", {})
    ),
    ("GET", "/api/runs/{run_id}/checkpoints"): Row(
        READ, 200, lambda w: (f"/api/runs/{w.run_id}/checkpoints", {})
    ),
    ("GET", "/api/runs/{run_id}/checkpoints/{name}"): Row(
        READ,
        200,
        lambda w: (f"/api/runs/{w.run_id}/checkpoints/{CKPT}", {}),
        lambda w, r: r.content == b"checkpoint bytes",
    ),
    ("GET", "/api/runs/{run_id}/code"): Row(
        READ,
        200,
        lambda w: (f"/api/runs/{w.code_run()}/code", {}),
        lambda w, r: r.content == w.code_archive(),
    ),
    ("GET", "/api/runs/{run_id}/files"): Row(
        READ,
        200,
        lambda w: (f"/api/runs/{w.run_id}/files", {}),
        lambda w, r: [f["path"] for f in r.json()] == [CKPT],
    ),
    ("GET", "/api/runs/{run_id}/files/{path:path}"): Row(
        READ,
        200,
        lambda w: (f"/api/runs/{w.run_id}/files/{CKPT}", {}),
        lambda w, r: r.content == b"a file the run wrote",
    ),
    ("GET", "/api/runs/{run_id}/images"): Row(
        READ,
        200,
        lambda w: (f"/api/runs/{w.run_id}/images", {}),
        lambda w, r: [i["id"] for i in r.json()["tags"]["samples"]] == [w.image_id],
    ),
    ("GET", "/api/runs/{run_id}/images/{image_id}"): Row(
        READ,
        200,
        lambda w: (f"/api/runs/{w.run_id}/images/{w.image_id}", {}),
        lambda w, r: r.content == PNG and r.headers["content-type"] == "image/png",
    ),
    # a finished run's stream sends what there is and ends
    ("GET", "/api/runs/{run_id}/events"): Row(
        READ, 200, lambda w: (f"/api/runs/{w.run_id}/events", {})
    ),
    # sweeps: of the owner's experiment; everyone reads, the owner and admins start and cancel
    # A session is a run: started by any member, extended by its owner (and admins).
    ("POST", "/api/sessions"): Row(
        WRITER, 201, lambda w: ("/api/sessions", {"json": {"gpus": 0, "hours": 1}})
    ),
    ("POST", "/api/sessions/{run_id}/extend"): Row(
        OWNED,
        200,
        lambda w: (f"/api/sessions/{w.running_session()}/extend", {"json": {"hours": 1}}),
    ),
    ("POST", "/api/sweeps"): Row(OWNED, 201, lambda w: ("/api/sweeps", {"json": sweep_spec(w)})),
    ("GET", "/api/sweeps"): Row(
        USER,
        200,
        lambda w: (f"/api/sweeps?experiment_id={w.experiment_id}", {}),
        lambda w, r: all(s["experiment_id"] == w.experiment_id for s in r.json()),
    ),
    ("GET", "/api/sweeps/{sweep_id}"): Row(
        READ,
        200,
        lambda w: (f"/api/sweeps/{w.running_sweep()}", {}),
        lambda w, r: len(r.json()["runs"]) == 1,
    ),
    ("GET", "/api/sweeps/{sweep_id}/events"): Row(
        READ,
        200,
        lambda w: (f"/api/sweeps/{w.running_sweep()}/events", {FIRST_EVENT: True}),
    ),
    ("POST", "/api/sweeps/{sweep_id}/cancel"): Row(
        OWNED, 200, lambda w: (f"/api/sweeps/{w.running_sweep()}/cancel", {})
    ),
    # pages
    ("GET", "/"): Row(PAGE_USER, 200, _get("/"), lambda w, r: w.marker in r.text),
    ("GET", "/experiments/new"): Row(PAGE_USER, 200, _get("/experiments/new")),
    ("GET", "/gpus"): Row(PAGE_USER, 200, _get("/gpus")),
    ("GET", "/fleet"): Row(PAGE_USER, 200, _get("/fleet")),
    ("GET", "/compare"): Row(
        PAGE_USER,
        200,
        lambda w: (f"/compare?runs={w.run_id}", {}),
        lambda w, r: f'value="{w.run_id}" checked' in r.text and "Not shown" not in r.text,
    ),
    ("GET", "/experiments/{experiment_id}"): Row(
        PAGE_USER,
        200,
        lambda w: (f"/experiments/{w.experiment_id}", {}),
        lambda w, r: 'id="launch-run"' in r.text and 'id="delete-experiment"' not in r.text,
    ),
    ("GET", "/runs/{run_id}"): Row(
        PAGE_USER,
        200,
        lambda w: (f"/runs/{w.run_id}", {}),
        lambda w, r: 'id="cancel-run"' not in r.text,
    ),
    ("GET", "/sweeps/{sweep_id}"): Row(
        PAGE_USER,
        200,
        lambda w: (f"/sweeps/{w.running_sweep()}", {}),
        # another member reads the sweep without its Cancel button
        lambda w, r: 'id="sweep-data"' in r.text and 'id="cancel-sweep"' not in r.text,
    ),
    ("GET", "/account"): Row(PAGE_USER, 200, _get("/account")),
    ("POST", "/account/password"): Row(
        PAGE_USER, 303, lambda w: ("/account/password", {"data": _same_password(w)})
    ),
    ("POST", "/account/tokens"): Row(
        PAGE_USER, 200, lambda w: ("/account/tokens", {"data": {"name": "page", "days": "1"}})
    ),
    ("POST", "/account/tokens/{token_id}/revoke"): Row(
        PAGE_TOKEN, 303, lambda w: (f"/account/tokens/{w.owner_token_id()}/revoke", {})
    ),
    ("GET", "/account/notifications"): Row(PAGE_USER, 200, _get("/account/notifications")),
    ("POST", "/account/notifications"): Row(
        PAGE_USER, 200, lambda w: ("/account/notifications", {"data": {"stalled_minutes": "12"}})
    ),
    ("POST", "/account/notifications/test"): Row(
        PAGE_USER, 200, lambda w: (w.notify_ready() and "/account/notifications/test", {})
    ),
    ("GET", "/admin/users"): Row(PAGE_ADMIN, 200, _get("/admin/users")),
    ("POST", "/admin/users"): Row(
        PAGE_ADMIN,
        200,
        lambda w: ("/admin/users", {"data": {"username": _fresh_name(), "role": "member"}}),
    ),
    ("POST", "/admin/users/{user_id}"): Row(
        PAGE_ADMIN,
        200,
        lambda w: (f"/admin/users/{w.fresh_user()}", {"data": {"action": "reset-password"}}),
    ),
    ("POST", "/admin/ceilings"): Row(
        PAGE_ADMIN,
        200,
        lambda w: ("/admin/ceilings", {"data": {"scope": "role:viewer", "cpus": "3"}}),
    ),
    ("POST", "/gpus/share-weight"): Row(
        PAGE_ADMIN,
        303,
        lambda w: ("/gpus/share-weight", {"data": {"user_id": str(w.fresh_user()), "weight": "2"}}),
    ),
    ("POST", "/logout"): Row(LOGOUT, 303, _get("/logout")),
}


# --- enumerating the app's routes ----------------------------------------------------------


def app_routes(routes: list[Any], prefix: str = "") -> Iterator[tuple[str, str]]:
    """(method, path) of every route; FastAPI >= 0.137 keeps included routers as opaque
    `_IncludedRouter` entries in `app.routes`, so those are walked into."""
    for route in routes:
        if hasattr(route, "original_router"):
            yield from app_routes(
                route.original_router.routes, prefix + route.include_context.prefix
            )
        elif hasattr(route, "methods") and route.methods:
            for method in sorted(route.methods - {"HEAD"}):
                yield method, prefix + route.path
        else:  # a Mount (static files): GET only
            yield "GET", prefix + route.path


# MLflow's API answers in MLflow's shape, takes no session cookie (so no CSRF), and has its
# own table: tests/test_mlflow_authz.py.
# A session's JupyterLab proxy (/sessions/<id>/lab/...) forwards every method to Jupyter, is
# its owner's and admins' alone (not the team's to read), and checks a cookie's origin instead
# of the CSRF header JupyterLab's page cannot send: its own table, tests/test_sessions_access.py.
OWN_TABLES = ("/api/2.0/mlflow/", "/api/2.0/mlflow-artifacts/", "/sessions/")


def test_every_route_is_in_the_matrix(app) -> None:
    found = {r for r in app_routes(list(app.routes)) if not r[1].startswith(OWN_TABLES)}
    assert ("GET", "/api/runs/{run_id}") in found and ("GET", "/login") in found
    missing = sorted(found - MATRIX.keys())
    stale = sorted(MATRIX.keys() - found)
    assert not missing, f"routes without an authorization rule in MATRIX: {missing}"
    assert not stale, f"MATRIX rows for routes the app no longer has: {stale}"


# --- checking one row ----------------------------------------------------------------------


def fingerprint() -> tuple[object, ...]:
    """What any write of the app changes."""
    with session_scope() as session:
        users = session.execute(
            select(
                User.id, User.role, User.is_active, User.password_hash, User.share_weight
            ).order_by(User.id)
        ).all()
        return (
            session.scalar(select(func.count()).select_from(Experiment)) or 0,
            session.scalar(select(func.count()).select_from(CodeSnapshot)) or 0,
            session.scalar(select(func.count()).select_from(Run)) or 0,
            session.scalar(select(func.count()).where(Run.cancel_requested.is_(True))) or 0,
            session.scalar(select(func.count()).select_from(ApiToken)) or 0,
            session.scalar(select(func.count()).where(ApiToken.revoked_at.is_not(None))) or 0,
            hash(tuple(tuple(u) for u in users)),
            hash(tuple(session.scalars(select(Run.name).order_by(Run.id)))),
            hash(tuple(session.scalars(select(Experiment.name).order_by(Experiment.id)))),
            session.scalar(select(func.count()).select_from(Delivery)) or 0,
            hash(tuple(session.scalars(select(NotificationSettings.updated_at)))),
            hash(tuple(session.execute(select(SavedView.id, SavedView.default_of)).all())),
            hash(tuple(session.scalars(select(ResourceCeiling.updated_at)))),
            hash(tuple(str(n) for n in session.scalars(select(Run.notices).order_by(Run.id)))),
        )


def send(
    client: Any,
    method: str,
    row: Row,
    world: World,
    actor: Actor | None,
    *,
    cookie: bool = False,
    csrf: bool = True,
) -> tuple[Any, bool]:
    """One request as `actor` (None: anonymous); returns the response and whether the
    database changed."""
    headers: dict[str, str] = {}
    if actor is not None:
        token = actor.token()
        if cookie or row.rule.page:
            csrf_value = secrets.token_urlsafe(8)
            headers["Cookie"] = f"ty_session={token}; ty_csrf={csrf_value}"
            if csrf and method != "GET":
                headers["X-CSRF-Token"] = csrf_value
        else:
            headers["Authorization"] = f"Bearer {token}"
    world.actor = actor
    url, kwargs = row.build(world)
    before = fingerprint()
    client.cookies.clear()
    if kwargs.pop(FIRST_EVENT, False):
        with client.stream(method, url, headers=headers, follow_redirects=False) as response:
            if response.status_code == 200:
                next(line for line in response.iter_lines() if line.startswith("data:"))
            else:
                response.read()
    else:
        response = client.request(method, url, headers=headers, follow_redirects=False, **kwargs)
    client.cookies.clear()
    return response, fingerprint() != before


@pytest.mark.parametrize("key", sorted(MATRIX), ids=lambda k: f"{k[0]} {k[1]}")
def test_route_authorization(client, world: World, key: tuple[str, str]) -> None:
    method, _ = key
    row = MATRIX[key]
    write = method != "GET"
    actors: dict[str, Actor | None] = {
        "anonymous": None,
        "viewer": world.viewer,
        "owner": world.owner,
        "other": world.other,
        "admin": world.admin,
    }
    for name in ACTORS:
        response, changed = send(client, method, row, world, actors[name])
        want = row.rule.status(name, row.ok)
        assert response.status_code == want, (name, response.status_code, response.text[:300])
        refused = row.rule.refuses(name)
        if refused and row.rule.page and want == 303:
            assert response.headers["location"].startswith("/login?next=/"), name
        elif refused:
            assert response.headers["content-type"].startswith(("application/json", "text/html"))
            if response.headers["content-type"].startswith("application/json"):
                assert isinstance(response.json()["detail"], str) and response.json()["detail"]
        if write and row.rule is not PUBLIC:
            assert changed == (not refused), f"{name}: database changed={changed}"
        if name == "other" and row.other_sees is not None:
            assert row.other_sees(world, response), f"{key}: wrong for another member"


WRITES_WITH_COOKIE = sorted(k for k, r in MATRIX.items() if k[0] != "GET" and r.rule is not PUBLIC)


def test_the_csrf_check_covers_every_authenticated_write() -> None:
    assert len(WRITES_WITH_COOKIE) >= 7, WRITES_WITH_COOKIE


@pytest.mark.parametrize("key", WRITES_WITH_COOKIE, ids=lambda k: f"{k[0]} {k[1]}")
def test_cookie_write_needs_the_csrf_header(client, world: World, key: tuple[str, str]) -> None:
    method, _ = key
    row = MATRIX[key]
    actor = world.owner if not row.rule.refuses("owner") else world.admin
    response, changed = send(client, method, row, world, actor, cookie=True, csrf=False)
    assert response.status_code == 403, response.text
    if response.headers["content-type"].startswith("text/html"):  # a page's friendly 403
        assert "CSRF" in response.text
    else:
        assert "CSRF" in response.json()["detail"]
    assert not changed
    response, changed = send(client, method, row, world, actor, cookie=True, csrf=True)
    assert response.status_code == row.ok, response.text
    assert changed


def test_csrf_token_in_a_form_field_is_accepted(client, world: World) -> None:
    token = world.owner.token()
    client.cookies.clear()
    response = client.post(
        "/logout",
        data={"csrf_token": "abc"},
        headers={"Cookie": f"ty_session={token}; ty_csrf=abc"},
        follow_redirects=False,
    )
    client.cookies.clear()
    assert response.status_code == 303 and response.headers["location"] == "/login"
