// The GPU page: hosts and queue from its event stream (GET /api/gpus/events: the panel as
// GET /api/gpus gives it, sent whenever it changes), and the usage table from GET /api/usage
// when the period changes (and, as the panel changes, at most once a minute).
import {call} from "./lib/api.js";
import {markStale, timeEl} from "./lib/dom.js";
import {fmtDuration, gpusText, lostText, nodeText} from "./lib/format.js";
import {pageStream} from "./lib/page_stream.js";
import {api, pages} from "./lib/urls.js";

(() => {
  const USAGE_MS = 60000;
  const hostsEl = /** @type {HTMLElement} */ (document.getElementById("gpu-hosts"));
  const queueBody = /** @type {HTMLElement} */ (document.querySelector("#gpu-queue tbody"));
  const usageBody = /** @type {HTMLElement} */ (document.querySelector("#gpu-usage tbody"));
  const period = /** @type {HTMLSelectElement} */ (document.getElementById("usage-period"));
  const updated = /** @type {HTMLElement} */ (document.getElementById("gpus-updated"));

  const el = (tag, attrs = {}, ...children) => {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs)) {
      if (k === "class") node.className = v;
      else if (k === "text") node.textContent = v;
      else node.setAttribute(k, v);
    }
    for (const c of children) node.append(c);
    return node;
  };
  const stateKey = (state) => (state === "busy (external)" ? "external" : state);

  const gpuCard = (gpu) => {
    const key = stateKey(gpu.state);
    const card = el("div", {class: "gpu", "data-gpu-index": gpu.index, "data-state": key},
      el("div", {class: "gpu-head"}, el("strong", {text: `GPU ${gpu.index}`}), " ",
         el("span", {class: `badge gpu-${key}`, text: gpu.state})));
    if (gpu.run_id != null) {
      card.append(el("div", {class: "gpu-holder"},
        el("a", {href: pages.run(gpu.run_id), text: `run ${gpu.run_id}`}), " · ",
        el("span", {class: "gpu-owner", text: gpu.owner || "?"}), " · since ",
        el("span", {class: "gpu-since"}, timeEl(gpu.since))));
      const nodes = nodeText(gpu);
      if (nodes) card.append(el("div", {class: "gpu-nodes muted", text: nodes}));
      if (gpu.cpu_share) {
        const cls = gpu.cpu_starved ? "gpu-cpu-share starved" : "gpu-cpu-share";
        card.append(el("div", {class: cls, text: gpu.cpu_share}));
      }
    }
    const mem = gpu.memory_total_mb != null
      ? `${Math.round(gpu.memory_used_mb)} / ${Math.round(gpu.memory_total_mb)} MiB` : "memory: unknown";
    const util = gpu.utilization != null ? `${Math.round(gpu.utilization)}% util` : "util: unknown";
    card.append(el("div", {class: "gpu-stats muted", text: `${mem} · ${util}`}));
    return card;
  };

  const renderHosts = (hosts) => {
    if (!hosts.length) {
      hostsEl.replaceChildren(el("p", {class: "empty",
        text: "No worker is running right now. Start one with `torchyard worker` (or `torchyard up`)."}));
      return;
    }
    hostsEl.replaceChildren(...hosts.map((host) => {
      const title = host.pool && host.pool !== "local" ? `${host.host} · pool ${host.pool}` : host.host;
      const pool = host.pool || "local", executor = host.executor || "process";
      const placed = executor === "slurm" ? " (Slurm places its runs)" : "";
      const card = el("div", {class: "card gpu-host", "data-host": host.host, "data-pool": pool, "data-executor": executor},
        el("h3", {text: title}),
        el("p", {class: "muted host-pool", text: `pool ${pool} · executor ${executor}${placed}`}));
      card.append(host.gpus.length
        ? el("div", {class: "gpu-list"}, ...host.gpus.map(gpuCard))
        : el("p", {class: "muted", text: "No GPUs: this host runs CPU-only runs (gpus: 0)."}));
      return card;
    }));
  };

  // The page's "mine / everyone" choice: a username to show only theirs, or "" for all.
  const owner = /** @type {HTMLElement} */ (document.getElementById("gpu-queue")).dataset.owner || "";
  const renderQueue = (all) => {
    const queue = owner ? all.filter((q) => q.owner === owner) : all;
    if (!queue.length) {
      queueBody.replaceChildren(el("tr", {class: "empty-row"},
        el("td", {colspan: "7", class: "muted", text: "Nothing is waiting."})));
      return;
    }
    queueBody.replaceChildren(...queue.map((q) => el("tr", {"data-run-id": q.run_id},
      el("td", {class: "num position", text: String(q.position)}),
      el("td", {}, el("a", {href: pages.run(q.run_id), text: `run ${q.run_id}`})),
      el("td", {text: q.owner}),
      el("td", {class: "num", text: gpusText(q)}),
      el("td", {class: "num", text: String(q.priority)}),
      el("td", {text: fmtDuration(q.waiting_seconds)}),
      el("td", {class: "reason", text: q.reason}))));
  };

  const renderUsage = (users) => {
    usageBody.replaceChildren(...users.map((u) => el("tr", {"data-user": u.username},
      el("td", {text: u.username}),
      el("td", {class: "num", text: u.gpu_hours.toFixed(2)}),
      el("td", {class: "num", text: String(u.runs)}),
      el("td", {class: "num", text: String(u.gpu_runs)}))));
  };

  // While the stream is down, the hosts and the queue shown are the last the server sent:
  // marked stale and said so, until its next snapshot.
  let lostSince = null;
  const panelParts = () => [hostsEl, document.getElementById("gpu-queue")];
  /** @param {{hosts: any[], queue: any[], generated_at: string}} panel */
  const showPanel = (panel) => {
    lostSince = null;
    renderHosts(panel.hosts);
    renderQueue(panel.queue);
    updated.replaceChildren("updated ", timeEl(panel.generated_at));
    delete updated.dataset.link;
    markStale(panelParts(), lostSince);
  };

  const refreshUsage = async () => {
    const until = new Date();
    const since = new Date(until.getTime() - Number(period.value) * 86400e3);
    const r = await call("GET", api.usage({since: since.toISOString(), until: until.toISOString(), owner}));
    if (r.ok) renderUsage(r.body.users);
  };

  period.addEventListener("change", refreshUsage);
  let usageAt = Date.now();  // the page came with the table
  const stream = pageStream(api.gpuEvents(), "gpus");
  stream.on("gpus", (panel) => {
    showPanel(panel);
    if (Date.now() - usageAt >= USAGE_MS) { usageAt = Date.now(); refreshUsage(); }
  });
  stream.on("link", (link) => {
    if (link !== "down") return;
    if (lostSince === null) lostSince = new Date();
    updated.textContent = `${lostText(lostSince)}: hosts and queue as of then`;
    updated.dataset.link = "lost";
    markStale(panelParts(), lostSince);
  });
})();
