"""The Slurm client commands as functions (issue 40): `sbatch`, `squeue`, `sacct`, `scancel` and
`sinfo` (a node's reason) run as subprocesses with this process's environment (`SLURM_CONF` and
`PATH` as the submit host has them), their output parsed into `SlurmJob`s, their failures raised
as `SlurmError` with the command's own message. Nothing here knows torchyard's runs: the Slurm
executor maps runs to jobs.

Where a job's state is read from:
- `squeue --json --states=all`: every job slurmctld still holds, pending, running and ended
  (an ended one for `MinJobAge` seconds, 300 by default). Slurm 22.05 (Debian 12) ignores
  squeue's filter options under --json and lists every job of the cluster, so the ids are picked
  here, from one call however many are asked. The JSON is openapi v0.0.38 there (numbers as
  numbers, the exit code as the raw wait status); the shapes of 23.02 and later (numbers as
  `{"set", "infinite", "number"}`, states as lists, the exit code as an object) are read by the
  same helpers. A Slurm without `--json` (before 21.08) is read through squeue's text format,
  which has no exit codes (an ended job's come from sacct then).
- `sacct --parsable2` for the ids slurmctld no longer holds: the accounting database (slurmdbd),
  text rather than JSON because its JSON differs between every release and the fields wanted
  here are plain. A cluster without accounting (`AccountingStorageType=accounting_storage/none`,
  as the tests' cluster) answers "Slurm accounting storage is disabled": those ids are then
  unknown, absent from `query`'s answer, as on a submit host without `sacct` at all. Any other
  sacct failure (slurmdbd down) is raised: an absent job must mean gone, never "could not ask".
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import product
from pathlib import Path
from typing import Any

# One command's limit: slurmctld answers in milliseconds, but a client retries an unreachable
# controller for MessageTimeout (10 s) a try before it gives up.
TIMEOUT = 60.0

# The base states of a job that has ended (`squeue --help`, "JOB STATE CODES"); any other is
# live: PENDING, CONFIGURING, RUNNING, COMPLETING, SUSPENDED, REQUEUED, RESIZING, STOPPED, ...
ENDED_STATES = frozenset(
    {
        "BOOT_FAIL",
        "CANCELLED",
        "COMPLETED",
        "DEADLINE",
        "FAILED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PREEMPTED",
        "REVOKED",
        "TIMEOUT",
    }
)

# What the client environment of `submit(env=...)` keeps of this process's own: what the
# commands need to run and find the cluster, nothing of the agent's secrets.
CLIENT_ENV = ("PATH", "SLURM_CONF", "HOME", "LANG", "LC_ALL", "TZ", "USER", "LOGNAME")

# scancel's answers for a job that has ended (or that slurmctld has forgotten).
_ENDED_ANSWERS = ("already completing or completed", "Invalid job id specified")
_ACCOUNTING_OFF = "accounting storage is disabled"
# squeue's text format (no --json): one field a column, unit separators between them.
_SEP = "\x1f"
_TEXT_FORMAT = _SEP.join(("%i", "%j", "%k", "%T", "%r", "%S", "%N"))
_NODE_FORMAT = f"--format=%N{_SEP}%E"
_SACCT_FIELDS = "JobID,JobName,Comment,State,Reason,Start,ExitCode,NodeList"


class SlurmError(RuntimeError):
    """A Slurm command failed (its stderr in the message) or could not run."""


@dataclass(frozen=True)
class SlurmJob:
    job_id: str
    name: str
    comment: str
    # The base state: PENDING, RUNNING, COMPLETING, COMPLETED, FAILED, CANCELLED, TIMEOUT,
    # NODE_FAIL, PREEMPTED, OUT_OF_MEMORY, BOOT_FAIL, DEADLINE, REQUEUED, ...
    state: str
    reason: str | None  # Resources, Priority, QOSMaxGRESPerUser, ... (never 'None')
    start_estimate: datetime | None  # a pending job's expected start, when Slurm gives one
    # The batch script's exit status, once ended and not signalled; 0 only for COMPLETED (a
    # job cancelled while pending, or NODE_FAIL before its node reported, has status 0: None)
    exit_code: int | None
    signal: int | None  # the signal that ended it (SIGTERM 15 for a cancel), when one did
    nodes: tuple[str, ...]  # expanded: ('node-0', 'node-1'), () while pending
    # Times Slurm requeued it (a node failure, a preemption, `scontrol requeue`): a requeued
    # job is PENDING again (reason BeginTime for about two minutes), the same id. From
    # squeue's JSON only (sacct and squeue's text have no such field: 0 there).
    restarts: int = 0

    @property
    def ended(self) -> bool:
        return self.state in ENDED_STATES


def submit(script: Path, options: list[str], *, env: Mapping[str, str] | None = None) -> str:
    """`sbatch --parsable <options> <script>`; the new job's id. With `env`, sbatch runs with
    that environment on top of CLIENT_ENV's variables only (sbatch hands its environment to the
    job: none of this process's other variables reach it); without, with this process's."""
    run_env = None
    if env is not None:
        run_env = {k: os.environ[k] for k in CLIENT_ENV if k in os.environ} | dict(env)
    done = _run(["sbatch", "--parsable", *options, str(script)], env=run_env)
    if done.returncode != 0:
        raise SlurmError(f"sbatch failed ({done.returncode}): {_message(done)}")
    job_id = done.stdout.strip().split(";")[0]  # "<id>" or "<id>;<cluster>"
    if not job_id.isdigit():
        raise SlurmError(f"sbatch answered no job id: {done.stdout!r} {_message(done)}")
    return job_id


def query(job_ids: Iterable[str]) -> dict[str, SlurmJob]:
    """The jobs of `job_ids` that Slurm knows, by id: from slurmctld (squeue, any state), else
    from accounting (sacct); an id neither knows is absent (module docstring)."""
    wanted = {str(job_id) for job_id in job_ids}
    if not wanted:
        return {}
    found = {job.job_id: job for job in _squeue() if job.job_id in wanted}
    missing = sorted(wanted - found.keys(), key=int)
    if missing:
        found |= {job.job_id: job for job in _sacct(missing)}
    return found


def find(name_prefix: str) -> list[SlurmJob]:
    """The live jobs (not ended) whose name starts with `name_prefix`, by job id."""
    jobs = [j for j in _squeue() if j.name.startswith(name_prefix) and not j.ended]
    return sorted(jobs, key=lambda job: int(job.job_id))


def node_reasons(nodes: Iterable[str]) -> dict[str, str]:
    """Why Slurm took each of `nodes` out of service (an operator's `scontrol update ...
    reason=...`, Slurm's own "Not responding", ...): the nodes that have a reason, by name."""
    names = sorted(set(nodes))
    if not names:
        return {}
    done = _run(["sinfo", "--noheader", "--Node", f"--nodes={','.join(names)}", _NODE_FORMAT])
    if done.returncode != 0:
        raise SlurmError(f"sinfo failed ({done.returncode}): {_message(done)}")
    rows = (line.split(_SEP, 1) for line in done.stdout.splitlines())
    return {
        row[0]: row[1].strip()
        for row in rows
        if len(row) == 2 and row[0] in names and _reason(row[1]) not in (None, "none")
    }


def cancel(job_id: str, *, signal: str | None = None) -> None:
    """`scancel <job_id>`, or with `signal` only that signal sent to the batch script and every
    step (`scancel --signal=<signal> --full`). A job that has already ended, or that Slurm no
    longer knows, is no error: cancelling twice is cancelling once."""
    options = [f"--signal={signal}", "--full"] if signal else []
    done = _run(["scancel", *options, job_id])
    if done.returncode != 0 and not any(a in done.stderr for a in _ENDED_ANSWERS):
        raise SlurmError(f"scancel {job_id} failed ({done.returncode}): {_message(done)}")


def _run(
    argv: list[str], *, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            argv, capture_output=True, text=True, timeout=TIMEOUT, env=env, check=False
        )
    except FileNotFoundError as exc:
        raise SlurmError(f"{argv[0]} is not installed here (not a Slurm submit host?)") from exc
    except subprocess.TimeoutExpired as exc:
        raise SlurmError(f"{argv[0]} did not answer within {TIMEOUT:.0f} s") from exc


def _message(done: subprocess.CompletedProcess[str]) -> str:
    return done.stderr.strip() or done.stdout.strip() or "(no message)"


def _squeue() -> list[SlurmJob]:
    done = _run(["squeue", "--json", "--states=all"])
    if done.returncode != 0 and "unrecognized option" in done.stderr:
        return _squeue_text()
    if done.returncode != 0:
        raise SlurmError(f"squeue failed ({done.returncode}): {_message(done)}")
    try:
        return [_from_json(job) for job in json.loads(done.stdout)["jobs"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise SlurmError(f"squeue --json gave what this module cannot read: {exc!r}") from exc


def _squeue_text() -> list[SlurmJob]:
    """squeue's text format, for a Slurm without --json: no exit codes there."""
    done = _run(["squeue", "--noheader", "--states=all", f"--format={_TEXT_FORMAT}"])
    if done.returncode != 0:
        raise SlurmError(f"squeue failed ({done.returncode}): {_message(done)}")
    jobs = []
    for line in done.stdout.splitlines():
        job_id, name, comment, state, reason, start, nodes = line.split(_SEP)
        state = _base_state(state)
        jobs.append(
            SlurmJob(
                job_id=job_id,
                name=name,
                comment="" if comment == "(null)" else comment,
                state=state,
                reason=_reason(reason),
                start_estimate=_text_time(start) if state == "PENDING" else None,
                exit_code=None,
                signal=None,
                nodes=expand_hostlist(nodes),
            )
        )
    return jobs


def _sacct(job_ids: list[str]) -> list[SlurmJob]:
    if shutil.which("sacct") is None:  # a submit host without the accounting client: none
        return []
    argv = ["sacct", "--noheader", "--parsable2", "--allocations"]
    done = _run([*argv, f"--jobs={','.join(job_ids)}", f"--format={_SACCT_FIELDS}"])
    if done.returncode != 0 and _ACCOUNTING_OFF in done.stderr + done.stdout:
        return []
    if done.returncode != 0:
        raise SlurmError(f"sacct failed ({done.returncode}): {_message(done)}")
    return [job for line in done.stdout.splitlines() if (job := parse_sacct_line(line))]


def parse_sacct_line(line: str) -> SlurmJob | None:
    """One line of `sacct --parsable2 --format=<_SACCT_FIELDS>` (None for a step's line, or a
    comment with '|' that breaks the columns: the job then stays unknown, never misread)."""
    fields = line.split("|")
    if len(fields) != 8 or not fields[0].isdigit():
        return None
    job_id, name, comment, state, reason, start, exit_status, nodes = fields
    state = _base_state(state)
    code, _, sig = exit_status.partition(":")
    signalled = sig.isdigit() and int(sig) != 0
    ended = state in ENDED_STATES
    return SlurmJob(
        job_id=job_id,
        name=name,
        comment=comment,
        state=state,
        reason=_reason(reason),
        start_estimate=_text_time(start) if state == "PENDING" else None,
        exit_code=(
            int(code)
            if ended and code.isdigit() and not signalled and (state == "COMPLETED" or code != "0")
            else None
        ),
        signal=int(sig) if ended and signalled else None,
        nodes=() if nodes.startswith("None") else expand_hostlist(nodes),
    )


def _from_json(job: dict[str, Any]) -> SlurmJob:
    raw_state = job["job_state"]
    state = _base_state(raw_state[0] if isinstance(raw_state, list) else str(raw_state))
    exit_code, signal = _exit(job.get("exit_code")) if state in ENDED_STATES else (None, None)
    if exit_code == 0 and state != "COMPLETED":
        exit_code = None
    start = _number(job.get("start_time"))
    comment = job.get("comment") or ""
    return SlurmJob(
        job_id=str(job["job_id"]),
        name=str(job.get("name") or ""),
        comment=str(comment.get("job") or "") if isinstance(comment, dict) else str(comment),
        state=state,
        reason=_reason(str(job.get("state_reason") or "")),
        start_estimate=(
            datetime.fromtimestamp(start, UTC) if state == "PENDING" and start else None
        ),
        exit_code=exit_code,
        signal=signal,
        nodes=expand_hostlist(str(job.get("nodes") or "")),
        restarts=_number(job.get("restart_cnt")) or 0,
    )


def _number(value: Any) -> int | None:
    """A number of Slurm's JSON: a plain one (22.05), or `{"set", "infinite", "number"}`."""
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _exit(value: Any) -> tuple[int | None, int | None]:
    """(exit code, signal) of an ended job: from the raw wait status (22.05) or from the
    object of 23.02 and later."""
    if isinstance(value, dict):
        status = value.get("status") or []
        signal_field = value.get("signal") or {}
        sig = _number(signal_field.get("id") if isinstance(signal_field, dict) else None)
        if "SIGNALED" in (status if isinstance(status, list) else [status]) and sig:
            return None, sig
        return _number(value.get("return_code")), None
    status = _number(value)
    if status is None:
        return None, None
    if status & 0x7F:
        return None, status & 0x7F
    return (status >> 8) & 0xFF, None


def _base_state(state: str) -> str:
    """'CANCELLED by 0' -> 'CANCELLED', 'RUNNING+' -> 'RUNNING'."""
    return state.split()[0].rstrip("+") if state.strip() else "UNKNOWN"


def _reason(reason: str) -> str | None:
    reason = reason.strip()
    return None if reason in ("", "None", "(null)") else reason


def _text_time(value: str) -> datetime | None:
    """A time of squeue's and sacct's text: local time, ISO ('Unknown', 'N/A': None)."""
    try:
        return datetime.fromisoformat(value).astimezone(UTC)
    except ValueError:
        return None


_BRACKETS = re.compile(r"\[([^\]]*)\]")


def expand_hostlist(expression: str) -> tuple[str, ...]:
    """Slurm's node list expression, expanded: 'gpu[01-02,5],login' -> ('gpu01', 'gpu02',
    'gpu5', 'login')."""
    return tuple(name for item in _top_level(expression.strip()) for name in _expand(item))


def _top_level(expression: str) -> Iterator[str]:
    depth, start = 0, 0
    for i, char in enumerate(expression):
        depth += {"[": 1, "]": -1}.get(char, 0)
        if char == "," and depth == 0:
            yield expression[start:i]
            start = i + 1
    if expression[start:]:
        yield expression[start:]


def _expand(item: str) -> Iterator[str]:
    parts = _BRACKETS.split(item)  # literal, ranges, literal, ranges, ..., literal
    choices: list[list[str]] = []
    for k, part in enumerate(parts):
        choices.append(_ranges(part) if k % 2 else [part])
    for combination in product(*choices):
        yield "".join(combination)


def _ranges(spec: str) -> list[str]:
    names = []
    for piece in spec.split(","):
        low, _, high = piece.partition("-")
        if not high:
            names.append(low)
            continue
        width = len(low) if low.startswith("0") else 0
        names.extend(str(n).zfill(width) for n in range(int(low), int(high) + 1))
    return names
