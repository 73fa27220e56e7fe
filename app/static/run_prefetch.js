// Loaded first on the run page: starts the history download while the browser is still
// parsing the chart library; run.js awaits window.tyRunPrefetch. A file of its own (not an
// inline script) because the Content-Security-Policy allows no inline script.
"use strict";
(() => {
  const runId = Number(document.currentScript.dataset.runId);
  window.tyRunPrefetch = fetch(`/api/runs/${runId}/metrics?max_points=4000&with_time=true`,
                               {credentials: "same-origin"});
})();
