"""An Aim repository (the folder holding ``.aim``), read with Aim's own SDK (the `import-aim`
extra: ``aim.Repo`` and its read-only ``Run``). One run per run of the repo.

Taken: the run's params (``run["hparams"] = {...}`` and any other key, nested keys flattened to
dots: ``hparams.lr``; Aim's ``__system_params``, the environment variables and command line Aim
records, are left out), its name, experiment, tags (``aim.tag.<tag>=true``) and description;
every metric point with its step, value and wall time, each (name, context) as its own key:
``loss`` for an empty context, ``loss/subset=train`` for ``{"subset": "train"}`` (a context's
pairs sorted, joined with commas). A closed run is FINISHED at its end time; a run never closed
(the process died, or it is still running) is KILLED at its last point's time. Images, texts,
distributions, figures and audio are counted and said.

Why each run is read from its own chunk: Aim 3.17+ keeps each run's data in a per-run chunk
database and an index that only ``aim up`` builds (``RepoIndexManager``); a repo written by
scripts and never opened in Aim's UI has an empty index, so ``Repo.iter_runs`` there yields no
run. The reader puts Aim's own union container over the chunks (``RocksUnionContainer``, what
Aim itself reads a repo without an index through) in the repo's container pool, read only: the
repo is not written, not even its index.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from torchyard.cli.client import CliError
from torchyard.cli.importers.source import FINISHED, KILLED, Point, Skipped, SourceRun, flatten

EXTRA = "import-aim"
REPO_FOLDER = ".aim"
SYSTEM_PARAMS = "__system_params"
OTHER_SEQUENCES = ("images", "texts", "distributions", "figures", "audios")


def _run_hash(prefix: bytes) -> str:
    """The run of a union container's db prefix (``meta\\xfechunks\\xfe<hash>\\xfe``)."""
    return prefix.rstrip(b"\xfe").rsplit(b"\xfe", 1)[-1].decode()


def metric_key(name: str, context: dict[str, Any]) -> str:
    """A metric's name and Aim context as one torchyard key."""
    if not context:
        return name
    pairs = ",".join(
        f"{k}={v if isinstance(v, str) else json.dumps(v)}" for k, v in sorted(context.items())
    )
    return f"{name}/{pairs}"


class AimReader:
    kind = "aim"

    def __init__(self, source: str) -> None:
        try:
            import aim
            from aim.sdk.repo import ContainerConfig
            from aim.storage.union import RocksUnionContainer
        except ImportError:
            raise CliError(
                f"importing an Aim repository needs aim: pip install 'torchyard[{EXTRA}]'"
            ) from None
        root = Path(source).resolve()
        if root.name == REPO_FOLDER:
            root = root.parent
        if not (root / REPO_FOLDER).is_dir():
            raise CliError(f"{source}: not an Aim repository (no {REPO_FOLDER} folder in it)")
        self.root = root
        self.source = str(root)
        self.skipped: list[Skipped] = []
        self._lock = threading.Lock()
        try:
            self._repo = aim.Repo(str(root))
            meta = RocksUnionContainer(os.path.join(self._repo.path, "meta"), read_only=True)
            self._meta = meta  # the pool holds it weakly
            self._repo.container_pool[ContainerConfig("meta", None, True)] = meta
            list(self._repo.structured_db.runs())  # the runs' names, tags, experiments
            self._corrupt = {_run_hash(prefix) for prefix in meta.corrupted_dbs}
            self._hashes = sorted(self._repo.list_all_runs())
        except Exception as exc:
            raise CliError(
                f"{root / REPO_FOLDER}: not a readable Aim repository: {exc!r}"
            ) from None
        self._run_class = aim.Run

    def close(self) -> None:
        self._repo.close()

    def runs(self) -> Iterator[SourceRun]:
        for run_hash in self._hashes:
            if run_hash in self._corrupt:
                self.skipped.append(
                    Skipped(self._chunk(run_hash), "corrupt run database (RocksDB cannot open it)")
                )
                continue
            try:
                run = self._run(run_hash)
            except Exception as exc:  # a corrupt chunk, a run without its props
                self.skipped.append(Skipped(self._chunk(run_hash), f"not readable: {exc!r}"[:300]))
                continue
            yield run

    def _chunk(self, run_hash: str) -> str:
        return str(Path(self._repo.path) / "meta" / "chunks" / run_hash)

    def _run(self, run_hash: str) -> SourceRun:
        run = self._run_class(run_hash, repo=self._repo, read_only=True)
        try:
            values = run[...]
        except KeyError:  # a run with no params at all
            values = {}
        params = flatten({k: v for k, v in values.items() if k != SYSTEM_PARAMS})
        tags = {f"aim.tag.{tag}": "true" for tag in run.tags}
        if run.description:
            tags["aim.description"] = run.description
        for kind, infos in run.collect_sequence_info(OTHER_SEQUENCES, skip_last_value=True).items():
            if infos:
                names = ", ".join(sorted({metric_key(i["name"], i["context"]) for i in infos}))
                self.skipped.append(
                    Skipped(self._chunk(run_hash), f"{kind} ({names}): values not imported")
                )
        end = run.end_time
        last = None if end else (max((_last_ms(m) for m in run.metrics()), default=0) or None)
        return SourceRun(
            source_id=run_hash,
            experiment=run.experiment or self.root.name,
            name=run.name or run_hash,
            status=FINISHED if end else KILLED,
            start_ms=round(run.creation_time * 1000),
            end_ms=round(end * 1000) if end else last,
            params=params,
            tags=tags,
            series=lambda: self._series(run),
        )

    def _series(self, run: Any) -> Iterator[tuple[str, list[Point]]]:
        """A run's points, read when the run is written (by the import's worker threads): one
        run's in memory at a time per worker, not the whole repo's."""
        with self._lock:  # Aim's readers, one thread at a time
            series = {
                metric_key(metric.name, metric.context.to_dict()): self._points(metric)
                for metric in run.metrics()
            }
        return iter(series.items())

    @staticmethod
    def _points(metric: Any) -> list[Point]:
        steps, (values, times) = metric.data.view(["val", "time"]).items_list()
        return [
            Point(int(step), float(value), round(float(at) * 1000))
            for step, value, at in zip(steps, values, times, strict=True)
        ]


def _last_ms(metric: Any) -> int:
    """The wall time of a metric's last point (0: none), the end of a run never closed."""
    _steps, (times,) = metric.data.view(["time"]).items_list()
    return round(max(times, default=0.0) * 1000)
