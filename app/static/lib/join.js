// Many curves onto one x column: uPlot's aligned data ([x, y1, y2, ...], every y as long as
// x, undefined where its curve has no point), as uPlot.join builds it. uPlot.join sorts the
// distinct x with a comparator and looks each point's x up in a Map (1,000 curves of an
// overlay: issue 43); here the distinct x are sorted natively as a Float64Array and each
// curve walks them from its first x (its x ascending, as steps and wall times are; a step
// back is looked up by bisection): no lookup per point. Either is dominated by the output
// itself (every curve as long as all the x), ~10 ms for 1,000 curves of 24 points.

/**
 * The first index of `xs` (ascending) holding a value >= `x`.
 * @param {Float64Array} xs
 * @param {number} x
 * @param {number} lo
 */
const lowerBound = (xs, x, lo) => {
  let hi = xs.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (xs[mid] < x) lo = mid + 1; else hi = mid;
  }
  return lo;
};

/**
 * @param {Array<[ArrayLike<number>, ArrayLike<number | null | undefined>]>} tables each
 *   curve's x (numbers, none null) and its y (as long)
 * @returns {Array<Array<number | null | undefined>>} [the union of the x ascending, each
 *   curve's y at it]; a null y is kept where it is (it breaks the line), a curve's repeated x
 *   keeps its last y (as uPlot.join)
 */
export function join(tables) {
  const seen = new Set();
  for (const table of tables) {
    const x = table[0];
    for (let i = 0; i < x.length; i++) seen.add(x[i]);
  }
  const union = Float64Array.from(seen).sort();
  const n = union.length;
  /** @type {Array<Array<number | null | undefined>>} */
  const out = [Array.from(union)];
  for (const table of tables) {
    const x = table[0], y = table[1];
    const ys = new Array(n).fill(undefined);
    let j = x.length ? lowerBound(union, x[0], 0) : 0, last = -Infinity;
    for (let i = 0; i < x.length; i++) {
      const v = x[i];
      if (v < last) j = lowerBound(union, v, 0);
      else while (union[j] < v) j++;
      last = v;
      ys[j] = y[i];
    }
    out.push(ys);
  }
  return out;
}
