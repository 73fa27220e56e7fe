"""An overview's points and its rules, on numpy arrays (no database): encoded as the
metric_overviews row keeps them, fitted into MAX_BUCKETS buckets, extended, merged, and viewed
at max_points (app.metrics.overview says why and what).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

# Buckets holding points, at most: <= 2 x 1024 + 2 points, ~49 KB a series.
MAX_BUCKETS = 1024
# The largest view answered from an overview: with 1024 buckets kept, a view of up to 1,000
# points (499 buckets) is still at least half of what it asks for. The overlay asks 30,000 /
# runs points a curve (app/static/overlay.js): 300 at 100 runs, 1,000 from 30 runs down.
MAX_VIEW_POINTS = 1000


class Points:
    """Points in step order, each step once: steps (int64), values (float64, NaN for NULL:
    stored values are finite or NULL, never NaN) and wall times (float64)."""

    __slots__ = ("steps", "values", "times")

    def __init__(
        self,
        steps: npt.NDArray[np.int64],
        values: npt.NDArray[np.float64],
        times: npt.NDArray[np.float64],
    ) -> None:
        self.steps, self.values, self.times = steps, values, times

    def __len__(self) -> int:
        return len(self.steps)

    def take(self, index: npt.NDArray[np.intp]) -> Points:
        return Points(self.steps[index], self.values[index], self.times[index])

    def lists(self) -> tuple[list[int], list[float | None], list[float]]:
        """As the series reads return them: NULL for NaN."""
        values = [None if v != v else v for v in self.values.tolist()]  # NaN != NaN
        return self.steps.tolist(), values, self.times.tolist()


def encode(points: Points) -> bytes:
    return b"".join(
        (
            points.steps.astype("<i8").tobytes(),
            points.values.astype("<f8").tobytes(),
            points.times.astype("<f8").tobytes(),
        )
    )


def decode(data: bytes) -> Points:
    n = len(data) // 24
    return Points(
        np.frombuffer(data, dtype="<i8", count=n).astype(np.int64),
        np.frombuffer(data, dtype="<f8", count=n, offset=8 * n).astype(np.float64),
        np.frombuffer(data, dtype="<f8", count=n, offset=16 * n).astype(np.float64),
    )


def extremes(points: Points, width: int, *, first: bool = True) -> Points:
    """Each bucket's min and max points and the two ends (see the module's rules); without
    `first`, the first point only where it is an extreme (the points are a series' tail)."""
    n = len(points)
    if n <= 2 and first:
        return points
    bucket = points.steps // width
    starts = np.flatnonzero(np.concatenate(([True], bucket[1:] != bucket[:-1])))
    group = np.repeat(np.arange(len(starts)), np.diff(np.append(starts, n)))
    null = np.isnan(points.values)
    low = np.where(null, np.inf, points.values)
    high = np.where(null, -np.inf, points.values)
    is_min = low == np.minimum.reduceat(low, starts)[group]  # all NULL: every point, take 1st
    is_max = (high == np.maximum.reduceat(high, starts)[group]) & ~null
    keep = np.concatenate((first_per_group(is_min, group), first_per_group(is_max, group)))
    return points.take(np.unique(np.concatenate((keep, [0, n - 1] if first else [n - 1]))))


def first_per_group(mask: npt.NDArray[np.bool_], group: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """The first index where ``mask`` holds in each run of equal ``group`` values."""
    index = np.flatnonzero(mask)
    of = group[index]
    return index[np.concatenate(([True], of[1:] != of[:-1]))] if len(index) else index


def _buckets(steps: npt.NDArray[np.int64], width: int) -> int:
    """How many buckets of `width` hold points."""
    bucket = steps // width
    return 1 + int(np.count_nonzero(bucket[1:] != bucket[:-1])) if len(bucket) else 0


def fit(points: Points, width: int) -> tuple[int, Points]:
    """The overview of `points` (raw points, or an overview at `width` merged with raw
    points): their extremes at `width`, doubled until at most MAX_BUCKETS buckets hold
    points."""
    if width == 1 and len(points) <= MAX_BUCKETS:  # each point is its own bucket's extremes
        return 1, points
    while _buckets(points.steps, width) > MAX_BUCKETS:
        width *= 2
    return width, extremes(points, width)


def extend(width: int, old: Points, new: Points) -> tuple[int, Points]:
    """``fit(merge(old, new), width)`` for points `new` that all come after `old`'s last step
    (the normal batch), looking again only at `old`'s last bucket: the buckets before it keep
    their extremes, and an overview's points are their own extremes. A batch of 1,000 points
    into a long series was 2,000 points sorted and bucketed per key before (issue 29)."""
    cut = int(np.searchsorted(old.steps, old.steps[-1] // width * width))
    tail = extremes(
        Points(
            np.concatenate((old.steps[cut:], new.steps)),
            np.concatenate((old.values[cut:], new.values)),
            np.concatenate((old.times[cut:], new.times)),
        ),
        width,
        first=cut == 0,
    )
    points = Points(
        np.concatenate((old.steps[:cut], tail.steps)),
        np.concatenate((old.values[:cut], tail.values)),
        np.concatenate((old.times[:cut], tail.times)),
    )
    if _buckets(points.steps, width) > MAX_BUCKETS:
        return fit(points, width)
    return width, points


def merge(old: Points, new: Points) -> Points:
    """Both sets of points in step order, a step held by both once (the old point: a stored
    point never changes). Appended points (the normal case) are only put after the old."""
    if not len(old) or not len(new) or new.steps[0] > old.steps[-1]:
        return Points(
            np.concatenate((old.steps, new.steps)),
            np.concatenate((old.values, new.values)),
            np.concatenate((old.times, new.times)),
        )
    steps = np.concatenate((old.steps, new.steps))
    _, first = np.unique(steps, return_index=True)
    values = np.concatenate((old.values, new.values))
    return Points(steps, values, np.concatenate((old.times, new.times))).take(first)


def view(width: int, points: Points, max_points: int) -> Points:
    """The series downsampled to at most max_points points (module docstring): a series of
    at most max_points points goes whole (a width-1 overview holds them all; a wider one
    means more than MAX_BUCKETS points). Above about 2 x MAX_BUCKETS, max_points gets the
    overview's own buckets: between MAX_BUCKETS and 2 x MAX_BUCKETS points."""
    if not len(points) or (width == 1 and len(points) <= max_points):
        return points
    budget = max((max_points - 2) // 2, 1)
    first, last = int(points.steps[0]), int(points.steps[-1])
    wide = width
    while last // wide - first // wide + 1 > budget:
        wide *= 2
    return extremes(points, wide) if wide != width else points


def appended(data: bytes, points: Points) -> bytes | None:
    """A width-1 overview (every point) with `points` appended, still under MAX_BUCKETS
    points, spliced as bytes (no array built: a batch of 10,000 keys' next step was 2x the
    ingest's time with a decode, merge and encode per key); None when that does not apply."""
    n = len(data) // 24
    if not n or n + len(points) > MAX_BUCKETS:
        return None
    if int.from_bytes(data[8 * n - 8 : 8 * n], "little", signed=True) >= int(points.steps[0]):
        return None
    return splice(data, n, n, points.steps, points.values, points.times)


def splice(
    data: bytes,
    n: int,
    cut: int,
    steps: npt.NDArray[np.int64],
    values: npt.NDArray[np.float64],
    times: npt.NDArray[np.float64],
) -> bytes:
    """The encoded overview's (``n`` points, as ``encode`` wrote them) first ``cut`` points,
    then the given ones, encoded: an overview extended without a decode."""
    return b"".join(
        (
            data[: 8 * cut],
            steps.astype("<i8").tobytes(),
            data[8 * n : 8 * n + 8 * cut],
            values.astype("<f8").tobytes(),
            data[16 * n : 16 * n + 8 * cut],
            times.astype("<f8").tobytes(),
        )
    )
