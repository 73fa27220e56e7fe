// Parallel coordinates: runs' params against one metric, hand-written SVG (no chart library,
// so it works beside whichever one the curves use). The axes are the reader's choice ("Axes":
// add, remove, move; parcoords_axes.js), by default one per param that differs across the
// runs (not the seed) then one for the metric (a summary key x last/min/max, picked here);
// one polyline per run, coloured by its metric value (viridis; grey: the run has no value).
// Numbers sit on a linear axis (log when all > 0 and spanning > 2 decades, like lr), anything
// else on evenly spaced categories; a run without the value sits at "–" below the axis. Hover
// a line for the run's values, click it to open the run; drag along an axis to keep the runs
// inside that range (brushes on several axes combine), double-click the axis to clear its
// brush. Every name and value reaches the page as text (textContent, createElementNS).
// parcoords.mount(el, runs, opts) -> {update(runs), setMetric(col), metric(), setAxes(ids),
// axes(), kept()}; opts: metric ("key.agg"), axes (ids, null: the default), onBrush(ids |
// null), onMetric(col), onAxes(ids | null), keys() (metric keys to offer besides the runs'
// summaries'). Reusable by any page of runs.
import {compareKeys, fmtParam, runLabels} from "./lib/format.js";
import {SEED_SHOWN} from "./lib/events.js";
import {seedShown} from "./lib/seed.js";
import {METRIC, axesChooser, axisIds, makeAxis, present} from "./parcoords_axes.js";
import {pages} from "./lib/urls.js";

