// The keyboard shortcuts' table and key resolution (app/static/lib/shortcuts.js).
import assert from "node:assert/strict";
import {test} from "node:test";

import {SHORTCUTS, resolve} from "../../app/static/lib/shortcuts.js";

test("one key completes a one-key shortcut", () => {
  assert.equal(resolve("", "?").shortcut.keys, "?");
  assert.equal(resolve("", "/").shortcut.focus, true);
});

test("g waits for its second key, which picks the page", () => {
  assert.deepEqual(resolve("", "g"), {pending: "g"});
  assert.equal(resolve("g", "g").shortcut.href, "/gpus");
  assert.equal(resolve("g", "c").shortcut.href, "/compare");
});

test("keys that mean nothing reset, a wrong second key included", () => {
  assert.deepEqual(resolve("", "x"), {});
  assert.deepEqual(resolve("g", "x"), {});
});

test("every shortcut is listed once, with a label", () => {
  const keys = SHORTCUTS.map((s) => s.keys);
  assert.equal(new Set(keys).size, keys.length);
  for (const s of SHORTCUTS) assert.ok(s.label.length > 0, s.keys);
});
