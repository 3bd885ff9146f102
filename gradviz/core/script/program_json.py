"""A ``.pt2`` program's model JSON checked before torch reads it: no field of it may become code.

torch's deserializer and ``ExportedProgram.module()`` turn several JSON strings into Python (the research
of issue #24, ``/work/research/pt2``, ran a payload through each on torch 2.6-2.15):

- a node's ``target`` (and every ``as_operator``): any ``torch.*`` attribute path resolves
  (``torch.os.system``); only ``torch.ops.aten|prims.<op>.<overload>`` operators, an allowlist of
  higher-order operators (``cond``, ``while_loop``...) and torch's symbolic-size operators pass;
- names FX pastes into generated Python (graph inputs in ``def forward(self, ...)``, attribute paths in
  ``getattr(self, "...")``): identifiers, and attribute paths without quotes, backslashes or control
  characters;
- ``expr_str`` and ``guards_code``: checked as expressions (``program_exprs.py``);
- pytree specs naming a ``collections.defaultdict`` or an ``{"__enum__": ...}``: torch imports the module
  they name; refused;
- every value of a typed field has its type (``as_int`` an int...), torchbind objects are refused.

``check_program_json(doc, member)`` walks the whole document once and raises ``UnsafeFile`` naming the
member and the JSON path of the first string torch would run.
"""
from __future__ import annotations

import json
import keyword
import math
import operator
import re
from typing import Any

import torch

from gradviz.core.script.file_errors import FileRefused, UnsafeFile
from gradviz.core.script.program_exprs import check_guard, check_sympy_expr

__all__ = ["check_program_json", "check_target", "check_treespec", "is_attribute_path", "OP_NAMESPACES"]

_SAFE_HOPS = {
    "cond", "while_loop", "map_impl", "scan", "associative_scan", "wrap_with_set_grad_enabled",
    "wrap_with_autocast", "auto_functionalized", "auto_functionalized_v2", "with_effects",
    "invoke_subgraph", "flex_attention", "flex_attention_backward", "hints_wrapper",
    "run_and_save_rng_state", "run_with_rng_state", "out_dtype", "print",
}
_REFUSED_OPS = {"aten::from_file"}     # maps a named file, shared=True writes back to it
OP_NAMESPACES = {"aten", "prims"}


def _sym_ops() -> set:
    from torch._export.serde import serialize as s
    ops = set(getattr(s, "_SYM_OPS", set())) | set(getattr(s, "_SYM_INT_OPS", set())) \
        | set(getattr(s, "_SYM_BOOL_OPS", set())) | set(getattr(s, "_SYM_FLOAT_OPS", set()))
    return ops | {operator.getitem}


def check_target(target: Any, member: str, namespaces: set[str]) -> None:
    """A node target / operator argument: an aten/prims OpOverload, an allowlisted HOP or a sym op."""
    def refuse(why):
        raise UnsafeFile(f"{member}: the graph calls {target!r:.120}: {why}: refused", member)

    if not isinstance(target, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.]*", target):
        refuse("not an operator name")
    parts = target.split(".")
    if parts[0] == "torch" and len(parts) >= 3 and parts[1] == "ops":
        ns = parts[2]
        if ns == "higher_order":
            if len(parts) != 4 or parts[3] not in _SAFE_HOPS:
                refuse("a higher-order operator gradviz does not know to be safe")
            obj = getattr(torch.ops.higher_order, parts[3], None)
            if not isinstance(obj, torch._ops.HigherOrderOperator):
                refuse("no such higher-order operator in this torch")
            return
        if ns not in namespaces:
            refuse(f"operators of the {ns!r} namespace are not read (only {', '.join(sorted(namespaces))})")
        if len(parts) not in (4, 5):
            refuse("not ns.op.overload")
        try:
            obj = getattr(getattr(torch.ops, ns), parts[3])
            obj = getattr(obj, parts[4] if len(parts) == 5 else "default")
        except (AttributeError, RuntimeError):
            refuse("no such operator in this torch")
        if not isinstance(obj, torch._ops.OpOverload):
            refuse("not an operator overload")
        if obj.name() in _REFUSED_OPS:
            refuse("an operator that touches files")
        return
    roots = {"_operator": operator, "operator": operator, "math": math, "torch": torch}
    if parts[0] not in roots or len(parts) != 2:
        refuse("not an operator")
    obj = getattr(roots[parts[0]], parts[1], None)
    if obj is None or obj not in _sym_ops():
        refuse("a Python callable, not an operator")


def check_treespec(text: Any, member: str) -> None:
    """in_spec / out_spec: torch's treespec_loads imports a module named in a defaultdict context
    (importlib.import_module) and, on torch >= 2.7, in any {"__enum__": ...} object of a context."""
    def refuse(why):
        raise UnsafeFile(f"{member}: a pytree spec {why}: refused (torch would import a module it names)",
                            member)

    try:
        spec = json.loads(text)
    except (TypeError, ValueError):
        raise FileRefused(f"{member}: a pytree spec that is not JSON", member) from None

    def walk_ctx(x):
        if isinstance(x, dict):
            if "__enum__" in x:
                refuse(f"holds an enum {x.get('fqn')!r:.80}")
            for v in x.values():
                walk_ctx(v)
        elif isinstance(x, list):
            for v in x:
                walk_ctx(v)

    def walk(node):
        if not isinstance(node, dict):
            return
        typ = node.get("type")
        if typ == "collections.defaultdict":
            refuse("holds a defaultdict (its default factory is imported by name)")
        ctx = node.get("context")
        if isinstance(ctx, str):
            try:
                ctx = json.loads(ctx)
            except ValueError:
                ctx = None      # a context a registered type parses itself
        walk_ctx(ctx)
        for child in node.get("children_spec") or []:
            walk(child)

    if not (isinstance(spec, list) and len(spec) == 2):
        raise FileRefused(f"{member}: a pytree spec that is not [protocol, tree]", member)
    walk(spec[1])


