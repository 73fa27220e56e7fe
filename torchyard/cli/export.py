"""`torchyard export EXPERIMENT`: the team's runs out into a file pandas reads.

Two shapes, as the peers give them: the runs table (one row per run: id, name, status, times,
tags, every param under its own key, every metric's last value as `metrics.<key>`, the
columns `mlflow.search_runs()` users know) and, with `--series`, the full series in long form
(run, key, step, value). CSV by default (standard output without `-o`) or Parquet (pyarrow is
in the base install; an install without it is told so before anything is fetched). Every column
has one type whatever the mix of the runs' origins (torchyard.cli.export_types).
"""

from __future__ import annotations

import csv
import io
import json
import sys
from collections.abc import Iterator
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from torchyard.cli import endpoints as ep
from torchyard.cli.client import Api, CliError
from torchyard.cli.common import CLIENT_PANEL, ServerOpt, TokenOpt, connect, err
from torchyard.cli.export_types import Kind, typed

PAGE = 1000
RUN_COLUMNS = (
    "id", "name", "status", "owner_id", "created_at", "started_at", "finished_at", "tags"
)  # fmt: skip
SERIES_COLUMNS = ("run_id", "run_name", "key", "step", "value")


class Format(StrEnum):
    csv = "csv"
    parquet = "parquet"


def find_experiment(api: Api, ref: str) -> dict[str, Any]:
    """An experiment by id, or by its exact name."""
    if ref.isdigit():
        return dict(api.json(ep.EXPERIMENT(experiment_id=ref)))
    matches = [e for e in api.json(ep.EXPERIMENTS()) if e.get("name") == ref]
    if not matches:
        raise CliError(f"no experiment named {ref!r} (give its id or exact name)")
    if len(matches) > 1:
        ids = ", ".join(str(e["id"]) for e in matches)
        raise CliError(f"several experiments are named {ref!r} (ids {ids}): give the id")
    return dict(matches[0])


def experiment_runs(
    api: Api, experiment_id: int, filters: list[str] | None = None
) -> Iterator[dict[str, Any]]:
    """The experiment's runs (those ``filters`` keep: the filter language), each with every
    metric summary: a list cuts a run's summaries (``summary_cut``), so such a run is read
    again on its own (GET /api/runs/{id} has them all)."""
    cursor: str | None = None
    while True:
        params: dict[str, Any] = {"experiment_id": experiment_id, "limit": PAGE, "sort": "id"}
        params["filter"] = filters or []
        if cursor:
            params["cursor"] = cursor
        page = api.json(ep.RUNS(), params=params)
        for run in page["runs"]:
            yield dict(api.json(ep.RUN(run_id=run["id"]))) if run.get("summary_cut") else run
        cursor = page.get("next")
        if not cursor:
            return


def cell(value: Any) -> Any:
    """A scalar as it is; a list or mapping as JSON (a CSV cell holds one value)."""
    if isinstance(value, list | dict):
        return json.dumps(value, sort_keys=True)
    return value


def run_rows(runs: list[dict[str, Any]]) -> tuple[list[str], list[dict[str, Any]]]:
    """The runs table: fixed columns, then every param key, then every metric's last value,
    each in sorted order (the union over the runs; a run without one has an empty cell)."""
    param_keys = sorted({k for run in runs for k in run.get("params") or {}})
    metric_keys = sorted({k for run in runs for k in run.get("summary") or {}})
    columns = [*RUN_COLUMNS, *param_keys, *(f"metrics.{k}" for k in metric_keys)]
    rows = []
    for run in runs:
        row: dict[str, Any] = {c: cell(run.get(c)) for c in RUN_COLUMNS}
        row["tags"] = ",".join(run.get("tags") or [])
        row.update({k: cell(v) for k, v in (run.get("params") or {}).items()})
        for key, summary in (run.get("summary") or {}).items():
            row[f"metrics.{key}"] = summary.get("last")
        rows.append(row)
    return columns, rows


