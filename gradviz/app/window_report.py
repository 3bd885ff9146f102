"""What every panel of the window shows, as plain data: ``gradviz SCRIPT --report out.json``
and the model-based test read it (``tests/test_window_model.py``).

Every entry is read back from the widgets' own text (the number a user sees), with the step
the view names, so a test can hold each against torch at that step::

    {"step": S, "source": "training", "model_step": S, "title": ..., "status": ...,
     "inspector": {"node": id, "step": S, "state": "current", "fields": {...}, "grad_norm": X, ...},
     "modules": {path: {"grad_norm": X, "step": S}},
     "folds": {label: {"grad_norm": X, "step": S, "first": A, "last": B, "repeat_norms": [...]}},
     "training": {"steps_done": S, "loss": L, "loss_step": s, "labels": [...]},
     "export_header": "training step S · loss L · ..."}
"""
from __future__ import annotations

import math
import re

from gradviz.app.step_values import node_now

_NUMBER = re.compile(r"[-+]?(?:\d[\d,]*\.?\d*|\.\d+)(?:e[-+]?\d+)?|NaN|Inf|-Inf", re.I)


def shown_number(text: str | None) -> float | None:
    """The first number of a label's text ("0.0366", "1.2e-05", "NaN"); None for "—" or none."""
    if not text:
        return None
    m = _NUMBER.search(text)
    if m is None:
        return None
    token = m.group(0).replace(",", "")
    try:
        return float(token)
    except ValueError:
        return None


def inspector_report(window) -> dict:
    insp = window.inspector
    fields: dict[str, str] = {}
    for section in (insp.identity, insp.gradient, insp.values):
        if section.isVisible() or not insp.isVisible():
            fields.update({f"{section.title().split(' · ')[0]}: {k}": v for k, v in section.values.items()})
    out = {"node": insp.node_id or None, "step": insp.shown_step, "state": insp.shown_state,
           "title": insp.title.text(), "subtitle": insp.subtitle.text(), "fields": fields}
    for key in ("grad norm", "grad mean", "grad std", "grad min", "grad max", "value norm", "value std"):
        value = insp.field(key)
        if value is not None:
            out[key.replace(" ", "_")] = shown_number(value)
    if insp.field("total grad norm") is not None:
        out["total_grad_norm"] = shown_number(insp.field("total grad norm"))
    return out


def plots_drawn_to(plots) -> dict[str, float | None]:
    """The last step each scalar training plot's curve holds: a plot drawn to the step shown."""
    def last(curve) -> float | None:
        data = curve.xData            # the data set, before clipping/downsampling for display
        return None if data is None or not len(data) else float(data[-1])
    return {"loss": last(plots.loss_curve), "grad_norm": last(plots.pre_curve), "lr": last(plots.lr_curve)}


def report(window) -> dict:
    """Everything the window's panels show now, with the step each names."""
    doc = window.document
    scene = window.scene
    out: dict = {"document": doc.name, "status": doc.status, "step": doc.step, "source": doc.norms_source,
                 "model_step": doc.model_step, "title": window.windowTitle(), "status_bar": window.status.step.text()}
    out["inspector"] = inspector_report(window)
    modules = {}
    for path in doc.modules:
        text = window.outline.module_norm_text(path)
        if text is not None:
            modules[path or "(model)"] = {"grad_norm": shown_number(text), "text": text, "step": doc.step}
    out["modules"] = modules
    folds = {}
    if doc.view is not None:
        from gradviz.render.primitives.fold_paint import sparkline_ends

        for fid, a in doc.view.nodes(data=True):
            if a.get("fold"):
                now = node_now(doc, fid)
                drawn = a.get("repeat_norms") or []
                first, last = sparkline_ends(drawn)
                folds[str(a.get("label"))] = {"id": fid, "grad_norm": now.attrs.get("grad_norm"), "step": now.step,
                                              "first": shown_number(first), "last": shown_number(last),
                                              "repeat_norms": [None if v is None or not math.isfinite(v) else v
                                                               for v in drawn]}
    out["folds"] = folds
    panel = window.training_panel
    if panel is not None:
        labels = [panel.step_label.text(), panel.loss_label.text(), panel.acc_label.text()]
        out["training"] = {"state": panel.state, "steps_done": shown_number(panel.step_label.text()),
                           "loss": shown_number(panel.loss_label.text().removeprefix("loss ")),
                           "loss_step": shown_number(panel.loss_label.text().partition("(step ")[2]),
                           "labels": labels, "history": len(panel.history),
                           "plots_drawn_to": plots_drawn_to(panel.plots_slot.widget) if panel.plots_slot.made() else None}
    out["loss_node"] = {"loss": scene.values.loss, "step": scene.values.loss_step}
    if doc.view is not None:
        from gradviz.render.scene.header import header_text

        out["export_header"] = " · ".join(header_text(scene.shown_state()))
    return out
