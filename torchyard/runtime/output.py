"""A rank's stdout and stderr under torchrun: a progress bar is one line, not hundreds.

torchrun's ``--tee`` copies each rank's output into the run's log in text mode, where a bare
``\\r`` ends a line, and it copies a line still being written as it finds it, so another
rank's line can land in the middle of it. A progress bar (tqdm, rich) redrawn with ``\\r``
came out as hundreds of lines, many blank or mixed with other ranks' output. Under torchrun
the job's text streams are wrapped: a line redrawn with ``\\r`` is held, only its last state
kept, and written once, whole, when it ends (or when the job exits). Lines without ``\\r``
and partial writes without one pass straight through. (A single process writes to the log
directly; its ``\\r`` reach the log API and the page, which show each line's last state.)
"""

from __future__ import annotations

import atexit
from typing import Any, TextIO


class ProgressLinesHeld:
    """A text stream whose ``\\r``-redrawn lines are written once, in their last state;
    everything else (fileno, encoding, buffer, isatty, ...) is the wrapped stream's."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._held = ""  # the last state of a line being redrawn, not written yet

    def write(self, text: str) -> int:
        count = len(text)
        if not self._held and "\r" not in text:
            self._stream.write(text)
            return count
        *lines, rest = (self._held + text).split("\n")
        out = [_last_state(line) + "\n" for line in lines]
        self._held = ""
        if "\r" in rest:
            self._held = _last_state(rest) or "\r"  # keep "a redraw is going on"
        else:
            out.append(rest)
        if out:
            self._stream.write("".join(out))
        return count

    def release(self) -> None:
        """Write a held line as it stands (the job is ending)."""
        if self._held.strip("\r"):
            self._stream.write(self._held.strip("\r") + "\n")
        self._held = ""
        self._stream.flush()

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _last_state(line: str) -> str:
    shown = [part for part in line.split("\r") if part]
    return shown[-1] if shown else ""


def hold_progress_lines(stdout: TextIO, stderr: TextIO) -> tuple[TextIO, TextIO]:
    """The two streams wrapped; what they hold is written at exit (the job runs atexit
    handlers even when it skips the interpreter's teardown)."""
    wrapped = ProgressLinesHeld(stdout), ProgressLinesHeld(stderr)
    for stream in wrapped:
        atexit.register(stream.release)
    return wrapped  # type: ignore[return-value]
