from __future__ import annotations

import math
import os
import re
import struct
import sys
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from sqlalchemy.orm import Session, sessionmaker
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.compat.proto.tensor_pb2 import TensorProto
from tensorboard.compat.proto.tensor_shape_pb2 import TensorShapeProto
from tensorboard.compat.proto.types_pb2 import DT_DOUBLE, DT_FLOAT, DT_HALF, DT_INT64, DT_STRING
from tensorboard.summary.writer.event_file_writer import EventFileWriter
from torch.utils.tensorboard import SummaryWriter

from app.db import session_scope
from app.metrics.service import count_points, list_keys, read_series
from app.runs.models import Run
from app.runs.state.notices import MAX_TENSORBOARD_NOTES, notice_lines
from tests.conftest import REPO
from tests.factories import admin_run, make_run
from worker import tensorboard_events, tfrecord
from worker.forwarder import forward
from worker.tensorboard_events import clear_cache, forward_events


@pytest.fixture(autouse=True)
def fresh_worker() -> Iterator[None]:
    clear_cache()
    yield
    clear_cache()


def f32(x: float) -> float:
    """add_scalar stores a float32 (simple_value)."""
    return float(struct.unpack("<f", struct.pack("<f", x))[0])


# Each call a unit of work of its own, as the worker's are, on db_sessions (rolled back after
# the test); the one test that reads through the API commits (session_scope).
def pump(run_id: int, run_dir: Path, sessions: sessionmaker[Session]) -> int:
    with sessions.begin() as session:
        return forward(session, run_id=run_id, metrics_path=run_dir / "metrics.jsonl")


def new_run(sessions: sessionmaker[Session]) -> int:
    with sessions.begin() as session:
        return admin_run(session)


def series(run_id: int, sessions: sessionmaker[Session]) -> dict:
    with sessions() as session:
        return read_series(session, run_id=run_id, with_time=True)


def offsets(run_id: int, sessions: sessionmaker[Session]) -> dict[str, int]:
    with sessions() as session:
        run = session.get(Run, run_id)
        assert run is not None
        return dict(run.tb_offsets or {})


def event_file(log_dir: Path) -> Path:
    (found,) = [p for p in log_dir.iterdir() if p.name.startswith("events.out.tfevents.")]
    return found


def test_add_scalar_points_arrive_with_their_steps_values_and_wall_times(
    tmp_path: Path, db_sessions: sessionmaker[Session]
) -> None:
    run_id = new_run(db_sessions)
    before = time.time()
    writer = SummaryWriter(log_dir=str(tmp_path / "runs" / "exp1"))  # a nested relative log dir
    for step, loss in enumerate([2.0, 1.5, 0.1]):
        writer.add_scalar("Loss/train", loss, step * 10)
    writer.add_scalar("Accuracy/test", 0.5, 3, walltime=1234.5)
    writer.flush()
    after = time.time()

    assert pump(run_id, tmp_path, db_sessions) > 0
    got = series(run_id, db_sessions)
    assert got["Loss/train"]["step"] == [0, 10, 20]
    assert got["Loss/train"]["value"] == [2.0, 1.5, f32(0.1)]
    assert all(before <= t <= after for t in got["Loss/train"]["time"])
    assert got["Accuracy/test"] == {"step": [3], "value": [0.5], "time": [1234.5]}
    writer.close()


def test_only_new_points_move_and_offsets_are_kept_on_the_run(
    tmp_path: Path, db_sessions: sessionmaker[Session]
) -> None:
    run_id = new_run(db_sessions)
    writer = SummaryWriter(log_dir=str(tmp_path / "runs" / "exp"))
    for step in range(3):
        writer.add_scalar("loss", float(step), step)
    writer.flush()
    path = event_file(tmp_path / "runs" / "exp")
    rel = str(path.relative_to(tmp_path))

    assert pump(run_id, tmp_path, db_sessions) == 4  # file_version + 3 scalars
    assert offsets(run_id, db_sessions) == {rel: path.stat().st_size}
    assert pump(run_id, tmp_path, db_sessions) == 0

    writer.add_scalar("loss", 3.0, 3)
    writer.add_scalar("loss", 4.0, 4)
    writer.flush()
    assert pump(run_id, tmp_path, db_sessions) == 2
    assert offsets(run_id, db_sessions) == {rel: path.stat().st_size}
    assert pump(run_id, tmp_path, db_sessions) == 0
    assert series(run_id, db_sessions)["loss"]["step"] == [0, 1, 2, 3, 4]
    with db_sessions.begin() as session:
        assert count_points(session, run_id=run_id) == 5
    writer.close()


