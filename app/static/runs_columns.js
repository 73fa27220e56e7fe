// The runs table's columns (experiment_runs.js): which params and summaries show, and how
// each cell is made. Every name, key and value from a run is set as text, never as HTML.
// The pure parts (summaryKeys, keyCounts, defaultSummaries, tableParams, splitSummary, seconds)
// are unit-tested.
import {timeEl} from "./lib/dom.js";
import {compareKeys, fmtDuration, isSeedParam, isSystemKey, fmtValue, parseTime, runColor} from "./lib/format.js";
import {seedShown} from "./lib/seed.js";
import {pages} from "./lib/urls.js";

export const el = (tag, text, cls) => {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (cls) node.className = cls;
  return node;
};
// Seconds from `a` to `b` (ISO times; b missing: until `now`), null without a start.
export const seconds = (a, b, now = new Date()) => {
  const start = parseTime(a);
  if (!start) return null;
  const end = parseTime(b) || now;
  return (/** @type {any} */ (end) - /** @type {any} */ (start)) / 1000;
};

export const summaryKeys = (runs) => {
  const keys = new Set();
  for (const run of runs) for (const key of Object.keys(run.summary || {})) keys.add(key);
  return [...keys].sort(compareKeys);
};
// How many of `runs` logged each metric key (a Map).
export const keyCounts = (runs) => {
  const counts = new Map();
  for (const run of runs) for (const key of Object.keys(run.summary || {})) counts.set(key, (counts.get(key) || 0) + 1);
  return counts;
};
const VALIDATION = /^(val|valid|validation|eval|test)\b/i;
// Until the reader picks: the last value of the key naming a loss and the max of the key
// naming an accuracy (whatever the script called them) that most runs logged (`counts`, from
// keyCounts: in an experiment mixing job runs and MLflow runs, the val/acc every run has
// rather than a train/acc only the jobs log; on a tie a validation key's accuracy, then key
// order), the system series (sys/) left out; else the first key's last.
// A sweep's page puts its metric first (data-default-summary, e.g. "val/acc.last"), even
// before a trial logged it (a recipe logs val/* only at an epoch's end).
export const defaultSummaries = (keys, first, counts = new Map()) => {
  const logged = keys.filter((k) => !isSystemKey(k));
  const most = (re, preferred) => logged.filter((k) => re.test(k)).sort((a, b) =>
    ((counts.get(b) || 0) - (counts.get(a) || 0)) ||
    (preferred ? Number(VALIDATION.test(b)) - Number(VALIDATION.test(a)) : 0) ||
    compareKeys(a, b))[0];
  const loss = most(/loss/i, false);
  const acc = most(/acc/i, true);
  const chosen = [];
  if (first) chosen.push(first);
  if (loss) chosen.push(`${loss}.last`);
  if (acc) chosen.push(`${acc}.max`);
  if (!chosen.length && keys.length) chosen.push(`${(logged[0] || keys[0])}.last`);
  return [...new Set(chosen)];
};

// The param columns: each param whose value differs among the runs that have it (a key only
// some runs have, the same on each, is no column: a mixed experiment's job runs share their
// launch config's ~25 keys that its MLflow runs lack), in key order; MLflow's own tags
// (`mlflow.*`, recorded as `tags.mlflow.*`: source, user, run name) are tags, never columns;
// the seed only when asked.
const MLFLOW_TAG = /^(tags\.)?mlflow\./;
export const tableParams = (runs, withSeed = false) => {
  const values = new Map();
  for (const run of runs) {
    for (const [key, value] of Object.entries(run.params || {})) {
      if (MLFLOW_TAG.test(key) || (!withSeed && isSeedParam(key))) continue;
      if (!values.has(key)) values.set(key, new Set());
      values.get(key).add(JSON.stringify(value));
    }
  }
  return [...values].filter(([, seen]) => seen.size > 1).map(([key]) => key).sort();
};
export const splitSummary = (col) => {
  const cut = col.lastIndexOf(".");
  return [col.slice(0, cut), col.slice(cut + 1)];
};

// The table's columns for `runs` with the chosen `summaries`: each {title, sort (the API's
// sort= name), num, param | summary, cell(run) -> <td>}. owners: user id -> name.
/**
 * @typedef {{title: string, sort?: string, num?: boolean, cls?: string, param?: string,
 *            summary?: string, cell: (run: import("./lib/events.js").RunRow) => HTMLElement}} Column
 */
/** @returns {Column[]} */
export const columns = (runs, summaries, owners) => {
  /** @type {Column[]} */
  const cols = [
    {title: "Run", sort: "id", cls: "run-name", cell: runCell},
    {title: "Status", sort: "status", cell: (run) => {
      const td = el("td");
      td.append(el("span", run.status, `badge status-${run.status}`));
      if (run.stopped_early) {
        const mark = el("span", "stopped early", "badge stopped-early");
        mark.title = run.stopped_early;
        td.append(" ", mark);
      }
      return td;
    }},
    {title: "Tags", cell: (run) => {
      const td = el("td", undefined, "run-tags");
      for (const tag of run.tags || []) td.append(el("span", tag, "badge tag"), " ");
      return td;
    }},
  ];
  for (const key of tableParams(runs, seedShown())) {
    cols.push({title: key, sort: `params.${key}`, num: true, param: key,
               cell: (run) => el("td", fmtValue((run.params || {})[key]), "num")});
  }
  cols.push({title: "Started", sort: "started_at", cell: (run) => {
    const td = el("td");
    if (run.started_at) td.append(timeEl(run.started_at));
    else { const q = el("span", "queued ", "muted"); q.append(timeEl(run.created_at)); td.append(q); }
    // Why it waits, in the scheduler's words ("no worker is running: ..." among them).
    if (run.status === "queued" && run.queue_reason) {
      td.append(el("span", `waiting: ${run.queue_reason}`, "queue-reason-inline muted"));
    }
    return td;
  }});
  cols.push({title: "Duration", num: true, cell: (run) => el("td",
    run.started_at ? fmtDuration(seconds(run.started_at, run.finished_at)) : "–", "num")});
  for (const col of summaries || []) {
    const [key, agg] = splitSummary(col);
    cols.push({title: `${key} (${agg})`, sort: `summary.${key}.${agg}`, num: true, summary: col,
               cell: (run) => el("td", fmtValue(((run.summary || {})[key] || {})[agg]), "num")});
  }
  cols.push({title: "Launched by", cell: (run) => el("td", owners[String(run.owner_id)] ?? "?")});
  return cols;
};

// The name column stays in view while the table scrolls sideways (app.css: sticky); a long
// name is cut there, the whole of it in the link's title.
function runCell(run) {
  const td = el("td", undefined, "run-name");
  const swatch = el("span", undefined, "run-swatch");
  swatch.style.backgroundColor = runColor(run.id);
  swatch.setAttribute("aria-hidden", "true");
  const link = el("a", run.name || `run ${run.id}`, "name-cut");
  link.href = pages.run(run.id);
  link.title = link.textContent;
  td.append(swatch, link);
  if (run.name) td.append(" ", el("span", `#${run.id}`, "muted"));
  return td;
}
