// The run page's name, tags and notes: shown as text, edited inline through PATCH /api/runs/{id}.
// Everything the server sends back is set with textContent (never HTML).
import {call} from "../lib/api.js";
import {$, showFailure} from "../lib/dom.js";
import {api} from "../lib/urls.js";

export const mountLabel = () => {
  const form = document.getElementById("run-label-form");
  if (!form) return;  // read only: another user's run
  const root = /** @type {HTMLElement} */ (document.getElementById("run-label"));
  const editButton = $("edit-run-label");
  const error = $("run-label-error");

  const show = (run) => {
    $("run-name").textContent = run.name || "";
    const tags = $("run-tags");
    tags.replaceChildren();
    for (const tag of run.tags) {
      const badge = document.createElement("span");
      badge.className = "badge";
      badge.textContent = tag;
      tags.append(badge, " ");
    }
    $("run-notes").textContent = run.notes || "";
    $("run-notes").hidden = !run.notes;
    /** @type {HTMLInputElement} */ ($("run-name-input")).value = run.name || "";
    /** @type {HTMLInputElement} */ ($("run-tags-input")).value = run.tags.join(" ");
    /** @type {HTMLTextAreaElement} */ ($("run-notes-input")).value = run.notes || "";
  };
  const close = () => { form.hidden = true; editButton.hidden = false; showFailure(error); };

  editButton.addEventListener("click", () => {
    form.hidden = false;
    editButton.hidden = true;
    $("run-name-input").focus();
  });
  $("run-label-cancel").addEventListener("click", close);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const body = {
      name: /** @type {HTMLInputElement} */ ($("run-name-input")).value,
      tags: /** @type {HTMLInputElement} */ ($("run-tags-input")).value.split(/[\s,]+/).filter(Boolean),
      notes: /** @type {HTMLTextAreaElement} */ ($("run-notes-input")).value,
    };
    const result = await call("PATCH", api.run(root.dataset.runId), body);
    if (!result.ok) {
      showFailure(error, "Not saved", result);
      return;
    }
    show(result.body);
    close();
  });
};
