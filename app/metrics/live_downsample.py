"""The live downsample cache: a series read again and again (a live run's page and its viewers,
the experiment page's overlay of every run) asks the database only for what can have changed
since the last read, and for nothing while the series has not moved. The SQL of a downsample
is in app/metrics/downsample.py; this module keeps what it returned, per process, bounded by
the points held (MAX_CACHED_POINTS)."""

from __future__ import annotations

import bisect
import threading
import time
from array import array
from collections import OrderedDict

from sqlalchemy import Connection

from app.metrics import downsample
from app.metrics.downsample import Points, bucket_width, with_ends

# --- live series: only the buckets that can still change -------------------------------------
#
# A live run's page (and every viewer's) asks for the same downsampled series again and again
# while points are appended at its end. While the bucket width stays the same, every bucket but
# the last is final: its min and max cannot change. So the final buckets' points are kept per
# (database, key, first step, generation) and only the buckets from the last one on are asked
# from the database. `generation` changes whenever a run's points may change other than by
# appending (a requeued attempt drops the points past its checkpoint).
#
# The width has to grow with the series, and a new width used to mean asking the database for
# every bucket again (~40 ms for 4 x 15k points on PostgreSQL, idle; the load bench saw it on
# nearly every read, since a run logging 250 steps/s crossed a width every ~4 s). A growing
# series therefore gets power-of-two widths: a bucket of width 2w is exactly two buckets of
# width w, so the kept points, regrouped, are the kept points of the wider buckets (the min of
# two minima is the minimum), and no width change goes back to the database. The price is
# resolution: between half and all of max_points points, where the exact width gives all.


class _Arrays:
    """Points in typed arrays (8 bytes a number instead of a Python object each: the cache was
    most of the server's memory growth under load); NULL is kept as NaN, which the database
    never returns for a value (non-finite values are stored as NULL)."""

    __slots__ = ("_steps", "_values", "_times")

    def __init__(self, steps: list[int], values: list[float | None], times: list[float]) -> None:
        self._steps = array("q", steps)
        self._values = array("d", (_NAN if v is None else v for v in values))
        self._times = array("d", times)

    def __len__(self) -> int:
        return len(self._steps)

    def points(self) -> Points:
        values = [None if v != v else v for v in self._values]  # NaN != NaN
        return list(self._steps), values, list(self._times)


class _Final(_Arrays):
    """The final buckets' points, and the whole view last answered from them (`view`, made
    when the series' last step was `view_hi`): a read that finds the series still ending at
    `view_hi` has nothing new to ask the database for, neither the last bucket nor the ends
    (within a generation points are only appended, and a stored point never changes: ingest
    keeps the first one of a step). A finished run's series is then read once, and a page
    of 200 of them again costs no point read at all."""

    __slots__ = ("until", "used", "size", "view_hi", "view")

    def __init__(
        self,
        until: int,  # buckets starting before this step are final
        steps: list[int],
        values: list[float | None],
        times: list[float],
        *,
        view_hi: int | None = None,
        view: Points | None = None,
    ) -> None:
        super().__init__(steps, values, times)
        self.until = until
        self.used = time.monotonic()  # last read at this very width (see `_store`)
        self.view_hi = view_hi
        self.view = _Arrays(*view) if view is not None else None
        # What it costs the cache's budget (MAX_CACHED_POINTS).
        self.size = len(self) + (len(self.view) if self.view is not None else 0)


_NAN = float("nan")


