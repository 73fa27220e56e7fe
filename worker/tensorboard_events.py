"""Moves what a job wrote with TensorBoard's SummaryWriter into the database: scalars as
points, hparams as the run's reported params, images as the run's images.

A script that only calls `SummaryWriter().add_scalar("Loss/train", v, step)` streams into
torchyard unchanged: the job runs in its run directory, so its event files
(`events.out.tfevents.*`, relative log dirs included) are somewhere under that directory. The
forwarder calls `forward_events` with every batch; it finds the event files (walking the tree
about once a second per run, and at once when a directory it walked has changed), reads each
one incrementally from the byte offset kept in `runs.tb_offsets` (app.runs.files.ingest_offsets),
and stores what they hold with the new offsets in the caller's transaction, so a restarted
worker resumes where the last commit left off.

Event files are TFRecord streams of serialized `Event`s, read by `worker.tfrecord` (which owns
the framing, the CRC checks, the size cap of a record and where an incomplete trailing record
stops a read), decoded by `worker.tensorboard_decode` (what is taken from an event), and
stored by app.metrics.ingest (points), app.runs.query.params (hparams, as `hparams.<name>`) and
app.runs.files.images (images, with their caps). Everything else (histograms, text, audio, graphs,
...) is skipped, and named once on the run (its notices: the run page, GET /api/runs/{id})
and in its log, as is every cap hit and a worker without the tensorboard package; file_version
events silently.

Keys: the tag. `add_scalars(main, {"train": a, "val": b})` writes tag `main` into the
sub-directories `<log_dir>/<main with "/" as "_">_train/` and `..._val/`; such a file (its
directory is named `<tag>_<suffix>` and its parent holds event files of its own) gets the key
`<tag>/<suffix>`, e.g. `Loss/train` and `Loss/val`. Keys longer than 255 characters are cut to
246 and end in "~" and 8 hex digits of their hash, so long keys stay distinct. Writers in
different log dirs logging the same tag share one key.

A point is unique per (key, step): a repeated step for the same key (TensorBoard allows it,
e.g. after a resume) keeps the first value stored. NaN is stored as NULL, +/-inf as logged.
"""

from __future__ import annotations

import functools
import logging
import os
import posixpath
import stat
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

from app.db import Session
from app.metrics.ingest import KeyLimit, clip_key, ingest_points
from app.runs.files import ingest_offsets
from app.runs.files.images import Caps, ImageLimit, store_images
from app.runs.files.job_files import FileRefused, folder_entries, job_file_size
from app.runs.query.params import MAX_REPORTED, MAX_VALUE_CHARS, ParamLimit, record_reported
from app.settings import get_settings
from torchyard.contract import SYSTEM_KEY_PREFIX
from worker.run_log import note_in_log
from worker.tensorboard_decode import Decoded, decode_events
from worker.tfrecord import MAX_RECORD_BYTES, read_records

log = logging.getLogger(__name__)

EVENT_FILE_MARKER = "events.out.tfevents."
MAX_BYTES_PER_CALL = 2 * 1024 * 1024  # ~45k scalar events, ~0.3 s with their ingest
RESCAN_SECONDS = 1.0
MAX_CACHED_RUNS = 64
MAX_WATCHED_DIRS = 200  # directories stat'ed on every call to notice new event files at once
_RACY_NS = 50_000_000

