"""The Qt renderer and image export (offscreen; see conftest.py)."""
from __future__ import annotations

import xml.etree.ElementTree as ET

import networkx as nx
import pytest

import gradviz.render  # noqa: F401  (applies the PySide6 refcount workaround before any Qt call)
from gradviz.cli.main import main
from gradviz.core.output.colors import NAN_RGB, NO_GRAD_RGB, luminance
from gradviz.core.trace.tracer import trace

from PySide6.QtCore import QRectF, Qt  # noqa: E402
from PySide6.QtGui import QImage, QPainter  # noqa: E402
from PySide6.QtWidgets import QGraphicsView  # noqa: E402

from gradviz.render.parts import items as render_items  # noqa: E402
from gradviz.render.export.formats import render_image  # noqa: E402
from gradviz.render.scene.scene import GraphScene  # noqa: E402
from gradviz.render.primitives.style import layout_graph  # noqa: E402

SCRIPT = '''
import torch
import torch.nn.functional as F
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.fc2 = nn.Linear(8, 3)
        self.unused = nn.Linear(2, 2)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


model = Net


def batch(step):
    g = torch.Generator().manual_seed(step)
    return torch.randn(5, 4, generator=g), torch.randint(0, 3, (5,), generator=g)


def loss_fn(out, y):
    return F.cross_entropy(out, y)
'''

BROKEN = '''
import torch
from torch import nn
model = lambda: nn.Linear(2, 2)
def batch(step):
    return torch.randn(3, 2), None
def loss_fn(out, y):
    raise ValueError("no loss today")
'''


@pytest.fixture(scope="module")
def script_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("scripts") / "tiny_model.py"
    path.write_text(SCRIPT)
    return path


@pytest.fixture(scope="module")
def graph(script_path):
    return trace(script_path)


def colored_graph() -> nx.DiGraph:
    """A chain whose nodes have chosen norms, NaN and 'no gradient' among them."""
    g = nx.DiGraph()
    norms = {"op:small": 1e-4, "op:mid": 1e-2, "op:big": 1.0, "op:nan": float("nan"), "op:none": None}
    prev = None
    for nid, norm in norms.items():
        g.add_node(nid, kind="op", label=nid[3:], shape=[2, 2], grad_norm=norm)
        if prev:
            g.add_edge(prev, nid, shape=[2, 2])
        prev = nid
    g.add_node("loss", kind="loss", label="loss", shape=[], grad_norm=1.0, value=0.5)
    g.add_edge(prev, "loss", shape=[])
    return g


def make_scene(g: nx.DiGraph, qapp) -> GraphScene:
    scene = GraphScene()
    scene.set_graph(g, layout_graph(g))
    return scene


def rgb(color) -> tuple[int, int, int]:
    return color.red(), color.green(), color.blue()


def test_scene_builds_an_item_per_node(graph, qapp):
    scene = make_scene(graph, qapp)
    assert graph.number_of_nodes() > 10
    for nid in graph.nodes:
        item = scene.node_item(nid)
        assert item is not None and item.node_id == nid
        assert not (item.flags() & item.GraphicsItemFlag.ItemIsMovable)
        assert item.flags() & item.GraphicsItemFlag.ItemIsSelectable
    assert len(scene.edge_paths) == graph.number_of_edges()
    assert scene.graph_rect().contains(scene.node_item("loss").sceneBoundingRect())
    # the unused Linear's parameters are unreachable: grey
    assert rgb(scene.fill_colors[scene.index["param:unused.weight"]]) == NO_GRAD_RGB


def test_colours_follow_the_log_scale(qapp):
    scene = make_scene(colored_graph(), qapp)
    lum = [luminance(rgb(scene.fill_colors[scene.index[n]])) for n in ("op:small", "op:mid", "op:big")]
    assert lum[0] < lum[1] < lum[2]
    assert rgb(scene.fill_colors[scene.index["op:nan"]]) == NAN_RGB
    assert rgb(scene.fill_colors[scene.index["op:none"]]) == NO_GRAD_RGB

    scene.set_color_range(1e-3, 1e-1)
    assert scene.color_scale().lo == pytest.approx(1e-3)
    before = rgb(scene.fill_colors[scene.index["op:mid"]])
    scene.set_norms({"op:mid": 1e-1, "not-a-node": 3.0})
    assert luminance(rgb(scene.fill_colors[scene.index["op:mid"]])) > luminance(before)
    scene.set_norms({"op:mid": float("nan")})
    assert rgb(scene.fill_colors[scene.index["op:mid"]]) == NAN_RGB


def render(scene: GraphScene, zoom: float) -> QImage:
    """Paint the top-left of the graph at ``zoom`` into a 1400×900 image, as a view would."""
    image = QImage(1400, 900, QImage.Format_ARGB32_Premultiplied)
    image.fill(0xFFFFFFFF)
    painter = QPainter(image)
    rect = scene.graph_rect()
    source = QRectF(rect.left(), rect.top(), 1400 / zoom, 900 / zoom)
    scene.render(painter, QRectF(0, 0, 1400, 900), source)
    painter.end()
    return image


