"""An MLflow source read with MLflow's own client (the `import-mlflow` extra: mlflow-skinny):
a tracking server (``http(s)://...``, any MLflow 2.x/3.x), a local ``mlruns`` folder, or an
MLflow SQLite store (``sqlite:///...`` or a ``.db`` file). Every active experiment and run; per
run its params, tags, status and times, every point of every metric key (step, value, wall
time), and its artifacts.

What cannot be read is skipped and said: a run folder MLflow's file store cannot list (a
missing or broken ``meta.yaml``), a metric file with a broken line (the run is imported without
that key), an artifact that cannot be downloaded. A store that cannot be opened at all (not a
database, not an ``mlruns`` folder) is an error naming it, before anything is written.
"""

from __future__ import annotations

import functools
import os
import re
import tempfile
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from torchyard.cli.client import CliError
from torchyard.cli.importers.source import (
    RUNNING,
    Artifact,
    Point,
    Skipped,
    SourceRun,
)

EXTRA = "import-mlflow"
PAGE = 1000
_RUN_DIR = re.compile(r"^[0-9a-f]{32}$")
_STATUS = {"SCHEDULED": RUNNING}
_BAD_METRIC = re.compile(r"Metric '([^']+)' is malformed")


def tracking_uri(source: str) -> tuple[str, Path | None]:
    """The URI MLflow's client takes for ``source``, and the local folder or file it names
    (None for a server)."""
    if "://" in source or source.startswith(("file:", "sqlite:")):
        if source.startswith("file:"):
            return source, Path(source.removeprefix("file://").removeprefix("file:"))
        if source.startswith("sqlite:///"):
            return source, Path(source.removeprefix("sqlite:///"))
        return source, None
    path = Path(source).resolve()
    if not path.exists():
        raise CliError(f"{source}: no such folder or file (an mlruns folder, a .db or a URI)")
    if path.is_file():
        return f"sqlite:///{path}", path
    return path.as_uri(), path


