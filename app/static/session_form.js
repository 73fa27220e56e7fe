// "New session" (the GPU page): POST /api/sessions with the GPUs and hours asked, then the new
// session's run page, which links to its JupyterLab once it runs.
import {call} from "./lib/api.js";
import {showFailure} from "./lib/dom.js";
import {api, pages} from "./lib/urls.js";

(() => {
  const form = /** @type {HTMLFormElement | null} */ (document.getElementById("new-session"));
  if (!form) return;
  const error = /** @type {HTMLElement} */ (document.getElementById("new-session-error"));
  const value = (id) => Number(/** @type {HTMLInputElement} */ (document.getElementById(id)).value);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    showFailure(error);
    const result = await call("POST", api.sessions(), {gpus: value("session-gpus"), hours: value("session-hours")});
    if (!result.ok) {
      showFailure(error, "Not started", result);
      return;
    }
    window.location.assign(pages.run(result.body.run.id));
  });
})();
