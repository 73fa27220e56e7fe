"""The contract between the worker (host agent) and the job it launches.

Both sides import these names from here and nowhere else: the environment variables the
launcher sets, the file names inside a run directory, and the parts of a run's config that
decide how it is launched. Standard library only, so the worker can import it without torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from string import Template

# --- environment variables set by the launcher -------------------------------------------
RUN_ID_VAR = "TORCHYARD_RUN_ID"
RUN_DIR_VAR = "TORCHYARD_RUN_DIR"
CONFIG_VAR = "TORCHYARD_CONFIG"
RESUME_FROM_VAR = "TORCHYARD_RESUME_FROM"
# Marks every process of a run (torchrun's workers start new sessions, so a process group
# does not hold them all).
JOB_TOKEN_VAR = "TORCHYARD_JOB_TOKEN"
TENSORBOARD_DIR_VAR = "TORCHYARD_TENSORBOARD_DIR"
SCRIPT_VAR = "TORCHYARD_SCRIPT"
SCRIPT_ARGV_VAR = "TORCHYARD_SCRIPT_ARGV"
WORKSPACE_VAR = "TORCHYARD_WORKSPACE"
# Seconds a finished job may spend ending its threads and atexit handlers (default 30).
EXIT_GRACE_VAR = "TORCHYARD_EXIT_GRACE_SECONDS"
# torchrun's per-line prefix of each rank's output (string.Template, ${rank} = global rank).
LOG_LINE_PREFIX_VAR = "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"
# Backpressure on the spool (torchyard.runtime.ingest_mark): the reporter holds back while more
# than this many bytes it wrote are not ingested yet (0 or unset: never), as long as the
# worker's mark is fresher than the second variable's seconds (a worker gone or frozen: it
# spools as if there were no worker).
SPOOL_BACKLOG_VAR = "TORCHYARD_SPOOL_BACKLOG_BYTES"
SPOOL_MARK_FRESH_VAR = "TORCHYARD_SPOOL_MARK_FRESH_SECONDS"
# ... and while the oldest point it wrote that is not ingested yet was logged more than this
# many seconds ago (0 or unset: no age bound): what a live viewer lags by under a flood.
SPOOL_MAX_AGE_VAR = "TORCHYARD_SPOOL_MAX_AGE_SECONDS"
LOG_LINE_PREFIX_TEMPLATE = "[rank${rank}]: "
# What torchrun tells each rank. A single plain process gets none of them: code that starts
# its own ranks (Lightning, accelerate) reads them as "I am one of WORLD_SIZE launched ranks".
DISTRIBUTED_VARS = (
    "RANK",
    "LOCAL_RANK",
    "GROUP_RANK",
    "ROLE_RANK",
    "ROLE_NAME",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_WORLD_SIZE",
    "ROLE_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS",
    "TORCHELASTIC_USE_AGENT_STORE",
)

# --- the environment a job gets -----------------------------------------------------------
# The worker's own variables never reach a job (worker.sandbox.job_environment), and a run's
# config `env` may not set them (app.experiments.config.model.RunConfig): torchyard's own, the
# database, the broker, the cloud credentials (the artifact store) and anything named like a
# credential. They are the service's, not the member's whose code runs.
SERVER_VARIABLE_PREFIXES = ("TORCHYARD_", "POSTGRES", "PG", "REDIS", "AWS_", "AZURE_", "GOOGLE_")
SERVER_VARIABLE_WORDS = ("PASSWORD", "SECRET", "TOKEN", "CREDENTIAL", "API_KEY", "ACCESS_KEY")
# What the worker and the launcher set themselves (the GPU lease, the seed, the sandbox's
# HOME, torchrun's ranks): a config's `env` may not change them either.
WORKER_SET_VARS = (
    "HOME",
    "TMPDIR",
    "PATH",
    "PYTHONPATH",
    "PYTHONHASHSEED",
    "PYTHONUNBUFFERED",
    "VIRTUAL_ENV",
    "CUDA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    "NVIDIA_VISIBLE_DEVICES",
    LOG_LINE_PREFIX_VAR,
    *DISTRIBUTED_VARS,
)


# The dynamic loader's and libc's variables: they change what a program loads and how it
# behaves before its first line runs (LD_AUDIT loads a library into every dynamically linked
# program, GCONV_PATH into every iconv user, ...). glibc strips these (its unsecvars) only for
# setuid programs; torchyard's root helpers are not setuid, so a run's `env` may never hold
# one (a 422 naming it). This list is not what keeps root safe: no process torchyard starts as
# root gets a run's variables at all (worker.privileged_env); it keeps them out of the job's
# own tools too, where they could still reach a privileged program one day.
LOADER_VARIABLE_PREFIXES = ("LD_", "MALLOC_")
LOADER_VARIABLES = (
    "GCONV_PATH",
    "GETCONF_DIR",
    "GLIBC_TUNABLES",
    "HOSTALIASES",
    "LOCALDOMAIN",
    "LOCPATH",
    "NIS_PATH",
    "NLSPATH",
    "RESOLV_HOST_CONF",
    "RES_OPTIONS",
    "TZDIR",
)


def is_loader_variable(name: str) -> bool:
    """Whether a variable is the dynamic loader's or libc's (LOADER_VARIABLE_*)."""
    upper = name.upper()
    return upper.startswith(LOADER_VARIABLE_PREFIXES) or upper in LOADER_VARIABLES


def is_server_variable(name: str) -> bool:
    """Whether a variable is the service's own (SERVER_VARIABLE_PREFIXES and _WORDS)."""
    upper = name.upper()
    return upper.startswith(SERVER_VARIABLE_PREFIXES) or any(
        word in upper for word in SERVER_VARIABLE_WORDS
    )


