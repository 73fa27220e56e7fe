"""A batch of stored points as numpy columns, sorted by key and step, and the overviews of all
its keys extended in one vectorized pass (app.metrics.overview.points' rules, its ``extend``).

Why: the normal batch (a forwarder's lines, an MLflow log-batch) appends a few steps to each
of a handful of keys, and per key ``extend`` was ~20 numpy calls on tiny arrays, a decode and
an encode: 10 keys were ~0.6 ms of a 1,000-point batch's ~7 ms, and grouping the rows per key
another 0.3 ms (issue 29). Here the rows become columns once; every key's tail (its overview's
last bucket and its new points) is bucketed in the same arrays, groups being (key, bucket)
runs; each overview's bytes are spliced, as ``points.appended`` does, never decoded. The
summaries' figures (app.metrics.summary) come from the same columns.

Only the keys whose new points all follow their overview's last step are done here (the
caller takes the rest the general way), and a key whose extended overview would hold more
than MAX_BUCKETS buckets (its width doubles) is left to ``points.extend`` too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from operator import itemgetter

import numpy as np
import numpy.typing as npt

from app.metrics.overview.points import MAX_BUCKETS, Points, first_per_group, splice

Row = tuple[int, int, float | None, float]  # key id, step, value (None: NULL), wall time
Ints = npt.NDArray[np.int64]
Floats = npt.NDArray[np.float64]


class Batch:
    """Rows as columns in (key, step) order: keys, steps, values (NaN for NULL), times, and
    each key's run [starts[i], ends[i]). Rows all stored by one insert: each (key, step) once."""

    __slots__ = ("keys", "steps", "values", "times", "ids", "starts", "ends")

    def __init__(self, rows: Sequence[Row]) -> None:
        # A column at a time through itemgetter: zip(*rows) made an iterator object per row,
        # and on a forwarder's 20,000-row batch those allocations set off the cyclic
        # collector's full passes (~65 ms each).
        n = len(rows)
        key_col = np.fromiter(map(itemgetter(0), rows), dtype=np.int64, count=n)
        step_col = np.fromiter(map(itemgetter(1), rows), dtype=np.int64, count=n)
        order = np.lexsort((step_col, key_col))
        self.keys: Ints = key_col[order]
        self.steps: Ints = step_col[order]
        values = np.array(list(map(itemgetter(2), rows)), dtype=np.float64)  # None -> NaN
        self.values: Floats = values[order]
        times = np.fromiter(map(itemgetter(3), rows), dtype=np.float64, count=n)
        self.times: Floats = times[order]
        firsts = np.flatnonzero(np.concatenate(([True], self.keys[1:] != self.keys[:-1])))
        self.ids: list[int] = self.keys[firsts].tolist()
        self.starts: list[int] = firsts.tolist()
        self.ends: list[int] = [*self.starts[1:], len(self.keys)]

    def points(self, i: int) -> Points:
        """The i-th key's points."""
        a, b = self.starts[i], self.ends[i]
        return Points(self.steps[a:b], self.values[a:b], self.times[a:b])

    def summaries(self) -> list[tuple[int, float | None, float | None, int]]:
        """(key id, min value, max value, highest step) per key; None where all are NULL (as
        SQL's MIN and MAX of the stored rows)."""
        mins = np.fmin.reduceat(self.values, self.starts).tolist()
        maxs = np.fmax.reduceat(self.values, self.starts).tolist()
        tops = self.steps[np.array(self.ends) - 1].tolist()
        return [
            (k, None if lo != lo else lo, None if hi != hi else hi, top)  # NaN != NaN
            for k, lo, hi, top in zip(self.ids, mins, maxs, tops, strict=True)
        ]


