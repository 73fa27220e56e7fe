// The one line-chart module of every page (run page, compare page, experiment overlays),
// drawn by uPlot (served from the installed uplot-python package: app/static_files.py).
// Plotly's 4.8 MB took ~1.2 s to parse in a fresh browser for charts that are only lines;
// uPlot is 120 KB and draws 100 curves of 300 points in milliseconds.
//
// A chart's state lives on its element in Plotly's shape, which the pages and the tests read:
// `div.data` is the traces ({x, y, name, line: {color, width, dash}, mode, visible, opacity,
// fill, fillcolor, meta}; fill "tonexty": the area between this trace and the one before it,
// a grouped chart's band), `div.layout` the layout ({title: {text}, xaxis: {title: {text}, type, range,
// autorange}, yaxis: {type: "linear"|"log", range (log10 when log), autorange}}).
// Titles, names and axis titles are plain text (uPlot and this module set textContent).
import {drawable, tipValue} from "./lib/diverged.js";
import {join} from "./lib/join.js";

export const plot = (() => {
  const charts = new WeakMap();  // div -> {u, listeners, observer, shape}
  const infinities = new WeakMap();  // div -> where its +/-inf are drawn (lib/diverged.js)
  const TITLE_HEIGHT = 22;

  const rgba = (color, alpha) => {
    if (alpha === undefined || alpha >= 1 || !/^#[0-9a-f]{6}$/i.test(color)) return color;
    const n = parseInt(color.slice(1), 16);
    return `rgba(${n >> 16}, ${(n >> 8) & 255}, ${n & 255}, ${alpha})`;
  };

  const shown = (t) => t.visible !== false && t.visible !== "legendonly";

  // Plotly's log range is in log10 units; uPlot's in the data's.
  const yRange = (layout) => {
    const y = layout.yaxis || {};
    if (y.autorange !== false || !Array.isArray(y.range)) return null;
    return y.type === "log" ? y.range.map((v) => 10 ** v) : y.range.slice();
  };

  // One x column for all traces (uPlot's aligned data). Traces with the same x (the run page's
  // raw and smoothed curves) share it as is; others are joined: a trace has no value
  // (undefined) at another's x, and its line runs across (only null breaks a line).
  // A +/-inf (sent as the largest double) is drawn just past the other values (lib/diverged.js).
  const align = (div, traces, log) => {
    const positive = (y) => (log ? y.map((v) => (v == null || !(v > 0) ? null : v)) : y);
    const drawn = drawable(traces.map((t) => positive(t.y)));
    infinities.set(div, drawn);
    const cleaned = new Map(traces.map((t, i) => [t, drawn.ys[i]]));
    const clean = (t) => cleaned.get(t);
    const xs = traces.length ? traces[0].x : [];
    const equal = (a) => a === xs || (a.length === xs.length && a.every((v, i) => v === xs[i]));
    const same = traces.every((t) => equal(t.x)) && !xs.some((v) => v == null);
    const num = (x) => (x instanceof Date ? x.getTime() / 1000 : x);
    if (same) return [xs.map(num), ...traces.map((t) => clean(t))];
    const tables = traces.map((t) => {
      const x = [], y = [];
      const ys = clean(t);
      for (let i = 0; i < t.x.length; i++) {
        if (t.x[i] == null) continue;
        x.push(num(t.x[i])); y.push(ys[i]);
      }
      return [x, y];
    });
    return join(tables);  // lib/join.js: uPlot.join's answer without its Set, Map and sort
  };

  // What, when changed, needs a new uPlot (anything but the data, visibility and ranges).
  const shapeOf = (traces, layout) => JSON.stringify([
    traces.map((t) => [t.name, (t.line || {}).color, (t.line || {}).width, (t.line || {}).dash,
      t.opacity, t.mode, t.fill, t.fillcolor]),
    (layout.title || {}).text, ((layout.xaxis || {}).title || {}).text, (layout.xaxis || {}).type,
    (layout.yaxis || {}).type]);

  const seriesOf = (t) => {
    const line = t.line || {};
    return {
      label: String(t.name ?? ""),
      stroke: rgba(line.color || "#2456d6", t.opacity),
      width: line.width || 1.5,
      dash: line.dash === "dot" ? [2, 3] : line.dash === "dash" ? [6, 4] : undefined,
      points: {show: String(t.mode || "").includes("markers"), size: 4},
      show: shown(t),
      spanGaps: false,
    };
  };

  // Plotly's fill "tonexty" as uPlot's bands: the area between trace i and trace i - 1.
  const bandsOf = (traces) => traces.flatMap((t, i) => (t.fill === "tonexty" && i > 0
    ? [{series: [i + 1, i], fill: t.fillcolor || rgba((t.line || {}).color || "#2456d6", 0.2)}] : []));

  const emit = (div, ev) => { for (const f of (charts.get(div) || {}).listeners || []) f(ev); };

  // Many runs on one chart (traces with meta.run: the overlays): the run whose curve is
  // within FOCUS_PX of the cursor is drawn at full strength and every other one dimmed to
  // FOCUS_ALPHA, so one of 1,000 curves can be followed. The element says which
  // (data-focused: the run's id, data-dimmed: how many curves are dimmed), for the tests.
  const FOCUS_PX = 24, FOCUS_ALPHA = 0.12;
  const focusable = (div) => (div.data || []).some((t) => t.meta && t.meta.run != null);
  const setFocus = (div, u, s) => {
    const trace = s == null ? null : div.data[s - 1];
    const run = trace && trace.meta && trace.meta.run != null ? String(trace.meta.run) : "";
    if ((div.dataset.focused || "") === run) return;
    u.setSeries(run ? s : null, {focus: true});
    if (run) div.dataset.focused = run; else delete div.dataset.focused;
    div.dataset.dimmed = String(u.series.filter((x, i) => i > 0 && x.alpha < 1).length);
  };
  const focusNear = (div, u, s) => { if (focusable(div)) setFocus(div, u, s); };
  // The curve of run `runId` highlighted (the legend's hovered run), or none (null).
  const focus = (div, runId) => {
    const state = charts.get(div);
    if (!state || !state.u || !focusable(div)) return;
    const i = runId == null ? -1
      : div.data.findIndex((t) => t.meta && String(t.meta.run) === String(runId));
    setFocus(div, state.u, i < 0 ? null : i + 1);
  };

  // The nearest curve's point to the cursor, named in the chart's tooltip.
  const showTip = (div, u, tip) => {
    const idx = u.cursor.idx, top = u.cursor.top, left = u.cursor.left;
    if (idx == null || left < 0) { tip.hidden = true; return; }
    let best = null;
    for (let s = 1; s < u.series.length; s++) {
      if (!u.series[s].show) continue;
      const ys = u.data[s];
      for (let d = 0; d < 64; d++) {  // the nearest index holding a value, either side
        const i = ys[idx - d] != null ? idx - d : ys[idx + d] != null ? idx + d : -1;
        if (i < 0) continue;
        const dx = u.valToPos(u.data[0][i], "x") - left, dy = u.valToPos(ys[i], "y") - top;
        const dist = dx * dx + dy * dy;
        if (!best || dist < best.dist) best = {dist, s, i};
        break;
      }
    }
    focusNear(div, u, best && best.dist <= FOCUS_PX * FOCUS_PX ? best.s : null);
    if (!best) { tip.hidden = true; return; }
    const trace = div.data[best.s - 1];
    const x = u.data[0][best.i], y = u.data[best.s][best.i];
    const xText = (div.layout.xaxis || {}).type === "date"
      ? new Date(x * 1000).toLocaleString() : String(Number(x.toPrecision(6)));
    const yText = tipValue(y, infinities.get(div) || {top: null, bottom: null});
    tip.textContent = `${trace ? trace.name : ""}\n${xText}: ${yText}`;
    tip.hidden = false;
    tip.style.left = `${Math.min(left + 12, u.over.clientWidth - 160)}px`;
    tip.style.top = `${Math.max(0, top - 36)}px`;
  };

  const create = (div, traces, layout) => {
    destroy(div);
    const state = charts.get(div) || {listeners: []};
    const title = document.createElement("div");
    title.className = "chart-title";
    title.textContent = (layout.title || {}).text || "";
    const host = document.createElement("div");
    div.replaceChildren(title, host);
    const log = (layout.yaxis || {}).type === "log";
    const time = (layout.xaxis || {}).type === "date";
    const size = () => ({width: Math.max(200, div.clientWidth - 2),
                         height: Math.max(120, (div.clientHeight || 300) - TITLE_HEIGHT - 4)});
    const tip = document.createElement("div");
    tip.className = "chart-tip";
    tip.hidden = true;
    // Axis text and grid in the page's own colours (app.css: light or dark, as the system asks).
    const css = getComputedStyle(document.documentElement);
    const colour = (name, fallback) => css.getPropertyValue(name).trim() || fallback;
    const ink = {stroke: colour("--muted", "#5b6575"),
                 grid: {stroke: colour("--line", "#dde2ea"), width: 1},
                 ticks: {stroke: colour("--line", "#dde2ea"), width: 1}};
    const opts = {
      ...size(),
      legend: {show: false},
      cursor: {drag: {x: true, y: false}, points: {show: false}},
      focus: {alpha: FOCUS_ALPHA},  // applied by setFocus only (uPlot's own cursor focus is off)
      scales: {
        x: {time, auto: true},
        y: {distr: log ? 3 : 1, auto: true,
            range: (u, min, max) => {
              const fixed = yRange(div.layout);
              if (fixed) return fixed;
              if (log) return uPlot.rangeLog(min, max, 10, true);
              return uPlot.rangeNum(min, max, 0.08, true);
            }},
      },
      axes: [
        {label: ((layout.xaxis || {}).title || {}).text || "", labelSize: 18, size: 32,
         labelFont: "11px system-ui, sans-serif", font: "11px system-ui, sans-serif", ...ink},
        {size: 52, font: "11px system-ui, sans-serif", ...ink},
      ],
      series: [{}, ...traces.map(seriesOf)],
      bands: bandsOf(traces),
      hooks: {
        // A dragged x range (uPlot then zooms to it itself).
        setSelect: [(u) => {
          if (!(u.select.width > 0)) return;
          const min = u.posToVal(u.select.left, "x"), max = u.posToVal(u.select.left + u.select.width, "x");
          const xaxis = div.layout.xaxis || (div.layout.xaxis = {});
          xaxis.autorange = false; xaxis.range = [min, max];
          emit(div, {"xaxis.range[0]": min, "xaxis.range[1]": max});
        }],
        setCursor: [(u) => showTip(div, u, tip)],
      },
    };
    const u = new uPlot(opts, align(div, traces, log), host);
    u.over.append(tip);
    u.over.addEventListener("mouseleave", () => { tip.hidden = true; focusNear(div, u, null); });
    // A double-click: uPlot goes back to the whole x range.
    u.over.addEventListener("dblclick", () => {
      const xaxis = div.layout.xaxis || (div.layout.xaxis = {});
      xaxis.autorange = true; delete xaxis.range;
      emit(div, {"xaxis.autorange": true});
    });
    delete div.dataset.focused;
    delete div.dataset.dimmed;
    state.u = u;
    state.shape = shapeOf(traces, layout);
    applyXRange(u, layout);
    state.observer = new ResizeObserver(() => {
      const s = size();
      if (s.width !== u.width || s.height !== u.height) u.setSize(s);
    });
    state.observer.observe(div);
    charts.set(div, state);
  };

  const applyXRange = (u, layout) => {
    const x = layout.xaxis || {};
    if (x.autorange === false && Array.isArray(x.range)) u.setScale("x", {min: x.range[0], max: x.range[1]});
  };

  const destroy = (div) => {
    const state = charts.get(div);
    if (!state || !state.u) return;
    state.observer.disconnect();
    state.u.destroy();
    state.u = null;
  };

  // Draw `traces` with `layout` in `div` (made or updated); resolves when drawn.
  const react = (div, traces, layout) => {
    div.data = traces;
    div.layout = layout;
    const state = charts.get(div);
    if (!state || !state.u || state.shape !== shapeOf(traces, layout)) {
      create(div, traces, layout);
    } else {
      refresh(div, state);
    }
    return Promise.resolve(div);
  };

  // New data into the same uPlot; the x range is kept while zoomed (uPlot draws once for both).
  const refresh = (div, state) => {
    const u = state.u;
    div.data.forEach((t, i) => { if (u.series[i + 1].show !== shown(t)) u.setSeries(i + 1, {show: shown(t)}); });
    u.setData(align(div, div.data, (div.layout.yaxis || {}).type === "log"));
    applyXRange(u, div.layout);
  };

  // Plotly's extendTraces: append update.x[k] / update.y[k] to trace indices[k].
  const extend = (div, update, indices) => {
    indices.forEach((ti, k) => {
      const t = div.data[ti];
      for (const v of update.x[k]) t.x.push(v);
      for (const v of update.y[k]) t.y.push(v);
    });
    const state = charts.get(div);
    if (state && state.u) refresh(div, state);
  };

  // Plotly's restyle: update[prop][k] set on trace indices[k] (y, visible, opacity).
  const restyle = (div, update, indices) => {
    for (const [prop, values] of Object.entries(update)) {
      indices.forEach((ti, k) => { div.data[ti][prop] = values[k]; });
    }
    return react(div, div.data, div.layout);
  };

  // Plotly's relayout for the keys the pages use ("yaxis.type", "yaxis.autorange").
  const relayout = (div, update) => {
    for (const [path, value] of Object.entries(update)) {
      const [axis, prop] = path.split(".");
      div.layout[axis] = div.layout[axis] || {};
      div.layout[axis][prop] = value;
      if (prop === "autorange" && value === true) delete div.layout[axis].range;
    }
    return react(div, div.data, div.layout);
  };

  // Zoom events in Plotly's relayout shape: {"xaxis.range[0]", "xaxis.range[1]"} when the
  // user drags a range, {"xaxis.autorange": true} on a double-click back to everything.
  const onRelayout = (div, listener) => {
    const state = charts.get(div) || {listeners: []};
    state.listeners.push(listener);
    charts.set(div, state);
  };

  const purge = (div) => {
    destroy(div);
    charts.delete(div);
    div.replaceChildren();
    delete div.data;
    delete div.layout;
  };

  return {react, extend, restyle, relayout, onRelayout, purge, focus, loaded: () => typeof uPlot !== "undefined"};
})();
