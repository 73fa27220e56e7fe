"""What a notification says: the Slack-compatible ``text`` and the JSON body of the webhook.

Run names, errors and metric keys come from users and their jobs: in ``text`` they are
escaped the way Slack wants (&, <, > as entities), so a metric named ``<!channel>`` is shown,
not obeyed, and control characters are dropped; the raw values go in the structured fields.
"""

from __future__ import annotations

from typing import Any

from app.notifications.models import Event
from app.runs.models import Run
from app.settings import get_settings

MAX_FIELD = 300


def slack_escape(text: str) -> str:
    cleaned = "".join(c if c.isprintable() or c == " " else " " for c in text)
    return cleaned.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _short(text: str | None) -> str:
    first = (text or "").strip().splitlines()
    line = first[-1] if first else ""  # a traceback's last line says what went wrong
    return line if len(line) <= MAX_FIELD else line[: MAX_FIELD - 1] + "…"


def run_url(run_id: int) -> str | None:
    base = get_settings().public_url.rstrip("/")
    return f"{base}/runs/{run_id}" if base else None


def run_fields(run: Run, owner: str) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "id": run.id,
        "name": run.name,
        "experiment_id": run.experiment_id,
        "status": run.status.value,
        "owner": owner,
        "attempt": run.attempt,
    }
    if run.error:
        fields["error"] = _short(run.error)
    url = run_url(run.id)
    if url:
        fields["url"] = url
    return fields


def _label(run: dict[str, Any]) -> str:
    name = f" ({slack_escape(str(run['name']))})" if run.get("name") else ""
    return f"Run {run['id']}{name}"


def compose(event: Event, run: dict[str, Any] | None, **extra: Any) -> dict[str, Any]:
    """The webhook body {"text", "event", "run", ...extra}; the e-mail uses its text."""
    if run is None:
        text = "torchyard: this is a test notification. Your settings work."
    else:
        label = _label(run)
        if event is Event.succeeded:
            text = f"{label} finished: succeeded."
        elif event is Event.failed:
            error = f": {slack_escape(run['error'])}" if run.get("error") else "."
            text = f"{label} failed{error}"
        elif event is Event.cancelled:
            text = f"{label} was cancelled."
        elif event is Event.non_finite:
            keys = ", ".join(slack_escape(k) for k in extra.get("keys", []))
            text = f"{label}: a metric became NaN or infinite at step {extra.get('step')}: {keys}"
        elif event is Event.stalled:
            text = f"{label} has logged no new step for {extra.get('minutes'):g} minutes."
        elif event is Event.gpu_idle:
            gpus = ", ".join(slack_escape(g) for g in extra.get("gpus", []))
            text = f"{label}: leased GPU {gpus} idle for {extra.get('minutes'):g} minutes."
        else:
            text = f"{label}: {event.value}"
        if run.get("url"):
            text += f" <{run['url']}|Open the run>"
    return {"text": text, "event": event.value, "run": run, **extra}


def subject(payload: dict[str, Any]) -> str:
    run = payload.get("run")
    event = str(payload.get("event"))
    if not run:
        return "[torchyard] test notification"
    what = {
        "succeeded": "finished",
        "failed": "failed",
        "cancelled": "was cancelled",
        "non_finite": "metric became NaN/inf",
        "stalled": "stalled",
        "gpu_idle": "GPU idle",
    }.get(event, event)
    name = f" ({run['name']})" if run.get("name") else ""
    return f"[torchyard] run {run['id']}{name} {what}"


def mail_body(payload: dict[str, Any]) -> str:
    """The text with Slack's entities and link syntax undone (a mail reader shows it plain)."""
    text = str(payload.get("text", ""))
    run = payload.get("run") or {}
    if run.get("url"):
        text = text.replace(f" <{run['url']}|Open the run>", "") + f"\n\n{run['url']}"
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&") + "\n"
