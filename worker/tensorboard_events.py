"""Moves the scalars a job wrote with TensorBoard's SummaryWriter into the database.

A script that only calls `SummaryWriter().add_scalar("Loss/train", v, step)` streams into
torchyard unchanged: the job runs in its run directory, so its event files
(`events.out.tfevents.*`, relative log dirs included) are somewhere under that directory. The
forwarder calls `forward_events` with every batch; it finds the event files (walking the tree
about once a second per run, and at once when a directory it walked has changed), reads each
one incrementally from the byte offset kept in `run.tb_offsets`, and stores the scalar points
with the new offsets in the caller's transaction, so a restarted worker resumes where the last
commit left off.

Event files are TFRecord streams of serialized `Event`s, read by `worker.tfrecord` (which owns
the framing, the CRC checks and where an incomplete trailing record stops a read).

What becomes a point (key, step, value, wall_time):
- `value.simple_value` (torch's `add_scalar`, TF1 summaries);
- a one-element numeric `value.tensor` of the "scalars" plugin (TF2, `new_style=True`). TF2
  writes the plugin metadata only with a tag's first event, so a tensor without metadata
  counts when its tag was seen as "scalars" before or its plugin is unknown (after a restart).
Everything else (histograms, images, text, graphs, hparams) is skipped, and named once in the
run's log (note_skipped); file_version events silently.

Keys: the tag. `add_scalars(main, {"train": a, "val": b})` writes tag `main` into the
sub-directories `<log_dir>/<main with "/" as "_">_train/` and `..._val/`; such a file (its
directory is named `<tag>_<suffix>` and its parent holds event files of its own) gets the key
`<tag>/<suffix>`, e.g. `Loss/train` and `Loss/val`. Keys longer than 255 characters are cut to
246 and end in "~" and 8 hex digits of their hash, so long keys stay distinct. Writers in
different log dirs logging the same tag share one key.

A point is unique per (key, step): a repeated step for the same key (TensorBoard allows it,
e.g. after a resume) keeps the first value stored. NaN and +/-inf are stored as NULL.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import math
import os
import posixpath
import struct
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from app.metrics.ingest import MAX_KEY_LENGTH, KeyLimit, Point, ingest_points
from app.runs.job_files import job_file_size
from app.runs.models import Run
from worker.run_log import note_in_log
from worker.tfrecord import read_records

log = logging.getLogger(__name__)

EVENT_FILE_MARKER = "events.out.tfevents."
MAX_BYTES_PER_CALL = 2 * 1024 * 1024  # ~45k scalar events, ~0.3 s with their ingest
RESCAN_SECONDS = 1.0
MAX_CACHED_RUNS = 64
MAX_WATCHED_DIRS = 200  # directories stat'ed on every call to notice new event files at once
_RACY_NS = 50_000_000

# --- events to points -------------------------------------------------------------------


def _half(bits: int) -> float:
    return float(struct.unpack("<e", struct.pack("<H", bits & 0xFFFF))[0])


def _bfloat16(bits: int) -> float:  # the high half of a float32
    return float(struct.unpack("<f", struct.pack("<I", (bits & 0xFFFF) << 16))[0])


# TensorProto dtype (types.proto's DataType numbers) -> (repeated field, tensor_content
# format, conversion of one element).
_NUMERIC: dict[int, tuple[str, str, Callable[[Any], float]]] = {
    1: ("float_val", "<f", float),  # DT_FLOAT
    2: ("double_val", "<d", float),  # DT_DOUBLE
    3: ("int_val", "<i", float),  # DT_INT32
    4: ("int_val", "<B", float),  # DT_UINT8
    5: ("int_val", "<h", float),  # DT_INT16
    6: ("int_val", "<b", float),  # DT_INT8
    9: ("int64_val", "<q", float),  # DT_INT64
    10: ("bool_val", "<?", float),  # DT_BOOL
    14: ("half_val", "<H", _bfloat16),  # DT_BFLOAT16
    19: ("half_val", "<H", _half),  # DT_HALF
}


def _tensor_scalar(tensor: Any) -> float | None:
    """The value of a one-element numeric TensorProto; None for anything else."""
    if math.prod(dim.size for dim in tensor.tensor_shape.dim) != 1:
        return None
    spec = _NUMERIC.get(tensor.dtype)
    if spec is None:
        return None
    name, fmt, convert = spec
    values = getattr(tensor, name)
    if values:
        return convert(values[0])
    content: bytes = tensor.tensor_content
    if len(content) == struct.calcsize(fmt):
        return convert(struct.unpack(fmt, content)[0])
    return None


@dataclass
class _FileState:
    rel: str  # the file's path under the run dir
    event_dirs: set[str]  # the directories holding event files when the file was found
    plugins: dict[str, str] = field(default_factory=dict)  # tag -> plugin seen in metadata
    keys: dict[str, str] = field(default_factory=dict)  # tag -> metric key

    def key_of(self, tag: str) -> str:
        key = self.keys.get(tag)
        if key is None:
            key = self.keys[tag] = key_for(tag, self.rel, self.event_dirs)
        return key


def event_points(
    records: Iterable[bytes],
    key_of: Callable[[str], str],
    plugins: dict[str, str],
    skipped: dict[str, str] | None = None,
) -> list[Point]:
    """The scalar points in serialized Events. `plugins` (tag -> plugin name) remembers TF2
    metadata across calls for one file; `skipped` gets what was left out, by kind (images,
    histograms, text, hparams, a graph, ...), with one of its tags."""
    skipped = {} if skipped is None else skipped
    from google.protobuf.message import DecodeError
    from tensorboard.compat.proto import event_pb2

    points: list[Point] = []
    event = event_pb2.Event()
    for data in records:
        try:
            event.ParseFromString(data)
        except DecodeError:
            log.warning("skipping an event that does not parse (%d bytes)", len(data))
            continue
        what = event.WhichOneof("what")
        if what != "summary":
            if what in _NOT_INGESTED_EVENTS:
                skipped.setdefault(_NOT_INGESTED_EVENTS[what], "")
            continue
        for v in event.summary.value:
            kind = v.WhichOneof("value")
            if kind == "simple_value":
                value: float | None = v.simple_value
            elif kind == "tensor":
                plugin = v.metadata.plugin_data.plugin_name if v.HasField("metadata") else ""
                if plugin:
                    plugins[v.tag] = plugin
                else:
                    plugin = plugins.get(v.tag, "")
                if plugin not in ("", "scalars"):
                    skipped.setdefault(plugin, v.tag)
                    continue
                value = _tensor_scalar(v.tensor)
                if value is None:
                    skipped.setdefault("tensors", v.tag)
                    continue
            else:
                skipped.setdefault(_VALUE_KINDS.get(kind or "", str(kind)), v.tag)
                continue
            if v.tag:
                points.append((key_of(v.tag), event.step, value, event.wall_time))
    return points


# What a summary value or an event holds that is not a scalar, named as the run's log says it.
_VALUE_KINDS = {"image": "images", "histo": "histograms", "audio": "audio"}
_NOT_INGESTED_EVENTS = {
    "graph_def": "graph",
    "meta_graph_def": "graph",
    "tagged_run_metadata": "run metadata",
}


def note_skipped(run_dir: Path, kinds: dict[str, str]) -> None:
    """Say once in the run's log what TensorBoard data it wrote that torchyard does not show."""
    note_in_log(
        run_dir,
        *(
            f"TensorBoard {kind}{f' (tag {tag!r})' if tag else ''} written by this run are "
            "not shown here: only scalars are read from event files"
            for kind, tag in sorted(kinds.items())
        ),
    )


