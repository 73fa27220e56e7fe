// The overlays grouped (overlay.js, when the page's grouping has a `by`: grouping.js): per
// group one mean curve with its band (min-max or mean +/- std), in the group's colour, the
// count in its name and in the legend. The arithmetic is lib/groups.js aggregate, over each
// run's curve as drawn (smoothed when smoothing is on) on the chart's x.
import {aggregate, groupRuns} from "./lib/groups.js";

const BAND_TEXT = {minmax: "min-max", std: "±1 std"};
const countText = (n) => `${n} run${n === 1 ? "" : "s"}`;

/**
 * The traces of one chart: for each group with a curve of this key, its band's lower edge, its
 * upper edge (fill "tonexty": the band) and its mean, in that order; each trace's `meta` says
 * {group, role: "lo" | "hi" | "mean", runs}. `curve(run)` gives a run's {x, y} or null.
 */
export const groupTraces = (runs, group, curve) => {
  const traces = [];
  for (const g of groupRuns(runs, group.by)) {
    const curves = g.runs.map(curve).filter(Boolean);
    if (!curves.length) continue;
    const agg = aggregate(curves, group.band);
    if (!agg.x.length) continue;
    const meta = (role) => ({group: g.key, role, runs: curves.length});
    const name = `${g.label} (${countText(curves.length)})`;
    const mode = agg.x.length < 60 ? "lines+markers" : "lines";
    const edge = {color: g.color, width: 1};
    traces.push(
      {x: agg.x, y: agg.lo, name: `${name} ${BAND_TEXT[group.band]} low`, line: edge, opacity: 0.35, mode: "lines", meta: meta("lo")},
      {x: agg.x, y: agg.hi, name: `${name} ${BAND_TEXT[group.band]} high`, line: edge, opacity: 0.35, mode: "lines",
       fill: "tonexty", meta: meta("hi")},
      {x: agg.x, y: agg.mean, name: `${name} mean`, line: {color: g.color, width: 2}, mode, meta: meta("mean")},
    );
  }
  return traces;
};

/** The legend's items, one per group: swatch, label, count, band kind, and its runs' links
 * (`runLink(run)`) under a <details>, open for the group keys in `open`. */
export const groupLegend = (runs, group, runLink, open = new Set()) => groupRuns(runs, group.by).map((g) => {
  const li = document.createElement("li");
  li.dataset.group = g.key;
  li.dataset.count = String(g.runs.length);
  const swatch = document.createElement("span");
  swatch.className = "swatch";
  swatch.style.background = g.color;
  const label = document.createElement("strong");
  label.textContent = g.label;
  const count = document.createElement("span");
  count.className = "muted group-count";
  count.textContent = `${countText(g.runs.length)}, mean and ${BAND_TEXT[group.band]}`;
  const details = document.createElement("details");
  details.open = open.has(g.key);
  const summary = document.createElement("summary");
  summary.textContent = "runs";
  details.append(summary, ...g.runs.map(runLink));
  li.append(swatch, label, " ", count, " ", details);
  return li;
});
