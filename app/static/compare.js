// The compare page: the run picker's search (compare_picker.js), apply the picked runs, and
// overlay each metric's curves (app/static/overlay.js).
import {picker as searchPicker} from "./compare_picker.js";
import {overlay} from "./overlay.js";
import {pages} from "./lib/urls.js";
(() => {
  const picker = document.getElementById("compare-picker");
  if (picker) {
    searchPicker(picker);
    // ?runs=1,2 rather than ?run=1&run=2: shorter, and the form works without JS too.
    picker.addEventListener("submit", (event) => {
      event.preventDefault();
      const ids = [...picker.querySelectorAll('input[name="run"]:checked')].map((el) => el.value);
      window.location.assign(pages.compare(ids));
    });
  }
  const charts = document.getElementById("compare-charts");
  const data = document.getElementById("compare-runs-data");
  if (!charts || !data) return;
  overlay.mount(charts, JSON.parse(data.textContent), {
    controls: "compare",
    legend: document.getElementById("compare-legend"),
    status: document.getElementById("compare-status"),
  });
})();