# A series: (database, key id, first step, generation, the first point's wall time). The wall
# time tells a series from an older one that had the same key id: SQLite gives a new row the
# highest id + 1, so the keys of a deleted newest run come back as a new run's, with the same
# first step and generation 1.
SeriesId = tuple[str, int, int, int, float]
# (*series, width) -> the final buckets. Readers asking for different max_points (the run
# page, the compare page) keep an entry each.
_FINAL: OrderedDict[tuple[str, int, int, int, float, int], _Final] = OrderedDict()
_FINAL_POINTS = [0]  # the points _FINAL holds, all entries together (under _FINAL_LOCK)
# series -> the widths _FINAL holds of it, so a store finds
# a series' narrower widths without a walk over the whole cache (thousands of entries).
_WIDTHS: dict[SeriesId, set[int]] = {}
# series -> a count it is known to exceed: within
# a generation a series only grows, so once it had more than max_points points it still has.
_LONGER_THAN: OrderedDict[SeriesId, int] = OrderedDict()
_FINAL_LOCK = threading.Lock()
# The cache is bounded by the points it holds (24 bytes each in its arrays: ~24 MB), not by a
# count of series: it was 128 series, fewer than the experiment page's overlay reads (100 runs
# x 2 keys), so an LRU read in order evicted every series before it was read again and every
# load was cold (~2.7 s for the two requests). 200 series of 300 points are 60,000 points; a
# run page's 4,000-point view of 8 keys 32,000.
MAX_CACHED_POINTS = 1_000_000
MAX_KNOWN_LENGTHS = 20_000  # _LONGER_THAN entries (~200 bytes each): 100 pages of 200 series
# A narrower width's buckets unread for this long are dropped when a wider width of the same
# series is kept: a growing series' reader never goes back to them, and held until the LRU
# pushed them out they made the server's memory grow with every doubling (the load bench:
# ~3 MB/min). A reader still at the narrower width (another max_points, read within that
# time) keeps them; one that comes back later reads its buckets from the database again.
SUPERSEDED_IDLE_SECONDS = 2.0


def live_width(lo: int, hi: int, max_points: int) -> int:
    """The exact width rounded up to a power of two: widths of a growing series then only
    ever double, and each doubling is derived from the buckets already kept."""
    exact = bucket_width(lo, hi, max_points)
    return 1 << (exact - 1).bit_length()


def known_longer_than(
    conn: Connection, *, key_id: int, lo: int, generation: int, origin: float, count: int
) -> bool:
    """Whether the series is known (from an earlier `note_longer_than`) to hold more than
    `count` points, which saves the probe that would find out."""
    with _FINAL_LOCK:
        known = _LONGER_THAN.get((str(conn.engine.url), key_id, lo, generation, origin))
    return known is not None and known >= count


def note_longer_than(
    conn: Connection, *, key_id: int, lo: int, generation: int, origin: float, count: int
) -> None:
    key = (str(conn.engine.url), key_id, lo, generation, origin)
    with _FINAL_LOCK:
        _LONGER_THAN[key] = max(count, _LONGER_THAN.get(key, 0))
        _LONGER_THAN.move_to_end(key)
        while len(_LONGER_THAN) > MAX_KNOWN_LENGTHS:
            _LONGER_THAN.popitem(last=False)