def clip_key(key: str) -> str:
    if len(key) <= MAX_KEY_LENGTH:
        return key
    digest = hashlib.sha1(key.encode()).hexdigest()[:8]
    return f"{key[: MAX_KEY_LENGTH - 9]}~{digest}"


def key_for(tag: str, rel_file: str, event_dirs: set[str]) -> str:
    """The metric key of `tag` in the event file `rel_file` (see the module docstring)."""
    directory = posixpath.dirname(rel_file)
    name, parent = posixpath.basename(directory), posixpath.dirname(directory)
    prefix = tag.replace("/", "_") + "_"
    if directory and parent in event_dirs and name.startswith(prefix) and name != prefix:
        return clip_key(f"{tag}/{name[len(prefix) :]}")
    return clip_key(tag)


# --- per-run state and the forwarder's step -----------------------------------------------


@dataclass
class _RunState:
    files: list[str] = field(default_factory=list)  # event files, posix paths under the run dir
    dir_mtimes: dict[str, int] = field(default_factory=dict)  # the directories walked
    scanned_at: float = -1e9
    scan_seconds: float = 0.0
    racy: bool = False  # a directory changed just before the last walk
    per_file: dict[str, _FileState] = field(default_factory=dict)
    # file -> (offset of a length failing its CRC, file size then): retried once the file grows
    corrupt: dict[str, tuple[int, int]] = field(default_factory=dict)
    warned_missing_package: bool = False
    named: set[str] = field(default_factory=set)  # kinds not ingested, said in the log already


_STATES: OrderedDict[int, _RunState] = OrderedDict()


def clear_cache() -> None:
    """Forget every run's scan and per-file state (as a freshly started worker would)."""
    _STATES.clear()


def _state(run_id: int) -> _RunState:
    state = _STATES.pop(run_id, None) or _RunState()
    _STATES[run_id] = state
    while len(_STATES) > MAX_CACHED_RUNS:
        _STATES.popitem(last=False)
    return state


