// The compare page: the run picker's search (compare_picker.js), apply the picked runs,
// overlay each metric's curves (app/static/overlay.js), the seed's config rows on request.
import {picker as searchPicker} from "./compare_picker.js";
import {overlay} from "./overlay.js";
import {isSeedParam} from "./lib/format.js";
import {SEED_SHOWN} from "./lib/events.js";
import {seedShown} from "./lib/seed.js";
import {pages} from "./lib/urls.js";
(() => {
  const picker = document.getElementById("compare-picker");
  if (picker) {
    searchPicker(picker);
    // ?runs=1,2 rather than ?run=1&run=2: shorter, and the form works without JS too.
    picker.addEventListener("submit", (event) => {
      event.preventDefault();
      const ids = [.../** @type {NodeListOf<HTMLInputElement>} */ (picker.querySelectorAll('input[name="run"]:checked'))].map((el) => el.value);
      window.location.assign(pages.compare(ids));
    });
  }
  // The config differences: the seed's rows (it differs by design) only under "Show seed".
  const seedRows = [.../** @type {NodeListOf<HTMLTableRowElement>} */ (document.querySelectorAll("#config-diff tbody tr[data-key]"))]
    .filter((tr) => isSeedParam(tr.dataset.key));
  const showSeedRows = () => {
    for (const tr of seedRows) tr.hidden = !seedShown();
    const note = document.getElementById("config-diff-seed-note");
    if (note) note.hidden = !seedRows.length || seedShown();
  };
  showSeedRows();
  document.addEventListener(SEED_SHOWN, showSeedRows);
  const charts = document.getElementById("compare-charts");
  const data = document.getElementById("compare-runs-data");
  if (!charts || !data) return;
  overlay.mount(charts, JSON.parse(data.textContent), {
    controls: "compare",
    legend: document.getElementById("compare-legend"),
    status: document.getElementById("compare-status"),
  });
})();
