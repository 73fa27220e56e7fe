"""The job's working directory in the workspace's terms, and a script's command line.

Where a script may come from is the server's rule (app.experiments.workspace.resolve_script,
checked by the API and again by the worker right before launch); the git state of a checkout
is read with torchyard.git_state (the client's and the worker's alike).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


def prepare_work_dir(work: Path, script_dir: Path | None) -> None:
    """The job's working directory, with the script's folder mirrored into it as links.

    ``./data/file.txt`` and ``--data ./data`` then resolve as under ``python train.py`` run
    from the script's folder, while a file the run creates lands here, in its own directory:
    not in the shared workspace, where runs of the same script would overwrite each other.
    (A write through a link still reaches the linked file.) Names already present, from an
    earlier attempt, are kept."""
    work.mkdir(parents=True, exist_ok=True)
    if script_dir is None:
        return
    for entry in sorted(script_dir.iterdir()):
        link = work / entry.name
        if not link.exists() and not link.is_symlink():
            link.symlink_to(entry)


def script_argv(args: Sequence[str], params: Mapping[str, Any]) -> list[str]:
    """The script's command-line arguments: ``args`` as given, then one flag per param.

    ``{"lr": 0.01, "amp": true, "tag": "x"}`` -> ``--lr=0.01 --amp --tag=x``: the ``=`` form
    keeps values that start with a dash whole; ``true`` is a bare flag (argparse's
    ``store_true``) and ``false`` leaves the flag out.
    """
    argv = [str(a) for a in args]
    for key, value in params.items():
        if value is True:
            argv.append(f"--{key}")
        elif value is False or value is None:
            continue
        else:
            argv.append(f"--{key}={value}")
    return argv
