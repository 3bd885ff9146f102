"""#12 items 4, 5, 6: canvas keys, re-grouping that keeps the user's place, first views,
Fit, and the overview map of a tall graph (pytest-qt, keys and clicks through qtbot)."""
from __future__ import annotations

from PySide6.QtCore import QPoint, Qt
from PySide6.QtGui import QAction, QShortcut

from gradviz.app.first_view import LEGIBLE_SCALE
from test_app_support import MLP, SAMPLES, TRANSFORMER, change_view, full, open_and_wait  # noqa: F401 (full: a fixture)


def _whole_graph_in_view(win) -> bool:
    return win.view.visible_scene_rect().contains(win.scene.graph_rect().adjusted(10, 10, -10, -10))


def test_canvas_keys_have_one_owner_and_work(qtbot, window, qtlog):
    open_and_wait(qtbot, window, MLP)
    owners: dict[str, int] = {}
    for obj in window.findChildren(QAction) + window.findChildren(QShortcut):
        keys = obj.shortcuts() if isinstance(obj, QAction) else [obj.key()]
        for k in keys:
            if not k.isEmpty():
                owners[k.toString()] = owners.get(k.toString(), 0) + 1
    assert {k: n for k, n in owners.items() if n > 1} == {}
    view = window.view
    qtbot.mouseClick(view.viewport(), Qt.LeftButton, pos=QPoint(8, 8))     # click the canvas first
    assert view.hasFocus() or view.viewport().hasFocus()
    start = view.scale_factor()
    qtbot.keyClick(view, Qt.Key_Plus)
    assert view.scale_factor() > start * 1.2
    qtbot.keyClick(view, Qt.Key_Minus)
    qtbot.keyClick(view, Qt.Key_Minus)
    assert view.scale_factor() < start
    qtbot.keyClick(view, Qt.Key_1)
    assert abs(view.scale_factor() - 1.0) < 1e-6
    qtbot.keyClick(view, Qt.Key_Plus)
    qtbot.keyClick(view, Qt.Key_0, Qt.ControlModifier)
    assert abs(view.scale_factor() - 1.0) < 1e-6
    qtbot.keyClick(view, Qt.Key_F)
    assert _whole_graph_in_view(window) and view.fitted
    qtbot.keyClick(view, Qt.Key_Down)                  # nothing selected: the arrows start at the loss
    assert window.selected == "loss"
    qtbot.keyClick(view, Qt.Key_Up)                    # Up: to what produced it
    assert window.selected in set(window.document.view.predecessors("loss"))
    # a text field keeps its typed characters: F in the search field types an "f"
    window.acts.find.trigger()
    qtbot.keyClick(window.search.edit, Qt.Key_F)
    assert window.search.edit.text() == "f"
    assert not [r for r in qtlog.records if "Ambiguous shortcut" in r.message]


def test_collapse_all_redraws_and_clicks_select(qtbot, window):
    open_and_wait(qtbot, window, TRANSFORMER)
    doc = window.document
    change_view(qtbot, window, window.expand_all)
    change_view(qtbot, window, window.collapse_all)
    assert len(window.scene.ids) == doc.view.number_of_nodes() == len(doc.layout.pos)
    assert "12 shown" in window.status.size_label.text() or doc.view.number_of_nodes() == 12
    # the canvas shows the new boxes and a click on one selects it, without pressing Fit first
    gid = "group:blocks"
    item = window.scene.node_item(gid)
    pos = window.view.mapFromScene(item.sceneBoundingRect().center())
    assert window.view.viewport().rect().contains(pos)
    with qtbot.waitSignal(window.nodeSelected, timeout=5000) as sel:
        qtbot.mouseClick(window.view.viewport(), Qt.LeftButton, pos=pos)
    assert sel.args == [gid]


def test_expand_all_keeps_the_selected_node_in_place(qtbot, window):
    open_and_wait(qtbot, window, TRANSFORMER)
    change_view(qtbot, window, window.collapse_all)
    window.select_nodes(["group:lm_head"], center=True)
    view = window.view
    rect = window.scene.node_item("group:lm_head").sceneBoundingRect()
    before = view.mapFromScene(rect.center())
    change_view(qtbot, window, window.expand_all)
    # lm_head opened: its members sit where its box was, on screen (no jump to an empty corner)
    members = [n for n, a in window.document.view.nodes(data=True) if a.get("module") == "lm_head"]
    assert members
    box = window.selection.nodes_rect(members)
    after = view.mapFromScene(box.center())
    assert (after - before).manhattanLength() < 40
    assert view.viewport().rect().contains(after)


