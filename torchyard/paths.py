"""The one test of "is this path under that root", for every part of torchyard: the server
(app.runs.files.job_files re-exports it beside its link-free walk), the worker, and the client CLI's
packer, which runs in the base install without the server (tests/test_contract_paths.py keeps
``is_relative_to`` here)."""

from __future__ import annotations

from pathlib import Path


def within(path: Path, root: Path) -> bool:
    """Whether ``path`` is ``root`` or below it, by its components (``/a/bc`` is not under
    ``/a/b``). Lexical: the caller resolves both first when links may be on the way."""
    return path == root or path.is_relative_to(root)
