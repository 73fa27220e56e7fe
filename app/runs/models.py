from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Double,
    Enum,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    SmallInteger,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column

from app.orm_base import Base
from app.runs.state.status import RunStatus as RunStatus  # the status column's values
from app.timeutil import utcnow


class Run(Base):
    __tablename__ = "runs"

    id: Mapped[int] = mapped_column(primary_key=True)
    experiment_id: Mapped[int] = mapped_column(
        ForeignKey("experiments.id", ondelete="CASCADE"), index=True
    )
    owner_id: Mapped[int] = mapped_column(ForeignKey("users.id"), index=True)
    # Stored as its value in a VARCHAR(16) (no native enum, no CHECK: the schema is the one of
    # the migrations); only app.runs.state.lifecycle writes it (tests/test_lifecycle.py checks).
    status: Mapped[RunStatus] = mapped_column(
        Enum(
            RunStatus,
            native_enum=False,
            length=16,
            validate_strings=True,
            values_callable=lambda statuses: [s.value for s in statuses],
        ),
        default=RunStatus.queued,
        index=True,
    )
    config: Mapped[dict[str, Any]] = mapped_column(JSON)
    seed: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    exit_code: Mapped[int | None] = mapped_column(Integer)
    error: Mapped[str | None] = mapped_column(Text)
    worker_host: Mapped[str | None] = mapped_column(String(255))
    pid: Mapped[int | None] = mapped_column(Integer)
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    # Resume: the checkpoint this run starts from (path relative to the data dir's runs/).
    resume_from: Mapped[str | None] = mapped_column(String(500))
    # The forwarder's position in metrics.jsonl, so a restarted worker resumes, not replays
    # (app.runs.files.ingest_offsets, with tb_offsets).
    metrics_offset: Mapped[int] = mapped_column(BigInteger, default=0)
    # Higher starts first; within a priority, submit order (see app.gpus.scheduler).
    priority: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # What CUDA_VISIBLE_DEVICES was set to ("0,1"); "" for a run without GPUs.
    gpu_indices: Mapped[str | None] = mapped_column(String(255))
    # The reproducibility record: versions, packages, host, GPUs, seed, and for scripts the
    # workspace's git commit and diff (app.runs.files.environment_record, its one writer).
    environment: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    # TensorBoard ingestion: byte offset reached in each event file, by path under the run dir,
    # moved in the same transaction as the points (app.runs.files.ingest_offsets).
    tb_offsets: Mapped[dict[str, int] | None] = mapped_column(JSON)
    # Liveness: the worker running the run stamps this; a stale stamp means "worker lost".
    heartbeat_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # 1 for the first try; a requeue after a lost worker (max_restarts) counts up.
    attempt: Mapped[int] = mapped_column(Integer, default=1, server_default="1")
    # The number of the queued run's current broker message (each message carries it; an
    # older one is dropped on delivery), and when that message last came by a worker: a queued
    # run not seen for queue_resend_seconds lost its message and is sent again
    # (app.runs.state.dispatch).
    dispatch: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    task_seen_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # Bytes of output.log already shipped to run_log_chunks (app.runs.files.log_store).
    log_offset: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    # What ingestion kept out of the run: spool lines skipped by reason, limits hit, an error
    # (app.runs.state.notices); None while there is nothing to say.
    notices: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    # What people call the run, and what they wrote about it (PATCH /api/runs/{id}); its tags
    # are rows of run_tags. Limits in app.runs.schemas.RunPatch.
    name: Mapped[str | None] = mapped_column(String(200))
    notes: Mapped[str | None] = mapped_column(Text)
    # The sweep that launched the run (app.sweeps); NULL for a run launched by hand. No foreign
    # key, on purpose: adding one on SQLite is a batch copy of the runs table, whose DROP would
    # cascade to every child table (migration 0012); sweep_trials.run_id is the link the
    # database enforces.
    sweep_id: Mapped[int | None] = mapped_column(Integer, index=True)
    # Bytes of the run's folder when it ended, measured by its worker (app.runs.files.disk); NULL
    # until then, when its disk use is its checkpoints' sizes.
    disk_bytes: Mapped[int | None] = mapped_column(BigInteger)
    # What created the run when no job of torchyard's runs it: "mlflow" for a run a client
    # logged through the MLflow API (app/mlflow); NULL for a torchyard job. Such a run's
    # status is its client's (app.runs.state.lifecycle open_external/end_external) and no reaper
    # fails it for want of a worker's heartbeat.
    origin: Mapped[str | None] = mapped_column(String(16))
    # The run's environment build (worker/env_build.py): when it began and pip's last line
    # while it works; and when the job itself started, from which the run's duration counts
    # (the build's time is shown apart). Written by app.runs.state.lifecycle only;
    # app.runs.state.phase derives the phase ("building environment", "training") from them.
    env_build_started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    env_build_line: Mapped[str | None] = mapped_column(String(500))
    training_started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # The current attempt's job in an outside scheduler (worker.executor: a Slurm job id), set
    # when its worker handed the attempt over; and, while that scheduler holds it pending, its
    # own reason and start estimate ("Resources; starts 2026-12-06T18:00"), the queue reason.
    external_id: Mapped[str | None] = mapped_column(String(64))
    external_reason: Mapped[str | None] = mapped_column(String(255))


