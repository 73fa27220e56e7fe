// The experiment, sweep and GPU pages' link to the server: their event stream
// (app/runs/streams/page_events.py), through the run page's hub (lib/run_stream.js: reconnects from a
// drop, a silent stream counts as dropped, "link" events up/down/closed). A stream sends the
// page's snapshot (or a digest of it) at once and whenever it changes, so the pages hold no
// timer of their own. The modules of one page share one stream per URL (an ES module is one
// instance per page): the experiment page's curves and sweeps table hear the same events.
import {RunStream} from "./run_stream.js";
import {api} from "./urls.js";

/** @type {Map<string, RunStream>} */
const streams = new Map();

/**
 * The page's stream at `url` (opened on first use), with its snapshot event `event`;
 * `isLast(data)`: the snapshot is the stream's last (its subject is over).
 * @param {string} url
 * @param {string} event
 * @param {(data: any) => boolean} [isLast]
 * @returns {RunStream}
 */
export const pageStream = (url, event, isLast = () => false) => {
  let stream = streams.get(url);
  if (!stream) {
    stream = new RunStream({
      url: () => url,
      finished: () => false,  // a drop is reconnected; the last event closes it for good
      events: [event, "ping"],
      isLast: (name, data) => name === event && isLast(data),
    });
    streams.set(url, stream);
    queueMicrotask(() => stream?.connect());  // after this task's modules subscribed
  }
  return stream;
};

/**
 * Calls `fn` when the part `pick(data)` of the stream's `event` changed from the last one seen
 * (the first one seen: when `first(data)`, since the page drew from its own copy), when the
 * stream drops (the callers' own requests then find the server gone and say so) and when it
 * is back after a drop.
 * @param {RunStream} stream
 * @param {string} event
 * @param {(data: any) => unknown} pick
 * @param {() => void} fn
 * @param {(data: any) => boolean} [first]
 */
export const onNews = (stream, event, pick, fn, first = () => true) => {
  /** @type {string | null} */
  let seen = null;
  let down = false;
  stream.on(event, (data) => {
    const part = JSON.stringify(pick(data));
    const news = seen === null ? first(data) : part !== seen;
    seen = part;
    if (news) fn();
  });
  stream.on("link", (link) => {
    if (link === "down") { down = true; fn(); } else if (link === "up" && down) { down = false; fn(); }
  });
};

/**
 * The experiment page's stream (GET /api/experiments/{id}/events): a digest of its runs and
 * sweeps; its last event says nothing is active any more (`live`: false) or it was deleted.
 * @param {string | number} experimentId
 */
export const experimentStream = (experimentId) =>
  pageStream(api.experimentEvents(experimentId), "experiment", (d) => Boolean(d.deleted) || !d.live);