def downsample_live(
    conn: Connection,
    *,
    key_id: int,
    lo: int,
    hi: int,
    max_points: int,
    generation: int,
    origin: float,
    growing: bool = True,
) -> tuple[list[int], list[float | None], list[float]]:
    """Like `downsample_timed`, asking the database only for the buckets that may have changed
    since the last call. A `growing` series gets `live_width` buckets; a finished one the
    exact width (its width no longer changes, so the cache holds after one full read).
    `origin` is the wall time of the series' first point (see SeriesId)."""
    width = live_width(lo, hi, max_points) if growing else bucket_width(lo, hi, max_points)
    last = lo + ((hi - lo) // width) * width  # the last bucket's start: it may still grow
    series = (str(conn.engine.url), key_id, lo, generation, origin)
    final = _kept(series, width)
    if final is not None and final.view is not None and final.view_hi == hi:
        return final.view.points()
    start = final.until if final is not None and final.until <= last else lo
    steps, values, times = downsample.bucket_extremes(
        conn, key_id=key_id, start=start, hi=hi, width=width
    )
    if start > lo and final is not None:
        kept_steps, kept_values, kept_times = final.points()
        steps = kept_steps + steps
        values = kept_values + values
        times = kept_times + times
    cut = bisect.bisect_left(steps, last)
    view = with_ends(conn, key_id=key_id, lo=lo, hi=hi, points=(steps, values, times))
    kept = _Final(last, steps[:cut], values[:cut], times[:cut], view_hi=hi, view=view)
    _store((*series, width), kept)
    return view


def _kept(series: SeriesId, width: int) -> _Final | None:
    """The final buckets kept for this width, else those of the widest narrower power-of-two
    divisor of it, else the raw points (width 1, `keep_whole`), regrouped (exact: see
    `_widened`)."""
    narrower = width
    with _FINAL_LOCK:
        while True:
            final = _FINAL.get((*series, narrower))
            if final is not None:
                _FINAL.move_to_end((*series, narrower))
                if narrower == width:
                    final.used = time.monotonic()
                break
            if narrower == 1:
                return None
            narrower = narrower // 2 if narrower % 2 == 0 else 1
    return final if narrower == width else _widened(final, lo=series[2], width=width)


def keep_whole(
    conn: Connection,
    *,
    key_id: int,
    lo: int,
    generation: int,
    origin: float,
    steps: list[int],
    values: list[float | None],
    times: list[float],
) -> None:
    """Keep a whole series just read (short enough to be sent raw) as its width-1 buckets:
    each point is its own bucket's min and max. When the series grows past max_points, its
    first downsample is then regrouped from these, not read bucket by bucket from the
    database (that first read was the slowest of the load bench's metrics reads)."""
    if not steps:
        return
    hi = steps[-1]
    cut = bisect.bisect_left(steps, hi)  # the last step's bucket is not final yet
    _store(
        (str(conn.engine.url), key_id, lo, generation, origin, 1),
        _Final(hi, steps[:cut], values[:cut], times[:cut]),
    )


def _store(key: tuple[str, int, int, int, float, int], final: _Final) -> None:
    series, width = key[:5], key[5]
    idle_since = final.used - SUPERSEDED_IDLE_SECONDS
    with _FINAL_LOCK:
        _drop(key)
        _FINAL[key] = final
        _FINAL_POINTS[0] += final.size
        widths = _WIDTHS.setdefault(series, set())
        widths.add(width)
        for narrower in [w for w in widths if w < width]:
            if _FINAL[(*series, narrower)].used <= idle_since:
                _drop((*series, narrower))
        # Least recently used first; the entry just stored stays even when it alone is over
        # the budget (the next store of anything evicts it).
        while _FINAL_POINTS[0] > MAX_CACHED_POINTS and len(_FINAL) > 1:
            _drop(next(iter(_FINAL)))


def _drop(key: tuple[str, int, int, int, float, int]) -> None:
    """Forget one entry, if held (the caller holds _FINAL_LOCK)."""
    final = _FINAL.pop(key, None)
    if final is None:
        return
    _FINAL_POINTS[0] -= final.size
    widths = _WIDTHS.get(key[:5])
    if widths is not None:
        widths.discard(key[5])
        if not widths:
            del _WIDTHS[key[:5]]


def cached_points() -> int:
    """The points the live cache holds (its budget is MAX_CACHED_POINTS)."""
    with _FINAL_LOCK:
        return _FINAL_POINTS[0]


def _widened(final: _Final, *, lo: int, width: int) -> _Final:
    """The kept buckets regrouped into buckets `width` wide, when that is exact: the new width
    is a multiple of the kept one. Each new bucket takes the smallest and the largest of its
    old buckets' points (NULL losing against any value, the earliest step on ties), as the
    SQL would from the raw rows; the last new bucket that the kept ones do not fill entirely
    is left to the database."""
    until = lo + ((final.until - lo) // width) * width
    old_steps, old_values, old_times = final.points()
    steps: list[int] = []
    values: list[float | None] = []
    times: list[float] = []
    end = bisect.bisect_left(old_steps, until)
    i = 0
    while i < end:
        bucket = (old_steps[i] - lo) // width
        j = i
        low = high = i
        while j < end and (old_steps[j] - lo) // width == bucket:
            value = old_values[j]
            if value is not None:
                low_value, high_value = old_values[low], old_values[high]
                if low_value is None or value < low_value:
                    low = j
                if high_value is None or value > high_value:
                    high = j
            j += 1
        for k in sorted({low, high} if old_values[high] is not None else {low}):
            steps.append(old_steps[k])
            values.append(old_values[k])
            times.append(old_times[k])
        i = j
    return _Final(until, steps, values, times)


def clear_live_cache() -> None:
    with _FINAL_LOCK:
        _FINAL.clear()
        _WIDTHS.clear()
        _FINAL_POINTS[0] = 0
        _LONGER_THAN.clear()
