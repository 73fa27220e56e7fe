// Every DOM event the page modules send each other, named once here with the shape of its
// detail. The modules of a page are loosely coupled on purpose (each one's script tag can come
// or go with its section of the template), so they talk through CustomEvents on a shared
// element; a name typed twice by hand drifted apart once already, so no module spells a
// "ty:..." string but this one (eslint.config.js refuses it elsewhere), and `emit`/`listen`
// tie each name to its detail type for TypeScript's checker (tsconfig.json, `make js-check`).

/**
 * @typedef {Record<string, any>} RunRow  A run as GET /api/runs lists it (app/runs/schemas.py RunOut).
 *
 * @typedef {{runs: RunRow[], summaries: string[] | null, keys: string[]}} RunsDetail
 *   The runs table drew these rows (its sort, filters and pages), with the summary columns
 *   shown and the page's metric keys.
 * @typedef {{ids: number[] | null}} RunsHighlightDetail
 *   Runs to highlight in the table (null: none; the parallel coordinates' brush).
 * @typedef {{ids: number[]}} RunsSelectDetail  Runs to tick in the table.
 * @typedef {{lostSince: Date | null}} RunsLinkDetail
 *   Since when the server has not answered the page's live refresh (null: it answers).
 * @typedef {{runs: RunRow[]}} RunsRefreshedDetail  Fresh copies of runs (status, summaries).
 * @typedef {{keys: string[]}} RunsNeedDetail  Metric keys whose summaries a view needs.
 * @typedef {{shown: boolean}} SeedShownDetail  "Show seed" changed (lib/seed.js).
 * @typedef {{key: string, steps: number[], receivedAt: number}} LiveDetail
 *   The run page drew live points of `key` (bench/ui_run_page.py times them).
 */

/** On the runs section, from experiment_runs.js. */
export const RUNS = "ty:runs";
/** On the runs section, to experiment_runs.js. */
export const RUNS_HIGHLIGHT = "ty:runs-highlight";
/** On the runs section, to experiment_runs.js. */
export const RUNS_SELECT = "ty:runs-select";
/** On document, to experiment_runs.js. */
export const RUNS_LINK = "ty:runs-link";
/** On document, to experiment_runs.js. */
export const RUNS_REFRESHED = "ty:runs-refreshed";
/** On the runs section, to experiment_runs.js. */
export const RUNS_NEED = "ty:runs-need";
/** On document, from lib/seed.js. */
export const SEED_SHOWN = "ty:seed-shown";
/** Bubbles from a run page chart, from run/charts.js. */
export const LIVE = "ty:live";

/**
 * @typedef {{
 *   "ty:runs": RunsDetail,
 *   "ty:runs-highlight": RunsHighlightDetail,
 *   "ty:runs-select": RunsSelectDetail,
 *   "ty:runs-link": RunsLinkDetail,
 *   "ty:runs-refreshed": RunsRefreshedDetail,
 *   "ty:runs-need": RunsNeedDetail,
 *   "ty:seed-shown": SeedShownDetail,
 *   "ty:live": LiveDetail,
 * }} Details  Each event's name to its detail's shape.
 */

/** Every name above (tests/js/events.test.js checks that each is in Details and unique). */
export const NAMES = Object.freeze([RUNS, RUNS_HIGHLIGHT, RUNS_SELECT, RUNS_LINK, RUNS_REFRESHED,
  RUNS_NEED, SEED_SHOWN, LIVE]);

/**
 * Sends event `name` with its detail from `target`.
 * @template {keyof Details} K
 * @param {EventTarget} target
 * @param {K} name
 * @param {Details[K]} detail
 * @param {{bubbles?: boolean}} [options]
 */
export const emit = (target, name, detail, options = {}) =>
  target.dispatchEvent(new CustomEvent(name, {detail, bubbles: Boolean(options.bubbles)}));

/**
 * Calls `fn` with the detail of each event `name` that reaches `target`.
 * @template {keyof Details} K
 * @param {EventTarget} target
 * @param {K} name
 * @param {(detail: Details[K]) => void} fn
 */
export const listen = (target, name, fn) =>
  target.addEventListener(name, (event) => fn(/** @type {CustomEvent<Details[K]>} */ (event).detail));
