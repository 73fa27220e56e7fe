"""What a run kept out, said on the run: spool lines skipped (and why), a per-run limit hit,
ingestion stopped by an error. The worker records them in ``runs.notices`` in the same
transaction that moves the spool offset (so a replayed batch is not counted twice); the API
(``notices`` of GET /api/runs/{id}) and the run page show ``notice_lines``.

Stored as JSON: ``{"skipped": {reason: lines}, "keys": {"limit": n, "points": dropped},
"log": {"limit": bytes, "kept": bytes}, "error": text, "stopped_early": {"reason": text,
"at": ISO time}, "tensorboard": {about: sentence}}``, every part optional. ``tensorboard``:
what the run wrote to its event files that is not shown (histograms, audio, graphs, a cap hit,
no tensorboard package in the worker), one sentence per kind (worker.tensorboard_events says
which), at most MAX_TENSORBOARD_NOTES: a job chooses its plugin names. ``config``: keys whose
value in the script's ``torchyard.init(config=...)`` differs from the launch's, ``{key: {"launch":
v, "script": v}}`` (app.runs.query.params.record_script). ``stopped_early`` is
no ingestion note: the sweep's early-stopping rule cancelled the run (app.sweeps.early_stop),
said where people look. ``gpu_idle``: ``{"gpus": [...], "minutes": n, "below": percent, "at":
ISO time}``, the run's GPUs were idle that long (app.runs.state.idle_notice), said once.
``session``: a session's own notes (app/sessions/end_rules.py):
``{"warning": text, "ended": text, "extra_hours": hours}``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from app.runs.models import Run

MAX_ERROR_CHARS = 500
MAX_TENSORBOARD_NOTES = 20
MAX_CONFIG_NOTES = 20


def size_text(n: int) -> str:
    """1073741824 -> "1 GiB"; sizes in the notes people read."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            value = n / scale
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{n} bytes"


def _update(run: Run, **parts: Any) -> None:
    # A new dict each time: the JSON column notices an assignment, not an in-place change.
    run.notices = {**(run.notices or {}), **parts}


def add_skipped(run: Run, reasons: Mapping[str, int]) -> None:
    """Count spool lines skipped, by reason."""
    if not reasons:
        return
    skipped = dict((run.notices or {}).get("skipped") or {})
    for reason, lines in reasons.items():
        skipped[reason] = int(skipped.get(reason, 0)) + lines
    _update(run, skipped=skipped)


def add_dropped_points(run: Run, *, limit: int, points: int) -> None:
    """Points of metric keys beyond the run's key limit were not stored."""
    if points <= 0:
        return
    before = int(((run.notices or {}).get("keys") or {}).get("points", 0))
    _update(run, keys={"limit": limit, "points": before + points})


def add_config_differs(run: Run, differing: Mapping[str, tuple[Any, Any]]) -> None:
    """The script's ``torchyard.init(config=...)`` gave these keys other values than the
    launch, whose values the run used (key -> (launch, script)); at most MAX_CONFIG_NOTES keys."""
    held = dict((run.notices or {}).get("config") or {})
    changed = False
    for key in sorted(differing):
        if key in held or len(held) < MAX_CONFIG_NOTES:
            launch, script = differing[key]
            note = {"launch": launch, "script": script}
            changed = changed or held.get(key) != note
            held[key] = note
    if changed:
        _update(run, config=held)


