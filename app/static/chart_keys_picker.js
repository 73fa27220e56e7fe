// The "Charts" picker of the experiment page's curves: a checkbox per metric key offered, plus
// "All" and "None"; its state is lib/chart_keys.js's (null: every key). Keys reach the page as
// textContent and data attributes, never as HTML (a run names its own keys).
import {isShown, pickerSummary, toggled} from "./lib/chart_keys.js";

// `root`: the <details> (a <summary>, a .chart-keys-list, buttons [data-keys=all|none]);
// `onChange(shown)` after the reader changes it. Returns {offer(keys), show(shown)}: the keys
// to list, and a state set from outside (a saved view), neither calling onChange.
export const keysPicker = (root, onChange) => {
  let all = [];
  let shown = null;
  const summary = root.querySelector("summary");
  const list = root.querySelector(".chart-keys-list");
  const boxes = () => [...list.querySelectorAll("input[type=checkbox]")];
  const sync = () => {
    summary.textContent = pickerSummary(shown, all);
    for (const box of boxes()) box.checked = isShown(shown, box.dataset.key);
  };
  const change = (next) => { shown = next; sync(); onChange(shown); };
  const item = (key) => {
    const label = document.createElement("label");
    const box = document.createElement("input");
    box.type = "checkbox";
    box.dataset.key = key;
    box.addEventListener("change", () => change(toggled(shown, all, key, box.checked)));
    label.append(box, document.createTextNode(` ${key}`));
    return label;
  };
  for (const button of root.querySelectorAll("button[data-keys]")) {
    button.addEventListener("click", () => change(button.dataset.keys === "all" ? null : []));
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
