"""W&B offline runs (``wandb/offline-run-*/run-<id>.wandb``, what ``WANDB_MODE=offline`` leaves),
read with wandb's own record classes (the `import-wandb` extra: ``wandb.proto``). The framing
of the ``.wandb`` file (W&B's LevelDB-log-style datastore: a 7-byte file header, records of a
7-byte header ``crc32 | length | type`` in 32 KiB blocks, FULL or FIRST/MIDDLE/LAST pieces) is
read here: wandb 0.19+ reads it only in its Go core (`wandb sync`), with no Python reader.

Taken: the run record (id, display name, start time, tags, config flattened to dotted keys as a
launch config is), every history row's numeric values as points (step ``_step``, wall time
``_timestamp``), the exit code (0 = FINISHED, else FAILED; no exit record = KILLED, the process
died). Media, tables and other non-numeric history values are counted and said. A record cut
short or failing its checksum ends the file there, named with the byte offset.
"""

from __future__ import annotations

import json
import struct
import zlib
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from torchyard.cli.client import CliError
from torchyard.cli.importers.source import (
    FAILED,
    FINISHED,
    KILLED,
    Point,
    Skipped,
    SourceRun,
    flatten,
)

EXTRA = "import-wandb"
FILE_HEADER = b":W&B\xe1\xbe\x00"
BLOCK = 32768
_RECORD = struct.Struct("<IHB")
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


class WandbReader:
    kind = "wandb"

    def __init__(self, source: str) -> None:
        try:
            from wandb.proto import wandb_internal_pb2
        except ImportError:
            raise CliError(
                f"importing W&B offline runs needs wandb: pip install 'torchyard[{EXTRA}]'"
            ) from None
        self._record = wandb_internal_pb2.Record  # type: ignore[attr-defined]
        self.root = Path(source).resolve()
        if not self.root.is_dir():
            raise CliError(f"{source}: not a folder (a wandb folder of offline-run-* folders)")
        self.source = str(self.root)
        self.skipped: list[Skipped] = []

    def close(self) -> None:
        pass

    def runs(self) -> Iterator[SourceRun]:
        files = sorted(self.root.glob("**/offline-run-*/run-*.wandb"))
        if not files:
            raise CliError(f"{self.root}: no W&B offline runs (offline-run-*/run-*.wandb) under it")
        for path in files:
            run = self._run(path)
            if run is not None:
                yield run

    def _run(self, path: Path) -> SourceRun | None:
        series: dict[str, list[Point]] = defaultdict(list)
        other = 0
        run: Any = None
        params: dict[str, str] = {}
        exit_code: int | None = None
        for record in self._records(path):
            kind = record.WhichOneof("record_type")
            if kind == "run":
                run = record.run
                params.update(self._config(record.run.config.update))
            elif kind == "config":
                params.update(self._config(record.config.update))
            elif kind == "history":
                other += self._history(record.history, series)
            elif kind == "exit":
                exit_code = record.exit.exit_code
        if run is None:
            self.skipped.append(Skipped(str(path), "no run record: not a W&B run file"))
            return None
        if other:
            self.skipped.append(
                Skipped(str(path), f"{other} non-numeric history values not imported")
            )
        status = KILLED if exit_code is None else (FINISHED if exit_code == 0 else FAILED)
        start = run.start_time.seconds * 1000 + run.start_time.nanos // 1_000_000
        last = max((p.timestamp_ms for points in series.values() for p in points), default=None)
        return SourceRun(
            source_id=run.run_id,
            experiment=run.project or self.root.name,
            name=run.display_name or run.run_id,
            status=status,
            start_ms=start or None,
            end_ms=last,
            params=params,
            tags={f"wandb.tag.{t}": "true" for t in run.tags}
            | ({"wandb.group": run.run_group} if run.run_group else {}),
            series=lambda: iter(series.items()),
        )

    @staticmethod
    def _config(items: Any) -> dict[str, str]:
        found: dict[str, Any] = {}
        for item in items:
            key = item.key or ".".join(item.nested_key)
            if key.startswith("_wandb"):
                continue
            found[key] = json.loads(item.value_json)
        return flatten(found)

    @staticmethod
    def _history(history: Any, series: dict[str, list[Point]]) -> int:
        row = {
            (item.key or "/".join(item.nested_key)): json.loads(item.value_json)
            for item in history.item
        }
        step = row.get("_step", history.step.num)
        at = round(float(row.get("_timestamp", 0)) * 1000)
        other = 0
        for key, value in row.items():
            if key.startswith("_"):
                continue
            if isinstance(value, int | float) and not isinstance(value, bool):
                series[key].append(Point(int(step), float(value), at))
            else:
                other += 1
        return other

    def _records(self, path: Path) -> Iterator[Any]:
        data = path.read_bytes()
        if not data.startswith(FILE_HEADER):
            self.skipped.append(Skipped(str(path), "not a W&B run file (no :W&B header)"))
            return
        offset, pending = len(FILE_HEADER), b""
        while offset < len(data):
            space = BLOCK - offset % BLOCK
            if space < _RECORD.size:
                offset += space
                continue
            problem = None
            if len(data) - offset < _RECORD.size:
                problem = "truncated record header"
            else:
                crc, length, kind = _RECORD.unpack_from(data, offset)
                if crc == length == kind == 0:  # a block's zero padding
                    offset += space
                    continue
                body = data[offset + _RECORD.size : offset + _RECORD.size + length]
                if len(body) < length:
                    problem = "truncated record"
                elif zlib.crc32(body, zlib.crc32(bytes([kind]))) != crc:
                    problem = "corrupt record (checksum)"
            if problem is not None:
                self.skipped.append(
                    Skipped(str(path), f"{problem} at byte {offset}: the rest of the file")
                )
                return
            offset += _RECORD.size + length
            if kind == FIRST:
                pending = body
                continue
            if kind == MIDDLE:
                pending += body
                continue
            whole = pending + body if kind == LAST else body
            pending = b""
            yield self._record.FromString(whole)
