"""scikit-learn's bundled 8x8 digits, read without importing scikit-learn.

The job must not import sklearn (it would drag scipy and ~1 s of imports into every
training process, and the job's dependency contract is stdlib + numpy + torch), and built-in
data must not come from the internet. scikit-learn ships the data as a plain CSV, so we
locate the installed package with ``find_spec`` (which does not import it) and read the
file with numpy.
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

import numpy as np

N_IMAGES = 1797
N_CLASSES = 10


def digits_csv_path() -> Path:
    """Path of ``sklearn/datasets/data/digits.csv.gz`` in the installed scikit-learn."""
    spec = importlib.util.find_spec("sklearn")
    if spec is None or spec.origin is None:
        raise FileNotFoundError(
            "scikit-learn is not installed: the digits recipe reads the digits.csv.gz it ships"
        )
    path = Path(spec.origin).parent / "datasets" / "data" / "digits.csv.gz"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing from the scikit-learn installation")
    return path


@functools.cache
def load_digits() -> tuple[np.ndarray, np.ndarray]:
    """``(images, labels)``: float32 images of shape (1797, 1, 8, 8) scaled to [0, 1]
    (the raw pixels are 0..16) and int64 labels 0..9. Cached: the file is parsed once.

    The arrays are marked read-only so the cached copy cannot be changed by a caller.
    """
    table = np.loadtxt(digits_csv_path(), delimiter=",", dtype=np.float32)
    if table.shape != (N_IMAGES, 65):
        raise ValueError(f"unexpected digits table shape {table.shape}, wanted ({N_IMAGES}, 65)")
    images = (table[:, :64] / 16.0).reshape(-1, 1, 8, 8)
    labels = table[:, 64].astype(np.int64)
    images.flags.writeable = False
    labels.flags.writeable = False
    return images, labels
