"""Digit images for the gradviz samples (numpy only; no scikit-learn, no downloads).

By default this reads ``data/digits.npz`` next to this file: the 1,797 UCI 8x8
handwritten digits (pixel values 0..16; see ``data/DIGITS_LICENSE.md``). Every
``HELD_OUT_EVERY``-th sample (indices 5, 11, 17, ...: 299 digits) forms the fixed
held-out set; the other 1,498 are for training. (An interleaved split, because the
file's tail is written by different people and is not representative.)

If the environment variable ``GRADVIZ_MNIST`` names a folder holding the MNIST IDX
files (``train-images-idx3-ubyte``, ``train-labels-idx1-ubyte``, ``t10k-images-idx3-ubyte``,
``t10k-labels-idx1-ubyte``, each optionally ``.gz``-compressed), MNIST's 28x28
images are used instead (train = the 60k training set, held-out = the 10k test set).

Everything is loaded lazily, on the first call, and cached.
"""
from __future__ import annotations

import functools
import gzip
import os
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch

DATA_DIR = Path(__file__).resolve().parent / "data"
DIGITS_NPZ = DATA_DIR / "digits.npz"
HELD_OUT_EVERY = 6      # sample i is held out when i % 6 == 5 (299 of 1,797)
MNIST_ENV = "GRADVIZ_MNIST"

# IDX type codes (http://yann.lecun.com/exdb/mnist/): code -> big-endian numpy dtype
_IDX_DTYPES = {
    0x08: np.dtype(">u1"),
    0x09: np.dtype(">i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}


class Digits(NamedTuple):
    """Images as float32 in [0, 1], shape (N, 1, H, W); labels as int64, shape (N,)."""

    train_x: torch.Tensor
    train_y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor

    @property
    def side(self) -> int:
        return int(self.train_x.shape[-1])

    @property
    def n_pixels(self) -> int:
        return int(self.train_x.shape[-1] * self.train_x.shape[-2])


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """Read one IDX file (optionally gzip-compressed) into a numpy array.

    Format: two zero bytes, a type code, the number of dimensions ``n``, then ``n``
    big-endian uint32 sizes, then the data in big-endian row-major order.
    """
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        raw = f.read()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0:
        raise ValueError(f"{path}: not an IDX file (bad magic number)")
    code, ndim = raw[2], raw[3]
    if code not in _IDX_DTYPES:
        raise ValueError(f"{path}: unknown IDX data type 0x{code:02x}")
    dtype = _IDX_DTYPES[code]
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise ValueError(f"{path}: truncated IDX header")
    shape = tuple(int(s) for s in np.frombuffer(raw, dtype=">u4", count=ndim, offset=4))
    count = int(np.prod(shape, dtype=np.int64)) if shape else 1
    if len(raw) - header < count * dtype.itemsize:
        raise ValueError(f"{path}: truncated IDX data (expected shape {shape})")
    data = np.frombuffer(raw, dtype=dtype, count=count, offset=header)
    return data.reshape(shape).astype(dtype.newbyteorder("="))


def _find_idx(folder: Path, stem: str) -> Path:
    # accept the official names and the common "train-images.idx3-ubyte" variant
    candidates = [stem, stem.replace("-idx", ".idx")]
    for name in candidates:
        for suffix in ("", ".gz"):
            p = folder / (name + suffix)
            if p.is_file():
                return p
    raise FileNotFoundError(f"{MNIST_ENV}={folder}: no {stem}[.gz] there")


def _to_tensors(images: np.ndarray, labels: np.ndarray, scale: float):
    x = torch.from_numpy(images.astype(np.float32) / scale).unsqueeze(1)  # N,1,H,W
    y = torch.from_numpy(labels.astype(np.int64))
    return x, y


def load_mnist(folder: str | os.PathLike) -> Digits:
    folder = Path(folder)
    parts = []
    for split in ("train", "t10k"):
        images = read_idx(_find_idx(folder, f"{split}-images-idx3-ubyte"))
        labels = read_idx(_find_idx(folder, f"{split}-labels-idx1-ubyte"))
        if images.ndim != 3 or labels.ndim != 1 or len(images) != len(labels):
            raise ValueError(f"{folder}: {split} images/labels do not match")
        parts.extend(_to_tensors(images, labels, 255.0))
    return Digits(*parts)


def load_uci_digits() -> Digits:
    with np.load(DIGITS_NPZ) as f:
        images, labels = f["images"], f["labels"]
    x, y = _to_tensors(images, labels, 16.0)
    held = torch.arange(len(y)) % HELD_OUT_EVERY == HELD_OUT_EVERY - 1
    return Digits(x[~held], y[~held], x[held], y[held])


@functools.lru_cache(maxsize=4)
def _load(mnist_dir: str | None) -> Digits:
    return load_mnist(mnist_dir) if mnist_dir else load_uci_digits()


def load() -> Digits:
    """The digits in use: MNIST if ``$GRADVIZ_MNIST`` is set, else the UCI 8x8 digits."""
    return _load(os.environ.get(MNIST_ENV) or None)


def train_batch(step: int, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A deterministic training batch for ``step``: images (B,1,H,W) and labels (B,)."""
    d = load()
    g = torch.Generator().manual_seed(int(step))
    idx = torch.randint(len(d.train_y), (batch_size,), generator=g)
    return d.train_x[idx], d.train_y[idx]


@torch.no_grad()
def accuracy(model: torch.nn.Module, flatten: bool, batch_size: int = 1024) -> float:
    """Held-out accuracy of ``model`` (evaluated in eval mode, on the model's device)."""
    d = load()
    try:
        device = next(model.parameters()).device
    except StopIteration:
        device = torch.device("cpu")
    was_training = model.training
    model.eval()
    try:
        correct = 0
        for i in range(0, len(d.test_y), batch_size):
            x = d.test_x[i:i + batch_size].to(device)
            if flatten:
                x = x.flatten(1)
            pred = model(x).argmax(dim=-1).cpu()
            correct += int((pred == d.test_y[i:i + batch_size]).sum())
    finally:
        model.train(was_training)
    return correct / len(d.test_y)
