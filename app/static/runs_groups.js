// The runs table grouped (experiment_runs.js, when the page's grouping has a `by`:
// grouping.js): one row per group (its value, its count, and each shown summary column's mean
// over the group's runs with the band the charts draw: min-max or +/- std), followed by its
// runs' rows, shown once the group is expanded. Groups in value order and colours as the
// charts' (lib/groups.js groupRuns). Every value is set as text.
import {bandOf, groupRuns, stats} from "./lib/groups.js";
import {fmtValue} from "./lib/format.js";
import {el} from "./runs_columns.js";

const countText = (n) => `${n} run${n === 1 ? "" : "s"}`;

// A summary column's cell for a group: the mean, and the band under it.
const summaryCell = (runs, col, band) => {
  const cut = col.summary.lastIndexOf(".");
  const key = col.summary.slice(0, cut), agg = col.summary.slice(cut + 1);
  const s = stats(runs.map((r) => ((r.summary || {})[key] || {})[agg]));
  const td = el("td", undefined, "num");
  if (!s) { td.textContent = "–"; return td; }
  td.append(el("span", fmtValue(s.mean), "group-mean"));
  if (s.n > 1) {
    const [lo, hi] = bandOf(s, band);
    const text = band === "std" ? `± ${fmtValue(s.std)}` : `${fmtValue(lo)} – ${fmtValue(hi)}`;
    td.append(el("span", text, "group-band muted"));
    td.title = `mean of ${s.n}; min ${fmtValue(s.min)}, max ${fmtValue(s.max)}, std ${fmtValue(s.std)}`;
  }
  return td;
};

/**
 * The table body's rows for `runs` grouped by `group` ({by, band}): `cols` the table's columns,
 * `runRow(run)` a run's row, `expanded` the keys of the groups shown open, `toggle(key)` called
 * when a group's button is pressed.
 */
export const groupedRows = (runs, group, cols, runRow, expanded, toggle) => {
  const rows = [];
  for (const g of groupRuns(runs, group.by)) {
    const open = expanded.has(g.key);
    const tr = el("tr", undefined, "group-row");
    tr.dataset.group = g.key;
    tr.dataset.count = String(g.runs.length);
    tr.style.setProperty("--run-color", g.color);
    const button = el("button", open ? "▾" : "▸", "group-toggle");
    button.type = "button";
    button.setAttribute("aria-expanded", String(open));
    button.setAttribute("aria-label", `${open ? "Hide" : "Show"} the ${countText(g.runs.length)} of ${g.label}`);
    button.addEventListener("click", () => toggle(g.key));
    const first = el("td");
    first.append(button);
    tr.append(first);
    cols.forEach((col, i) => {
      if (col.summary) { tr.append(summaryCell(g.runs, col, group.band)); return; }
      const td = el("td");
      if (i === 0) {
        const swatch = el("span", undefined, "run-swatch");
        swatch.style.backgroundColor = g.color;
        swatch.setAttribute("aria-hidden", "true");
        td.append(swatch, el("strong", g.label, "group-label"), " ", el("span", countText(g.runs.length), "muted group-count"));
      }
      tr.append(td);
    });
    rows.push(tr);
    for (const run of g.runs) {
      const row = runRow(run);
      row.classList.add("group-member");
      row.dataset.group = g.key;
      row.hidden = !open;
      rows.push(row);
    }
  }
  return rows;
};
