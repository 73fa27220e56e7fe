"""The caches one user's runs share on a host: HF_HOME and TORCH_HOME.

HOME is per run (``<run_dir>/home``), so a library cache under it would download the same
model again for every run. Hugging Face and torch.hub are pointed instead at
``<data_dir>/caches/<user id>/{huggingface,torch}``: the data dir is hidden from every job,
and the sandbox binds this one folder read-write into that user's jobs only, never another
user's (worker/sandbox.py, ``SandboxSpec.shared``).

A root worker gives each run a uid of its own, so the runs of one user must share the
folder through a group: each user has a gid (``user_gid``), the job gets it as its one
supplementary group, the folder is ``root:<gid>`` with mode 2770 (new files and folders keep
the group), and a sandboxed job's umask is 002 (process.py), so what one run writes the next
can read and add to. A worker that is not root runs every job as itself: the folder is its
own, 0700.
"""

from __future__ import annotations

import os
from pathlib import Path

CACHES = "caches"
VARIABLES = {"HF_HOME": "huggingface", "TORCH_HOME": "torch"}


def user_gid(owner_id: int, uid_base: int, uid_count: int) -> int:
    """The group of one user's runs: past the run uids' range (job_uid_base + count), so it
    is never a run's own gid. Two users may share one past ``uid_count`` users: harmless, as
    each one's cache is bound only into its own runs' sandboxes."""
    return uid_base + uid_count + owner_id % uid_count


def prepare(data_dir: Path, owner_id: int, gid: int | None) -> Path:
    """The user's cache folder, made and given to ``gid`` (a root worker) when needed."""
    parent = data_dir / CACHES
    parent.mkdir(mode=0o700, exist_ok=True)
    folder = parent / str(owner_id)
    folder.mkdir(mode=0o700, exist_ok=True)
    for sub in VARIABLES.values():
        (folder / sub).mkdir(mode=0o700, exist_ok=True)
    if gid is not None:
        for path in (folder, *(folder / sub for sub in VARIABLES.values())):
            info = os.lstat(path)
            if info.st_gid != gid or info.st_uid != 0:
                os.lchown(path, 0, gid)
            os.chmod(path, 0o2770)
    return folder


def variables(folder: Path) -> dict[str, str]:
    """HF_HOME and TORCH_HOME for a job whose user's cache is ``folder``."""
    return {name: str(folder / sub) for name, sub in VARIABLES.items()}
