"""Each series' overview, kept at ingest, so an overlay of many runs reads one row per series.

Why: the overlays (compare, the experiment page's curves) downsample every series they show,
and a fresh server had nothing kept (the live cache of app/metrics/live_downsample.py lives in
one process): its first overlay of 100 runs x 2 keys x 10k points was 1-3 s of bucket queries
over the points (issue 31, item 8). The overview is stored beside the points, in the same
transaction, so every server process reads it at once, before any cache is warm.

What (app.metrics.models.MetricOverview): the series' first and last points, and the min and
the max point of each bucket of `width` steps, buckets aligned on multiples of `width` (a
power of two). A NULL (non-finite) value loses against any finite value, ties go to the
earliest step, and a bucket of NULLs only keeps its first point: the rules of the SQL
downsample (app/metrics/downsample.py). When more than MAX_BUCKETS buckets hold points the
width doubles: a bucket of 2w is two buckets of w, so its extremes are among theirs and the
wider overview is exact without reading a point again. At width 1 it holds every point.

Kept by ingest after each batch's insert (``stored.update_overviews``): from the batch's
rows when every one was stored (the normal case: ``batch.extend_kept`` extends every key's
overview in one pass); when some were not (a replayed spool, a repeated step: the first point
of a step is the one kept), from the points stored in the batch's step range, read back;
merging a point the overview already has changes nothing. A series without an overview yet is
built from all its points (from the batch alone when its summary shows no earlier point).
Existing overview rows are locked for the merge on PostgreSQL; a series' first overview is not
(one forwarder writes a run's spool keys at a time). A requeued run loses its points past the
checkpoint: ``stored.drop_overviews`` forgets its series' overviews, and the next batch of each
builds it again from what is left.

A view for max_points (``points.view``): the smallest width, the overview's times a power of
two, whose buckets between the first and the last step number at most (max_points - 2) // 2; those
buckets' extremes and the two ends. At most max_points points; between half and all of them
for a series without long gaps in its steps (as a growing series' live view).

Three modules that import one way (stored -> batch -> points): ``points`` holds the rules on
numpy arrays (no database), ``batch`` extends many keys' overviews at once, ``stored`` reads
and writes the metric_overviews rows; ``many`` (-> points) views many overviews at once, for
the overlays (app.metrics.overlay).
"""
