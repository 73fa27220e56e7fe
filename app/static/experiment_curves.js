// The experiment page's "all runs' curves": every run of the experiment (the newest MAX_RUNS)
// overlaid, one chart per metric key, live while a run is active (app/static/overlay.js, on
// the experiment's event stream: lib/page_stream.js).
// Loaded deferred, after the deferred chart library: it draws from DOMContentLoaded, which
// comes after every deferred script has run, and asks for the first charts' series at once.
import {call, errorText, searchKeys, serverDown} from "./lib/api.js";
import {isShown, normalizeKeys} from "./lib/chart_keys.js";
import {markStale} from "./lib/dom.js";
import {RUNS_LINK, RUNS_REFRESHED, emit} from "./lib/events.js";
import {metricKeys} from "./lib/first_page.js";
import {compareKeys} from "./lib/format.js";
import {keysPicker} from "./chart_keys_picker.js";
import {overlay} from "./overlay.js";
import {embeddedRuns, firstList, runsQuery} from "./experiment_prefetch.js";
import {experimentStream, onNews} from "./lib/page_stream.js";
import {register} from "./lib/page_state.js";
import {api} from "./lib/urls.js";
(() => {
  const section = document.getElementById("experiment-curves");
  if (!section) return;
  // The page holds the newest EMBEDDED runs (app/experiments/views.py CURVE_RUNS); with that
  // many there may be more, and the curves overlay up to MAX_RUNS, listed at once (issue 43:
  // 1,000 runs on one chart) while the page's HTML stays small for a 100,000-run experiment
  // (the constants and the first listing: experiment_prefetch.js).
  const experimentId = /** @type {string} */ (section.dataset.experimentId);
  const charts = /** @type {HTMLElement} */ (document.getElementById("experiment-charts"));
  const status = /** @type {HTMLElement} */ (document.getElementById("experiment-curves-status"));

  // While the server does not answer, the runs table (through RUNS_LINK, lib/events.js) and the legend are
  // marked as of its last answer, and the overlay's status line says so (markDown); the next
  // answer clears them.
  let lostSince = null;
  const linkChanged = () => {
    emit(document, RUNS_LINK, {lostSince});
    markStale([document.getElementById("experiment-curves-legend")], lostSince);
  };
  // The newest MAX_RUNS (experiment_prefetch.js runsQuery); `asked`: an answer on its way.
  const listRuns = async (markDown, asked = call("GET", api.runs(runsQuery(experimentId, metricKeys(document))))) => {
    const r = await asked;
    const down = !r.ok && serverDown(r);
    if (down && lostSince === null) { lostSince = new Date(); linkChanged(); }
    if (!down && lostSince !== null) { lostSince = null; linkChanged(); }
    if (down && markDown) { markDown(); return null; }
    if (!r.ok) { status.textContent = `Could not list the runs: ${errorText(r.body)}`; return null; }
    return r.body.runs;
  };

  // The first charts' series are asked for now, as this module runs (the first of the page's
  // deferred scripts: before the runs table is built and DOMContentLoaded), not when the
  // overlay mounts: the page holds the runs. The overlay takes these answers by URL. Only for
  // the charts about to be shown: the page opened at its curves (those in view and just below,
  // the first in key order), or few enough keys that all are drawn at once.
  const EARLY_CHARTS = 12;
  // The page holds the first list (app/experiments/views.py), or the first MAX_RUNS are on
  // their way since experiment_prefetch.js ran; later refreshes ask the API.
  const listed = firstList ? listRuns(undefined, firstList) : null;
  const held = listed ? null : embeddedRuns;
  // Their keys: the page says which they logged (it holds only a few keys' summaries).
  const heldKeys = embeddedRuns && (metricKeys(document)?.all
    || [...new Set(embeddedRuns.flatMap((r) => Object.keys(r.summary || {})))]);
  const early = (() => {
    if (!held || !held.length) return null;
    const keys = [...heldKeys].sort(compareKeys);
    if (location.hash !== `#${section.id}` && keys.length > overlay.LAZY_AFTER) return null;
    return overlay.prefetch(held.slice().reverse(), keys.slice(0, EARLY_CHARTS),
                            /** @type {HTMLSelectElement | null} */ (document.getElementById("experiment-curves-x-axis"))?.value);
  })();

  // Which keys are charted (null: all): the "Charts" picker (chart_keys_picker.js) and saved
  // views (saved_views.js) set it. A chart box not charted, and a key group left with none,
  // are hidden (not removed: the overlay keeps them, so ticking a key again shows it at once).
  let shownKeys = null;
  const showKeys = () => {
    for (const div of /** @type {NodeListOf<HTMLElement>} */ (charts.querySelectorAll(".metric-chart"))) {
      div.hidden = !isShown(shownKeys, div.dataset.key);
    }
    for (const group of /** @type {NodeListOf<HTMLElement>} */ (charts.querySelectorAll(".chart-group"))) {
      group.hidden = !group.querySelector(".metric-chart:not([hidden])");
    }
    section.dataset.shownKeys = shownKeys === null ? "all" : String(shownKeys.length);
  };
  // A key the picker's search found (the page holds its first keys only: issue 43) gets its
  // chart once the overlay is mounted.
  /** @type {{addKey: null | ((key: string) => Promise<void>)} | null} */
  let mounted = null;
  const pickerRoot = document.getElementById("experiment-curves-keys");
  const picker = pickerRoot
    ? keysPicker(pickerRoot, (shown) => { shownKeys = shown; showKeys(); },
                 {find: (q) => searchKeys(experimentId, q), add: (key) => { mounted?.addKey?.(key); }})
    : {offer: () => {}, show: () => {}};
  // The boxes change when the overlay arranges them into groups or adds a newly logged key's:
  // offer every key boxed, and hide again what is not charted.
  new MutationObserver((records) => {
    // only boxes moved or added (not a chart's own redraw inside its box)
    if (!records.some((r) => r.target === charts || /** @type {Partial<Element>} */ (r.target).classList?.contains("chart-grid"))) return;
    picker.offer([.../** @type {NodeListOf<HTMLElement>} */ (charts.querySelectorAll(".metric-chart"))].map((d) => d.dataset.key).sort(compareKeys));
    showKeys();
  }).observe(charts, {childList: true, subtree: true});

  // Saved views (saved_views.js): the controls' values, and which keys are charted. Set before
  // the overlay mounts, the controls are read by it; after, their events redraw.
  const control = (name) => document.getElementById(`experiment-curves-${name}`);
  register({
    get: () => ({charts: {keys: shownKeys, smoothing: Number(/** @type {HTMLInputElement | null} */ (control("smoothing"))?.value || 0),
                          x: /** @type {HTMLSelectElement | null} */ (control("x-axis"))?.value || "step",
                          log: Boolean(/** @type {HTMLInputElement | null} */ (control("log-scale"))?.checked),
                          clip: Boolean(/** @type {HTMLInputElement | null} */ (control("clip"))?.checked)}}),
    set: (view) => {
      const c = view.charts;
      if (!c) return;
      const put = (name, prop, value, event) => {
        const el = control(name);
        if (!el || value === undefined) return;
        el[prop] = value;
        el.dispatchEvent(new Event(event));
      };
      put("smoothing", "value", String(c.smoothing ?? 0), "input");
      if (control("smoothing-value")) /** @type {HTMLElement} */ (control("smoothing-value")).textContent = Number(c.smoothing ?? 0).toFixed(2);
      put("x-axis", "value", c.x || "step", "change");
      put("log-scale", "checked", Boolean(c.log), "change");
      put("clip", "checked", Boolean(c.clip), "change");
      shownKeys = normalizeKeys(c.keys);
      picker.show(shownKeys);
      showKeys();
    },
  });

  const start = async () => {
    const runs = held || await (listed || listRuns());
    if (!runs) return;
    if (!runs.length) { status.textContent = "No runs yet: their curves appear here."; return; }
    const keys = new Set(heldKeys || []);
    for (const r of runs) for (const k of Object.keys(r.summary || {})) keys.add(k);
    charts.replaceChildren(...[...keys].map(overlay.chartDiv));
    showKeys();
    mounted = overlay.mount(charts, runs.slice().reverse(), {
      controls: "experiment-curves",
      legend: document.getElementById("experiment-curves-legend"),
      status,
      early,
      // The experiment's stream: a run's status changed (at once), or its metrics moved.
      live: (refresh) => {
        const stream = experimentStream(experimentId);
        // the active runs' statuses, and how many runs there are in each status (a run that
        // ended, a new or a deleted one): the digest names no finished run (issue 43)
        onNews(stream, "experiment", (d) => [d.runs.map((r) => r.slice(0, 3)), d.counts, d.newest], () => refresh(true), (d) => d.live);
        onNews(stream, "experiment", (d) => d.runs, () => refresh(false), (d) => d.live);
      },
      refreshRuns: async (markDown) => {
        const fresh = await listRuns(markDown);
        // the runs table and the parallel coordinates refresh from the same answer
        if (fresh) emit(document, RUNS_REFRESHED, {runs: fresh});
        return fresh && fresh.slice().reverse();
      },
    });
  };
  document.addEventListener("DOMContentLoaded", () => {
    start().catch((err) => { status.textContent = `The curves could not be drawn: ${err}`; });
  });
})();
