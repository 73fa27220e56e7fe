"""The job's entry point: ``python -m torchyard.job`` (directly, or once per rank under
torchrun).

Builds the context from the launcher's environment, seeds everything, runs the recipe's
``main(ctx)`` (or the user's script), and always drains the reporter before exiting, so
every point logged before a crash is in metrics.jsonl. Exceptions propagate: Python prints
the traceback to stderr (captured in output.log) and exits non-zero, which is how the worker
learns the run failed.
"""

from __future__ import annotations

import atexit
import importlib
import io
import json
import logging
import os
import runpy
import signal
import sys
import threading
import time
import traceback
from collections.abc import Mapping
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn

from torchyard.contract import (
    EXIT_GRACE_VAR,
    LOG_LINE_PREFIX_VAR,
    SCRIPT_ARGV_VAR,
    SCRIPT_VAR,
    RunPaths,
)
from torchyard.recipes.catalog import RECIPES
from torchyard.runtime import environment, ingest_mark, tensorboard_defaults
from torchyard.runtime.context import JobContext, get_context
from torchyard.runtime.member_view import member_view
from torchyard.runtime.output import hold_progress_lines
from torchyard.runtime.reporter import ReporterError
from torchyard.runtime.seeding import seed_everything

log = logging.getLogger("torchyard.job")


def configure_output(rank: int, environ: Mapping[str, str] | None = None) -> None:
    """Line-buffered stdout/stderr, and torchyard's own log lines to stderr naming the rank.

    Only the ``torchyard`` logger gets a handler (and does not propagate): the root logger is
    the script's, so its ``logging.basicConfig(...)`` takes effect and no line appears twice.

    All ranks share one output.log, and an unlabelled line from rank 3 is a line nobody can
    place. Under our torchrun launch torchrun prefixes every line of each rank already
    (``[rank3]: ``, worker.launcher), so the log format leaves the rank out there; otherwise
    (a single process, or torchrun started by hand) the format carries it.

    torchrun copies each rank's output line by line while the rank is still writing it; an
    unbuffered stream writes a ``print`` or a traceback line in pieces, and a piece read on
    its own would get a prefix of its own mid-line. Line buffering makes every line one write.
    """
    env = os.environ if environ is None else environ
    prefixed = bool(env.get(LOG_LINE_PREFIX_VAR))
    if prefixed:
        _merge_stderr_into_stdout()
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(line_buffering=True, write_through=False)
    if prefixed:
        sys.stdout, sys.stderr = hold_progress_lines(sys.stdout, sys.stderr)
    label = "" if prefixed else f"[rank {rank}] "
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        logging.Formatter(f"%(asctime)s {label}%(levelname)s %(name)s: %(message)s")
    )
    ours = logging.getLogger("torchyard")
    ours.handlers[:] = [handler]
    ours.propagate = False
    ours.setLevel(os.environ.get("TORCHYARD_LOG_LEVEL", "INFO").upper())


def _merge_stderr_into_stdout() -> None:
    """Under torchrun, make this rank's stderr the same file as its stdout.

    torchrun's ``--tee`` reads a rank's stdout and stderr from two files and copies each on
    its own, so a print and the traceback after it could come out in either order. One file
    (fd 2 a duplicate of fd 1, so one offset) keeps the rank's lines in the order written.
    """
    try:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(sys.stdout.fileno(), sys.stderr.fileno())
    except (OSError, ValueError, io.UnsupportedOperation):
        pass  # no real file descriptors (an embedding host): leave the streams as they are


def run(ctx: JobContext) -> Any:
    """Seed, then run the configured recipe (or script) with ``ctx``; return its result."""
    seed_everything(ctx.seed, ctx.deterministic)
    if ctx.is_chief and ctx.run_dir is not None:
        record = environment.collect(
            seed=ctx.seed, deterministic=ctx.deterministic, world_size=ctx.world_size
        )
        environment.write(ctx.run_dir, record)
    recipe_name = ctx.config.get("recipe")
    script = ctx.config.get("script")
    if recipe_name:
        recipe = RECIPES.get(str(recipe_name))
        if recipe is None:
            raise LookupError(f"unknown recipe {recipe_name!r}; built-in: {sorted(RECIPES)}")
        log.info(
            "run %s: recipe %s, seed %d, deterministic %s, world size %d",
            ctx.run_id,
            recipe.name,
            ctx.seed,
            ctx.deterministic,
            ctx.world_size,
        )
        module = importlib.import_module(recipe.module)
        return module.main(ctx)
    if script:
        return run_script(ctx, os.environ)
    raise ValueError("the config names neither a recipe nor a script")


def run_script(ctx: JobContext, env: Mapping[str, str]) -> Any:
    """Run the user's script as ``python script.py ARGS`` would: ``__main__``, its argv, its
    directory first on sys.path. The launcher resolved the path inside the workspace; the
    script reaches this same context through ``torchyard.sdk.init()``."""
    path = Path(env[SCRIPT_VAR])
    argv = [str(a) for a in json.loads(env.get(SCRIPT_ARGV_VAR) or "[]")]
    log.info(
        "run %s: script %s %s, seed %d, world size %d",
        ctx.run_id,
        ctx.config.get("script") or path.name,  # as the config says it (never the host's path)
        " ".join(argv),
        ctx.seed,
        ctx.world_size,
    )
    tensorboard_defaults.install()
    sys.argv = [str(path), *argv]
    sys.path.insert(0, str(path.parent))
    return runpy.run_path(str(path), run_name="__main__")


