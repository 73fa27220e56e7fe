// The sweep page (templates/sweep.html): progress over the trials, the best run so far, the
// trials in the runs table (experiment_runs.js; "stopped early" marked there), the parallel
// coordinates (parcoords.js) of the params against the metric, and one hand-written SVG
// scatter per param (metric vs param). Drawn from the page's JSON (GET /api/sweeps/{id}'s
// body), then from its event stream while the sweep runs (GET /api/sweeps/{id}/events: the
// same body, sent whenever it changes; the stream ends with the sweep). Every name and value from the sweep
// reaches the page through textContent / createElementNS, never as markup.
import {call} from "./lib/api.js";
import {markStale, showFailure} from "./lib/dom.js";
import {RUNS, RUNS_REFRESHED, emit, listen} from "./lib/events.js";
import {fmtParam, lostText} from "./lib/format.js";
import {pageStream} from "./lib/page_stream.js";
import {parcoords} from "./parcoords.js";
import {api, pages} from "./lib/urls.js";
import {finishedCount} from "./lib/status.js";
(() => {
  const root = document.getElementById("sweep");
  if (!root) return;
  const SVG = "http://www.w3.org/2000/svg";
  const id = root.dataset.sweepId;
  let chart = null;

  const el = (tag, text, cls) => {
    const node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = String(text);
    if (cls) node.className = cls;
    return node;
  };
  const svgEl = (tag, attrs = {}, text) => {
    const node = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
    if (text !== undefined) node.textContent = String(text);
    return node;
  };
  const fmt = (v) => (v === null || v === undefined ? "–" : fmtParam(v));
  const isNum = (v) => typeof v === "number" && isFinite(v);
  const runLink = (runId) => {
    const a = el("a", `run ${runId}`);
    a.href = pages.run(runId);
    return a;
  };

  const drawProgress = (s) => {
    const counts = s.counts || {};
    const done = finishedCount(counts);
    const stopped = (s.trials || []).filter((t) => t.stopped_early).length;
    const bar = /** @type {HTMLProgressElement} */ (document.getElementById("sweep-progress"));
    bar.max = s.planned_runs;
    bar.value = done;
    bar.dataset.done = String(done);
    /** @type {HTMLElement} */ (document.getElementById("sweep-progress-text")).textContent =
      `${done} of ${s.planned_runs} trials ended · ${stopped} stopped early`;
    const list = /** @type {HTMLElement} */ (document.getElementById("sweep-counts"));
    list.replaceChildren(...Object.keys(counts).sort().map((k) => {
      const li = el("li");
      li.dataset.status = k;
      li.append(el("span", k, `badge status-${k}`), ` ${counts[k]}`);
      return li;
    }));
    const badge = /** @type {HTMLElement} */ (document.getElementById("sweep-status"));
    badge.textContent = s.status;
    badge.className = `badge status-${s.status}`;
    root.dataset.status = s.status;
    const cancel = document.getElementById("cancel-sweep");
    if (cancel) cancel.hidden = s.status !== "running";
  };

  const drawBest = (s) => {
    const box = /** @type {HTMLElement} */ (document.getElementById("sweep-best"));
    if (!s.best) {
      box.replaceChildren(el("p", "No trial has finished yet.", "hint"));
      return;
    }
    const head = el("p");
    const value = el("strong", fmt(s.best.value));
    value.id = "sweep-best-value";
    const link = runLink(s.best.run_id);
    link.id = "sweep-best-run";
    head.append(`${s.metric.name} `, value, " · ", link);
    const dl = el("dl", undefined, "kv");
    dl.id = "sweep-best-params";
    for (const [k, v] of Object.entries(s.best.params || {})) {
      const dt = el("dt", k);
      const dd = el("dd", fmt(v));
      dd.dataset.key = k;
      dl.append(dt, dd);
    }
    box.replaceChildren(head, dl);
  };

  // The trials are THE runs table's rows (experiment_runs.js, filtered by sweep_id): each
  // poll's runs refresh it, as the curves' poll does on the experiment page.
  // The best trial's row is marked whenever the table draws its rows.
  let bestRun = null;
  const markBest = () => {
    for (const tr of /** @type {NodeListOf<HTMLElement>} */ (document.querySelectorAll("#runs tbody tr[data-run-id]"))) {
      tr.classList.toggle("best", Number(tr.dataset.runId) === bestRun);
    }
  };
  const runsSection = document.getElementById("runs-section");
  if (runsSection) listen(runsSection, RUNS, markBest);
  const refreshRuns = (s) => {
    bestRun = s.best ? s.best.run_id : null;
    markBest();
    emit(document, RUNS_REFRESHED, {runs: s.runs || []});
  };

  // metric vs param: numbers on a linear or log axis, anything else on
  // evenly spaced categories; the best trial ringed.
  const W = 320, H = 220, L = 56, R = 12, T = 12, B = 40;
  const scale = (lo, hi, a, b, log) => {
    const f = log ? Math.log10 : (x) => x;
    const l = f(lo), h = f(hi);
    return (v) => (h === l ? (a + b) / 2 : a + ((f(v) - l) / (h - l)) * (b - a));
  };
  const scatter = (s, key) => {
    const spec = (s.parameters || {})[key] || {};
    const pts = (s.trials || []).filter((t) => isNum(t.value) && (t.params || {})[key] !== undefined);
    const xs = pts.map((t) => t.params[key]);
    const numeric = xs.length > 0 && xs.every(isNum);
    // log for a log_uniform param, or numbers all > 0 spanning > 2 decades (as the parcoords)
    const log = numeric && xs.every((x) => x > 0) &&
      (spec.distribution === "log_uniform" || Math.max(...xs) / Math.min(...xs) > 100);
    const ys = pts.map((t) => t.value);
    const svg = svgEl("svg", {viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: "img"});
    svg.append(svgEl("title", {}, `${s.metric.name} against ${key}`));
    svg.append(svgEl("line", {x1: L, y1: H - B, x2: W - R, y2: H - B, class: "sc-axis"}));
    svg.append(svgEl("line", {x1: L, y1: T, x2: L, y2: H - B, class: "sc-axis"}));
    svg.append(svgEl("text", {x: (L + W - R) / 2, y: H - 6, "text-anchor": "middle", class: "sc-label"}, key));
    svg.append(svgEl("text", {x: 12, y: (T + H - B) / 2, "text-anchor": "middle", class: "sc-label",
      transform: `rotate(-90 12 ${(T + H - B) / 2})`}, s.metric.name));
    if (!pts.length) return svg;
    const ylo = Math.min(...ys), yhi = Math.max(...ys);
    const y = scale(ylo, yhi, H - B - 6, T + 6, false);
    let x;
    if (numeric) {
      x = scale(Math.min(...xs), Math.max(...xs), L + 8, W - R - 8, log);
      for (const [v, anchor] of [[Math.min(...xs), "start"], [Math.max(...xs), "end"]]) {
        svg.append(svgEl("text", {x: x(v), y: H - B + 14, "text-anchor": anchor, class: "sc-tick"}, fmt(v)));
      }
    } else {
      const cats = [...new Set(xs.map((v) => JSON.stringify(v)))];
      const pos = scale(0, Math.max(1, cats.length - 1), L + 16, W - R - 16, false);
      x = (v) => pos(cats.indexOf(JSON.stringify(v)));
      cats.forEach((c, i) => svg.append(svgEl("text", {x: pos(i), y: H - B + 14, "text-anchor": "middle", class: "sc-tick"},
        fmt(JSON.parse(c)))));
    }
    for (const [v, dy] of [[ylo, 0], [yhi, 4]]) {
      svg.append(svgEl("text", {x: L - 4, y: y(v) + dy, "text-anchor": "end", class: "sc-tick"}, fmt(v)));
    }
    const best = s.best ? s.best.run_id : null;
    for (const t of pts) {
      const c = svgEl("circle", {cx: x(t.params[key]).toFixed(1), cy: y(t.value).toFixed(1), r: 5,
        class: `sc-point${t.run_id === best ? " sc-best" : ""}${t.stopped_early ? " sc-stopped" : ""}`,
        "data-run-id": t.run_id === null ? "" : t.run_id});
      c.append(svgEl("title", {}, `trial ${t.number}${t.run_id !== null ? ` (run ${t.run_id})` : ""}: ` +
        `${key}=${fmt(t.params[key])}, ${s.metric.name}=${fmt(t.value)}${t.stopped_early ? " (stopped early)" : ""}`));
      if (t.run_id !== null) c.addEventListener("click", () => { window.location.href = pages.run(t.run_id); });
      svg.append(c);
    }
    return svg;
  };
  const drawScatters = (s) => {
    const box = /** @type {HTMLElement} */ (document.getElementById("sweep-scatters"));
    box.replaceChildren(...Object.keys(s.parameters || {}).map((key) => {
      const fig = el("figure", undefined, "scatter");
      fig.dataset.param = key;
      fig.append(scatter(s, key), el("figcaption", `${s.metric.name} vs ${key}`));
      return fig;
    }));
  };

  const drawParcoords = (s) => {
    const box = document.getElementById("sweep-parcoords");
    const runs = s.runs || [];
    if (!runs.length) return;
    if (!chart) chart = parcoords.mount(box, runs, {metric: `${s.metric.name}.last`});
    else chart.update(runs);
  };

  const draw = (s) => {
    drawProgress(s);
    drawBest(s);
    refreshRuns(s);
    drawScatters(s);
    drawParcoords(s);
  };

  const error = /** @type {HTMLElement} */ (document.getElementById("sweep-error"));
  const showError = (text) => { error.textContent = text; error.hidden = !text; };
  // While the stream is down, what the page shows is as of the server's last snapshot: said
  // so, and the progress and trials marked stale until the stream is back (it sends the sweep
  // again at once).
  let lostSince = null;
  const stale = () => markStale([...document.querySelectorAll("#sweep-progress, #sweep-trials")], lostSince);
  /** @param {any} s */
  const show = (s) => {
    lostSince = null;
    showError("");
    if (s.status === "deleted") showError("This sweep was deleted.");
    else draw(s);
    stale();
  };
  const follow = () => {
    const stream = pageStream(api.sweepEvents(id), "sweep", (s) => s.status !== "running");
    stream.on("sweep", show);
    stream.on("link", (link) => {
      if (link !== "down") return;
      if (lostSince === null) lostSince = new Date();
      showError(`${lostText(lostSince)}: the sweep as of then.`);
      stale();
    });
  };

  const first = JSON.parse(/** @type {HTMLElement} */ (document.getElementById("sweep-data")).textContent);
  draw(first);
  if (first.status === "running") follow();

  const cancel = /** @type {HTMLButtonElement | null} */ (document.getElementById("cancel-sweep"));
  if (cancel) {
    cancel.addEventListener("click", async () => {
      if (!window.confirm(`Cancel sweep ${id}? Queued trials are cancelled, running ones stopped.`)) return;
      cancel.disabled = true;
      const r = await call("POST", api.sweepCancel(id));
      cancel.disabled = false;
      if (r.ok) { showError(""); draw(r.body); } else showFailure(error, "Could not cancel", r);
    });
  }
})();