def extend_kept(
    kept: Mapping[int, tuple[int, bytes]], batch: Batch
) -> dict[int, tuple[int, bytes]]:
    """{key id: (width, data)}: the overviews in `kept` extended by the batch's points, for
    the keys whose points all come after their overview's last step (the others: absent)."""
    done: dict[int, tuple[int, bytes]] = {}
    # Per key to bucket: (key id, width, data, n, cut, index in batch)
    todo: list[tuple[int, int, bytes, int, int, int]] = []
    for i, key_id in enumerate(batch.ids):
        found = kept.get(key_id)
        if found is None:
            continue
        width, data = found
        n = len(data) // 24
        if not n:
            continue
        old_steps = np.frombuffer(data, dtype="<i8", count=n)
        last = int(old_steps[-1])
        if last >= int(batch.steps[batch.starts[i]]):
            continue
        added = batch.ends[i] - batch.starts[i]
        if width == 1 and n + added <= MAX_BUCKETS:  # every point kept: splice, no bucketing
            a, b = batch.starts[i], batch.ends[i]
            spliced = splice(data, n, n, batch.steps[a:b], batch.values[a:b], batch.times[a:b])
            done[key_id] = (1, spliced)
        elif width > 1:
            cut = int(np.searchsorted(old_steps, last // width * width))
            todo.append((key_id, width, data, n, cut, i))
    if todo:
        done.update(_extended(todo, batch))
    return done


def _extended(
    todo: list[tuple[int, int, bytes, int, int, int]], batch: Batch
) -> dict[int, tuple[int, bytes]]:
    """Each key's tail (the overview's points from `cut`, then the batch's) reduced to its
    buckets' extremes, all keys in one pass; ``points.extremes`` per key, with its first
    point kept only where the tail is the whole overview (cut == 0)."""
    steps: list[Ints] = []
    values: list[Floats] = []
    times: list[Floats] = []
    lengths: list[int] = []
    for _key_id, _width, data, n, cut, i in todo:
        a, b = batch.starts[i], batch.ends[i]
        steps += [np.frombuffer(data, dtype="<i8", count=n)[cut:], batch.steps[a:b]]
        values += [np.frombuffer(data, dtype="<f8", count=n, offset=8 * n)[cut:], batch.values[a:b]]
        times += [np.frombuffer(data, dtype="<f8", count=n, offset=16 * n)[cut:], batch.times[a:b]]
        lengths.append(n - cut + b - a)
    all_steps = np.concatenate(steps).astype(np.int64)
    all_values = np.concatenate(values).astype(np.float64)
    size = len(all_steps)
    series = np.repeat(np.arange(len(todo)), lengths)
    widths = np.repeat(np.array([t[1] for t in todo], dtype=np.int64), lengths)
    bucket = all_steps // widths
    ends = np.cumsum(lengths)
    begins = ends - np.array(lengths)
    new_group = np.ones(size, dtype=bool)
    new_group[1:] = (bucket[1:] != bucket[:-1]) | (series[1:] != series[:-1])
    starts = np.flatnonzero(new_group)
    group = np.cumsum(new_group) - 1
    null = np.isnan(all_values)
    low = np.where(null, np.inf, all_values)
    high = np.where(null, -np.inf, all_values)
    is_min = low == np.minimum.reduceat(low, starts)[group]  # all NULL: every point, take 1st
    is_max = (high == np.maximum.reduceat(high, starts)[group]) & ~null
    whole = np.array([t[4] == 0 for t in todo])
    keep = np.unique(
        np.concatenate(
            (first_per_group(is_min, group), first_per_group(is_max, group), ends - 1)
            + ((begins[whole],) if whole.any() else ())
        )
    )
    kept_steps = all_steps[keep]
    kept_values = all_values[keep]
    kept_times = np.concatenate(times).astype(np.float64)[keep]
    cuts = np.searchsorted(series[keep], np.arange(len(todo) + 1)).tolist()
    tail_buckets = np.bincount(series[starts], minlength=len(todo)).tolist()
    done: dict[int, tuple[int, bytes]] = {}
    for j, (key_id, width, data, n, cut, _i) in enumerate(todo):
        prefix = np.frombuffer(data, dtype="<i8", count=cut) // width
        buckets = int(np.count_nonzero(prefix[1:] != prefix[:-1])) + (1 if cut else 0)
        if buckets + tail_buckets[j] > MAX_BUCKETS:
            continue  # the width doubles: points.extend refits it
        a, b = cuts[j], cuts[j + 1]
        tail = splice(data, n, cut, kept_steps[a:b], kept_values[a:b], kept_times[a:b])
        done[key_id] = (width, tail)
    return done
