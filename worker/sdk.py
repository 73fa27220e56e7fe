"""Kept for scripts written before the ``torchyard`` package: ``from worker.sdk import init``.

New code writes ``import torchyard; run = torchyard.init(...)``.
"""

from torchyard.sdk import Run, init

__all__ = ["Run", "init"]