# --- metric keys ----------------------------------------------------------------------------
# The worker's system series of a run (sys/cpu_percent, sys/rss_mb, sys/gpu<i>/...: step =
# seconds since the run started). Only the worker writes them: a spool line of the job with
# a key under it is refused (worker.spool_lines), so a job cannot forge or block them.
SYSTEM_KEY_PREFIX = "sys/"

# --- metric values in the spool -----------------------------------------------------------
# JSON has no infinity: the job writes +inf and -inf as these two strings and NaN as null
# (NaN is stored NULL). Strings, not Python's non-standard tokens: every line stays JSON, so
# the forwarder's fast path (one orjson call per chunk, which refuses the tokens) keeps
# taking a diverging run's batches, and any JSON tool can read the spool. A string value that
# is not exactly one of these two is refused (worker.spool_lines).
SPOOL_INF = "Infinity"
SPOOL_NEG_INF = "-Infinity"
SPOOL_INFINITIES: dict[str, float] = {SPOOL_INF: float("inf"), SPOOL_NEG_INF: float("-inf")}


def spool_value(number: float) -> float | str | None:
    """A float as a metrics line carries it: itself when finite, the token when infinite, None
    (null) for NaN."""
    if number - number == 0:  # finite (inf - inf and NaN - NaN are NaN)
        return number
    if number != number:
        return None
    return SPOOL_INF if number > 0 else SPOOL_NEG_INF


# --- files inside a run directory ---------------------------------------------------------
METRICS_FILE = "metrics.jsonl"
# Written by the worker after each committed batch: "<offset> <inode>" of metrics.jsonl, the
# bytes of the spool ingested so far (torchyard.runtime.ingest_mark reads it).
INGESTED_FILE = "metrics.ingested"
LOG_FILE = "output.log"
CONFIG_FILE = "config.json"
ENVIRONMENT_FILE = "environment.json"
CHECKPOINTS_DIR = "checkpoints"
TENSORBOARD_DIR = "tensorboard"
TORCHRUN_LOG_DIR = "torchrun"
# The job's working directory. A script's folder is mirrored into it as links, so relative
# paths resolve as under `python train.py` run from that folder, while what the run writes
# stays in its own directory (not the shared workspace, not torchyard's files beside it).
WORK_DIR = "work"
# A sandboxed job's HOME (caches of pip, Hugging Face, torch hub): outside work/, so not listed.
HOME_DIR = "home"
# A session's JupyterLab (app/sessions, worker/session_job.py): its unix socket and the
# secret torchyard sets on it, in the run's folder (0700, the run's uid) and nowhere else.
SESSION_DIR = ".session"
# A rank whose script raised writes errors/rank<N>.json: {"rank", "time", "type", "message",
# "traceback"} with the traceback's torchyard and runpy frames left out. The worker takes the
# first by time as the run's error instead of parsing prefixed output.
ERRORS_DIR = "errors"


def rank_prefix(rank: int) -> str:
    """The prefix of every line rank ``rank`` writes under torchrun: ``[rank1]: ``."""
    return Template(LOG_LINE_PREFIX_TEMPLATE).substitute(rank=rank)


@dataclass(frozen=True)
class RunSpec:
    """What a run's config says about launching it, for code that takes no pydantic model.
    Built by app.experiments.config.model.RunConfig.run_spec from the validated config: the
    defaults live in that model alone, so this has none."""

    nodes: int  # hosts: one torchrun each (multi-node DDP), nproc processes and gpus GPUs on each
    nproc: int
    gpus: int
    max_restarts: int
    # "torchrun" (a process per rank) or "none" (one process that starts its own ranks)
    launcher: str


@dataclass(frozen=True)
class RunPaths:
    """The files of one run directory, by role: every module names a run's file through
    this (``RunPaths(run_dir).log``), never by joining a name of its own. The names above are
    the folder's layout; the relative path a checkpoint row stores is ``checkpoint_path``."""

    root: Path

    @staticmethod
    def checkpoint_path(name: str) -> str:
        """A checkpoint's path relative to the run directory, as its row stores it."""
        return f"{CHECKPOINTS_DIR}/{name}"

    def checkpoint(self, name: str) -> Path:
        return self.root / self.checkpoint_path(name)

    def error(self, rank: int) -> Path:
        """Where rank ``rank`` records the exception it died of."""
        return self.errors / f"rank{rank}.json"

    def earlier_metrics(self, attempt: int) -> Path:
        """Where a requeued run's spool of attempt ``attempt`` is kept aside."""
        return self.root / f"metrics.attempt-{attempt}.jsonl"

    @property
    def metrics(self) -> Path:
        return self.root / METRICS_FILE

    @property
    def ingested(self) -> Path:
        return self.root / INGESTED_FILE

    @property
    def log(self) -> Path:
        return self.root / LOG_FILE

    @property
    def config(self) -> Path:
        return self.root / CONFIG_FILE

    @property
    def environment(self) -> Path:
        return self.root / ENVIRONMENT_FILE

    @property
    def checkpoints(self) -> Path:
        return self.root / CHECKPOINTS_DIR

    @property
    def tensorboard(self) -> Path:
        return self.root / TENSORBOARD_DIR

    @property
    def work(self) -> Path:
        return self.root / WORK_DIR

    @property
    def errors(self) -> Path:
        return self.root / ERRORS_DIR

    @property
    def torchrun_logs(self) -> Path:
        return self.root / TORCHRUN_LOG_DIR

    @property
    def home(self) -> Path:
        return self.root / HOME_DIR

    @property
    def session_socket(self) -> Path:
        return self.root / SESSION_DIR / "lab.sock"

    @property
    def session_token(self) -> Path:
        return self.root / SESSION_DIR / "token"
