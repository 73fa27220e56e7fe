// MLflow UI fragments to torchyard pages (app/static/lib/mlflow_links.js).
import assert from "node:assert/strict";
import {test} from "node:test";

import {mlflowTarget} from "../../app/static/lib/mlflow_links.js";

test("a run link of MLflow's UI names the run page, an experiment link the experiment page", () => {
  assert.equal(mlflowTarget("#/experiments/2/runs/63"), "/runs/63");
  assert.equal(mlflowTarget("#/experiments/2/runs/63/artifacts"), "/runs/63");
  assert.equal(mlflowTarget("#/experiments/7"), "/experiments/7");
  assert.equal(mlflowTarget("#/experiments/7?searchFilter=x"), "/experiments/7");
  assert.equal(mlflowTarget("#/experiments/2/runs/abc"), "/experiments/2"); // not a run id of ours
});

test("any other fragment stays where it is", () => {
  for (const hash of ["", "#", "#runs", "#/experiments/x/runs/1", "#/models"]) {
    assert.equal(mlflowTarget(hash), null, hash);
  }
});
