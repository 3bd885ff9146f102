"""A torch.export program (``.pt2``) read without running anything stored in the file.

``torch.export.load`` runs code from an archive on every torch gradviz supports (the research of issue
#24, ``/work/research/pt2/REPORT.md``): it unpickles members in full (sample inputs, ``use_pickle``
weights, ``opaque_obj_*`` constants, every member of a torch 2.6 archive: ``weights_only=False``, or
``True`` with a fallback to ``False``), ``eval``s symbolic expressions, ``exec``s guards, pastes names
into generated Python, imports modules a pytree spec names and ``dlopen``s an AOTInductor ``.so``.
``load_program`` is gradviz's only door to a ``.pt2``:

1. the archive is read with ``zipfile`` (never torch's reader); both layouts (torch 2.6's
   ``serialized_*`` members, and the pt2 archive of 2.7+); only ``models/<model>.json`` and its own
   weights, constants and sample inputs are opened (never ``data/aotinductor``, ``extra/``);
2. the model JSON is checked (``program_json.check_program_json``) before torch parses it;
3. raw tensors (``data/weights/weight_N``) are rebuilt here (``torch.frombuffer`` + ``as_strided``);
   pickled members only through ``pickle_scan.load_pickled_tensors`` (opcode scan, then
   ``weights_only=True``, no fallback); ``opaque_obj_*``, ``custom_obj_*`` and the legacy
   ``data/weights/<model>.pt`` are refused;
4. torch's own ``ExportedProgramDeserializer`` rebuilds the program from the checked JSON and those
   tensors (it never calls ``torch.load`` on what we pass).

Any refusal is a ``FileRefused`` / ``UnsafeFile`` (a ScriptError: exit 2, one line) naming the member.
Adapted from the research prototype ``safe_pt2.py`` (equal programs to torch's on clean archives of
torch 2.6, 2.13, 2.14.1 and 2.15).
"""
from __future__ import annotations

import json
import logging
import os
import warnings
import zipfile
from typing import Any

import torch

from gradviz.core.runtime.paths import open_regular
from gradviz.core.script.file_errors import ARCHIVE_ERRORS, FileRefused, UnsafeFile
from gradviz.core.script.meta import HEADROOM, available_bytes
from gradviz.core.script.pickle_scan import load_pickled_tensors
from gradviz.core.script.program_json import check_program_json
from gradviz.core.script.program_tensors import example_inputs, raw_tensors, tensor_table

log = logging.getLogger(__name__)

__all__ = ["load_program", "MAX_MEMBERS", "MAX_JSON_BYTES"]

MAX_MEMBERS = 100_000
MAX_JSON_BYTES = 512 * 1024 * 1024


def _pickled(data: bytes, member: str, pickled: str) -> Any:
    if pickled != "weights_only":
        raise UnsafeFile(f"{member} is pickled data: refused (gradviz reads .pt2 programs without unpickling)",
                         member)
    return load_pickled_tensors(data, member)


def _open_zip(path: str) -> zipfile.ZipFile:
    """The archive at ``path`` (a regular file: never a FIFO or a device), its size checked against memory."""
    handle = open_regular(path, "the program")     # FileNotFoundError / PathError as they are
    try:
        z = zipfile.ZipFile(handle)
    except ARCHIVE_ERRORS as exc:
        handle.close()
        raise FileRefused(f"not a .pt2 program (not a zip archive: {exc})") from None
    z._gradviz_handle = handle                     # closed with the archive (a ZipFile keeps a passed file open)
    infos = z.infolist()
    if len(infos) > MAX_MEMBERS:
        _close(z)
        raise FileRefused(f"too many members ({len(infos):,}) for a .pt2 program")
    declared, available = sum(i.file_size for i in infos), available_bytes()
    if available is not None and declared > HEADROOM * available:
        _close(z)
        raise FileRefused(f"the archive holds {declared / 2**30:.1f} GiB of data and this machine has "
                          f"{available / 2**30:.1f} GiB available")
    return z


def _close(z: zipfile.ZipFile) -> None:
    z.close()
    getattr(z, "_gradviz_handle").close()


