"""The one place that decides who may see and act on an experiment, a run or a saved view.

Every signed-in user READS every experiment and run on the box (the team sees each other's
work). Writes (cancel, resume, edit, delete) are the owner's or an admin's, and a viewer never
writes: `User.may_write`. Launching a run is any member's in any experiment (the run is the
launcher's, so its later writes are theirs): `LaunchExperiment`. Every route that takes an
id depends on `get_owned_experiment` / `get_owned_run`, which tell a read from a write by the
request's method, so the 404/403 rules are not pasted into handlers. Pages call them with
`write=False` and ask `may_write` only to decide which buttons to show. A saved view is the
exception to "everyone reads": a private one is its owner's alone (`find_view`).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.orm import Session

from app.auth.deps import SAFE_METHODS, CurrentUser
from app.auth.models import User
from app.db import MAX_ID, SessionDep
from app.errors import Forbidden, NotFound
from app.experiments.models import Experiment
from app.runs.models import Run
from app.saved_views.models import SavedView


def _viewer_refused(user: User) -> Forbidden:
    return Forbidden(f"your role is {user.role}: viewers may read but not change anything")


def check_write(user: User, owner_id: int, what: str) -> None:
    """403 unless `user` may change something of `owner_id`'s."""
    if user.may_write(owner_id):
        return
    if not user.can_write:
        raise _viewer_refused(user)
    raise Forbidden(f"this {what} belongs to another user: you may read it but not change it")


def _is_write(request: Request) -> bool:
    return request.method not in SAFE_METHODS


def find_experiment(experiment_id: int, session: Session, user: User, *, write: bool) -> Experiment:
    experiment = session.get(Experiment, experiment_id) if 0 < experiment_id <= MAX_ID else None
    if experiment is None:
        raise NotFound.of("experiment", experiment_id)
    if write:
        check_write(user, experiment.owner_id, "experiment")
    return experiment


def find_run(run_id: int, session: Session, user: User, *, write: bool) -> Run:
    run = session.get(Run, run_id) if 0 < run_id <= MAX_ID else None
    if run is None:
        raise NotFound.of("run", run_id)
    if write:
        check_write(user, run.owner_id, "run")
    return run


def find_session(run_id: int, session: Session, user: User) -> Run:
    """A session's JupyterLab (app/sessions/proxy.py) is its owner's and the admins' alone: it
    runs code as the session, so unlike a run it is not the team's to read (403 for another
    member, a viewer included; 404 when no such session)."""
    run = session.get(Run, run_id) if 0 < run_id <= MAX_ID else None
    if run is None or not isinstance(run.config, dict) or "session" not in run.config:
        raise NotFound.of("session", run_id)
    if not user.may_write(run.owner_id):
        raise Forbidden(f"session {run_id} belongs to another user: only they and admins open it")
    return run


def find_view(view_id: int, session: Session, user: User, *, write: bool) -> SavedView:
    """A saved view the caller may open: their own or a shared one (a teammate's private view
    is 404, as if it did not exist); `write` (delete): the owner's or an admin's, else 403."""
    view = session.get(SavedView, view_id) if 0 < view_id <= MAX_ID else None
    if view is None or (not view.shared and view.owner_id != user.id):
        raise NotFound.of("view", view_id)
    if write:
        check_write(user, view.owner_id, "view")
    return view


def get_owned_experiment(
    experiment_id: int, request: Request, session: SessionDep, user: CurrentUser
) -> Experiment:
    return find_experiment(experiment_id, session, user, write=_is_write(request))


def get_owned_run(run_id: int, request: Request, session: SessionDep, user: CurrentUser) -> Run:
    return find_run(run_id, session, user, write=_is_write(request))


def get_writer(user: CurrentUser) -> User:
    """A user who may create things (experiments, runs of their own): not a viewer."""
    if not user.can_write:
        raise _viewer_refused(user)
    return user


def get_owned_view(
    view_id: int, request: Request, session: SessionDep, user: CurrentUser
) -> SavedView:
    return find_view(view_id, session, user, write=_is_write(request))


OwnedExperiment = Annotated[Experiment, Depends(get_owned_experiment)]
OwnedRun = Annotated[Run, Depends(get_owned_run)]
OwnedView = Annotated[SavedView, Depends(get_owned_view)]
Writer = Annotated[User, Depends(get_writer)]


def get_launch_experiment(experiment_id: int, session: SessionDep, user: Writer) -> Experiment:
    """The experiment a member launches a run of: anyone's (a teammate's too, without cloning
    it), 404 when there is none; viewers never launch (403)."""
    return find_experiment(experiment_id, session, user, write=False)


LaunchExperiment = Annotated[Experiment, Depends(get_launch_experiment)]
