"""The two kinds of text in a ``.pt2`` program's JSON that torch turns into code, checked as expressions.

``expr_str`` (a symbolic size, e.g. ``s77 + 1``) is given to ``sympy.sympify``, whose parser ``eval``s it;
``guards_code`` (torch >= 2.9, e.g. ``L['x'].size()[0] <= 64``) is ``exec``'d by ``ExportedProgram.module()``
at every forward. Each is parsed with ``ast`` (never evaluated) and accepted only when every node is in a
short allowlist: numbers, arithmetic, comparisons, symbols, sympy's and ``torch.utils._sympy``'s classes
(``check_sympy_expr``); subscripts of ``L``, ``.size()`` and friends, ``math.*`` and ``torch.sym_*``
(``check_guard``). No attribute access, no ``__``, no string but a word or a number. Found by the
research of issue #24 (``/work/research/pt2``), which made torch 2.6-2.15 run code through both.
"""
from __future__ import annotations

import ast
import re

from gradviz.core.script.file_errors import UnsafeFile

__all__ = ["check_sympy_expr", "check_guard", "WORD"]

MAX_EXPR_CHARS = 20_000

_SYMPY_FUNCS = {
    # sympy classes srepr / str print in torch's expr_str
    "Symbol", "Integer", "Float", "Rational", "Add", "Mul", "Pow", "Mod", "Max", "Min", "Abs", "floor",
    "ceiling", "sqrt", "Eq", "Ne", "Lt", "Le", "Gt", "Ge", "StrictLessThan", "StrictGreaterThan",
    "LessThan", "GreaterThan", "Equality", "Unequality", "And", "Or", "Not", "Piecewise", "ITE",
    "BooleanTrue", "BooleanFalse", "Half", "One", "Zero", "NegativeOne", "Infinity", "NegativeInfinity",
    # torch.utils._sympy.functions (the deserializer's sympy_functions)
    "FloorDiv", "ModularIndexing", "Where", "PythonMod", "CleanDiv", "CeilToInt", "FloorToInt", "CeilDiv",
    "LShift", "RShift", "PowByNatural", "FloatPow", "FloatTrueDiv", "IntTrueDiv",
    "IsNonOverlappingAndDenseIndicator", "TruncToFloat", "TruncToInt", "RoundToInt", "RoundDecimal",
    "ToFloat", "Identity",
}
_SYMPY_CONSTS = {"oo", "zoo", "nan", "true", "false", "int_oo", "pi", "E"}
_SYMPY_KWARGS = {"positive", "negative", "nonnegative", "nonpositive", "integer", "real", "finite",
                 "infinite", "zero", "nonzero", "even", "odd", "rational", "commutative", "evaluate",
                 "precision"}
_SYMBOL_RE = re.compile(r"^[a-z]{1,6}[0-9]{0,9}$")
WORD = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
_NUMBER_RE = re.compile(r"^[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?$")
_OPS = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow, ast.USub, ast.UAdd, ast.Not,
        ast.Invert, ast.And, ast.Or, ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.BitAnd,
        ast.BitOr, ast.BitXor, ast.LShift, ast.RShift, ast.Load)


def _parse_restricted(text: str, what: str, member: str) -> ast.AST:
    if not isinstance(text, str) or len(text) > MAX_EXPR_CHARS or not text.isascii() \
            or any(c < " " or c == "\x7f" for c in text) or "__" in text:
        raise UnsafeFile(f"{member}: {what} {text!r:.120} is not a plain expression: refused", member)
    try:
        return ast.parse(text, mode="eval")
    except SyntaxError:
        raise UnsafeFile(f"{member}: {what} {text!r:.120} is not a plain expression: refused", member) from None


