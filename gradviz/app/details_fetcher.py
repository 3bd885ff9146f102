"""Fetch the statistics a fast trace left out, for the node the user selects.

The window traces with ``details="norms"`` (exact gradient norms only: opening is about
twice as fast); when a node is selected whose mean, spread and histogram are not known
yet, ``core.details.node_details`` replays the script on the "details" lane, off the UI
thread, and the inspector fills in when they arrive. Structure-only graphs have no values
to fetch; a graph whose script changed since it was traced says so in the inspector.
"""
from __future__ import annotations

import logging

from gradviz.app.document import Document
from gradviz.app.session import Session

log = logging.getLogger(__name__)

LANE = "details"


def needs_details(graph, nid: str) -> bool:
    """True when ``nid`` of ``graph`` has a gradient norm but not the rest of its statistics."""
    if graph is None or nid not in graph or graph.graph.get("details") != "norms":
        return False
    attrs = graph.nodes[nid]
    if attrs.get("kind") == "group":
        return False
    missing_grad = attrs.get("grad_norm") is not None and attrs.get("grad_mean") is None
    missing_value = attrs.get("kind") == "param" and attrs.get("value_norm") is not None and \
        attrs.get("value_mean") is None
    return missing_grad or missing_value


class DetailsFetcher:
    def __init__(self, session: Session) -> None:
        self.session = session
        self.pending: set[str] = set()

    def request(self, doc: Document, nid: str) -> bool:
        """Start computing ``nid``'s details if they are missing; True when a job was submitted."""
        graph = doc.graph
        if not needs_details(graph, nid) or nid in self.pending:
            return False
        self.pending = {nid}   # a newer selection supersedes the older one (the lane drops it)

        def job(ctx):
            from gradviz.core.trace.details import node_details

            ctx.phase("computing node details")
            return node_details(graph, [nid])

        def done(result: dict) -> None:
            self.pending.discard(nid)
            for key, attrs in result.items():
                doc.set_details(key, attrs)

        def failed(exc: BaseException, text: str) -> None:
            self.pending.discard(nid)
            log.info("details of %s not computed: %s", nid, exc)
            doc.set_details(nid, {"details_error": str(exc)})

        self.session.jobs.submit(LANE, job, document=doc, on_done=done, on_failed=failed)
        return True