def test_first_views_open_whole_and_fit_always_fits(qtbot, window):
    open_and_wait(qtbot, window, MLP)
    doc = window.document
    assert doc.view.number_of_nodes() == doc.graph.number_of_nodes()    # small: every op, legible
    assert window.view.scale_factor() >= LEGIBLE_SCALE and _whole_graph_in_view(window)
    open_and_wait(qtbot, window, TRANSFORMER)
    doc = window.document
    first = set(doc.expanded)
    # whole and fitted (not its last ten nodes), its fold shown (at the window's default size the
    # transformer's view is the one nearly as large as its smallest: first_view.NEAR_OVERVIEW)
    assert _whole_graph_in_view(window)
    assert any(str(n).startswith("fold:") for n in doc.view)
    change_view(qtbot, window, window.expand_all)
    window.view.zoom_in()
    window.view.fit()
    assert _whole_graph_in_view(window)                                 # Fit always fits, even a tower
    # Default grouping goes back to the first view, fitted
    change_view(qtbot, window, window.reset_grouping)
    qtbot.waitUntil(lambda: _whole_graph_in_view(window), timeout=5000)
    assert doc.expanded == first


def test_a_small_graph_opens_whole_even_in_a_small_canvas(qtbot, window):
    """In 900 x 520 the MLP opens whole and fitted, never smaller on screen than it must be: its
    view is drawn at least NEAR_OVERVIEW of the scale its modules as boxes would get (the overview,
    laid out here as the window lays out), so closing modules would gain it almost nothing. (With
    parameters beside their ops the MLP's every op is such a view; before, with a row more per
    module, its five modules as boxes were shown.)"""
    from gradviz.app.first_view import NEAR_OVERVIEW, fit_scale
    from gradviz.app.session import layout_view
    from gradviz.core.layout.grouping import collapse

    window.resize(900, 520)
    open_and_wait(qtbot, window, MLP)
    doc = window.document
    assert _whole_graph_in_view(window)
    vp = window.view.viewport()
    overview = fit_scale(layout_view(collapse(doc.graph, expanded=set())), (vp.width(), vp.height()))
    assert window.view.scale_factor() >= min(LEGIBLE_SCALE, NEAR_OVERVIEW * overview) - 1e-6
    shown = {a.get("kind") for _, a in doc.view.nodes(data=True)}
    assert "op" in shown or "group" in shown


