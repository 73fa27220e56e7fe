// The new-experiment form: swap the recipe's param fields, build the JSON config, create the
// experiment, launch its first run, and show the server's validation errors next to fields.
import {call, errorText} from "./lib/api.js";
import {formErrors} from "./lib/dom.js";
import {api, pages} from "./lib/urls.js";
(() => {
  /**
   * The form's named fields (templates/experiment_new.html); code only with the code field.
   * @typedef {{name: HTMLInputElement, description: HTMLTextAreaElement, seed: HTMLInputElement,
   *            deterministic: HTMLInputElement, "resources.gpus": HTMLInputElement,
   *            "resources.nproc": HTMLInputElement, "resources.pool": HTMLSelectElement,
   *            max_restarts: HTMLInputElement,
   *            args: HTMLInputElement, params: HTMLTextAreaElement, code?: HTMLInputElement}} ExperimentFields
   */
  const form = /** @type {HTMLFormElement & {elements: ExperimentFields}} */ (document.getElementById("experiment-form"));
  if (!form) return;
  const recipeSelect = /** @type {HTMLSelectElement} */ (form.querySelector('select[name="recipe"]'));
  const formError = /** @type {HTMLElement} */ (form.querySelector(".form-error"));
  const button = /** @type {HTMLButtonElement} */ (document.getElementById("create-and-launch"));
  const status = /** @type {HTMLElement} */ (document.getElementById("form-status"));
  const SCRIPT = "__script__";  // the picker's entry for a workspace script

  // Only the chosen recipe's fields carry names (and are enabled): [name="params.lr"] is unique.
  const showRecipe = (name) => {
    /** @type {NodeListOf<HTMLFieldSetElement>} */ (form.querySelectorAll("fieldset.params")).forEach((fs) => {
      const active = fs.dataset.recipe === name;
      fs.hidden = !active;
      fs.disabled = !active;
      /** @type {NodeListOf<HTMLInputElement | HTMLSelectElement>} */ (fs.querySelectorAll("[data-param]")).forEach((el) => {
        if (active) el.name = "params." + el.dataset.param;
        else el.removeAttribute("name");
      });
    });
    /** @type {NodeListOf<HTMLElement>} */ (form.querySelectorAll(".recipe-description")).forEach((el) => {
      el.hidden = el.dataset.recipe !== name;
    });
  };
  // A new experiment is named after its recipe until the user types a name of their own.
  const nameInput = form.elements.name;
  nameInput.addEventListener("input", () => nameInput.removeAttribute("data-default"));
  recipeSelect.addEventListener("change", () => {
    clearErrors();
    showRecipe(recipeSelect.value);
    if (nameInput.hasAttribute("data-default")) {
      nameInput.value = recipeSelect.value === SCRIPT ? "script" : recipeSelect.value;
    }
  });

  // "" -> null (the server says what it needs); text that is not a number goes as typed.
  const number = (raw) => {
    if (raw.trim() === "") return null;
    const n = Number(raw);
    return Number.isFinite(n) ? n : raw;
  };
  const valueOf = (el) => {
    if (el.type === "checkbox") return el.checked;
    if (el.dataset.kind === "int" || el.dataset.kind === "float" || el.type === "number") {
      return number(el.value);
    }
    return el.value;
  };

  // Arguments as a shell would split them: spaces separate, quotes group, backslash escapes.
  const splitArgs = (text) => {
    const args = [];
    let current = null;
    let quote = null;
    for (let i = 0; i < text.length; i++) {
      const c = text[i];
      if (quote) {
        if (c === quote) quote = null;
        else if (c === "\\" && quote === '"' && i + 1 < text.length) current += text[++i];
        else current += c;
      } else if (c === "'" || c === '"') {
        quote = c;
        current = current ?? "";
      } else if (c === "\\" && i + 1 < text.length) {
        current = (current ?? "") + text[++i];
      } else if (/\s/.test(c)) {
        if (current !== null) args.push(current);
        current = null;
      } else {
        current = (current ?? "") + c;
      }
    }
    if (current !== null) args.push(current);
    return args;
  };
  // "lr=0.01" lines -> {lr: 0.01}; true/false are booleans, numbers numbers, the rest text.
  const parseParams = (text) => {
    const params = {};
    for (const line of text.split("\n")) {
      if (!line.trim()) continue;
      const at = line.indexOf("=");
      const key = (at < 0 ? line : line.slice(0, at)).trim();
      const raw = at < 0 ? "true" : line.slice(at + 1).trim();
      if (raw === "true" || raw === "false") params[key] = raw === "true";
      else if (raw !== "" && Number.isFinite(Number(raw))) params[key] = Number(raw);
      else params[key] = raw;
    }
    return params;
  };

  const buildBody = () => {
    const common = {
      seed: number(form.elements.seed.value),
      deterministic: form.elements.deterministic.checked,
      resources: {
        gpus: number(form.elements["resources.gpus"].value),
        nproc: number(form.elements["resources.nproc"].value),
        pool: form.elements["resources.pool"].value,
      },
      max_restarts: number(form.elements.max_restarts.value) ?? 0,
    };
    /** @type {Record<string, any>} */
    let config;
    if (recipeSelect.value === SCRIPT) {
      config = {
        // the text field, or the pick from an uploaded snapshot (code_field.js): whichever has the name
        script: /** @type {HTMLInputElement | HTMLSelectElement} */ (form.querySelector('[name="script"]')).value.trim(),
        args: splitArgs(form.elements.args.value),
        params: parseParams(form.elements.params.value),
        ...common,
      };
      // An uploaded snapshot (code_field.js): the script is relative to it.
      if (form.elements.code && form.elements.code.value) config.code = form.elements.code.value;
    } else {
      const params = {};
      /** @type {NodeListOf<HTMLInputElement | HTMLSelectElement>} */ (form.querySelectorAll('fieldset.params:not([disabled]) [data-param]')).forEach((el) => {
        params[el.dataset.param] = valueOf(el);
      });
      config = {recipe: recipeSelect.value, params, ...common};
    }
    return {
      name: form.elements.name.value.trim(),
      description: form.elements.description.value,
      config,
    };
  };

  // FastAPI's 422: [{loc: ["body", "config", "params", "lr"], msg}] -> next to [name="params.lr"].
  const errors = formErrors(form, formError, (loc) =>
    [(loc[0] === "config" || loc[0] === "overrides" ? loc.slice(1) : loc).join(".")]);
  function clearErrors() { errors.clear(); }
  const showFormError = errors.showFormError;
  const showErrors = errors.show;

  // A variant (?variant_of=RUN): the run's resolved config with the form's values on top, sent
  // as the overrides of a new run of the same experiment. The form shows every param, so its
  // params replace the run's; keys the form has no field for (checkpoints, code...) stay.
  const variantOf = form.dataset.variantOf;
  const launchVariant = async () => {
    const base = JSON.parse(form.dataset.baseConfig || "{}");
    const edited = buildBody().config;
    const overrides = {...base, ...edited,
                       resources: {...(base.resources || {}), ...edited.resources}};
    if (overrides.seed === null) delete overrides.seed;  // empty: a fresh random seed
    status.textContent = "Launching the variant…";
    const r = await call("POST", api.experimentRuns(form.dataset.experimentId), {overrides});
    if (!r.ok) {
      if (r.status === 422) showErrors(r.body);
      else showFormError(`Could not launch the variant (${r.status}): ${errorText(r.body)}`);
      status.textContent = "";
      return;
    }
    status.textContent = "Opening the run…";
    window.location.assign(pages.run(r.body.id));
  };

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    clearErrors();
    if (variantOf) {
      button.disabled = true;
      try { await launchVariant(); } finally { button.disabled = false; }
      return;
    }
    button.disabled = true;
    status.textContent = "Creating the experiment and its first run…";
    try {
      // One request: the experiment commits with its first run or not at all (issue 39).
      const created = await call("POST", api.experiments(), {...buildBody(), run: {overrides: {}}});
      if (!created.ok) {
        if (created.status === 422) showErrors(created.body);
        else showFormError(`Could not create the experiment (${created.status}): ${errorText(created.body)}`);
        status.textContent = "";
        return;
      }
      status.textContent = "Opening the run…";
      window.location.assign(pages.run(created.body.run.id));
    } finally {
      button.disabled = false;
    }
  });

  showRecipe(recipeSelect.value);
})();
