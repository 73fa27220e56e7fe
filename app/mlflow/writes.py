"""What an MLflow client logs into a run, checked against MLflow's limits and stored where
torchyard keeps it: points through app.metrics.ingest (the same store as a job's: live
curves, summaries and filters work), params and tags as the run's params
(app.runs.query.params.record_logged), the name and notes on the run, ``key=value`` tags that fit
torchyard's tag rules also as the run's tags (the runs table shows and filters them).

MLflow's rules kept: at most 1,000 metrics, 100 params and 100 tags per batch (1,000 entities
in all); a param, once logged, keeps its value (the same value again is fine); keys of at most
250 characters; param values of at most 6,000 characters and tag values of at most 8,000.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from operator import itemgetter

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.metrics.ingest import KeyLimit, Point, ingest_points
from app.mlflow.errors import invalid
from app.mlflow.reads import NOTE_TAG, PARAM_PREFIX, RUN_NAME_TAG, TAG_PREFIX
from app.mlflow.schemas import KeyValue
from app.runs.models import Run, RunParam
from app.runs.query import params
from app.runs.schemas import MAX_NAME_CHARS, MAX_TAG_CHARS, MAX_TAGS, TAG_PATTERN, RunPatch
from app.runs.service import edit_run, set_name, set_notes, tags_by_run
from app.runs.state import notices
from app.settings import get_settings
from torchyard.contract import SYSTEM_KEY_PREFIX

MAX_METRICS_PER_BATCH = 1000
MAX_PARAMS_TAGS_PER_BATCH = 100
MAX_ENTITIES_PER_BATCH = 1000
MAX_KEY_CHARS = 250
MAX_PARAM_VALUE_CHARS = 6000
MAX_TAG_VALUE_CHARS = 8000
SOURCE = "mlflow"
_TAG_RE = re.compile(TAG_PATTERN)


def check_batch(metrics: int, params_: int, tags: int) -> None:
    if metrics > MAX_METRICS_PER_BATCH:
        raise invalid(
            f"A batch logging request can contain at most {MAX_METRICS_PER_BATCH} metrics. "
            f"Got {metrics} metrics. Please split up metrics across multiple requests and try "
            "again."
        )
    for what, count in (("params", params_), ("tags", tags)):
        if count > MAX_PARAMS_TAGS_PER_BATCH:
            raise invalid(
                f"A batch logging request can contain at most {MAX_PARAMS_TAGS_PER_BATCH} "
                f"{what}. Got {count} {what}. Please split up {what} across multiple requests "
                "and try again."
            )
    if metrics + params_ + tags > MAX_ENTITIES_PER_BATCH:
        raise invalid(
            f"A batch logging request can contain at most {MAX_ENTITIES_PER_BATCH} metrics, "
            f"params and tags in total. Got {metrics + params_ + tags}."
        )


def _check_key(key: str, what: str) -> None:
    if not key or len(key) > MAX_KEY_CHARS or "\x00" in key:
        raise invalid(f"Invalid {what} name: {key[:300]!r}: 1-{MAX_KEY_CHARS} characters")
    if key.startswith("/") or ".." in key.split("/"):
        raise invalid(f"Invalid {what} name: {key!r}: not a relative path")


def _check_value(value: str, what: str, key: str, limit: int) -> None:
    if len(value) > limit:
        raise invalid(
            f"{what} value '{value[:50]}...' had length {len(value)}, which exceeded length "
            f"limit of {limit} (key {key!r})"
        )
    if "\x00" in value:
        raise invalid(f"{what} {key!r}: a value must not contain NUL")


def log_metrics(session: Session, run: Run, points: Sequence[Point]) -> None:
    """Points as app.mlflow.schemas makes them: (key, step, value, wall time in seconds)."""
    for key in set(map(itemgetter(0), points)):
        _check_key(key, "metric")
        if key.startswith(SYSTEM_KEY_PREFIX):
            # The worker's system series (GPU use, the run's efficiency figures): a script or
            # a member may neither forge nor hide them, as the spool and TensorBoard refuse.
            raise invalid(
                f"Invalid metric name: {key!r}: keys under {SYSTEM_KEY_PREFIX!r} are the "
                "worker's system series of the run"
            )
    limit = KeyLimit(get_settings().max_metric_keys_per_run)
    ingest_points(session, run_id=run.id, points=points, key_limit=limit)
    if limit.dropped_points:
        notices.add_dropped_points(run, limit=limit.max_keys, points=limit.dropped_points)


def log_params(session: Session, run: Run, logged: Sequence[KeyValue]) -> None:
    wanted: dict[str, str] = {}
    for p in logged:
        _check_key(p.key, "param")
        _check_value(p.value, "Param", p.key, MAX_PARAM_VALUE_CHARS)
        if wanted.get(p.key, p.value) != p.value:
            raise invalid(f"Duplicate parameter key {p.key!r} with different values in a batch")
        wanted[p.key] = p.value
    if not wanted:
        return
    keys = {PARAM_PREFIX + k: k for k in wanted}
    stored = session.execute(
        select(RunParam.key, RunParam.value).where(
            RunParam.run_id == run.id, RunParam.key.in_(list(keys))
        )
    ).all()
    for key, value in stored:
        name = keys[key]
        if str(value) != wanted[name]:
            raise invalid(
                f"Changing param values is not allowed. Param with key='{name}' was already "
                f"logged with value='{value}' for run ID='{run.id}'. Attempted logging new "
                f"value '{wanted[name]}'."
            )
    new = {PARAM_PREFIX + k: v for k, v in wanted.items() if PARAM_PREFIX + k not in dict(stored)}
    params.record_logged(session, run_id=run.id, values=new, source=SOURCE)


def set_tags(session: Session, run: Run, tags: Sequence[KeyValue]) -> None:
    rows: dict[str, str] = {}
    for t in tags:
        _check_key(t.key, "tag")
        _check_value(t.value, "Tag", t.key, MAX_TAG_VALUE_CHARS)
        if t.key == RUN_NAME_TAG:
            set_name(session, run=run, name=t.value[:MAX_NAME_CHARS] or None)
        elif t.key == NOTE_TAG:
            set_notes(session, run=run, notes=t.value or None)
        else:  # mlflow.user too: the run's user_id when set (app/mlflow/reads.py)
            rows[TAG_PREFIX + t.key] = t.value
    params.record_logged(session, run_id=run.id, values=rows, source=SOURCE)
    _mirror_tags(session, run, {k[len(TAG_PREFIX) :]: v for k, v in rows.items()})


def _mirror_tags(session: Session, run: Run, tags: dict[str, str]) -> None:
    """A user's ``key=value`` tag that is a valid torchyard tag becomes one of the run's tags
    too (MLflow's own ``mlflow.*`` tags do not: they are bookkeeping); a changed value
    replaces the old ``key=`` tag. Past MAX_TAGS the rest stay MLflow tags only."""
    wanted = {
        k: f"{k}={v}"
        for k, v in tags.items()
        if not k.startswith("mlflow.")
        and len(f"{k}={v}") <= MAX_TAG_CHARS
        and _TAG_RE.match(f"{k}={v}")
    }
    if not wanted:
        return
    have = tags_by_run(session, [run.id])[run.id]
    kept = [t for t in have if not any(t.startswith(f"{k}=") for k in wanted)]
    new = (kept + sorted(set(wanted.values())))[:MAX_TAGS]
    if new != have:
        edit_run(session, run=run, patch=RunPatch(tags=new))


def _unmirror_tag(session: Session, run: Run, key: str) -> None:
    have = tags_by_run(session, [run.id])[run.id]
    kept = [t for t in have if not t.startswith(f"{key}=")]
    if kept != have:
        edit_run(session, run=run, patch=RunPatch(tags=kept))


def delete_tag(session: Session, run: Run, key: str) -> bool:
    """False when the run has no such tag."""
    if key == RUN_NAME_TAG:
        set_name(session, run=run, name=None)
        return True
    if key == NOTE_TAG:
        had = run.notes is not None
        set_notes(session, run=run, notes=None)
        return had
    gone = params.forget(session, run_id=run.id, keys=[TAG_PREFIX + key])
    _unmirror_tag(session, run, key)
    return gone > 0
