"""MLflow's tracking REST API under /api/2.0/mlflow/ (service.proto's paths and methods), so
the ``mlflow`` client, Lightning's MLFlowLogger and Hugging Face's MLflowCallback log into
torchyard with ``MLFLOW_TRACKING_URI`` and a torchyard token. Thin: the work is in
app.mlflow.service / writes / reads / search; errors in MLflow's shape (app.mlflow.errors).

Left out of the OpenAPI document: MLflow documents this API, and its messages are MLflow's.
"""

from __future__ import annotations

from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Body, Request, Response
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from app.db import SessionDep, session_scope
from app.mlflow import artifacts, experiments, history, reads, schemas, search, service, writes
from app.mlflow.auth import MlflowUser, MlflowWriter, mlflow_user, mlflow_writer
from app.mlflow.errors import ENDPOINT_NOT_FOUND, MlflowError, MlflowRoute, invalid, missing
from app.mlflow.schemas import (
    CreateExperiment,
    CreateRun,
    DeleteExperimentTag,
    DeleteTag,
    ExperimentRef,
    LogBatch,
    LogInputs,
    LogMetric,
    LogParam,
    RunRef,
    SearchExperiments,
    SearchRuns,
    SetExperimentTag,
    SetTag,
    UpdateExperiment,
    UpdateRun,
    metric_points,
    parse_id,
    validated,
)
from app.runs import deletion
from app.runs.models import Run, RunStatus
from app.runs.state import lifecycle
from app.timeutil import utcnow

router = APIRouter(prefix="/api/2.0/mlflow", route_class=MlflowRoute, include_in_schema=False)
Json = dict[str, Any]


def _json(out: Json) -> Response:
    """The body serialized once with orjson: a page of 1,000 runs spent most of its time in
    FastAPI's generic encoding of the returned dict (get-history's body is the database's:
    app/mlflow/history.py)."""
    return Response(orjson.dumps(out), media_type="application/json")


def _query(request: Request, *names: str) -> str:
    for name in names:
        value = request.query_params.get(name)
        if value:
            return value
    raise invalid(f"Missing value for required parameter '{names[0]}'")


# --- experiments ---------------------------------------------------------------------------


@router.get("/experiments/get-by-name")
def get_experiment_by_name(request: Request, session: SessionDep, _user: MlflowUser) -> Json:
    name = _query(request, "experiment_name")
    found = service.experiment_by_name(session, name)
    if found is None and name == service.DEFAULT_EXPERIMENT:
        return {"experiment": experiments.unmade_default()}
    if found is None:
        raise missing(f"Experiment '{name}'")
    return {"experiment": experiments.experiments_json(session, [found])[0]}


@router.post("/experiments/create")
def create_experiment(body: CreateExperiment, session: SessionDep, user: MlflowWriter) -> Json:
    experiment = service.create_experiment(session, user, body.name)
    return {"experiment_id": str(experiment.id)}


@router.get("/experiments/get")
def get_experiment(request: Request, session: SessionDep, _user: MlflowUser) -> Json:
    experiment_id = _query(request, "experiment_id")
    if (
        experiment_id == "0"
        and service.experiment_by_name(session, service.DEFAULT_EXPERIMENT) is None
    ):
        return {"experiment": experiments.unmade_default()}
    experiment = service.get_experiment(session, experiment_id)
    return {"experiment": experiments.experiments_json(session, [experiment])[0]}


@router.post("/experiments/search")
def search_experiments(body: SearchExperiments, session: SessionDep, _user: MlflowUser) -> Json:
    found, token = service.search_experiments(
        session,
        name_filter=body.filter,
        max_results=body.max_results,
        token=body.page_token,
        view=experiments.view_type(body.view_type),
    )
    out: Json = {"experiments": experiments.experiments_json(session, found)}
    if token:
        out["next_page_token"] = token
    return out


@router.post("/experiments/delete")
def delete_experiment(body: ExperimentRef, session: SessionDep, user: MlflowWriter) -> Json:
    """MLflow's soft delete: marked deleted (hidden from active searches) until restored;
    torchyard's DELETE /api/experiments/{id} deletes it for good."""
    experiments.mark_deleted(
        session, service.writable_experiment(session, user, body.experiment_id)
    )
    return {}


