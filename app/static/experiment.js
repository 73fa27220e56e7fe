// The experiment page: launch a run with JSON overrides, then open it.
import {call, errorText} from "./lib/api.js";
import {api, pages} from "./lib/urls.js";
(() => {
  const form = document.getElementById("launch-form");
  if (!form) return;
  const textarea = /** @type {HTMLTextAreaElement} */ (document.getElementById("overrides"));
  const formError = /** @type {HTMLElement} */ (form.querySelector(".form-error"));
  const button = /** @type {HTMLButtonElement} */ (document.getElementById("launch-run"));
  const status = /** @type {HTMLElement} */ (document.getElementById("launch-status"));

  const showError = (text) => {
    formError.textContent = text;
    formError.hidden = false;
  };

  // 422 locations come back as ["body", "overrides", "params", "lr"]: name the override.
  const describe = (body) => {
    if (!body || !Array.isArray(body.detail)) return errorText(body);
    return body.detail
      .map((e) => `${e.loc.filter((p) => p !== "body").join(".")}: ${e.msg}`)
      .join("; ");
  };

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    formError.hidden = true;
    formError.textContent = "";
    textarea.removeAttribute("aria-invalid");
    let overrides;
    try {
      overrides = JSON.parse(textarea.value.trim() || "{}");
    } catch (err) {
      showError(`The overrides are not valid JSON: ${err.message}`);
      textarea.setAttribute("aria-invalid", "true");
      textarea.focus();
      return;
    }
    if (overrides === null || typeof overrides !== "object" || Array.isArray(overrides)) {
      showError('The overrides must be a JSON object, e.g. {"params": {"lr": 0.01}}.');
      textarea.focus();
      return;
    }
    button.disabled = true;
    status.textContent = "Launching…";
    try {
      const r = await call("POST", api.experimentRuns(form.dataset.experimentId), {overrides});
      if (!r.ok) {
        showError(`The run was not launched: ${describe(r.body)}`);
        status.textContent = "";
        return;
      }
      status.textContent = "Opening the run…";
      window.location.assign(pages.run(r.body.id));
    } finally {
      button.disabled = false;
    }
  });
})();
