// The front-end's formatting (app/static/lib/format.js), as the pages show it.
import assert from "node:assert/strict";
import {test} from "node:test";

import {
  collapseCarriageReturns, compareKeys, differingParams, fmtBytes, fmtDuration, fmtParam, fmtValue,
  gpusText, groupTitle, isSeedParam, keyGroup, lostText, nodeText, parseTime, runColor, runLabels,
  stepTitle, utcText,
} from "../../app/static/lib/format.js";

test("bytes read as the server writes them (app/runs/state/notices.py size_text): binary units", () => {
  assert.equal(fmtBytes(0), "0 bytes");
  assert.equal(fmtBytes(1023), "1023 bytes");
  assert.equal(fmtBytes(1024), "1 KiB");
  assert.equal(fmtBytes(1536), "1.5 KiB");
  assert.equal(fmtBytes(1048576), "1 MiB");
  assert.equal(fmtBytes(5.25 * 2 ** 20), "5.3 MiB");
  assert.equal(fmtBytes(2 ** 30), "1 GiB");
  assert.equal(fmtBytes(3 * 2 ** 40), "3072 GiB");
});

test("durations: seconds, then minutes, then hours; nothing known is a dash", () => {
  assert.equal(fmtDuration(null), "–");
  assert.equal(fmtDuration(NaN), "–");
  assert.equal(fmtDuration(59.4), "59s");
  assert.equal(fmtDuration(61), "1m 1s");
  assert.equal(fmtDuration(3600 + 120 + 5), "1h 2m");
});

test("a naive time from SQLite is read as UTC", () => {
  assert.equal(parseTime("2026-01-02T12:04:00").toISOString(), "2026-01-02T12:04:00.000Z");
  assert.equal(parseTime("2026-01-02T12:04:00+01:00").toISOString(), "2026-01-02T11:04:00.000Z");
  assert.equal(parseTime("not a time"), null);
  assert.equal(parseTime(""), null);
  assert.equal(utcText("2026-01-02T12:04:05"), "2026-01-02 12:04:05 UTC");
});

test("the lost-connection text says since when only when it knows", () => {
  assert.equal(lostText(null), "connection lost — reconnecting…");
  assert.match(lostText(new Date()), /^connection lost — reconnecting… \(shown as of .+\)$/);
});

test("keys group by their first segment: named groups, then other, then System", () => {
  assert.equal(keyGroup("train/loss"), "train");
  assert.equal(keyGroup("loss"), "");
  assert.equal(keyGroup("/odd"), "");
  assert.equal(groupTitle(""), "other");
  assert.equal(groupTitle("sys"), "System");
  assert.equal(groupTitle("val"), "val/");
  assert.equal(stepTitle("sys/cpu_percent"), "seconds since start");
  assert.equal(stepTitle("train/loss"), "step");
  const keys = ["sys/cpu", "loss", "val/acc", "Train/x", "train/loss", "epoch"];
  assert.deepEqual(keys.sort(compareKeys), ["Train/x", "train/loss", "val/acc", "epoch", "loss", "sys/cpu"]);
});

test("a progress bar's rewritten line shows what it shows last, after its rank prefix", () => {
  assert.equal(collapseCarriageReturns("plain\nlines"), "plain\nlines");
  assert.equal(collapseCarriageReturns("10%\r50%\r100%\ndone\n"), "100%\ndone\n");
  assert.equal(collapseCarriageReturns("[rank1]: 1/3\r2/3\r"), "[rank1]: 2/3\r");
  assert.equal(collapseCarriageReturns("[rank1]: 1/3\r2/3\r" + "3/3\n"), "[rank1]: 3/3\n");
});

test("a run keeps its colour whatever runs are beside it", () => {
  assert.equal(runColor(1), runColor(17));
  assert.notEqual(runColor(1), runColor(2));
  assert.equal(runColor("3"), runColor(3));
  assert.equal(runColor("junk"), runColor(0));
});

test("values: numbers to 4 significant digits, long text cut", () => {
  assert.equal(fmtParam(0.000123456), "0.0001235");
  assert.equal(fmtParam(42), "42");
  assert.equal(fmtParam("x".repeat(30)), "x".repeat(23) + "…");
  assert.equal(fmtParam({a: 1}), '{"a":1}');
  assert.equal(fmtValue(null), "–");
  assert.equal(fmtValue(3.14159), "3.142");
  assert.equal(fmtValue("x".repeat(30)), "x".repeat(30));
});

test("run labels name the params that differ, short unless two end the same", () => {
  const runs = [
    {id: 1, params: {"params.lr": 0.1, "params.bs": 64, seed: 1}},
    {id: 2, name: "warm", params: {"params.lr": 0.01, "params.bs": 64, seed: 1}},
    {id: 3, params: {"params.lr": 0.01, "opt.lr": 2, seed: 1}},
  ];
  assert.deepEqual(differingParams(runs), ["opt.lr", "params.bs", "params.lr"]);
  assert.deepEqual(differingParams(runs.slice(0, 1)), []);
  const labels = runLabels(runs);
  assert.equal(labels.get(1), "run 1 · bs=64 params.lr=0.1");
  assert.equal(labels.get(2), "run 2 warm · bs=64 params.lr=0.01");
  assert.equal(labels.get(3), "run 3 · opt.lr=2 params.lr=0.01");
});

test("the seed varies by design: left out of the differing params and labels unless asked", () => {
  const runs = [
    {id: 1, params: {"params.lr": 0.1, seed: 11, "params.seed": 1, "hparams.random_seed": 5}},
    {id: 2, params: {"params.lr": 0.1, seed: 3843, "params.seed": 2, "hparams.random_seed": 6}},
  ];
  for (const key of ["seed", "params.seed", "hparams.random_seed"]) assert.ok(isSeedParam(key), key);
  for (const key of ["params.seeds", "seed_lr", "params.lr"]) assert.ok(!isSeedParam(key), key);
  assert.deepEqual(differingParams(runs), []);
  assert.deepEqual(differingParams(runs, true), ["hparams.random_seed", "params.seed", "seed"]);
  assert.equal(runLabels(runs).get(2), "run 2");
  assert.equal(runLabels(runs, true).get(2), "run 2 · random_seed=6 params.seed=2 seed=3843");
});

test("a multi-node run's GPU says its node and hosts; a queued one its GPUs per host", () => {
  assert.equal(nodeText({run_hosts: ["b", "a"], node: 1}), "node 1 of 2: b, a");
  assert.equal(nodeText({run_hosts: [], node: null}), "");
  assert.equal(nodeText({}), "");
  assert.equal(gpusText({gpus: 2, nodes: 3}), "2 × 3 hosts");
  assert.equal(gpusText({gpus: 1, nodes: 1}), "1");
  assert.equal(gpusText({gpus: 4}), "4");
});