def test_level_of_detail_hides_text(graph, qapp):
    scene = make_scene(graph, qapp)
    stats = render_items.PAINT_STATS
    stats.update(node_text=0, edge_labels=0, simple_batches=0)
    render(scene, 0.1)
    assert stats["node_text"] == 0 and stats["edge_labels"] == 0 and stats["simple_batches"] > 0
    render(scene, 1.0)
    assert stats["node_text"] > 0 and stats["edge_labels"] > 0


def test_click_selects_and_signals(graph, qapp, qtbot):
    scene = make_scene(graph, qapp)
    view = QGraphicsView(scene)
    view.resize(900, 700)
    view.show()
    qtbot.waitExposed(view)
    item = scene.node_item("loss")
    view.centerOn(item)
    with qtbot.waitSignal(scene.nodeClicked, timeout=2000) as blocker:
        qtbot.mouseClick(view.viewport(), Qt.LeftButton, pos=view.mapFromScene(item.sceneBoundingRect().center()))
    assert blocker.args == ["loss"]
    assert item.isSelected() and scene.index["loss"] in scene.selected
    # the window changes selection with signals blocked: the outline must still follow
    scene.blockSignals(True)
    scene.clearSelection()
    scene.node_item("input:0").setSelected(True)
    scene.blockSignals(False)
    assert scene.selected == {scene.index["input:0"]}
    with qtbot.waitSignal(scene.backgroundClicked, timeout=2000):
        corner = scene.graph_rect().topLeft()
        view.centerOn(corner)
        qtbot.mouseClick(view.viewport(), Qt.LeftButton, pos=view.mapFromScene(corner) + view.rect().topLeft())


def test_highlight_and_marks(graph, qapp):
    scene = make_scene(graph, qapp)
    edge = next(iter(graph.edges))
    scene.highlight({edge[0], edge[1]}, {edge})
    assert scene.dimmed_nodes() is not None and scene.index[edge[0]] not in scene.dimmed_nodes()
    render(scene, 1.0)
    render(scene, 0.1)
    scene.clear_highlight()
    assert scene.dimmed_nodes() is None
    scene.mark_edges([edge, ("input:0", "loss")], "broken")  # the second is not in the layout: drawn straight
    scene.mark_nodes(["loss"], "nan-origin")
    assert len(scene.marks_layer.badges["nan-origin"]) == 1
    scene.clear_marks()
    assert not scene.marks_layer.badges.get("nan-origin") and not scene.marks()


def distinct_colors(image: QImage) -> int:
    small = image.scaled(300, 300)
    return len({small.pixel(x, y) for x in range(0, small.width(), 2) for y in range(0, small.height(), 2)})


def test_png_svg_pdf_are_valid_and_not_blank(graph, tmp_path, qapp):
    layout = layout_graph(graph)
    png, svg, pdf = tmp_path / "g.png", tmp_path / "g.svg", tmp_path / "g.pdf"
    for path in (png, svg, pdf):
        render_image(graph, layout, path, scale=1.5)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    image = QImage(str(png))
    assert image.width() > 300 and image.height() > 300
    assert distinct_colors(image) > 50
    root = ET.parse(svg).getroot()
    assert root.tag.endswith("svg")
    assert "addmm" in svg.read_text() and "fc1.weight" in svg.read_text()
    assert pdf.read_bytes()[:4] == b"%PDF"
    assert pdf.stat().st_size > 2000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.pdf", "g.png", "g.svg"]  # no temp files left


def test_dark_theme_png(graph, tmp_path, qapp):
    path = tmp_path / "dark.png"
    render_image(graph, layout_graph(graph), path, scale=1.0, theme="dark")
    image = QImage(str(path))
    assert image.pixelColor(2, 2).lightness() < 60


def test_collapsed_graph_renders(graph, tmp_path, qapp):
    from gradviz.core.layout.grouping import collapse
    small = collapse(graph, depth=1)
    assert any(a.get("kind") == "group" for _, a in small.nodes(data=True))
    scene = make_scene(small, qapp)
    render(scene, 1.0)
    render_image(small, layout_graph(small), tmp_path / "c.png", scale=1.0)
    assert QImage(str(tmp_path / "c.png")).width() > 100


def test_cli_export(script_path, tmp_path, capsys, qapp):
    out = tmp_path / "tiny.png"
    assert main(["export", str(script_path), "-o", str(out), "--scale", "1"]) == 0
    assert out.read_bytes()[:4] == b"\x89PNG"
    assert "wrote" in capsys.readouterr().out
    assert main(["export", str(script_path), "-o", str(tmp_path / "tiny.json"), "--collapse", "1"]) == 0
    assert main(["export", str(script_path), "-o", str(tmp_path / "tiny.svg"), "--collapse", "auto"]) == 0

    assert main(["export", str(script_path), "-o", str(tmp_path / "tiny.bmp")]) == 2
    assert "unknown extension" in capsys.readouterr().err
    assert main(["export", str(script_path), "-o", str(tmp_path / "no" / "such" / "dir.png")]) == 2
    assert "does not exist" in capsys.readouterr().err

    broken = tmp_path / "broken.py"
    broken.write_text(BROKEN)
    assert main(["export", str(broken), "-o", str(tmp_path / "b.png")]) == 2
    err = capsys.readouterr().err
    assert f"{broken}:" in err and "no loss today" in err
    # what ran before loss_fn raised, with the failing call in red (views': #14 item 3)
    assert "the graph up to the failing call" in err and (tmp_path / "b.png").read_bytes()[:4] == b"\x89PNG"
