"""What following a run needs without any I/O: an SSE line parser and the run's state as the
events of GET /api/runs/{id}/events (app/runs/streams/events.py) update it.

The state is also what a reconnect resumes from: `after` (last step per metric key) and
`log_offset` go back to the server, so a dropped stream continues where it stopped instead
of replaying the whole run.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

FINISHED = ("succeeded", "failed", "cancelled", "deleted")
EXIT_CODES = {"succeeded": 0, "failed": 1, "cancelled": 3}
HIDDEN_KEYS = ("epoch",)  # shown as the progress position, not as a value
MAX_SHOWN_KEYS = 6
# app/runs/state/phase.py's phases (the client imports nothing of the server's)
STARTING = "starting"
BUILDING = "building environment"


@dataclass(frozen=True)
class SseEvent:
    event: str
    data: str

    def json(self) -> Any:
        return json.loads(self.data) if self.data else None


class SseParser:
    """Server-Sent Events, one line at a time (line endings already stripped): `event:` and
    `data:` fields accumulate until a blank line dispatches them; `:` lines are comments."""

    def __init__(self) -> None:
        self._event = ""
        self._data: list[str] = []

    def feed(self, line: str) -> SseEvent | None:
        if not line:
            if not self._data and not self._event:
                return None
            event = SseEvent(self._event or "message", "\n".join(self._data))
            self._event, self._data = "", []
            return event
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        return None


def exit_code_for(status: str) -> int:
    """0 succeeded, 1 failed (or gone), 3 cancelled."""
    return EXIT_CODES.get(status, 1)


@dataclass
class RunState:
    run_id: int
    status: str
    epochs: int | None = None
    last_steps: dict[str, int] = field(default_factory=dict)
    latest: dict[str, float | None] = field(default_factory=dict)
    log_offset: int = 0
    error: str | None = None
    exit_code: int | None = None
    phase: str | None = None  # "starting", "building environment", "training" while running
    build_line: str | None = None  # pip's last line while the environment builds
    build_seconds: float | None = None  # the environment's build (or reuse); None: none
    duration_seconds: float | None = None  # training's, from the job's start

    @classmethod
    def from_run(cls, run: dict[str, Any]) -> RunState:
        params = (run.get("config") or {}).get("params") or {}
        epochs = params.get("epochs")
        return cls(
            run_id=int(run["id"]),
            status=str(run["status"]),
            epochs=epochs if isinstance(epochs, int) and epochs > 0 else None,
            error=run.get("error"),
            exit_code=run.get("exit_code"),
            phase=run.get("phase"),
            build_line=run.get("env_build_line"),
        )

    @property
    def finished(self) -> bool:
        return self.status in FINISHED

    @property
    def step(self) -> int:
        return max(self.last_steps.values(), default=0)

    @property
    def epoch(self) -> int | None:
        value = self.latest.get("epoch")
        return int(value) if value is not None else None

    def apply(self, event: SseEvent) -> bool:
        """Update from one event; True when something shown changed."""
        payload = event.json()
        if event.event == "metrics":
            return self.apply_series(payload.get("series", {}))
        if event.event == "status":
            return self.apply_status(payload)
        if event.event == "log":
            self.log_offset = int(payload.get("offset", self.log_offset))
        return False

    def apply_series(self, series: dict[str, dict[str, list[Any]]]) -> bool:
        changed = False
        for key, points in series.items():
            steps, values = points.get("step") or [], points.get("value") or []
            if steps and steps[-1] >= self.last_steps.get(key, -1):
                self.last_steps[key] = int(steps[-1])
                self.latest[key] = values[-1]
                changed = True
        return changed

    def apply_status(self, payload: dict[str, Any]) -> bool:
        status = str(payload.get("status", self.status))
        self.error = payload.get("error", self.error)
        self.exit_code = payload.get("exit_code", self.exit_code)
        self.phase = payload.get("phase", self.phase)
        self.build_line = payload.get("env_build_line", self.build_line)
        self.build_seconds = payload.get("env_build_seconds", self.build_seconds)
        self.duration_seconds = payload.get("duration_seconds", self.duration_seconds)
        changed, self.status = status != self.status, status
        return changed

    def timing(self) -> str:
        """`environment 41.2 s, training 12.0 s` once there was a build, else ""."""
        if self.build_seconds is None:
            return ""
        training = self.duration_seconds
        spent = f", training {training:.1f} s" if training is not None else ""
        return f"environment {self.build_seconds:.1f} s{spent}"

    def activity(self) -> str:
        """What the run does, as one line says it: `building environment: <pip's last line>`
        while its environment builds, else its status."""
        if self.status == "running" and self.phase == BUILDING:
            return f"{BUILDING}: {self.build_line}" if self.build_line else BUILDING
        if self.status == "running" and self.phase == STARTING:
            return STARTING
        return self.status

    def after_param(self) -> str:
        return json.dumps(self.last_steps, separators=(",", ":"))

    def position(self) -> str:
        """`epoch 2/10`, or `step 340` for a run without epochs."""
        if self.epochs is not None:
            return f"epoch {self.epoch or 0}/{self.epochs}"
        return f"step {self.step}"

    def metrics_line(self) -> str:
        shown = sorted(k for k in self.latest if k not in HIDDEN_KEYS)[:MAX_SHOWN_KEYS]
        return "  ".join(f"{k} {_fmt(self.latest[k])}" for k in shown)


def _fmt(value: float | None) -> str:
    if value is None:
        return "nan"
    if value != 0 and (abs(value) >= 1e5 or abs(value) < 1e-3):
        return f"{value:.3e}"
    return f"{value:.4f}"
