"""SVG written in parts (render/export/svg_stream.py): the same drawing as one QSvgGenerator document,
every node label and edge in it, valid XML, ids unique, the scene left as it was, and nothing
half-written when painting fails in a later part."""
from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from collections import Counter

import pytest

from gradviz.core.trace.tracer import trace
from test_app_support import TRANSFORMER

SVG = "{http://www.w3.org/2000/svg}"
DRAWN = {"path", "rect", "text", "polygon", "polyline", "ellipse", "line", "image", "circle"}


@pytest.fixture(scope="module")
def graph():
    return trace(TRANSFORMER)


def scene_with_bands(graph, monkeypatch, band: float):
    """The scene with its module frames cut into bands ``band`` scene px tall (2,048 normally)."""
    from gradviz.render.parts import frame_bands, frames
    from gradviz.render.export.image_export import scene_for

    monkeypatch.setattr(frame_bands, "BAND", band)
    monkeypatch.setattr(frames, "BAND", band)
    return scene_for(graph)


@pytest.fixture()
def scene(qapp, graph):
    from gradviz.render.export.image_export import scene_for

    return scene_for(graph)


@pytest.fixture()
def banded_scene(qapp, graph, monkeypatch):
    return scene_with_bands(graph, monkeypatch, 64.0)


def drawing(path) -> list[tuple]:
    """What the SVG draws, in order: each shape or text with the style it inherits from its groups."""
    out = []

    def walk(el, inherited: dict) -> None:
        tag = el.tag.removeprefix(SVG)
        attrs = {**inherited, **{k: v for k, v in el.attrib.items() if k != "id"}}
        if tag in DRAWN:
            out.append((tag, tuple(sorted(attrs.items())), (el.text or "").strip()))
        elif tag in ("g", "svg"):
            for child in el:
                walk(child, attrs if tag == "g" else {})

    walk(ET.parse(path).getroot(), {})
    return out


def export(scene, path, part_bytes: int, monkeypatch):
    from gradviz.render.export import svg_stream
    from gradviz.render.export.formats import export_scene

    monkeypatch.setattr(svg_stream, "PART_BYTES", part_bytes)
    parts = []
    real = svg_stream._write_parts
    monkeypatch.setattr(svg_stream, "_write_parts", lambda *a: parts.append(real(*a)) or parts[-1])
    export_scene(scene, path)
    return parts[0]


def test_parts_draw_exactly_what_one_document_draws(scene, tmp_path, monkeypatch):
    from gradviz.render.export import svg_stream

    monkeypatch.setattr(svg_stream, "banded_frames", lambda item: None)   # the FrameItem in one piece: Qt's order
    one = export(scene, tmp_path / "one.svg", 1 << 40, monkeypatch)
    many = export(scene, tmp_path / "many.svg", 1, monkeypatch)
    from gradviz.render.export.svg_stream import painted_items, pieces_of

    assert one == 1 and many == len(pieces_of(painted_items(scene))) > 3     # one part per painted item
    whole, parted = drawing(tmp_path / "one.svg"), drawing(tmp_path / "many.svg")
    assert len(whole) > 500 and parted == whole           # same shapes, texts, styles, in the same order
    texts = {t for tag, _, t in parted if tag == "text"}
    for i in range(len(scene.ids)):                       # every node's label (as elided to its box)
        assert scene.text_lines(i)[0] in texts, scene.ids[i]
    for frame in scene.frames:
        assert frame.label in texts
    root = ET.parse(tmp_path / "many.svg").getroot()
    ids = [el.get("id") for el in root.iter() if el.get("id")]
    assert ids and len(ids) == len(set(ids))              # the legend's gradients, once each


def test_frames_cut_in_bands_are_each_drawn_once(banded_scene, tmp_path, monkeypatch):
    """A FrameItem paints a band's frame parts in the SVG part that holds the band: within a part
    the frames keep their order, across parts the bands' order (bands never overlap)."""
    scene = banded_scene
    frame_item = next(it for it in scene.items() if type(it).__name__ == "FrameItem")
    assert len(frame_item._bands) > 10
    one = export(scene, tmp_path / "one.svg", 1 << 40, monkeypatch)
    many = export(scene, tmp_path / "many.svg", 1, monkeypatch)
    assert one == 1 and many > len(frame_item._bands)
    assert Counter(drawing(tmp_path / "many.svg")) == Counter(drawing(tmp_path / "one.svg"))


def test_every_edge_is_in_the_parts(scene, tmp_path, monkeypatch, graph):
    export(scene, tmp_path / "one.svg", 1 << 40, monkeypatch)
    export(scene, tmp_path / "many.svg", 1, monkeypatch)

    def arrows(path):   # each edge ends in one filled arrowhead path; count the subpaths ('M')
        return sum(attrs_d.count("M") for tag, attrs, _ in drawing(path) if tag == "path"
                   for k, attrs_d in attrs if k == "d")

    assert arrows(tmp_path / "many.svg") == arrows(tmp_path / "one.svg")
    assert arrows(tmp_path / "one.svg") >= 2 * graph.number_of_edges()   # a curve and an arrow per edge


def test_the_scene_is_left_as_it_was(banded_scene, tmp_path, monkeypatch):
    scene = banded_scene
    before = [(type(it).__name__, it.isVisible(), it.zValue()) for it in scene.items()]
    frame_item = next(it for it in scene.items() if type(it).__name__ == "FrameItem")
    bands = dict(frame_item._bands)
    export(scene, tmp_path / "many.svg", 1, monkeypatch)
    assert [(type(it).__name__, it.isVisible(), it.zValue()) for it in scene.items()] == before
    assert frame_item._bands == bands            # every band of every frame again


def test_a_failure_in_a_later_part_leaves_nothing(scene, tmp_path, monkeypatch):
    from gradviz.render.export import image_export

    old = tmp_path / "g.svg"
    old.write_text("the previous export")
    real, calls = image_export.paint_page, []

    def paint(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise MemoryError()
        return real(*args, **kwargs)

    monkeypatch.setattr(image_export, "paint_page", paint)
    with pytest.raises(MemoryError):
        export(scene, old, 1, monkeypatch)
    assert os.listdir(tmp_path) == ["g.svg"] and old.read_text() == "the previous export"
    assert all(it.isVisible() for it in scene.items() if type(it).__name__ in ("NodeBatch", "EdgeBatch"))


def test_ids_a_later_part_defines_are_made_its_own():
    from gradviz.render.export.svg_stream import prefix_ids

    part = (b'<defs>\n<linearGradient x1="0" id="gradient1"><stop/></linearGradient>\n</defs>\n'
            b'<g fill="url(#gradient1)"><rect/></g><text>url(#gradient1) gradient1</text>')
    got = prefix_ids(part, b"p3-")
    assert b'id="p3-gradient1"' in got and b'fill="url(#p3-gradient1)"' in got
    assert b"<text>url(#gradient1) gradient1</text>" in got     # text is text, never renamed