def series_rows(api: Api, runs: list[dict[str, Any]], keys: list[str]) -> list[dict[str, Any]]:
    rows = []
    for run in runs:
        found = api.json(ep.RUN_METRICS(run_id=run["id"]), params={"keys": ",".join(keys)})
        for key in keys:
            series = found["series"].get(key)
            if not series:
                continue
            for step, value in zip(series["step"], series["value"], strict=True):
                rows.append(
                    {"run_id": run["id"], "run_name": run.get("name"), "key": key,
                     "step": step, "value": value}
                )  # fmt: skip
    return rows


def write_csv(columns: list[str], rows: list[dict[str, Any]], output: Path | None) -> None:
    buffer = io.StringIO(newline="")
    writer = csv.DictWriter(buffer, fieldnames=columns, extrasaction="ignore")
    writer.writeheader()
    writer.writerows(typed(columns, rows)[1])
    if output is None:
        sys.stdout.write(buffer.getvalue())
        sys.stdout.flush()
    else:
        output.write_text(buffer.getvalue(), newline="")


def parquet_writer() -> Any:
    """pyarrow's parquet module, asked for before anything is fetched: an install without it
    (the base install has it) hears how to get it, not a traceback after the download."""
    try:
        import pyarrow.parquet as pq  # type: ignore[import-not-found, unused-ignore]
    except ImportError as exc:
        raise CliError(
            f"--format parquet needs pyarrow, which this install lacks ({exc}): "
            "pip install pyarrow (or reinstall torchyard, which requires it)"
        ) from None
    return pq


ARROW_TYPES = {Kind.BOOL: "bool_", Kind.INT: "int64", Kind.FLOAT: "float64", Kind.TEXT: "string"}


def write_parquet(columns: list[str], rows: list[dict[str, Any]], output: Path) -> None:
    pq = parquet_writer()
    import pyarrow as pa  # type: ignore[import-not-found, unused-ignore]

    kinds, converted = typed(columns, rows)
    try:
        arrays = [
            pa.array([row[c] for row in converted], type=getattr(pa, ARROW_TYPES[kinds[c]])())
            for c in columns
        ]
        pq.write_table(pa.Table.from_arrays(arrays, names=columns), str(output))
    except (pa.ArrowException, OSError) as exc:
        raise CliError(f"could not write {output} as Parquet: {exc}") from None


def export(
    experiment: Annotated[
        str, typer.Argument(metavar="EXPERIMENT", help="experiment id or exact name")
    ],
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="file (default: CSV to standard output)")
    ] = None,
    format: Annotated[Format, typer.Option("--format", help="csv or parquet")] = Format.csv,
    series: Annotated[
        list[str] | None,
        typer.Option("--series", help="a metric key whose every point to write (repeatable)"),
    ] = None,
    where: Annotated[
        list[str] | None,
        typer.Option("--filter", help="only the runs this filter keeps, e.g. 'val/acc>0.9'"),
    ] = None,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Write an experiment's runs table (one row per run: id, name, status, params, last
    metrics), or with --series the full series of those keys, as CSV or Parquet."""
    if format is Format.parquet and output is None:
        raise typer.BadParameter("Parquet is binary: give a file with -o", param_hint="--format")
    if format is Format.parquet:
        parquet_writer()  # a missing pyarrow said before any data is fetched
    with connect(server, token) as api:
        found = find_experiment(api, experiment)
        runs = list(experiment_runs(api, int(found["id"]), where))
        if series:
            columns, rows = list(SERIES_COLUMNS), series_rows(api, runs, series)
        else:
            columns, rows = run_rows(runs)
    if format is Format.parquet:
        assert output is not None
        write_parquet(columns, rows, output)
    else:
        write_csv(columns, rows, output)
    if output is not None:
        what = f"{len(rows)} points" if series else f"{len(rows)} runs"
        err.print(f"wrote {output} ({what} of experiment {found['id']} {found.get('name')!r})")


def register(app: typer.Typer) -> None:
    app.command(rich_help_panel=CLIENT_PANEL)(export)
