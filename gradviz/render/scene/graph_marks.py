"""Marks that belong to the graph itself (not to a health check): the dashed edges of cut
branches (``core/trace/cut_branches.py``) and the call that raised in a failing forward
(``core/trace/partial_trace.py``), with its error written under it.

``graph_marks(graph)`` says what is marked (the scene merges it into ``marks()``, so the
header and the legend count and explain them like diagnosis marks, but clearing the
health check's marks does not remove them); ``decorate(scene, graph)`` adds the failing
call's badge and error note to a scene and returns the area they cover.
"""
from __future__ import annotations

import textwrap
import networkx as nx
from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QPainter, QPen
from PySide6.QtWidgets import QGraphicsItem

from gradviz.core.runtime.formatting import shape_text, short_location
from gradviz.core.output.marks import Marks
from gradviz.render.parts.scene_reads import MarkHost
from gradviz.render.primitives import style
from gradviz.render.scene.marks_layer import Badge

NOTE_W = 460.0
NOTE_LINE_H = 15.0


def graph_marks(graph: nx.DiGraph | None) -> Marks:
    """'cut-branch': one edge per cut branch (the edge into its cut; the scene draws all of a
    branch's edges dashed), so the header counts branches; 'failed': the call that raised."""
    marks = Marks()
    if graph is None:
        return marks
    ends = [(next(iter(graph.predecessors(n))), n) for n, a in graph.nodes(data=True)
            if a.get("cut_point") and graph.in_degree(n)]
    failed = [n for n, a in graph.nodes(data=True) if a.get("failed")]
    if ends:
        marks.add_edges("cut-branch", ends)
    if failed:
        marks.add_nodes("failed", failed)
    return marks


def failure_lines(attrs: dict) -> list[str]:
    """The error under the failing call: message, where, what it was given."""
    lines = textwrap.wrap(str(attrs.get("error") or ""), 70) or ["the forward raised here"]
    where = attrs.get("location") or ""
    if where:
        code = f": {attrs['code']}" if attrs.get("code") else ""
        lines += textwrap.wrap(f"at {short_location(where)}{code}", 70)
    elif attrs.get("module"):
        lines.append(f"in module {attrs['module']} ({attrs.get('module_type') or '?'})")
    inputs = attrs.get("inputs") or []
    if inputs:
        lines.append("inputs: " + ", ".join(f"{shape_text(a.get('shape'))} {a.get('dtype', '')}".strip()
                                            for a in inputs))
    return lines


class FailureNote(QGraphicsItem):
    """The error of the failing call, written under its box (part of exports too)."""

    def __init__(self, lines: list[str], color: QColor, text: QColor) -> None:
        super().__init__()
        self.lines, self.color, self.text = lines, color, text
        self.setZValue(4)
        self.setAcceptedMouseButtons(Qt.NoButton)

    def boundingRect(self) -> QRectF:
        return QRectF(0, 0, NOTE_W, 10 + NOTE_LINE_H * len(self.lines))

    def paint(self, painter: QPainter, option, widget=None) -> None:
        painter.setRenderHint(QPainter.Antialiasing)
        rect = self.boundingRect()
        fill = QColor(self.color)
        fill.setAlpha(24)
        painter.setPen(QPen(self.color, 1.2))
        painter.setBrush(fill)
        painter.drawRoundedRect(rect.adjusted(0.5, 0.5, -0.5, -0.5), 4, 4)
        painter.setPen(self.text)
        for k, line in enumerate(self.lines):
            painter.setFont(style.font(11, 600 if k == 0 else 400))
            painter.drawText(QPointF(8, 5 + NOTE_LINE_H * (k + 1) - 3), line)


def decorate(scene: MarkHost, graph: nx.DiGraph) -> QRectF:
    """Badge and error note of the failing call; returns the scene area they use (or an empty rect)."""
    area = QRectF()
    for i in failed_indices(scene, graph):
        nid = scene.keys[i]
        rect = scene.rects[i]
        badge = Badge("failed")
        badge.setPos(rect.topRight())
        scene.addItem(badge)
        note = FailureNote(failure_lines(graph.nodes[nid]), scene.theme.color("broken"),
                           scene.theme.color("strong_outline"))
        note.setPos(rect.center().x() - NOTE_W / 2, rect.bottom() + 12)
        scene.addItem(note)
        area = area.united(note.sceneBoundingRect())
    return area


def failed_indices(scene: MarkHost, graph: nx.DiGraph) -> list[int]:
    return [scene.index[n] for n, a in graph.nodes(data=True) if a.get("failed") and n in scene.index]
