// The runs table's first page as the experiment page holds it (app/experiments/views.py): the
// newest runs the curves overlay (#experiment-curves-runs, as GET /api/runs gives them but
// with the summaries of a few keys only), #runs-first-page ({take, next}: how many of them are
// the table's first page, and that page's cursor) and #experiment-metric-keys ({all, held}:
// the keys the runs logged, and those whose summaries they carry:
// app/experiments/held_keys.py). The table shows them without asking GET /api/runs again, a
// round trip that was a fifth of the page's time at 10,000 runs, when its query is the one
// the page answered.

/** The held page ({runs, next, keys}) or null, from the elements' text (or null when missing).
 * keys: the keys whose summaries the runs carry (a Set), null when the page did not say (then
 * the runs carry a list's). */
export const heldPage = (curvesText, firstText, keysText) => {
  if (!curvesText || !firstText) return null;
  try {
    const runs = JSON.parse(curvesText), first = JSON.parse(firstText);
    if (!Array.isArray(runs) || !first || typeof first.take !== "number") return null;
    const keys = keysText ? JSON.parse(keysText) : null;
    const held = keys && Array.isArray(keys.held) ? new Set(keys.held) : null;
    return {runs: runs.slice(0, first.take), next: first.next ?? null, keys: held};
  } catch (_) {
    return null;
  }
};

/**
 * The held page when it answers the table's query: the newest first (`sort` "-id"), nothing
 * filtered, and every summary key the chosen columns need carried (a key the page did not hold,
 * or, without that list, a run whose summaries were cut to the list's 50 lacking one: then the
 * API is asked, with summary_keys=).
 */
export const usable = (held, {sort, filtered, keys}) => {
  if (!held || sort !== "-id" || filtered) return null;
  const complete = held.keys ? keys.every((k) => held.keys.has(k))
    : held.runs.every((r) => !r.summary_cut || keys.every((k) => k in (r.summary || {})));
  return complete ? held : null;
};

/** The page's metric keys ({all, held}) from its #experiment-metric-keys, null without. */
export const metricKeys = (doc) => {
  try {
    const keys = JSON.parse(doc.getElementById("experiment-metric-keys")?.textContent || "null");
    return keys && Array.isArray(keys.all) ? keys : null;
  } catch (_) {
    return null;
  }
};

/** heldPage of the page's elements. */
export const readHeld = (doc) => heldPage(doc.getElementById("experiment-curves-runs")?.textContent,
                                          doc.getElementById("runs-first-page")?.textContent,
                                          doc.getElementById("experiment-metric-keys")?.textContent);
