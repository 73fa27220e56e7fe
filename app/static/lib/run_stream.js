// The run page's one link to the server while the run is live: its SSE stream
// (GET /api/runs/{id}/events, app/runs/streams/events.py), as an event hub. The page's parts subscribe
// here instead of each polling on a timer: the charts and the log take the stream's data, and
// the checkpoints, files, params, images, environment and the run's status are asked for again
// when the stream says something happened (refreshOn).
//
// Events: "metrics", "log", "status", "ping" (the stream's own, with their parsed data), and
// "link" (the stream opened: "up"; dropped: "down"; ended with the run: "closed").
// A dropped stream reconnects from what the page holds (`url()` is asked again each time);
// a stream silent for `silentMs` counts as dropped (a quiet stream still pings every 10 s:
// PING_SECONDS), so a cut network without a reset is noticed too.
import {isFinished} from "./status.js";

//
// The experiment, sweep and GPU pages hold the same hub on their own streams (lib/page_stream.js):
// `events` names the stream's events, `isLast(name, data)` says which event is its last (the
// run page's: a finished status).
const STREAM_EVENTS = ["metrics", "log", "status", "ping"];
/** @param {string} name @param {any} data */
const runIsOver = (name, data) => name === "status" && isFinished(data.status);

export class RunStream {
  // url: () => the stream's URL from the page's position; finished: () => whether the run is
  // over (then a drop is not reconnected). EventSource: the browser's, or a test's stand-in.
  /**
   * @param {{url: () => string, finished: () => boolean, silentMs?: number, retryMs?: number,
   *          EventSource?: any, events?: string[], isLast?: (name: string, data: any) => boolean}} options
   */
  constructor({url, finished, silentMs = 30000, retryMs = 2000, EventSource = globalThis.EventSource,
               events = STREAM_EVENTS, isLast = runIsOver}) {
    this.url = url;
    this.finished = finished;
    this.events = events;
    this.isLast = isLast;
    this.silentMs = silentMs;
    this.retryMs = retryMs;
    this.EventSource = EventSource;
    this.listeners = new Map();
    this.source = null;
    this.watchdog = null;
    this.retry = null;  // timers: clearTimeout of a null one does nothing (its casts say number)
    this.link = "connecting";
  }

  // fn(data) for each event `name`; returns the unsubscribe.
  on(name, fn) {
    if (!this.listeners.has(name)) this.listeners.set(name, new Set());
    this.listeners.get(name).add(fn);
    return () => this.listeners.get(name).delete(fn);
  }

  emit(name, data) {
    for (const fn of [...(this.listeners.get(name) || [])]) fn(data);
  }

  get open() { return this.source !== null; }

  connect() {
    clearTimeout(/** @type {number | undefined} */ (this.retry));
    if (this.source) return;
    const source = new this.EventSource(this.url());
    this.source = source;
    this.heard();
    source.addEventListener("open", () => {
      if (this.source !== source) return;
      this.heard();
      this.setLink("up");
    });
    for (const name of this.events) {
      source.addEventListener(name, (e) => {
        if (this.source !== source) return;
        this.heard();
        const data = e.data ? JSON.parse(e.data) : {};
        this.emit(name, data);
        if (this.isLast(name, data)) this.close("closed");
      });
    }
    source.addEventListener("error", () => { if (this.source === source) this.dropped(); });
  }

  // Ends the stream (a rank picked on the log: connect() again from the new position; the run
  // over: link "closed").
  close(link) {
    clearTimeout(/** @type {number | undefined} */ (this.watchdog));
    clearTimeout(/** @type {number | undefined} */ (this.retry));
    if (this.source) this.source.close();
    this.source = null;
    if (link) this.setLink(link);
  }

  // The stream dropped (an error, or silence): say so, and reconnect from what the page holds.
  dropped() {
    if (!this.source) return;
    this.close();
    if (this.finished()) return;
    this.setLink("down");
    this.retry = setTimeout(() => this.connect(), this.retryMs);
  }

  heard() {
    clearTimeout(/** @type {number | undefined} */ (this.watchdog));
    this.watchdog = setTimeout(() => this.dropped(), this.silentMs);
  }

  setLink(link) {
    this.link = link;
    this.emit("link", link);
  }

  // `load` again when the stream says something happened, at most once per `everyMs` (any
  // event: data, or the ping a quiet stream sends every 10 s), and at once on a status event
  // (a status change, the run's end among them: its final state is loaded then).
  refreshOn(load, everyMs, now = () => Date.now()) {
    const refresh = refresher(load, everyMs, now);
    for (const name of ["metrics", "log", "ping"]) this.on(name, () => refresh(false));
    this.on("status", () => refresh(true));
  }
}

// The refresh rule of RunStream.refreshOn as a function of its own: call(force) runs `load`
// when forced or when `everyMs` passed since the last load began; one load at a time (a call
// during one is remembered and runs after it, forced when any such call was). A call that comes
// too soon is owed, not dropped: it runs once the interval has passed, unless a load began in
// between. A page stream says a change once (it sends a digest only when it differs), so news
// dropped for coming too soon after the last load stayed unseen until the next change.
/**
 * @param {() => Promise<unknown> | unknown} load
 * @param {number} everyMs
 * @param {() => number} [now]
 * @param {(fn: () => void, ms: number) => unknown} [later]
 * @returns {(force: boolean) => Promise<void>}
 */
export const refresher = (load, everyMs, now = () => Date.now(), later = (fn, ms) => setTimeout(fn, ms)) => {
  let last = -Infinity;
  let running = false;
  /** @type {boolean | null} */
  let again = null;  // null: nothing waiting; false/true: a call came in while loading
  let owed = false;  // a call came too soon: a load is owed once the interval has passed
  let timerSet = false;
  /** @param {boolean} force */
  const call = async (force) => {
    if (running) { again = again || force; return; }
    const wait = last + everyMs - now();
    if (!force && wait > 0) {
      owed = true;
      if (!timerSet) {
        timerSet = true;
        later(() => { timerSet = false; if (owed) call(false); }, wait);
      }
      return;
    }
    running = true;
    owed = false;
    last = now();
    try { await load(); } finally {
      running = false;
      const next = again;
      again = null;
      if (next !== null) call(next);
    }
  };
  return call;
};
