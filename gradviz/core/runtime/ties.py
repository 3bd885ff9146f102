"""Tied (shared) parameters: one tensor under several names, found by identity or storage, never by name.

Most language models tie the output projection to the input embedding (``lm_head.weight`` *is*
``wte.weight``). PyTorch already treats one Parameter object reached under two names as one
parameter (``named_parameters()`` yields it once, under its first name). Two other forms are the
same tie written differently, and gradviz makes both one parameter:

- two Parameter objects over the same bytes (same storage, offset, shape, stride and dtype) — what
  ``torch.export`` programs hold once rebuilt (``ExportedProgram.module()`` lifts a tied weight once
  and makes one Parameter per name over one storage): ``retie`` makes the names one object again;
- a state_dict that stores the shared tensor once (``save_pretrained`` leaves the tied key out;
  safetensors' ``save_model`` keeps one name of each group, whichever it likes): ``tie_groups``
  says which keys of the model are the same tensor, so one of them present fills them all.
"""
from __future__ import annotations

from torch import nn

__all__ = ["tie_groups", "tied_with", "retie", "view_key"]


def view_key(t) -> tuple:
    """What makes two tensors the same bytes: the storage they view and how they view it. An empty tensor
    holds no bytes: tied by identity only (FSDP's flat parameter gives the parameters a rank does not hold
    as empty views, several at one offset)."""
    if t.numel() == 0:
        return ("object", id(t))
    try:
        ptr = t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):   # meta tensors, tensor subclasses without storage
        return ("object", id(t))
    if ptr == 0:                                   # no memory yet (meta, zero-size): only identity ties
        return ("object", id(t))
    return ("view", ptr, t.storage_offset(), tuple(t.shape), tuple(t.stride()), t.dtype, str(t.device))


def _groups(named) -> list[list[str]]:
    by_key: dict[tuple, list[str]] = {}
    for name, t in named:
        by_key.setdefault(view_key(t), []).append(name)
    return [names for names in by_key.values() if len(names) > 1]


def tie_groups(model: nn.Module) -> list[list[str]]:
    """The names of the model's parameters and buffers that are one tensor (same object or same bytes),
    each group in the model's own order (its first name is the one ``named_parameters`` keeps)."""
    named = list(model.named_parameters(remove_duplicate=False)) + list(model.named_buffers(remove_duplicate=False))
    return _groups(named)


def tied_with(model: nn.Module) -> dict[str, list[str]]:
    """Parameter name (as ``named_parameters`` gives it) -> the other names of the same tensor."""
    out: dict[str, list[str]] = {}
    for names in _groups(model.named_parameters(remove_duplicate=False)):
        out[names[0]] = names[1:]
    return out


def retie(model: nn.Module) -> list[list[str]]:
    """Make parameters that share their bytes one Parameter object (the first name's), as a tie written in
    Python is; returns the groups retied. Gradients then add up in one ``.grad`` and every check counts the
    parameter once, as in the model before it was saved."""
    done = []
    for names in _groups(model.named_parameters(remove_duplicate=False)):
        first = model.get_parameter(names[0])
        changed = False
        for name in names[1:]:
            owner_name, _, attr = name.rpartition(".")
            owner = model.get_submodule(owner_name)
            if owner._parameters.get(attr) is not first:
                owner._parameters[attr] = first      # what nn.Module.__setattr__ does for a Parameter
                changed = True
        if changed:
            done.append(names)
    return done
