"""Many stored overviews viewed at once (the overlays: app.metrics.overlay), each cut as
``points.view`` cuts one, in numpy over all of them together: one decode into flat arrays, the
view's width found for every series at once, every bucket's min and max in one reduce, and the
JSON lists made once for all points. 1,000 runs' series cut one by one were 1,000 decodes,
views and list conversions in Python (0.37-0.83 s a key on a loaded box, issue 43).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from app.metrics.finite import BIGGEST
from app.metrics.overview.points import Points, first_per_group

Cut = dict[str, list[Any]]


def flat(
    stored: Sequence[tuple[int, bytes]], *, with_time: bool = True
) -> tuple[Points, npt.NDArray[np.intp]]:
    """The encoded overviews' points one after the other, and where each starts (n + 1
    offsets); without `with_time`, no wall times (an empty array: a third less to copy)."""
    sizes = [len(data) // 24 for _, data in stored]
    starts = np.zeros(len(sizes) + 1, dtype=np.intp)
    np.cumsum(sizes, out=starts[1:])
    if not stored:
        return Points(np.empty(0, np.int64), np.empty(0), np.empty(0)), starts
    raw = [
        np.frombuffer(data, dtype="<f8", count=3 * n)
        for (_, data), n in zip(stored, sizes, strict=True)
    ]

    def part(k: int) -> npt.NDArray[Any]:  # each overview's k-th array: steps, values, times
        return np.concatenate([r[k * n : (k + 1) * n] for r, n in zip(raw, sizes, strict=True)])

    steps = part(0).view("<i8").astype(np.int64, copy=False)
    values = part(1).astype(np.float64, copy=False)
    times = part(2).astype(np.float64, copy=False) if with_time else np.empty(0)
    return Points(steps, values, times), starts


def widths(
    width: npt.NDArray[np.int64],
    first: npt.NDArray[np.int64],
    last: npt.NDArray[np.int64],
    budget: int,
) -> npt.NDArray[np.int64]:
    """Each series' view width: its overview's, doubled until at most `budget` buckets lie
    between its first and last step (``points.view``'s loop, for all series at once)."""
    wide = width.copy()
    over = last // wide - first // wide + 1 > budget
    while over.any():
        wide[over] *= 2
        over = last // wide - first // wide + 1 > budget
    return wide


def cut(
    points: Points, starts: npt.NDArray[np.intp], width: npt.NDArray[np.int64], max_points: int
) -> npt.NDArray[np.intp]:
    """The indexes (in `points`, ascending) that each series' view keeps: ``points.view`` of
    every series (between starts[i] and starts[i + 1], its overview at width[i])."""
    n = len(points)
    sizes = np.diff(starts)
    nonempty = sizes > 0
    lo, hi = starts[:-1][nonempty], starts[1:][nonempty] - 1  # each series' ends
    keep = np.zeros(n, dtype=bool)
    if not n:
        return np.flatnonzero(keep)
    budget = max((max_points - 2) // 2, 1)
    first, last = points.steps[starts[:-1].clip(max=n - 1)], points.steps[starts[1:] - 1]
    wide = widths(width, first, last, budget)
    whole = ~nonempty | ((width == 1) & (sizes <= max_points)) | (wide == width)
    keep[lo] = keep[hi] = True
    # Each bucket's min and max point over all the series that are cut (bucket boundaries at
    # each series' start, as ``points.extremes`` sees one series).
    if not whole.any():  # the usual overlay: every series cut, no point to pick out
        rest: npt.NDArray[np.intp] | None = None
        steps, values, cut_sizes, cut_wide = points.steps, points.values, sizes, wide
        edge = np.zeros(n, dtype=bool)
        edge[lo] = True
    else:
        in_whole = np.repeat(whole, sizes)
        keep[in_whole] = True
        rest = np.flatnonzero(~in_whole)
        steps, values = points.steps[rest], points.values[rest]
        cut_sizes, cut_wide = sizes[~whole], wide[~whole]
        edge = np.zeros(len(rest), dtype=bool)
        edge[np.cumsum(cut_sizes) - cut_sizes] = True
    if len(steps):
        # widths are powers of two (an overview's is 1, doubled): a shift, not a division;
        # one shift for all when the series are alike (the usual overlay's)
        if ((cut_wide & (cut_wide - 1)) == 0).all():
            shifts = np.log2(cut_wide).astype(np.int64)
            same = (shifts == shifts[0]).all()
            bucket = steps >> (shifts[0] if same else np.repeat(shifts, cut_sizes))
        else:
            bucket = steps // np.repeat(cut_wide, cut_sizes)
        edge[1:] |= bucket[1:] != bucket[:-1]
        edge[0] = True
        group_starts = np.flatnonzero(edge)
        group = np.cumsum(edge) - 1
        null = np.isnan(values)
        nulls = bool(null.any())
        low = np.where(null, np.inf, values) if nulls else values
        high = np.where(null, -np.inf, values) if nulls else values
        is_min = low == np.minimum.reduceat(low, group_starts)[group]
        is_max = high == np.maximum.reduceat(high, group_starts)[group]
        if nulls:
            is_max &= ~null
        for mask in (is_min, is_max):
            picked = first_per_group(mask, group)
            keep[picked if rest is None else rest[picked]] = True
    return np.flatnonzero(keep)


def views(stored: Sequence[tuple[int, bytes]], max_points: int, *, with_time: bool) -> list[Cut]:
    """Each stored overview (width, its encoded points) viewed at max_points as a series' JSON
    lists: {"step", "value"[, "time"]}, values as JSON carries them (NULL for NaN, +/-inf as
    the largest double: app.metrics.finite)."""
    if not stored:
        return []
    points, starts = flat(stored, with_time=with_time)
    width = np.array([w for w, _ in stored], dtype=np.int64)
    index = cut(points, starts, width, max_points)
    ends = np.searchsorted(index, starts)
    steps = points.steps[index].tolist()
    values = points.values[index]
    finite = np.clip(values, -BIGGEST, BIGGEST)  # NaN stays NaN
    nulls = np.isnan(finite)
    if nulls.any():
        boxed = finite.astype(object)
        boxed[nulls] = None
        value_list = boxed.tolist()
    else:
        value_list = finite.tolist()
    times = points.times[index].tolist() if with_time else []
    out: list[Cut] = []
    for a, b in zip(ends[:-1].tolist(), ends[1:].tolist(), strict=True):
        series: Cut = {"step": steps[a:b], "value": value_list[a:b]}
        if with_time:
            series["time"] = times[a:b]
        out.append(series)
    return out
