"""The Compare job: read both sides, group them alike, lay out the three drawings (off the UI thread)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gradviz.app.jobs import JobContext


@dataclass
class CompareResult:
    comparison: Any              # core.record.compare.Comparison (numbers and graphs)
    views: Any                   # core.record.compare_view.CompareViews, or None without node norms
    layouts: dict[str, Any]      # "a", "b", "ratio" -> Layout


def compare_job(a: str, b: str):
    def job(ctx: JobContext) -> CompareResult:
        from gradviz.core.record.compare import compare
        from gradviz.core.record.compare_view import compare_views
        from gradviz.render.primitives.style import layout_graph

        ctx.phase("reading the runs")
        comparison = compare(a, b)
        ctx.phase("grouping")
        views = compare_views(comparison)
        layouts: dict[str, Any] = {}
        if views is not None:
            ctx.phase("layout")
            layouts["b"] = layout_graph(views.view_b)
            layouts["ratio"] = layouts["b"]           # the same boxes: B's view, other colours
            if views.view_a is not None:
                layouts["a"] = layout_graph(views.view_a)
        return CompareResult(comparison, views, layouts)

    return job