_IDENT_KEYS = {"name", "as_name", "user_input_name", "input_name"}
_FQN_KEYS = {"parameter_name", "buffer_name", "tensor_constant_name", "custom_obj_name"}
_VALUE_TABLES = {"tensor_values", "sym_int_values", "sym_bool_values", "sym_float_values",
                 "custom_obj_values", "range_constraints"}
_FQN_PART = re.compile(r'^[^"\'\\\x00-\x1f\x7f.]{1,256}$')


def _ident(v: Any) -> bool:
    return isinstance(v, str) and v.isidentifier() and not keyword.iskeyword(v)


def is_attribute_path(v: Any, module: bool = False) -> bool:
    if not isinstance(v, str):
        return False
    if module:
        if v == "":
            return True
        v = re.sub(r"@\d+$", "", v)
    return all(_FQN_PART.match(p) for p in v.split("."))


def check_program_json(doc: Any, member: str, namespaces: set[str] | None = None) -> None:
    """Walk the whole model JSON; raise UnsafeFile at the first string torch would run."""
    namespaces = OP_NAMESPACES | set(namespaces or ())

    def refuse(path, why):
        raise UnsafeFile(f"{member}: {'/'.join(map(str, path))}: {why}: refused", member)

    def walk(x, path):
        if isinstance(x, dict):
            if "target" in x and "inputs" in x and "outputs" in x:
                check_target(x["target"], member, namespaces)
            for k, v in x.items():
                p = path + [k]
                if not isinstance(k, str):
                    refuse(p, "a non-string key")
                if k in _VALUE_TABLES and isinstance(v, dict):
                    for name in v:
                        if not _ident(name):
                            refuse(p, f"the name {name!r:.80} is not an identifier")
                if k in _IDENT_KEYS and isinstance(v, str) and v and not _ident(v):
                    refuse(p, f"the name {v!r:.80} is not an identifier")
                elif k == "as_names" and isinstance(v, list) and not all(_ident(n) for n in v):
                    refuse(p, "a name that is not an identifier")
                elif k == "forward_arg_names" and isinstance(v, list) and not all(_ident(n) for n in v):
                    refuse(p, "an argument name that is not an identifier")
                elif k in _FQN_KEYS and not is_attribute_path(v):
                    refuse(p, f"the attribute path {v!r:.80} holds a quote, backslash or control character")
                elif k == "fqn" and not is_attribute_path(v, module=True):
                    refuse(p, f"the module path {v!r:.80} holds a quote, backslash or control character")
                elif k == "expr_str":
                    check_sympy_expr(v, member)
                elif k == "guards_code":
                    if not isinstance(v, list):
                        refuse(p, "guards_code is not a list")
                    for g in v:
                        check_guard(g, member)
                elif k == "as_operator":
                    check_target(v, member, namespaces)
                elif k in ("in_spec", "out_spec") and v is not None:
                    check_treespec(v, member)
                elif k == "as_int" and type(v) is not int:
                    refuse(p, "an int that is not an int")
                elif k == "as_ints" and not (isinstance(v, list) and all(type(i) is int for i in v)):
                    refuse(p, "ints that are not ints")
                elif k in ("as_float", "as_floats"):
                    vals = v if isinstance(v, list) else [v]
                    if not all(type(f) in (int, float) for f in vals):
                        refuse(p, "a float that is not a number")
                elif k in ("as_bool", "as_bools"):
                    vals = v if isinstance(v, list) else [v]
                    if not all(type(b) is bool for b in vals):
                        refuse(p, "a bool that is not a bool")
                elif k in ("as_string", "as_strings"):
                    vals = v if isinstance(v, list) else [v]
                    if not all(isinstance(s, str) for s in vals):
                        refuse(p, "a string that is not a string")
                elif k in ("min_val", "max_val") and v is not None and type(v) not in (int, float):
                    refuse(p, "a range bound that is not a number")
                elif k == "custom_obj_values" and v:
                    refuse(p, "a TorchScript custom object (torchbind): gradviz does not load them")
                walk(v, p)
        elif isinstance(x, list):
            for i, v in enumerate(x):
                walk(v, path + [i])

    walk(doc, [])
    # a graph input that is a string becomes `L['x'] == '<value>'` in module()'s guard code
    for i, inp in enumerate(doc.get("graph_module", {}).get("graph", {}).get("inputs", [])):
        s = inp.get("as_string") if isinstance(inp, dict) else None
        if s is not None and not re.fullmatch(r"[^'\"\\\x00-\x1f\x7f]*", s):
            refuse(["graph_module", "graph", "inputs", i], "a string input with a quote or backslash")
