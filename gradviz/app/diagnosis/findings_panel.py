"""The Diagnosis panel: runs the checklist (``gradviz check``) on the current document and
shows every finding whole — what is wrong, why, and the fix — with its location.

Laid out for a short, wide bottom dock: one row with the buttons and the summary, then
the findings as one readable report. A finding's title selects and frames its nodes in
the graph; its ``file:line`` opens the source. The report belongs to the document it
was made for (``doc.findings``): opening another script clears it.
"""
from __future__ import annotations

import html

from PySide6.QtCore import QUrl, Signal
from PySide6.QtWidgets import QHBoxLayout, QTextBrowser, QVBoxLayout, QWidget

from gradviz.app.contract import PanelHost
from gradviz.app.diagnosis.check_controls import CheckControls
from gradviz.app.diagnosis.jobs import check_job
from gradviz.app.document import Document
from gradviz.app.jobs import Job
from gradviz.app.source_link import open_location, short_location

SEVERITY_COLORS = {"error": "#d32f2f", "warning": "#c77700", "info": "#1f6fb2"}
IDLE_TEXT = "Run a health check to see what is wrong with the gradients."


def finding_html(i: int, f: dict) -> str:
    """One finding as HTML: a linked title (selects its nodes), the whole message, its location."""
    color = SEVERITY_COLORS.get(f["severity"], "#555")
    title = f'<a href="show:{i}" style="color:{color}; font-weight:600;">{html.escape(f["severity"].upper())} · ' \
            f'{html.escape(f["code"])}</a>'
    where = ""
    if f.get("location"):
        where = f' &nbsp;<a href="loc:{i}">{html.escape(short_location(f["location"]))}</a>'
    library = (f.get("data") or {}).get("library_location")
    if library:   # the innermost library frame (e.g. transformers' modeling file), beside the user's line
        where += f' &nbsp;<span style="color:gray;">in {html.escape(library)}</span>'
    extra = []
    if f.get("params"):
        extra.append("parameters: " + ", ".join(html.escape(p) for p in f["params"][:12])
                     + (" …" if len(f["params"]) > 12 else ""))
    if f.get("modules"):
        extra.append("modules: " + ", ".join(html.escape(m or "(model)") for m in f["modules"][:12]))
    tail = f'<br><span style="color:gray;">{" · ".join(extra)}</span>' if extra else ""
    return f'<p style="margin-bottom:8px;">{title}{where}<br>{html.escape(f["message"])}{tail}</p>'


def summary_text(report: dict) -> str:
    findings = report.get("findings", [])
    secs = report.get("seconds", 0)
    if not findings:
        return (f"No problems found ({secs:.1f} s): every parameter gets a finite gradient; norms, "
                "activations and the numerical check look healthy.")
    counts = {s: sum(1 for f in findings if f["severity"] == s) for s in ("error", "warning", "info")}
    parts = [f"{n} {name}{'s' if n != 1 and name != 'info' else ''}" for name, n in counts.items() if n]
    return f"{', '.join(parts)} ({secs:.1f} s). Click a finding's title to see it in the graph."


class DiagnosisPanel(QWidget):
    findingActivated = Signal(dict)
    checkFinished = Signal(object)     # the report dict

    def __init__(self, host: PanelHost, parent=None) -> None:
        super().__init__(parent)
        self.host = host
        self.doc: Document = host.document
        self.report: dict | None = None
        self.controls = CheckControls(host, "Run health check", IDLE_TEXT, "The health check")
        self.run_button, self.cancel_button, self.status = (self.controls.run_button, self.controls.cancel_button,
                                                            self.controls.status)
        self.run_button.setToolTip("Run the gradient checklist on the current script (in the background)")
        self.run_button.clicked.connect(lambda: self.run_check())
        self.browser = QTextBrowser()
        self.browser.setOpenLinks(False)
        self.browser.anchorClicked.connect(self._anchor)
        self.browser.setMinimumHeight(60)
        top = QHBoxLayout()
        top.addWidget(self.run_button)
        top.addWidget(self.cancel_button)
        top.addWidget(self.status, 1)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(6, 4, 6, 4)
        lay.addLayout(top)
        lay.addWidget(self.browser, 1)
        host.documentChanged.connect(self.show_document)
        host.documentEdited.connect(self._edited)

    # -- documents ------------------------------------------------------------------
    def show_document(self, doc: Document) -> None:
        """Another document: its own report (none yet, it was just opened)."""
        self.doc = doc
        self.controls.job = None
        self.controls.idle()
        self.set_report(doc.findings)

    def _edited(self, doc: Document, what: str, _info: dict) -> None:
        """A report set on the document by someone else (opening met NaN/inf or an error)."""
        if what == "findings" and doc.findings is not self.report:
            self.doc = doc
            self.set_report(doc.findings)
            self.mark_all()

    # -- running -------------------------------------------------------------------
    @property
    def job(self) -> Job | None:
        return self.controls.job

    def run_check(self, steps: int = 0) -> Job | None:
        doc = self.controls.script_document()
        if doc is None:
            return None
        self.doc = doc
        self.set_report(None)
        return self.controls.start("check", check_job(str(doc.path), steps), doc, lambda r: self._done(doc, r),
                                   on_phase=lambda s: self.status.setText(f"Checking: {s}…"))

    def cancel(self) -> None:
        self.controls.cancel()

    def _done(self, doc: Document, report: dict) -> None:
        self.set_report(report)
        doc.set_findings(report)
        self.mark_all()
        self.checkFinished.emit(report)

    # -- showing ---------------------------------------------------------------------
    def set_report(self, report: dict | None) -> None:
        self.report = report
        if report is None:
            self.status.setText(IDLE_TEXT)
            self.browser.clear()
            return
        self.status.setText(summary_text(report))
        self.browser.setHtml("".join(finding_html(i, f) for i, f in enumerate(report.get("findings", []))))

    def mark_all(self) -> None:
        """Every finding's marks, drawn in the graph of its document: the same as ``gradviz export
        --check`` (cut edges, NaN origins, a severity badge on the nodes each finding names)."""
        if self.report is None:
            return
        from gradviz.core.output.marks import marks_from_findings

        marks = marks_from_findings(self.report.get("findings", []), self.doc.graph)
        for style, edges in marks.edges.items():
            self.doc.mark_edges(edges, style)
        for style, ids in marks.nodes.items():
            self.doc.mark_nodes(ids, style)

    def findings(self) -> list[dict]:
        return list(self.report.get("findings", [])) if self.report else []

    def activate(self, i: int) -> None:
        """Select and frame finding ``i``'s nodes in the graph (what clicking its title does)."""
        from gradviz.core.output.marks import finding_nodes

        f = self.findings()[i]
        ids = finding_nodes(f, self.doc.graph)      # its cut point too: brightened, never dimmed
        if ids:
            self.doc.select(ids, center=True)
        self.findingActivated.emit(f)

    def _anchor(self, url: QUrl) -> None:
        kind, _, index = url.toString().partition(":")
        if not index.isdigit() or int(index) >= len(self.findings()):
            return
        if kind == "show":
            self.activate(int(index))
        elif kind == "loc":
            open_location(self.findings()[int(index)].get("location") or "")
