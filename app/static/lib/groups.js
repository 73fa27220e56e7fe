// Grouping runs by a param or their tags, and the arithmetic the grouped views draw: one mean
// curve per group with a band (min-max or mean +/- std), and a summary value per group. Pure
// (no DOM): unit-tested under Node (tests/js/groups.test.js); the runs table
// (runs_groups.js) and the overlays (overlay_groups.js) both read it.
import {RUN_PALETTE, compareKeys, fmtParam} from "./format.js";

// `by` names what runs are grouped on: "param:<key>" (a flattened config key, as the runs list
// gives `params`: "params.lr", "seed") or "tags" (the run's tag set); null: no grouping.
export const TAGS = "tags";
export const paramBy = (key) => `param:${key}`;
export const BANDS = ["minmax", "std"];
export const DEFAULT_GROUP = Object.freeze(/** @type {{by: string | null, band: string}} */ ({by: null, band: "minmax"}));

// A grouping state as a saved view may hold it ({by, band}), made valid: anything unknown gives
// the default, so a view saved by an older page never breaks this one.
export const normalizeGroup = (g) => {
  const by = g && typeof g.by === "string" && (g.by === TAGS || g.by.startsWith("param:")) ? g.by : null;
  const band = g && BANDS.includes(g.band) ? g.band : DEFAULT_GROUP.band;
  return {by, band};
};

// The choices of `by` for these runs: every param key any run has (not only those that differ:
// five seeds of one lr are grouped by the lr they share), then the tags.
export const groupChoices = (runs) => {
  const keys = new Set();
  for (const r of runs) for (const k of Object.keys(r.params || {})) keys.add(k);
  return [...[...keys].sort(compareKeys).map((k) => ({by: paramBy(k), label: k})), {by: TAGS, label: "tags"}];
};

// A run's group under `by`: {key (a stable text: JSON of the value), label}.
export const groupOf = (run, by) => {
  if (by === TAGS) {
    const tags = [...(run.tags || [])].sort();
    return {key: JSON.stringify(tags), label: tags.length ? tags.join(", ") : "(no tags)", sortValue: tags.join("\u0000")};
  }
  const key = by.slice("param:".length);
  const params = run.params || {};
  if (!(key in params)) return {key: "undefined", label: `${key} unset`, sortValue: undefined};
  const v = params[key];
  return {key: JSON.stringify(v), label: `${key}=${fmtParam(v)}`, sortValue: v};
};

// Numbers ascending, then other values by their text, unset last.
const compareValues = (a, b) => {
  if (a === b) return 0;
  if (a === undefined) return 1;
  if (b === undefined) return -1;
  if (typeof a === "number" && typeof b === "number") return a - b;
  if (typeof a === "number") return -1;
  if (typeof b === "number") return 1;
  const x = JSON.stringify(a), y = JSON.stringify(b);
  return x < y ? -1 : x > y ? 1 : 0;
};

// `runs` in groups under `by`, in value order, each {key, label, runs (in the order given),
// color}: a group's colour is the palette's by its place in that order, so the table's rows and
// the charts' curves of one group match.
export const groupRuns = (runs, by) => {
  const groups = new Map();
  for (const run of runs) {
    const g = groupOf(run, by);
    if (!groups.has(g.key)) groups.set(g.key, {key: g.key, label: g.label, sortValue: g.sortValue, runs: []});
    groups.get(g.key).runs.push(run);
  }
  const list = [...groups.values()].sort((a, b) => compareValues(a.sortValue, b.sortValue));
  return list.map((g, i) => ({key: g.key, label: g.label, runs: g.runs, color: RUN_PALETTE[i % RUN_PALETTE.length]}));
};

const finite = (v) => typeof v === "number" && isFinite(v);

// mean, min, max, std (population) and n of the finite numbers in `values`; null when none.
export const stats = (values) => {
  let n = 0, sum = 0, min = Infinity, max = -Infinity;
  for (const v of values) {
    if (!finite(v)) continue;
    n += 1; sum += v;
    if (v < min) min = v;
    if (v > max) max = v;
  }
  if (!n) return null;
  const mean = sum / n;
  let sq = 0;
  for (const v of values) if (finite(v)) sq += (v - mean) ** 2;
  return {n, mean, min, max, std: Math.sqrt(sq / n)};
};

// The band around a mean: [min, max], or [mean - std, mean + std].
export const bandOf = (s, band) => (band === "std" ? [s.mean - s.std, s.mean + s.std] : [s.min, s.max]);

/**
 * Several runs' series of one key ([{x: [...], y: [...]}], x ascending, numbers) as one curve:
 * aligned on x (the chart's x: the step), the mean over the runs that have a finite value at
 * that x, and the band (`band`: "minmax" or "std"). A run that did not log a given x does not
 * count there (runs with different steps, or one that stopped early). Returns {x, mean, lo, hi,
 * n}: one entry per distinct x of any run, ascending.
 */
export const aggregate = (series, band = "minmax") => {
  const at = new Map();
  for (const s of series) {
    for (let i = 0; i < s.x.length; i++) {
      const x = s.x[i], y = s.y[i];
      if (!finite(x) || !finite(y)) continue;
      if (!at.has(x)) at.set(x, []);
      at.get(x).push(y);
    }
  }
  /** @type {{x: number[], mean: number[], lo: number[], hi: number[], n: number[]}} */
  const out = {x: [], mean: [], lo: [], hi: [], n: []};
  for (const x of [...at.keys()].sort((a, b) => a - b)) {
    // every x held a finite y (the loop above kept no other), so never null
    const s = /** @type {NonNullable<ReturnType<typeof stats>>} */ (stats(at.get(x)));
    const [lo, hi] = bandOf(s, band);
    out.x.push(x); out.mean.push(s.mean); out.lo.push(lo); out.hi.push(hi); out.n.push(s.n);
  }
  return out;
};
