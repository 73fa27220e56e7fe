// The runs table's column picker (experiment_runs.js): a row per metric key, a box per
// aggregate (last, min, max). Keys come from the loaded runs' summaries and the keys the page
// says its runs logged (the experiment page holds its first keys' names only:
// lib/first_page.js), and a chosen column stays listed even when no loaded run has its key.
// On the experiment page a search box finds any other of its keys as the reader types
// (bindColumnSearch: GET /api/experiments/{id}/keys, issue 43).
import {typeahead} from "./lib/key_search.js";
import {el, splitSummary, summaryKeys} from "./runs_columns.js";

// A table of rows, one per key, its boxes ticked for the columns of `ticked` (a Set).
const grid = (keys, ticked, onToggle) => {
  const table = el("table", undefined, "column-picker");
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
    table.append(tr);
  }
  return table;
};

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
  picker.append(grid(keys, ticked, onToggle));
};

/**
 * The search of `box` (its input, and a .column-found list shown under it): the keys `find(q)`
 * gives ({keys, more, error?}) as rows like the picker's, ticked for `chosen()`'s columns;
 * box.dataset.searched says which text the rows shown answer.
 * @param {HTMLElement} box
 * @param {(q: string) => Promise<{keys: string[], more: boolean, error?: string}>} find
 * @param {() => string[] | null} chosen
 * @param {(column: string, on: boolean) => void} onToggle
 */
export const bindColumnSearch = (box, find, chosen, onToggle) => {
  const input = /** @type {HTMLInputElement} */ (box.querySelector("input"));
  const found = /** @type {HTMLElement} */ (box.querySelector(".column-found"));
  box.hidden = false;
  const search = typeahead((q) => (q ? find(q) : Promise.resolve({keys: [], more: false})), (q, answer) => {
    box.dataset.searched = q;
    if (!q) { found.replaceChildren(); return; }
    const n = answer.keys.length;
    const note = el("p", answer.error ? `Not searched: ${answer.error}`
      : `${n || "No"} key${n === 1 ? "" : "s"} found${answer.more ? ", more match: type more of the name" : ""}`, "hint");
    found.replaceChildren(note, ...(n ? [grid(answer.keys, new Set(chosen() || []), onToggle)] : []));
  });
  input.addEventListener("input", () => search(input.value.trim()));
};