@pytest.mark.parametrize("cut_into_record", [6, -3], ids=["mid-length", "mid-data-crc"])
def test_a_truncated_trailing_record_waits_until_it_is_complete(
    tmp_path: Path, cut_into_record: int, db_sessions: sessionmaker[Session]
) -> None:
    run_id = new_run(db_sessions)
    source = tmp_path.parent / f"{tmp_path.name}-source"
    writer = SummaryWriter(log_dir=str(source))
    writer.add_scalar("loss", 1.0, 1)
    writer.flush()
    complete = event_file(source).stat().st_size
    writer.add_scalar("loss", 0.5, 2)
    writer.close()
    whole = event_file(source).read_bytes()
    assert len(whole) > complete  # the last record is whole[complete:]
    cut = complete + cut_into_record if cut_into_record > 0 else len(whole) + cut_into_record

    copy = tmp_path / "copied" / event_file(source).name
    copy.parent.mkdir()
    copy.write_bytes(whole[:cut])
    assert pump(run_id, tmp_path, db_sessions) == 2
    assert offsets(run_id, db_sessions) == {f"copied/{copy.name}": complete}
    assert series(run_id, db_sessions)["loss"]["step"] == [1]
    assert pump(run_id, tmp_path, db_sessions) == 0  # still incomplete: nothing consumed

    with copy.open("ab") as f:
        f.write(whole[cut:])
    assert pump(run_id, tmp_path, db_sessions) == 1
    assert series(run_id, db_sessions)["loss"]["value"] == [1.0, 0.5]
    assert offsets(run_id, db_sessions) == {f"copied/{copy.name}": len(whole)}


def test_add_scalars_subdirectories_get_their_own_keys(
    tmp_path: Path, db_sessions: sessionmaker[Session]
) -> None:
    run_id = new_run(db_sessions)
    writer = SummaryWriter(log_dir=str(tmp_path / "runs" / "exp"))
    for step in range(2):
        writer.add_scalars("Loss", {"train": 1.0 + step, "val": 2.0 + step}, step)
        writer.add_scalars("Acc/top", {"1": 0.25, "5": 0.75}, step)
    writer.add_scalar("lr", 0.5, 0)
    writer.flush()

    while pump(run_id, tmp_path, db_sessions):
        pass
    got = series(run_id, db_sessions)
    assert sorted(got) == ["Acc/top/1", "Acc/top/5", "Loss/train", "Loss/val", "lr"]
    assert got["Loss/train"]["value"] == [1.0, 2.0]
    assert got["Loss/val"]["value"] == [2.0, 3.0]
    assert got["Acc/top/5"]["step"] == [0, 1]
    writer.close()


# add_graph traces the model with torch.jit.trace, which torch 2.13 deprecates.
@pytest.mark.filterwarnings("ignore:`torch.jit.trace.*is deprecated")
def test_histograms_images_text_and_graphs_are_skipped(
    tmp_path: Path, db_sessions: sessionmaker[Session]
) -> None:
    run_id = new_run(db_sessions)
    writer = SummaryWriter(log_dir=str(tmp_path / "tb"))
    writer.add_histogram("weights", torch.arange(10.0), 0)
    writer.add_image("sample", np.zeros((3, 4, 4), dtype=np.uint8), 0)
    writer.add_text("notes", "hello", 0)
    writer.add_graph(torch.nn.Linear(2, 1), torch.zeros(1, 2))
    writer.add_scalar("loss", 1.0, 0)
    writer.flush()

    assert pump(run_id, tmp_path, db_sessions) > 0
    with db_sessions.begin() as session:
        assert list_keys(session, run_id=run_id) == ["loss"]
    writer.close()


def test_tensor_style_scalars_are_read(tmp_path: Path, db_sessions: sessionmaker[Session]) -> None:
    run_id = new_run(db_sessions)
    writer = SummaryWriter(log_dir=str(tmp_path / "tb"))
    writer.add_scalar("single", 0.25, 1, new_style=True)
    writer.add_scalar("double", 0.1, 1, new_style=True, double_precision=True)
    writer.flush()

    assert pump(run_id, tmp_path, db_sessions) == 3
    got = series(run_id, db_sessions)
    assert got["single"]["value"] == [0.25]
    assert got["double"]["value"] == [0.1]  # a double stays a double
    writer.close()


