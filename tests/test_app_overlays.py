"""The legend overlay: sized to what it paints, and Fit keeps every node clear of it."""
from __future__ import annotations

import pytest


from test_app_support import MLP, TRANSFORMER, change_view, open_and_wait


def _rightmost_painted_column(image) -> int:
    for x in range(image.width() - 1, -1, -1):
        for y in range(image.height()):
            if image.pixelColor(x, y).alpha() > 0:
                return x
    return -1


@pytest.mark.parametrize("key", [False, True])
def test_legend_size_hint_holds_everything_it_paints(qtbot, key):
    import gradviz.app  # noqa: F401
    from PySide6.QtCore import QPointF, Qt
    from PySide6.QtGui import QImage, QPainter

    from gradviz.core.output.colors import LogColorScale
    from gradviz.render.primitives import style
    from gradviz.render.export.legend import PAD, ColorBarWidget, paint_legend

    image = QImage(1400, 120, QImage.Format_ARGB32)
    image.fill(Qt.transparent)
    painter = QPainter(image)
    paint_legend(painter, QPointF(PAD, PAD), LogColorScale(1e-3, 10.0), style.theme("light"), key=key)
    painter.end()
    right = _rightmost_painted_column(image)
    hint = ColorBarWidget(key=key).sizeHint()
    assert right > 300
    assert right + 1 <= hint.width() - PAD + 1, (right, hint.width())
    assert hint.width() - right < 40   # and not much wider either


def _overlaps_legend(win) -> list[str]:
    from PySide6.QtCore import QRectF

    legend = win.legend.geometry()      # in view coordinates, like the viewport
    vp = win.view.viewport().geometry()
    lay = win.document.layout
    bad = []
    for n, (x, y) in lay.pos.items():
        w, h = lay.size[n]
        r = win.view.mapFromScene(QRectF(x - w / 2, y - h / 2, w, h)).boundingRect()
        r.translate(vp.topLeft())
        if r.intersects(legend) and r.intersects(vp):
            bad.append(n)
    return bad


@pytest.mark.parametrize("size", [(1300, 850), (1000, 620), (1600, 700)])
def test_first_view_and_fit_keep_nodes_clear_of_the_legend(qtbot, window, size):
    window.resize(*size)
    qtbot.wait(50)
    open_and_wait(qtbot, window, MLP)
    qtbot.wait(50)
    assert window.legend.isVisible()
    assert _overlaps_legend(window) == []
    window.view.zoom_in()
    window.acts.fit.trigger()
    assert _overlaps_legend(window) == []
    window.resize(size[0], size[1] - 150)     # a smaller window, then F again
    qtbot.wait(50)
    window.acts.fit.trigger()
    assert _overlaps_legend(window) == []


def test_tall_graph_fit_keeps_nodes_clear_of_the_legend(qtbot, window):
    open_and_wait(qtbot, window, TRANSFORMER)
    change_view(qtbot, window, window.expand_all)
    window.acts.fit.trigger()
    assert _overlaps_legend(window) == []


def test_hiding_the_legend_frees_the_space(qtbot, window):
    open_and_wait(qtbot, window, MLP)
    assert window.view.bottom_margin > window.legend.height()
    window.acts.legend.setChecked(False)
    assert window.view.bottom_margin == 0 and not window.legend.isVisible()
    window.acts.legend.setChecked(True)
    assert window.legend.isVisible() and window.view.bottom_margin > 0


def test_view_stays_fitted_when_a_bottom_panel_opens_until_the_user_moves_it(qtbot, window):
    from PySide6.QtCore import QRectF

    open_and_wait(qtbot, window, MLP)
    assert window.view.fitted
    before = window.view.viewport().height()
    window.show_error("something to show in a bottom panel")
    qtbot.waitUntil(lambda: window.view.viewport().height() < before)
    assert _overlaps_legend(window) == []
    lay = window.document.layout
    seen = window.view.visible_scene_rect()
    for n, (x, y) in lay.pos.items():
        w, h = lay.size[n]
        assert seen.contains(QRectF(x - w / 2, y - h / 2, w, h)), n
    window.view.zoom_in()                 # the user's zoom is kept through resizes
    assert not window.view.fitted
    scale = window.view.scale_factor()
    window.error_dock.hide()
    qtbot.wait(50)
    assert window.view.scale_factor() == scale


def test_first_view_of_a_tall_graph_keeps_node_text_readable(qtbot, window):
    """A ResNet fitted whole would be drawn as bare blocks: its width is fitted instead."""
    from gradviz.render.parts.items import TEXT_LOD

    open_and_wait(qtbot, window, MLP.parent / "cnn.py")
    assert window.view.scale_factor() >= TEXT_LOD   # node labels are drawn


def test_mark_entries_wrap_to_the_view_and_nothing_is_cut(qtbot, window):
    """detach.py after a health check draws three kinds of marks: in a narrow window their legend
    entries wrap into rows inside the view (one row ran past the edge: 'error found by the he…')."""
    from PySide6.QtCore import QPointF, Qt
    from PySide6.QtGui import QImage, QPainter

    from gradviz.core.output.colors import LogColorScale
    from gradviz.render.primitives import style
    from gradviz.render.export.legend import MARKS_H, PAD, bar_row_width, legend_size, mark_rows, paint_legend

    marks = ["broken", "cut-branch", "nan-origin"]
    one_row = legend_size(key=False, marks=marks)
    narrow = bar_row_width() + 20       # the colour bar's row is the least the legend needs
    assert one_row.width() > narrow
    rows = mark_rows(marks, narrow)
    assert len(rows) >= 2 and [m for r in rows for m in r] == marks
    wrapped = legend_size(key=False, marks=marks, max_width=narrow)
    assert wrapped.width() <= narrow + 1 and wrapped.height() == one_row.height() + MARKS_H * (len(rows) - 1)
    image = QImage(wrapped.width() + 40, wrapped.height() + 40, QImage.Format_ARGB32)
    image.fill(Qt.transparent)
    painter = QPainter(image)
    used = paint_legend(painter, QPointF(PAD, PAD), LogColorScale(1e-3, 10.0), style.theme("light"),
                        key=False, marks=marks, max_width=narrow)
    painter.end()
    assert used.height() == pytest.approx(wrapped.height() - 4, abs=1)
    assert _rightmost_painted_column(image) <= PAD + wrapped.width() + 1

    window.resize(1250, 800)
    window.legend.set_marks(marks)
    window.overlays.place()
    vp = window.view.viewport().geometry()
    least = legend_size(key=False).width() + 2 * PAD          # the colour bar's row cannot wrap
    assert window.legend.geometry().right() <= vp.right() or window.legend.width() <= least + 1
    assert window.legend.height() >= window.legend.sizeHint().height()
