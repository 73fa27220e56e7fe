"""MLflow's operations on torchyard's experiments and runs. Functions take the caller's
session and flush, never commit (the request dependency commits).

MLflow experiments are torchyard experiments (an experiment MLflow creates has an empty launch
config: its runs come from outside; launching a job from it asks for a config as usual). MLflow's
default experiment ``"0"`` is the experiment named "Default", made by the first run logged into
it. A run created here is a torchyard run without a job (app.runs.state.lifecycle.open_external):
its client sets its status; everyone reads it, its owner (or an admin) writes it.
"""

from __future__ import annotations

import base64
import binascii
from datetime import datetime

from sqlalchemy import ColumnElement, select
from sqlalchemy.orm import Session

from app.auth.models import User
from app.experiments import service as experiments_service
from app.experiments.models import Experiment
from app.filter_grammar import TOKEN_REASONS, GrammarError
from app.mlflow import experiments, reads, search, writes
from app.mlflow.errors import (
    INVALID_STATE,
    RESOURCE_ALREADY_EXISTS,
    MlflowError,
    denied,
    invalid,
    missing,
)
from app.mlflow.schemas import CreateRun, UpdateRun, parse_id, status_of
from app.runs import service as runs_service
from app.runs.models import Run, RunStatus
from app.runs.state import lifecycle
from app.timeutil import utcnow

DEFAULT_EXPERIMENT = experiments.DEFAULT_EXPERIMENT
ORIGIN = "mlflow"
MAX_SEARCH_RESULTS = 50_000


# --- experiments ---------------------------------------------------------------------------


def experiment_by_name(session: Session, name: str) -> Experiment | None:
    return session.scalar(
        select(Experiment).where(Experiment.name == name).order_by(Experiment.id).limit(1)
    )


def get_experiment(session: Session, experiment_id: str) -> Experiment:
    if experiment_id == "0":
        found = experiment_by_name(session, DEFAULT_EXPERIMENT)
    else:
        found = session.get(Experiment, parse_id(experiment_id, "experiment id"))
    if found is None:
        raise missing(f"Experiment with id '{experiment_id}'")
    return found


def refuse_unless_writer(user: User, owner_id: int, what: str, verb: str) -> None:
    """PERMISSION_DENIED unless `user` may write what `owner_id` owns (its owner, an admin);
    `verb` says what writing it is ("change", "log into")."""
    if not user.may_write(owner_id):
        raise denied(
            f"{what} belongs to another user: you may read it but not {verb} it"
            if user.can_write
            else f"your role is {user.role}: viewers may read but not {verb.split()[0]}"
        )


def writable_experiment(session: Session, user: User, experiment_id: str) -> Experiment:
    experiment = get_experiment(session, experiment_id)
    refuse_unless_writer(user, experiment.owner_id, f"experiment {experiment.id}", "change")
    return experiment


def create_experiment(session: Session, user: User, name: str) -> Experiment:
    name = name.strip()
    if not name or len(name) > 200:
        raise invalid("Experiment name must be 1-200 characters")
    if experiment_by_name(session, name) is not None:
        raise MlflowError(RESOURCE_ALREADY_EXISTS, f"Experiment '{name}' already exists.")
    return experiments_service.add_experiment(session, owner_id=user.id, name=name, config={})


def _experiment_for_run(session: Session, user: User, experiment_id: str) -> Experiment:
    if experiment_id in ("", "0"):
        found = experiment_by_name(session, DEFAULT_EXPERIMENT)
        return found or create_experiment(session, user, DEFAULT_EXPERIMENT)
    return get_experiment(session, experiment_id)


def page_size(max_results: int) -> int:
    """MLflow's bounds on a search's max_results, with its words."""
    if max_results < 1:
        raise invalid(
            f"Invalid value {max_results} for parameter 'max_results' supplied. "
            "It must be a positive integer"
        )
    if max_results > MAX_SEARCH_RESULTS:
        raise invalid(
            f"Invalid value {max_results} for parameter 'max_results' supplied. "
            f"It must be at most {MAX_SEARCH_RESULTS}"
        )
    return max_results


def page_offset(token: str | None) -> int:
    if not token:
        return 0
    try:
        return int(base64.urlsafe_b64decode(token.encode()).decode())
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise invalid(f"Invalid page token {token[:40]!r}") from None


def page_token(offset: int) -> str:
    return base64.urlsafe_b64encode(str(offset).encode()).decode()