def test_nan_is_stored_as_null_and_inf_as_it_is(
    tmp_path: Path, db_sessions: sessionmaker[Session]
) -> None:
    run_id = new_run(db_sessions)
    writer = SummaryWriter(log_dir=str(tmp_path / "tb"))
    writer.add_scalar("loss", 1.0, 0)
    writer.add_scalar("loss", math.nan, 1)
    writer.add_scalar("loss", math.inf, 2)
    writer.flush()

    pump(run_id, tmp_path, db_sessions)
    # +inf read as JSON carries it (app/metrics/finite.py): a divergence, not a gap
    assert series(run_id, db_sessions)["loss"]["value"] == [1.0, None, sys.float_info.max]
    writer.close()


def test_a_repeated_step_keeps_the_first_value(
    tmp_path: Path, db_sessions: sessionmaker[Session]
) -> None:
    run_id = new_run(db_sessions)
    writer = SummaryWriter(log_dir=str(tmp_path / "tb"))
    writer.add_scalar("loss", 1.0, 5)
    writer.add_scalar("loss", 2.0, 5)
    writer.flush()

    pump(run_id, tmp_path, db_sessions)
    assert series(run_id, db_sessions)["loss"]["value"] == [1.0]
    writer.close()


def test_a_fresh_worker_resumes_from_the_stored_offsets(
    tmp_path: Path, db_sessions: sessionmaker[Session]
) -> None:
    run_id = new_run(db_sessions)
    writer = SummaryWriter(log_dir=str(tmp_path / "runs" / "a"))
    writer.add_scalar("loss", 1.0, 0)
    writer.flush()
    pump(run_id, tmp_path, db_sessions)
    stored = offsets(run_id, db_sessions)

    clear_cache()  # a restarted worker: no scan, no per-file state
    assert pump(run_id, tmp_path, db_sessions) == 0  # nothing replayed
    assert offsets(run_id, db_sessions) == stored
    writer.add_scalar("loss", 0.5, 1)
    writer.close()
    clear_cache()
    assert pump(run_id, tmp_path, db_sessions) == 1
    assert series(run_id, db_sessions)["loss"]["value"] == [1.0, 0.5]
    with db_sessions.begin() as session:
        assert count_points(session, run_id=run_id) == 2


def test_an_event_file_created_after_a_scan_is_found_by_the_next_call(
    tmp_path: Path, db_sessions: sessionmaker[Session]
) -> None:
    # The final drain runs right after the job exits: a log dir created in the job's last
    # moments must not wait for the once-a-second walk.
    run_id = new_run(db_sessions)
    assert pump(run_id, tmp_path, db_sessions) == 0  # walked: nothing yet
    writer = SummaryWriter(log_dir=str(tmp_path / "runs" / "late"))
    writer.add_scalar("loss", 1.0, 0)
    writer.close()
    assert pump(run_id, tmp_path, db_sessions) == 2
    other = SummaryWriter(log_dir=str(tmp_path / "runs" / "late" / "Loss_val"))
    other.add_scalar("Loss", 2.0, 0)
    other.close()
    assert pump(run_id, tmp_path, db_sessions) == 2
    assert sorted(series(run_id, db_sessions)) == ["Loss/val", "loss"]


def test_work_per_call_is_bounded_and_draining_ends_at_zero(
    tmp_path: Path, db_sessions: sessionmaker[Session]
) -> None:
    run_id = new_run(db_sessions)
    writer = SummaryWriter(log_dir=str(tmp_path / "tb"))
    for step in range(300):
        writer.add_scalar("loss", float(step), step)
    writer.close()
    size = event_file(tmp_path / "tb").stat().st_size

    calls = 0
    while True:
        with db_sessions.begin() as session:
            moved = forward_events(session, run_id=run_id, run_dir=tmp_path, max_bytes=2_000)
        if not moved:
            break
        calls += 1
        assert moved < 300
    assert calls >= size // 2_000
    assert series(run_id, db_sessions)["loss"]["step"] == list(range(300))
    assert pump(run_id, tmp_path, db_sessions) == 0


def test_a_corrupt_length_stops_that_file_only(
    tmp_path: Path, db_sessions: sessionmaker[Session]
) -> None:
    run_id = new_run(db_sessions)
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "events.out.tfevents.0.host").write_bytes(os.urandom(64))
    writer = SummaryWriter(log_dir=str(tmp_path / "tb"))
    writer.add_scalar("loss", 1.0, 0)
    writer.close()

    assert pump(run_id, tmp_path, db_sessions) == 2
    assert series(run_id, db_sessions)["loss"]["value"] == [1.0]
    assert "junk/events.out.tfevents.0.host" not in offsets(run_id, db_sessions)


