"""app.metrics.overview.many cuts many stored overviews at once as ``points.view`` cuts each
(issue 43: 1,000 runs' series for one overlay): random series of every width, spikes, NULL
(NaN), +/-inf, ties, empty and one-point overviews, views of 4 to MAX_VIEW_POINTS points.
Pure functions, no database."""

from __future__ import annotations

from typing import Any

import numpy as np

from app.metrics.finite import json_values
from app.metrics.overview.many import views
from app.metrics.overview.points import MAX_VIEW_POINTS, Points, encode, fit, view


def _series(rng: np.random.Generator, n: int) -> Points:
    steps = np.cumsum(rng.integers(1, int(rng.choice([2, 5, 50, 5000])), n)).astype(np.int64)
    if rng.random() < 0.3:
        values = rng.choice([0.0, 1.0, -1.0, np.nan, np.inf, -np.inf], n)
    else:
        values = rng.normal(size=n)
        spikes = rng.random(n) < 0.01
        values[spikes] = rng.choice([1e6, -1e6, np.inf, -np.inf, np.nan], int(spikes.sum()))
    if rng.random() < 0.1:
        values[:] = np.nan
    return Points(steps, values, rng.random(n) + 1.7e9)


def _one(width: int, points: Points, max_points: int, with_time: bool) -> dict[str, Any]:
    steps, values, times = view(width, points, max_points).lists()
    out: dict[str, Any] = {"step": steps, "value": json_values(values)}
    if with_time:
        out["time"] = times
    return out


def test_many_overviews_cut_at_once_are_each_ones_view() -> None:
    rng = np.random.default_rng(43)
    checked = cut = 0
    for trial in range(40):
        stored = []
        for _ in range(int(rng.integers(1, 60))):
            sizes = [1, 2, 3, int(rng.integers(4, 1025)), int(rng.integers(1025, 9000))]
            n = int(rng.choice(sizes))
            width, points = fit(_series(rng, n), 1)
            stored.append((width, encode(points), points))
        max_points = int(rng.choice([4, 5, 24, 25, 300, int(rng.integers(4, MAX_VIEW_POINTS + 1))]))
        with_time = trial % 2 == 0
        got = views([(w, data) for w, data, _ in stored], max_points, with_time=with_time)
        want = [_one(w, p, max_points, with_time) for w, _, p in stored]
        # NaN != NaN: compared as JSON would carry them (None); +/-inf as the largest double
        assert got == want
        checked += len(stored)
        cut += sum(len(g["step"]) < len(p) for g, (_, _, p) in zip(got, stored, strict=True))
    assert checked > 500 and cut > 100  # both ways taken: series cut and series whole


def test_an_overlay_of_alike_series_every_one_cut() -> None:
    """The usual overlay: every series cut, on the same steps (one series' last bucket is the
    next one's first: the buckets must still end at each series' end), alike or of widths
    that differ."""
    rng = np.random.default_rng(4343)
    for trial in range(20):
        stored = []
        for _ in range(int(rng.integers(2, 80))):
            n = 1000 if trial % 2 else int(rng.integers(30, 9000))
            points = _series(rng, n)
            points.steps = np.arange(1, n + 1, dtype=np.int64)
            width, points = fit(points, 1)
            stored.append((width, encode(points), points))
        max_points = int(rng.choice([4, 24, 25]))
        got = views([(w, data) for w, data, _ in stored], max_points, with_time=False)
        assert got == [_one(w, p, max_points, False) for w, _, p in stored]
        assert all(len(g["step"]) < len(p) for g, (_, _, p) in zip(got, stored, strict=True))


def test_no_overview_is_no_view() -> None:
    assert views([], 300, with_time=True) == []
