"""Pickled tensors read without unpickling anything else: an opcode scan, then torch's weights-only load.

Some members of files gradviz reads are pickles whatever the saver wanted (a ``.pt`` state_dict, a
``.pt2``'s stored sample inputs, every member of a torch 2.6 program). ``load_pickled_tensors`` reads
one only after ``scan_pickle`` walked its opcodes (``pickletools``: nothing is built) and found no global
but what a ``torch.save`` of tensors names (the tensor and parameter rebuilders, storages, dtypes,
``torch.Size``, ``torch.device``, ``OrderedDict``); then ``torch.load(weights_only=True)`` builds it, with
no fallback. The scan comes first because ``weights_only``'s allowlist is the process's
(``torch.serialization.add_safe_globals`` by any imported library widens it). A pickle that is not a
``torch.save`` zip (a raw or legacy pickle) is refused by the scan (``.pt2`` members) or left to
``weights_only`` alone (``--weights`` checkpoints: the legacy format of torch < 1.6).
"""
from __future__ import annotations

import io
import pickletools
import re
import zipfile
from typing import Any, BinaryIO, Union

import torch

from gradviz.core.script.file_errors import ARCHIVE_ERRORS, FileRefused, UnsafeFile

__all__ = ["scan_pickle", "load_pickled_tensors", "is_torch_zip"]

_TENSOR_GLOBALS = {
    ("torch._utils", "_rebuild_tensor_v2"),
    ("torch._utils", "_rebuild_tensor_v3"),
    ("torch._utils", "_rebuild_parameter"),
    ("torch._utils", "_rebuild_parameter_with_state"),
    ("torch", "Size"),
    ("torch", "device"),
    ("collections", "OrderedDict"),
    ("torch.storage", "UntypedStorage"),
}
_STORAGE = re.compile(r"^(Untyped|Typed)?(Float|Double|Half|BFloat16|Long|Int|Short|Char|Byte|Bool|"
                      r"ComplexFloat|ComplexDouble)?Storage$")
_STRINGS = {"SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE", "STRING", "BINSTRING", "SHORT_BINSTRING"}


def _allowed(module: str, name: str) -> bool:
    if (module, name) in _TENSOR_GLOBALS:
        return True
    if module == "torch" and _STORAGE.match(name) and name != "Storage":
        return True
    return module == "torch" and isinstance(getattr(torch, name, None), torch.dtype)


Source = Union[bytes, BinaryIO]     # a member's bytes, or an open file (a checkpoint is not read twice)


def is_torch_zip(data: Source) -> bool:
    if isinstance(data, bytes):
        return data[:4] == b"PK\x03\x04"
    start = data.tell()
    head = data.read(4)
    data.seek(start)
    return head == b"PK\x03\x04"


def _data_pkl(data: Source, member: str) -> bytes:
    try:
        with zipfile.ZipFile(io.BytesIO(data) if isinstance(data, bytes) else data) as inner:
            names = [n for n in inner.namelist() if n.endswith("/data.pkl") or n == "data.pkl"]
            if len(names) != 1:
                raise UnsafeFile(f"{member}: a torch.save archive without exactly one data.pkl: refused", member)
            return inner.read(names[0])
    except FileRefused:
        raise
    except ARCHIVE_ERRORS as exc:
        raise FileRefused(f"{member}: a broken torch.save archive ({type(exc).__name__}: {exc})", member) from None


def scan_pickle(data: Source, member: str) -> None:
    """An ``UnsafeFile`` unless the ``torch.save`` zip in ``data`` names only tensor globals.

    STACK_GLOBAL's operands are tracked through the memo; one that is not a string literal is refused.
    """
    if not is_torch_zip(data):
        raise UnsafeFile(f"{member}: not a torch.save zip archive (raw or legacy pickle data): refused, gradviz "
                         "never unpickles it", member)
    pkl = _data_pkl(data, member)
    memo: dict[int, Any] = {}
    stack: list[Any] = []          # strings are tracked; anything else is a placeholder
    other = object()

    def refuse(module: str, name: str) -> UnsafeFile:
        return UnsafeFile(f"{member}: the pickle names {module}.{name}, which is not a tensor: refused, gradviz "
                          "never unpickles arbitrary objects", member)
    try:
        for op, arg, _pos in pickletools.genops(pkl):
            name = op.name
            if name in _STRINGS:
                stack.append(arg)
            elif name in ("BINPUT", "LONG_BINPUT", "PUT"):
                memo[arg] = stack[-1] if stack else other
            elif name == "MEMOIZE":
                memo[len(memo)] = stack[-1] if stack else other
            elif name in ("BINGET", "LONG_BINGET", "GET"):
                stack.append(memo.get(arg, other))
            elif name in ("GLOBAL", "INST"):
                module, _, attr = arg.partition(" ")
                if not _allowed(module, attr):
                    raise refuse(module, attr)
                stack.append(other)
            elif name == "STACK_GLOBAL":
                if len(stack) < 2 or not all(isinstance(x, str) for x in stack[-2:]):
                    raise UnsafeFile(f"{member}: a pickle global that is not a literal name: refused", member)
                module, attr = stack[-2], stack[-1]
                del stack[-2:]
                if not _allowed(module, attr):
                    raise refuse(module, attr)
                stack.append(other)
            elif name.startswith("EXT"):
                raise UnsafeFile(f"{member}: a pickle extension code: refused", member)
            else:
                stack.append(other)
    except FileRefused:
        raise
    except Exception as exc:  # noqa: BLE001 - pickletools' own errors: a broken pickle
        raise FileRefused(f"{member}: not a readable pickle ({type(exc).__name__}: {exc})", member) from None


def load_pickled_tensors(data: Source, member: str, *, scan: bool = True) -> Any:
    """What a ``torch.save`` of tensors in ``data`` holds: scanned (``scan_pickle``), then
    ``torch.load(weights_only=True)`` on the CPU with no fallback."""
    if scan:
        start = None if isinstance(data, bytes) else data.tell()
        scan_pickle(data, member)
        if start is not None:
            data.seek(start)
    try:
        return torch.load(io.BytesIO(data) if isinstance(data, bytes) else data, map_location="cpu",
                          weights_only=True)
    except Exception as exc:  # noqa: BLE001 - weights_only's refusal or a broken file; never a second try
        first = str(exc).splitlines()[0] if str(exc) else ""
        if "weights_only" in str(exc) or "Unpickl" in type(exc).__name__:
            raise UnsafeFile(f"{member}: holds pickled Python objects, not only tensors (torch's weights-only "
                             f"load refused it: {first[:200]}); gradviz never unpickles arbitrary objects",
                             member) from None
        raise FileRefused(f"{member}: cannot be read ({type(exc).__name__}: {first[:200]})", member) from None