def test_long_tags_are_clipped_and_stay_distinct(
    tmp_path: Path, db_sessions: sessionmaker[Session]
) -> None:
    run_id = new_run(db_sessions)
    writer = SummaryWriter(log_dir=str(tmp_path / "tb"))
    writer.add_scalar("x" * 300 + "a", 1.0, 0)
    writer.add_scalar("x" * 300 + "b", 2.0, 0)
    writer.close()

    pump(run_id, tmp_path, db_sessions)
    with db_sessions.begin() as session:
        keys = list_keys(session, run_id=run_id)
    assert len(keys) == 2
    assert all(len(k) == 255 and k.startswith("x" * 246 + "~") for k in keys)


def tensor_event(
    tag: str, step: int, tensor: TensorProto, plugin: str | None = None
) -> event_pb2.Event:
    value = summary_pb2.Summary.Value(tag=tag, tensor=tensor)
    if plugin is not None:
        value.metadata.plugin_data.plugin_name = plugin
    return event_pb2.Event(
        step=step, wall_time=100.0 + step, summary=summary_pb2.Summary(value=[value])
    )


def test_tf2_style_tensors_follow_the_plugin_of_their_first_event(
    tmp_path: Path, db_sessions: sessionmaker[Session]
) -> None:
    run_id = new_run(db_sessions)
    writer = EventFileWriter(str(tmp_path / "tf2"))
    events = [
        tensor_event("loss", 1, TensorProto(dtype=DT_FLOAT, float_val=[0.5]), "scalars"),
        tensor_event("loss", 2, TensorProto(dtype=DT_FLOAT, float_val=[0.25])),  # no metadata
        tensor_event("custom", 1, TensorProto(dtype=DT_FLOAT, float_val=[1.0]), "pr_curves"),
        tensor_event("custom", 2, TensorProto(dtype=DT_FLOAT, float_val=[2.0])),
        tensor_event(
            "packed", 1, TensorProto(dtype=DT_DOUBLE, tensor_content=struct.pack("<d", 0.1))
        ),
        tensor_event("count", 1, TensorProto(dtype=DT_INT64, int64_val=[7])),
        tensor_event("half", 1, TensorProto(dtype=DT_HALF, half_val=[0x3C00])),  # 1.0
        tensor_event(
            "vector",
            1,
            TensorProto(
                dtype=DT_FLOAT,
                float_val=[1.0, 2.0],
                tensor_shape=TensorShapeProto(dim=[TensorShapeProto.Dim(size=2)]),
            ),
        ),
        tensor_event("words", 1, TensorProto(dtype=DT_STRING, string_val=[b"hi"]), "text"),
    ]
    for event in events:
        writer.add_event(event)
    writer.close()

    pump(run_id, tmp_path, db_sessions)
    got = series(run_id, db_sessions)
    assert sorted(got) == ["count", "half", "loss", "packed"]
    assert got["loss"] == {"step": [1, 2], "value": [0.5, 0.25], "time": [101.0, 102.0]}
    assert got["packed"]["value"] == [0.1]
    assert got["count"]["value"] == [7.0]
    assert got["half"]["value"] == [1.0]


def test_with_a_crc32c_module_a_corrupt_record_is_skipped_unless_it_is_the_last(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, db_sessions: sessionmaker[Session]
) -> None:
    # No C crc32c module is installed here; the pure-Python one stands in for it.
    monkeypatch.setattr(tfrecord, "_CRC_FAST", tfrecord._crc32c_py)
    run_id = new_run(db_sessions)
    source = tmp_path.parent / f"{tmp_path.name}-source"
    writer = SummaryWriter(log_dir=str(source))
    sizes = [event_file(source).stat().st_size]  # after file_version
    for step in range(3):
        writer.add_scalar("loss", float(step), step)
        writer.flush()
        sizes.append(event_file(source).stat().st_size)
    writer.close()
    data = bytearray(event_file(source).read_bytes())
    data[sizes[1] + 14] ^= 0xFF  # inside step 1's event
    data[sizes[3] - 6] ^= 0xFF  # inside step 2's event, the last record

    copy = tmp_path / "tb" / event_file(source).name
    copy.parent.mkdir()
    copy.write_bytes(bytes(data))
    pump(run_id, tmp_path, db_sessions)
    assert series(run_id, db_sessions)["loss"]["step"] == [0]
    assert offsets(run_id, db_sessions) == {f"tb/{copy.name}": sizes[2]}  # waits at the last record


