"""What a user can do with a fold box ("Block × 200"): draw all its repeats, some of them
(one, or a range like 10-20), or open one repeat to see inside it.

Each is a new ``expanded`` set for the session (``core/layout/folding.py``'s ``unfold:`` entries
and module paths), laid out off the UI thread like any other expand.
"""
from __future__ import annotations

from typing import Iterable

from PySide6.QtWidgets import QInputDialog, QMenu

from gradviz.app.document import Document
from gradviz.core.layout.folding import parse_range, unfold_markers


def unfold(session, doc: Document, fold: dict, which: str | Iterable[int] = "all") -> None:
    """Draw repeats of ``fold`` as boxes of their own (``"all"`` or indices into its repeats)."""
    session.set_expanded(doc.expanded | unfold_markers(fold, which))


def open_repeat(session, doc: Document, fold: dict, index: int) -> None:
    """Open repeat ``index`` (0-based) of ``fold``: its insides are drawn, the rest stays folded."""
    repeats = fold.get("repeats") or []
    if 0 <= index < len(repeats):
        session.set_expanded(doc.expanded_with(repeats[index]))


def ask_range(parent, fold: dict, title: str, single: bool) -> list[int] | None:
    """Ask for repeat numbers (1-based, as the box counts them); None when cancelled or invalid."""
    n = len(fold.get("repeats") or [])
    hint = f"a number from 1 to {n}" if single else f"a number or a range such as 2-{min(n, 5)} (1 to {n})"
    text, ok = QInputDialog.getText(parent, title, f"{fold.get('label', '')}: {hint}")
    if not ok:
        return None
    try:
        picked = parse_range(text, n)
    except ValueError:
        return None
    return picked[:1] if single else picked


def add_to_menu(menu: QMenu, session, doc: Document, fold: dict) -> None:
    n = len(fold.get("repeats") or [])
    menu.addAction(f"Unfold all {n} repeats", lambda: unfold(session, doc, fold, "all"))

    def show_some() -> None:
        picked = ask_range(menu.parentWidget(), fold, "Show repeats", single=False)
        if picked:
            unfold(session, doc, fold, picked)

    def open_one() -> None:
        picked = ask_range(menu.parentWidget(), fold, "Open a repeat", single=True)
        if picked:
            open_repeat(session, doc, fold, picked[0])

    menu.addAction("Show repeats…", show_some)
    menu.addAction("Open a repeat…", open_one)
