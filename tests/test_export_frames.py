"""Nested, labelled frames around expanded modules: every open module gets one, it holds
all of the module's boxes, never covers another module's box, and frames nest like the
module tree. Exports draw them with their labels."""
from __future__ import annotations

import pytest

from gradviz.core.layout.grouping import collapse
from gradviz.core.trace.tracer import trace
from test_app_support import MLP, SAMPLES, TRANSFORMER


def scene_of(graph):
    from gradviz.render.export.image_export import scene_for
    return scene_for(graph)


def members(scene, module):
    """Boxes that belong inside ``module``'s frame: its own nodes and its sub-modules' (or their boxes)."""
    out = set()
    for i, key in enumerate(scene.keys):
        attrs = scene.graph.nodes[key]
        if attrs.get("kind") in ("loss", "input"):
            continue
        m = attrs.get("module") or ""
        if m.startswith(module + ".") or (m == module and attrs.get("kind") != "group"):
            out.add(i)
    return out


def check_frames(scene):
    assert scene.frames
    for frame in scene.frames:
        inside = members(scene, frame.module)
        assert inside, frame.module
        for i, rect in enumerate(scene.rects):
            if i in inside:
                assert frame.path.contains(rect), (frame.module, scene.ids[i])
            else:   # never over a box of another module (1 px of slack for antialiasing)
                assert not frame.path.intersects(rect.adjusted(1, 1, -1, -1)), (frame.module, scene.ids[i])
        assert frame.label_at and frame.label.startswith(frame.module)
    by_module = {f.module: f for f in scene.frames}
    for module, frame in by_module.items():
        parent = module.rpartition(".")[0]
        while parent and parent not in by_module:
            parent = parent.rpartition(".")[0]
        if parent:    # nested like the module tree: the parent's frame holds the child's
            assert by_module[parent].path.united(frame.path).boundingRect() == by_module[parent].path.boundingRect()
            assert by_module[parent].height > frame.height


def test_every_open_module_of_the_mlp_has_a_frame(qapp):
    scene = scene_of(trace(MLP))
    assert {f.module for f in scene.frames} == {"fc1", "fc2", "fc3", "act1", "act2"}
    check_frames(scene)


def test_frames_nest_and_skip_collapsed_modules(qapp):
    graph = trace(SAMPLES / "bugs" / "detach.py")
    scene = scene_of(graph)
    assert {"encoder", "encoder.0", "encoder.2", "head"} <= {f.module for f in scene.frames}
    check_frames(scene)
    view = collapse(graph, expanded={"encoder"})        # encoder open, its layers as boxes
    scene = scene_of(view)
    assert "encoder" in {f.module for f in scene.frames}
    assert not {"encoder.0", "encoder.2"} & {f.module for f in scene.frames}
    check_frames(scene)


@pytest.mark.parametrize("depth", [2, 3])
def test_transformer_frames(qapp, depth):
    scene = scene_of(collapse(trace(TRANSFORMER), depth=depth))
    check_frames(scene)
    assert max(f.height for f in scene.frames) == depth - 2   # at depth 3 blocks hold framed sub-modules


def test_frames_are_in_the_export_with_their_labels(qapp, tmp_path):
    from gradviz.render.export.formats import export_scene

    scene = scene_of(trace(MLP))
    svg = export_scene(scene, tmp_path / "f.svg").path.read_text()
    for frame in scene.frames:
        assert frame.label in svg
    assert "module (expanded)" in svg           # the legend explains the frame


def test_group_and_frame_labels_stay_readable_zoomed_out(qapp):
    """At a Fit-like zoom (detail text gone) collapsed boxes and outermost frames keep their names."""
    from PySide6.QtCore import QRectF
    from PySide6.QtGui import QImage, QPainter

    from gradviz.render.parts import items

    scene = scene_of(collapse(trace(TRANSFORMER), depth=2))
    rect = scene.graph_rect()
    zoom = 0.25                                    # below the 0.45 at which box text disappears
    image = QImage(round(rect.width() * zoom), round(rect.height() * zoom), QImage.Format_ARGB32_Premultiplied)
    image.fill(0xFFFFFFFF)
    items.PAINT_STATS.update(node_text=0, far_labels=0)
    painter = QPainter(image)
    scene.render(painter, QRectF(0, 0, image.width(), image.height()), rect)
    painter.end()
    assert items.PAINT_STATS["node_text"] == 0
    groups = [i for i, k in enumerate(scene.kinds) if k == "group"]
    outer = [f for f in scene.frames if f.outermost]
    assert groups and outer
    assert items.PAINT_STATS["far_labels"] >= len(groups)   # every box; frames only where their name fits
    # the label is there in pixels: text colour inside the top-left of a box (11 px tall on screen)
    i = groups[0]
    r = scene.rects[i]
    text = scene.text_colors[i]
    x0, y0 = round((r.left() - rect.left()) * zoom), round((r.top() + 6 - rect.top()) * zoom)
    hits = sum(abs(image.pixelColor(x, y).lightness() - text.lightness()) < 40
               for x in range(x0 + 6, x0 + 40) for y in range(y0 + 4, y0 + 15))
    assert hits > 20