def _read(z: zipfile.ZipFile, name: str, limit: int | None = None) -> bytes:
    try:
        info = z.getinfo(name)
        if limit is not None and info.file_size > limit:
            raise FileRefused(f"{name}: {info.file_size} bytes, more than the {limit} read", name)
        return z.read(name)
    except KeyError:
        raise FileRefused(f"the archive has no {name}", name) from None
    except FileRefused:
        raise
    except ARCHIVE_ERRORS as exc:
        raise FileRefused(f"{name}: cannot be read ({type(exc).__name__}: {exc})", name) from None


def _json(z: zipfile.ZipFile, name: str) -> Any:
    raw = _read(z, name, MAX_JSON_BYTES)
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise FileRefused(f"{name}: broken JSON ({exc})", name) from None


def _check_byteorder(z: zipfile.ZipFile, root: str) -> None:
    name = root + "byteorder"
    if name in z.namelist() and _read(z, name, 64).decode(errors="replace").strip() != "little":
        raise FileRefused(f"{name}: a big-endian archive is not read", name)


def load_program(path: str | os.PathLike, *, pickled: str = "weights_only", model: str = "model",
                 op_namespaces: set[str] | None = None,
                 expected_opset_version: dict[str, int] | None = None) -> torch.export.ExportedProgram:
    """The ExportedProgram saved at ``path``, read without running anything stored in the file.

    pickled: "weights_only" (scan, then torch.load(weights_only=True): sample inputs, torch <= 2.6
    archives, use_pickle tensors) or "refuse" (any pickled member is an UnsafeFile; the sample
    inputs of a 2.7+ archive are then left out: ``example_inputs`` is None).
    """
    if pickled not in ("weights_only", "refuse"):
        raise ValueError("pickled must be 'weights_only' or 'refuse'")

    path = os.fspath(path)
    if os.path.isfile(path) and os.path.getsize(path) == 0:
        raise FileRefused("an empty file, not a .pt2 program")
    z = _open_zip(path)
    try:
        state_dict, constants, example, doc, doc_member = _read_archive(z, path, pickled, model, op_namespaces)
    finally:
        _close(z)
    return _rebuild(doc, doc_member, state_dict, constants, example, expected_opset_version)


def _read_archive(z: zipfile.ZipFile, path: str, pickled: str, model: str, op_namespaces: set[str] | None):
    """The checked JSON and the tensors of the program ``model`` in the open archive."""
    names = z.namelist()
    roots = {n.split("/", 1)[0] for n in names}
    if "serialized_exported_program.json" in names:          # torch <= 2.6 (and 2.7's old format)
        version = _read(z, "version", 64).decode(errors="replace").strip()
        _check_version(version, "version")
        doc_member = "serialized_exported_program.json"
        doc = _json(z, doc_member)
        check_program_json(doc, doc_member, op_namespaces)
        state_dict = tensor_table(_pickled_member(z, "serialized_state_dict.pt", pickled, {}),
                                   "serialized_state_dict.pt", "weights")
        constants = tensor_table(_pickled_member(z, "serialized_constants.pt", pickled, {}),
                                  "serialized_constants.pt", "constants")
        example = _pickled_member(z, "serialized_example_inputs.pt", pickled, None, optional=True)
        example = example_inputs(example, "serialized_example_inputs.pt") if example else None
    elif len(roots) == 1 and f"{next(iter(roots))}/archive_format" in names:   # torch >= 2.7
        root = next(iter(roots)) + "/"
        fmt = _read(z, root + "archive_format", 64).decode(errors="replace")
        if fmt != "pt2":
            raise FileRefused(f"{root}archive_format: {fmt!r}, not a pt2 archive", root + "archive_format")
        aversion = _read(z, root + "archive_version", 64).decode(errors="replace") \
            if root + "archive_version" in names else "0"
        if aversion.strip() not in ("0",):
            raise FileRefused(f"{root}archive_version: {aversion!r}: an archive version this reader "
                               "does not know", root + "archive_version")
        _check_byteorder(z, root)
        doc_member = f"{root}models/{model}.json"
        if doc_member not in names:
            others = sorted(n[len(root) + 7:-5] for n in names if n.startswith(root + "models/")
                            and n.endswith(".json"))
            raise FileRefused(f"the archive has no {doc_member}" + (f" (it holds {', '.join(others)})"
                                                                     if others else ""), doc_member)
        doc = _json(z, doc_member)
        check_program_json(doc, doc_member, op_namespaces)
        for legacy in (f"data/weights/{model}.pt", f"data/constants/{model}.pt"):
            if root + legacy in names:   # torch's BC path hands these bytes to torch.load
                raise UnsafeFile(f"{root}{legacy}: a legacy pickled {legacy.split('/')[1]} file: refused, gradviz "
                                 "never unpickles it (re-save the program with torch.export.save)", root + legacy)
        def unpickle(data: bytes, member: str) -> Any:
            return _pickled(data, member, pickled)
        state_dict = raw_tensors(z, root, f"data/weights/{model}_weights_config.json", "data/weights/",
                                 "weight", _read, _json, unpickle)
        constants = raw_tensors(z, root, f"data/constants/{model}_constants_config.json",
                                "data/constants/", "constant", _read, _json, unpickle)
        sample = f"{root}data/sample_inputs/{model}.pt"
        example = None
        if sample in names and (pickled == "weights_only"):
            data = _read(z, sample)
            # torch.export.save writes an empty member for a program that stores no inputs
            example = example_inputs(_pickled(data, sample, pickled), sample) if data else None
    else:
        raise FileRefused("a zip archive, but not a torch.export program (no models/*.json, no "
                          "serialized_exported_program.json)")
    return state_dict, constants, example, doc, doc_member