def _mtime(path: str) -> int | None:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None


def find_event_files(run_dir: Path) -> tuple[list[str], dict[str, int]]:
    """Event files anywhere under run_dir (posix paths relative to it; symlinked directories
    are not followed), and the modification time of each directory walked, taken before
    listing it, so that an entry created later changes it."""
    files: list[str] = []
    mtimes: dict[str, int] = {}
    pending = [str(run_dir)]
    while pending:
        directory = pending.pop()
        mtime = _mtime(directory)
        if mtime is None:
            continue
        mtimes[directory] = mtime
        try:
            with os.scandir(directory) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        pending.append(entry.path)
                    elif entry.name.startswith(EVENT_FILE_MARKER) and entry.is_file(
                        follow_symlinks=False
                    ):
                        files.append(Path(entry.path).relative_to(run_dir).as_posix())
        except OSError:
            continue
    return sorted(files), mtimes


def _scan(state: _RunState, run_dir: Path) -> None:
    """Walk the run dir once a second, and sooner when a directory walked last time has
    changed (a new log dir or event file: the final drain after the job exits must see a file
    created in its last second). A big tree (a dataset unpacked into the run dir) is walked
    at most 10% of the time and only on the clock."""
    since = time.monotonic() - state.scanned_at
    if since < max(RESCAN_SECONDS, 10 * state.scan_seconds):
        if since < 10 * state.scan_seconds or not state.dir_mtimes:
            return
        if not state.racy and all(_mtime(d) == m for d, m in state.dir_mtimes.items()):
            return
    began, wall = time.monotonic(), time.time_ns()
    state.files, mtimes = find_event_files(run_dir)
    state.scanned_at = time.monotonic()
    state.scan_seconds = state.scanned_at - began
    state.dir_mtimes = mtimes if len(mtimes) <= MAX_WATCHED_DIRS else {}
    # Directory times tick coarsely (a few ms): one changed just before the walk may change
    # again within the same tick unseen, so it is walked again on the next call.
    state.racy = any(m >= wall - _RACY_NS for m in mtimes.values())


@functools.cache
def _tensorboard_available() -> bool:
    try:
        import tensorboard.compat.proto.event_pb2  # noqa: F401
    except ImportError:
        return False
    return True


def forward_events(
    session: Session,
    *,
    run_id: int,
    run_dir: Path,
    max_bytes: int = MAX_BYTES_PER_CALL,
    key_limit: KeyLimit | None = None,
) -> int:
    """One batch of TensorBoard scalars: returns the number of event records consumed (0 when
    no event file has anything new). Points and offsets go into the caller's transaction."""
    run = session.get(Run, run_id)
    if run is None:
        return 0
    state = _state(run_id)
    _scan(state, run_dir)
    if not state.files:
        return 0
    if not _tensorboard_available():
        if not state.warned_missing_package:
            state.warned_missing_package = True
            log.warning(
                "run %s wrote TensorBoard event files but the tensorboard package is not "
                "installed in the worker; its scalars are not ingested (pip install "
                "'torchyard[tensorboard]')",
                run_id,
            )
        return 0
    offsets = dict(run.tb_offsets or {})
    event_dirs = {posixpath.dirname(f) for f in state.files}
    points: list[Point] = []
    consumed, budget = 0, max_bytes
    for rel in state.files:
        if budget <= 0:
            break
        start = offsets.get(rel, 0)
        size = job_file_size(run_dir / rel)  # a regular file, not a link to one
        if size is None:
            continue
        if size <= start or state.corrupt.get(rel) == (start, size):
            continue
        records = read_records(run_dir / rel, start, budget)
        if records.corrupt_at is not None:
            if rel not in state.corrupt:
                log.warning("run %s: %s is corrupt at byte %d", run_id, rel, records.corrupt_at)
            state.corrupt[rel] = (records.corrupt_at, size)
        if records.end == start:
            continue
        budget -= records.end - start
        file_state = state.per_file.get(rel)
        if file_state is None:
            file_state = state.per_file[rel] = _FileState(rel, event_dirs)
        skipped: dict[str, str] = {}
        points.extend(event_points(records.data, file_state.key_of, file_state.plugins, skipped))
        new_kinds = {k: t for k, t in skipped.items() if k not in state.named}
        if new_kinds:
            state.named.update(new_kinds)
            note_skipped(run_dir, new_kinds)
        offsets[rel] = records.end
        consumed += max(1, len(records.data))
    if not consumed:
        return 0
    if points:
        ingest_points(session, run_id=run_id, points=points, key_limit=key_limit)
    run.tb_offsets = offsets  # a new dict: the JSON column sees the change
    session.flush()
    return consumed
