"""Seed every random number generator a training run touches.

The product promises that the same seed gives the same loss curve on CPU, step for step.
That only holds if *every* source of randomness is pinned: Python's ``random``, numpy's
global state, torch's CPU and CUDA generators, and (when ``deterministic``) the choice of
kernels, which cuDNN and cuBLAS otherwise make per call for speed.
"""

from __future__ import annotations

import os
import random

import numpy as np
import torch

# cuBLAS picks reduction orders per workspace; a fixed workspace config is what makes its
# GEMMs reproducible (https://docs.nvidia.com/cuda/cublas/#results-reproducibility).
CUBLAS_WORKSPACE_CONFIG = ":4096:8"


def seed_everything(seed: int, deterministic: bool = False) -> None:
    """Seed random, numpy, torch (CPU and all CUDA devices) and set the kernel policy.

    ``PYTHONHASHSEED`` only affects interpreters started after this call (DataLoader
    workers started with spawn, subprocesses); the launcher sets it for this interpreter
    before it starts. ``cudnn.benchmark`` is always off because autotuning picks kernels by
    timing, which differs from run to run. With ``deterministic`` torch raises on any op
    that has no deterministic implementation (``warn_only=False``), so a run that claims to
    be reproducible fails loudly instead of drifting silently. With ``deterministic=False``
    the flags are reset, so the call fully describes the process state whichever came before.
    """
    seed = int(seed)
    random.seed(seed)
    os.environ["PYTHONHASHSEED"] = str(seed)
    # numpy's legacy global seed must fit in 32 bits; torch takes 64.
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    # Lazily queued by torch when CUDA is not initialised yet, a no-op without CUDA.
    torch.cuda.manual_seed_all(seed)

    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = deterministic
    if (
        torch.are_deterministic_algorithms_enabled() != deterministic
        or torch.is_deterministic_algorithms_warn_only_enabled()
    ):
        # Only when the policy changes: a fresh job is already non-deterministic, and the
        # needless call was followed by DDP jobs hanging at exit (6 in 10, 0 in 20 without).
        torch.use_deterministic_algorithms(deterministic, warn_only=False)
    if deterministic:
        # Must be in the environment before cuBLAS initialises, i.e. before the first GEMM
        # on a GPU; seeding happens before the model is built, so this is early enough.
        os.environ["CUBLAS_WORKSPACE_CONFIG"] = CUBLAS_WORKSPACE_CONFIG
