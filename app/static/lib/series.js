// Series arithmetic for the charts, kept apart from the page wiring: binary search over
// steps, TensorBoard-style debiased EMA, and min/max decimation that keeps spikes.

// First index with a[i] >= x (a sorted ascending).
export const lowerBound = (a, x) => {
  let lo = 0, hi = a.length;
  while (lo < hi) { const mid = (lo + hi) >> 1; if (a[mid] < x) lo = mid + 1; else hi = mid; }
  return lo;
};

// Debiased EMA like TensorBoard's; null (non-finite) values stay gaps.
export const emaState = () => ({last: 0, n: 0});
export const emaPush = (s, v, w) => {
  if (v === null || !isFinite(v)) return null;
  if (w === 0) return v;
  s.last = s.last * w + (1 - w) * v;
  s.n += 1;
  return s.last / (1 - Math.pow(w, s.n));
};
export const emaAll = (values, w, s) => values.map((v) => emaPush(s, v, w));

// Client-side min/max decimation, for a live series that outgrew the budget; like the
// server's (app/metrics/downsample.py), the first and last points are always kept too.
export const decimate = (d, budget) => {
  const n = d.step.length, buckets = Math.max(1, (budget - 2) >> 1), width = Math.ceil(n / buckets);
  /** @type {{step: number[], value: (number | null)[], time: any[]}} */
  const out = {step: [], value: [], time: []};
  for (let b = 0; b < n; b += width) {
    let lo = -1, hi = -1;
    for (let i = b; i < Math.min(n, b + width); i++) {
      const v = d.value[i];
      if (v === null) continue;
      if (lo < 0 || v < d.value[lo]) lo = i;
      if (hi < 0 || v > d.value[hi]) hi = i;
    }
    if (lo < 0) lo = hi = b;
    const keep = new Set([lo, hi]);
    if (b === 0) keep.add(0);
    if (b + width >= n) keep.add(n - 1);
    for (const i of [...keep].sort((x, y) => x - y)) {
      out.step.push(d.step[i]); out.value.push(d.value[i]); out.time.push(d.time[i]);
    }
  }
  return out;
};


// --- another metric as the x axis ----------------------------------------------------------
// The chart state's x: "step", "time" (wall time), "relative" (seconds since the run's first
// point) or "metric:<key>" (any logged key: epoch, tokens). The same names wherever a chart's
// state is kept (the overlays' control, saved views).
export const X_METRIC = "metric:";
export const xMetricKey = (x) => (typeof x === "string" && x.startsWith(X_METRIC) ? x.slice(X_METRIC.length) : null);

// Each of `steps` (ascending) mapped to the x-metric's value at that step: `xs` is the
// x-metric's series ({step, value}, steps ascending). Its value at the same step when it has
// one; between two of its points, the straight line between them (a downsampled series, or one
// logged less often, has no point at every step: tokens every 10 steps read 1280 at step 5
// between 0 and 2560); before its first point or after its last, null (a gap: nothing is
// known there). A null x value stays a gap.
export const xAtSteps = (steps, xs) => {
  const out = new Array(steps.length).fill(null);
  if (!xs || !xs.step.length) return out;
  const n = xs.step.length;
  for (let i = 0; i < steps.length; i++) {
    const step = steps[i];
    const j = lowerBound(xs.step, step);
    if (j < n && xs.step[j] === step) { out[i] = xs.value[j]; continue; }
    if (j === 0 || j === n) continue;
    const s0 = xs.step[j - 1], s1 = xs.step[j], v0 = xs.value[j - 1], v1 = xs.value[j];
    if (v0 === null || v1 === null || !isFinite(v0) || !isFinite(v1)) continue;
    out[i] = v0 + ((v1 - v0) * (step - s0)) / (s1 - s0);
  }
  return out;
};

// "Clip outliers": each run's curve without its top and bottom 2% (a spike), then the runs
// whose range lies far outside the others' (a diverged run: more than 3 typical spans past
// the median) left out of the y range, so one run at loss 70 no longer flattens the rest.
export const clippedRange = (traces, logY) => {
  const lows = [], highs = [];
  for (const t of traces) {
    if (t.visible === "legendonly") continue;
    const vs = [];
    for (const v of t.y) if (v !== null && isFinite(v) && (!logY || v > 0)) vs.push(logY ? Math.log10(v) : v);
    if (!vs.length) continue;
    vs.sort((a, b) => a - b);
    const q = (p) => vs[Math.min(vs.length - 1, Math.floor(p * vs.length))];
    lows.push(q(0.02)); highs.push(q(0.98));
  }
  if (!lows.length) return null;
  const median = (a) => { const s = [...a].sort((x, y) => x - y); return s[(s.length - 1) >> 1]; };
  const mLow = median(lows), mHigh = median(highs);
  const span = Math.max(mHigh - mLow, Math.abs(mHigh) * 1e-3, 1e-12);
  const lo = Math.min(...lows.filter((v) => v >= mLow - 3 * span));
  const hi = Math.max(...highs.filter((v) => v <= mHigh + 3 * span));
  const pad = (hi - lo) * 0.08 || span * 0.1;
  return [lo - pad, hi + pad];
};
