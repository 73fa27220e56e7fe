// Shared by every page: JSON calls to the API with the session cookie and the CSRF header.
"use strict";
window.ty = window.ty || {};

ty.csrf = () => document.querySelector('meta[name="csrf-token"]')?.content || "";

// Calls the API; resolves to {ok, status, body}. Never throws for HTTP errors: callers show
// the body's message (FastAPI's {"detail": ...}) where the user can act on it.
ty.api = async (method, path, body) => {
  const headers = {"X-CSRF-Token": ty.csrf()};
  if (body !== undefined) headers["Content-Type"] = "application/json";
  let response;
  try {
    response = await fetch(path, {method, headers, credentials: "same-origin",
                                  body: body === undefined ? undefined : JSON.stringify(body)});
  } catch (err) {
    return {ok: false, status: 0, body: {detail: "The server cannot be reached: " + err}};
  }
  const text = await response.text();
  let parsed = text;
  try { parsed = text ? JSON.parse(text) : null; } catch (_) { /* plain text */ }
  return {ok: response.ok, status: response.status, body: parsed};
};

// A readable message from an API error body.
ty.errorText = (body) => {
  if (!body) return "Something went wrong.";
  if (typeof body.detail === "string") return body.detail;
  if (Array.isArray(body.detail)) return body.detail.map((e) => `${e.loc.join(".")}: ${e.msg}`).join("; ");
  return typeof body === "string" ? body : JSON.stringify(body);
};

// A form's errors next to its fields. FastAPI's 422 body is [{loc: ["body", ...], msg}];
// `names(loc)` (loc without "body") lists the input names to try for one error, the first
// found wins and the first name labels an error no input takes, which goes to `formError`.
ty.formErrors = (form, formError, names) => {
  const showFormError = (text) => {
    formError.hidden = false;
    formError.textContent = formError.textContent ? `${formError.textContent} ${text}` : text;
  };
  const clear = () => {
    form.querySelectorAll(".field-error").forEach((el) => el.remove());
    form.querySelectorAll("[aria-invalid]").forEach((el) => el.removeAttribute("aria-invalid"));
    formError.hidden = true;
    formError.textContent = "";
  };
  const show = (body) => {
    if (!body || !Array.isArray(body.detail)) {
      showFormError(ty.errorText(body));
      return;
    }
    let first = null;
    for (const err of body.detail) {
      const candidates = names(err.loc.slice(err.loc[0] === "body" ? 1 : 0).map(String));
      const field = candidates.find((name) => name && form.querySelector(`[name="${CSS.escape(name)}"]`));
      if (!field) {
        showFormError(`${candidates[0] || "form"}: ${err.msg}.`);
        continue;
      }
      const input = form.querySelector(`[name="${CSS.escape(field)}"]`);
      const note = document.createElement("span");
      note.className = "field-error";
      note.dataset.field = candidates[0];
      note.id = "error-" + note.dataset.field.replace(/\W/g, "-");
      note.textContent = err.msg;
      input.setAttribute("aria-invalid", "true");
      input.setAttribute("aria-errormessage", note.id);
      input.insertAdjacentElement("afterend", note);
      first = first || input;
    }
    if (first) first.focus();
  };
  return {clear, show, showFormError};
};