def _exit_on_sigterm(signum: int, frame: FrameType | None) -> None:
    """Turn SIGTERM (cancel, or torchrun stopping the group) into SystemExit, so the
    ``finally`` below drains the reporter instead of dying with points still buffered
    (at once: no waiting for the worker's ingestion, torchyard.runtime.ingest_mark)."""
    ingest_mark.stop_waiting()
    raise SystemExit(128 + signum)


def main() -> None:
    configure_output(int(os.environ.get("RANK", "0")))
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    # A script may join the process group itself (init_process_group twice raises), so for
    # scripts the group is left to the script or to torchyard.sdk.init().
    ctx = get_context(join_group=not os.environ.get(SCRIPT_VAR))
    try:
        # Kept until the process ends: freeing a DDP script's globals (its model) runs the
        # reducer's destructor, which can wait for ever on a gloo thread (seen: 3 hangs in 6).
        _KEPT_ALIVE.append(run(ctx))
    except SystemExit as exc:
        if exc.code not in (0, None):
            _close_after_failure(ctx, exc)
            raise
        # A script that ends with sys.exit(0) finished like one that returned.
    except BaseException as exc:
        _close_after_failure(ctx, exc)
        raise SystemExit(1) from None  # the traceback is printed, the user's frames only
    ctx.close()
    log.info("run %s finished", ctx.run_id)
    exit_skipping_teardown()


_KEPT_ALIVE: list[Any] = []
# How long a finished job may take to end its own threads and atexit handlers before it is
# ended anyway (EXIT_GRACE_VAR overrides): its work is durable, and a job must never stay
# "running" after it.
EXIT_GRACE_SECONDS = 30.0


def _close_after_failure(ctx: JobContext, exc: BaseException) -> None:
    if isinstance(exc, SystemExit) and exc.code == 128 + signal.SIGTERM:
        log.info("run %s stopped by SIGTERM (cancelled, or the worker shut down)", ctx.run_id)
    else:
        report_failure(exc, rank=ctx.rank, run_dir=ctx.run_dir)
    try:
        ctx.close()
    except ReporterError as close_error:
        # Report it, but let the original exception be the one that ends the job.
        log.error("%s", close_error)


# The entry point's own frames and runpy's: between them and the script nothing is the user's.
# (runpy is frozen in the interpreter, so its frames name "<frozen runpy>".)
_OWN_FILES = frozenset({str(Path(__file__).resolve()), runpy.__file__, "<frozen runpy>"})


def user_traceback(exc: BaseException) -> traceback.TracebackException:
    """The exception with the entry point's and runpy's frames left out: a script's error
    starts at the script, as under plain ``python train.py``."""
    tb = traceback.TracebackException.from_exception(exc)
    tb.stack = traceback.StackSummary.from_list(
        [f for f in tb.stack if f.filename not in _OWN_FILES]
    )
    return tb


def report_failure(exc: BaseException, *, rank: int, run_dir: Path | None) -> None:
    """Log the failure, print the user's traceback and record it for the worker in
    errors/rank<N>.json (torchyard.contract), so the run's error names the exception whatever
    prefixes torchrun put on the output. ``sys.exit(3)`` prints no traceback, as in Python."""
    tb = user_traceback(exc)
    message = member_view("".join(tb.format_exception_only()).strip())
    log.error("run failed: %s", message)
    text = "" if isinstance(exc, SystemExit) else member_view("".join(tb.format()))
    if text:
        sys.stderr.write(text)
        sys.stderr.flush()
    if run_dir is None:
        return
    record = {
        "rank": rank,
        "time": time.time(),
        "type": type(exc).__name__,
        "message": message,
        "traceback": text,
    }
    path = RunPaths(run_dir).error(rank)
    try:
        path.parent.mkdir(exist_ok=True)
        path.write_text(json.dumps(record), encoding="utf-8")
    except OSError as write_error:
        log.error("could not record the error in %s: %s", path, write_error)


def exit_skipping_teardown() -> NoReturn:
    """End a finished job with status 0 without tearing the interpreter down.

    Everything the run produced is durable by now (the reporter is fsynced, checkpoints are
    renamed into place). What is left is dangerous: a DDP model keeps gloo's process group
    alive past ``destroy_process_group`` (its ``pt_gloo_runloop`` and ``gloo_tcp_loop``
    threads still run), and finalising the interpreter and the C++ globals under them while
    the peer rank exits at the same moment can abort the process ("terminate called without
    an active exception", SIGABRT), which turns a finished run into a failed one. The atexit
    handlers (the user's script's, logging's) still run after the script's own non-daemon
    threads end, as at a normal exit, and the output is flushed. A thread or handler that
    does not end within EXIT_GRACE_SECONDS is named in the log and the job ends anyway."""
    grace = float(os.environ.get(EXIT_GRACE_VAR) or EXIT_GRACE_SECONDS)
    watchdog = threading.Timer(grace, _end_stuck_exit, args=(grace,))
    watchdog.daemon = True
    watchdog.start()
    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon and thread is not watchdog:
            thread.join()
    atexit._run_exitfuncs()
    _flush_and_exit()


def _end_stuck_exit(grace: float) -> None:
    stuck = [
        t.name
        for t in threading.enumerate()
        if t is not threading.current_thread() and t is not threading.main_thread()
    ]
    log.warning(
        "the script's work ended %.0f s ago but the process has not (threads still running: "
        "%s); ending it",
        grace,
        ", ".join(stuck) or "none",
    )
    _flush_and_exit()


def _flush_and_exit() -> NoReturn:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(0)


if __name__ == "__main__":
    main()