def test_the_overview_map_of_a_tall_graph_is_usable(qtbot, window, monkeypatch):
    monkeypatch.setenv("GRADVIZ_GPT_BLOCKS", "8")    # a tower: fully expanded, 8 blocks of every op
    open_and_wait(qtbot, window, TRANSFORMER)
    change_view(qtbot, window, window.expand_all)
    window.view.actual_size()
    window.minimap.render_scene()
    window.minimap.refresh()
    mm = window.minimap
    assert mm.isVisible() and mm.tall
    assert mm.width() >= 100 and mm.height() >= 200                     # not a thin strip
    # the map follows the view; a click on it moves the view there
    middle = window.view.mapToScene(window.view.viewport().rect().center())
    qtbot.mouseClick(mm, Qt.LeftButton, pos=QPoint(mm.width() // 2, mm.height() - 10))
    moved = window.view.mapToScene(window.view.viewport().rect().center())
    assert moved.y() > middle.y() + 100
    rect = mm._to_map(window.view.visible_scene_rect())
    assert mm.rect().intersects(rect.toRect())                           # the visible area is drawn on the map


def test_the_whole_window_opens_with_the_graph_in_front(qtbot, full):
    """Every panel installed (training, diagnosis, runs, attribution, compare): none of the bottom
    panels is open at launch, so the graph has the window's height and the first view is legible."""
    from PySide6.QtWidgets import QDockWidget

    win = full
    bottom = [d for d in win.findChildren(QDockWidget) if win.dockWidgetArea(d) == Qt.BottomDockWidgetArea]
    assert {d.windowTitle() for d in bottom} >= {"Attribution", "Compare", "Diagnosis", "Gradcheck", "Run"}
    assert [d.windowTitle() for d in bottom if d.isVisible()] == []
    assert win.view.height() >= 0.75 * win.height()
    open_and_wait(qtbot, win, TRANSFORMER)
    assert _whole_graph_in_view(win) and win.view.scale_factor() >= LEGIBLE_SCALE   # 12 px labels at >= 6 px
    # the panels are still there for the user: their menu action shows them
    attribution = next(d for d in bottom if d.windowTitle() == "Attribution")
    win.extension_parts["attribution"]["action"].trigger()
    assert attribution.isVisible()


def test_module_names_stay_readable_below_the_legible_scale(qtbot, window):
    """At Fit on a collapsed overview drawn below the legible scale (12 px names would be < 6 px on
    screen), the module boxes' names are drawn at a fixed 11 screen px; above it, the box's own title."""
    from gradviz.render.parts import items

    open_and_wait(qtbot, window, SAMPLES / "cnn.py")
    change_view(qtbot, window, window.collapse_all)
    groups = [n for n, a in window.document.view.nodes(data=True) if a.get("kind") == "group"]
    assert len(groups) >= 5

    def painted(scale: float) -> int:
        window.view.set_scale(scale)
        window.view.centerOn(window.scene.graph_rect().center())
        items.PAINT_STATS["far_labels"] = 0
        window.view.viewport().grab()
        return items.PAINT_STATS["far_labels"]

    visible = window.view.visible_scene_rect
    assert items.GROUP_TEXT_LOD == LEGIBLE_SCALE                  # one idea of legible, in the window and its boxes
    assert painted(0.45) >= len([g for g in groups if visible().intersects(window.scene.node_item(g).sceneBoundingRect())])
    assert painted(0.55) == 0


TOWER = """\
import torch
from torch import nn

def model():
    return nn.Sequential(*[nn.Sequential(nn.Linear(4, 4), nn.Tanh()) for _ in range(300)])

def batch(step):
    g = torch.Generator().manual_seed(step)
    return torch.randn(8, 4, generator=g), torch.randn(8, 4, generator=g)

def loss_fn(output, target):
    return ((output - target) ** 2).mean()
"""


def test_the_map_of_a_very_tall_graph_is_not_a_strip(qtbot, window, tmp_path):
    """300 blocks drawn open are ~100 times taller than wide: at a readable width the map would
    need a pixmap too tall to hold, so it draws the stretch around the view (it was 24 px wide)."""
    from gradviz.app.minimap import MAX_PIXMAP, TALL_WIDTH

    script = tmp_path / "tower.py"
    script.write_text(TOWER)
    open_and_wait(qtbot, window, script)
    change_view(qtbot, window, window.expand_all)
    window.view.actual_size()
    mm = window.minimap
    mm.render_scene()
    whole = window.scene.graph_rect()
    assert whole.height() * TALL_WIDTH / whole.width() > 2 * MAX_PIXMAP       # the case: too tall for one pixmap
    assert mm.isVisible() and mm.width() >= TALL_WIDTH and mm.height() >= 200
    assert mm._source.height() < whole.height() / 2                           # a band of it
    # the view goes to the bottom: the map follows with the next stretch, and shows where the view is
    window.view.centerOn(whole.center().x(), whole.bottom() - 50)
    qtbot.waitUntil(lambda: mm._source.contains(window.view.visible_scene_rect().center()), timeout=5000)
    shown = mm._to_map(window.view.visible_scene_rect())
    assert mm.rect().intersects(shown.toRect())
    # a click on the map's top moves the view up
    before = window.view.visible_scene_rect().center().y()
    qtbot.mouseClick(mm, Qt.LeftButton, pos=QPoint(mm.width() // 2, 12))
    assert window.view.visible_scene_rect().center().y() < before - 200


TOWER = """
import torch
from torch import nn


class Tower(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.ones(2))

    def forward(self, x):
        for _ in range(1500):          # 3,000 ops in one column: ~300,000 px tall
            x = torch.tanh(x * self.w)
        return x


model = Tower


def batch(step):
    return torch.ones(2), torch.zeros(2)


def loss_fn(out, y):
    return ((out - y) ** 2).sum()
"""


def test_fit_reaches_a_graph_too_tall_for_the_usual_zoom_floor(qtbot, window, tmp_path):
    from gradviz.app.graph_view import MIN_SCALE

    script = tmp_path / "tower.py"
    script.write_text(TOWER)
    open_and_wait(qtbot, window, script)
    change_view(qtbot, window, window.expand_all)
    window.view.fit()
    scale = window.view.scale_factor()
    assert scale < MIN_SCALE / 2                              # the floor moved for this graph
    pixel = 1 / scale                                          # (at this zoom a scene pixel is 1/400 of a screen's)
    assert window.view.visible_scene_rect().contains(window.scene.graph_rect().adjusted(pixel, pixel, -pixel, -pixel))
    fitted = window.view.scale_factor()
    for _ in range(20):
        window.view.zoom_out()
    assert fitted / 2 - 1e-12 <= window.view.scale_factor() < fitted   # a little further out, not endlessly
