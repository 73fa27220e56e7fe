"""`torchyard import`'s missing extras: the command names the extra to install, before it reads
the source or asks the server anything (a subprocess where the reader's library cannot be
imported, and a server URL nothing listens on: reaching it would be another error)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.stack import free_port

# Makes `import <name>` fail as it does where the package is not installed.
BLOCKER = """
import sys
class _Missing:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {blocked!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}")
        return None
sys.meta_path.insert(0, _Missing())
"""


@pytest.mark.parametrize(
    ("kind", "blocked", "extra"),
    [
        ("mlflow", "mlflow", "import-mlflow"),
        ("tensorboard", "tensorboard", "import-tensorboard"),
        ("wandb", "wandb", "import-wandb"),
        ("aim", "aim", "import-aim"),
    ],
)
def test_a_missing_reader_names_its_extra_before_anything_is_read(
    kind: str, blocked: str, extra: str, tmp_path: Path
) -> None:
    (tmp_path / "sitecustomize.py").write_text(BLOCKER.format(blocked={blocked}))
    source = tmp_path / "source"
    source.mkdir()
    nobody = f"http://127.0.0.1:{free_port()}"
    done = subprocess.run(
        [sys.executable, "-m", "torchyard.cli", "import", kind, str(source),
         "--server", nobody, "--token", "t"],
        env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert f"pip install 'torchyard[{extra}]'" in done.stderr
    assert "cannot reach" not in done.stderr and "Traceback" not in done.stderr