def search_experiments(
    session: Session,
    *,
    name_filter: str | None,
    max_results: int,
    token: str | None,
    view: str = experiments.ACTIVE_ONLY,
) -> tuple[list[Experiment], str | None]:
    stmt = select(Experiment).order_by(Experiment.id.desc())
    shown = experiments.view_filter(view)
    if shown is not None:
        stmt = stmt.where(shown)
    if name_filter:
        stmt = stmt.where(experiment_name_filter(name_filter))
    offset = page_offset(token)
    limit = page_size(max_results)
    found = list(session.scalars(stmt.offset(offset).limit(limit + 1)))
    more = len(found) > limit
    return found[:limit], page_token(offset + limit) if more else None


def experiment_name_filter(text: str) -> ColumnElement[bool]:
    """``name = 'x'``, ``name != 'x'``, ``name LIKE 'x%'``, ``name ILIKE ...`` (what clients
    send), read by MLflow's grammar (app.mlflow.search): text it cannot tokenize is refused as
    a filter_string is; anything else but one such condition is unsupported here."""
    unsupported = invalid(f"Unsupported experiment filter {text!r}: name = / LIKE / ILIKE 'text'")
    try:
        found = search.parse_conditions(text)
    except GrammarError as exc:
        if exc.reason in TOKEN_REASONS:
            raise search.refusal(exc, text) from None
        raise unsupported from None
    if len(found) != 1:
        raise unsupported
    (condition,) = found
    value = condition.values[0]
    listed = condition.op in search.GRAMMAR.list_ops
    if search.parse_name(condition.key).key != "name" or listed or not value.quoted:
        raise unsupported
    return search.text_compare(Experiment.name, condition.op, value.text)


# --- runs ----------------------------------------------------------------------------------


def get_run(session: Session, run_id: str) -> Run:
    """The run, or MLflow's RESOURCE_DOES_NOT_EXIST for any id that names none (a run id that
    is not ours at all, an MLflow uuid, is unknown, not invalid)."""
    if not run_id:
        raise invalid("Missing value for required parameter 'run_id'.")
    known = run_id.isdigit() and len(run_id) <= 10 and int(run_id) <= 2**31 - 1
    run = session.get(Run, int(run_id)) if known else None
    if run is None:
        raise missing(f"Run with id={run_id}")
    return run


def writable_run(session: Session, user: User, run_id: str) -> Run:
    run = get_run(session, run_id)
    refuse_unless_writer(user, run.owner_id, f"run {run.id}", "log into")
    return run


def create_run(session: Session, user: User, body: CreateRun) -> Run:
    experiment = _experiment_for_run(session, user, body.experiment_id)
    started: datetime = (
        datetime.fromtimestamp(body.start_time / 1000, utcnow().tzinfo)
        if body.start_time
        else utcnow()
    )
    name = body.run_name or next((t.value for t in body.tags if t.key == reads.RUN_NAME_TAG), None)
    run = lifecycle.open_external(
        session,
        experiment_id=experiment.id,
        owner_id=user.id,
        origin=ORIGIN,
        name=(name or "")[:200] or None,
        started_at=started,
    )
    writes.check_batch(0, 0, len(body.tags))
    # the body's user_id is ignored: the client sends its mlflow.user tag's value there, or
    # "unknown" (the tag, when sent, is kept: MLflow's user_id, app/mlflow/reads.py)
    writes.set_tags(session, run, [t for t in body.tags if t.key != reads.RUN_NAME_TAG])
    return run


def update_run(session: Session, run: Run, body: UpdateRun) -> None:
    if body.run_name:
        runs_service.set_name(session, run=run, name=body.run_name[:200])
    if body.status is None:
        session.flush()
        return
    wanted = status_of(body.status)
    if wanted == run.status:
        return
    if run.origin is None:
        raise MlflowError(
            INVALID_STATE, f"run {run.id} is a torchyard job: its status is its worker's"
        )
    ended = datetime.fromtimestamp(body.end_time / 1000, utcnow().tzinfo) if body.end_time else None
    if wanted.finished:
        took = lifecycle.end_external(
            session, run_id=run.id, status=wanted, finished_at=ended or utcnow()
        )
    elif wanted == RunStatus.running:
        took = lifecycle.reopen_external(session, run_id=run.id, finished=run.status)
    else:
        raise invalid(f"a run logged from outside cannot become {body.status}")
    if not took:
        raise MlflowError(INVALID_STATE, f"run {run.id} changed meanwhile: get it and try again")
    session.refresh(run)
