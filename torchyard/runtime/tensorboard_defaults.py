"""Live defaults for torch's TensorBoard SummaryWriter inside a job.

SummaryWriter flushes every 120 s by default, so a tutorial script's scalars could reach its
event file (and the worker's forwarder, worker.tensorboard_events) only every two minutes. (With
tensorboard alone, its pure-Python file layer appends each record at once; when TensorFlow is
installed, tf.io.gfile buffers until that flush.)
`install()` arranges that once the job imports `torch.utils.tensorboard`, a SummaryWriter
created without those arguments gets
- `flush_secs=1`, and
- `log_dir=$TORCHYARD_TENSORBOARD_DIR` when that variable is set (with `comment=...` and no
  log_dir: the sub-directory named by the comment, so writers of a sweep stay apart, as
  torch's own default `runs/<time>_<host><comment>` keeps them). `log_dir=None` counts as
  no log_dir, as it does for torch.
Arguments the caller passes always win.

Nothing is imported eagerly: importing tensorboard costs about half a second and most jobs
never use it. A `sys.meta_path` finder wraps the loader of `torch.utils.tensorboard.writer`
and patches `SummaryWriter.__init__` right after the module has run. Standard library only:
this runs in every training process.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from torchyard.contract import TENSORBOARD_DIR_VAR

TARGET = "torch.utils.tensorboard.writer"
DIR_VAR = TENSORBOARD_DIR_VAR
FLUSH_SECS = 1
_MARK = "_torchyard_defaults"


def install() -> None:
    """Patch SummaryWriter now if its module is loaded, else when it is first imported."""
    module = sys.modules.get(TARGET)
    if module is not None:
        patch(module)
    if not any(isinstance(finder, _Finder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _Finder())


def patch(module: ModuleType) -> None:
    """Give `module.SummaryWriter` torchyard's defaults (idempotent)."""
    cls = getattr(module, "SummaryWriter", None)
    original = getattr(cls, "__init__", None)
    if cls is None or original is None or getattr(original, _MARK, False):
        return
    import inspect  # only once tensorboard is being imported anyway

    signature = inspect.signature(original)
    params = signature.parameters

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        try:
            bound = signature.bind(self, *args, **kwargs)
        except TypeError:
            original(self, *args, **kwargs)  # let SummaryWriter say what is wrong
            return
        given = bound.arguments
        root = os.environ.get(DIR_VAR)
        if root and "log_dir" in params and given.get("log_dir") is None:
            comment = given.get("comment") or ""
            given["log_dir"] = os.path.join(root, comment) if comment else root
        if "flush_secs" in params and "flush_secs" not in given:
            given["flush_secs"] = FLUSH_SECS
        original(*bound.args, **bound.kwargs)

    setattr(__init__, _MARK, True)
    cls.__init__ = __init__


class _PatchingLoader:
    """Runs the real loader, then patches the module; everything else is the real loader's."""

    def __init__(self, loader: Any) -> None:
        self._loader = loader

    def create_module(self, spec: Any) -> ModuleType | None:
        create = getattr(self._loader, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        patch(module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


class _Finder:
    """Finds `torch.utils.tensorboard.writer` through the other finders, with its loader
    wrapped; stays out of every other import."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> Any:
        if fullname != TARGET:
            return None
        for finder in sys.meta_path:
            find_spec = getattr(finder, "find_spec", None)
            if finder is self or find_spec is None:
                continue
            spec = find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _PatchingLoader(spec.loader)
                return spec
        return None

    def invalidate_caches(self) -> None:
        pass
