// The page's state as one object, for saved views (saved_views.js): each part of a page (the
// runs table, the curves) registers {get, set} over the keys it owns (filter, sort, columns,
// group, charts: app/saved_views/schemas.py ViewState). getState() merges every part's get();
// setState(state) hands the whole state to every part, which takes its own keys and ignores
// the rest. A part registered later (a module loaded after the view was applied) gets the
// last state set, so the order the page's modules load in does not matter.
const parts = [];
let applied = null;

export const register = (part) => {
  parts.push(part);
  if (applied) part.set(applied);
};

export const getState = () => Object.assign({}, ...parts.map((part) => part.get()));

export const setState = (state) => {
  applied = state;
  for (const part of parts) part.set(state);
};
