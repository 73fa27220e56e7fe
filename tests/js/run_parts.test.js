// Pure parts of the run page and the runs table: the log tail's trimming and rank filter
// (app/static/run/log.js), the runs table's summary columns (app/static/runs_columns.js).
import assert from "node:assert/strict";
import {test} from "node:test";

import {logQuery, nodeRanks, rankLines, trimLog} from "../../app/static/run/log.js";
import {defaultSummaries, keyCounts, seconds, splitSummary, summaryKeys, tableParams} from "../../app/static/runs_columns.js";

test("the log keeps its last characters, from a line start when one is near", () => {
  assert.equal(trimLog("a\nb\n", 100), "a\nb\n");
  assert.equal(trimLog("first line\nsecond\n", 9), "second\n");
  assert.equal(trimLog("50%\r100%\n", 100), "100%\n");
});

test("the rank filter keeps that rank's whole lines and holds back a partial one", () => {
  const one = rankLines("", "[rank0]: a\n[rank1]: b\n[rank1]: par", "1");
  assert.deepEqual(one, {text: "[rank1]: b\n", partial: "[rank1]: par"});
  const two = rankLines(one.partial, "tial\n[rank0]: c\n", "1");
  assert.deepEqual(two, {text: "[rank1]: partial\n", partial: ""});
});

test("summary columns: keys of every run in key order, a loss's last and an accuracy's max first", () => {
  const runs = [{summary: {"val/acc": {}, "train/loss": {}}}, {summary: {"sys/cpu": {}, epoch: {}}}, {}];
  const keys = summaryKeys(runs);
  assert.deepEqual(keys, ["train/loss", "val/acc", "epoch", "sys/cpu"]);
  assert.deepEqual(defaultSummaries(keys), ["train/loss.last", "val/acc.max"]);
  assert.deepEqual(defaultSummaries(keys, "val/acc.last"), ["val/acc.last", "train/loss.last", "val/acc.max"]);
  assert.deepEqual(defaultSummaries(["epoch", "lr"]), ["epoch.last"]);
  assert.deepEqual(defaultSummaries([]), []);
  assert.deepEqual(splitSummary("val/acc.top1.max"), ["val/acc.top1", "max"]);
});

test("default summaries: the loss and accuracy most runs logged, a validation accuracy on a tie", () => {
  // A mixed experiment: two job runs log train/acc too, three MLflow runs only val/acc.
  const job = {summary: {"train/acc": {}, "train/loss": {}, "val/acc": {}, "sys/cpu_percent": {}}};
  const mlflow = {summary: {"val/acc": {}, "val/loss": {}, "acc_extra": {}}};
  const runs = [job, job, mlflow, mlflow, mlflow];
  const keys = summaryKeys(runs);
  assert.deepEqual(defaultSummaries(keys, undefined, keyCounts(runs)), ["val/loss.last", "val/acc.max"]);
  assert.deepEqual(defaultSummaries(keys, undefined, keyCounts([job])), ["train/loss.last", "val/acc.max"]);
  assert.deepEqual(defaultSummaries(["sys/cpu_percent", "epoch"]), ["epoch.last"]);
});

test("param columns: what differs among the runs that have it, never MLflow's system tags", () => {
  const job = (lr) => ({params: {"params.lr": lr, "resources.gpus": 0, deterministic: true, seed: lr}});
  const mlflow = (lr, file) => ({params: {"params.lr": lr, "tags.mlflow.source.name": file, "mlflow.user": file}});
  const runs = [job(0.1), job(0.01), mlflow(0.1, "a.py"), mlflow(0.2, "b.py")];
  assert.deepEqual(tableParams(runs), ["params.lr"]);
  assert.deepEqual(tableParams(runs, true), ["params.lr", "seed"]);
  assert.deepEqual(tableParams([job(0.1), job(0.1)]), []);
  assert.deepEqual(tableParams([job(0.1)]), []);
});

test("a run's duration runs to now while it has no end", () => {
  assert.equal(seconds(null, null), null);
  assert.equal(seconds("2026-01-01T00:00:00", "2026-01-01T00:01:30"), 90);
  assert.equal(seconds("2026-01-01T00:00:00Z", null, new Date("2026-01-01T00:00:10Z")), 10);
});

test("a node's ranks are its block of global ranks", () => {
  assert.deepEqual(nodeRanks(0, 2), [0, 1]);
  assert.deepEqual(nodeRanks(1, 2), [2, 3]);
  assert.deepEqual(nodeRanks(2, 1), [2]);
});

test("the log query names a node only past node 0 and a rank only when there are several", () => {
  assert.deepEqual(logQuery({tail: 10}), {tail: 10, offset: undefined, node: null, rank: null});
  assert.deepEqual(logQuery({node: 1, rank: "3", nodes: 2, nproc: 2, offset: 5}),
    {tail: undefined, offset: 5, node: 1, rank: "3"});
  assert.deepEqual(logQuery({node: 0, rank: "1", nodes: 2, nproc: 2, tail: 9}),
    {tail: 9, offset: undefined, node: null, rank: "1"});
  assert.deepEqual(logQuery({node: 1, rank: "", nodes: 2, nproc: 1}),
    {tail: undefined, offset: undefined, node: 1, rank: null});
  assert.equal(logQuery({rank: "0", nodes: 1, nproc: 1}).rank, null);  // one process: every line
});
