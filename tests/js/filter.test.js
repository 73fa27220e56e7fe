// The runs filter builder's pure parts (app/static/lib/filter.js).
import assert from "node:assert/strict";
import {test} from "node:test";

import {append, condition, keys, quote, refusal} from "../../app/static/lib/filter.js";

test("keys and values are bare when the language reads them so, else quoted", () => {
  assert.equal(quote("val/acc.max"), "val/acc.max");
  assert.equal(quote("1e-3"), "1e-3");
  assert.equal(quote("a b"), '"a b"');
  assert.equal(quote('say "hi"'), '"say \\"hi\\""');
  assert.equal(quote("OR"), '"OR"');
  assert.equal(quote("x>y"), '"x>y"');
});

test("a condition of each operator", () => {
  assert.equal(condition("lr", "<=", "0.01"), "lr<=0.01");
  assert.equal(condition("name", "~", " res net "), 'name~"res net"');
  assert.equal(condition("opt", "in", "adam, sgd,,"), "opt in (adam, sgd)");
  assert.throws(() => condition("lr", "=>", "1"));
});

test("a condition appended holds for everything before it", () => {
  assert.equal(append("", "lr<1"), "lr<1");
  assert.equal(append("  a=1 ", "lr<1"), "a=1 and lr<1");
  assert.equal(append("a=1 or b=2", "lr<1"), "(a=1 or b=2) and lr<1");
  assert.equal(append("(a=1)or(b=2)", "lr<1"), "((a=1)or(b=2)) and lr<1");
  assert.equal(append("name='x or y'", "lr<1"), "name='x or y' and lr<1");
  assert.equal(append("color=red", "lr<1"), "color=red and lr<1");
});

test("a refusal names the query parameter and keeps the server's message", () => {
  const body = {detail: [{loc: ["query", "filter"], msg: "position 12: expected a value after '>'"}]};
  assert.equal(refusal(body), "filter: position 12: expected a value after '>'");
  assert.equal(refusal({detail: "nope"}), null);
});

test("the builder offers run fields, bare params and metrics with their summaries", () => {
  const runs = [{params: {"params.lr": 0.1, seed: 1}, summary: {"val/acc": {}}}, {params: {}}];
  assert.deepEqual(keys(runs), ["name", "tags", "status", "lr", "seed", "val/acc", "val/acc.max", "val/acc.min"]);
});