@router.post("/experiments/restore")
def restore_experiment(body: ExperimentRef, session: SessionDep, user: MlflowWriter) -> Json:
    experiments.restore(session, service.writable_experiment(session, user, body.experiment_id))
    return {}


@router.post("/experiments/update")
def update_experiment(body: UpdateExperiment, session: SessionDep, user: MlflowWriter) -> Json:
    experiment = service.writable_experiment(session, user, body.experiment_id)
    experiments.rename(session, experiment, body.new_name)
    return {}


@router.post("/experiments/set-experiment-tag")
def set_experiment_tag(body: SetExperimentTag, session: SessionDep, user: MlflowWriter) -> Json:
    experiment = service.writable_experiment(session, user, body.experiment_id)
    experiments.set_tag(session, experiment, body.key, body.value)
    return {}


@router.post("/experiments/delete-experiment-tag")
def delete_experiment_tag(
    body: DeleteExperimentTag, session: SessionDep, user: MlflowWriter
) -> Json:
    experiment = service.writable_experiment(session, user, body.experiment_id)
    if not experiments.delete_tag(session, experiment, body.key):
        raise missing(f"No tag with name: {body.key} in experiment with id {experiment.id}")
    return {}


# --- runs ----------------------------------------------------------------------------------


def _one_run(session: SessionDep, run: Run) -> Json:
    return {"run": reads.runs_json(session, [run])[0]}


@router.post("/runs/create")
def create_run(body: CreateRun, session: SessionDep, user: MlflowWriter) -> Json:
    return _one_run(session, service.create_run(session, user, body))


@router.get("/runs/get")
def get_run(request: Request, session: SessionDep, _user: MlflowUser) -> Json:
    return _one_run(session, service.get_run(session, _query(request, "run_id", "run_uuid")))


@router.post("/runs/update")
def update_run(body: UpdateRun, session: SessionDep, user: MlflowWriter) -> Json:
    run = service.writable_run(session, user, body.ref)
    service.update_run(session, run, body)
    return {"run_info": reads.runs_json(session, [run])[0]["info"]}


@router.post("/runs/delete")
def delete_run(body: RunRef, session: SessionDep, user: MlflowWriter) -> Json:
    """A run logged from outside that still runs is ended (KILLED) first; a job must have
    ended (cancel it first), as for DELETE /api/runs/{id}."""
    run = service.writable_run(session, user, body.ref)
    if run.origin is not None and run.status == RunStatus.running:
        lifecycle.end_external(
            session, run_id=run.id, status=RunStatus.cancelled, finished_at=utcnow()
        )
    deletion.refuse_if_busy(session, [run])
    run_id = run.id
    session.commit()  # the deletion's own short transactions write from here on
    deletion.delete_runs([run_id])
    return {}


@router.post("/runs/search")
def search_runs(body: SearchRuns, session: SessionDep, _user: MlflowUser) -> Response:
    ids = [parse_id(e, "experiment id") for e in body.experiment_ids if e != "0"]
    if "0" in body.experiment_ids:
        default = service.experiment_by_name(session, service.DEFAULT_EXPERIMENT)
        ids += [default.id] if default is not None else []
    stmt = search.search_statement(ids, body.filter, body.order_by)
    offset = service.page_offset(body.page_token)
    limit = service.page_size(body.max_results)
    runs = session.execute(stmt.offset(offset).limit(limit + 1)).all()
    out: Json = {"runs": reads.runs_json(session, runs[:limit])}
    if len(runs) > limit:
        out["next_page_token"] = service.page_token(offset + limit)
    return _json(out)


@router.post("/runs/log-batch")
async def log_batch(request: Request, body: Annotated[Any, Body()] = None) -> Response:
    """The hot route of an MLflow client (a batch per step), in one worker-thread hop.

    Why not dependencies: each sync dependency (the session's enter and exit, the user, the
    writer check) and the endpoint was a hop of its own to the thread pool and back, most of
    the framework's share of a batch's CPU time (issue 29). The order of the answers is the
    dependencies' (a body that is not JSON, then who is asking, then the batch's shape), the
    session commits before the answer goes out (as ``SessionDep``), and errors come out in
    MLflow's shape through MlflowRoute as before."""
    await run_in_threadpool(_log_batch, request, body)
    return Response(b"{}", media_type="application/json")