export const parcoords = (() => {
  const SVG = "http://www.w3.org/2000/svg";
  const HEIGHT = 360, TOP = 56, BOTTOM = 44, LEFT = 80, RIGHT = 120, MIN_GAP = 96;
  const MISSING = 20; // px below an axis where runs without its value sit
  const AGGS = ["last", "min", "max"];
  const VIRIDIS = ["#440154", "#472d7b", "#3b528b", "#2c728e", "#21918c", "#28ae80", "#5ec962",
    "#addc30", "#fde725"];
  const GREY = "#b8bec8";
  let gradients = 0;

  const svgEl = (tag, attrs = {}, text) => {
    const node = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
    if (text !== undefined) node.textContent = String(text);
    return node;
  };
  const htmlEl = (tag, text, cls) => {
    const node = document.createElement(tag);
    if (text !== undefined) node.textContent = String(text);
    if (cls) node.className = cls;
    return node;
  };
  const cut = (text, n) => (text.length > n ? text.slice(0, n - 1) + "…" : text);

  // t in [0, 1] -> a colour between the viridis stops.
  const colorAt = (t) => {
    const x = Math.min(1, Math.max(0, t)) * (VIRIDIS.length - 1);
    const i = Math.min(VIRIDIS.length - 2, Math.floor(x));
    const rgb = (hex) => [1, 3, 5].map((o) => parseInt(hex.slice(o, o + 2), 16));
    const a = rgb(VIRIDIS[i]), b = rgb(VIRIDIS[i + 1]);
    return `rgb(${a.map((v, k) => Math.round(v + (b[k] - v) * (x - i))).join(",")})`;
  };

  const splitMetric = (col) => {
    const at = col.lastIndexOf(".");
    return [col.slice(0, at), col.slice(at + 1)];
  };
  const metricValue = (run, col) => {
    const [key, agg] = splitMetric(col);
    const v = ((run.summary || {})[key] || {})[agg];
    return typeof v === "number" && isFinite(v) ? v : null;
  };
  const mount = (el, runs, opts = {}) => {
    const state = {runs: [...runs], metric: opts.metric || null, chosen: opts.axes || null, brushes: /** @type {Map<string, number[]>} */ (new Map()), axes: /** @type {Record<string, any>[]} */ ([]),
                   width: 0, renders: 0, drawn: "", byId: new Map(),
                   ys: new Map(), out: new Set(), dragging: false, pending: false};
    const toolbar = htmlEl("div", undefined, "toolbar");
    const label = htmlEl("label", "Metric ");
    const picker = htmlEl("select", undefined, "pc-metric");
    picker.id = `${el.id || "parcoords"}-metric`;
    label.append(picker);
    const chooser = axesChooser((ids) => {
      state.chosen = ids;
      render();
      if (opts.onAxes) opts.onAxes(ids);
    });
    toolbar.append(label, chooser.el, htmlEl("span", "Drag along an axis to keep a range; double-click it to clear.", "hint"));
    const status = htmlEl("p", undefined, "hint pc-status");
    status.setAttribute("aria-live", "polite");
    const chart = htmlEl("div", undefined, "pc-chart");
    const tip = htmlEl("div", undefined, "pc-tip");
    el.replaceChildren(toolbar, status, chart);

    picker.addEventListener("change", () => {
      state.metric = picker.value || null;
      state.brushes.delete(METRIC);
      render();
      if (opts.onMetric) opts.onMetric(state.metric);
    });

    const fillPicker = () => {
      const keys = new Set();
      for (const r of state.runs) for (const k of Object.keys(r.summary || {})) keys.add(k);
      for (const k of opts.keys ? opts.keys() : []) keys.add(k);  // logged, not loaded
      if (state.metric) keys.add(splitMetric(state.metric)[0]);
      picker.replaceChildren();
      for (const key of [...keys].sort(compareKeys)) {
        const group = document.createElement("optgroup");
        group.label = key;
        for (const agg of AGGS) group.append(Object.assign(htmlEl("option", `${key} (${agg})`), {value: `${key}.${agg}`}));
        picker.append(group);
      }
      if (!keys.size) picker.append(Object.assign(htmlEl("option", "no metric logged yet"), {value: ""}));
      picker.value = state.metric || "";
    };

    const geo = {xs: /** @type {number[]} */ ([]), highlight: /** @type {SVGElement | null} */ (null)}; // the current render's axes' x and hovered line
    const yOf = (p) => (p === null ? HEIGHT - BOTTOM + MISSING : TOP + (1 - p) * (HEIGHT - TOP - BOTTOM));
    const valueOf = (run, axis) => (axis.metric ? metricValue(run, state.metric) : (run.params || {})[axis.key]);
    const pointY = (run, axis) => yOf(axis.pos(valueOf(run, axis)));

    const keptIds = () => {
      if (!state.brushes.size) return null;
      return state.runs.filter((r) => state.axes.every((axis) => {
        const b = state.brushes.get(axis.id);
        if (!b) return true;
        const y = pointY(r, axis);
        return y >= b[0] && y <= b[1];
      })).map((r) => r.id);
    };
    const applyBrushes = () => {
      const kept = keptIds();
      const set = kept && new Set(kept);
      state.out = new Set(set ? state.runs.filter((r) => !set.has(r.id)).map((r) => r.id) : []);
      for (const g of chart.querySelectorAll("g.pc-run")) g.classList.toggle("pc-out", Boolean(set) && !/** @type {Set<any>} */ (set).has(Number(g.dataset.runId)));
      for (const axis of state.axes) {
        const rect = chart.querySelector(`g.pc-axis[data-index="${axis.index}"] rect.pc-brush`);
        const b = state.brushes.get(axis.id);
        rect.setAttribute("visibility", b ? "visible" : "hidden");
        if (b) { rect.setAttribute("y", b[0]); rect.setAttribute("height", Math.max(1, b[1] - b[0])); }
      }
      el.dataset.kept = kept ? String(kept.length) : "";
      if (opts.onBrush) opts.onBrush(kept);
    };

    const showTip = (run, event) => {
      const lines = [state.labels.get(run.id) || `run ${run.id}`,
        ...state.axes.map((a) => `${a.title}: ${present(valueOf(run, a)) ? fmtParam(valueOf(run, a)) : "–"}`)];
      tip.replaceChildren(...lines.map((t, i) => htmlEl("div", t, i ? undefined : "pc-tip-head")));
      tip.hidden = false;
      const box = chart.getBoundingClientRect();
      const x = event && event.clientX !== undefined ? event.clientX - box.left + chart.scrollLeft : geo.xs[0];
      const y = event && event.clientY !== undefined ? event.clientY - box.top : TOP;
      tip.style.left = `${Math.max(0, Math.min(x + 14, chart.scrollWidth - 260))}px`;
      tip.style.top = `${y + 14}px`;
    };

    // Hover and click: the line nearest the pointer (within NEAR px, at the pointer's x between
    // two axes), found from the drawn points, not by the browser's hit test: a thousand thin
    // lines would each need a wide invisible twin to be hoverable, doubling what is painted.
    // Keyboard: each run's line is a focusable link (Enter opens it). One listener each on the
    // chart, whatever the number of runs. The hovered line is drawn again on top
    // (path.pc-highlight) rather than moved, which would drop its focus.
    const NEAR = 7;
    let hovered = null;
    const gOf = (id) => chart.querySelector(`g.pc-run[data-run-id="${id}"]`);
    const enter = (run, e) => {
      const g = gOf(run.id);
      if (hovered && hovered !== g) hovered.classList.remove("pc-hover");
      hovered = g;
      g.classList.add("pc-hover");
      const line = g.querySelector(".pc-line");
      /** @type {SVGElement} */ (geo.highlight).setAttribute("d", line.getAttribute("d"));
      /** @type {SVGElement} */ (geo.highlight).setAttribute("stroke", line.getAttribute("stroke"));
      /** @type {SVGElement} */ (geo.highlight).setAttribute("visibility", "visible");
      chart.classList.add("pc-pointing");
      showTip(run, e);
    };
    const leave = () => {
      if (hovered) hovered.classList.remove("pc-hover");
      hovered = null;
      if (geo.highlight) geo.highlight.setAttribute("visibility", "hidden");
      chart.classList.remove("pc-pointing");
      tip.hidden = true;
    };
    const nearest = (e) => {
      const svg = chart.querySelector("svg");
      if (!svg || e.target.closest?.(".pc-axis-hit")) return null;
      const box = svg.getBoundingClientRect();
      const x = e.clientX - box.left, y = e.clientY - box.top, xs = geo.xs;
      let i = xs.length > 1 ? xs.findIndex((v, k) => k < xs.length - 1 && x >= v && x <= xs[k + 1]) : 0;
      if (i < 0 || (xs.length === 1 && Math.abs(x - xs[0]) > 10)) return null;
      const t = xs.length > 1 ? (x - xs[i]) / (xs[i + 1] - xs[i]) : 0;
      if (xs.length === 1) i = 0;
      let best = null, bestD = NEAR;
      for (const run of state.runs) {
        const ys = state.ys.get(run.id);
        const at = ys.length > 1 ? ys[i] + t * (ys[i + 1] - ys[i]) : ys[0];
        const d = Math.abs(at - y) + (state.out.has(run.id) ? 3 : 0); // prefer the kept runs
        if (d < bestD) { best = run; bestD = d; }
      }
      return best;
    };
    const open = (run) => window.location.assign(pages.run(run.id));
    chart.addEventListener("pointermove", (e) => {
      if (state.dragging) return;
      const run = nearest(e);
      if (!run) { if (hovered) leave(); return; }
      if (gOf(run.id) !== hovered) enter(run, e); else showTip(run, e);
    });
    chart.addEventListener("pointerleave", leave);
    chart.addEventListener("click", (e) => { const run = nearest(e); if (run) open(run); });
    const runOf = (e) => {
      const g = e.target instanceof Element ? e.target.closest("g.pc-run") : null;
      return g ? state.byId.get(Number(g.dataset.runId)) : null;
    };
    chart.addEventListener("focusin", (e) => { const run = runOf(e); if (run) enter(run, null); });
    chart.addEventListener("focusout", (e) => { if (runOf(e)) leave(); });
    chart.addEventListener("keydown", (e) => { const run = runOf(e); if (run && e.key === "Enter") open(run); });

    const drawAxis = (svg, axis, x, i, gap, hasMissing) => {
      const g = svgEl("g", {class: "pc-axis", transform: `translate(${x},0)`, "data-index": i,
                            "data-kind": axis.metric ? "metric" : axis.kind});
      g.dataset.key = axis.key;
      g.append(svgEl("line", {x1: 0, x2: 0, y1: TOP, y2: HEIGHT - BOTTOM, class: "pc-axis-line"}));
      const room = Math.max(6, Math.floor(gap / 7.5));
      for (const t of axis.ticks) {
        const y = yOf(t.at);
        g.append(svgEl("line", {x1: -4, x2: 0, y1: y, y2: y, class: "pc-tick"}));
        if (t.text) {
          const text = svgEl("text", {x: -7, y: y + 4, "text-anchor": "end", class: "pc-tick-label"}, cut(t.text, room));
          text.append(svgEl("title", {}, t.text));
          g.append(text);
        }
      }
      if (hasMissing) g.append(svgEl("text", {x: -7, y: yOf(null) + 4, "text-anchor": "end", class: "pc-tick-label"}, "–"));
      // Long titles alternate between two rows when the axes stand close.
      const row = gap < 150 && i % 2 ? 16 : 0;
      // The first axis's title starts at the left edge (centred, a long one would be cut off).
      const first = i === 0 && axis.title.length * 7 > 2 * (LEFT - 8);
      const title = svgEl("text", {x: first ? 8 - LEFT : 0, y: TOP - 30 + row, class: "pc-axis-title",
                                   "text-anchor": first ? "start" : "middle"},
        cut(axis.title, Math.max(8, Math.floor((gap < 150 ? 2 * gap : gap) / 7.5))));
      title.append(svgEl("title", {}, axis.title));
      g.append(title);
      const brush = svgEl("rect", {x: -8, width: 16, y: TOP, height: 0, class: "pc-brush", visibility: "hidden"});
      const hit = svgEl("rect", {x: -12, width: 24, y: TOP - 6, height: HEIGHT - BOTTOM + MISSING + 12 - TOP,
                                 class: "pc-axis-hit"});
      hit.append(svgEl("title", {}, `${axis.title}: drag to keep a range, double-click to clear`));
      g.append(brush, hit);
      let from = null;
      const yAt = (e) => e.clientY - svg.getBoundingClientRect().top;
      const clamp = (y) => Math.min(HEIGHT - BOTTOM + MISSING + 6, Math.max(TOP - 6, y));
      hit.addEventListener("pointerdown", (e) => {
        from = clamp(yAt(e));
        state.dragging = true;
        hit.setPointerCapture(e.pointerId);
      });
      hit.addEventListener("pointermove", (e) => {
        if (from === null) return;
        const to = clamp(yAt(e));
        if (Math.abs(to - from) < 3) return;
        state.brushes.set(axis.id, [Math.min(from, to), Math.max(from, to)]);
        applyBrushes();
      });
      const end = () => {
        from = null;
        state.dragging = false;
        if (state.pending) { state.pending = false; render(); }
      };
      hit.addEventListener("pointerup", end);
      hit.addEventListener("pointercancel", end);
      hit.addEventListener("dblclick", () => { state.brushes.delete(axis.id); applyBrushes(); });
      svg.append(g);
    };

    const drawColorBar = (svg, axis, x, gradientId) => {
      const defs = svgEl("defs");
      const grad = svgEl("linearGradient", {id: gradientId, x1: 0, x2: 0, y1: 1, y2: 0});
      VIRIDIS.forEach((c, i) => grad.append(svgEl("stop", {offset: i / (VIRIDIS.length - 1), "stop-color": c})));
      defs.append(grad);
      const g = svgEl("g", {class: "pc-colorbar", transform: `translate(${x},0)`});
      g.append(svgEl("rect", {x: 0, y: TOP, width: 10, height: HEIGHT - TOP - BOTTOM, fill: `url(#${gradientId})`}));
      const ends = axis.ticks.length ? [axis.ticks[0], axis.ticks[axis.ticks.length - 1]] : [];
      for (const t of ends) g.append(svgEl("text", {x: 14, y: yOf(t.at) + 4, class: "pc-tick-label"}, t.text));
      g.append(svgEl("rect", {x: 0, y: yOf(null) - 5, width: 10, height: 10, fill: GREY}));
      g.append(svgEl("text", {x: 14, y: yOf(null) + 4, class: "pc-tick-label"}, "no value"));
      svg.append(defs, g);
    };

    const render = () => {
      fillPicker();
      state.labels = runLabels(state.runs);
      const title = (key) => key.replace(/^params\./, "");
      const axes = axisIds(state.runs, state.chosen, seedShown()).flatMap((id) => {
        if (id !== METRIC) {
          const key = id.slice(2);
          return [{key, id, title: title(key), ...makeAxis(state.runs.map((r) => (r.params || {})[key]))}];
        }
        if (!state.metric) return [];
        const [key, agg] = splitMetric(state.metric);
        return [{key: state.metric, id: METRIC, metric: true, title: `${key} (${agg})`,
                 ...makeAxis(state.runs.map((r) => metricValue(r, state.metric)))}];
      });
      const params = axes.filter((a) => !a.metric);
      const options = new Map();
      for (const r of state.runs) for (const k of Object.keys(r.params || {})) options.set(`p:${k}`, title(k));
      options.set(METRIC, state.metric ? `${splitMetric(state.metric)[0]} (metric)` : "the metric");
      chooser.fill(new Map([...options].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))), axes.map((a) => a.id));
      axes.forEach((a, i) => { a.index = i; });
      state.axes = axes;
      for (const id of [...state.brushes.keys()]) if (!axes.some((a) => a.id === id)) state.brushes.delete(id);

      const avail = Math.max(el.clientWidth || 0, 480);
      const width = Math.max(avail, LEFT + RIGHT + Math.max(0, axes.length - 1) * MIN_GAP);
      state.width = el.clientWidth;
      const gap = axes.length > 1 ? (width - LEFT - RIGHT) / (axes.length - 1) : width - LEFT - RIGHT;
      geo.xs = axes.map((_, i) => (axes.length > 1 ? LEFT + i * gap : (width - RIGHT + LEFT) / 2));
      const svg = svgEl("svg", {width, height: HEIGHT, class: "pc-svg", role: "group"});
      svg.setAttribute("aria-label", `Parallel coordinates: ${axes.map((a) => a.title).join(", ")}`);
      const metricAxis = axes.find((a) => a.metric);

      const lines = svgEl("g", {class: "pc-lines"});
      state.ys = new Map();
      const ordered = [...state.runs].sort((a, b) =>
        Number(metricValue(a, state.metric || "") !== null) - Number(metricValue(b, state.metric || "") !== null));
      for (const run of state.runs.length ? ordered : []) {
        const pts = axes.map((a, i) => [geo.xs[i], pointY(run, a)]);
        state.ys.set(run.id, pts.map(([, y]) => y));
        const d = pts.length === 1 ? `M${pts[0][0] - 8},${pts[0][1]}H${pts[0][0] + 8}`
          : pts.map(([x, y], i) => `${i ? "L" : "M"}${x.toFixed(1)},${y.toFixed(1)}`).join("");
        const m = state.metric ? metricValue(run, state.metric) : null;
        const color = m === null || !metricAxis ? GREY : colorAt(metricAxis.pos(m));
        const g = svgEl("g", {class: "pc-run", tabindex: 0, role: "link", "data-run-id": run.id});
        g.setAttribute("aria-label", state.labels.get(run.id) || `run ${run.id}`);
        if (m === null) g.classList.add("pc-no-value");
        g.append(svgEl("path", {d, class: "pc-line", stroke: color}));
        lines.append(g);
      }
      geo.highlight = svgEl("path", {class: "pc-highlight", visibility: "hidden"});
      svg.append(lines, geo.highlight);
      state.byId = new Map(state.runs.map((r) => [r.id, r]));
      leave();
      axes.forEach((a, i) => drawAxis(svg, a, geo.xs[i], i, gap,
        state.runs.some((r) => a.pos(valueOf(r, a)) === null)));
      if (metricAxis) drawColorBar(svg, metricAxis, width - RIGHT + 44, `pc-gradient-${++gradients}`);
      chart.replaceChildren(svg, tip);
      tip.hidden = true;

      const noValue = state.runs.filter((r) => state.metric && metricValue(r, state.metric) === null).length;
      status.textContent = !state.runs.length ? "No runs to show: their params and metrics appear here."
        : `${state.runs.length} run${state.runs.length === 1 ? "" : "s"}` +
          (params.length ? `, ${params.length} param axis${params.length === 1 ? "" : "es"}` : "; no param axis (none differs, or none chosen)") +
          (noValue ? `; ${noValue} without ${metricAxis.title} (grey)` : "") + ". Click a line to open its run.";
      state.drawn = JSON.stringify(state.runs.map((r) => [r.id, r.name, r.params, r.summary]));
      state.renders += 1;
      el.dataset.renders = String(state.renders);
      applyBrushes();
    };

    // Follow the container's width (the page's layout, a resized window).
    if (typeof ResizeObserver !== "undefined") {
      new ResizeObserver(() => { if (Math.abs(el.clientWidth - state.width) > 2 && state.width) render(); }).observe(el);
    }
    document.addEventListener(SEED_SHOWN, () => { if (!state.chosen) render(); });
    render();
    return {
      update: (fresh) => {
        // The page refreshes its runs often (live: every few seconds): redraw only when what
        // is drawn changed, and not under a brush being dragged (its axis would go away).
        const drawn = JSON.stringify(fresh.map((r) => [r.id, r.name, r.params, r.summary]));
        if (drawn === state.drawn) return;
        state.runs = [...fresh];
        if (state.dragging) state.pending = true; else render();
      },
      setAxes: (ids) => { state.chosen = ids; render(); },
      axes: () => state.axes.map((a) => a.id),
      setMetric: (col) => { state.metric = col || null; state.brushes.delete(METRIC); render(); },
      metric: () => state.metric,
      kept: keptIds,
    };
  };

  return {mount, makeAxis, colorAt};
})();
