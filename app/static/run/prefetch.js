// Loaded first on the run page (an async module in the head): starts the history download
// while the browser still parses the page and the chart library; the charts take it from
// here (run/charts.js imports the same module instance, so nothing is fetched twice).
import {send} from "../lib/api.js";
import {api} from "../lib/urls.js";

export const BUDGET = 4000;  // points per series in one view (the server keeps min and max)

const script = /** @type {HTMLScriptElement | null} */ (document.querySelector("script[data-run-id]"));
const runId = script ? Number(script.dataset.runId) : null;

export const history = runId === null ? null
  : send("GET", api.runMetrics(runId, {max_points: BUDGET, with_time: "true"}));