def _log_batch(request: Request, body: Any) -> None:
    with session_scope() as session:
        user = mlflow_writer(mlflow_user(request, session))
        batch = validated(LogBatch, body)
        writes.check_batch(len(batch.metrics), len(batch.params), len(batch.tags))
        points = metric_points(batch.metrics)
        run = service.writable_run(session, user, batch.ref)
        writes.log_params(session, run, batch.params)
        writes.set_tags(session, run, batch.tags)
        writes.log_metrics(session, run, points)


@router.post("/runs/log-metric")
def log_metric(body: LogMetric, session: SessionDep, user: MlflowWriter) -> Json:
    writes.log_metrics(session, service.writable_run(session, user, body.ref), [body.point()])
    return {}


@router.post("/runs/log-parameter")
def log_param(body: LogParam, session: SessionDep, user: MlflowWriter) -> Json:
    writes.log_params(session, service.writable_run(session, user, body.ref), [body])
    return {}


@router.post("/runs/set-tag")
def set_tag(body: SetTag, session: SessionDep, user: MlflowWriter) -> Json:
    writes.set_tags(session, service.writable_run(session, user, body.ref), [body])
    return {}


@router.post("/runs/delete-tag")
def delete_tag(body: DeleteTag, session: SessionDep, user: MlflowWriter) -> Json:
    run = service.writable_run(session, user, body.ref)
    if not writes.delete_tag(session, run, body.key):
        raise missing(f"No tag with name: {body.key} in run with id {run.id}")
    return {}


@router.post("/runs/log-inputs")
def log_inputs(body: LogInputs, session: SessionDep, user: MlflowWriter) -> Json:
    """Accepted and checked, not kept: torchyard has no dataset records (docs/mlflow.md)."""
    service.writable_run(session, user, body.ref)
    return {}


@router.post("/logged-models/search")
def search_logged_models(_user: MlflowUser) -> Json:
    """None: torchyard keeps no MLflow logged models (a run's model files are its artifacts).
    The client asks before it lists a run's artifacts."""
    return {"models": []}


@router.get("/metrics/get-history")
def get_metric_history(request: Request, session: SessionDep, _user: MlflowUser) -> Response:
    run = service.get_run(session, _query(request, "run_id", "run_uuid"))
    raw_max = request.query_params.get("max_results")
    if raw_max is not None and not raw_max.isdigit():
        raise invalid(f"max_results must be a positive integer, not {raw_max!r}")
    body = history.history_body(
        session,
        run,
        _query(request, "metric_key"),
        max_results=int(raw_max) if raw_max else None,
        token=request.query_params.get("page_token"),
    )
    if isinstance(body, bytes):
        return Response(body, media_type="application/json")
    return StreamingResponse(body, media_type="application/json")


@router.get("/artifacts/list")
def list_run_artifacts(request: Request, session: SessionDep, _user: MlflowUser) -> Json:
    """The tracking API's own listing (MlflowClient.list_artifacts of a run whose artifacts
    are not proxied): paths relative to the run's artifact root."""
    run = service.get_run(session, _query(request, "run_id", "run_uuid"))
    relative = (request.query_params.get("path") or "").strip("/")
    files = artifacts.listing(run.id, relative)
    for entry in files:
        entry["path"] = f"{relative}/{entry['path']}" if relative else entry["path"]
    return {"root_uri": schemas.artifact_uri(run.experiment_id, run.id), "files": files}


# Last: every other path under the prefix is MLflow's ENDPOINT_NOT_FOUND, not FastAPI's 404.
@router.api_route("/{path:path}", methods=["GET", "POST", "PUT", "PATCH", "DELETE"])
def endpoint_not_found(path: str, request: Request) -> Json:
    raise MlflowError(
        ENDPOINT_NOT_FOUND,
        f"No API endpoint found for {request.method} /api/2.0/mlflow/{path}: torchyard serves "
        "MLflow's tracking API without the model registry, traces and logged models "
        "(docs/mlflow.md)",
    )
