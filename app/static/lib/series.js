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