def test_what_is_not_ingested_is_named_once_in_the_runs_log(
    tmp_path: Path, db_sessions: sessionmaker[Session]
) -> None:
    import numpy as np

    run_id = new_run(db_sessions)
    writer = SummaryWriter(log_dir=str(tmp_path / "tb"))
    writer.add_scalar("loss", 1.0, 1)
    writer.add_image("samples", np.zeros((3, 4, 4)), 1)  # kept: not named
    writer.add_histogram("weights", np.arange(10.0), 1)
    writer.add_text("notes", "hello", 1)
    writer.flush()
    assert pump(run_id, tmp_path, db_sessions) > 0
    writer.add_histogram("weights", np.arange(5.0), 2)  # again, in a later batch
    writer.add_audio("sound", np.zeros(100), 2)
    writer.add_scalar("loss", 0.5, 2)
    writer.flush()
    assert pump(run_id, tmp_path, db_sessions) > 0
    writer.close()

    assert series(run_id, db_sessions)["loss"]["step"] == [1, 2]
    lines = (tmp_path / "output.log").read_text().splitlines()
    assert len(lines) == 3, lines
    assert any("TensorBoard histograms (tag 'weights')" in line for line in lines)
    assert any("TensorBoard text (tag 'notes/text_summary')" in line for line in lines)
    assert any("TensorBoard audio (tag 'sound')" in line for line in lines)
    assert all("scalars, images and hparams are read from event files" in line for line in lines)
    # the same sentences on the run (the run page and GET /api/runs/{id} show notice_lines)
    with db_sessions() as session:
        run = session.get(Run, run_id)
        assert run is not None
        assert sorted(notice_lines(run.notices)) == sorted(line[11:] for line in lines)