class MlflowReader:
    kind = "mlflow"

    def __init__(self, source: str) -> None:
        try:
            import mlflow
            from mlflow.tracking import MlflowClient
        except ImportError:
            raise CliError(
                f"importing from MLflow needs its client: pip install 'torchyard[{EXTRA}]'"
            ) from None
        uri, self.local = tracking_uri(source)
        if uri.startswith("file:"):
            # MLflow 3 refuses its file store unless told (it is in maintenance): we only read
            os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"
        self.source = str(self.local) if self.local is not None else uri
        mlflow.set_tracking_uri(uri)  # mlflow-artifacts: URIs resolve against it
        try:
            self.client = MlflowClient(tracking_uri=uri)
            _ = self.client._tracking_client.store  # opens a database store: not one fails here
        except Exception as exc:
            raise CliError(
                f"{self.source}: cannot read it as an MLflow store: {_one_line(exc)}"
            ) from None
        self.skipped: list[Skipped] = []
        self._lock = threading.Lock()
        self._downloads = tempfile.TemporaryDirectory(prefix="torchyard-import-")

    def close(self) -> None:
        self._downloads.cleanup()

    def _skip(self, where: str, why: str) -> None:
        with self._lock:
            self.skipped.append(Skipped(where, why))

    def experiments(self) -> list[Any]:
        from mlflow.entities import ViewType

        found: list[Any] = []
        token: str | None = None
        try:
            while True:
                page = self.client.search_experiments(
                    view_type=ViewType.ACTIVE_ONLY, max_results=PAGE, page_token=token
                )
                found.extend(page)
                token = page.token
                if not token:
                    return found
        except Exception as exc:  # the store itself: not a database, a folder of something else
            where = str(self.local) if self.local is not None else self.source
            raise CliError(
                f"{where}: cannot read it as an MLflow store: {_one_line(exc)}"
            ) from None

    def runs(self) -> Iterator[SourceRun]:
        for experiment in self.experiments():
            try:
                listed = self._search(experiment.experiment_id)
            except Exception as exc:
                if self.local is None or not self.local.is_dir():
                    raise CliError(
                        f"{self.source}: cannot list the runs of experiment "
                        f"{experiment.name!r}: {_one_line(exc)}"
                    ) from None
                # an mlruns folder whose search fails on one run (a broken metric file): each
                # run folder read on its own, the broken ones named
                listed = self._run_by_run(experiment.experiment_id)
            for run in listed:
                yield self._run(experiment.name, run)
            self._unlisted_run_folders(experiment.experiment_id, {r.info.run_id for r in listed})

    def _search(self, experiment_id: str) -> list[Any]:
        from mlflow.entities import ViewType

        found: list[Any] = []
        token: str | None = None
        while True:
            page = self.client.search_runs(
                [experiment_id], run_view_type=ViewType.ACTIVE_ONLY, max_results=PAGE,
                page_token=token,
            )  # fmt: skip
            found.extend(page)
            token = page.token
            if not token:
                return found

    def _run_by_run(self, experiment_id: str) -> list[Any]:
        assert self.local is not None
        found = []
        for child in sorted((self.local / experiment_id).iterdir()):
            if not (child.is_dir() and _RUN_DIR.match(child.name)):
                continue
            try:
                run = self.client.get_run(child.name)
            except Exception as exc:
                bad = _BAD_METRIC.search(str(exc))
                where = child / "metrics" / bad.group(1) if bad else child / "meta.yaml"
                self._skip(str(where), f"run {child.name}: {_one_line(exc)}")
                continue
            if run.info.lifecycle_stage == "active":
                found.append(run)
        return found

    def _unlisted_run_folders(self, experiment_id: str, listed: set[str]) -> None:
        """A run folder of an ``mlruns`` store that MLflow did not list: MLflow passes over a
        run whose ``meta.yaml`` is missing or broken with only a log line; we name it."""
        if self.local is None or not self.local.is_dir():
            return
        folder = self.local / experiment_id
        if not folder.is_dir():
            return
        for child in sorted(folder.iterdir()):
            if child.is_dir() and _RUN_DIR.match(child.name) and child.name not in listed:
                meta = child / "meta.yaml"
                why = "a broken meta.yaml" if meta.exists() else "no meta.yaml"
                self._skip(str(meta), f"run {child.name} not readable by MLflow ({why})")

    def _run(self, experiment: str, run: Any) -> SourceRun:
        info, data = run.info, run.data
        run_id = info.run_id
        keys = sorted(data.metrics)
        return SourceRun(
            source_id=run_id,
            experiment=experiment,
            name=info.run_name or data.tags.get("mlflow.runName"),
            status=_STATUS.get(info.status, info.status),
            start_ms=info.start_time,
            end_ms=info.end_time,
            params=dict(data.params),
            tags=dict(data.tags),
            series=lambda: self._series(run, keys),
            artifacts=lambda: self._artifacts(run_id, ""),
        )

    def _series(self, run: Any, keys: list[str]) -> Iterator[tuple[str, list[Point]]]:
        for key in keys:
            try:
                history = self.client.get_metric_history(run.info.run_id, key)
            except Exception as exc:
                self._skip(self._metric_file(run, key), f"metric {key!r}: {_one_line(exc)}")
                continue
            yield key, [Point(m.step, m.value, m.timestamp) for m in history]

    def _metric_file(self, run: Any, key: str) -> str:
        if self.local is not None and self.local.is_dir():
            return str(self.local / run.info.experiment_id / run.info.run_id / "metrics" / key)
        return f"run {run.info.run_id}"

    def _artifacts(self, run_id: str, path: str) -> Iterator[Artifact]:
        try:
            listed = self.client.list_artifacts(run_id, path or None)
        except Exception as exc:
            self._skip(f"run {run_id} artifacts/{path}", _one_line(exc))
            return
        for item in listed:
            if item.is_dir:
                yield from self._artifacts(run_id, item.path)
            else:
                yield Artifact(
                    item.path, fetch=functools.partial(self._download, run_id, item.path)
                )

    def _download(self, run_id: str, path: str) -> Path | None:
        target = Path(self._downloads.name) / run_id
        target.mkdir(exist_ok=True)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return Path(self.client.download_artifacts(run_id, path, str(target)))
        except Exception as exc:
            self._skip(f"run {run_id} artifacts/{path}", _one_line(exc))
            return None


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__
