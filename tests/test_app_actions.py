"""Window actions without other tests: drag and drop, Copy image, the right-click menu,
and the window layout kept between sessions."""
from __future__ import annotations

from PySide6.QtCore import QMimeData, QPoint, QPointF, QSettings, Qt, QUrl  # noqa: E402
from PySide6.QtGui import QDragEnterEvent, QDropEvent, QGuiApplication  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

from test_app_support import MLP, WAIT_MS, open_and_wait


def _mime(path) -> QMimeData:
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(path))])
    return mime


def test_dropping_a_py_file_opens_it(qtbot, window):
    mime = _mime(MLP)
    enter = QDragEnterEvent(QPoint(300, 300), Qt.CopyAction, mime, Qt.LeftButton, Qt.NoModifier)
    enter.ignore()
    QApplication.sendEvent(window, enter)
    assert enter.isAccepted()
    drop = QDropEvent(QPointF(300, 300), Qt.CopyAction, mime, Qt.LeftButton, Qt.NoModifier)
    drop.ignore()
    with qtbot.waitSignal(window.graphShown, timeout=WAIT_MS):
        QApplication.sendEvent(window, drop)
    assert drop.isAccepted()
    assert window.current_script() == str(MLP.resolve())
    assert "param:fc1.weight" in window.document.view


def test_dropping_something_else_is_refused(qtbot, window, tmp_path):
    other = tmp_path / "notes.txt"
    other.write_text("not a model")
    mime = _mime(other)
    enter = QDragEnterEvent(QPoint(300, 300), Qt.CopyAction, mime, Qt.LeftButton, Qt.NoModifier)
    enter.ignore()
    QApplication.sendEvent(window, enter)
    assert not enter.isAccepted()
    drop = QDropEvent(QPointF(300, 300), Qt.CopyAction, mime, Qt.LeftButton, Qt.NoModifier)
    drop.ignore()
    QApplication.sendEvent(window, drop)
    assert not drop.isAccepted() and window.current_script() is None


def test_copy_image_puts_the_graph_on_the_clipboard(qtbot, window):
    open_and_wait(qtbot, window, MLP)
    clipboard = QGuiApplication.clipboard()
    clipboard.clear()
    window.acts.copy.trigger()
    image = clipboard.image()
    assert not image.isNull()
    assert image.width() > 100 and image.height() > 100
    assert len({image.pixel(x, y) for x in range(0, image.width(), 7) for y in range(0, image.height(), 7)}) > 10


def test_context_menu_collapse_parent_collapses_it(qtbot, window):
    open_and_wait(qtbot, window, MLP)
    doc = window.document
    assert "fc1" in doc.expanded
    op = next(n for n, a in doc.view.nodes(data=True) if a.get("kind") == "op" and a.get("module") == "fc1")
    menu = window.selection.context_menu_for(op)
    assert window.selected == op                       # right-click selects the node
    texts = [a.text() for a in menu.actions()]
    assert "Collapse parent (fc1)" in texts and "Copy id" in texts
    collapse = next(a for a in menu.actions() if a.text() == "Collapse parent (fc1)")
    assert collapse.isEnabled()
    with qtbot.waitSignal(window.graphShown, timeout=WAIT_MS):
        collapse.trigger()
    assert "fc1" not in doc.expanded
    assert "group:fc1" in doc.view and op not in doc.view
    assert window.selected == "group:fc1"              # the new box is selected
    assert not window.outline.item("fc1").checkState() == Qt.Checked
    menu = window.selection.context_menu_for("group:fc1")
    assert "Expand" in [a.text() for a in menu.actions()]


def test_window_geometry_is_restored_from_settings(qtbot, tmp_path):
    import gradviz.app  # noqa: F401
    from gradviz.app.main_window import MainWindow

    ini = str(tmp_path / "settings.ini")
    first = MainWindow(settings=QSettings(ini, QSettings.IniFormat), extensions=False)
    qtbot.addWidget(first)
    assert not first.restore_layout()                  # nothing saved yet
    first.resize(731, 542)          # the offscreen screen is 800x800
    first.move(23, 31)
    first.show()
    qtbot.waitExposed(first)
    first.inspector_dock.hide()
    first.close()                                      # saves geometry and dock state
    second = MainWindow(settings=QSettings(ini, QSettings.IniFormat), extensions=False)
    qtbot.addWidget(second)
    assert second.restore_layout()
    second.show()
    qtbot.waitExposed(second)
    assert (second.width(), second.height()) == (731, 542)
    assert second.pos() == first.pos()
    assert second.inspector_dock.isHidden() and not second.outline_dock.isHidden()
    second.shutdown()
