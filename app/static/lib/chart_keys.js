// Which metric keys a page charts (the experiment page's "Charts" picker, saved in a view as
// charts.keys: app/saved_views/schemas.py ChartsState): null means every key, also those a run
// logs later; a list means exactly those keys, in the order they are offered. Pure, unit-tested
// (tests/js/chart_keys.test.js); the picker's DOM is in chart_keys_picker.js.

// Whether `key` is charted under `shown` (null: all).
export const isShown = (shown, key) => shown === null || shown.includes(key);

// The state after ticking (`on`) or unticking `key` among the keys offered (`all`): every
// offered key ticked is null again (all, new keys included). Keys of the state that this page
// does not offer (a view saved where a run logged more) are kept: they show once logged.
export const toggled = (shown, all, key, on) => {
  const current = shown === null ? [...all] : [...shown];
  const next = on ? [...new Set([...current, key])] : current.filter((k) => k !== key);
  if (all.length && all.every((k) => next.includes(k))) return null;
  const rank = new Map(all.map((k, i) => [k, i]));
  return next.sort((a, b) => (rank.get(a) ?? Infinity) - (rank.get(b) ?? Infinity));
};

// A state read back from a saved view: a list of non-empty strings (duplicates folded), else
// null (all).
export const normalizeKeys = (keys) => {
  if (!Array.isArray(keys)) return null;
  return [...new Set(keys.filter((k) => typeof k === "string" && k))];
};

// The picker's summary line: "Charts: all 5", "Charts: 2 of 5", "Charts: none of 5".
export const pickerSummary = (shown, all) => {
  if (shown === null) return `Charts: all ${all.length}`;
  const n = all.filter((k) => shown.includes(k)).length;
  return `Charts: ${n ? n : "none"} of ${all.length}`;
};
