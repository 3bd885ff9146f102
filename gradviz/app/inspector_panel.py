"""The inspector: everything known about the selected node (or group)."""
from __future__ import annotations

import math

from PySide6.QtCore import Qt
from PySide6.QtGui import QFontDatabase
from PySide6.QtWidgets import (QAbstractItemView, QFormLayout, QFrame, QGroupBox, QHeaderView, QLabel,
                               QScrollArea, QSizePolicy, QTableWidget, QTableWidgetItem, QVBoxLayout, QWidget)

from gradviz.app.formatting import alarm_css, count, num, shape
from gradviz.core.stats.sharding import fmt_layout
from gradviz.app import inspector_memory as mem
from gradviz.app.histogram import Histogram
from gradviz.app.theme import palette_theme
from gradviz.app.source_link import LocationLabel
from gradviz.app.step_values import step_text

STAT_ROWS = (("norm", "norm"), ("mean", "mean"), ("std", "std (population)"), ("min", "min"), ("max", "max"),
             ("zero_frac", "zeros"), ("nan", "NaN"), ("inf", "Inf"), ("numel", "elements"))


BREAK_AFTER = ",([{=+-*/.:"     # a long source line may wrap after these (a zero-width space is put there)


def wrappable(code: str) -> str:
    """A source line that word-wraps inside a narrow panel instead of being cut: break
    opportunities after punctuation, where Python code has no spaces."""
    return "".join(ch + "\u200b" if ch in BREAK_AFTER else ch for ch in code)


def breakable(text: str, longest: int = 20) -> str:
    """A value whose words longer than ``longest`` characters (``torch::autograd::AccumulateGrad``,
    dotted parameter names) may wrap after punctuation: one such word would else set the whole
    panel's minimum width and bring a sideways scroll bar. Short words (numbers) never break."""
    return " ".join(wrappable(w) if len(w) > longest else w for w in text.split(" "))


class _Section(QGroupBox):
    """A titled form whose rows are replaced wholesale."""

    def __init__(self, title: str, parent=None) -> None:
        super().__init__(title, parent)
        self.box = QVBoxLayout(self)
        self.box.setContentsMargins(8, 6, 8, 8)
        self.form = QFormLayout()
        self.box.addLayout(self.form)
        self.form.setLabelAlignment(Qt.AlignRight)
        self.form.setFieldGrowthPolicy(QFormLayout.AllNonFixedFieldsGrow)
        self.form.setHorizontalSpacing(10)
        self.form.setVerticalSpacing(3)
        self.values: dict[str, str] = {}

    def clear_rows(self) -> None:
        while self.form.rowCount():
            self.form.removeRow(0)
        self.values = {}

    def add(self, label: str, value, key: str | None = None) -> QWidget:
        if isinstance(value, QWidget):
            widget = value
        else:
            widget = QLabel(breakable(str(value)))
            widget.setTextInteractionFlags(Qt.TextSelectableByMouse)
            widget.setWordWrap(True)
            self.values[key or label] = str(value)
        self.form.addRow(label, widget)
        return widget


