// The run page's log tail: the last LOG_CAP characters from the API, then the stream's "log"
// events. Under torchrun every line of rank N starts with "[rankN]: "; a single process's
// lines are all rank 0's. The rank filter loads the rank's tail with ?rank= (whole lines, and
// an offset at a line boundary) and filters the live chunks here, holding back a partial last
// line.
import {$} from "../lib/dom.js";
import {collapseCarriageReturns} from "../lib/format.js";
import {isFinished} from "../lib/status.js";
import {api} from "../lib/urls.js";

const LOG_CAP = 200 * 1024;   // characters kept in the log tail

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

export const mountLog = (runId, stream, status) => {
  const logEl = $("log-tail");
  const rankSelect = $("log-rank");
  const nproc = Number(rankSelect.dataset.nproc || 1);
  let offset = 0;
  let logRank = "";          // "" = every line
  let logPartial = "";       // the start of a line the stream has not finished yet
  const append = (text) => {
    if (!text) return;
    const atBottom = logEl.scrollHeight - logEl.scrollTop - logEl.clientHeight < 24;
    logEl.textContent = trimLog(logEl.textContent + text);
    if (atBottom) logEl.scrollTop = logEl.scrollHeight;
  };
  const filtering = () => logRank !== "" && nproc > 1;
  stream.on("log", (d) => {
    if (typeof d.offset === "number") offset = d.offset;
    if (!filtering()) { append(d.text); return; }
    const lines = rankLines(logPartial, d.text, logRank);
    logPartial = lines.partial;
    append(lines.text);
  });
  const load = async () => {
    try {
      const response = await fetch(api.runLogs(runId, {tail: LOG_CAP, rank: filtering() ? logRank : null}),
                                   {credentials: "same-origin"});
      if (!response.ok) return;
      offset = Number(response.headers.get("X-Log-Size") || 0);
      append(await response.text());
    } catch { /* the stream will bring what follows */ }
  };
  rankSelect.addEventListener("change", async () => {
    logRank = rankSelect.value;
    logEl.dataset.rank = logRank;
    const live = stream.open;
    if (live) stream.close();  // reconnect from the new log position
    logEl.textContent = "";
    logPartial = "";
    await load();
    if (live && !isFinished(status())) stream.connect();
  });
  return {load, offset: () => offset};
};
