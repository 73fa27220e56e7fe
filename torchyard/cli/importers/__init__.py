"""`torchyard import mlflow|tensorboard|wandb|aim SOURCE [--experiment NAME]`: a team's history
from the tools it logged with before, into torchyard.

Each source is read with its own tool's library (an optional extra, named when missing before
anything is read: torchyard/cli/importers/*_source.py) and written through torchyard's MLflow
tracking API (torchyard/cli/importers/sink.py says why, and how a second import adds nothing).
Runs go into the experiment ``--experiment`` names (made when missing), else one of the
source's experiment's name. A progress bar while it works, a summary at the end: runs, points,
params, tags and files written, runs already there, and each thing skipped with why (the file
it is in). The exit code is 1 when anything was skipped for an error, else 0.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from torchyard.cli.client import CliError
from torchyard.cli.common import CLIENT_PANEL, ServerOpt, TokenOpt, connect, err
from torchyard.cli.importers.sink import Sink, Written
from torchyard.cli.importers.source import Reader, Skipped, SourceRun

WORKERS = 4

ExperimentOpt = Annotated[
    str | None,
    typer.Option(
        "--experiment",
        "-e",
        help="the experiment to import into (made when missing; default: the source's names)",
        show_default=False,
    ),
]
WorkersOpt = Annotated[int, typer.Option("--workers", min=1, max=32, help="runs imported at once")]


@dataclass
class Summary:
    runs: int = 0
    already: int = 0
    written: Written = field(default_factory=Written)
    failed: list[Skipped] = field(default_factory=list)
    experiments: set[str] = field(default_factory=set)

    def add(self, w: Written) -> None:
        self.runs += 1
        self.written.points += w.points
        self.written.params += w.params
        self.written.tags += w.tags
        self.written.files += w.files


def run_import(reader: Reader, sink: Sink, experiment: str | None, workers: int) -> Summary:
    summary = Summary()
    runs: list[tuple[SourceRun, str]] = []
    for run in reader.runs():
        name = experiment or run.experiment
        experiment_id = sink.experiment_id(name)
        summary.experiments.add(name)
        if run.source_id in sink.existing(experiment_id).complete:
            summary.already += 1
        else:
            runs.append((run, experiment_id))
    columns = (
        TextColumn("importing"), BarColumn(), MofNCompleteColumn(),
        TextColumn("runs, {task.fields[points]:,} points"), TimeElapsedColumn(),
    )  # fmt: skip
    with Progress(*columns, console=err, transient=True) as progress:
        task = progress.add_task("runs", total=len(runs), points=0)
        with ThreadPoolExecutor(max_workers=workers) as pool:
            futures = {pool.submit(sink.write, run, eid): run for run, eid in runs}
            for future in as_completed(futures):
                run = futures[future]
                try:
                    summary.add(future.result())
                except CliError as exc:
                    summary.failed.append(Skipped(f"run {run.source_id}", exc.message))
                except Exception as exc:  # the source's library failing on this run
                    summary.failed.append(Skipped(f"run {run.source_id}", repr(exc)[:300]))
                progress.update(task, advance=1, points=summary.written.points)
    return summary


def report(reader: Reader, summary: Summary) -> int:
    w = summary.written
    into = ", ".join(repr(e) for e in sorted(summary.experiments)) or "no experiment"
    err.print(
        f"imported {summary.runs} runs ({w.points:,} points, {w.params} params, {w.tags} tags, "
        f"{w.files} files) from {reader.kind} {reader.source} into {into}"
    )
    if summary.already:
        err.print(f"{summary.already} runs were imported before: skipped")
    problems = [*reader.skipped, *summary.failed]
    for item in problems:
        err.print(
            f"{'not imported' if _only_unsupported(item) else 'skipped'}: {item.where}: {item.why}"
        )
    return 1 if any(not _only_unsupported(p) for p in problems) else 0


def _only_unsupported(item: Skipped) -> bool:
    """A note that a kind of value is not imported: said, but not an error."""
    return item.why.endswith("values not imported")


def _do(open_reader: Callable[[], Reader], experiment: str | None, workers: int,
        server: str | None, token: str | None) -> None:  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the readers' libraries' deprecation chatter
        reader = open_reader()  # a missing extra is said here, before anything is read
        try:
            with connect(server, token) as api:
                sink = Sink(api, source=reader.source, kind=reader.kind)
                summary = run_import(reader, sink, experiment, workers)
        finally:
            reader.close()
    raise typer.Exit(report(reader, summary))


importer = typer.Typer(
    name="import",
    help="Import runs logged with MLflow, TensorBoard, W&B (offline runs) or Aim.",
    no_args_is_help=True,
)


@importer.command("mlflow")
def from_mlflow(
    source: Annotated[
        str, typer.Argument(help="a tracking server URI, an mlruns folder or an MLflow .db")
    ],
    experiment: ExperimentOpt = None,
    workers: WorkersOpt = WORKERS,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Every active run of an MLflow server or store: params, tags, every metric point,
    status and times, artifacts."""
    from torchyard.cli.importers.mlflow_source import MlflowReader

    _do(lambda: MlflowReader(source), experiment, workers, server, token)


@importer.command("tensorboard")
def from_tensorboard(
    source: Annotated[str, typer.Argument(help="a TensorBoard log dir")],
    experiment: ExperimentOpt = None,
    workers: WorkersOpt = WORKERS,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """One run per folder of event files: scalars (step, value, wall time) and hparams."""
    from torchyard.cli.importers.tensorboard_source import TensorboardReader

    _do(lambda: TensorboardReader(source), experiment, workers, server, token)


@importer.command("wandb")
def from_wandb(
    source: Annotated[str, typer.Argument(help="a wandb folder (of offline-run-* folders)")],
    experiment: ExperimentOpt = None,
    workers: WorkersOpt = WORKERS,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """W&B offline runs: config as params, every numeric history value, tags, exit status."""
    from torchyard.cli.importers.wandb_source import WandbReader

    _do(lambda: WandbReader(source), experiment, workers, server, token)


@importer.command("aim")
def from_aim(
    source: Annotated[str, typer.Argument(help="an Aim repository (the folder holding .aim)")],
    experiment: ExperimentOpt = None,
    workers: WorkersOpt = WORKERS,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Every run of an Aim repository, read with Aim's SDK: params, every metric point of
    every context (step, value, wall time), tags, status and times."""
    from torchyard.cli.importers.aim_source import AimReader

    _do(lambda: AimReader(source), experiment, workers, server, token)


def register(app: typer.Typer) -> None:
    app.add_typer(importer, rich_help_panel=CLIENT_PANEL)
