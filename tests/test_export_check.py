"""``gradviz export --check`` on every planted bug: the picture shows what ``check`` finds
(cut edges, NaN origins, severity badges), each with its legend entry and a count in the
header; a script that cannot be traced gets exit 2 and the same ``file:line`` message."""
from __future__ import annotations

import functools
from pathlib import Path

import pytest

import gradviz.core.diagnosis as diagnosis
from gradviz.cli.main import main
from gradviz.core.output.marks import EDGE_STYLES, NODE_STYLES, marks_from_findings
from gradviz.core.runtime.errors import ScriptError
from gradviz.core.trace.tracer import trace
from gradviz.render.scene.graph_marks import graph_marks
from gradviz.render.scene.header import MARK_NOUNS

BUGS = sorted((Path(__file__).resolve().parent.parent / "samples" / "bugs").glob("*.py"))


@functools.lru_cache(maxsize=None)
def findings_of(script: str):
    return tuple(diagnosis.check(script))


def test_the_bug_samples_are_there():
    assert len(BUGS) >= 15, "samples/bugs is missing"


@pytest.mark.parametrize("script", BUGS, ids=lambda p: p.stem)
def test_export_check_draws_what_check_finds(script, tmp_path, capsys, monkeypatch):
    found = findings_of(str(script))
    # the export runs the same checklist: share the result instead of running it twice
    monkeypatch.setattr(diagnosis, "check", lambda s, *a, **k: list(findings_of(str(s))))
    out = tmp_path / "g.svg"
    try:
        graph = trace(script)
    except ScriptError as exc:
        assert main(["export", str(script), "-o", str(out), "--check"]) == 2
        # the last word is gradviz's file:line: message (the script's own warnings may come first)
        assert capsys.readouterr().err.strip().endswith(str(exc))
        assert ":" in str(exc) and not out.exists()
        return
    assert main(["export", str(script), "-o", str(out), "--check"]) == 0
    stdout = capsys.readouterr().out
    assert "health check:" in stdout and all(f.code in stdout for f in found)
    svg = out.read_text()
    marks = marks_from_findings(found).on_view(graph)
    for style_name, edges in graph_marks(graph).edges.items():   # cut branches are drawn as part of the graph
        marks.add_edges(style_name, edges)
    assert found, "every planted bug is found"
    for style_name, n in marks.counts().items():
        label = EDGE_STYLES.get(style_name) or NODE_STYLES[style_name]
        assert label in svg, (style_name, label)                   # the legend explains the mark
        one, many = MARK_NOUNS[style_name]
        assert f"{n} {one if n == 1 else many}" in svg             # and the header counts it
    for style_name in set(EDGE_STYLES) | set(NODE_STYLES):
        if style_name not in marks.counts():
            assert (EDGE_STYLES.get(style_name) or NODE_STYLES[style_name]) not in svg


def test_export_check_marks_reach_the_data_formats(tmp_path, monkeypatch):
    import json

    detach = next(p for p in BUGS if p.stem == "detach")
    monkeypatch.setattr(diagnosis, "check", lambda s, *a, **k: list(findings_of(str(s))))
    assert main(["export", str(detach), "-o", str(tmp_path / "g.json"), "--check"]) == 0
    data = json.loads((tmp_path / "g.json").read_text())
    edges = data["graph"]["marks"]["edges"]["broken"]
    graph = trace(detach)                      # the cut edge starts at the cut op, as the window draws it (#27)
    assert edges and [list(e) for e in marks_from_findings(findings_of(str(detach)), graph).edges["broken"]] == edges
    assert edges[0][0] == graph.graph["cut_branches"][0]["node"]
    assert main(["export", str(detach), "-o", str(tmp_path / "g.dot"), "--check"]) == 0
    dot = (tmp_path / "g.dot").read_text()
    u, v = edges[0]
    assert f'"{u}" -> "{v}" [style=dashed, color="#dc2626"' in dot
