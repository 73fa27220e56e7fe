// Pure formatting shared by every page (no DOM here: unit-tested under Node, tests/js/).

// Bytes the server's way (app/runs/state/notices.py size_text, the `size` template filter): binary
// units, "1 GiB", "1.5 MiB", "512 bytes", so a page never says MB beside the server's MiB.
export const fmtBytes = (n) => {
  for (const [unit, scale] of /** @type {[string, number][]} */ ([["GiB", 2 ** 30], ["MiB", 2 ** 20], ["KiB", 2 ** 10]])) {
    if (n >= scale) {
      const value = n / scale;
      return Number.isInteger(value) ? `${value} ${unit}` : `${value.toFixed(1)} ${unit}`;
    }
  }
  return `${n} bytes`;
};

export const fmtDuration = (seconds) => {
  if (seconds == null || isNaN(seconds)) return "–";
  const s = Math.round(seconds);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${s % 60}s`;
  return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
};

// --- points in time ------------------------------------------------------------------------
// One format for every point in time on every page: the reader's locale and time zone, with
// the time in UTC beside it (the title of a <time>: lib/dom.js showTime).
/** @type {Intl.DateTimeFormatOptions} */
const TIME_FORMAT = {dateStyle: "medium", timeStyle: "short"};
export const parseTime = (iso) => {
  if (!iso) return null;
  // SQLite hands back naive UTC datetimes: read them as UTC, not local time.
  const d = new Date(/[zZ]|[+-]\d\d:?\d\d$/.test(iso) ? iso : iso + "Z");
  return isNaN(d.getTime()) ? null : d;
};
// One formatter for every time shown: toLocaleString(undefined, options) builds one a call
// (a tenth of a millisecond each: 21 ms of the experiment page's first 100 rows).
let timeFormat = null;
export const fmtTime = (iso) => {
  const d = parseTime(iso);
  if (!d) return "–";
  timeFormat = timeFormat || new Intl.DateTimeFormat(undefined, TIME_FORMAT);
  return timeFormat.format(d);
};
export const utcText = (iso) => {
  const d = parseTime(iso);
  return d ? `${d.toISOString().slice(0, 19).replace("T", " ")} UTC` : "";
};
export const clockText = (date) => date.toLocaleTimeString(undefined, {hour: "2-digit", minute: "2-digit", second: "2-digit"});

// What a page says while the server does not answer (the run page's stream, the experiment
// page's polling, the GPU panel): "connection lost — reconnecting… (shown as of 09:01:02)".
export const LOST_TEXT = "connection lost — reconnecting…";
export const lostText = (since) => (since ? `${LOST_TEXT} (shown as of ${clockText(since)})` : LOST_TEXT);

// --- multi-node runs on the GPU page ---------------------------------------------------------
// A leased GPU of a multi-node run says which node its host is and the run's hosts in node
// order ("node 1 of 2: a, b"); "" for a single-host run's.
export const nodeText = (gpu) => {
  const hosts = gpu.run_hosts || [];
  return hosts.length > 1 && gpu.node != null ? `node ${gpu.node} of ${hosts.length}: ${hosts.join(", ")}` : "";
};

// A queued run's GPUs: per host times its hosts for a multi-node run ("2 × 3 hosts").
export const gpusText = (run) => (run.nodes > 1 ? `${run.gpus} × ${run.nodes} hosts` : String(run.gpus));

// --- metric keys ---------------------------------------------------------------------------
// Keys are grouped by what comes before their first "/" (`train/loss` -> train, `Loss/train`
// -> Loss); a key without one is ungrouped (""). Groups show in name order, then the ungrouped
// keys, then the system series (sys/, "System").
export const keyGroup = (key) => {
  const cut = key.indexOf("/");
  return cut > 0 ? key.slice(0, cut) : "";
};
// sys/: the run's system series, recorded by the worker (worker/system_metrics.py).
export const groupTitle = (group) => (group === "" ? "other" : group === "sys" ? "System" : `${group}/`);
// A system series' step is whole seconds since the run started, not a training step.
export const isSystemKey = (key) => key.startsWith("sys/");
export const stepTitle = (key) => (isSystemKey(key) ? "seconds since start" : "step");
const groupRank = (group) => (group === "sys" ? 2 : group === "" ? 1 : 0);
const byText = (a, b) => (a < b ? -1 : a > b ? 1 : 0);
export const compareGroups = (a, b) => groupRank(a) - groupRank(b)
  || byText(a.toLowerCase(), b.toLowerCase()) || byText(a, b);
export const compareKeys = (a, b) => compareGroups(keyGroup(a), keyGroup(b)) || byText(a, b);

// A progress bar (tqdm, rich) rewrites its line with "\r": keep only what the line shows last,
// after its rank prefix (app/runs/files/logs.py does the same for the log API). A line still being
// written keeps a trailing "\r", so the text that comes next replaces it.
export const collapseCarriageReturns = (text) => {
  if (!text.includes("\r")) return text;
  return text.split("\n").map((line) => {
    if (!line.includes("\r")) return line;
    const prefix = (line.match(/^\[rank\d+\]: /) || [""])[0];
    const body = line.slice(prefix.length);
    const shown = body.split("\r").filter((part) => part !== "");
    return prefix + (shown.length ? shown[shown.length - 1] : "") + (body.endsWith("\r") ? "\r" : "");
  }).join("\n");
};

// --- runs side by side ---------------------------------------------------------------------
// One colour per run on every page: a fixed palette indexed by the run id, so a run keeps its
// colour whichever runs are shown beside it.
export const RUN_PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
  "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#ad494a", "#637939", "#7b4173", "#3182bd",
  "#e6550d"];
export const runColor = (runId) => {
  const n = Math.abs(Math.trunc(Number(runId))) || 0;
  return RUN_PALETTE[n % RUN_PALETTE.length];
};

// A param or summary value as a short text: numbers to 4 significant digits, anything else as
// its JSON, cut at 24 characters.
export const fmtParam = (v) => {
  if (typeof v === "number") return Number.isInteger(v) ? String(v) : String(Number(v.toPrecision(4)));
  const text = typeof v === "string" ? v : JSON.stringify(v);
  return text.length > 24 ? text.slice(0, 23) + "…" : text;
};

// A table cell's value: numbers to 4 significant digits, missing as "–", the rest in full.
export const fmtValue = (v) => {
  if (v === null || v === undefined) return "–";
  if (typeof v === "number") return Number.isInteger(v) ? String(v) : String(Number(v.toPrecision(4)));
  if (typeof v === "string") return v;
  return JSON.stringify(v);
};

// Params varying by design, by the last part of their dotted key: the launch config's `seed`
// (app/experiments/config.py with_seed draws one per run), and a seed a script keeps among its
// params or reports as an hparam (params.seed, hparams.random_seed). THE set: every "differing"
// view leaves them out unless the reader ticks "Show seed" (lib/seed.js).
export const SEED_NAMES = ["seed", "random_seed"];
export const isSeedParam = (key) => SEED_NAMES.includes(key.slice(key.lastIndexOf(".") + 1));

// The params whose values are not all the same across `runs` (a run without one counts as
// differing), in key order, the seed left out unless `withSeed`: the runs table's columns, the
// overlays' legends, the parallel coordinates' axes.
export const differingParams = (runs, withSeed = false) => {
  const keys = new Set();
  for (const r of runs) for (const k of Object.keys(r.params || {})) keys.add(k);
  if (runs.length < 2) return [];
  return [...keys].sort().filter((k) => {
    if (!withSeed && isSeedParam(k)) return false;
    const first = JSON.stringify((runs[0].params || {})[k]);
    return runs.some((r) => JSON.stringify((r.params || {})[k]) !== first);
  });
};

// Each run's label, by id: "run 12 · lr=0.01 bs=64" (a named run: "run 12 warmup · ..."), with
// at most 4 of the params that differ; "params.lr" shows as "lr" unless two differing params
// end the same.
export const runLabels = (runs, withSeed = false) => {
  const diff = differingParams(runs, withSeed).slice(0, 4);
  const last = (k) => k.slice(k.lastIndexOf(".") + 1);
  const count = new Map();
  for (const k of diff) count.set(last(k), (count.get(last(k)) || 0) + 1);
  const name = (k) => (count.get(last(k)) > 1 ? k : last(k));
  return new Map(runs.map((r) => {
    const head = r.name ? `run ${r.id} ${r.name}` : `run ${r.id}`;
    const parts = diff.filter((k) => k in (r.params || {})).map((k) => `${name(k)}=${fmtParam(r.params[k])}`);
    return [r.id, parts.length ? `${head} · ${parts.join(" ")}` : head];
  }));
};
