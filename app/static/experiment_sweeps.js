// The experiment page's sweeps (templates/experiment.html): live while any of them runs. When
// the experiment's event stream (lib/page_stream.js) says its sweeps changed (at once) or its
// runs moved (at most every 3 s: the best so far), it asks GET /api/sweeps?experiment_id= and
// redraws the rows (status, trials ended of planned, best so far with its run); the stream
// ends once nothing runs. Names and values reach the page as textContent only.
import {call, errorText} from "./lib/api.js";
import {timeEl} from "./lib/dom.js";
import {fmtParam} from "./lib/format.js";
import {experimentStream, onNews} from "./lib/page_stream.js";
import {refresher} from "./lib/run_stream.js";
import {api, pages} from "./lib/urls.js";
import {finishedCount} from "./lib/status.js";
(() => {
  const section = document.getElementById("sweeps-section");
  const table = /** @type {HTMLTableElement | null} */ (document.getElementById("sweeps"));
  if (!section || !table) return;
  const POLL_MS = 3000;
  const experimentId = /** @type {string} */ (section.dataset.experimentId);
  const el = (tag, text, cls) => {
    const node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = String(text);
    if (cls) node.className = cls;
    return node;
  };
  const link = (href, text) => { const a = el("a", text); a.href = href; return a; };

  const row = (s) => {
    const tr = el("tr");
    tr.dataset.sweepId = String(s.id);
    tr.dataset.status = s.status;
    const name = el("td");
    name.append(link(pages.sweep(s.id), `sweep ${s.id}`));
    const status = el("td");
    status.append(el("span", s.status, `badge status-${s.status}`));
    const metric = el("td", `${s.metric.goal} `);
    metric.append(el("code", s.metric.name));
    const counts = s.counts || {};
    const done = finishedCount(counts);
    const best = el("td", undefined, "sweep-best");
    if (s.best) best.append(`${fmtParam(s.best.value)} · `, link(pages.run(s.best.run_id), `run ${s.best.run_id}`));
    else best.append(el("span", "–", "muted"));
    const created = el("td");
    created.append(timeEl(s.created_at));
    tr.append(name, status, el("td", s.method), metric,
      el("td", `${done} / ${s.planned_runs}`, "num sweep-progress"), best, created);
    return tr;
  };

  const running = () => [.../** @type {NodeListOf<HTMLElement>} */ (table.querySelectorAll("tbody tr[data-status]"))]
    .some((tr) => tr.dataset.status === "running");
  const error = /** @type {HTMLElement} */ (document.getElementById("sweeps-error"));
  const poll = async () => {
    const r = await call("GET", api.sweeps({experiment_id: experimentId}));
    if (r.ok) {
      error.hidden = true;
      table.tBodies[0].replaceChildren(...r.body.map(row));
      table.hidden = r.body.length === 0;
      /** @type {HTMLElement} */ (document.getElementById("sweeps-empty")).hidden = r.body.length > 0;
      section.dataset.refreshed = String(Number(section.dataset.refreshed || 0) + 1);
    } else {
      error.textContent = `Could not list the sweeps: ${errorText(r.body)}`;
      error.hidden = false;
    }
  };
  const refresh = refresher(poll, POLL_MS);
  const stream = experimentStream(experimentId);
  // The first digest: news only while a sweep runs (the page came with the rows).
  onNews(stream, "experiment", (d) => d.sweeps, () => refresh(true), () => running());
  onNews(stream, "experiment", (d) => [d.runs, d.counts, d.newest], () => refresh(false), () => false);
})();