# --- events to what is stored -------------------------------------------------------


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
    """Event files anywhere under run_dir (posix paths relative to it; no link is followed,
    app.runs.files.job_files.folder_entries), and the modification time of each directory walked,
    taken before listing it, so that an entry created later changes it."""
    files: list[str] = []
    mtimes: dict[str, int] = {}
    pending = [""]
    while pending:
        relative = pending.pop()
        directory = str(run_dir / relative) if relative else str(run_dir)
        mtime = _mtime(directory)
        if mtime is None:
            continue
        mtimes[directory] = mtime
        try:
            entries = folder_entries(run_dir, relative)
        except (OSError, FileRefused):
            continue
        for name, info in entries:
            path = f"{relative}/{name}" if relative else name
            if stat.S_ISDIR(info.st_mode):
                pending.append(path)
            elif name.startswith(EVENT_FILE_MARKER) and stat.S_ISREG(info.st_mode):
                files.append(path)
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
    offsets = ingest_offsets.tensorboard_offsets(session, run_id=run_id)
    if offsets is None:
        return 0
    state = _state(run_id)
    _scan(state, run_dir)
    if not state.files:
        return 0
    if not _tensorboard_available():
        if _say(session, run_id, run_dir, {"package": MISSING_PACKAGE}):
            log.warning("run %s: %s", run_id, MISSING_PACKAGE)
        return 0
    event_dirs = {posixpath.dirname(f) for f in state.files}
    decoded = Decoded()
    oversized: dict[str, int] = {}  # file -> records over MAX_RECORD_BYTES skipped unread
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
        records = read_records(run_dir, rel, start, budget)
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
        decode_events(records.data, file_state.key_of, file_state.plugins, decoded)
        if records.oversized:
            oversized.setdefault(rel, records.oversized)
        offsets[rel] = records.end
        consumed += max(1, len(records.data), records.oversized)
    if not consumed:
        return 0
    notes: dict[str, str] = {}  # what to say in the log, once per run, by what it is about
    for kind, tag in decoded.skipped.items():
        notes[kind] = _skipped_note(kind, tag)
    for rel in oversized:
        notes["oversized"] = (
            f"TensorBoard: events over {_mb(MAX_RECORD_BYTES)} (in {rel!r}) are skipped unread"
        )
    points = decoded.points
    if any(key.startswith(SYSTEM_KEY_PREFIX) for key, _s, _v, _t in points):
        # The worker's system series: a job may neither forge nor block them.
        tag = next(key for key, _s, _v, _t in points if key.startswith(SYSTEM_KEY_PREFIX))
        points = [p for p in points if not p[0].startswith(SYSTEM_KEY_PREFIX)]
        notes["reserved"] = (
            f"TensorBoard scalars under {SYSTEM_KEY_PREFIX} (tag {tag!r}) are not stored: "
            "those keys are the worker's system series of the run"
        )
    if points:
        ingest_points(session, run_id=run_id, points=points, key_limit=key_limit)
    if decoded.hparams:
        for param_limit in record_reported(session, run_id=run_id, values=decoded.hparams):
            notes[f"hparams {param_limit.value}"] = _PARAM_NOTES[param_limit]
    if decoded.images:
        caps = _image_caps()
        hit = store_images(session, run_id=run_id, images=decoded.images, caps=caps)
        for image_limit, tag in hit.items():
            notes[f"images {image_limit.value}"] = _image_note(image_limit, tag, caps)
    _say(session, run_id, run_dir, notes)
    ingest_offsets.advance_tensorboard(session, run_id=run_id, offsets=offsets)
    return consumed


# --- what the run says about TensorBoard data not kept -------------------------------------

MISSING_PACKAGE = (
    "TensorBoard event files written by this run are not shown: the worker has no tensorboard "
    "package (it comes with torchyard's server extra: pip install 'torchyard[server]')"
)


def _say(session: Session, run_id: int, run_dir: Path, notes: dict[str, str]) -> bool:
    """Name on the run (its notices) and in its log what is not shown, each note once per
    run: the notices, in the batch's transaction, remember what was said."""
    new = ingest_offsets.note_tensorboard(session, run_id=run_id, notes=notes)
    if new:
        note_in_log(run_dir, *(new[k] for k in sorted(new)))
    return bool(new)


def _mb(n: int) -> str:
    if n < 1024:
        return f"{n} bytes"
    return f"{n / 1024:.0f} KB" if n < 1024**2 else f"{n / 1024**2:.0f} MB"


def _skipped_note(kind: str, tag: str) -> str:
    return (
        f"TensorBoard {kind}{f' (tag {tag!r})' if tag else ''} written by this run are not "
        "shown here: scalars, images and hparams are read from event files"
    )


def _image_caps() -> Caps:
    settings = get_settings()
    return Caps(
        image_bytes=settings.tb_image_max_bytes,
        per_tag=settings.tb_images_per_tag,
        run_bytes=settings.tb_images_max_run_bytes,
    )


_PARAM_NOTES = {
    ParamLimit.TOO_MANY: f"TensorBoard hparams: this run reported more than {MAX_REPORTED} "
    "names; the further ones are not kept",
    ParamLimit.CUT: f"TensorBoard hparams: values longer than {MAX_VALUE_CHARS} characters are cut",
}


def _image_note(limit: ImageLimit, tag: str, caps: Caps) -> str:
    about = f"TensorBoard images (tag {tag!r})"
    match limit:
        case ImageLimit.NOT_PNG_OR_JPEG:
            return f"{about}: only PNG and JPEG images are kept"
        case ImageLimit.TOO_LARGE:
            return f"{about}: images over {_mb(caps.image_bytes)} are not kept (tb_image_max_bytes)"
        case ImageLimit.THINNED:
            return (
                f"{about}: more than {caps.per_tag} images in one tag; older steps are thinned "
                f"out (every other one dropped, the newest kept) to keep {caps.per_tag} spread "
                "over the run (tb_images_per_tag)"
            )
        case ImageLimit.TOO_MANY_TAGS:
            return f"{about}: images of tags past the first {caps.tags} are not kept"
    return (
        f"{about}: the run's images reached {_mb(caps.run_bytes)}; later images are not kept "
        "(tb_images_max_run_bytes)"
    )