def test_a_worker_without_tensorboard_names_the_event_files_on_the_run_once(
    tmp_path: Path, db_sessions: sessionmaker[Session], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 29: a worker without the package ingested nothing and said so only on its own
    console; now the run's notices and log say it (once, however many batches)."""
    run_id = new_run(db_sessions)
    writer = SummaryWriter(log_dir=str(tmp_path / "tb"))
    writer.add_scalar("loss", 1.0, 1)
    writer.flush()
    monkeypatch.setitem(sys.modules, "tensorboard", None)  # as if it were not installed
    monkeypatch.setitem(sys.modules, "tensorboard.compat.proto.event_pb2", None)
    tensorboard_events._tensorboard_available.cache_clear()
    try:
        assert pump(run_id, tmp_path, db_sessions) == 0
        writer.add_scalar("loss", 0.5, 2)
        writer.flush()
        assert pump(run_id, tmp_path, db_sessions) == 0
    finally:
        monkeypatch.undo()
        tensorboard_events._tensorboard_available.cache_clear()
        writer.close()
    assert series(run_id, db_sessions) == {}
    with db_sessions() as session:
        run = session.get(Run, run_id)
        assert run is not None
        assert notice_lines(run.notices) == [tensorboard_events.MISSING_PACKAGE]
    lines = (tmp_path / "output.log").read_text().splitlines()
    assert lines == [f"torchyard: {tensorboard_events.MISSING_PACKAGE}"]


def test_notes_on_the_run_are_capped_whatever_plugin_names_a_job_invents(
    tmp_path: Path, db_sessions: sessionmaker[Session]
) -> None:
    run_id = new_run(db_sessions)
    events = [
        tensor_event(f"t{i}", 1, TensorProto(dtype=DT_FLOAT, float_val=[1.0]), f"plugin{i}")
        for i in range(MAX_TENSORBOARD_NOTES + 5)
    ]
    write_events(tmp_path, *(e.SerializeToString() for e in events), scalar_event("loss", 2.0, 1))
    while pump(run_id, tmp_path, db_sessions):
        pass
    assert series(run_id, db_sessions)["loss"]["value"] == [2.0]
    with db_sessions() as session:
        run = session.get(Run, run_id)
        assert run is not None
        assert len(notice_lines(run.notices)) == MAX_TENSORBOARD_NOTES
    assert len((tmp_path / "output.log").read_text().splitlines()) == MAX_TENSORBOARD_NOTES


# --- hostile bytes: hparams, images, record sizes, garbage ------------------------------------


def frame(data: bytes) -> bytes:
    """One TFRecord: length, its masked CRC, the data, its masked CRC."""
    length = struct.pack("<Q", len(data))
    return (
        length
        + struct.pack("<I", tfrecord.masked_crc32c(length))
        + data
        + struct.pack("<I", tfrecord.masked_crc32c(data))
    )


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field(number: int, payload: bytes) -> bytes:  # a length-delimited protobuf field
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def hparams_event(content: bytes, step: int = 0) -> bytes:
    value = summary_pb2.Summary.Value(tag="_hparams_/session_start_info")
    value.metadata.plugin_data.plugin_name = "hparams"
    value.metadata.plugin_data.content = content
    event = event_pb2.Event(step=step, wall_time=1.0)
    event.summary.value.append(value)
    return event.SerializeToString()


def session_start(hparams: dict[str, bytes]) -> bytes:
    """HParamsPluginData{session_start_info: {hparams: {name: Value}}} by hand."""
    entries = b"".join(
        field(1, field(1, name.encode()) + field(2, value)) for name, value in hparams.items()
    )
    return field(3, entries)


def number(x: float) -> bytes:
    return varint(2 << 3 | 1) + struct.pack("<d", x)  # Value.number_value


def nested_struct(depth: int) -> bytes:
    """A Value holding a Struct holding a Value ... `depth` deep."""
    value = number(1.0)
    for _ in range(depth):
        value = field(5, field(1, field(1, b"k") + field(2, value)))
    return value


def image_event(tag: str, encoded: bytes, width: int, height: int, step: int = 0) -> bytes:
    event = event_pb2.Event(step=step, wall_time=1.0)
    image = summary_pb2.Summary.Image(
        width=width, height=height, colorspace=3, encoded_image_string=encoded
    )
    event.summary.value.append(summary_pb2.Summary.Value(tag=tag, image=image))
    return event.SerializeToString()


def scalar_event(tag: str, value: float, step: int) -> bytes:
    event = event_pb2.Event(step=step, wall_time=1.0)
    event.summary.value.append(summary_pb2.Summary.Value(tag=tag, simple_value=value))
    return event.SerializeToString()


def write_events(run_dir: Path, *records: bytes) -> Path:
    path = run_dir / "tb" / "events.out.tfevents.1.hostile"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("ab") as f:
        f.write(b"".join(frame(r) for r in records))
    return path


def reported(run_id: int, sessions: sessionmaker[Session]) -> dict:
    from app.runs.query.params import params_by_run

    with sessions() as session:
        return params_by_run(session, [run_id])[run_id]


def test_hostile_hparams_payloads_are_skipped_and_the_rest_still_arrives(
    tmp_path: Path, db_sessions: sessionmaker[Session]
) -> None:
    run_id = new_run(db_sessions)
    write_events(
        tmp_path,
        hparams_event(os.urandom(300)),  # garbage
        hparams_event(b"\xff" * (2 * 1024 * 1024)),  # over the payload cap
        hparams_event(session_start({"deep": nested_struct(300)})),  # past protobuf's nesting
        hparams_event(session_start({"bad": field(3, b"\xff\xfe")})),  # not UTF-8
        hparams_event(session_start({"lr": number(0.5), "deep": nested_struct(3)})),
        hparams_event(session_start({f"k{i}": number(i) for i in range(300)})),
        hparams_event(session_start({"x" * 400: field(3, b"v" * 5000)})),
        scalar_event("loss", 1.0, 3),
    )
    while pump(run_id, tmp_path, db_sessions):
        pass
    params = reported(run_id, db_sessions)
    assert params["hparams.lr"] == 0.5
    assert "hparams.deep" not in params and "hparams.bad" not in params  # a struct: not a param
    assert len(params) == 256  # MAX_REPORTED: 255 of the k<i> after lr
    assert series(run_id, db_sessions)["loss"]["value"] == [1.0]
    log = (tmp_path / "output.log").read_text()
    assert "hparams that do not parse or are too large" in log
    assert "reported more than 256 names" in log


def test_hostile_image_summaries_keep_only_checked_png_and_jpeg(
    tmp_path: Path, db_sessions: sessionmaker[Session]
) -> None:
    from app.runs.files.images import list_images

    run_id = new_run(db_sessions)
    ihdr = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\x0dIHDR" + struct.pack(">II", 2**32 - 1, 7)
    write_events(
        tmp_path,
        image_event("html", b"<html><script>alert(1)</script>", 10, 10),
        image_event("empty", b"", 0, 0),
        image_event("<b>huge png</b>", ihdr + b"rest", 1, 1),
        image_event("jpeg", b"\xff\xd8\xff\xe0" + os.urandom(50), -5, 2**31 - 1),
        image_event("a\x00nul", b"\xff\xd8\xff" + b"x", 3, 4),
    )
    pump(run_id, tmp_path, db_sessions)
    with db_sessions.begin() as session:
        got = list_images(session, run_id=run_id)
    sizes = {tag: (i[0]["width"], i[0]["height"]) for tag, i in got.items()}
    assert sizes == {
        "<b>huge png</b>": (65535, 7),  # the PNG's own header, clamped
        "jpeg": (0, 65535),  # the summary's, clamped
        "a\ufffdnul": (3, 4),
    }
    assert "only PNG and JPEG images are kept" in (tmp_path / "output.log").read_text()


def test_a_record_over_the_cap_is_skipped_unread_and_an_impossible_length_waits(
    tmp_path: Path,
) -> None:
    path = write_events(tmp_path, scalar_event("a", 1.0, 0), b"z" * 5000, scalar_event("a", 2, 1))
    got = tfrecord.read_records(path.parent, path.name, 0, max_record=1000)
    assert len(got.data) == 2 and got.oversized == 1 and got.end == path.stat().st_size

    length = struct.pack("<Q", 2**62)  # a valid CRC on a length no file reaches
    with path.open("ab") as f:
        f.write(length + struct.pack("<I", tfrecord.masked_crc32c(length)) + b"abc")
    again = tfrecord.read_records(path.parent, path.name, got.end)
    assert again.data == [] and again.end == got.end and again.corrupt_at is None


def test_random_and_mutated_events_never_raise(tmp_path: Path) -> None:
    from worker.tensorboard_decode import decode_events

    rng = np.random.default_rng(7)
    valid = [
        scalar_event("loss", 1.0, 1),
        image_event("img", b"\x89PNG\r\n\x1a\nxxxx", 1, 1),
        hparams_event(session_start({"lr": number(0.1)})),
    ]
    records = [rng.bytes(int(n)) for n in rng.integers(0, 400, 300)]
    for base in valid:
        for _ in range(200):
            data = bytearray(base)
            for i in rng.integers(0, len(data), 3):
                data[i] = int(rng.integers(0, 256))
            records.append(bytes(data))
    decoded = decode_events(records, lambda tag: tag, {})
    assert isinstance(decoded.points, list)  # no exception is the point; nothing else to check


def test_thousands_of_images_in_one_batch_and_a_nan_wall_time_stay_bounded(
    tmp_path: Path, client, admin_headers
) -> None:
    from app.runs.files.images import list_images

    run_id = make_run()
    tiny = b"\x89PNG\r\n\x1a\n" + b"\x00" * 8
    events = []
    for step in range(5000):
        event = event_pb2.Event.FromString(image_event("flood", tiny, 1, 1, step))
        event.wall_time = math.nan
        events.append(event.SerializeToString())
    write_events(tmp_path, *events)
    with session_scope() as session:  # one call, a budget large enough for all of them
        forward_events(session, run_id=run_id, run_dir=tmp_path, max_bytes=10**7)
    with session_scope() as session:
        got = list_images(session, run_id=run_id)["flood"]
    assert len(got) <= 100 and got[-1]["step"] == 4999
    listed = client.get(f"/api/runs/{run_id}/images", headers=admin_headers)
    assert listed.status_code == 200 and listed.json()["tags"]["flood"][-1]["wall_time"] == 0.0


def test_tf2_image_tensors_keep_their_first_image(
    tmp_path: Path, db_sessions: sessionmaker[Session]
) -> None:
    from app.runs.files.images import list_images

    run_id = new_run(db_sessions)
    png = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\x0dIHDR" + struct.pack(">II", 3, 2) + b"..."
    writer = EventFileWriter(str(tmp_path / "tf2"))
    images = TensorProto(dtype=DT_STRING, string_val=[b"3", b"2", png, b"second sample"])
    writer.add_event(tensor_event("pics", 1, images, "images"))
    writer.add_event(tensor_event("pics", 2, images))  # metadata only with the first event
    writer.add_event(tensor_event("short", 1, TensorProto(dtype=DT_STRING), "images"))
    writer.close()
    pump(run_id, tmp_path, db_sessions)
    with db_sessions.begin() as session:
        got = list_images(session, run_id=run_id)
    assert [(i["step"], i["width"], i["height"]) for i in got["pics"]] == [(1, 3, 2), (2, 3, 2)]
    assert "short" not in got


def test_an_oversized_record_and_a_hostile_plugin_name_are_said_once_on_one_line(
    tmp_path: Path, db_sessions: sessionmaker[Session]
) -> None:
    run_id = new_run(db_sessions)
    evil = tensor_event("t", 1, TensorProto(dtype=DT_FLOAT, float_val=[1.0]), "x\ntorchyard: ok")
    write_events(
        tmp_path,
        evil.SerializeToString(),
        b"\x00" * (tfrecord.MAX_RECORD_BYTES + 1),  # skipped unread
        scalar_event("loss", 2.0, 1),
    )
    while pump(run_id, tmp_path, db_sessions):
        pass
    assert series(run_id, db_sessions)["loss"]["value"] == [2.0]
    lines = (tmp_path / "output.log").read_text().splitlines()
    assert len(lines) == 2, lines
    assert "TensorBoard x?torchyard: ok (tag 't')" in lines[1]
    assert lines[0].startswith("torchyard: TensorBoard: events over 16 MB (in 'tb/events.")


def test_scalars_under_sys_are_not_stored_and_said_once(
    tmp_path: Path, db_sessions: sessionmaker[Session]
) -> None:
    """sys/ is the worker's system series (worker/system_metrics.py): a script's own
    `sys/...` tag must neither forge nor block them."""
    run_id = new_run(db_sessions)
    writer = SummaryWriter(log_dir=str(tmp_path / "tb"))
    writer.add_scalar("sys/cpu_percent", 999.0, 1)
    writer.add_scalar("loss", 1.0, 1)
    writer.flush()
    assert pump(run_id, tmp_path, db_sessions) > 0
    writer.add_scalar("sys/rss_mb", 1.0, 2)
    writer.flush()
    assert pump(run_id, tmp_path, db_sessions) > 0
    writer.close()
    with db_sessions.begin() as session:
        assert list_keys(session, run_id=run_id) == ["loss"]
    lines = (tmp_path / "output.log").read_text().splitlines()
    assert len(lines) == 1 and "TensorBoard scalars under sys/ (tag 'sys/cpu_percent')" in lines[0]


def test_the_server_extra_installs_tensorboard_and_the_tests_rely_on_it() -> None:
    """Issue 29: after the README's install (`make up`: the server extra) a SummaryWriter
    script's scalars arrive. The test extra does not add tensorboard of its own, so every
    SummaryWriter test here and in test_e2e_*.py runs with what the server extra installs."""
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]

    def names(extra: str) -> set[str]:
        return {re.split(r"[<>=!~\[ ;]", req, maxsplit=1)[0] for req in extras[extra]}

    assert "tensorboard" in names("server")
    assert "tensorboard" not in names("test") and "torchyard[server]" in extras["test"]


