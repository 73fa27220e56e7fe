"""app.metrics.overview.batch gives what the per-key ways give: every key's overview extended
in one pass against ``fit(merge(old, new))`` per key, and a batch's summary figures against
plain min/max over its points (issue 29). Pure functions, no database."""

from __future__ import annotations

import numpy as np

from app.metrics.overview.batch import Batch, Row, extend_kept
from app.metrics.overview.points import Points, decode, encode, extend, fit, merge


def _series(rng: np.random.Generator, n: int) -> Points:
    steps = np.cumsum(rng.integers(1, int(rng.choice([2, 5, 50])), n)).astype(np.int64)
    if rng.random() < 0.3:
        values = rng.choice([0.0, 1.0, -1.0, np.nan], n)
    else:
        values = rng.normal(size=n)
    return Points(steps, values, rng.random(n))


def test_overviews_extended_in_one_pass_are_the_ones_rebuilt_per_key() -> None:
    """Many keys per batch, rows in any order, widths 1 to wide, NaN and ties; the keys
    extend_kept leaves (width doubling, a width-1 overview outgrowing MAX_BUCKETS) go the
    per-key way, as update_overviews does."""
    rng = np.random.default_rng(2029)
    checked = handled = 0
    for _ in range(12):
        keys = int(rng.integers(1, 12))
        series = {100 + k: _series(rng, int(rng.integers(2, 5000))) for k in range(keys)}
        overviews = {
            k: fit(Points(p.steps[:1], p.values[:1], p.times[:1]), 1) for k, p in series.items()
        }
        done = dict.fromkeys(series, 1)
        while any(done[k] < len(p) for k, p in series.items()):
            rows: list[Row] = []
            parts: dict[int, Points] = {}
            for k, p in series.items():
                start = done[k]
                end = min(len(p), start + int(rng.integers(0, 300)))
                if end > start:
                    part = Points(p.steps[start:end], p.values[start:end], p.times[start:end])
                    parts[k] = part
                    steps, values, times = part.lists()
                    rows += [(k, s, v, t) for s, v, t in zip(steps, values, times, strict=True)]
                    done[k] = end
            if not rows:
                continue
            rng.shuffle(rows)
            batch = Batch(rows)
            raw = {k: (w, encode(o)) for k, (w, o) in overviews.items()}
            got = extend_kept(raw, batch)
            for k, part in parts.items():
                width, old = overviews[k]
                want_width, want = fit(merge(old, part), width)
                if k in got:
                    new_width, new = got[k][0], decode(got[k][1])
                    handled += 1
                else:
                    new_width, new = extend(width, old, part)
                assert new_width == want_width
                assert np.array_equal(new.steps, want.steps)
                assert np.array_equal(new.values, want.values, equal_nan=True)
                assert np.array_equal(new.times, want.times)
                overviews[k] = (new_width, new)
                checked += 1
            for k, lo, hi, top in batch.summaries():
                part = parts[k]
                finite = part.values[~np.isnan(part.values)]
                assert lo == (float(finite.min()) if len(finite) else None)
                assert hi == (float(finite.max()) if len(finite) else None)
                assert top == int(part.steps[-1])
    assert checked > 300 and handled > 0.8 * checked