class InspectorPanel(QScrollArea):
    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.setObjectName("inspector")
        self.setWidgetResizable(True)
        self.setFrameShape(QFrame.NoFrame)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarAlwaysOff)    # it wraps: one scroll bar, vertical
        body = QWidget()
        lay = QVBoxLayout(body)
        lay.setContentsMargins(8, 8, 8, 8)
        lay.setSpacing(8)
        self.title = QLabel("Nothing selected")
        self.title.setObjectName("inspectorTitle")
        self.title.setStyleSheet("font-size: 15px; font-weight: 600;")
        self.title.setWordWrap(True)
        self.title.setTextFormat(Qt.PlainText)
        self.title.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.subtitle = QLabel("Click a node in the graph.")
        self.subtitle.setWordWrap(True)
        self.subtitle.setStyleSheet("color: palette(placeholder-text);")
        self.identity = _Section("Node")
        self.source = LocationLabel()
        self.code = self._code_label()
        self.gradient = _Section("Gradient")
        self.histogram = Histogram()
        self.gradient.box.addWidget(self.histogram)
        self.values = _Section("Parameter values")
        self.saved_box = QGroupBox("Saved tensors")
        self.saved = QTableWidget(0, 4)
        self.saved.setHorizontalHeaderLabels(["name", "shape / value", "dtype", "values"])
        self.saved.verticalHeader().hide()
        self.saved.setEditTriggers(QAbstractItemView.NoEditTriggers)
        self.saved.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeToContents)
        self.saved.horizontalHeader().setStretchLastSection(True)
        self.saved.setVerticalScrollBarPolicy(Qt.ScrollBarAlwaysOff)
        QVBoxLayout(self.saved_box).addWidget(self.saved)
        for w in (self.title, self.subtitle, self.identity, self.gradient, self.values, self.saved_box):
            lay.addWidget(w)
        lay.addStretch(1)
        self.setWidget(body)
        self.node_id = ""
        self.shown_step: int | None = None
        self.shown_state = "current"
        self.member_norm = None          # node id -> norm at the shown step (set by the window)
        self.show_node("", {})

    # -- content -------------------------------------------------------------
    def field(self, key: str) -> str | None:
        """The text shown for ``key`` (e.g. 'grad norm', 'module'): used by tests and tools."""
        for section in (self.identity, self.gradient, self.values):
            if key in section.values:
                return section.values[key]
        return None

    def show_node(self, nid: str, attrs: dict, graph=None, step: int | None = None, state: str = "current",
                  source: str = "traced", waiting: str = "") -> None:
        """Node ``nid``: its ``attrs`` hold the numbers of ``step`` only (``app/step_values.node_now``);
        ``state`` "norm": only the norm is known at that step, ``waiting`` says why the rest is not
        (being computed, or how to get it)."""
        # long: one row per fact of a node, in the order the panel shows them
        self.node_id = nid
        self.shown_step, self.shown_state = step, state
        for s in (self.identity, self.gradient, self.values):
            s.clear_rows()
        self.source = LocationLabel()
        self.code = self._code_label()
        if not nid or not attrs:
            self.title.setText("Nothing selected")
            self.subtitle.setText("Click a node in the graph, or search with Ctrl+F.")
            for w in (self.identity, self.gradient, self.values, self.saved_box):
                w.hide()
            return
        kind = attrs.get("kind", "")
        self.title.setText(str(attrs.get("label") or nid))
        self.histogram.show()
        if kind == "group":
            self._show_group(nid, attrs, graph, step, source)
            return
        op = attrs.get("op") or ""
        self.subtitle.setText(f"{kind} · {op}" if op and kind == "op" else kind)
        idf = self.identity
        idf.setTitle("Node")
        idf.add("id", nid)
        if op:
            idf.add("op", op)
        if attrs.get("custom"):
            idf.add("autograd.Function", attrs["custom"])
        module = attrs.get("module", "")
        mtype = attrs.get("module_type", "")
        idf.add("module", (module or "(model)") + (f"  [{mtype}]" if mtype else ""), key="module")
        if attrs.get("location"):
            self.source.set_location(attrs["location"])
            idf.add("source", self.source)
            if attrs.get("code"):
                self.code.setText(wrappable(attrs["code"].strip()))
                self.code.setToolTip(attrs["code"].strip())
                self.code.setTextFormat(Qt.PlainText)
                idf.add("", self.code)
        if attrs.get("library_location"):   # the innermost library frame, beside the user's line
            library = LocationLabel()
            library.set_location(attrs["library_location"])
            library.setToolTip(attrs["library_location"])
            idf.add("in library", library)
            idf.values["library"] = attrs["library_location"]
        if attrs.get("call"):
            idf.add("call", attrs["call"])
        outputs = attrs.get("outputs") or []
        if outputs:
            for i, o in enumerate(outputs):
                idf.add("output" if len(outputs) == 1 else f"output {i}",
                        f"{shape(o.get('shape'))}  {o.get('dtype', '')}  {o.get('device', '')}")
        else:
            idf.add("shape", f"{shape(attrs.get('shape'))}  {attrs.get('dtype', '')}  {attrs.get('device', '')}")
        if kind == "loss" and attrs.get("value") is not None:
            value_step = attrs.get("value_step", step)
            idf.add("value", num(attrs.get("value")) + (f"  ({step_text(value_step, source)})"
                                                       if value_step is not None else ""), key="loss value")
        if attrs.get("shard"):               # a sharded (FSDP2 / DTensor) parameter: global shape above
            idf.add("shard", fmt_layout(attrs["shard"]).split(" ", 1)[1])
        if attrs.get("comm"):                # a communication step FSDP2 / DTensor put into the graph
            idf.add("communication", f"{attrs['comm']['via']} {attrs['comm']['kind']}: {attrs['comm']['what']}")
        if kind == "param":
            idf.add("requires_grad", str(attrs.get("requires_grad", True)))
            if attrs.get("reachable") is False:
                idf.add("reached", "no: backward never reached this parameter")
            if attrs.get("tied"):            # one tensor under several names (core/runtime/ties.py)
                idf.add("tied", "one tensor with " + ", ".join(attrs["tied"]) + " (its gradient is the sum of all uses)")
        for label, text in mem.node_rows(attrs):
            idf.add(label, text, key=label)
        idf.show()
        meta = graph is not None and graph.graph.get("meta")
        self._name_step(self.gradient, "Gradient", step, source, meta)
        self._show_stats(self.gradient, attrs, "grad", mem.META_TEXT if meta else "no gradient flowed here")
        if attrs.get("grad_norm") is not None and attrs.get("grad_mean") is None and (
                state == "norm" or (graph is not None and graph.graph.get("details") == "norms")):
            self.gradient.add("details", attrs.get("details_error") or waiting or "computing…", key="details")
        self.histogram.setVisible(self.histogram.set_hist(attrs.get("grad_hist")))
        self.gradient.show()
        if kind == "param":
            self._name_step(self.values, "Parameter values", step, source, meta)
            self._show_stats(self.values, attrs, "value", mem.META_TEXT if meta else (
                waiting or "computing…") if state != "current" else "")
            self.values.show()
        else:
            self.values.hide()
        self._show_saved(attrs.get("saved") or [], attrs.get("saved_stats"))

    def show_summary(self, graph, live: dict | None = None, loss: float | None = None,
                     step: int | None = None, source: str = "traced", loss_step: int | None = None) -> None:
        """Nothing selected: an overview of the traced run and where the gradient is; ``live``
        (node id -> norm, ``step`` of a training or recorded run) replaces the traced norms,
        ``loss`` (of ``loss_step``) the traced loss."""
        self.node_id = ""
        self.shown_step, self.shown_state = step, "current"
        for sec in (self.identity, self.gradient, self.values):
            sec.clear_rows()
        if graph is None:
            self.show_node("", {})
            return
        modules = graph.graph.get("modules", {})
        root = modules.get("", {})
        script = graph.graph.get("script") or ""
        self.title.setText(root.get("type") or "Model")
        self.subtitle.setText("Nothing selected: click a node, or search with Ctrl+F.")
        idf = self.identity
        idf.setTitle("Run")
        invented, source = graph.graph.get("invented"), graph.graph.get("model_source")
        if invented and source:   # a model without a script: what the user named, and what gradviz made up
            idf.add("model", source, key="model")
            idf.add("invented", invented.removeprefix(f"{source}: "), key="invented")
        else:
            idf.add("script", script.rsplit("/", 1)[-1], key="script")
        idf.add("device", graph.graph.get("device") or "—", key="device")
        if loss is None:
            loss, loss_step = graph.graph.get("loss"), graph.graph.get("step")
        idf.add("loss", num(loss) + (f"  ({step_text(loss_step)})" if loss_step is not None else ""), key="loss")
        idf.add("graph", f"{count(graph.number_of_nodes())} nodes · {count(graph.number_of_edges())} edges")
        idf.add("parameters", count(root.get("numel")), key="parameters")
        for label, text in mem.summary_rows(graph):
            idf.add(label, text, key=f"memory {label}")
        idf.show()
        pnodes = [(n, a) for n, a in graph.nodes(data=True) if a.get("kind") == "param"]
        values = {n: live[n] if live and n in live else a.get("grad_norm") for n, a in pnodes}
        params = [(values[n], a.get("param", n)) for n, a in pnodes]
        present = [v for v in values.values() if v is not None]
        total = math.sqrt(math.fsum(v * v for v in present)) if present else root.get("grad_norm")
        g = self.gradient
        self._name_step(g, "Gradient", step if live else graph.graph.get("step"), source if live else "traced",
                        graph.graph.get("meta"))
        if graph.graph.get("meta"):   # no values at all: nothing is missing, nothing is known
            g.add("", mem.META_TEXT, key="total grad norm")
            params = []
        else:
            g.add("total norm", num(total), key="total grad norm")
        missing = [name for v, name in params if v is None]
        bad = [name for v, name in params if v is not None and not math.isfinite(v)]
        if missing:
            g.add("no gradient", f"{len(missing)} parameter(s): " + ", ".join(missing[:4])
                  + (" …" if len(missing) > 4 else ""))
        if bad:
            w = g.add("NaN / Inf", ", ".join(bad[:4]) + (" …" if len(bad) > 4 else ""))
            w.setStyleSheet(alarm_css(palette_theme(self.palette())))
        finite = sorted(((v, name) for v, name in params if v is not None and math.isfinite(v)), reverse=True)
        if finite:
            g.add("largest", "\n".join(f"{num(v)}   {name}" for v, name in finite[:3]))
            g.add("smallest", "\n".join(f"{num(v)}   {name}" for v, name in finite[-3:][::-1]))
        self.histogram.hide()
        g.show()
        self.values.hide()
        self.saved_box.hide()

    def _code_label(self) -> QLabel:
        label = QLabel()
        label.setFont(QFontDatabase.systemFont(QFontDatabase.FixedFont))
        label.setWordWrap(True)
        label.setTextInteractionFlags(Qt.TextSelectableByMouse)
        label.setSizePolicy(QSizePolicy.Ignored, QSizePolicy.Preferred)
        label.setStyleSheet("background: palette(alternate-base); padding: 3px;")
        return label

    def _show_stats(self, section: _Section, attrs: dict, prefix: str, empty: str) -> None:
        if attrs.get(f"{prefix}_norm") is None and attrs.get(f"{prefix}_numel") is None:
            section.add("", empty or "—", key=f"{prefix} none")
            return
        for key, label in STAT_ROWS:
            value = attrs.get(f"{prefix}_{key}")
            text = count(value) if key in ("nan", "inf", "numel") else num(value)
            if key == "zero_frac" and value is not None:    # a fraction of the elements: say it as one
                text = f"{value * 100:.1f} %" + (f"  ({count(round(value * numel))} of {count(numel)})"
                                                 if (numel := attrs.get(f"{prefix}_numel")) else "")
            w = section.add(label, text, key=f"{prefix} {key}")
            if key in ("nan", "inf") and value:
                w.setStyleSheet(alarm_css(palette_theme(self.palette())))

    def _name_step(self, section: _Section, title: str, step, source: str, meta) -> None:
        """A section of numbers says which step they are: "Gradient · step 2,708"."""
        if meta:
            section.setTitle(title)
            return
        text = step_text(step, source)
        section.setTitle(f"{title} · {text}")
        section.values["step"] = text
        section.step = step

    def _show_group(self, nid: str, attrs: dict, graph, step=None, source: str = "traced") -> None:
        fold = bool(attrs.get("fold"))
        self.subtitle.setText("repeated blocks, folded" if fold else "module group · double-click to expand")
        self.folded = fold
        idf = self.identity
        idf.setTitle("Repeated blocks" if fold else "Module")
        idf.add("module", attrs.get("parent" if fold else "module", "") or "(model)", key="module")
        idf.add("type", attrs.get("module_type", ""), key="type")
        idf.add("nodes", count(attrs.get("n_nodes")), key="nodes")
        for label, text in (mem.fold_rows(attrs) if fold else []) + mem.group_rows(attrs):
            idf.add(label, text, key=label)
        idf.show()
        g = self.gradient
        self._name_step(g, "Gradient", step, source, graph is not None and graph.graph.get("meta"))
        g.add("norm", num(attrs.get("grad_norm")), key="grad norm")
        if attrs.get("grad_nan"):
            g.add("NaN", count(attrs.get("grad_nan")), key="grad nan")
        if attrs.get("grad_inf"):
            g.add("Inf", count(attrs.get("grad_inf")), key="grad inf")
        members = [m for m in attrs.get("members", ()) if m.startswith("param:")]
        if members and graph is not None:
            for m in members[:200]:
                g.add(m[len("param:"):], num(self.member_norm(m) if self.member_norm else
                                             (graph.nodes[m].get("grad_norm") if m in graph else None)), key=m)
            if len(members) > 200:
                g.add("", f"… {len(members) - 200} more parameters")
        self.histogram.hide()
        g.show()
        self.values.hide()
        self.saved_box.hide()

    def _show_saved(self, saved: list[dict], stats: list[dict] | None = None) -> None:
        """What the node saved for backward; ``stats`` (computed on demand: ``core/trace/details.py``) adds
        each tensor's norm and range."""
        values = {e.get("name"): e for e in stats or []}
        self.saved.setRowCount(len(saved))
        for row, entry in enumerate(saved):
            if "value" in entry:
                cells = [entry.get("name", ""), str(entry.get("value")), "", ""]
            else:
                st = values.get(entry.get("name"), {})
                text = (f"‖·‖ {num(st['norm'])} · {num(st.get('min'))} … {num(st.get('max'))}" if "norm" in st
                        else ("…" if stats is None else ""))
                cells = [entry.get("name", ""), shape(entry.get("shape")), entry.get("dtype", ""), text]
            for col, text in enumerate(cells):
                self.saved.setItem(row, col, QTableWidgetItem(text))
        # every row shown: the inspector scrolls as a whole, the table never inside it
        self.saved.resizeRowsToContents()
        rows = sum(self.saved.rowHeight(r) for r in range(len(saved)))
        self.saved.setFixedHeight(self.saved.horizontalHeader().height() + rows + 2 * self.saved.frameWidth())
        self.saved_box.setVisible(bool(saved))
