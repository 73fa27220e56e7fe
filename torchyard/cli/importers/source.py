"""What every importer reads a source into, and what the sink writes: one ``SourceRun`` per run
of the source (its id there, name, status and times, params, tags, every metric point with its
step and wall time, its files), and the ``Skipped`` notes for what could not be read. A reader
yields runs one at a time, so a large source is never held in memory whole."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

# MLflow's run statuses, which the sink sends (torchyard's MLflow API maps them to its own).
FINISHED, FAILED, KILLED, RUNNING = "FINISHED", "FAILED", "KILLED", "RUNNING"


@dataclass(frozen=True)
class Point:
    step: int
    value: float
    timestamp_ms: int


@dataclass(frozen=True)
class Artifact:
    """A file of the run: ``path`` relative to the run's artifacts, ``local`` where it lies now
    (``fetch`` brings it there first for a remote source)."""

    path: str
    local: Path | None = None
    fetch: Callable[[], Path | None] | None = None

    def open_path(self) -> Path | None:
        """The file, or None when it could not be fetched (the reader said why)."""
        if self.local is not None:
            return self.local
        assert self.fetch is not None
        return self.fetch()


@dataclass
class SourceRun:
    source_id: str  # the run's id in its source: MLflow's run id, a log dir's relative folder
    experiment: str  # the source's experiment name, the default target experiment
    name: str | None
    status: str = FINISHED
    start_ms: int | None = None
    end_ms: int | None = None
    params: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    # key -> points, read lazily: a run's series are read only when it is imported
    series: Callable[[], Iterator[tuple[str, list[Point]]]] = lambda: iter(())
    artifacts: Callable[[], Iterator[Artifact]] = lambda: iter(())


@dataclass(frozen=True)
class Skipped:
    """Something of the source not imported: ``where`` names the file or run, ``why`` says
    what was wrong with it."""

    where: str
    why: str


class Reader(Protocol):
    """A source, opened: ``source`` (the key of idempotence with each run's ``source_id``),
    ``kind`` (mlflow, tensorboard, ...), the runs, and what was skipped while listing them."""

    source: str
    kind: str
    skipped: list[Skipped]

    def runs(self) -> Iterator[SourceRun]: ...

    def close(self) -> None: ...


def flatten(config: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """Nested params as dotted keys (``optimizer.name``), as a launch config's are; a value
    that is not a string as JSON."""
    out: dict[str, str] = {}
    for key, value in config.items():
        if isinstance(value, dict) and value:
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value if isinstance(value, str) else json.dumps(value)
    return out
