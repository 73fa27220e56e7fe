"""The 8x8 handwritten digits the digits recipes train on, shipped inside this package.

The file is scikit-learn's bundled ``digits.csv.gz`` (57 KB; licence and origin in
``data/NOTICE`` beside it). It ships here so neither a job nor an install needs scikit-learn
and scipy (~190 MB) to find it, and built-in data never comes from the internet. numpy reads
it straight from the package through importlib.resources, so it works from a checkout, an
editable install and a wheel alike.
"""

from __future__ import annotations

import functools
from importlib import resources
from importlib.resources.abc import Traversable

import numpy as np

N_IMAGES = 1797
N_CLASSES = 10


def digits_csv() -> Traversable:
    """``data/digits.csv.gz`` inside the installed ``torchyard.recipes`` package."""
    return resources.files("torchyard.recipes") / "data" / "digits.csv.gz"


@functools.cache
def load_digits() -> tuple[np.ndarray, np.ndarray]:
    """``(images, labels)``: float32 images of shape (1797, 1, 8, 8) scaled to [0, 1]
    (the raw pixels are 0..16) and int64 labels 0..9. Cached: the file is parsed once.

    The arrays are marked read-only so the cached copy cannot be changed by a caller.
    """
    with resources.as_file(digits_csv()) as path:
        table = np.loadtxt(path, delimiter=",", dtype=np.float32)
    if table.shape != (N_IMAGES, 65):
        raise ValueError(f"unexpected digits table shape {table.shape}, wanted ({N_IMAGES}, 65)")
    images = (table[:, :64] / 16.0).reshape(-1, 1, 8, 8)
    labels = table[:, 64].astype(np.int64)
    images.flags.writeable = False
    labels.flags.writeable = False
    return images, labels