class RunTag(Base):
    """One tag of a run; a row per tag so a runs list filters by tag with an index."""

    __tablename__ = "run_tags"
    __table_args__ = (Index("ix_run_tags_tag", "tag"),)

    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    tag: Mapped[str] = mapped_column(String(64), primary_key=True)


class Checkpoint(Base):
    """A checkpoint a run wrote; written by app.runs.files.checkpoint_records (and removed with its
    run by app.runs.deletion)."""

    __tablename__ = "checkpoints"

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(255))
    epoch: Mapped[int] = mapped_column(Integer)
    step: Mapped[int] = mapped_column(BigInteger)
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    path: Mapped[str] = mapped_column(String(500))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    # Where the file is in the shared artifact store, once the worker has uploaded it.
    uri: Mapped[str | None] = mapped_column(String(1000))


class RunLogChunk(Base):
    """A piece of a run's output.log, shipped by the worker so the API can serve the log
    without sharing the worker's disk. Chunks tile the file: offset = bytes before it. A
    multi-node run has one such file per node (``node``), each tiled on its own.
    Written and read by app.runs.files.log_store (and removed with its run by app.runs.deletion)."""

    __tablename__ = "run_log_chunks"

    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    # Which node's output.log (0 on a single host): a multi-node run's hosts each ship their own.
    node: Mapped[int] = mapped_column(SmallInteger, primary_key=True, default=0, server_default="0")
    offset: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    data: Mapped[bytes] = mapped_column(LargeBinary)


class RunParam(Base):
    """One of a run's params, flattened to a dotted key: the launch config's (source "config",
    written when the run is queued: ``params.lr``, ``seed``, ``resources.nproc``) and those the
    job reported as TensorBoard hparams (source "reported", key ``hparams.<name>``). ``value`` is
    the JSON value; ``value_num`` (numbers and bools) and ``value_text`` (strings, cut to 255)
    let a runs list sort and filter by a param in SQL (app/runs/query/params.py)."""

    __tablename__ = "run_params"
    __table_args__ = (
        Index("ix_run_params_key_num", "key", "value_num"),
        Index("ix_run_params_key_text", "key", "value_text"),
    )

    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    key: Mapped[str] = mapped_column(String(255), primary_key=True)
    source: Mapped[str] = mapped_column(String(16))
    value: Mapped[Any] = mapped_column(JSON, nullable=True)  # JSON null: NaN, None
    value_num: Mapped[float | None] = mapped_column(Double)
    value_text: Mapped[str | None] = mapped_column(String(255))


class RunImage(Base):
    """An image a job logged with TensorBoard (``add_image``, ``add_figure``): the encoded PNG or
    JPEG itself, in the database, so the API serves it whatever host ran the job. One per
    (run, tag, step); a newer one for the same step replaces the row (a new id, so an id's
    bytes never change). Caps and thinning in app/runs/files/images.py."""

    __tablename__ = "run_images"
    __table_args__ = (UniqueConstraint("run_id", "tag", "step"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    tag: Mapped[str] = mapped_column(String(255))
    step: Mapped[int] = mapped_column(BigInteger)
    wall_time: Mapped[float] = mapped_column(Double)
    width: Mapped[int] = mapped_column(Integer)
    height: Mapped[int] = mapped_column(Integer)
    size_bytes: Mapped[int] = mapped_column(Integer)
    data: Mapped[bytes] = mapped_column(LargeBinary)


class RunNode(Base):
    """One host's node of a multi-node run's current attempt (app.runs.nodes writes it): the
    barrier every node reports ready at before any starts, node 0's rendezvous port, each
    node's heartbeat (a node whose worker is lost fails the run as one) and how it ended."""

    __tablename__ = "run_nodes"

    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    node: Mapped[int] = mapped_column(Integer, primary_key=True)
    attempt: Mapped[int] = mapped_column(Integer)
    host: Mapped[str] = mapped_column(String(255))
    gpu_indices: Mapped[str] = mapped_column(String(255), default="")
    # when its worker took the node's task: a redelivered task finds it taken and does nothing
    taken_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    ready_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    # node 0's only: the rendezvous port it picked when it reported ready
    port: Mapped[int | None] = mapped_column(Integer, nullable=True)
    heartbeat_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # its first failing rank's error (worker.job_errors) and when that rank failed (epoch s)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    failed_at: Mapped[float | None] = mapped_column(Double, nullable=True)
