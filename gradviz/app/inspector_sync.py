"""The Inspector shows the current document's selection at the document's current step.

One function the selection (``interaction.py``) and every change of the document's numbers
(``graph_sync.py``: norms, loss, a node's statistics, the model's step) call: the node's
numbers come from ``step_values.node_now`` (never the traced attributes of another step);
what is not known at that step is asked for (the paused trainer measures it, or the traced
step's details are replayed) and a placeholder says so meanwhile.
"""
from __future__ import annotations

from gradviz.app.document import Document
from gradviz.app.inspector_panel import InspectorPanel
from gradviz.app.step_values import member_norm, node_now, step_text


def show_selection(inspector: InspectorPanel, doc: Document, request_details=None) -> None:
    """Show ``doc.selected`` (or the summary) with the numbers of the document's step.
    ``request_details(doc, nid)``: the traced step's replay (``DetailsFetcher.request``)."""
    nid = doc.selected
    inspector.member_norm = lambda m: member_norm(doc, m)
    if not nid or doc.view is None or nid not in doc.view:
        traced = doc.norms_source == "traced"
        inspector.show_summary(doc.graph, None if traced else doc.norms or None, doc.live_loss, doc.step,
                               doc.norms_source, doc.loss_step)
        return
    now = node_now(doc, nid)
    waiting = ""
    if now.source == "traced":
        if request_details is not None:
            request_details(doc, nid)
    elif now.state == "norm":
        if doc.recompute is not None and doc.model_step == now.step and doc.recompute(nid):
            waiting = f"computing {step_text(now.step)}…"
        elif doc.model_step is not None and doc.model_step != now.step:
            waiting = (f"the model is at step {doc.model_step:,}: pause training to measure it there"
                       if doc.recompute is None else f"computing step {doc.model_step:,}…")
            if doc.recompute is not None:
                doc.recompute(nid)
        else:
            waiting = f"only the norm is known at {step_text(now.step)}"
    inspector.show_node(nid, now.attrs, doc.graph, now.step, now.state, now.source, waiting)
