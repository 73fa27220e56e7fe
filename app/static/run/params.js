// The run page's Params section: the run's params from the API (the launch config flattened,
// and the hparams its job reported through TensorBoard, as `hparams.<name>`), asked for
// again on the run's stream events while it is live. Keys and values are hostile: set as text.
import {call} from "../lib/api.js";
import {api} from "../lib/urls.js";

const EVERY_MS = 5000;

export const mountParams = (stream) => {
  const section = document.getElementById("params");
  if (!section) return;
  const runId = section.dataset.runId;
  const body = /** @type {HTMLElement} */ (section.querySelector("tbody"));
  const empty = /** @type {HTMLElement} */ (document.getElementById("params-empty"));
  const REPORTED = "hparams.";
  const show = (value) => typeof value === "string" ? value : JSON.stringify(value);

  const render = (params) => {
    const keys = Object.keys(params).sort((a, b) =>
      (/** @type {any} */ (a.startsWith(REPORTED)) - /** @type {any} */ (b.startsWith(REPORTED))) || (a < b ? -1 : a > b ? 1 : 0));
    body.replaceChildren(...keys.map((key) => {
      const tr = document.createElement("tr");
      tr.dataset.key = key;
      const cells = [key, show(params[key]), key.startsWith(REPORTED) ? "reported by the job" : "config"];
      for (const text of cells) {
        const td = document.createElement("td");
        td.textContent = text;
        tr.append(td);
      }
      tr.children[0].className = "param-key";
      tr.children[2].className = "muted";
      return tr;
    }));
    empty.hidden = keys.length > 0;
  };

  const load = async () => {
    const res = await call("GET", api.run(runId));
    if (res.ok && res.body && typeof res.body.params === "object") render(res.body.params);
  };
  load();
  stream.refreshOn(load, EVERY_MS);
};
