// The experiment page's "best metric": its owner chooses the metric (and whether larger or
// smaller is better) that the experiments list's Best column judges it by, before the newest
// sweep's and the config's checkpoints.metric (app/experiments/best.py). PATCH
// /api/experiments/{id} {best}; a refusal (403, 422, network) is shown under the form. On
// success the page reloads: the line above the form says which metric now applies, the
// server's words (a cleared choice falls back to one the browser does not know). The keys
// offered as the owner types are searched (GET /api/experiments/{id}/keys: the page holds no
// list of every key, issue 43).
import {call, searchKeys} from "./lib/api.js";
import {showFailure} from "./lib/dom.js";
import {typeahead} from "./lib/key_search.js";
import {api} from "./lib/urls.js";

(() => {
  const form = document.getElementById("best-form");
  if (!form) return;
  const $ = (id) => /** @type {HTMLElement} */ (document.getElementById(id));
  const experimentId = $("best-section").dataset.experimentId;

  const save = async (best) => {
    showFailure($("best-error"), "", null);
    const r = await call("PATCH", api.experiment(experimentId), {best});
    if (!r.ok) { showFailure($("best-error"), "Not saved", r); return; }
    window.location.reload();
  };

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const metric = /** @type {HTMLInputElement} */ ($("best-metric")).value.trim();
    if (!metric) { showFailure($("best-error"), "Not saved", "name a metric key first"); return; }
    save({metric, mode: /** @type {HTMLSelectElement} */ ($("best-mode")).value});
  });
  $("best-clear").addEventListener("click", () => save(null));
  const metric = /** @type {HTMLInputElement} */ ($("best-metric"));
  const offer = typeahead((q) => searchKeys(/** @type {string} */ (experimentId), q, 20), (_q, found) => {
    $("best-metric-keys").replaceChildren(...found.keys.map((k) => { const o = document.createElement("option"); o.value = k; return o; }));
  });
  metric.addEventListener("input", () => offer(metric.value.trim()));
  form.dataset.ready = "true";  // the handlers are on: a press now is a PATCH, not a reload
})();