def _rebuild(doc: dict, doc_member: str, state_dict: dict, constants: dict, example: Any,
             expected_opset_version: dict[str, int] | None) -> torch.export.ExportedProgram:
    """torch's own deserializer on the checked JSON and the tensors read here (it calls no torch.load on
    what it is given); its warnings go to gradviz's log (``--verbose``), not to the user's terminal."""
    from torch._export.serde import schema
    from torch._export.serde.serialize import ExportedProgramDeserializer, _dict_to_dataclass

    try:
        serialized = _dict_to_dataclass(schema.ExportedProgram, doc)
    except Exception as exc:  # noqa: BLE001 - a JSON that does not fit this torch's schema
        raise FileRefused(f"{doc_member}: does not fit torch {torch.__version__}'s program schema "
                           f"({type(exc).__name__}: {exc})", doc_member) from None
    major = getattr(getattr(serialized, "schema_version", None), "major", None)
    if major is not None and major != schema.SCHEMA_VERSION[0]:
        raise FileRefused(f"{doc_member}: schema version {major}, torch {torch.__version__} reads "
                           f"{schema.SCHEMA_VERSION[0]}", doc_member)
    try:
        with torch.device("cpu"), warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            program = ExportedProgramDeserializer(expected_opset_version).deserialize(
                serialized, state_dict, constants, example)
    except Exception as exc:  # noqa: BLE001 - torch's deserializer: one message naming the member
        raise FileRefused(f"{doc_member}: torch {torch.__version__} cannot rebuild the program "
                          f"({type(exc).__name__}: {str(exc)[:300]})", doc_member) from None
    for warning in said:
        log.debug("torch, reading %s: %s", doc_member, warning.message)
    return program


def _check_version(version: str, member: str) -> None:
    from torch._export.serde.schema import SCHEMA_VERSION
    parts = version.split(".")
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        raise FileRefused(f"{member}: {version!r:.40} is not a schema version", member)
    if int(parts[0]) != SCHEMA_VERSION[0]:
        raise FileRefused(f"{member}: schema version {version}, torch {torch.__version__} reads "
                           f"{SCHEMA_VERSION[0]}.x", member)


def _pickled_member(z, name, pickled, empty, optional=False):
    if name not in z.namelist():
        if optional:
            return None
        raise FileRefused(f"the archive has no {name}", name)
    data = _read(z, name)
    if not data:
        return empty
    return _pickled(data, name, pickled)
