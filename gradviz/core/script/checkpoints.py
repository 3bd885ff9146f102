"""Saved files a user may try to open: torch.export programs, state_dict checkpoints, pickled models.

- A ``torch.export`` program (``.pt2``, from ``torch.export.save``) is a model: it opens
  directly (``torch.export.load`` reads its graph and tensors; nothing arbitrary is unpickled).
- A state_dict checkpoint (``.pt``, ``.pth``, ``.bin``, ``.ckpt``, ``.safetensors``) holds
  weights, not a model: ``refusal`` says so and what to do instead (open the script or callable
  that builds the model, with ``--weights FILE``).
- ``load_weights`` loads such a file into a built model: safetensors, or
  ``torch.load(weights_only=True)`` — never unpickling arbitrary objects.
"""
from __future__ import annotations

import logging
import os
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from gradviz.core.runtime.errors import ScriptError

log = logging.getLogger(__name__)

__all__ = ["PROGRAM_SUFFIXES", "WEIGHT_SUFFIXES", "load_program", "load_weights", "read_state_dict", "refusal"]

PROGRAM_SUFFIXES = (".pt2",)
WEIGHT_SUFFIXES = (".pt", ".pth", ".bin", ".ckpt", ".safetensors")


def load_program(path: str | os.PathLike) -> Any:
    """The ``ExportedProgram`` saved at ``path``, or a ScriptError naming the file.

    Loaded on the CPU whatever default device is in force: under ``torch.device("meta")`` (the
    size probe of ``core/script/meta.py``) torch's loader fails over to its older format with a logged traceback.
    """
    try:
        with torch.device("cpu"):
            return torch.export.load(str(path))
    except FileNotFoundError:
        raise ScriptError(f"no such program: {path}", path=str(path)) from None
    except Exception as exc:  # a corrupt archive, another torch's format: one message, the reason logged
        log.debug("torch.export.load(%s) failed", path, exc_info=True)
        raise ScriptError(f"cannot load the torch.export program: {type(exc).__name__}: {exc}",
                          path=str(path)) from None


def _is_torchscript(path: Path) -> bool:
    try:
        with zipfile.ZipFile(path) as archive:
            return any(name.split("/", 1)[-1].startswith(("code/", "constants.pkl")) for name in archive.namelist())
    except (zipfile.BadZipFile, OSError):
        return False


def read_state_dict(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """The tensors of a weights file, unwrapped from ``{"state_dict": ...}`` / ``{"model": ...}``."""
    path = Path(path)
    if not path.is_file():
        raise ScriptError(f"no such weights file: {path}", path=str(path))
    if path.suffix == ".safetensors":
        try:
            from safetensors.torch import load_file
        except ImportError:
            raise ScriptError("reading .safetensors needs the safetensors package: pip install safetensors",
                              path=str(path)) from None
        try:
            return load_file(str(path))
        except Exception as exc:  # safetensors' own errors (SafetensorError) share no base class
            raise ScriptError(f"not a readable safetensors file: {exc}", path=str(path)) from None
    if path.suffix.lower() in PROGRAM_SUFFIXES:
        raise ScriptError("this is a torch.export program (.pt2), a whole model, not a state_dict: open it as the "
                          f"model (gradviz {path.name}) instead of giving it to --weights", path=str(path))
    if _is_torchscript(path):
        raise ScriptError("this is a TorchScript archive (torch.jit.save), not a state_dict: gradviz draws the "
                          "autograd graph of a Python model; open the script or callable that builds it",
                          path=str(path))
    try:
        data = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as exc:  # UnpicklingError for a pickled model, and torch's format errors
        if "weights_only" in str(exc) or "Unpickl" in type(exc).__name__:
            raise ScriptError("this file holds pickled Python objects (e.g. torch.save(model)), not only weights; "
                              "gradviz never unpickles arbitrary objects. Save model.state_dict() instead, and open "
                              "the script or callable that builds the model with --weights FILE",
                              path=str(path)) from None
        raise ScriptError(f"cannot read weights: {type(exc).__name__}: {exc}", path=str(path)) from None
    return _unwrap(data, path)


def _unwrap(data: Any, path: Path) -> dict[str, torch.Tensor]:
    for key in ("state_dict", "model_state_dict", "model"):
        if isinstance(data, Mapping) and isinstance(data.get(key), Mapping):
            data = data[key]
            break
    if not isinstance(data, Mapping) or not data or not all(isinstance(v, torch.Tensor) for v in data.values()):
        keys = f" with keys {', '.join(map(str, list(data)[:5]))}" if isinstance(data, Mapping) else ""
        raise ScriptError(f"no state_dict in this file (found a {type(data).__name__}{keys})", path=str(path))
    return dict(data)


def load_weights(model: nn.Module, path: str | os.PathLike) -> None:
    """Load a weights file into ``model``; every missing, unexpected or mis-shaped key is named."""
    state = read_state_dict(path)
    own = model.state_dict()
    if not set(state) & set(own) and all(k.startswith("module.") for k in state):
        state = {k[len("module."):]: v for k, v in state.items()}     # saved from a DDP/DataParallel wrapper
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    shapes = [f"{k} {tuple(state[k].shape)} vs the model's {tuple(own[k].shape)}" for k in own
              if k in state and state[k].shape != own[k].shape]
    if missing or unexpected or shapes:
        parts = [f"{len(missing)} missing ({', '.join(missing[:4])}{', ...' if len(missing) > 4 else ''})" if missing
                 else "", f"{len(unexpected)} unexpected ({', '.join(unexpected[:4])}"
                 f"{', ...' if len(unexpected) > 4 else ''})" if unexpected else "",
                 f"shapes differ: {'; '.join(shapes[:3])}" if shapes else ""]
        raise ScriptError("the weights do not fit the model: " + ", ".join(p for p in parts if p),
                          path=str(path))
    model.load_state_dict(state)


def refusal(path: str | os.PathLike) -> str | None:
    """Why ``path`` cannot be opened as a model (a weights file, a pickled model), or None."""
    path = Path(path)
    if path.suffix.lower() not in WEIGHT_SUFFIXES:
        return None
    try:
        tensors = read_state_dict(path)
    except ScriptError as exc:
        return f"{path}: {exc.message}"
    return (f"{path} holds weights ({len(tensors)} tensors), not a model: open the script or the callable that "
            f"builds the model and load them with --weights, e.g. gradviz my_model.py --weights {path.name} "
            f"(or gradviz mypkg.models:build --input SHAPE --weights {path.name})")
