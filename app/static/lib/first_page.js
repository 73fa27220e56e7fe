// The runs table's first page as the experiment page holds it (app/experiments/views.py): the
// newest runs the curves overlay (#experiment-curves-runs, as GET /api/runs gives them) and
// #runs-first-page ({take, next}: how many of them are the table's first page, and that page's
// cursor). The table shows them without asking GET /api/runs again, a round trip that was a
// fifth of the page's time at 10,000 runs, when its query is the one the page answered.

/** The held page ({runs, next}) or null, from the two elements' text (or null when missing). */
export const heldPage = (curvesText, firstText) => {
  if (!curvesText || !firstText) return null;
  try {
    const runs = JSON.parse(curvesText), first = JSON.parse(firstText);
    if (!Array.isArray(runs) || !first || typeof first.take !== "number") return null;
    return {runs: runs.slice(0, first.take), next: first.next ?? null};
  } catch (_) {
    return null;
  }
};

/**
 * The held page when it answers the table's query: the newest first (`sort` "-id"), nothing
 * filtered, and every summary key the chosen columns need carried (a run whose summaries were
 * cut to the list's 50 may lack one: then the API is asked, with summary_keys=).
 */
export const usable = (held, {sort, filtered, keys}) => {
  if (!held || sort !== "-id" || filtered) return null;
  const complete = held.runs.every((r) => !r.summary_cut || keys.every((k) => k in (r.summary || {})));
  return complete ? held : null;
};

/** heldPage of the page's two elements. */
export const readHeld = (doc) => heldPage(doc.getElementById("experiment-curves-runs")?.textContent,
                                          doc.getElementById("runs-first-page")?.textContent);