def test_event_files_behind_a_link_are_never_found(tmp_path: Path) -> None:
    """Another run's TensorBoard folder linked into this one (or a folder swapped for such a
    link) must not feed its points into this run."""
    from worker.tensorboard_events import find_event_files

    other = tmp_path / "other" / "tb"
    other.mkdir(parents=True)
    header = struct.pack("<Q", 5)
    record = header + struct.pack("<I", tfrecord.masked_crc32c(header)) + b"hello"
    record += struct.pack("<I", tfrecord.masked_crc32c(b"hello"))
    (other / "events.out.tfevents.1.host").write_bytes(record)
    assert tfrecord.read_records(other, "events.out.tfevents.1.host", 0).data == [b"hello"]
    run_dir = tmp_path / "run"
    (run_dir / "tensorboard").mkdir(parents=True)
    (run_dir / "tensorboard" / "events.out.tfevents.2.host").write_bytes(b"")
    (run_dir / "linked").symlink_to(other)
    (run_dir / "tensorboard" / "events.out.tfevents.3.host").symlink_to(
        other / "events.out.tfevents.1.host"
    )
    files, _mtimes = find_event_files(run_dir)
    assert files == ["tensorboard/events.out.tfevents.2.host"]
    assert tfrecord.read_records(run_dir, "linked/events.out.tfevents.1.host", 0).data == []
