// The page's grouping, {by, band} (lib/groups.js): one state per page that the runs table, the
// experiment page's curves and the compare page's curves all follow, and the hooks a saved view
// reads and restores: getState() -> {group: {by, band}}, setState({group}) (a state without
// `group` leaves it as it is). Modules share this one instance (one module per URL), so a
// change made through any control, or setState, reaches every view and every control.
import {groupChoices, normalizeGroup, DEFAULT_GROUP} from "./lib/groups.js";

let current = {...DEFAULT_GROUP};
const listeners = new Set();

export const getState = () => ({group: {...current}});

export const setState = (state) => {
  if (!state || !("group" in state)) return;
  const next = normalizeGroup(state.group);
  if (next.by === current.by && next.band === current.band) return;
  current = next;
  for (const f of listeners) f({...current});
};

// f({by, band}) on every change; returns the unsubscribe.
export const onChange = (f) => { listeners.add(f); return () => listeners.delete(f); };

// A "Group by" <select>: its options from `runs` (every param key, then the tags; the current
// choice kept even when no run shown has it), bound both ways to the state.
export const bindBy = (select, runs) => {
  if (!select) return;
  const by = current.by;
  const choices = groupChoices(runs);
  if (by && !choices.some((c) => c.by === by)) choices.push({by, label: by.replace(/^param:/, "")});
  // The same choices as drawn: the options stay (a live page redraws every few seconds, and
  // rebuilding them would close the list under the reader's pointer).
  const drawn = JSON.stringify(choices.map((c) => c.by));
  if (select.dataset.choices === drawn) { select.value = by || ""; return; }
  select.dataset.choices = drawn;
  const none = document.createElement("option");
  none.value = "";
  none.textContent = "none";
  select.replaceChildren(none, ...choices.map((c) => {
    const o = document.createElement("option");
    o.value = c.by;
    o.textContent = c.label;
    return o;
  }));
  select.value = by || "";
  if (!select.dataset.bound) {
    select.dataset.bound = "1";
    select.addEventListener("change", () => setState({group: {...current, by: select.value || null}}));
    onChange((g) => { select.value = g.by || ""; });
  }
};

// A band <select> (min-max or mean +/- std), bound both ways to the state.
export const bindBand = (select) => {
  if (!select || select.dataset.bound) return;
  select.dataset.bound = "1";
  select.value = current.band;
  select.addEventListener("change", () => setState({group: {...current, band: select.value}}));
  onChange((g) => { select.value = g.band; });
};
