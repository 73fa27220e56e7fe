"""The pace of a loop that talks to the database: its normal interval, doubling while the
database is away, back to normal after the first success."""

from __future__ import annotations


class Backoff:
    """The current delay: the normal interval, doubling (from at least 0.2 s, to 5 s) on each
    failure, back to the interval after a success."""

    MAX_DELAY = 5.0

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.delay = interval

    def failed(self) -> None:
        self.delay = min(self.MAX_DELAY, max(self.delay * 2, 0.2))

    def succeeded(self) -> None:
        self.delay = self.interval
