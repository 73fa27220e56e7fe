"""Where an import writes: torchyard's MLflow tracking API (torchyard/cli/endpoints.py, MLFLOW),
the public API every MLflow client already writes through. Why not the app's services: the
command is a client (it runs on the laptop where the `mlruns` folder or W&B offline runs lie,
against the team box), and it is held to the same rules as any client: who may write, MLflow's
limits, quotas; the points land in the same store as a job's (live curves, summaries, filters).

Each imported run carries its origin in tags: ``torchyard.import.source`` (the source: a
server URI, a folder's absolute path), ``torchyard.import.run_id`` (the run's id there) and
``torchyard.import.kind``; the run's tags show ``imported=<kind>``. Idempotence keys on
(source, run id): a run already imported is skipped. ``torchyard.import.complete`` is set last,
so a run whose import was cut short (Ctrl-C, a lost connection) is deleted and imported again
on the next try instead of counting as done.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from torchyard.cli import endpoints as ep
from torchyard.cli.client import Api, ApiError
from torchyard.cli.importers.source import FINISHED, RUNNING, Point, SourceRun

SOURCE_TAG = "torchyard.import.source"
RUN_ID_TAG = "torchyard.import.run_id"
KIND_TAG = "torchyard.import.kind"
COMPLETE_TAG = "torchyard.import.complete"
ORIGIN_TAG = "imported"  # key=value: shown among the run's tags as imported=<kind>
RUN_NAME_TAG = "mlflow.runName"
# MLflow's limits per log-batch request (app/mlflow/writes.py keeps them)
METRICS_PER_BATCH = 1000
PARAMS_TAGS_PER_BATCH = 100
SEARCH_PAGE = 1000
_OURS = (SOURCE_TAG, RUN_ID_TAG, KIND_TAG, COMPLETE_TAG)


@dataclass
class Written:
    points: int = 0
    params: int = 0
    tags: int = 0
    files: int = 0


@dataclass
class Existing:
    """The runs of the target experiment imported from this source before: complete ones by
    source run id, and the ids of torchyard runs whose import was cut short."""

    complete: set[str] = field(default_factory=set)
    partial: dict[str, list[str]] = field(default_factory=dict)


def _value(value: float) -> float | str:
    """A float as MLflow's JSON writes it: NaN and the infinities as strings."""
    if math.isfinite(value):
        return value
    return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")


class Sink:
    def __init__(self, api: Api, *, source: str, kind: str) -> None:
        self.api = api
        self.source = source
        self.kind = kind
        self._experiments: dict[str, str] = {}
        self._existing: dict[str, Existing] = {}

    def experiment_id(self, name: str) -> str:
        """The experiment named ``name``, made when there is none."""
        if name not in self._experiments:
            try:
                found = self.api.json(
                    ep.MLFLOW_EXPERIMENT_BY_NAME(), params={"experiment_name": name}
                )
                self._experiments[name] = str(found["experiment"]["experiment_id"])
            except ApiError as e:
                if e.status != 404:
                    raise
                made = self.api.json(ep.MLFLOW_EXPERIMENT_CREATE(), json={"name": name})
                self._experiments[name] = str(made["experiment_id"])
        return self._experiments[name]

    def existing(self, experiment_id: str) -> Existing:
        if experiment_id not in self._existing:
            self._existing[experiment_id] = self._read_existing(experiment_id)
        return self._existing[experiment_id]

    def _read_existing(self, experiment_id: str) -> Existing:
        found = Existing()
        for run in self._runs(experiment_id):
            tags = {t["key"]: t.get("value", "") for t in run.get("data", {}).get("tags", [])}
            if tags.get(SOURCE_TAG) != self.source or RUN_ID_TAG not in tags:
                continue
            if tags.get(COMPLETE_TAG) == "true":
                found.complete.add(tags[RUN_ID_TAG])
            else:
                found.partial.setdefault(tags[RUN_ID_TAG], []).append(run["info"]["run_id"])
        return found

    def _runs(self, experiment_id: str) -> Iterator[dict[str, Any]]:
        token: str | None = None
        while True:
            body: dict[str, Any] = {"experiment_ids": [experiment_id], "max_results": SEARCH_PAGE}
            if token:
                body["page_token"] = token
            page = self.api.json(ep.MLFLOW_RUNS_SEARCH(), json=body)
            yield from page.get("runs", [])
            token = page.get("next_page_token")
            if not token:
                return

    def write(self, run: SourceRun, experiment_id: str) -> Written:
        """One run, whole: created with its origin tags, then params, tags, points, files,
        its status and end time, and last the mark that it is complete."""
        for cut_short in self.existing(experiment_id).partial.pop(run.source_id, []):
            self.api.json(ep.MLFLOW_RUN_DELETE(), json={"run_id": cut_short})
        origin = {SOURCE_TAG: self.source, RUN_ID_TAG: run.source_id, KIND_TAG: self.kind}
        body: dict[str, Any] = {
            "experiment_id": experiment_id,
            "tags": [{"key": k, "value": v} for k, v in origin.items()],
        }
        if run.name:
            body["run_name"] = run.name
        if run.start_ms is not None:
            body["start_time"] = run.start_ms
        run_id = str(self.api.json(ep.MLFLOW_RUN_CREATE(), json=body)["run"]["info"]["run_id"])
        written = Written()
        tags = {k: v for k, v in run.tags.items() if k not in _OURS and k != RUN_NAME_TAG}
        tags[ORIGIN_TAG] = self.kind
        self._params_and_tags(run_id, run.params, tags)
        written.params, written.tags = len(run.params), len(tags)
        batch: list[dict[str, Any]] = []
        for key, points in run.series():
            for p in points:
                batch.append(self._metric(key, p))
                if len(batch) == METRICS_PER_BATCH:
                    self._log(run_id, metrics=batch)
                    written.points += len(batch)
                    batch = []
        if batch:
            self._log(run_id, metrics=batch)
            written.points += len(batch)
        for artifact in run.artifacts():
            local = artifact.open_path()
            if local is None:
                continue
            where = f"{experiment_id}/{run_id}/artifacts/{artifact.path}"
            with local.open("rb") as f:
                self.api.request(ep.MLFLOW_ARTIFACT_UPLOAD(path=where), content=f)
            written.files += 1
        if run.status != RUNNING:
            update: dict[str, Any] = {"run_id": run_id, "status": run.status or FINISHED}
            if run.end_ms is not None:
                update["end_time"] = run.end_ms
            self.api.json(ep.MLFLOW_RUN_UPDATE(), json=update)
        self._log(run_id, tags=[{"key": COMPLETE_TAG, "value": "true"}])
        return written

    @staticmethod
    def _metric(key: str, p: Point) -> dict[str, Any]:
        return {"key": key, "value": _value(p.value), "timestamp": p.timestamp_ms, "step": p.step}

    def _params_and_tags(self, run_id: str, params: dict[str, str], tags: dict[str, str]) -> None:
        p = [{"key": k, "value": v} for k, v in params.items()]
        t = [{"key": k, "value": v} for k, v in tags.items()]
        for i in range(0, max(len(p), len(t)), PARAMS_TAGS_PER_BATCH):
            chunk = slice(i, i + PARAMS_TAGS_PER_BATCH)
            self._log(run_id, params=p[chunk], tags=t[chunk])

    def _log(self, run_id: str, **batch: list[dict[str, Any]]) -> None:
        self.api.request(ep.MLFLOW_LOG_BATCH(), json={"run_id": run_id, **batch})