def _shown(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 80 else text[:79] + "…"


def log_kept(run: Run) -> int | None:
    """Where the log was cut when it reached its limit; None while it has not."""
    kept = ((run.notices or {}).get("log") or {}).get("kept")
    return int(kept) if kept is not None else None


def log_cut(run: Run, *, limit: int, kept: int) -> None:
    _update(run, log={"limit": limit, "kept": kept})


def ingest_error(run: Run, error: str) -> None:
    if (run.notices or {}).get("error"):
        return  # the first error is the one that stopped ingestion
    _update(run, error=error[:MAX_ERROR_CHARS])


def add_tensorboard_notes(run: Run, notes: Mapping[str, str]) -> dict[str, str]:
    """Say on the run what of its event files is not shown; returns the notes it did not hold
    yet (those the caller says in the run's log too, so each is said once, across workers)."""
    held = dict((run.notices or {}).get("tensorboard") or {})
    new = {}
    for about in sorted(notes):
        if about not in held and len(held) < MAX_TENSORBOARD_NOTES:
            held[about] = new[about] = notes[about][:MAX_ERROR_CHARS]
    if new:
        _update(run, tensorboard=held)
    return new


def note_ingest_error(session: Session, *, run_id: int, error: str) -> None:
    """ingest_error by the run's id, in a unit of work of its own (the worker's ingestion
    steps say their first error here after their own unit of work was rolled back)."""
    run = session.get(Run, run_id)
    if run is not None:
        ingest_error(run, error)


def stopped_early(run: Run, reason: str, *, at: datetime) -> None:
    _update(run, stopped_early={"reason": reason[:MAX_ERROR_CHARS], "at": at.isoformat()})


def gpu_idle(run: Run, *, gpus: list[str], minutes: float, below: float, at: datetime) -> bool:
    """Say on the run that its GPUs stayed idle; once per run (False when said before)."""
    if (run.notices or {}).get("gpu_idle"):
        return False
    _update(run, gpu_idle={"gpus": gpus, "minutes": minutes, "below": below, "at": at.isoformat()})
    return True


def _idle_line(idle: Mapping[str, Any]) -> str:
    gpus = ", ".join(str(g) for g in idle.get("gpus") or [])
    return (
        f"GPU idle: {gpus} below {idle.get('below', 0):g}% utilisation for "
        f"{idle.get('minutes', 0):g} minutes (as of {idle.get('at')}): "
        "stop the run if it no longer needs its GPUs"
    )


def session_note(run: Run, **parts: Any) -> None:
    """A session's warning, why it was ended, or the hours it was extended by."""
    _update(run, session={**session_part(run.notices), **parts})


def session_part(notices: Mapping[str, Any] | None) -> dict[str, Any]:
    part = (notices or {}).get("session")
    return dict(part) if isinstance(part, dict) else {}


def stopped_early_reason(notices: Mapping[str, Any] | None) -> str | None:
    """Why a sweep stopped the run early; None when it did not."""
    part = (notices or {}).get("stopped_early")
    return str(part["reason"]) if isinstance(part, dict) and part.get("reason") else None


def notice_lines(notices: Mapping[str, Any] | None) -> list[str]:
    """The notes as sentences, for the API and the run page."""
    if not notices:
        return []
    lines = []
    for reason, count in sorted((notices.get("skipped") or {}).items()):
        lines.append(f"{count} line{'s' if count != 1 else ''} skipped: {reason}")
    keys = notices.get("keys")
    if keys:
        lines.append(
            f"metric key limit reached ({keys['limit']:,} keys per run): "
            f"{keys['points']:,} points of further keys not stored"
        )
    log = notices.get("log")
    if log:
        lines.append(
            f"log limit reached ({size_text(log['limit'])}): the output after it is not kept"
        )
    for key, both in sorted((notices.get("config") or {}).items()):
        lines.append(
            f"{key}: the launch's {_shown(both['launch'])} is used; the script's "
            f"torchyard.init(config=...) gave {_shown(both['script'])}"
        )
    tensorboard = notices.get("tensorboard") or {}
    lines.extend(str(tensorboard[about]) for about in sorted(tensorboard))
    if notices.get("error"):
        lines.append(f"ingestion stopped by an error: {notices['error']}")
    early = stopped_early_reason(notices)
    if early:
        lines.append(early)
    if isinstance(notices.get("gpu_idle"), dict):
        lines.append(_idle_line(notices["gpu_idle"]))
    held = session_part(notices)
    lines.extend(str(held[k]) for k in ("warning", "ended") if held.get(k))
    return lines
