# ruff: noqa: I001  (the order shows which modules are this folder's own)
"""A script whose folder holds its own worker.py, app.py and torchyard_utils.py: none of them
may shadow what torchyard runs inside the job."""

import app  # this folder's app.py, not torchyard's server
import torchyard_utils
import worker  # this folder's worker.py

import torchyard

assert app.OWN == "app" and worker.OWN == "worker", (app.__file__, worker.__file__)

run = torchyard.init(config={"steps": 20})
for step in range(1, run.config["steps"] + 1):
    run.log({"shadow/value": torchyard_utils.value(step)}, step=step)
print("logged", run.config["steps"], "points from", worker.__file__)
# A relative path, as under `python train.py` run from this folder; a file the run writes.
with open("data/file.txt") as f:
    print("read:", f.read().strip())
with open("written-by-the-run.txt", "w") as f:
    f.write("mine")
