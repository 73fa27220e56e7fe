// The runs table's column picker (experiment_runs.js): a row per metric key, a box per
// aggregate (last, min, max). Keys come from the loaded runs' summaries and the keys the page
// says its runs logged (the experiment page holds a few keys' summaries only:
// lib/first_page.js), and a chosen column stays listed even when no loaded run has its key.
import {el, splitSummary, summaryKeys} from "./runs_columns.js";

/**
 * Fill `picker` for `runs` ({summary}) and `extraKeys` (more key names) with `chosen` (the
 * summary columns, "key.agg") ticked; onToggle(column, checked) on a click.
 */
export const fillPicker = (picker, runs, extraKeys, chosen, onToggle) => {
  const keys = summaryKeys([...runs, {summary: Object.fromEntries(extraKeys.map((k) => [k, {}]))}]);
  const ticked = new Set(chosen || []);
  for (const col of ticked) {
    const [key] = splitSummary(col);
    if (!keys.includes(key)) keys.push(key);
  }
  picker.replaceChildren();
  if (!keys.length) { picker.append(el("p", "No metrics logged yet.", "hint")); return; }
  const grid = el("table", undefined, "column-picker");
  for (const key of keys) {
    const tr = el("tr");
    tr.append(el("th", key));
    for (const agg of ["last", "min", "max"]) {
      const td = el("td");
      const label = el("label");
      const box = el("input");
      box.type = "checkbox";
      box.dataset.summary = `${key}.${agg}`;
      box.checked = ticked.has(`${key}.${agg}`);
      box.addEventListener("change", () => onToggle(box.dataset.summary, box.checked));
      label.append(box, ` ${agg}`);
      td.append(label);
      tr.append(td);
    }
    grid.append(tr);
  }
  picker.append(grid);
};
