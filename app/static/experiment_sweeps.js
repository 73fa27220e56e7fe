// The experiment page's sweeps (templates/experiment.html): live while any of them runs. Every
// 3 s it asks GET /api/sweeps?experiment_id= and redraws the rows (status, trials ended of
// planned, best so far with its run); once none runs it stops asking, as the runs table stops
// refreshing once no run is active. Names and values reach the page as textContent only.
import {call, errorText} from "./lib/api.js";
import {timeEl} from "./lib/dom.js";
import {fmtParam} from "./lib/format.js";
import {api, pages} from "./lib/urls.js";
import {finishedCount} from "./lib/status.js";
(() => {
  const section = document.getElementById("sweeps-section");
  const table = document.getElementById("sweeps");
  if (!section || !table) return;
  const POLL_MS = 3000;
  const experimentId = section.dataset.experimentId;
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

  const running = () => [...table.querySelectorAll("tbody tr[data-status]")]
    .some((tr) => tr.dataset.status === "running");
  const error = document.getElementById("sweeps-error");
  const poll = async () => {
    const r = await call("GET", api.sweeps({experiment_id: experimentId}));
    if (r.ok) {
      error.hidden = true;
      table.tBodies[0].replaceChildren(...r.body.map(row));
      table.hidden = r.body.length === 0;
      document.getElementById("sweeps-empty").hidden = r.body.length > 0;
      section.dataset.refreshed = String(Number(section.dataset.refreshed || 0) + 1);
    } else {
      error.textContent = `Could not list the sweeps: ${errorText(r.body)}`;
      error.hidden = false;
    }
    if (!r.ok || running()) setTimeout(poll, POLL_MS);
  };
  if (running()) setTimeout(poll, POLL_MS);
})();