(() => {
  // One format for every point in time on every page: the reader's locale and time zone, with
  // the time in UTC in the element's title. The server renders times as <time datetime="...">
  // elements in UTC (app/pages.py `when`, readable without scripts), rewritten below; times made
  // here are ty.timeEl's.
  const TIME_FORMAT = {dateStyle: "medium", timeStyle: "short"};
  ty.parseTime = (iso) => {
    if (!iso) return null;
    // SQLite hands back naive UTC datetimes: read them as UTC, not local time.
    const d = new Date(/[zZ]|[+-]\d\d:?\d\d$/.test(iso) ? iso : iso + "Z");
    return isNaN(d.getTime()) ? null : d;
  };
  ty.fmtTime = (iso) => {
    const d = ty.parseTime(iso);
    return d ? d.toLocaleString(undefined, TIME_FORMAT) : "–";
  };
  ty.utcText = (iso) => {
    const d = ty.parseTime(iso);
    return d ? `${d.toISOString().slice(0, 19).replace("T", " ")} UTC` : "";
  };
  ty.showTime = (el, iso) => {
    const d = ty.parseTime(iso);
    el.textContent = ty.fmtTime(iso);
    if (d) { el.setAttribute("datetime", d.toISOString()); el.title = ty.utcText(iso); }
    else { el.removeAttribute("datetime"); el.removeAttribute("title"); }
    return el;
  };
  ty.timeEl = (iso) => ty.showTime(document.createElement("time"), iso);
  for (const el of document.querySelectorAll("time[datetime]")) ty.showTime(el, el.getAttribute("datetime"));

  // Metric keys are grouped by what comes before their first "/" (`train/loss` -> train,
  // `Loss/train` -> Loss); a key without one is ungrouped (""). Groups show in name order, then
  // the ungrouped keys, then the system series (sys/, "System"). The run page and the compare
  // page both.
  ty.keyGroup = (key) => {
    const cut = key.indexOf("/");
    return cut > 0 ? key.slice(0, cut) : "";
  };
  // sys/: the run's system series, recorded by the worker (worker/system_metrics.py).
  ty.groupTitle = (group) => (group === "" ? "other" : group === "sys" ? "System" : `${group}/`);
  // A system series' step is whole seconds since the run started, not a training step.
  ty.isSystemKey = (key) => key.startsWith("sys/");
  ty.stepTitle = (key) => (ty.isSystemKey(key) ? "seconds since start" : "step");
  // A group's box: its title and the grid its charts go in (run page, compare, overlays).
  ty.chartGroup = (group) => {
    const box = document.createElement("div");
    box.className = "chart-group";
    box.dataset.group = group;
    const title = document.createElement("h3");
    title.textContent = ty.groupTitle(group);
    const grid = document.createElement("div");
    grid.className = "chart-grid";
    box.append(title, grid);
    return {box, grid};
  };
  // The training charts first (named groups, then "other"), the System group below them.
  const groupRank = (group) => (group === "sys" ? 2 : group === "" ? 1 : 0);
  const byText = (a, b) => (a < b ? -1 : a > b ? 1 : 0);
  ty.compareGroups = (a, b) => groupRank(a) - groupRank(b)
    || byText(a.toLowerCase(), b.toLowerCase()) || byText(a, b);
  ty.compareKeys = (a, b) => ty.compareGroups(ty.keyGroup(a), ty.keyGroup(b)) || byText(a, b);
})();

