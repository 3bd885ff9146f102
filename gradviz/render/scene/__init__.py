"""GraphScene (scene.py): one laid-out graph drawn from the parts, and what it adds over them: diagnosis
marks and the highlight (marks_layer), the graph's own marks and the failing call's note (graph_marks),
the cached picture of a big graph (overview), and what it shows (header: ShownState, no Qt).
Imports parts and primitives.
"""
