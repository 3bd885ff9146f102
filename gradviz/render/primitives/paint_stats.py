"""Counters of what was painted (node text, edge labels, simple batches, far labels), read by tests and
benchmarks. Apart from the items that count, so a painter low in the layers (``far_labels``) and the
items above it share one dict."""
from __future__ import annotations

PAINT_STATS = {"node_text": 0, "edge_labels": 0, "simple_batches": 0}
