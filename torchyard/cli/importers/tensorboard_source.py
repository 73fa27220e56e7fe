"""A TensorBoard log dir, read with the tensorboard package's own protobuf classes (the
`import-tensorboard` extra: tensorboard, no TensorFlow): one run per folder that holds event
files (``events.out.tfevents.*``), named by its path under the log dir, as TensorBoard's own
run list names them.

Taken: scalars (``simple_value``, torch's ``add_scalar`` and TF1; a one-element numeric
``tensor``, TF2) as points with their step and wall time; hparams (the hparams plugin's
session start info, torch's ``add_hparams``) as params. Other summaries (images, histograms,
text, ...) are counted and said in the summary, not imported. A record cut short (a truncated
file, a writer killed mid-write) or failing its checksum ends that file's reading there: the
points before it are imported and the file is named with the byte offset.
"""

from __future__ import annotations

import struct
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from torchyard.cli.client import CliError
from torchyard.cli.importers.source import Point, Skipped, SourceRun

EXTRA = "import-tensorboard"
EVENT_FILE = "events.out.tfevents."
HPARAMS = "hparams"
_HEADER = struct.Struct("<QI")
_CRC = struct.Struct("<I")


class TensorboardReader:
    kind = "tensorboard"

    def __init__(self, source: str) -> None:
        try:
            from tensorboard.compat.proto import event_pb2
            from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c
            from tensorboard.plugins.hparams import plugin_data_pb2
            from tensorboard.util import tensor_util
        except ImportError:
            raise CliError(
                f"importing TensorBoard logs needs tensorboard: pip install 'torchyard[{EXTRA}]'"
            ) from None
        self._event = event_pb2.Event
        self._crc = masked_crc32c
        # the data's checksum only with the C crc32c (in pure Python it costs ten times the
        # parse); the length's always (8 bytes), so a garbage length is never trusted
        self._check_data = _has_fast_crc()
        self._hparams = plugin_data_pb2.HParamsPluginData
        self._ndarray = tensor_util.make_ndarray
        self.root = Path(source).resolve()
        if not self.root.is_dir():
            raise CliError(f"{source}: not a folder (a TensorBoard log dir)")
        self.source = str(self.root)
        self.skipped: list[Skipped] = []

    def close(self) -> None:
        pass

    def runs(self) -> Iterator[SourceRun]:
        folders: dict[Path, list[Path]] = defaultdict(list)
        for path in sorted(self.root.rglob(f"{EVENT_FILE}*")):
            if path.is_file():
                folders[path.parent].append(path)
        if not folders:
            raise CliError(f"{self.root}: no TensorBoard event files ({EVENT_FILE}*) under it")
        for folder, files in folders.items():
            yield self._run(folder, files)

    def _run(self, folder: Path, files: list[Path]) -> SourceRun:
        relative = folder.relative_to(self.root).as_posix()
        series: dict[str, list[Point]] = defaultdict(list)
        params: dict[str, str] = {}
        other: dict[str, int] = defaultdict(int)
        times: list[float] = []
        for path in files:
            for event in self._events(path):
                times.append(event.wall_time)
                for value in event.summary.value:
                    self._value(event, value, series, params, other)
        for kind, count in sorted(other.items()):
            self.skipped.append(Skipped(str(folder), f"{count} {kind} values not imported"))
        run_series = {
            k: sorted(v, key=lambda p: (p.step, p.timestamp_ms)) for k, v in series.items()
        }
        return SourceRun(
            source_id=relative,
            experiment=self.root.name,
            name=relative if relative != "." else self.root.name,
            start_ms=round(min(times) * 1000) if times else None,
            end_ms=round(max(times) * 1000) if times else None,
            params=params,
            series=lambda: iter(run_series.items()),
        )

    def _value(
        self,
        event: Any,
        value: Any,
        series: dict[str, list[Point]],
        params: dict[str, str],
        other: dict[str, int],
    ) -> None:
        plugin = value.metadata.plugin_data.plugin_name
        kind = value.WhichOneof("value")
        at = round(event.wall_time * 1000)
        if plugin == HPARAMS:
            params.update(self._hparams_of(value.metadata.plugin_data.content))
        elif kind == "simple_value":
            series[value.tag].append(Point(event.step, float(value.simple_value), at))
        elif kind == "tensor" and plugin in ("", "scalars"):
            array = self._ndarray(value.tensor)
            if array.size == 1 and array.dtype.kind in "fiub":
                series[value.tag].append(Point(event.step, float(array.reshape(())), at))
            else:
                other[plugin or "tensor"] += 1
        elif kind is not None:
            other[plugin or kind] += 1

    def _hparams_of(self, content: bytes) -> dict[str, str]:
        data = self._hparams.FromString(content)
        if data.WhichOneof("data") != "session_start_info":
            return {}
        found = {}
        for name, v in data.session_start_info.hparams.items():
            which = v.WhichOneof("kind")
            if which == "number_value":
                number = v.number_value
                found[name] = str(int(number)) if number.is_integer() else repr(number)
            elif which == "bool_value":
                found[name] = str(v.bool_value)
            elif which == "string_value":
                found[name] = v.string_value
        return found

    def _events(self, path: Path) -> Iterator[Any]:
        """Every event of a TFRecord file; a record cut short or failing its checksum ends the
        file there, said with the offset."""
        data = path.read_bytes()
        offset = 0
        while offset < len(data):
            problem = None
            if len(data) - offset < _HEADER.size + _CRC.size:
                problem = "truncated record header"
            else:
                length, length_crc = _HEADER.unpack_from(data, offset)
                body = offset + _HEADER.size
                if self._crc(data[offset : offset + 8]) != length_crc:
                    problem = "corrupt record length"
                elif body + length + _CRC.size > len(data):
                    problem = "truncated record"
                else:
                    record = data[body : body + length]
                    (record_crc,) = _CRC.unpack_from(data, body + length)
                    if self._check_data and self._crc(record) != record_crc:
                        problem = "corrupt record (checksum)"
            if problem is not None:
                self.skipped.append(
                    Skipped(str(path), f"{problem} at byte {offset}: the rest of the file")
                )
                return
            yield self._event.FromString(record)
            offset = body + length + _CRC.size


def _has_fast_crc() -> bool:
    try:
        import google_crc32c  # type: ignore[import-not-found, unused-ignore]  # noqa: F401
    except ImportError:
        return False
    return True
