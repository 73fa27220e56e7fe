// "New sweep" on the experiment page (templates/experiment.html, form#sweep-form): method,
// metric and goal, one row per param (config path, distribution, min/max or a values list),
// budget and early stopping; POSTs /api/sweeps and shows each 422 next to its field (the
// error's loc without "body": a param row's inputs are named parameters.<path>.min|max|values|
// distribution as the form is sent, its path input parameters.<path>), then opens the sweep.
import {call, errorText} from "./lib/api.js";
import {formErrors} from "./lib/dom.js";
import {api, pages} from "./lib/urls.js";
(() => {
  /**
   * The form's named fields (templates/experiment.html, form#sweep-form).
   * @typedef {{method: HTMLSelectElement, "metric.name": HTMLInputElement, "metric.goal": HTMLSelectElement,
   *            max_runs: HTMLInputElement, max_concurrent: HTMLInputElement, early_stop: HTMLSelectElement,
   *            seed: HTMLInputElement}} SweepFields
   */
  const form = /** @type {HTMLFormElement & {elements: SweepFields}} */ (document.getElementById("sweep-form"));
  if (!form) return;
  const rows = /** @type {HTMLElement} */ (form.querySelector("#sweep-params tbody"));
  const rowTemplate = /** @type {HTMLTemplateElement} */ (document.getElementById("sweep-param-row"));
  const formError = /** @type {HTMLElement} */ (form.querySelector(".form-error"));
  const status = /** @type {HTMLElement} */ (document.getElementById("sweep-form-status"));

  const showDist = (row) => {
    const dist = /** @type {HTMLSelectElement} */ (row.querySelector(".param-dist")).value;
    /** @type {HTMLInputElement} */ (row.querySelector(".param-values")).disabled = dist !== "values";
    /** @type {HTMLInputElement} */ (row.querySelector(".param-min")).disabled = dist === "values";
    /** @type {HTMLInputElement} */ (row.querySelector(".param-max")).disabled = dist === "values";
  };
  const addRow = (path, dist, min, max, values) => {
    const row = /** @type {HTMLTableRowElement} */ (/** @type {Element} */ (rowTemplate.content.firstElementChild).cloneNode(true));
    /** @type {HTMLInputElement} */ (row.querySelector(".param-path")).value = path || "";
    /** @type {HTMLSelectElement} */ (row.querySelector(".param-dist")).value = dist || "values";
    /** @type {HTMLInputElement} */ (row.querySelector(".param-min")).value = min ?? "";
    /** @type {HTMLInputElement} */ (row.querySelector(".param-max")).value = max ?? "";
    /** @type {HTMLInputElement} */ (row.querySelector(".param-values")).value = values || "";
    /** @type {HTMLElement} */ (row.querySelector(".param-dist")).addEventListener("change", () => showDist(row));
    /** @type {HTMLElement} */ (row.querySelector(".param-remove")).addEventListener("click", () => row.remove());
    showDist(row);
    rows.append(row);
    return row;
  };
  addRow("params.lr", "log_uniform", "0.0001", "0.1");
  /** @type {HTMLElement} */ (document.getElementById("sweep-add-param")).addEventListener("click", () => {
    /** @type {HTMLInputElement} */ (addRow().querySelector(".param-path")).focus();
  });

  // "0.1" -> 0.1, "true" -> true, anything else stays the text typed; blank -> null.
  const scalar = (raw) => {
    const text = raw.trim();
    if (text === "") return null;
    if (text === "true" || text === "false") return text === "true";
    const n = Number(text);
    return Number.isFinite(n) ? n : text;
  };

  const buildBody = () => {
    const parameters = {};
    for (const row of rows.querySelectorAll("tr.sweep-param")) {
      const path = /** @type {HTMLInputElement} */ (row.querySelector(".param-path")).value.trim();
      const dist = /** @type {HTMLSelectElement} */ (row.querySelector(".param-dist"));
      const [min, max, values] = [".param-min", ".param-max", ".param-values"].map((s) => /** @type {HTMLInputElement} */ (row.querySelector(s)));
      /** @type {HTMLInputElement} */ (row.querySelector(".param-path")).name = `parameters.${path}`;
      dist.name = `parameters.${path}.distribution`;
      min.name = `parameters.${path}.min`;
      max.name = `parameters.${path}.max`;
      values.name = `parameters.${path}.values`;
      if (dist.value === "values") {
        parameters[path] = {values: values.value.split(",").map(scalar).filter((v) => v !== null)};
      } else {
        parameters[path] = {distribution: dist.value, min: scalar(min.value), max: scalar(max.value)};
      }
    }
    const early = form.elements.early_stop.value;
    const seed = scalar(form.elements.seed.value);
    const body = {
      experiment_id: Number(form.dataset.experimentId),
      method: form.elements.method.value,
      metric: {name: form.elements["metric.name"].value.trim(), goal: form.elements["metric.goal"].value},
      parameters,
      max_runs: scalar(form.elements.max_runs.value),
      max_concurrent: scalar(form.elements.max_concurrent.value),
      early_stop: early ? {type: early} : null,
    };
    if (seed !== null) body.seed = seed;
    return body;
  };

  // FastAPI's 422: [{loc: ["body", "parameters", "params.lr", "min"], msg}] -> next to the
  // input named "parameters.params.lr.min" (else the nearest named parent: the row's path).
  const errors = formErrors(form, formError, (loc) =>
    loc.map((_, i) => loc.slice(0, loc.length - i).join(".")));
  const clearErrors = errors.clear;
  const showFormError = errors.showFormError;
  const showErrors = errors.show;

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    clearErrors();
    const button = /** @type {HTMLButtonElement} */ (document.getElementById("start-sweep"));
    button.disabled = true;
    status.textContent = "Starting…";
    const r = await call("POST", api.sweeps(), buildBody());
    button.disabled = false;
    if (r.ok) {
      status.textContent = `Sweep ${r.body.id} started.`;
      window.location.href = pages.sweep(r.body.id);
      return;
    }
    status.textContent = "";
    if (r.status === 422) showErrors(r.body);
    else showFormError(errorText(r.body));
  });
})();
