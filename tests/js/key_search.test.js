// lib/key_search.js: the pickers' search as the reader types (issue 43): one request after
// the typing pauses, and only the newest answer shown.
import assert from "node:assert/strict";
import {test} from "node:test";

import {typeahead} from "../../app/static/lib/key_search.js";

// setTimeout/clearTimeout run by hand: `run()` fires what is pending.
const manualTimers = () => {
  const pending = new Map();
  let next = 0;
  return {
    setTimeout: (fn) => { pending.set(++next, fn); return next; },
    clearTimeout: (id) => { pending.delete(id); },
    run: async () => {  // fires them, then lets their settled promises run on
      const fns = [...pending.values()];
      pending.clear();
      for (const fn of fns) fn();
      await new Promise((r) => setImmediate(r));
    },
    size: () => pending.size,
  };
};

test("keystrokes within the delay make one request, for the last text", async () => {
  const timers = manualTimers();
  const asked = [], shown = [];
  const search = typeahead(async (q) => { asked.push(q); return [`${q}!`]; },
                           (q, found) => shown.push([q, found]), {timers});
  search("l"); search("lo"); search("los");
  assert.equal(timers.size(), 1);
  await timers.run();
  assert.deepEqual(asked, ["los"]);
  assert.deepEqual(shown, [["los", ["los!"]]]);
});

test("an older answer that arrives after a newer search is dropped", async () => {
  const timers = manualTimers();
  const answers = new Map();
  const shown = [];
  const search = typeahead((q) => new Promise((resolve) => answers.set(q, resolve)),
                           (q, found) => shown.push([q, found]), {timers});
  search("grad");
  await timers.run();  // "grad" asked, not answered yet
  search("grad/layer");
  await timers.run();
  answers.get("grad/layer")(["grad/layer_1/norm"]);
  await new Promise((r) => setImmediate(r));
  answers.get("grad")(["grad/a", "grad/b"]);  // late: dropped
  await new Promise((r) => setImmediate(r));
  assert.deepEqual(shown, [["grad/layer", ["grad/layer_1/norm"]]]);
});

