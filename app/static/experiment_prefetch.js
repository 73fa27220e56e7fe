// Run as soon as it is fetched (an async module right after the page's run and key lists in
// templates/experiment.html): with EMBEDDED runs held there may be more, and the curves list
// the newest MAX_RUNS at once. That listing starts here, while the browser still fetches the
// page's other modules and the chart library, rather than when experiment_curves.js runs at
// the end of the page's parse: 1,000 runs overlaid waited ~0.4 s on it (issue 43).
// experiment_curves.js takes the answer from here (the same module instance: asked once).
import {call} from "./lib/api.js";
import {metricKeys} from "./lib/first_page.js";
import {api} from "./lib/urls.js";

// The page holds the newest EMBEDDED runs (app/experiments/views.py CURVE_RUNS).
export const EMBEDDED = 200, MAX_RUNS = 1000;
// Each listed run carries the held keys' summaries (the table's and the parallel
// coordinates' first) and its first LIST_KEYS keys' (a key a run began logging gets its
// chart), not the API's default 50: 100 runs logging 1,000 keys each made that 624 KB (issue
// 43). Where the runs log more keys than the page names, none of those: the pickers search.
const LIST_KEYS = 8;

/**
 * The runs list's query: the newest MAX_RUNS of the experiment with the summaries named above.
 * @param {string} experimentId
 * @param {{more?: boolean, held?: string[]} | null} keys the page's metric keys (metricKeys)
 */
export const runsQuery = (experimentId, keys) => ({
  experiment_id: experimentId, limit: MAX_RUNS, sort: "-id",
  summary_first: keys?.more ? 0 : LIST_KEYS, summary_keys: keys?.held,
});

/** The runs the page holds (#experiment-curves-runs), null without. */
const held = () => {
  const el = document.getElementById("experiment-curves-runs");
  try { return el ? JSON.parse(el.textContent || "null") : null; } catch (_) { return null; }
};

export const embeddedRuns = held();
const experimentId = document.getElementById("experiment-curves")?.dataset.experimentId;

/** The first list's answer on its way (null: the page holds every run the curves draw). */
export const firstList = experimentId && embeddedRuns && embeddedRuns.length >= EMBEDDED
  ? call("GET", api.runs(runsQuery(experimentId, metricKeys(document)))) : null;
