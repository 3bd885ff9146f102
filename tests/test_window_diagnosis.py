"""#12 items 2 and 9: findings in view at the dock's default size; errors met while opening
(in-place, NaN/inf) and a NaN loss in training explained as ``gradviz check`` explains them."""
from __future__ import annotations

import pytest

from test_app_support import MLP, SAMPLES, WAIT_MS, full, open_and_wait  # noqa: F401 (full: a fixture)

BUGS = SAMPLES / "bugs"


def _check(path):
    from gradviz.core.diagnosis.checklist import check_report

    return check_report(str(path), gradcheck=False).to_dict()["findings"]


def test_the_findings_are_in_view_at_the_default_dock_size(qtbot, full):
    win = full
    open_and_wait(qtbot, win, BUGS / "detach.py")
    panel = win.diagnosis_panels["diagnosis"]
    dock = win.diagnosis_panels["diagnosis_dock"]
    with qtbot.waitSignal(panel.checkFinished, timeout=WAIT_MS):
        win.diagnosis_panels["health_action"].trigger()
    qtbot.wait(50)
    assert dock.isVisible() and dock.widget() is panel               # no scroll area around it
    top = panel.mapTo(dock, panel.run_button.geometry().topLeft())
    assert dock.rect().contains(top) and panel.status.isVisible()    # the button and summary are in view
    assert "1 error" in panel.status.text()
    finding = panel.findings()[0]
    browser = panel.browser
    # the whole why-and-fix text and the location are there and fit: nothing to scroll to
    text = " ".join(browser.toPlainText().split())
    assert " ".join(finding["message"].split()) in text and "Remove the .detach()" in text
    assert f"detach.py:{finding['location'].rpartition(':')[2]}" in text
    assert browser.isVisible() and browser.height() >= 60 and panel.mapTo(dock, browser.geometry().bottomLeft()).y() <= dock.height()
    assert browser.verticalScrollBar().maximum() == 0
    assert browser.document().size().height() <= browser.viewport().height()


def test_an_inplace_error_at_open_names_the_call_check_names(qtbot, full):
    win = full
    path = BUGS / "inplace.py"
    expected = next(f for f in _check(path) if f["code"] == "inplace")
    with qtbot.waitSignal(win.traceFailed, timeout=WAIT_MS):
        win.open_script(path)
    assert win.errors.location.location() == expected["location"] == f"{path.resolve()}:22"
    assert "mul_" in win.errors.message.text() and expected["message"] == win.errors.message.text()
    assert "modified by an inplace operation" in win.errors.details.toPlainText()   # torch's own words kept
    assert win.document.findings["findings"][0]["code"] == "inplace"


def test_a_nonfinite_loss_at_open_is_explained(qtbot, full):
    win = full
    path = BUGS / "softmax_log.py"
    expected = _check(path)[0]
    open_and_wait(qtbot, win, path)
    qtbot.waitUntil(lambda: win.document.findings is not None, timeout=WAIT_MS)
    got = win.document.findings["findings"][0]
    assert got["code"] == expected["code"] == "inf" and got["location"] == expected["location"]
    assert win.diagnosis_panels["diagnosis_dock"].isVisible()
    assert "softmax_log.py:36" in win.diagnosis_panels["diagnosis"].browser.toPlainText()


def test_a_nan_loss_while_training_is_explained(qtbot, full, tmp_path):
    import sys

    win = full
    bad = tmp_path / "nan_mlp.py"
    bad.write_text(MLP.read_text().replace("    return F.cross_entropy(output, targets)",
                                           "    return F.cross_entropy(output, targets) * float('nan')"))
    sys.path.insert(0, str(SAMPLES))               # the copy imports _digits from the samples folder
    open_and_wait(qtbot, win, bad)
    panel = win.training_panel
    panel.start()
    qtbot.waitUntil(lambda: win.error_dock.isVisible(), timeout=WAIT_MS)
    qtbot.waitUntil(lambda: panel.state == "stopped", timeout=WAIT_MS)
    text = win.errors.text()
    line = next(i for i, t in enumerate(bad.read_text().splitlines(), 1) if "float('nan')" in t)
    assert "step 0" in text and f"nan_mlp.py:{line}" in text     # the op and line where NaN was born


def test_library_locations_are_shown_beside_the_users_line(qtbot, window):
    """A finding and a node inside a library model name the library frame too (#13)."""
    from gradviz.app.diagnosis import install

    parts = install(window)
    open_and_wait(qtbot, window, MLP)
    doc = window.document
    lib = "/site-packages/transformers/models/resnet/modeling_resnet.py:88"
    report = {"script": str(MLP), "seconds": 0.1, "findings": [
        {"code": "unreachable", "severity": "error", "message": "`fc1.weight` gets no gradient.",
         "params": [], "modules": [], "nodes": [], "location": f"{MLP}:30", "edges": [],
         "data": {"library_location": lib}}]}
    doc.set_findings(report)
    text = parts["diagnosis"].browser.toPlainText()
    assert "mlp_digits.py:30" in text and lib in text
    nid = next(n for n, a in doc.view.nodes(data=True) if a.get("location"))
    doc.view.nodes[nid]["library_location"] = lib
    window.select_nodes([nid])
    assert window.inspector.field("library") == lib


def test_an_inplace_error_inside_a_library_model_names_both_frames(qtbot, full):
    """transformers' GPT-2 calls the user's attention function, which writes in place: the Errors
    panel names the user's line and the library frame that called it, as ``gradviz check`` does."""
    win = full
    path = BUGS / "real_gpt2_inplace.py"
    expected = next(f for f in _check(path) if f["code"] == "inplace")
    library = expected["data"]["library_location"]
    assert "transformers/models/gpt2/" in library
    with qtbot.waitSignal(win.traceFailed, timeout=WAIT_MS):
        win.open_script(path)
    assert win.errors.location.location() == expected["location"] == f"{path.resolve()}:18"
    assert win.errors.library.location() == library and win.errors.library_row.isVisible()
    assert library in win.errors.text()
    open_and_wait(qtbot, win, MLP)                                   # a plain error has no library row
    win.show_error(RuntimeError("something else"))
    assert not win.errors.library_row.isVisible()
