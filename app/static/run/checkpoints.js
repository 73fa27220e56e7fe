// The run page's checkpoints: the table (each downloadable, and a "Resume" for a user who may
// write), asked for again on the stream's events (soon after an "epoch" point: a recipe saves
// its checkpoint just after logging it), and the resume form.
import {call, errorText} from "../lib/api.js";
import {$, showFailure, timeEl} from "../lib/dom.js";
import {fmtBytes} from "../lib/format.js";
import {api, pages} from "../lib/urls.js";

const EVERY_MS = 10000;
const AFTER_EPOCH_MS = 500;  // the checkpoint lands just after "epoch"

export const mountCheckpoints = (root, runId, stream) => {
  const mayWrite = root.dataset.mayWrite === "true";

  const load = async () => {
    const r = await call("GET", api.runCheckpoints(runId));
    const err = $("checkpoints-error");
    if (!r.ok) { err.textContent = `Could not list checkpoints: ${errorText(r.body)}`; err.hidden = false; return; }
    err.hidden = true;
    const body = /** @type {HTMLElement} */ ($("checkpoints").querySelector("tbody"));
    // The server's list is the whole truth: retention drops checkpoints as the run goes
    // (and at its end), so a row the answer no longer has goes too.
    const listed = new Set(r.body.map((c) => c.name));
    for (const tr of /** @type {HTMLElement[]} */ ([...body.children])) if (!listed.has(tr.dataset.checkpoint)) tr.remove();
    const have = new Set(/** @type {HTMLElement[]} */ ([...body.children]).map((tr) => tr.dataset.checkpoint));
    for (const c of r.body) {
      if (have.has(c.name)) continue;
      const tr = document.createElement("tr");
      tr.dataset.checkpoint = c.name;
      const cells = [c.name, c.epoch, c.step, fmtBytes(c.size_bytes), timeEl(c.created_at)];
      cells.forEach((v, i) => {
        const td = document.createElement("td");
        if (v instanceof Node) td.append(v); else td.textContent = String(v);
        if (i >= 1 && i <= 3) td.className = "num";
        tr.appendChild(td);
      });
      const actions = document.createElement("td");
      const a = document.createElement("a");
      a.className = "download"; a.href = api.runCheckpoint(runId, c.name); a.textContent = "Download";
      a.setAttribute("download", c.name);
      const resume = document.createElement("button");
      resume.type = "button"; resume.className = "resume";
      resume.textContent = "Resume from this checkpoint";
      resume.addEventListener("click", () => openResume(c));
      if (mayWrite) actions.append(a, " ", resume);
      else actions.append(a);
      tr.appendChild(actions);
      body.appendChild(tr);
    }
    $("checkpoints-empty").hidden = body.children.length > 0;
    $("checkpoints").hidden = body.children.length === 0;
  };

  let soon = null;
  stream.on("metrics", (data) => {
    if (!("epoch" in (data.series || {}))) return;
    clearTimeout(soon);
    soon = setTimeout(load, AFTER_EPOCH_MS);
  });
  stream.refreshOn(load, EVERY_MS);

  // The resume form (button.resume opens it for that checkpoint): epochs and lr fields for a
  // recipe's params and a JSON box for any other override; only values that differ from this
  // run's config are sent. A checkpoint that reached the epochs (final.pt) gets more prefilled:
  // the server refuses to resume it without (422 on params.epochs).
  const resumeForm = $("resume-form");
  let resumeName = null;
  const openResume = (c) => {
    if (!resumeForm) return;
    resumeName = c.name;
    $("resume-checkpoint").textContent = `${c.name} (epoch ${c.epoch}, step ${c.step})`;
    const epochs = /** @type {HTMLInputElement} */ ($("resume-epochs"));
    const current = Number(epochs.dataset.current);
    epochs.value = /** @type {string} */ (epochs.dataset.current && c.epoch >= current ? String(c.epoch + current) : epochs.dataset.current);
    /** @type {HTMLInputElement} */ ($("resume-lr")).value = /** @type {string} */ ($("resume-lr").dataset.current);
    $("resume-error").hidden = true;
    resumeForm.hidden = false;
    epochs.focus();
  };
  const resumeOverrides = () => {
    const text = /** @type {HTMLTextAreaElement} */ ($("resume-overrides")).value.trim();
    const overrides = text ? JSON.parse(text) : {};
    if (!overrides || typeof overrides !== "object" || Array.isArray(overrides)) {
      throw new Error("the overrides must be a JSON object, e.g. {\"params\": {\"lr\": 0.01}}");
    }
    const params = {...(overrides.params || {})};
    for (const [id, key] of [["resume-epochs", "epochs"], ["resume-lr", "lr"]]) {
      const el = /** @type {HTMLInputElement} */ ($(id));
      if (el.value.trim() !== "" && el.value !== el.dataset.current) {
        params[key] = Number.isFinite(Number(el.value)) ? Number(el.value) : el.value;
      }
    }
    if (Object.keys(params).length) overrides.params = params;
    return overrides;
  };
  if (resumeForm) {
    $("resume-cancel").addEventListener("click", () => { resumeForm.hidden = true; });
    resumeForm.addEventListener("submit", async (event) => {
      event.preventDefault();
      const err = $("resume-error");
      err.hidden = true;
      let overrides;
      try { overrides = resumeOverrides(); } catch (e) {
        err.textContent = `Overrides: ${e.message}`; err.hidden = false; return;
      }
      /** @type {HTMLButtonElement} */ ($("resume-submit")).disabled = true;
      const r = await call("POST", api.runResume(runId), {checkpoint: resumeName, overrides});
      if (r.ok) { window.location.href = pages.run(r.body.id); return; }
      /** @type {HTMLButtonElement} */ ($("resume-submit")).disabled = false;
      showFailure(err, `Could not resume from ${resumeName}`, r);
    });
  }
  return {load};
};
