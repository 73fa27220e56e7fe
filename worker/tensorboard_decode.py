"""What torchyard takes from serialized TensorBoard `Event`s: scalars, hparams and images.

Parsed with the generated protobuf classes the tensorboard package ships (its `compat.proto`
and the hparams plugin's `plugin_data_pb2`: message classes only, no TensorFlow, no torch, no
summary code), imported on first use. Every byte is the job's, so hostile: a record that does
not parse is skipped, an hparams payload over MAX_HPARAMS_BYTES is skipped, numbers are
checked, and nothing here allocates more than the record (bounded by worker.tfrecord) holds.

What is taken (anything else is reported in `skipped` by kind, with one of its tags):
- scalars, as points (key, step, value, wall_time): `value.simple_value` (torch's
  `add_scalar`, TF1 summaries), or a one-element numeric `value.tensor` of the "scalars"
  plugin (TF2). TF2 writes the plugin metadata only with a tag's first event, so a tensor
  without metadata counts when its tag was seen as "scalars" before or its plugin is unknown;
- hparams: the session start info of the "hparams" plugin (torch's `add_hparams`, Lightning's
  `log_hyperparams`, TF2's `hp.hparams`): name -> number, string or bool. Its experiment and
  session end summaries carry no values and are passed over silently;
- images: `value.image` (torch's `add_image`, `add_images`, `add_figure`), and the first
  image of a TF2 "images" plugin tensor ([width, height, encoded...] strings).
"""

from __future__ import annotations

import logging
import math
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from app.metrics.ingest import Point
from app.runs.files.images import Image

log = logging.getLogger(__name__)

HPARAMS_PLUGIN = "hparams"
MAX_HPARAMS_BYTES = 1024 * 1024
DT_STRING = 7


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

# What a summary value or an event holds that is not ingested, named as the run's log says it.
_VALUE_KINDS = {"histo": "histograms", "audio": "audio"}
_NOT_INGESTED_EVENTS = {
    "graph_def": "graph",
    "meta_graph_def": "graph",
    "tagged_run_metadata": "run metadata",
}


def _printable(name: str) -> str:
    """A plugin's name as the run's log may say it: the job chose it (no line breaks)."""
    shown = "".join(c if c.isprintable() else "?" for c in name[:64])
    return shown + ("..." if len(name) > 64 else "")


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


def _dimension(raw: bytes) -> int:
    try:
        return int(raw[:10].decode("ascii")) if raw.isdigit() else 0
    except ValueError:
        return 0


def _tensor_image(tensor: Any) -> tuple[int, int, bytes] | None:
    """(width, height, first encoded image) of a TF2 images-plugin tensor."""
    if tensor.dtype != DT_STRING or len(tensor.string_val) < 3:
        return None
    width, height, data = tensor.string_val[0], tensor.string_val[1], tensor.string_val[2]
    return _dimension(width), _dimension(height), bytes(data)


def decode_hparams(content: bytes) -> dict[str, Any] | None:
    """name -> value of an hparams plugin payload's session start info; {} for its other
    summaries (experiment, session end); None when it does not parse or is too large."""
    if len(content) > MAX_HPARAMS_BYTES:
        return None
    from google.protobuf.message import DecodeError
    from tensorboard.plugins.hparams import plugin_data_pb2

    data = plugin_data_pb2.HParamsPluginData()
    try:
        data.ParseFromString(content)
    except (DecodeError, RecursionError, ValueError):
        return None
    if data.WhichOneof("data") != "session_start_info":
        return {}
    values: dict[str, Any] = {}
    for name, value in data.session_start_info.hparams.items():
        kind = value.WhichOneof("kind")
        if kind == "number_value":
            number = value.number_value
            values[name] = int(number) if number.is_integer() and abs(number) < 2**53 else number
        elif kind == "string_value":
            values[name] = value.string_value
        elif kind == "bool_value":
            values[name] = value.bool_value
    return values


@dataclass
class Decoded:
    """What one batch of records held."""

    points: list[Point] = field(default_factory=list)
    hparams: dict[str, Any] = field(default_factory=dict)  # later reports win
    images: list[Image] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # kind -> one of its tags


def decode_events(
    records: Iterable[bytes],
    key_of: Callable[[str], str],
    plugins: dict[str, str],
    out: Decoded | None = None,
) -> Decoded:
    """Scalars, hparams and images of serialized Events. `plugins` (tag -> plugin name)
    remembers TF2 metadata across calls for one file."""
    out = Decoded() if out is None else out
    skipped = out.skipped
    from google.protobuf.message import DecodeError
    from tensorboard.compat.proto import event_pb2

    event = event_pb2.Event()
    for data in records:
        try:
            event.ParseFromString(data)
        except (DecodeError, RecursionError, ValueError):
            log.warning("skipping an event that does not parse (%d bytes)", len(data))
            continue
        what = event.WhichOneof("what")
        if what != "summary":
            if what in _NOT_INGESTED_EVENTS:
                skipped.setdefault(_NOT_INGESTED_EVENTS[what], "")
            continue
        for v in event.summary.value:
            plugin = v.metadata.plugin_data.plugin_name if v.HasField("metadata") else ""
            if plugin:
                plugins[v.tag] = plugin
            else:
                plugin = plugins.get(v.tag, "")
            if plugin == HPARAMS_PLUGIN:
                found = decode_hparams(v.metadata.plugin_data.content)
                if found is None:
                    skipped.setdefault("hparams that do not parse or are too large", v.tag)
                else:
                    out.hparams.update(found)
                continue
            kind = v.WhichOneof("value")
            value: float | None
            if kind == "simple_value":
                value = v.simple_value
            elif kind == "image":
                image = v.image
                out.images.append(
                    Image(
                        v.tag,
                        event.step,
                        event.wall_time,
                        image.width,
                        image.height,
                        image.encoded_image_string,
                    )
                )
                continue
            elif kind == "tensor" and plugin == "images":
                found_image = _tensor_image(v.tensor)
                if found_image is None:
                    skipped.setdefault("image tensors", v.tag)
                else:
                    width, height, encoded = found_image
                    image_ = Image(v.tag, event.step, event.wall_time, width, height, encoded)
                    out.images.append(image_)
                continue
            elif kind == "tensor":
                if plugin not in ("", "scalars"):
                    skipped.setdefault(_printable(plugin), v.tag)
                    continue
                value = _tensor_scalar(v.tensor)
                if value is None:
                    skipped.setdefault("tensors", v.tag)
                    continue
            else:
                skipped.setdefault(_VALUE_KINDS.get(kind or "", kind or "empty values"), v.tag)
                continue
            if v.tag:
                out.points.append((key_of(v.tag), event.step, value, event.wall_time))
    return out
