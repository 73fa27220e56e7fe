"""MLflow inside a torchyard job: a tracking store that logs into the job's own run.

The launcher sets ``MLFLOW_TRACKING_URI=torchyard:job`` for every job (worker/launcher.py);
MLflow finds this store through the ``mlflow.tracking_store`` entry point ``torchyard``
(pyproject.toml). So ``mlflow.log_metric``, Lightning's ``MLFlowLogger`` and Hugging Face's
``MLflowCallback`` log into the job's run with nothing configured.

Why a store and not HTTP: a job may have no network at all (``network: none``, the sandbox),
and a job's token must not become a way to write other runs. The store writes only the run's
own spool, ``<run_dir>/metrics.jsonl``, the file the SDK's reporter writes and the worker's
forwarder already ingests (worker/forwarder.py, worker/spool_lines.py): metrics as
``metrics`` lines, params (and tags not under ``mlflow.``) as one ``params`` line, stored as
the run's reported params ``hparams.<name>`` (tags as ``hparams.tags.<name>``) like
TensorBoard hparams. Whatever the job writes there it could already write by hand: the store
gives the job no new power.

Every run the job's code creates (``mlflow.start_run()``, a logger's ``create_run``) is the
job's run: there is one experiment (id ``"0"``, named as asked) and one run (the job's id), so
nothing is scattered and no second run appears. Status changes, deletes and searches are the
job's lifecycle's, not the script's: ``update_run_info`` and ``delete_run`` change nothing.
Artifacts go to ``<run_dir>/work/mlflow-artifacts`` (the job's files).

Imports MLflow: only loaded when MLflow itself asks for the ``torchyard`` scheme.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mlflow.entities import (
    Experiment,
    LifecycleStage,
    Metric,
    Param,
    Run,
    RunData,
    RunInfo,
    RunStatus,
    RunTag,
    ViewType,
)
from mlflow.exceptions import MlflowException
from mlflow.store.entities.paged_list import PagedList
from mlflow.store.tracking.abstract_store import AbstractStore

from torchyard.contract import RUN_DIR_VAR, RUN_ID_VAR, RunPaths, spool_value

SCHEME = "torchyard"
TRACKING_URI = f"{SCHEME}:job"
EXPERIMENT_ID = "0"
ARTIFACT_DIR = "mlflow-artifacts"
# Tags MLflow itself sets (source file, git commit, user, run name): torchyard has its own.
SYSTEM_TAG_PREFIX = "mlflow."


class TorchyardStore(AbstractStore):
    """The job's run as MLflow's only run; see the module docstring."""

    def __init__(self, store_uri: str | None = None, artifact_uri: str | None = None) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        run_dir = os.environ.get(RUN_DIR_VAR)
        run_id = os.environ.get(RUN_ID_VAR)
        if not run_dir or not run_id:
            raise MlflowException(
                f"the {SCHEME}: tracking URI works only inside a torchyard job "
                f"({RUN_DIR_VAR} and {RUN_ID_VAR} are not set); outside one, set "
                "MLFLOW_TRACKING_URI to the torchyard server's URL (docs/mlflow.md)"
            )
        self._run_dir = Path(run_dir)
        self._run_id = run_id
        paths = RunPaths(self._run_dir)
        self._spool = paths.metrics
        self._artifacts = paths.work / ARTIFACT_DIR
        self._experiment_name = "Default"
        self._start = int(time.time() * 1000)
        # What this process logged, for get_run (a logger reads its params back rarely).
        self._params: dict[str, str] = {}
        self._tags: dict[str, str] = {}
        self._lock = threading.Lock()

    # -- the one experiment and the one run ------------------------------------------------

    def _experiment(self) -> Experiment:
        return Experiment(
            EXPERIMENT_ID, self._experiment_name, self._artifacts.as_uri(), LifecycleStage.ACTIVE
        )

    def search_experiments(
        self,
        view_type: int = ViewType.ACTIVE_ONLY,
        max_results: int | None = None,
        filter_string: str | None = None,
        order_by: list[str] | None = None,
        page_token: str | None = None,
        **_: Any,
    ) -> PagedList[Experiment]:
        return PagedList([self._experiment()], None)

    def create_experiment(self, name: str, artifact_location: Any = None, tags: Any = None) -> str:
        self._experiment_name = name
        return EXPERIMENT_ID

    def get_experiment(self, experiment_id: str) -> Experiment:
        return self._experiment()

    def get_experiment_by_name(self, experiment_name: str) -> Experiment:
        # Every name is the job's experiment: a logger asking for its own finds it.
        self._experiment_name = experiment_name
        return self._experiment()

    def delete_experiment(self, experiment_id: str) -> None:
        return None

    def restore_experiment(self, experiment_id: str) -> None:
        return None

    def rename_experiment(self, experiment_id: str, new_name: str) -> None:
        return None

    def set_experiment_tag(self, experiment_id: str, tag: Any) -> None:
        return None

    def _info(self) -> RunInfo:
        return RunInfo(
            run_id=self._run_id,
            experiment_id=EXPERIMENT_ID,
            user_id="",
            status=RunStatus.to_string(RunStatus.RUNNING),
            start_time=self._start,
            end_time=None,
            lifecycle_stage=LifecycleStage.ACTIVE,
            artifact_uri=self._artifacts.as_uri(),
            run_name=f"run {self._run_id}",
        )

    def get_run(self, run_id: str) -> Run:
        with self._lock:
            params = [Param(k, v) for k, v in self._params.items()]
            tags = [RunTag(k, v) for k, v in self._tags.items()]
        return Run(self._info(), RunData(metrics=[], params=params, tags=tags))

    def create_run(
        self,
        experiment_id: str,
        user_id: str,
        start_time: int,
        tags: Sequence[RunTag],
        run_name: str | None,
    ) -> Run:
        """The job's run, whoever asks: a second start_run in the job is the same run."""
        self.log_batch(self._run_id, [], [], list(tags or []))
        return self.get_run(self._run_id)

    def update_run_info(
        self, run_id: str, run_status: Any, end_time: int | None, run_name: str | None
    ) -> RunInfo:
        return self._info()  # the job's exit decides its status

    def delete_run(self, run_id: str) -> None:
        return None

    def restore_run(self, run_id: str) -> None:
        return None

    def get_metric_history(
        self, run_id: str, metric_key: str, max_results: int | None = None, page_token: Any = None
    ) -> PagedList[Metric]:
        return PagedList([], None)

    def _search_runs(
        self,
        experiment_ids: Any,
        filter_string: Any,
        run_view_type: Any,
        max_results: Any,
        order_by: Any,
        page_token: Any,
    ) -> tuple[list[Run], None]:
        return [self.get_run(self._run_id)], None

    def log_inputs(self, run_id: str, datasets: Any = None, models: Any = None) -> None:
        return None

    def log_outputs(self, run_id: str, models: Any) -> None:
        return None

    # -- the writes: lines of the run's spool ----------------------------------------------

    def log_batch(
        self,
        run_id: str,
        metrics: Sequence[Metric],
        params: Sequence[Param],
        tags: Sequence[RunTag],
    ) -> None:
        """Appends the batch to the spool with one write (O_APPEND: lines from other writers,
        the SDK's reporter or another rank, never interleave within a line)."""
        by_step: dict[int, dict[str, float | str | None]] = defaultdict(dict)
        stamps: dict[int, float] = {}
        for metric in metrics:
            by_step[int(metric.step)][metric.key] = spool_value(float(metric.value))
            stamps[int(metric.step)] = metric.timestamp / 1000
        reported = {p.key: str(p.value) for p in params}
        user_tags = {t.key: str(t.value) for t in tags if not t.key.startswith(SYSTEM_TAG_PREFIX)}
        with self._lock:
            self._params.update(reported)
            self._tags.update({t.key: str(t.value) for t in tags})
        lines = [
            {"type": "metrics", "step": step, "time": stamps[step], "values": values}
            for step, values in by_step.items()
        ]
        values = {**reported, **{f"tags.{k}": v for k, v in user_tags.items()}}
        if values:
            lines.append({"type": "params", "values": values})
        if lines:
            self._append("".join(json.dumps(line) + "\n" for line in lines))

    def _append(self, text: str) -> None:
        fd = os.open(self._spool, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            data = memoryview(text.encode("utf-8"))
            while data:
                data = data[os.write(fd, data) :]
        finally:
            os.close(fd)
