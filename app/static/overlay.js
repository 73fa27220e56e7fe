// Many runs' curves overlaid, one chart per metric key: the compare page and the experiment
// page both. One trace per run, coloured by runColor, named by the run and the params that
// differ across the runs shown ("run 12 · lr=0.01 bs=64"). Not one stream per run: 50 runs
// would need 50 event streams and a user may hold only a few (sse_max_streams_per_user), so
// only the active runs' downsampled series are asked for again: when the page's own stream
// says they moved (opts.live: the experiment page's, lib/page_stream.js), else every POLL_MS
// (the compare page).
import {call, errorText, serverDown} from "./lib/api.js";
import {arrange, chartDiv} from "./lib/dom.js";
import {
  compareKeys, differingParams, isSystemKey, lostText, runColor, runLabels, stepTitle,
} from "./lib/format.js";
import {clippedRange, emaAll, emaState, xAtSteps, xMetricKey} from "./lib/series.js";
import {SEED_SHOWN} from "./lib/events.js";
import {seedShown} from "./lib/seed.js";
import {plot} from "./chart.js";
import {refresher} from "./lib/run_stream.js";
import {isActive} from "./lib/status.js";
import {api, pages} from "./lib/urls.js";
import {bindBand, bindBy, getState as groupingState, onChange as onGrouping} from "./grouping.js";
import {groupLegend, groupTraces} from "./overlay_groups.js";

