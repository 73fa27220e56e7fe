"""Following a run until it finishes: the SSE stream (reconnecting where it stopped when it
drops), polling GET /api/runs/{id} and its metrics when the stream is unavailable, and a rich
progress bar over epochs (or steps) with the latest metric values and the status.

The exit code is the run's outcome (0 succeeded, 1 failed, 3 cancelled), so a shell script or
CI job can `torchyard submit --follow` and branch on it.
"""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from torchyard.cli import endpoints as ep
from torchyard.cli.client import Api, ApiError, Unreachable
from torchyard.cli.watch import RunState, SseParser, exit_code_for

RETRY_SECONDS = (0.5, 1.0, 2.0, 5.0)
GIVE_UP_SECONDS = 120.0  # unreachable this long in a row: report it instead of waiting on
POLL_SECONDS = 1.0
STREAM_FAILURES_BEFORE_POLLING = 3
ERROR_TAIL_LINES = 20


class FollowView:
    """The progress bar on stderr; on a non-terminal (CI logs, pipes), where rich only draws
    the final bar, one plain line per epoch and per status change instead."""

    def __init__(self, state: RunState, console: Console) -> None:
        self.console = console
        self.live = console.is_terminal
        self.progress = Progress(
            TextColumn("run {task.fields[run]} [bold]{task.fields[status]}[/]"),
            BarColumn(),
            TextColumn("{task.fields[position]}"),
            TimeElapsedColumn(),
            TextColumn("{task.fields[metrics]}"),
            console=console,
            disable=not self.live,
        )
        self.task: TaskID = self.progress.add_task(
            "", total=state.epochs, run=state.run_id, status="", position="", metrics=""
        )
        self._shown_status = ""
        self._shown_epoch: int | None = None

    def __enter__(self) -> FollowView:
        self.progress.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.progress.stop()

    def update(self, state: RunState) -> None:
        completed = (state.epoch or 0) if state.epochs is not None else state.step
        self.progress.update(
            self.task,
            completed=completed,
            status=state.status,
            position=state.position(),
            metrics=state.metrics_line(),
        )
        activity = state.activity()  # "building environment: <pip's line>", or the status
        if activity != self._shown_status and not state.finished:  # outcome: see below
            self._shown_status = activity
            self.console.print(f"run {state.run_id}: {activity}", highlight=False, markup=False)
        if not self.live and state.epoch is not None and state.epoch != self._shown_epoch:
            self._shown_epoch = state.epoch
            self.console.print(f"{state.position()}  {state.metrics_line()}", highlight=False)


def _current_log_size(api: Api, run_id: int) -> int:
    """Start the stream at the log's end: following shows progress, `logs` shows output."""
    try:
        response = api.request(ep.RUN_LOGS(run_id=run_id), params={"tail": 1})
        return int(response.headers.get("X-Log-Size", 0))
    except (ApiError, Unreachable, ValueError):
        return 0


def _stream_once(api: Api, state: RunState, view: FollowView) -> int:
    """Read the event stream until it ends; the number of events seen."""
    params = {"after": state.after_param(), "log_offset": state.log_offset}
    headers = {"Accept": "text/event-stream"}
    seen = 0
    parser = SseParser()
    with api.stream(ep.RUN_EVENTS(run_id=state.run_id), params=params, headers=headers) as r:
        for line in r.iter_lines():
            event = parser.feed(line)
            if event is None:
                continue
            seen += 1
            state.apply(event)
            view.update(state)
    return seen


def _poll_once(api: Api, state: RunState, view: FollowView) -> None:
    """The stream's information the slow way: status from the run, new metric points."""
    # From the key that is furthest behind; points a key already has are skipped on apply.
    params: dict[str, Any] = {"step_min": min(state.last_steps.values(), default=0)}
    series = api.json(ep.RUN_METRICS(run_id=state.run_id), params=params).get("series", {})
    state.apply_series(series)
    state.apply_status(api.json(ep.RUN(run_id=state.run_id)))
    view.update(state)


def follow(api: Api, run_id: int, *, console: Console) -> int:
    """Show the run until it finishes; return its exit code (0/1/3)."""
    state = RunState.from_run(api.json(ep.RUN(run_id=run_id)))
    state.log_offset = _current_log_size(api, run_id)
    streaming, stream_failures = True, 0
    down_since: float | None = None
    with FollowView(state, console) as view:
        view.update(state)
        while not state.finished:
            try:
                if streaming:
                    seen = _stream_once(api, state, view)
                    stream_failures = 0 if seen else stream_failures + 1
                else:
                    _poll_once(api, state, view)
                down_since = None
            except Unreachable:
                down_since = down_since or time.monotonic()
                if time.monotonic() - down_since > GIVE_UP_SECONDS:
                    raise
                stream_failures += 1
            except ApiError as e:
                if e.status in (401, 403, 404) or not streaming:
                    raise
                streaming = False  # the server cannot stream this run: poll instead
            if stream_failures >= STREAM_FAILURES_BEFORE_POLLING:
                streaming = False
            if not state.finished:
                pause = RETRY_SECONDS[min(stream_failures, len(RETRY_SECONDS) - 1)]
                time.sleep(pause if streaming else POLL_SECONDS)
    final = api.json(ep.RUN(run_id=run_id))
    state.apply_status(final)
    return report_outcome(state, console)


def report_outcome(state: RunState, console: Console) -> int:
    """One line for the outcome (stderr); for a failure, the tail of the run's error."""
    code = exit_code_for(state.status)
    where = f"run {state.run_id} {state.status}"
    if state.timing():  # the build's time apart from training's
        where += f" ({state.timing()})"
    if state.status == "failed":
        suffix = f" (exit code {state.exit_code})" if state.exit_code is not None else ""
        console.print(f"[red]{where}{suffix}[/]", highlight=False)
        if state.error:
            lines = state.error.rstrip().splitlines()
            # pip's failure says its ERROR lines first (worker/env_build.py); a job's error
            # (a traceback) says what matters last.
            if lines[0].startswith("ERROR:"):
                shown = lines[:ERROR_TAIL_LINES]
            else:
                shown = lines[-ERROR_TAIL_LINES:]
            console.print("\n".join(shown), markup=False, highlight=False)
    elif state.status == "cancelled":
        console.print(f"[yellow]{where}[/]", highlight=False)
    else:
        metrics = state.metrics_line()
        console.print(f"[green]{where}[/]  {metrics}", highlight=False)
    return code
