// The code upload's check of a script against the files left out for their size
// (app/static/code_pack.js neededLeftOut, issue 41).
import assert from "node:assert/strict";
import {test} from "node:test";

import {neededLeftOut} from "../../app/static/code_pack.js";

test("a left-out large file the script names, by path or by file name, is needed", () => {
  const big = {path: "data/weights.bin", reason: "200.0 MiB, over the per-file limit of 50 MiB", large: true};
  const dir = {path: ".venv/", reason: "a virtual environment (has pyvenv.cfg)"};
  const other = {path: "other.ckpt", reason: "60.0 MiB", large: true};
  const leftOut = [big, dir, other];
  assert.deepEqual(neededLeftOut("torch.load('data/weights.bin')", leftOut), [big]);
  assert.deepEqual(neededLeftOut("open(ROOT / 'weights.bin')", leftOut), [big]);
  assert.deepEqual(neededLeftOut("import venv  # .venv/", leftOut), []);  // skipped folders are not data
  assert.deepEqual(neededLeftOut("print('hi')", leftOut), []);
  assert.deepEqual(neededLeftOut("", leftOut), []);
});
