// The run page's Environment section: the reproducibility record from the API, asked for
// again on the run's stream events until the job's half (versions, packages) has arrived.
import {call} from "../lib/api.js";
import {api} from "../lib/urls.js";

const EVERY_MS = 3000;

export const mountEnvironment = (stream) => {
  const section = document.getElementById("environment");
  if (!section) return;
  const runId = section.dataset.runId;
  const facts = /** @type {HTMLElement} */ (document.getElementById("environment-facts"));
  const empty = /** @type {HTMLElement} */ (document.getElementById("environment-empty"));

  const add = (label, value, id) => {
    if (value === undefined || value === null || value === "") return;
    const dt = document.createElement("dt");
    dt.textContent = label;
    const dd = document.createElement("dd");
    if (id) dd.id = id;
    dd.textContent = String(value);
    facts.append(dt, dd);
  };

  const render = (env) => {
    facts.replaceChildren();
    const det = env.determinism || {};
    add("Python", env.python, "env-python");
    add("PyTorch", env.torch, "env-torch");
    add("CUDA / cuDNN", `${env.cuda || "none"} / ${env.cudnn || "none"}`, "env-cuda");
    add("Host", env.hostname, "env-host");
    add("GPUs", (env.gpus || []).length
      ? env.gpus.map((g) => `${g.index}: ${g.name}`).join(", ")
      : `none visible (leased: ${(env.gpu_indices || []).join(",") || "none"})`, "env-gpus");
    add("Seed", env.seed, "env-seed");
    add("Deterministic", det.deterministic === undefined ? undefined
      : `${det.deterministic} (cudnn.benchmark ${det.cudnn_benchmark}, ` +
        `PYTHONHASHSEED ${det.pythonhashseed})`, "env-deterministic");
    add("Script", env.script, "env-script");
    add("Code snapshot", env.code, "env-code");
    if (env.git) {
      // A code snapshot's git state is the client's checkout, when it was packed.
      const where = env.git.source === "client"
        ? ` (your checkout${env.git.remote ? `, ${env.git.remote}` : ""})` : "";
      add("Git", `${env.git.commit.slice(0, 12)} on ${env.git.branch}` +
        (env.git.dirty ? " (uncommitted changes)" : " (clean)") + where, "env-git");
    } else if (env.code) {
      add("Git", "the code snapshot was not packed from a git checkout", "env-git");
    } else if (env.script) {
      add("Git", "the workspace is not a git checkout", "env-git");
    }
    facts.hidden = facts.childElementCount === 0;
    empty.hidden = !facts.hidden;
    const packages = /** @type {HTMLElement} */ (document.getElementById("environment-packages"));
    if (env.packages) {
      /** @type {HTMLElement} */ (packages.querySelector("summary")).textContent = `Packages (${env.packages.length})`;
      /** @type {HTMLElement} */ (packages.querySelector("pre")).textContent = env.packages.join("\n");
      packages.hidden = false;
    }
    const diff = /** @type {HTMLElement} */ (document.getElementById("environment-diff"));
    if (env.git && (env.git.diff || (env.git.untracked || []).length)) {
      const untracked = (env.git.untracked || []).map((f) => `?? ${f}`).join("\n");
      /** @type {HTMLElement} */ (diff.querySelector("pre")).textContent = [env.git.diff, untracked].filter(Boolean).join("\n");
      diff.hidden = false;
    }
  };

  let complete = false;
  const load = async () => {
    if (complete) return;
    const res = await call("GET", api.runEnvironment(runId));
    if (res.ok && res.body && Object.keys(res.body).length) render(res.body);
    complete = Boolean(res.ok && res.body && res.body.packages);
  };
  load();
  stream.refreshOn(load, EVERY_MS);
};