ty.fmtDuration = (seconds) => {
  if (seconds == null || isNaN(seconds)) return "–";
  const s = Math.round(seconds);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${s % 60}s`;
  return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
};

// A progress bar (tqdm, rich) rewrites its line with "\r": keep only what the line shows last,
// after its rank prefix (app/runs/logs.py does the same for the log API). A line still being
// written keeps a trailing "\r", so the text that comes next replaces it.
ty.collapseCarriageReturns = (text) => {
  if (!text.includes("\r")) return text;
  return text.split("\n").map((line) => {
    if (!line.includes("\r")) return line;
    const prefix = (line.match(/^\[rank\d+\]: /) || [""])[0];
    const body = line.slice(prefix.length);
    const shown = body.split("\r").filter((part) => part !== "");
    return prefix + (shown.length ? shown[shown.length - 1] : "") + (body.endsWith("\r") ? "\r" : "");
  }).join("\n");
};

// One colour per run on every page (the experiment's runs table, its overlaid curves, the
// compare page): a fixed palette indexed by the run id, so a run keeps its colour whichever
// runs are shown beside it.
ty.RUN_PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
  "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#ad494a", "#637939", "#7b4173", "#3182bd",
  "#e6550d"];
ty.runColor = (runId) => {
  const n = Math.abs(Math.trunc(Number(runId))) || 0;
  return ty.RUN_PALETTE[n % ty.RUN_PALETTE.length];
};

// A param or summary value as a short text: numbers to 4 significant digits, anything else as
// its JSON, cut at 24 characters.
ty.fmtParam = (v) => {
  if (typeof v === "number") return Number.isInteger(v) ? String(v) : String(Number(v.toPrecision(4)));
  const text = typeof v === "string" ? v : JSON.stringify(v);
  return text.length > 24 ? text.slice(0, 23) + "…" : text;
};

// The params whose values are not all the same across `runs` (a run without one counts as
// differing), in key order: the runs table's columns, the overlays' legends, the parallel
// coordinates' axes.
ty.differingParams = (runs) => {
  const keys = new Set();
  for (const r of runs) for (const k of Object.keys(r.params || {})) keys.add(k);
  if (runs.length < 2) return [];
  return [...keys].sort().filter((k) => {
    const first = JSON.stringify((runs[0].params || {})[k]);
    return runs.some((r) => JSON.stringify((r.params || {})[k]) !== first);
  });
};

// Each run's label, by id: "run 12 · lr=0.01 bs=64" (a named run: "run 12 warmup · ..."), with
// at most 4 of the params that differ; "params.lr" shows as "lr" unless two differing params
// end the same.
ty.runLabels = (runs) => {
  const diff = ty.differingParams(runs).slice(0, 4);
  const last = (k) => k.slice(k.lastIndexOf(".") + 1);
  const count = new Map();
  for (const k of diff) count.set(last(k), (count.get(last(k)) || 0) + 1);
  const name = (k) => (count.get(last(k)) > 1 ? k : last(k));
  return new Map(runs.map((r) => {
    const head = r.name ? `run ${r.id} ${r.name}` : `run ${r.id}`;
    const parts = diff.filter((k) => k in (r.params || {})).map((k) => `${name(k)}=${ty.fmtParam(r.params[k])}`);
    return [r.id, parts.length ? `${head} · ${parts.join(" ")}` : head];
  }));
};

// --- what a page says about its link to the server -------------------------------------------
// A page never claims what the server has not confirmed: "live" only while the server answers
// and has confirmed what is shown; when it stops answering the page says so, keeps what it last
// heard marked as stale (with when that was), and asks again until the server is back. The run
// page (its event stream), the experiment page (its polling) and the GPU panel all use these.
ty.LOST_TEXT = "connection lost — reconnecting…";

// Whether an API answer (ty.api) means the server did not answer for itself: unreachable (ty.api
// gives status 0 when fetch threw) or failing behind a proxy (5xx). A 4xx is the server talking.
ty.serverDown = (r) => r.status === 0 || r.status >= 500;

ty.clockText = (date) => date.toLocaleTimeString(undefined, {hour: "2-digit", minute: "2-digit", second: "2-digit"});

// "connection lost — reconnecting… (shown as of 09:01:02)".
ty.lostText = (since) => (since ? `${ty.LOST_TEXT} (shown as of ${ty.clockText(since)})` : ty.LOST_TEXT);

// Marks each element as not confirmed by the server since `since` (a Date), or clears the mark
// (`since` null): class and data-stale for styling and tests, a title that says since when (the
// element's own title is kept aside and put back).
ty.markStale = (elements, since) => {
  for (const el of elements) {
    if (!el) continue;
    const was = el.dataset.stale === "true";
    el.classList.toggle("stale", Boolean(since));
    if (since) {
      if (!was) el.dataset.titleBefore = el.getAttribute("title") || "";
      el.dataset.stale = "true";
      el.title = `not confirmed by the server since ${ty.clockText(since)}: the connection is lost`;
    } else if (was) {
      delete el.dataset.stale;
      if (el.dataset.titleBefore) el.title = el.dataset.titleBefore; else el.removeAttribute("title");
      delete el.dataset.titleBefore;
    }
  }
};
