"""The job's half of the reproducibility record: what this process actually runs with.

Written once by the chief, right after seeding, to ``environment.json`` in the run directory;
the worker merges it with its own half (host, leased GPUs, the workspace's git state) into the
run's record. Versions are read from the running interpreter, not from the worker, because
the two can differ (a worker image updated while a job trains, a venv per job later).
"""

from __future__ import annotations

import json
import os
import platform
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

from torchyard.contract import RunPaths
from torchyard.runtime.member_view import member_view

DETERMINISM_VARS = ("PYTHONHASHSEED", "CUBLAS_WORKSPACE_CONFIG", "CUDA_VISIBLE_DEVICES")


def packages() -> list[str]:
    """Every installed distribution as ``name==version``, sorted, each name once."""
    found: dict[str, str] = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if name and name.lower() not in found:
            found[name.lower()] = f"{name}=={dist.version}"
    return [found[k] for k in sorted(found)]


def _gpus() -> list[dict[str, Any]]:
    if not torch.cuda.is_available():
        return []
    out = []
    for index in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(index)
        out.append(
            {
                "index": index,
                "name": props.name,
                "memory_bytes": int(props.total_memory),
                "capability": f"{props.major}.{props.minor}",
            }
        )
    return out


def collect(*, seed: int, deterministic: bool, world_size: int) -> dict[str, Any]:
    cudnn = torch.backends.cudnn
    return {
        "python": sys.version.split()[0],
        # which environment (the job base or the run's own), not where the host keeps it
        "python_executable": member_view(_environment_python()),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": cudnn.version() if cudnn.is_available() else None,  # type: ignore[no-untyped-call]
        "gpus": _gpus(),
        "seed": seed,
        "world_size": world_size,
        "determinism": {
            "deterministic": deterministic,
            "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
            "cudnn_benchmark": bool(cudnn.benchmark),
            "cudnn_deterministic": bool(cudnn.deterministic),
            **{name.lower(): os.environ.get(name) for name in DETERMINISM_VARS},
        },
        "packages": packages(),
    }


def write(run_dir: Path, record: dict[str, Any]) -> Path:
    """Atomically: the worker may read the file at any moment."""
    path = RunPaths(run_dir).environment
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=1), encoding="utf-8")
    os.replace(tmp, path)
    return path


def _environment_python() -> str:
    """The interpreter as ``<environment folder>/bin/python``: the folder's name says which
    environment (``base-<hash>``, a run's own), its place on the host is the host's."""
    executable, prefix = Path(sys.executable), Path(sys.prefix)
    if prefix in executable.parents:
        return str(prefix.name / executable.relative_to(prefix))
    return executable.name
