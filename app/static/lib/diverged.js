// +/-inf in a chart. JSON has no infinity: the server sends a logged +inf as the largest double
// and -inf as its negative (app/metrics/finite.py). A chart draws them just past the other
// values, so a diverging curve shoots to the top (or bottom) of the chart instead of squashing
// every other point flat, and its tooltip says "+inf" (or "-inf").

/** What the server sends for +inf (and, negated, for -inf). */
export const INF_SENT = Number.MAX_VALUE;

/**
 * The traces' values as drawn: +/-INF_SENT moved a tenth of the other values' span past
 * them (top for +inf, bottom for -inf); `top`/`bottom` are where they went (null: none).
 * @param {Array<Array<number | null | undefined>>} ys each trace's values
 * @returns {{ys: Array<Array<number | null | undefined>>, top: number | null, bottom: number | null}}
 */
export function drawable(ys) {
  let lo = Infinity, hi = -Infinity, high = false, low = false;
  for (const y of ys) {
    for (const v of y) {
      if (v == null) continue;
      if (v >= INF_SENT) high = true;
      else if (v <= -INF_SENT) low = true;
      else { if (v < lo) lo = v; if (v > hi) hi = v; }
    }
  }
  if (!high && !low) return {ys, top: null, bottom: null};
  if (lo > hi) { lo = 0; hi = 1; }
  const over = (hi - lo) / 10 || Math.abs(hi) / 10 || 1;
  const top = hi + over, bottom = lo - over;
  const moved = (v) => (v == null ? v : v >= INF_SENT ? top : v <= -INF_SENT ? bottom : v);
  return {ys: ys.map((y) => y.map(moved)), top: high ? top : null, bottom: low ? bottom : null};
}

/**
 * A drawn value as a tooltip shows it: "+inf"/"-inf" where `drawable` put an infinity.
 * @param {number} y
 * @param {{top: number | null, bottom: number | null}} marks
 */
export function tipValue(y, marks) {
  if (marks.top !== null && y === marks.top) return "+inf";
  if (marks.bottom !== null && y === marks.bottom) return "-inf";
  return String(Number(y.toPrecision(5)));
}
