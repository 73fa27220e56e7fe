// The run page's charts: the downsampled history first, then live points from the stream,
// batched into at most one redraw per frame; zoom re-fetches the range at full resolution.
// A chart element keeps its traces and layout as `.data` and `.layout` (chart.js), which the
// browser tests read.
import {plot} from "../chart.js";
import {call, errorText, send} from "../lib/api.js";
import {$, chartGroup} from "../lib/dom.js";
import {LIVE, emit} from "../lib/events.js";
import {compareGroups, compareKeys, isSystemKey, keyGroup, stepTitle} from "../lib/format.js";
import {decimate, emaAll, emaPush, emaState, lowerBound, xAtSteps, xMetricKey} from "../lib/series.js";
import {api} from "../lib/urls.js";
import {BUDGET, history} from "./prefetch.js";

// With more charts than this, each is drawn only when scrolled near: a run with 100,000
// keys otherwise built 100,000 charts at once (the browser froze for over a minute).
const LAZY_AFTER = 24;
// With that many, SHOW_STEP charts are shown at first (the first groups' first keys), and
// each group with more has a button for its next SHOW_STEP.
const SHOW_STEP = 200;

// root: the run page's #run element. Returns the charts (key -> state), the stream's metrics
// handler, the last step held per key (the stream's `after`) and load() for the history.
export const mountCharts = (root, runId) => {
  // x: the chart state's x ("step", "time": seconds since the run's first point, or
  // "metric:<key>": another key's value at each step, lib/series.js).
  const view = {smoothing: 0, logY: false, x: "step", t0: null};
  const charts = new Map();     // key -> chart state
  // A resumed run: its parent's curve up to the checkpoint's step is drawn first, lighter
  // (step x-axis only: the parent's wall times are not this run's).
  // The step is the checkpoint's; when its row is gone (retention), the step before this run's
  // first point.
  const parent = {id: Number(root.dataset.parentRun) || null,
                  step: root.dataset.parentStep ? Number(root.dataset.parentStep) : NaN};
  let parentSeries = {};        // key -> {step, value} of the parent, steps <= parent.step


  // A new array: the chart keeps (and plot.extend grows) the trace's own arrays.
  const xsOf = (d) => {
    const key = xMetricKey(view.x);
    if (key) return xAtSteps(d.step, (charts.get(key) || {}).data);
    return view.x === "time"
      ? d.time.map((t) => (t == null || view.t0 == null ? null : t - view.t0)) : d.step.slice();
  };

  // --- charts -------------------------------------------------------------------------------
  // One box per key group (keyGroup: the prefix before the first "/") with its grid of
  // charts, as many columns as the screen holds (CSS). With many keys, SHOW_STEP charts in all
  // are shown at first and each group has a button for its next SHOW_STEP: a page of 100,000
  // chart boxes took the browser seconds to lay out even undrawn.
  const groups = new Map();     // group -> {box, grid, shown, limit, hidden: [chart], more}
  let shownAtFirst = 0;         // charts placed under the page's first SHOW_STEP
  const groupBox = (group) => {
    let g = groups.get(group);
    if (g) return g;
    const {box, grid} = chartGroup(group);
    const more = document.createElement("button");
    more.type = "button";
    more.className = "show-more";
    more.hidden = true;
    box.append(more);
    g = {box, grid, shown: 0, limit: 0, hidden: [], more};
    more.addEventListener("click", () => reveal(g));
    // In group order; groups mostly come in order (keys arrive sorted), so appending is the
    // common case (a search per new group over thousands was quadratic).
    const boxes = /** @type {HTMLCollectionOf<HTMLElement>} */ ($("charts").children);
    const last = boxes[boxes.length - 1];
    const next = !last || compareGroups(last.dataset.group, group) < 0 ? null
      : [...boxes].find((b) => compareGroups(b.dataset.group, group) > 0);
    $("charts").insertBefore(box, next || null);
    groups.set(group, g);
    return g;
  };
  const updateMore = (g) => {
    const n = g.hidden.length;
    g.more.hidden = n === 0;
    g.more.textContent = `Show ${Math.min(SHOW_STEP, n)} more (${n} keys not shown)`;
  };
  const reveal = (g) => {
    g.limit = g.shown + SHOW_STEP;
    g.hidden.sort((a, b) => (a.key < b.key ? -1 : 1));
    for (const chart of g.hidden.splice(0, SHOW_STEP)) place(chart, g, true);
    updateMore(g);
  };

  const layoutFor = (key) => ({
    title: {text: key},
    xaxis: {title: {text: xMetricKey(view.x) || (view.x === "time" ? "wall time (s)" : stepTitle(key))},
            autorange: true},
    yaxis: {type: view.logY ? "log" : "linear", autorange: true},
  });

  // Trace 2 (after the raw and smoothed ones, which live updates address as 0 and 1).
  const parentTrace = (key) => {
    const p = parentSeries[key];
    // Not a system series: the parent's seconds are not this run's, nor training steps.
    if (!p || !p.step.length || view.x !== "step" || isSystemKey(key)) return [];
    return [{mode: p.step.length < 60 ? "lines+markers" : "lines", name: `run ${parent.id} (parent)`,
             x: p.step.slice(), y: p.value.slice(), line: {width: 1.2, color: "#9aa3b2", dash: "dot"},
             opacity: 0.8, meta: "parent"}];
  };

  const tracesFor = (chart, d) => {
    const w = view.smoothing;
    chart.ema = emaState();
    const x = xsOf(d);
    const mode = d.step.length < 60 ? "lines+markers" : "lines";  // epoch-level series: few points
    return [
      {mode, name: chart.key, x, y: d.value.slice(), line: {width: 1.2, color: "#2456d6"},
       opacity: w > 0 ? 0.28 : 1},
      {mode: "lines", name: `${chart.key} (smoothed)`, x: x.slice(), y: emaAll(d.value, w, chart.ema),
       line: {width: 1.8, color: "#2456d6"}, visible: w > 0},
      ...parentTrace(chart.key),
    ];
  };

  const markCounts = (chart) => {
    chart.div.dataset.points = String(chart.div.data ? chart.div.data[0].x.length : 0);
    chart.div.dataset.updates = String(chart.updates);
  };

  // Plot `d` (overview or zoomed range) as the chart's data (kept for later when not drawn yet).
  const draw = (chart, d, keepRange) => {
    chart.shown = d;
    if (!chart.drawn) return;
    const layout = layoutFor(chart.key);
    if (keepRange && chart.div.layout) {
      layout.xaxis.range = chart.div.layout.xaxis.range; layout.xaxis.autorange = false;
      layout.yaxis.range = chart.div.layout.yaxis.range; layout.yaxis.autorange = false;
    }
    plot.react(chart.div, tracesFor(chart, d), layout);
    markCounts(chart);
  };

  // The first draw of a chart (at once, or when it scrolls near with many charts).
  const realize = (chart) => {
    if (chart.drawn) return;
    chart.drawn = true;
    chart.div.classList.remove("lazy");
    draw(chart, chart.shown, false);
    plot.onRelayout(chart.div, (ev) => onRelayout(chart, ev));
  };
  let observer = null;
  const drawWhenNear = (chart) => {
    if (!observer) {
      observer = new IntersectionObserver((entries) => {
        for (const e of entries) {
          if (!e.isIntersecting) continue;
          observer.unobserve(e.target);
          const c = charts.get(/** @type {HTMLElement} */ (e.target).dataset.key);
          if (c) realize(c);
        }
      }, {rootMargin: "600px 0px"});
    }
    chart.div.classList.add("lazy");
    observer.observe(chart.div);
  };

  const addChart = (key, d, lazy) => {
    const div = document.createElement("div");
    div.className = "metric-chart";
    div.dataset.key = key;
    div.dataset.points = "0";
    div.dataset.updates = "0";
    div.setAttribute("role", "img");
    div.setAttribute("aria-label", `chart of ${key}`);
    const chart = {key, div, data: d, shown: d, pending: null, updates: 0, zoom: 0,
                   ema: emaState(), drawn: false};
    charts.set(key, chart);
    if (!isSystemKey(key)) {  // a choice for the x axis (sys/ steps are seconds)
      $("x-axis").append(Object.assign(document.createElement("option"), {value: `metric:${key}`, textContent: key}));
    }
    if (view.t0 == null && d.time.length) view.t0 = d.time[0];
    const g = groupBox(keyGroup(key));
    if (!lazy || g.shown < g.limit || shownAtFirst < SHOW_STEP) {
      if (lazy && g.shown >= g.limit) shownAtFirst += 1;
      place(chart, g, lazy);
    } else {
      g.hidden.push(chart);
      updateMore(g);
    }
    $("charts-empty").hidden = true;
    return chart;
  };

  // Into the group's grid, in key order.
  const place = (chart, g, lazy) => {
    const grid = g.grid;
    // Keys mostly come in order: appending is the common case (a search per key over
    // 100,000 charts was quadratic).
    const last = grid.lastElementChild;
    const next = !last || last.dataset.key < chart.key ? null
      : [...grid.children].find((c) => c.dataset.key > chart.key);
    grid.insertBefore(chart.div, next || null);
    g.shown += 1;
    if (lazy) drawWhenNear(chart); else realize(chart);
  };

  // --- zoom: full resolution inside the range, overview back on autoscale --------------------
  // The steps a dragged x range [lo, hi] asks for. On the step axis exactly the range (whole
  // steps): the overview's points either side of it lay up to a bucket apart (250 steps at
  // 1,000,000 steps), so a deep zoom read hundreds of steps outside it. On the time axis the
  // x maps to steps through the points held, the finest first (a zoomed view's, when it
  // covers the range), with the held points just outside it so the line reaches the edges.
  const zoomSteps = (chart, lo, hi) => {
    if (view.x === "step") {
      const stepMin = Math.max(0, Math.ceil(lo)), stepMax = Math.floor(hi);
      return stepMax >= stepMin ? [stepMin, stepMax] : null;
    }
    const inShown = (d) => d.step.length && xsOf(d)[0] <= lo && xsOf(d)[d.step.length - 1] >= hi;
    const d = chart.shown !== chart.data && inShown(chart.shown) ? chart.shown : chart.data;
    const xs = xsOf(d);
    const i0 = Math.max(0, lowerBound(xs, lo) - 1);
    const i1 = Math.min(d.step.length - 1, lowerBound(xs, hi));
    return i1 < 0 || !d.step.length ? null : [d.step[i0], d.step[i1]];
  };
  const onRelayout = async (chart, ev) => {
    if (ev["xaxis.autorange"] === true) {
      chart.zoom += 1;
      if (chart.shown !== chart.data) draw(chart, chart.data, false);
      return;
    }
    const lo = ev["xaxis.range[0]"] ?? (ev["xaxis.range"] || [])[0];
    const hi = ev["xaxis.range[1]"] ?? (ev["xaxis.range"] || [])[1];
    // Against another metric uPlot's own zoom stands: its x is not monotonic in the step.
    if (lo === undefined || hi === undefined || xMetricKey(view.x)) return;
    const range = zoomSteps(chart, Number(lo), Number(hi));
    if (!range) return;
    const [stepMin, stepMax] = range;
    const token = ++chart.zoom;
    // Numbers among the values: URLSearchParams makes strings of them.
    const params = new URLSearchParams(/** @type {Record<string, any>} */ ({
      keys: chart.key, max_points: BUDGET, step_min: stepMin, step_max: stepMax, with_time: "true"}));
    const r = await call("GET", api.runMetrics(runId, params));
    if (token !== chart.zoom) return;  // a newer zoom or a reset won
    if (!r.ok) { showChartsError(`Zoom failed: ${errorText(r.body)}`); return; }
    const s = r.body.series[chart.key];
    if (s) draw(chart, {step: s.step, value: s.value, time: s.time || []}, true);
  };

  // --- live points, batched ----------------------------------------------------------------
  let flushQueued = false;
  const queueFlush = () => {
    if (flushQueued) return;
    flushQueued = true;
    const run = () => { if (flushQueued) { flushQueued = false; flush(); } };
    requestAnimationFrame(run);
    setTimeout(run, 100);  // rAF does not fire in a hidden tab
  };

  const flush = () => {
    // Against another metric, a point's x may come in the same batch: all held, then redrawn.
    const byMetric = xMetricKey(view.x), redraw = new Set();
    for (const chart of charts.values()) {
      const p = chart.pending;
      if (!p) continue;
      chart.pending = null;
      const d = chart.data;
      for (let i = 0; i < p.step.length; i++) {
        d.step.push(p.step[i]); d.value.push(p.value[i]); d.time.push(p.time[i]);
      }
      if (!chart.drawn) {  // kept for its first draw
        if (d.step.length > 3 * BUDGET) chart.data = decimate(d, BUDGET);
        chart.shown = chart.data;
        continue;
      }
      if (chart.shown === d && d.step.length > 3 * BUDGET) {
        chart.data = decimate(d, BUDGET);  // keeps each bucket's min and max
        chart.updates += 1;
        draw(chart, chart.data, false);
        continue;
      }
      if (byMetric) { chart.shown = chart.data; chart.updates += 1; redraw.add(chart); continue; }
      const x = xsOf(p);
      const y = p.value;
      const ys = y.map((v) => emaPush(chart.ema, v, view.smoothing));
      if (chart.shown !== d) {
        chart.shown.step.push(...p.step); chart.shown.value.push(...p.value);
        chart.shown.time.push(...p.time);
      }
      plot.extend(chart.div, {x: [x, x.slice()], y: [y.slice(), ys]}, [0, 1]);
      chart.updates += 1;
      markCounts(chart);
    }
    // new x values (the x-metric's own points) move every chart's; else only the updated ones
    const all = [...redraw].some((c) => c.key === byMetric);
    for (const c of all ? charts.values() : redraw) if (c.drawn) draw(c, c.data, false);
  };

  const onMetrics = (series) => {
    const now = Date.now();
    for (const [key, s] of Object.entries(series)) {
      let chart = charts.get(key);
      const time = s.time || s.step.map(() => null);
      if (!chart) {
        if (view.t0 == null && time.length) view.t0 = time[0];
        chart = addChart(key, {step: [], value: [], time: []}, charts.size >= LAZY_AFTER);
      }
      const last = chart.pending ? chart.pending.step[chart.pending.step.length - 1]
        : chart.data.step[chart.data.step.length - 1];
      const p = chart.pending || (chart.pending = {step: [], value: [], time: []});
      const fresh = [];
      for (let i = 0; i < s.step.length; i++) {
        if (last !== undefined && s.step[i] <= last) continue;  // already held
        p.step.push(s.step[i]); p.value.push(s.value[i]); p.time.push(time[i]);
        fresh.push(s.step[i]);
      }
      if (!p.step.length) chart.pending = null;
      // For a benchmark's eyes (bench/ui_run_page.py): when each live point reached the page.
      if (fresh.length) emit(root, LIVE, {key, steps: fresh, receivedAt: now}, {bubbles: true});
    }
    $("charts-loading").hidden = true;
    queueFlush();
  };

  // --- controls ------------------------------------------------------------------------------
  const redrawAll = () => { for (const c of charts.values()) { c.zoom += 1; draw(c, c.data, false); } };

  $("smoothing").addEventListener("input", (e) => {
    view.smoothing = Math.min(0.99, Math.max(0, Number(/** @type {HTMLInputElement} */ (e.target).value)));
    $("smoothing-value").textContent = view.smoothing.toFixed(2);
    for (const c of charts.values()) {
      if (!c.drawn) continue;  // drawn later with the current smoothing
      c.ema = emaState();
      const ys = emaAll(c.div.data[0].y, view.smoothing, c.ema);
      c.div.data[0].opacity = view.smoothing > 0 ? 0.28 : 1;
      plot.restyle(c.div, {y: [ys], visible: [view.smoothing > 0]}, [1]);
    }
  });
  $("log-scale").addEventListener("change", (e) => {
    view.logY = /** @type {HTMLInputElement} */ (e.target).checked;
    for (const c of charts.values()) {
      if (!c.drawn) continue;
      plot.relayout(c.div, {"yaxis.type": view.logY ? "log" : "linear", "yaxis.autorange": true});
    }
  });
  $("x-axis").addEventListener("change", (e) => { view.x = /** @type {HTMLSelectElement} */ (e.target).value; redrawAll(); });

  const showChartsError = (text) => { const e = $("charts-error"); e.textContent = text; e.hidden = false; };

  // The parent's points up to the resume step; a parent that is gone or unreadable just
  // leaves its curve out.
  const loadParent = async () => {
    if (!parent.id || !Number.isFinite(parent.step)) return;
    try {
      const r = await send("GET", api.runMetrics(parent.id, {max_points: BUDGET, step_max: parent.step}));
      if (r.ok) parentSeries = (await r.json()).series || {};
    } catch { /* drawn without it */ }
  };

  // The history (fetched since the page's head: prefetch.js) drawn, with the parent's curve.
  const load = async () => {
    let parentDone = loadParent();
    let body = null;
    try {
      const response = await (history ||
        send("GET", api.runMetrics(runId, {max_points: BUDGET, with_time: "true"})));
      body = await response.json();
      if (!response.ok) throw new Error(errorText(body));
    } catch (err) {
      $("charts-loading").hidden = true;
      showChartsError(`Could not load the metrics: ${err.message || err}. Reload the page to try again.`);
    }
    if (parent.id && !Number.isFinite(parent.step) && body && body.series) {
      // The child's first training step (a loop, not Math.min(...): runs may have 100,000
      // keys); the worker's sys/ series count seconds, not steps.
      let first = Infinity;
      for (const [key, s] of Object.entries(body.series)) {
        if (!isSystemKey(key) && s.step.length && s.step[0] < first) first = s.step[0];
      }
      if (first !== Infinity) { parent.step = first - 1; parentDone = loadParent(); }
    }
    await parentDone;
    if (body && body.series) {
      const series = Object.entries(body.series);
      for (const [, s] of series) {
        if (s.time && s.time.length && (view.t0 == null || s.time[0] < view.t0)) view.t0 = s.time[0];
      }
      series.sort(([a], [b]) => compareKeys(a, b));
      const lazy = series.length > LAZY_AFTER;
      for (const [key, s] of series) {
        addChart(key, {step: s.step, value: s.value, time: s.time || []}, lazy);
      }
      $("charts-loading").hidden = true;
      $("charts-empty").hidden = charts.size > 0;
    }
  };

  // The last step held per key: where the stream starts.
  const after = () => {
    const last = {};
    for (const [key, c] of charts) {
      const steps = c.pending && c.pending.step.length ? c.pending.step : c.data.step;
      if (steps.length) last[key] = steps[steps.length - 1];
    }
    return last;
  };

  return {charts, onMetrics, after, load};
};
