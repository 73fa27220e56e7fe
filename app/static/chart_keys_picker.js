// The "Charts" picker of the experiment page's curves: a checkbox per metric key offered, plus
// "All" and "None"; its state is lib/chart_keys.js's (null: every key). The page holds its
// first keys only (app/experiments/views.py PAGE_KEYS): the search box finds any other of the
// experiment's keys as the reader types (lib/key_search.js, GET /api/experiments/{id}/keys:
// issue 43), and ticking one found adds its chart. Keys reach the page as textContent and
// data attributes, never as HTML (a run names its own keys).
import {isShown, pickerSummary, toggled} from "./lib/chart_keys.js";
import {typeahead} from "./lib/key_search.js";

// `root`: the <details> (a <summary>, a .chart-keys-list, buttons [data-keys=all|none], and
// optionally a .chart-keys-search input with a .chart-keys-found list); `onChange(shown)`
// after the reader changes it. `opts.find(q)` -> {keys, more, error?} searches the keys,
// `opts.add(key)` charts a key found that is not offered yet. Returns {offer(keys),
// show(shown)}: the keys to list, and a state set from outside (a saved view), neither
// calling onChange.
/**
 * @param {Element} root
 * @param {(shown: string[] | null) => void} onChange
 * @param {{find?: (q: string) => Promise<{keys: string[], more: boolean, error?: string}>,
 *          add?: (key: string) => void}} [opts]
 */
export const keysPicker = (root, onChange, opts = {}) => {
  /** @type {string[]} */
  let all = [];
  /** @type {string[] | null} */
  let shown = null;
  const summary = /** @type {HTMLElement} */ (root.querySelector("summary"));
  const list = /** @type {HTMLElement} */ (root.querySelector(".chart-keys-list"));
  const boxes = () => /** @type {HTMLInputElement[]} */ ([...root.querySelectorAll("input[type=checkbox][data-key]")]);
  const sync = () => {
    summary.textContent = pickerSummary(shown, all);
    for (const box of boxes()) box.checked = all.includes(box.dataset.key || "") && isShown(shown, box.dataset.key);
  };
  const change = (next) => { shown = next; sync(); onChange(shown); };
  const tick = (key, on) => {
    if (on && !all.includes(key)) {  // found by the search: charted from now on
      if (shown !== null) change([...shown, key]);
      if (opts.add) opts.add(key);
      return;
    }
    change(toggled(shown, all, key, on));
  };
  const item = (key) => {
    const label = document.createElement("label");
    const box = document.createElement("input");
    box.type = "checkbox";
    box.dataset.key = key;
    box.addEventListener("change", () => tick(key, box.checked));
    label.append(box, document.createTextNode(` ${key}`));
    return label;
  };
  for (const button of root.querySelectorAll("button[data-keys]")) {
    button.addEventListener("click", () => change(/** @type {HTMLElement} */ (button).dataset.keys === "all" ? null : []));
  }
  const input = /** @type {HTMLInputElement | null} */ (root.querySelector(".chart-keys-search"));
  const found = /** @type {HTMLElement | null} */ (root.querySelector(".chart-keys-found"));
  if (input && found && opts.find) {
    const find = opts.find;
    const search = typeahead((q) => (q ? find(q) : Promise.resolve({keys: [], more: false})), (q, answer) => {
      (/** @type {HTMLElement} */ (root)).dataset.searched = q;  // the answer shown is for q
      if (!q) { found.replaceChildren(); return; }
      const note = document.createElement("p");
      note.className = "hint";
      note.textContent = answer.error ? `Not searched: ${answer.error}`
        : `${answer.keys.length ? answer.keys.length : "No"} key${answer.keys.length === 1 ? "" : "s"} found`
          + (answer.more ? ", more match: type more of the name" : "");
      found.replaceChildren(note, ...answer.keys.map(item));
      sync();
    });
    input.addEventListener("input", () => search(input.value.trim()));
  }
  return {
    offer: (keys) => {
      if (keys.length === all.length && keys.every((k, i) => k === all[i])) return;
      all = [...keys];
      list.replaceChildren(...all.map(item));
      sync();
    },
    show: (next) => { shown = next; sync(); },
  };
};
