// The experiment page's parallel coordinates (app/static/parcoords.js) over the runs the table
// shows: redrawn whenever the table's runs change (a load, a sort, a filter, a live refresh),
// the brushed runs highlighted in the table and, on request, selected there (then compared,
// tagged or deleted like runs ticked by hand). The picked metric and the chosen axes are kept
// per experiment in this browser.
import {RUNS, RUNS_HIGHLIGHT, RUNS_NEED, RUNS_SELECT, emit, listen} from "./lib/events.js";
import {compareKeys} from "./lib/format.js";
import {parcoords} from "./parcoords.js";
(() => {
  const section = document.getElementById("runs-section");
  const el = document.getElementById("parcoords");
  if (!section || !el) return;
  const select = /** @type {HTMLButtonElement} */ (document.getElementById("parcoords-select"));
  const METRIC_KEY = `parcoords.metric.${section.dataset.experimentId}`;
  const AXES_KEY = `parcoords.axes.${section.dataset.experimentId}`;
  let saved = null, axes = null;
  try {
    saved = localStorage.getItem(METRIC_KEY);
    axes = JSON.parse(localStorage.getItem(AXES_KEY) || "null");
  } catch (_) { /* storage unavailable, or not ours */ }
  if (!Array.isArray(axes) || !axes.every((a) => typeof a === "string")) axes = null;
  let chart = null;
  let kept = null;

  // Until the reader picks: the max of the first validation key (val/acc, Accuracy/val), else
  // the table's first summary column, else the first key's last value.
  const defaultMetric = (runs, columns) => {
    const keys = new Set();
    for (const r of runs) for (const k of Object.keys(r.summary || {})) keys.add(k);
    const sorted = [...keys].sort(compareKeys);
    const val = sorted.find((k) => /(^|\/)val(id(ation)?)?(\/|$)/i.test(k));
    if (val) return `${val}.max`;
    if (columns && columns.length) return columns[0];
    return sorted.length ? `${sorted[0]}.last` : null;
  };

  const onBrush = (ids) => {
    kept = ids;
    emit(section, RUNS_HIGHLIGHT, {ids});
    select.hidden = !ids;
    select.disabled = !ids || !ids.length;
    select.textContent = ids ? `Select these ${ids.length} run${ids.length === 1 ? "" : "s"}` : "";
  };
  // The page holds a few keys' summaries (lib/first_page.js): the table lists its runs again
  // with a picked metric's key when they do not carry it.
  const need = (col) => {
    if (col) emit(section, RUNS_NEED, {keys: [col.slice(0, col.lastIndexOf("."))]});
  };
  const onMetric = (col) => {
    need(col);
    try { if (col) localStorage.setItem(METRIC_KEY, col); } catch (_) { /* ok */ }
  };
  let keys = [];
  const onAxes = (ids) => {
    try { if (ids) localStorage.setItem(AXES_KEY, JSON.stringify(ids)); else localStorage.removeItem(AXES_KEY); } catch (_) { /* ok */ }
  };

  // Drawn after the table's paint, not in the task that builds the table (which it slowed by
  // the whole drawing at 10,000 runs): the latest runs, once per frame.
  let pending = null;
  listen(section, RUNS, (detail) => {
    if (pending === null) requestAnimationFrame(() => setTimeout(() => { const d = pending; pending = null; draw(d); }));
    pending = detail;
  });
  const draw = ({runs, summaries, keys: logged}) => {
    keys = logged || [];
    if (!chart) {
      chart = parcoords.mount(el, runs, {metric: saved || defaultMetric(runs, summaries), axes, onBrush, onMetric, onAxes,
                                         keys: () => keys});
      need(saved);
    } else {
      chart.update(runs);
      if (!chart.metric()) chart.setMetric(defaultMetric(runs, summaries));
    }
  };
  select.addEventListener("click", () => {
    if (kept) emit(section, RUNS_SELECT, {ids: kept});
  });
})();
