// "Show seed": whether the params varying by design (lib/format.js SEED_NAMES: the run's
// random seed) count as "differing" in the runs table's columns, the parallel coordinates'
// default axes and the overlays' legends. Hidden by default: five seeds of one setting are one
// setting, and a seed axis running 0-4e9 hides the params that matter. One choice for the
// whole browser (localStorage), kept in step on every checkbox marked data-seed-toggle; a
// change is announced as SEED_SHOWN (lib/events.js) on document, and each view redraws itself.
import {SEED_SHOWN, emit} from "./events.js";

const STORE = "ty.showSeed";

export const seedShown = () => {
  try { return localStorage.getItem(STORE) === "1"; } catch (_) { return false; }
};

const boxes = () => [.../** @type {NodeListOf<HTMLInputElement>} */ (document.querySelectorAll("input[data-seed-toggle]"))];

export const setSeedShown = (shown) => {
  try { localStorage.setItem(STORE, shown ? "1" : "0"); } catch (_) { /* storage unavailable */ }
  for (const box of boxes()) box.checked = shown;
  emit(document, SEED_SHOWN, {shown});
};

// Bind the page's checkboxes once (each module that shows params imports this one).
if (typeof document !== "undefined") {
  const bind = () => {
    for (const box of boxes()) {
      if (box.dataset.bound) continue;
      box.dataset.bound = "1";
      box.checked = seedShown();
      box.addEventListener("change", () => setSeedShown(box.checked));
    }
  };
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", bind);
  else bind();
}