export const overlay = (() => {
  const POLL_MS = 3000;
  // Points per chart in all; each run gets its share (at least MIN_POINTS, at most MAX_POINTS),
  // so 100 runs x 2 keys draw ~2 x 30,000 points, not 2 x 400,000.
  const CHART_BUDGET = 30000, MIN_POINTS = 100, MAX_POINTS = 2000;
  // The first draw's budget: ~21 points per pixel column of the narrowest chart (380 px,
  // app.css .chart-grid) in all, at least FIRST_MIN a curve: 40 a curve at 200 runs, where the
  // full budget's 150 made each chart's request 926 KB (issue 31). A chart zoomed into asks
  // again with the full budget; the wall times come only for an x axis of time.
  const FIRST_CHART_POINTS = 8000, FIRST_MIN = 24;
  const PREFETCH_KEYS = 3;
  // Charts made at most (the first keys in key order; a run page shows them all), and each
  // drawn only once it scrolls near: a run with thousands of keys otherwise froze the page.
  const MAX_CHARTS = 48;
  const LAZY_AFTER = 8;  // up to this many charts are all drawn at once
  // Each run's label: runLabels (lib/format.js), shared with the runs table and parcoords.
  const labels = runLabels;

  // The controls (ids under `prefix`): smoothing, log scale, clip outliers, x axis (the chart
  // state's x: "step", "time", "relative" or "metric:<key>", lib/series.js).
  const readView = (prefix) => {
    const $ = (name) => document.getElementById(`${prefix}-${name}`);
    return {
      smoothing: Math.min(0.99, Math.max(0, Number(/** @type {HTMLInputElement | null} */ ($("smoothing"))?.value || 0))),
      logY: Boolean(/** @type {HTMLInputElement | null} */ ($("log-scale"))?.checked),
      clip: Boolean(/** @type {HTMLInputElement | null} */ ($("clip"))?.checked),
      x: /** @type {HTMLSelectElement | null} */ ($("x-axis"))?.value || "step",
    };
  };

  const budgetFor = (runs) => Math.max(MIN_POINTS, Math.min(MAX_POINTS, Math.floor(CHART_BUDGET / Math.max(1, runs))));
  const firstFor = (runs) => Math.min(budgetFor(runs), Math.max(FIRST_MIN, Math.floor(FIRST_CHART_POINTS / Math.max(1, runs))));
  const timed = (x) => x === "time" || x === "relative";
  // `runs`' series of `key`, `points` a curve (with the points' wall times when `time`): what
  // the overlay asks for.
  const seriesUrl = (runs, key, points, time) => api.compareMetrics(
    {runs: runs.map((r) => r.id).join(","), keys: key, max_points: points, ...(time ? {with_time: "true"} : {})});
  // The series of `keys` of the `runs` a mount will overlay, asked for before it (a page that
  // holds its runs asks for its first charts' before DOMContentLoaded): {url: the call's
  // promise}, for opts.early.
  // A few keys a request (the endpoint takes several; fetchSeries reads its key's series from
  // such an answer): 12 charts' series in 4 requests, one round of the browser's 6 connections,
  // not two rounds of 12 requests' authentication and run lookups.
  const prefetch = (runs, keys, x = "step") => {
    const early = new Map(), points = firstFor(runs.length);
    for (let i = 0; i < keys.length; i += PREFETCH_KEYS) {
      const some = keys.slice(i, i + PREFETCH_KEYS);
      const answer = call("GET", seriesUrl(runs, some.join(","), points, timed(x)));
      for (const k of some) early.set(seriesUrl(runs, k, points, timed(x)), answer);
    }
    return early;
  };

  /**
   * Overlay `runs` ({id, name, status, params}) in the `.metric-chart[data-key]` boxes under
   * `container`. `opts.controls` is the id prefix of the controls, `opts.legend` an element for
   * the page's legend, `opts.status` one for what is shown, `opts.refreshRuns` (optional) an
   * async function giving the runs again (new ones are added) while any is active, null when it
   * could not (calling its argument when the server did not answer: the status line says so).
   * `opts.early` (optional): prefetch's answers, taken (once) for a request of the same URL.
   */
  const mount = (container, runs, opts) => {
    const state = {runs: [...runs], series: new Map(), labels: new Map(), view: readView(opts.controls),
                   loaded: false, near: new Set(), fetched: new Map(), more: 0,
                   points: new Map(), zoom: new Map(), // key -> points a curve held; div -> {x, range}
                   group: groupingState().group,
                   // The link: whether this poll found the server unreachable, since when it has
                   // been, and the status line to put back once it answers again.
                   down: false, lostSince: /** @type {Date | null} */ (null), liveText: "",
                   addKey: /** @type {null | ((key: string) => Promise<void>)} */ (null)};
    const charts = () => [...container.querySelectorAll(".metric-chart")];
    const observer = new IntersectionObserver((entries) => {
      for (const e of entries) {
        if (!e.isIntersecting || state.near.has(e.target)) continue;
        state.near.add(e.target);
        if (state.loaded) show(e.target);
      }
    }, {rootMargin: "400px 0px"});
    // Keep the first MAX_CHARTS boxes in key order, watch each for when it comes near.
    const capCharts = () => {
      const all = charts().sort((a, b) => compareKeys(a.dataset.key, b.dataset.key));
      for (const div of all.slice(MAX_CHARTS)) div.remove();
      state.more = Math.max(state.more, all.length - MAX_CHARTS);
      const kept = all.slice(0, MAX_CHARTS);
      for (const div of kept) {
        if (kept.length <= LAZY_AFTER) state.near.add(div);
        else { observer.unobserve(div); observer.observe(div); }
      }
    };
    const budget = () => budgetFor(state.runs.length);
    const pointsOf = (key) => state.points.get(key) || firstFor(state.runs.length);

    // The x-metric's key when the x axis is another metric (its series is fetched with the
    // charted keys'), else null.
    const xKey = () => xMetricKey(state.view.x);
    const xs = (run, s) => {
      const key = xKey();
      if (key) return xAtSteps(s.step, (state.series.get(run.id) || {})[key]);
      if (state.view.x === "step" || !s.time) return s.step;
      if (state.view.x === "time") return s.time;  // seconds since the epoch: a date axis
      const t0 = s.time.find((t) => t != null);
      return s.time.map((t) => (t == null || t0 == null ? null : t - t0));
    };

    // Grouped (grouping.js): each group's mean and band (overlay_groups.js) instead of its runs.
    const draw = (div) => {
      const key = div.dataset.key, v = state.view;
      const curve = (r) => {
        const s = (state.series.get(r.id) || {})[key];
        if (!s) return null;
        return {x: xs(r, s), y: v.smoothing > 0 ? emaAll(s.value, v.smoothing, emaState()) : s.value,
                points: s.step.length};
      };
      const traces = [];
      if (state.group.by) traces.push(...groupTraces(state.runs, state.group, curve));
      else for (const r of state.runs) {
        const c = curve(r);
        if (!c) continue;
        // markers for a short series, not for a first draw's few points of a long one
        traces.push({mode: c.points < Math.min(60, pointsOf(key) / 2) ? "lines+markers" : "lines", x: c.x, y: c.y,
                     name: state.labels.get(r.id), line: {color: runColor(r.id), width: 1.5}, meta: {run: r.id}});
      }
      const layout = {
        title: {text: key},
        xaxis: {title: {text: xKey() || {step: stepTitle(key), time: "wall time",
                                         relative: "time since start (s)"}[v.x]},
                type: v.x === "time" ? "date" : "linear"},
        yaxis: {type: v.logY ? "log" : "linear", autorange: true},
      };
      const range = v.clip ? clippedRange(traces, v.logY) : null;
      if (range) { layout.yaxis.range = range; layout.yaxis.autorange = false; }
      const zoom = state.zoom.get(div);  // kept across redraws on the same x axis
      if (zoom && zoom.x === v.x) Object.assign(layout.xaxis, {autorange: false, range: zoom.range});
      div.dataset.traces = String(traces.length);
      if (!div.data) plot.onRelayout(div, (ev) => zoomed(div, ev));
      return plot.react(div, traces, layout)
        .then(() => { div.dataset.drawnAt = String(performance.now()); });
    };
    // A key's series are asked for once, when a chart needing it first comes near (its own,
    // the x-metric's), not with every other key's: 50 keys x 200 runs read 10,000 series
    // before the first chart showed. state.fetched: key -> that request (its errors).
    const need = (keys) => Promise.all(keys.filter(Boolean).map((k) => {
      if (!state.fetched.has(k)) state.fetched.set(k, fetchSeries(state.runs, [k]));
      return state.fetched.get(k);
    })).then((errors) => errors.flat());
    // A drag-zoom: the chart's key (and the x-metric's) at the full budget, once, then drawn
    // again in the zoomed range; a double-click back to everything keeps what is held.
    const zoomed = async (div, ev) => {
      if (ev["xaxis.autorange"]) { state.zoom.delete(div); return; }
      state.zoom.set(div, {x: state.view.x, range: [ev["xaxis.range[0]"], ev["xaxis.range[1]"]]});
      const sharper = [div.dataset.key, xKey()].filter((k) => k && pointsOf(k) < budget());
      if (!sharper.length) return;
      for (const k of sharper) {
        state.points.set(k, budget());
        state.fetched.set(k, fetchSeries(state.runs, [k]));
      }
      await need(sharper);
      await draw(div);
    };
    const show = async (div) => {
      const failed = await need([div.dataset.key, xKey()]);
      await draw(div);
      return failed;
    };
    // The charts near the viewport drawn (their series asked for first), those in it before the
    // ones within the observer's margin; resolves to the errors.
    const inView = (d) => { const r = d.getBoundingClientRect(); return r.bottom > 0 && r.top < innerHeight; };
    const drawAll = async () => {
      const near = charts().filter((d) => state.near.has(d));
      const first = near.filter(inView);
      const failed = await Promise.all(first.map(show));
      return [...failed, ...await Promise.all(near.filter((d) => !first.includes(d)).map(show))].flat();
    };
    const runLink = (r) => {
      const a = document.createElement("a");
      a.href = pages.run(r.id);
      a.textContent = state.labels.get(r.id);
      return a;
    };
    const showLegend = () => {
      if (!opts.legend) return;
      opts.legend.classList.toggle("grouped", Boolean(state.group.by));
      if (state.group.by) {  // a group's list of runs stays open across the live redraws
        const open = new Set([...opts.legend.querySelectorAll("li[data-group] details[open]")]
          .map((d) => d.closest("li").dataset.group));
        opts.legend.replaceChildren(...groupLegend(state.runs, state.group, runLink, open));
        return;
      }
      opts.legend.replaceChildren(...state.runs.map((r) => {
        const li = document.createElement("li");
        li.dataset.runId = String(r.id);
        const swatch = document.createElement("span");
        swatch.className = "swatch";
        swatch.style.background = runColor(r.id);
        const a = runLink(r);
        const badge = document.createElement("span");
        badge.className = `badge status-${r.status}`;
        badge.textContent = r.status;
        li.append(swatch, a, " ", badge);
        // Hovering a run in the legend highlights its curve in every chart (others dimmed).
        for (const [ev, id] of [["mouseenter", r.id], ["mouseleave", null]]) li.addEventListener(ev, () => { for (const d of charts()) plot.focus(d, id); });
        return li;
      }));
    };

    // The charted keys of `runs`, one request per key (GET /api/compare/metrics: every run's
    // series of that key at once; the server reads the keys in parallel). Keeps each run's
    // status from the answer. Resolves to the errors.
    const fetchSeries = async (runs, keys) => {
      if (!runs.length) return [];
      const byId = new Map(runs.map((r) => [r.id, r]));
      const errors = await Promise.all(keys.map(async (key) => {
        const url = seriesUrl(runs, key, pointsOf(key), timed(state.view.x));
        const early = opts.early && opts.early.get(url);
        if (early) opts.early.delete(url);
        const res = await (early || call("GET", url));
        if (!res.ok && serverDown(res)) state.down = true;
        if (!res.ok) return `${key}: ${errorText(res.body)}`;
        for (const [id, got] of Object.entries(res.body.runs)) {
          const run = byId.get(Number(id));
          if (!run) continue;
          run.status = got.status;
          if (!state.series.has(run.id)) state.series.set(run.id, {});
          const held = state.series.get(run.id);
          if (got.series[key]) held[key] = got.series[key];
        }
        return null;
      }));
      return errors.filter(Boolean);
    };
    // The keys whose series are held (a chart that came near, the x-metric): what a poll asks
    // for again.
    const chartedKeys = () => [...state.fetched.keys()];
    // The x-axis choice offers every charted key but the system series (their steps are
    // seconds, not training steps).
    const fillXChoice = () => {
      const select = document.getElementById(`${opts.controls}-x-axis`);
      if (!select) return;
      const group = /** @type {HTMLOptGroupElement} */ (select.querySelector("optgroup.x-metrics") || document.createElement("optgroup"));
      group.className = "x-metrics";
      group.label = "Metric";
      const keys = charts().map((d) => d.dataset.key).filter((k) => !isSystemKey(k)).sort(compareKeys);
      group.replaceChildren(...keys.map((k) => Object.assign(document.createElement("option"),
        {value: `metric:${k}`, textContent: k})));
      if (!group.parentNode) select.append(group);
    };

    const say = (text, error) => {
      if (!opts.status) return;
      opts.status.textContent = text;
      opts.status.classList.toggle("form-error", Boolean(error));
    };

    const setRuns = (runs) => {
      state.runs = runs;
      state.labels = labels(runs, seedShown());
      bindBy(document.getElementById(`${opts.controls}-group-by`), runs);
      showLegend();
    };

    // New keys (a run began logging one, per the runs list's summaries; or `picked`, found by
    // the reader's search: experiment_curves.js, through state.addKey): a box for each.
    const addKeys = (runs, picked = false) => {
      const have = new Set(charts().map((d) => d.dataset.key));
      const fresh = new Set();
      for (const r of runs) for (const k of Object.keys(r.summary || {})) if (!have.has(k)) fresh.add(k);
      if (!fresh.size || (state.more > 0 && !picked)) return [];
      container.append(...[...fresh].map(chartDiv));
      for (const d of charts()) if (d.data) plot.purge(d);
      state.near.clear();
      capCharts();
      arrange(container);
      fillXChoice();
      return [...fresh];
    };

    // "live" in the status line only while the server answers: while it does not, the line says
    // so and since when the curves are as of; the first answer after puts the line back.
    const showLink = () => {
      if (!opts.status) return;
      if (state.down) {
        if (state.lostSince === null) { state.lostSince = new Date(); state.liveText = opts.status.textContent; }
        say(`${lostText(state.lostSince)}: the curves and statuses are as of then.`);
        opts.status.dataset.link = "lost";
      } else if (state.lostSince !== null) {
        state.lostSince = null;
        say(state.liveText);
        delete opts.status.dataset.link;
      }
    };

    let timer = null;
    const poll = async () => {
      timer = null;
      state.down = false;
      const active = state.runs.filter((r) => isActive(r.status));
      // A refreshRuns that could not list the runs gives null (and calls its argument when the
      // server did not answer): the active runs' curves are asked for anyway.
      const fresh = opts.refreshRuns ? await opts.refreshRuns(() => { state.down = true; }) : null;
      if (fresh) {
        const byId = new Map(fresh.map((r) => [r.id, r]));
        setRuns(fresh);
        addKeys(fresh);  // their series come with drawAll, as their charts come near
        // the runs active before (one may have just finished) and those new since
        const again = [...active.map((r) => byId.get(r.id)).filter(Boolean),
                       ...fresh.filter((r) => !state.series.has(r.id) && !active.includes(r))];
        await fetchSeries([...new Set(again)], chartedKeys());
      } else {
        await fetchSeries(active, chartedKeys());
      }
      showLink();
      showLegend();
      await drawAll();
      container.dataset.polls = String(Number(container.dataset.polls || 0) + 1);
      schedule();
    };
    const schedule = () => {
      if (opts.live) return;  // the page's stream asks for the next poll
      if (timer === null && state.runs.some((r) => isActive(r.status))) {
        timer = setTimeout(() => poll().catch(() => schedule()), POLL_MS);
      }
    };

    bindBand(document.getElementById(`${opts.controls}-band`));
    onGrouping((group) => { state.group = group; showLegend(); if (state.loaded) drawAll(); });
    // A metric chosen as the x axis: its series for every run, once, before drawing.
    const onControl = async () => {
      const wasTimed = timed(state.view.x);
      state.view = readView(opts.controls);
      container.dataset.x = state.view.x;  // the chart state's x, for what keeps views
      if (timed(state.view.x) && !wasTimed) state.fetched.clear();  // asked again, with the times
      await need([xKey()]);
      await drawAll();
    };
    document.addEventListener(SEED_SHOWN, () => { setRuns(state.runs); drawAll(); });
    for (const name of ["smoothing", "log-scale", "clip", "x-axis"]) {
      const el = /** @type {HTMLInputElement | HTMLSelectElement | null} */ (document.getElementById(`${opts.controls}-${name}`));
      if (!el) continue;
      el.addEventListener(el.type === "range" ? "input" : "change", () => {
        if (name === "smoothing") {
          const out = document.getElementById(`${opts.controls}-smoothing-value`);
          if (out) out.textContent = Number(el.value).toFixed(2);
        }
        onControl();
      });
    }

    const start = async () => {
      if (!plot || !plot.loaded()) { say("The chart library did not load; reload the page.", true); return; }
      setRuns(state.runs);
      capCharts();
      arrange(container);
      fillXChoice();
      showLegend();
      state.loaded = true;
      const failed = await drawAll();
      container.dataset.drawn = String(performance.now());
      const live = state.runs.some((r) => isActive(r.status));
      say(failed.length
        ? `Some curves could not be loaded (${failed.join("; ")}). Reload to try again.`
        : `${state.runs.length} run${state.runs.length === 1 ? "" : "s"}, up to ${firstFor(state.runs.length)} points per curve (spikes kept; ${budget()} in a zoomed chart)${live ? "; live while a run is active" : ""}. Drag to zoom, double-click to reset.`
          + (state.more ? ` ${state.more} more keys are not charted here: open a run's page for them.` : ""),
        failed.length > 0);
      schedule();
      // opts.live(refresh): the page's stream calls refresh(force) when the runs moved (force:
      // a status changed), at most once per POLL_MS unless forced, one poll at a time.
      if (opts.live) {
        const again = refresher(() => poll().catch(() => {}), POLL_MS);
        opts.live((force) => again(force));
      }
    };
    start().catch((err) => say(`The curves could not be drawn: ${err}. Reload to try again.`, true));
    state.addKey = async (key) => { if (addKeys([{summary: {[key]: {}}}], true).length) await drawAll(); };
    return state;
  };

  return {mount, prefetch, firstFor, labels, differingParams, chartDiv, arrange, LAZY_AFTER};
})();
