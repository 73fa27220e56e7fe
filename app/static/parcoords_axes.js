// The parallel coordinates' axes (parcoords.js): which ones, in which order, and how each maps
// its values to a height. Which: the reader's choice (added, removed, moved in the "Axes"
// list), else the params that differ across the runs (the seed only under "Show seed":
// lib/seed.js) and then the metric. Every name reaches the page as text (textContent).
import {differingParams, fmtParam} from "./lib/format.js";

export const METRIC = "m";  // the metric axis' id (a param's is "p:" + its key)
export const paramId = (key) => `p:${key}`;
export const isNum = (v) => typeof v === "number" && isFinite(v);
export const present = (v) => v !== undefined && v !== null;

// The ids of the axes drawn, in order: `chosen` (null: none chosen) less the params no run
// has, else the differing params and the metric.
export const axisIds = (runs, chosen, withSeed) => {
  if (!chosen) return [...differingParams(runs, withSeed).map(paramId), METRIC];
  const keys = new Set();
  for (const r of runs) for (const k of Object.keys(r.params || {})) keys.add(k);
  return chosen.filter((id) => id === METRIC || keys.has(id.slice(2)));
};

// About 5 round ticks between lo and hi.
const linearTicks = (lo, hi) => {
  const raw = (hi - lo) / 4;
  const mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 5, 10].map((m) => m * mag).find((s) => s >= raw) || raw;
  const ticks = [];
  for (let k = Math.ceil(lo / step); k * step <= hi + step * 1e-9; k++) ticks.push(Number((k * step).toPrecision(12)));
  return ticks;
};

// An axis over `values` (one per run, undefined/null when the run has none): pos(v) gives
// 0 (bottom) .. 1 (top), or null for a missing value; ticks: [{at, text}].
export const makeAxis = (values) => {
  const have = values.filter(present);
  if (have.length && have.every(isNum)) {
    let lo = Math.min(...have), hi = Math.max(...have);
    if (lo > 0 && hi / lo > 100) {
      const a = Math.log10(lo), b = Math.log10(hi);
      const ticks = [];
      for (let e = Math.ceil(a); e <= Math.floor(b); e++) ticks.push(Math.pow(10, e));
      return {kind: "log", pos: (v) => (isNum(v) && v > 0 ? (Math.log10(v) - a) / (b - a) : null),
              ticks: ticks.map((v) => ({at: (Math.log10(v) - a) / (b - a), text: fmtParam(v)}))};
    }
    if (lo === hi) { const pad = Math.abs(lo) * 0.1 || 1; lo -= pad; hi += pad; }
    const pos = (v) => (isNum(v) ? (v - lo) / (hi - lo) : null);
    return {kind: "linear", pos, ticks: linearTicks(lo, hi).map((v) => ({at: pos(v), text: fmtParam(v)}))};
  }
  // Categories: numbers first in order, then the rest by their text.
  const byText = new Map();
  for (const v of have) byText.set(JSON.stringify(v), v);
  const cats = [...byText.entries()].sort(([ta, a], [tb, b]) =>
    (isNum(a) && isNum(b) ? a - b : isNum(a) ? -1 : isNum(b) ? 1 : ta < tb ? -1 : ta > tb ? 1 : 0));
  const index = new Map(cats.map(([t], i) => [t, i]));
  const at = (i) => (cats.length === 1 ? 0.5 : i / (cats.length - 1));
  const every = Math.ceil(cats.length / 12); // at most ~12 labels
  return {kind: "category", pos: (v) => (present(v) ? at(index.get(JSON.stringify(v))) : null),
          ticks: cats.map(([, v], i) => ({at: at(i), text: i % every ? "" : fmtParam(v)}))};
};

// The "Axes" list: every param of the runs and the metric, the drawn ones first in their
// order, each with a checkbox (drawn or not) and, when drawn, buttons moving it left or right.
// onChange(ids) with the new order, or null for "Default axes". Keyboard: the focus stays on
// the control just used across the redraw.
export const axesChooser = (onChange) => {
  const box = document.createElement("details");
  box.className = "pc-axes";
  const summary = document.createElement("summary");
  summary.textContent = "Axes";
  const list = document.createElement("ol");
  list.className = "pc-axes-list card";
  const reset = Object.assign(document.createElement("button"), {type: "button", textContent: "Default axes"});
  reset.className = "pc-axes-default";
  reset.addEventListener("click", () => onChange(null));
  box.append(summary, list);
  list.after(reset);
  let current = [];

  const button = (text, label, act) => {
    const b = Object.assign(document.createElement("button"), {type: "button", textContent: text});
    b.setAttribute("aria-label", label);
    b.dataset.act = act;
    return b;
  };
  const move = (id, by) => {
    const i = current.indexOf(id), j = i + by;
    if (i < 0 || j < 0 || j >= current.length) return;
    const next = current.slice();
    [next[i], next[j]] = [next[j], next[i]];
    onChange(next);
  };
  const row = (id, title, on, i) => {
    const li = document.createElement("li");
    li.dataset.axis = id;
    const label = document.createElement("label");
    label.className = "check";
    const check = Object.assign(document.createElement("input"), {type: "checkbox", checked: on});
    check.dataset.act = "toggle";
    check.addEventListener("change", () => onChange(check.checked ? [...current, id] : current.filter((x) => x !== id)));
    label.append(check, ` ${title}`);
    li.append(label);
    if (on) {
      const left = button("←", `Move ${title} left`, "left"), right = button("→", `Move ${title} right`, "right");
      left.disabled = i === 0;
      right.disabled = i === current.length - 1;
      left.addEventListener("click", () => move(id, -1));
      right.addEventListener("click", () => move(id, 1));
      li.append(" ", left, right);
    }
    return li;
  };

  // options: Map id -> title (every axis that could be drawn); shown: the ids drawn.
  const fill = (options, shown) => {
    const focused = document.activeElement;
    const again = focused && list.contains(focused)
      ? [/** @type {HTMLElement} */ (focused.closest("li")).dataset.axis, /** @type {HTMLElement} */ (focused).dataset.act] : null;
    current = shown.filter((id) => options.has(id));
    const rest = [...options.keys()].filter((id) => !current.includes(id));
    list.replaceChildren(...current.map((id, i) => row(id, options.get(id), true, i)),
      ...rest.map((id) => row(id, options.get(id), false, -1)));
    if (again) {
      const li = /** @type {HTMLElement[]} */ ([...list.children]).find((x) => x.dataset.axis === again[0]);
      const target = li && (li.querySelector(`[data-act="${again[1]}"]:not(:disabled)`) || li.querySelector("input"));
      if (target) /** @type {HTMLElement} */ (target).focus();
    }
  };
  return {el: box, fill};
};
