// The run page's log tail: the last LOG_CAP characters from the API, then the stream's "log"
// events. Under torchrun every line of rank N starts with "[rankN]: "; a single process's
// lines are all rank 0's. The rank filter loads the rank's tail with ?rank= (whole lines, and
// an offset at a line boundary) and filters the live chunks here, holding back a partial last
// line.
//
// A multi-node run has one log per node (app/runs/files/logs.py): node k's torchrun runs global
// ranks k * nproc .. k * nproc + nproc - 1. The node filter loads node k's tail with ?node=k;
// the stream follows node 0's log only, so another node's new lines are asked for every
// POLL_MS from its own offset while the run is not finished.
import {send} from "../lib/api.js";
import {$} from "../lib/dom.js";
import {collapseCarriageReturns} from "../lib/format.js";
import {isFinished} from "../lib/status.js";
import {api} from "../lib/urls.js";

const LOG_CAP = 200 * 1024;   // characters kept in the log tail
const POLL_MS = 3000;         // how often another node's log is asked for while the run goes

// Keeps what a line shows last and at most LOG_CAP characters, cut at a line start when one
// is near.
export const trimLog = (text, cap = LOG_CAP) => {
  let all = collapseCarriageReturns(text);
  if (all.length > cap) {
    all = all.slice(all.length - cap);
    const nl = all.indexOf("\n");
    if (nl >= 0 && nl < 4096) all = all.slice(nl + 1);
  }
  return all;
};

// The whole lines of `rank` in `partial + text`, and the unfinished last line held back.
export const rankLines = (partial, text, rank) => {
  const all = partial + text;
  const cut = all.lastIndexOf("\n") + 1;
  const prefix = `[rank${rank}]: `;
  const lines = all.slice(0, cut).split("\n").filter((l) => l.startsWith(prefix)).map((l) => l + "\n");
  return {text: lines.join(""), partial: all.slice(cut)};
};

// The global ranks that run on `node` (torchrun's static rendezvous: node k's ranks in order).
export const nodeRanks = (node, nproc) => Array.from({length: nproc}, (_, i) => node * nproc + i);

// The logs route's query for a node and rank choice ("" = every rank): a node only when the
// run has several and it is not node 0, a rank only when the run has several processes.
export const logQuery = ({node = 0, rank = "", nodes = 1, nproc = 1, tail, offset}) => ({
  tail,
  offset,
  node: nodes > 1 && node > 0 ? node : null,
  rank: rank !== "" && nodes * nproc > 1 ? rank : null,
});

const option = (value, text) => {
  const o = document.createElement("option");
  o.value = value;
  o.textContent = text;
  return o;
};

export const mountLog = (runId, stream, status) => {
  const logEl = $("log-tail");
  const rankSelect = /** @type {HTMLSelectElement} */ ($("log-rank"));
  const nodeSelect = /** @type {HTMLSelectElement | null} */ ($("log-node"));  // only for a multi-node run
  const nproc = Number(rankSelect.dataset.nproc || 1);
  const nodes = Number(rankSelect.dataset.nodes || 1);
  let offset = 0;            // node 0's log position: the stream's
  let nodeOffset = 0;        // another node's, polled
  let logNode = 0;
  let logRank = "";          // "" = every line
  let logPartial = "";       // the start of a line the stream has not finished yet
  let timer = null;
  let shown = 0;             // counts the filter's changes: a read for an earlier choice is dropped
  const append = (text) => {
    if (!text) return;
    const atBottom = logEl.scrollHeight - logEl.scrollTop - logEl.clientHeight < 24;
    logEl.textContent = trimLog(logEl.textContent + text);
    if (atBottom) logEl.scrollTop = logEl.scrollHeight;
  };
  const filtering = () => logRank !== "" && nodes * nproc > 1;
  stream.on("log", (d) => {
    if (typeof d.offset === "number") offset = d.offset;
    if (logNode !== 0) return;  // another node's log is shown: polled, not streamed
    if (!filtering()) { append(d.text); return; }
    const lines = rankLines(logPartial, d.text, logRank);
    logPartial = lines.partial;
    append(lines.text);
  });
  // One read of the shown node's log: its tail, or (polling) what came after `from`.
  const read = async (query) => {
    const node = logNode;
    const choice = shown;
    const response = await send("GET", api.runLogs(runId, logQuery({node, rank: logRank, nodes, nproc, ...query})));
    if (!response.ok || choice !== shown) return;  // another node or rank was chosen meanwhile
    const size = Number(response.headers.get("X-Log-Size") || 0);
    const text = await response.text();
    if (choice !== shown) return;
    if (node === 0) offset = size; else nodeOffset = size;
    append(text);
  };
  const load = async () => {
    try { await read({tail: LOG_CAP}); } catch { /* the stream (or the next poll) brings what follows */ }
  };
  const poll = async () => {
    timer = null;
    if (logNode === 0) return;
    const finished = isFinished(status());  // before the read: a finished run's read gets all
    try { await read({offset: nodeOffset}); } catch { /* asked again next time */ }
    if (!finished && logNode !== 0 && timer === null) timer = setTimeout(poll, POLL_MS);
  };
  const reload = async () => {
    clearTimeout(timer);
    timer = null;
    shown += 1;
    logEl.dataset.rank = logRank;
    logEl.dataset.node = String(logNode);
    const live = stream.open;
    if (live && logNode === 0) stream.close();  // reconnect from the new log position
    logEl.textContent = "";
    logPartial = "";
    await load();
    if (logNode !== 0) {
      if (!isFinished(status()) && timer === null) timer = setTimeout(poll, POLL_MS);
    } else if (live && !isFinished(status())) stream.connect();
  };
  rankSelect.addEventListener("change", () => { logRank = rankSelect.value; reload(); });
  nodeSelect?.addEventListener("change", () => {
    logNode = Number(nodeSelect.value);
    logRank = "";
    rankSelect.replaceChildren(option("", "all"),
      ...nodeRanks(logNode, nproc).map((r) => option(String(r), `rank ${r}`)));
    reload();
  });
  return {load, offset: () => offset};
};