def check_sympy_expr(text: str, member: str) -> None:
    """An expr_str is sympify'd (eval) by torch: only sympy arithmetic on symbols and numbers passes."""
    tree = _parse_restricted(text, "the symbolic expression", member)

    def bad(node):
        raise UnsafeFile(f"{member}: the symbolic expression {text!r:.120} holds "
                            f"{type(node).__name__} {ast.unparse(node)[:60]!r}: refused (torch would eval it)",
                            member)

    for node in ast.walk(tree):
        if isinstance(node, (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Compare, ast.BoolOp) + _OPS):
            continue
        if isinstance(node, ast.Call):
            if not (isinstance(node.func, ast.Name) and node.func.id in _SYMPY_FUNCS):
                bad(node)
            for kw in node.keywords:
                if kw.arg not in _SYMPY_KWARGS or not (isinstance(kw.value, ast.Constant)
                                                       and isinstance(kw.value.value, (bool, int))):
                    bad(node)
            for a in node.args:     # a string argument is sympified (eval) by most sympy functions
                if isinstance(a, ast.Constant) and isinstance(a.value, str) and node.func.id not in (
                        "Symbol", "Integer", "Float", "Rational"):
                    bad(node)
            continue
        if isinstance(node, ast.keyword):
            continue
        if isinstance(node, ast.Name):
            if node.id in _SYMPY_FUNCS or node.id in _SYMPY_CONSTS or _SYMBOL_RE.match(node.id):
                continue
            bad(node)
        if isinstance(node, ast.Constant):
            v = node.value
            if v is None or isinstance(v, (bool, int, float)):
                continue
            if isinstance(v, str) and (WORD.match(v) or _NUMBER_RE.match(v)):
                continue
            bad(node)
        bad(node)


_GUARD_ATTRS = {"size", "stride", "storage_offset", "dim", "numel"}
_GUARD_MATH = {"isnan", "isinf", "floor", "ceil", "trunc", "sqrt", "inf"}
_GUARD_TORCH = {"sym_max", "sym_min", "sym_float", "sym_int", "sym_sqrt", "sym_not", "sym_ite"}


def check_guard(text: str, member: str) -> None:
    """guards_code is exec'd by ExportedProgram.module(): only comparisons on input sizes pass."""
    tree = _parse_restricted(text, "the guard", member)

    def bad(node):
        raise UnsafeFile(f"{member}: the guard {text!r:.120} holds {type(node).__name__} "
                            f"{ast.unparse(node)[:60]!r}: refused (ExportedProgram.module() would exec it)",
                            member)

    def rooted(node) -> bool:   # L[...][...], L[...].size()[i]
        while True:
            if isinstance(node, ast.Name):
                return node.id == "L"
            if isinstance(node, ast.Subscript):
                s = node.slice
                if not (isinstance(s, ast.Constant) and isinstance(s.value, (int, str))
                        and (not isinstance(s.value, str) or WORD.match(s.value))):
                    return False
                node = node.value
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr in _GUARD_ATTRS and not node.keywords \
                    and all(isinstance(a, ast.Constant) and type(a.value) is int for a in node.args):
                node = node.func.value
            else:
                return False

    for node in ast.walk(tree):
        if isinstance(node, (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Compare, ast.BoolOp) + _OPS):
            continue
        if isinstance(node, (ast.Subscript, ast.Call)) and rooted(node):
            continue
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and not node.keywords \
                and isinstance(node.func.value, ast.Name) and (
                (node.func.value.id == "math" and node.func.attr in _GUARD_MATH)
                or (node.func.value.id == "torch" and node.func.attr in _GUARD_TORCH)):
            continue
        if isinstance(node, ast.Attribute):
            if isinstance(node.value, ast.Name) and (
                    (node.value.id == "math" and node.attr in _GUARD_MATH)
                    or (node.value.id == "torch" and node.attr in _GUARD_TORCH)) or node.attr in _GUARD_ATTRS:
                continue
            bad(node)
        if isinstance(node, ast.Name) and node.id in ("L", "math", "torch"):
            continue
        if isinstance(node, ast.Constant) and (node.value is None or isinstance(node.value, (bool, int, float))
                                               or (isinstance(node.value, str) and WORD.match(node.value))):
            continue
        bad(node)
