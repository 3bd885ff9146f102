"""Saved files a user may try to open: torch.export programs, state_dict checkpoints, pickled models.

- A ``torch.export`` program (``.pt2``, from ``torch.export.save``) is a model: it opens
  directly, read by gradviz's own reader (``program_archive.py``: never ``torch.export.load``, which
  runs code from such files), with nothing unpickled but scanned tensors.
- A state_dict checkpoint (``.pt``, ``.pth``, ``.bin``, ``.ckpt``, ``.safetensors``) holds
  weights, not a model: ``refusal`` says so and what to do instead (open the script or callable
  that builds the model, with ``--weights FILE``).
- ``load_weights`` loads such a file into a built model: safetensors, or a pickle scanned opcode by
  opcode and then ``torch.load(weights_only=True)`` — never unpickling arbitrary objects.
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
from gradviz.core.runtime.messages import short_path
from gradviz.core.runtime.paths import PathError, open_regular, require_regular_file
from gradviz.core.script.file_errors import ARCHIVE_ERRORS, FileRefused, UnsafeFile
from gradviz.core.script.pickle_scan import is_torch_zip, load_pickled_tensors
from gradviz.core.script.program_archive import load_program as read_program

log = logging.getLogger(__name__)

__all__ = ["PROGRAM_SUFFIXES", "WEIGHT_SUFFIXES", "load_program", "load_weights", "read_state_dict", "refusal"]

PROGRAM_SUFFIXES = (".pt2",)
WEIGHT_SUFFIXES = (".pt", ".pth", ".bin", ".ckpt", ".safetensors")


def load_program(path: str | os.PathLike) -> Any:
    """The ``ExportedProgram`` saved at ``path``, read without running anything in it
    (``program_archive.load_program``), or a ScriptError naming the file and the member refused.

    Loaded on the CPU whatever default device is in force (the size probe of ``core/script/meta.py``
    builds under ``torch.device("meta")``).
    """
    try:
        with torch.device("cpu"):
            return read_program(str(path))
    except FileNotFoundError:
        raise ScriptError(f"no such program: {short_path(path)}", path=str(path)) from None
    except PathError as exc:
        raise ScriptError(exc.args[0]) from None
    except FileRefused as exc:
        raise ScriptError(f"cannot load the torch.export program: {exc.message}", path=str(path)) from None


def _is_torchscript(path: Path) -> bool:
    try:
        with open_regular(path, "--weights") as handle, zipfile.ZipFile(handle) as archive:
            return any(name.split("/", 1)[-1].startswith(("code/", "constants.pkl")) for name in archive.namelist())
    except ARCHIVE_ERRORS:
        return False     # not a readable zip: the weights reader says what it is


def read_state_dict(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """The tensors of a weights file, unwrapped from ``{"state_dict": ...}`` / ``{"model": ...}``."""
    path = Path(path)
    try:
        require_regular_file(path, "the weights file")
    except PathError as exc:
        raise ScriptError(exc.args[0]) from None
    except OSError:
        raise ScriptError(f"no such weights file: {short_path(path)}", path=str(path)) from None
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
        with open_regular(path, "the weights file") as handle:
            # a torch.save zip is scanned opcode by opcode first; the legacy format (torch < 1.6) is left to
            # weights_only alone (it refuses every __reduce__ payload on torch 2.6 and newer too)
            data = load_pickled_tensors(handle, path.name, scan=is_torch_zip(handle))
    except UnsafeFile:
        raise ScriptError("this file holds pickled Python objects (e.g. torch.save(model)), not only weights; "
                          "gradviz never unpickles arbitrary objects. Save model.state_dict() instead, and open "
                          "the script or callable that builds the model with --weights FILE",
                          path=str(path)) from None
    except FileRefused as exc:
        raise ScriptError(f"cannot read weights: {exc.message}", path=str(path)) from None
    except OSError as exc:
        raise ScriptError(f"cannot read weights: {exc.strerror or exc}", path=str(path)) from None
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
    """Load a weights file into ``model``; every missing, unexpected or mis-shaped key is named.

    Tied tensors (``core/runtime/ties.py``: one tensor under several names, found by identity or storage)
    are one key: a file that holds any one name of a group fills the whole group, as ``save_pretrained``
    (which leaves the tied name out) and safetensors' ``save_model`` (which keeps one name of each) write it.
    """
    from gradviz.core.runtime.ties import tie_groups

    state = read_state_dict(path)
    own = model.state_dict()
    if not set(state) & set(own) and all(k.startswith("module.") for k in state):
        state = {k[len("module."):]: v for k, v in state.items()}     # saved from a DDP/DataParallel wrapper
    twins = {name: group for group in tie_groups(model) for name in group}
    # a tied key the file lacks is filled from the name of its group the file holds (one tensor, one value)
    filled = {k: state[next(n for n in twins[k] if n in state)] for k in own
              if k not in state and any(n in state for n in twins.get(k, ()))}
    missing = sorted(set(own) - set(state) - set(filled))
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
    differ = [group for group in twins.values() if not _same_values([state[n] for n in group if n in state])]
    if differ:
        raise ScriptError(f"the weights do not fit the model: {' and '.join(differ[0])} are one tensor in the model "
                          "(tied) but hold different values in the file", path=str(path))
    model.load_state_dict({**state, **filled})


def _same_values(tensors: list[torch.Tensor]) -> bool:
    return all(t is tensors[0] or torch.equal(t, tensors[0]) for t in tensors[1:])


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
