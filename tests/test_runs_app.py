"""The Run dock (gradviz.app.runs) in the window: a run is a document of its own; follow mode."""
from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest


import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

from gradviz.core.record import watch  # noqa: E402


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.fc2 = nn.Linear(8, 2)
        self.never = nn.Linear(2, 2)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def _record(path: Path, steps: int, every: int = 2) -> None:
    torch.manual_seed(0)
    model = Net()
    with watch(model, path, every=every) as w:
        for _ in range(steps):
            model.zero_grad()
            loss = model(torch.randn(8, 4)).pow(2).mean()
            loss.backward()
            w.step(loss)


@pytest.fixture
def win(qtbot, window):
    """The conftest window with the runs extension; the graphs it was given are recorded."""
    from gradviz.app import runs

    window.run_panel = runs.install(window)
    window.graphs = []
    window.graphChanged.connect(window.graphs.append)
    yield window
    window.run_panel.shutdown()


def open_run(win, path):
    from gradviz.app.runs import open_run_file

    return open_run_file(win, win.run_panel, path)


def test_install_and_open(win, tmp_path):
    path = tmp_path / "a.gvrun"
    _record(path, 9)
    assert any("Open run" in a.text() for a in win.menus.menus["File"].actions())
    assert open_run(win, path)
    panel = win.run_panel
    assert win.document.kind == "run" and win.document.path == path.resolve()
    assert panel.node_steps == [0, 2, 4, 6, 8]
    assert panel.current_step == 8
    (graph,) = win.graphs
    assert {"kind", "label", "module"} <= set(graph.nodes["param:fc1.weight"])
    assert graph.nodes["param:never.weight"]["reachable"] is False
    last = dict(win.document.norms)
    assert last["loss"] == 1.0 and last["param:fc1.weight"] > 0 and last["param:never.weight"] is None
    assert win.document.norms_step == 8 == win.document.loss_step
    # choose another recorded step: new norms, same graph (no relayout)
    panel.slider.setValue(1)
    assert panel.current_step == 2 and win.document.norms_step == 2
    assert win.document.norms != last
    assert len(win.graphs) == 1
    # the findings and a click that selects nodes
    codes = [f["code"] for f in panel.findings]
    assert "run-no-gradient" in codes
    item = next(panel.finding_list.item(i) for i in range(panel.finding_list.count())
                if "never" in panel.finding_list.item(i).text())
    selected = []
    win.session.documentEdited.connect(lambda doc, what, info: what == "selection" and selected.append(info["ids"]))
    panel._finding_clicked(item)
    assert selected[-1] == ["param:never.weight", "param:never.bias"]
    assert ("fc1.weight" in str(panel.curves.data)) is False and panel.curves.data[0]["step"].size == 9


@pytest.mark.parametrize("content", [b"not a run at all\n" * 10, b""])
def test_bad_file_shows_error(qtbot, win, tmp_path, content):
    from test_app_support import MLP, open_and_wait

    open_and_wait(qtbot, win, MLP)
    bad = tmp_path / "bad.gvrun"
    bad.write_bytes(content)
    win.graphs.clear()
    assert not open_run(win, bad)
    assert win.error_dock.isVisible() and "bad.gvrun" in win.errors.text()
    # nothing of the script opened before stays under the run's name
    assert win.document.status == "failed" and win.document.path == bad.resolve()
    assert win.graphs == [] and not win.scene.ids and win.windowTitle() == "bad.gvrun (could not open)"


def test_follow_mode_picks_up_new_steps(win, tmp_path, qtbot):
    path = tmp_path / "live.gvrun"
    torch.manual_seed(0)
    model = Net()
    w = watch(model, path, every=5, commit_seconds=0.05)
    go = threading.Event()
    done = threading.Event()

    def step_once():
        model.zero_grad()
        loss = model(torch.randn(8, 4)).pow(2).mean()
        loss.backward()
        w.step(loss)

    for _ in range(3):
        step_once()
    w._writer.commit()

    def writer():
        go.wait(10)
        for _ in range(12):
            step_once()
            time.sleep(0.02)
        w._writer.commit()
        done.set()

    assert open_run(win, path)
    panel = win.run_panel
    assert panel.follow_box.isChecked()              # a running run is followed at once
    assert panel.n_steps[0] == 3
    t = threading.Thread(target=writer)
    t.start()
    go.set()
    assert done.wait(10)
    # followed within about a second of being written (generous bound: CI machines are shared)
    qtbot.waitUntil(lambda: panel.n_steps[0] == 15, timeout=3000)
    qtbot.waitUntil(lambda: panel.node_steps == [0, 5, 10], timeout=3000)
    assert panel.current_step == 10                   # the slider follows the newest step
    t.join()
    w.close()
    panel.set_follow(False)
    assert panel.follower is None


def test_ranks_side_by_side(win, tmp_path):
    for rank in (0, 1):
        torch.manual_seed(rank)
        model = Net()
        with watch(model, tmp_path / "d.gvrun", every=2, rank=rank, world_size=2) as w:
            for _ in range(4):
                model.zero_grad()
                loss = model(torch.randn(8, 4)).pow(2).mean()
                loss.backward()
                w.step(loss)
    assert open_run(win, tmp_path / "d.rank0.gvrun")
    panel = win.run_panel
    assert panel.ranks == [0, 1]
    assert set(panel.curves.data) == {0, 1}
    assert ("grad_norm", 1) in panel.curves.curves
    assert any(f["code"] == "ranks-desync" for f in panel.findings)      # different weights on each rank


@pytest.fixture
def real_window(qtbot, tmp_path):
    """The real window with every extension (the Run dock among them)."""
    from PySide6.QtCore import QSettings

    from gradviz.app.main_window import MainWindow

    win = MainWindow(settings=QSettings(str(tmp_path / "s.ini"), QSettings.IniFormat), extensions=True)
    qtbot.addWidget(win)
    yield win
    win.run_panel.shutdown()
    win.shutdown()


def test_real_window_installs_runs(qtbot, tmp_path, real_window):
    win = real_window
    assert "runs" in win.extensions, win.extension_errors
    path = tmp_path / "w.gvrun"
    _record(path, 4)
    with qtbot.waitSignal(win.graphChanged, timeout=20000):
        assert open_run(win, path)
    assert win.document.graph is not None and "param:fc1.weight" in win.document.graph


def _open_recorded(qtbot, win, path, steps: int) -> None:
    """Record ``steps`` and open the run as a script is opened (``gradviz run.gvrun``)."""
    _record(path, steps)
    with qtbot.waitSignal(win.graphShown, timeout=20000):
        win.open_script(path)


def test_opening_a_run_file_like_a_script_shows_its_graph(qtbot, tmp_path, real_window):
    """``gradviz run.gvrun``, File > Open and drag-and-drop all go through open_script."""
    win = real_window
    _open_recorded(qtbot, win, tmp_path / "cli.gvrun", 4)
    assert "param:fc2.weight" in win.document.graph
    assert win.document.graph.nodes["param:fc2.weight"]["kind"] == "param"


def test_module_tree_and_summary_follow_the_chosen_step(qtbot, tmp_path, real_window):
    """Choosing a recorded step repaints the module norms and the summary's total with that step's."""
    import math

    from gradviz.app.formatting import num, short_num
    from gradviz.core.record import open_run

    win = real_window
    path = tmp_path / "steps.gvrun"
    _open_recorded(qtbot, win, path, 6)
    panel = win.run_panel
    with open_run(path) as r:
        names = r.param_names
        rows = {s: r.step_row(s) for s in panel.node_steps}
    for step in (panel.node_steps[0], panel.node_steps[-1]):
        panel.choose_step(step)
        row = rows[step]
        norm = dict(zip(names, row["grad_norms"]))
        fc1 = math.sqrt(norm["fc1.weight"] ** 2 + norm["fc1.bias"] ** 2)
        total = math.sqrt(sum(v * v for v, has in zip(row["grad_norms"], row["has_grad"]) if has))
        qtbot.waitUntil(lambda: win.outline.module_norm_text("fc1") == short_num(fc1), timeout=5000)
        assert win.outline.module_norm_text("") == short_num(total)
        assert win.outline.module_norm_text("never") == "—"          # no gradient: nothing to show
        assert win.inspector.gradient.values["total grad norm"] == num(total)


def test_the_loss_node_shows_the_chosen_steps_loss(qtbot, tmp_path, real_window):
    from gradviz.app.formatting import num
    from gradviz.core.record import open_run

    win = real_window
    path = tmp_path / "loss.gvrun"
    _open_recorded(qtbot, win, path, 6)
    panel = win.run_panel
    with open_run(path) as r:
        losses = {s: float(r.step_row(s)["loss"]) for s in panel.node_steps}
    assert len(set(losses.values())) > 1
    # on opening: the loss of the step shown, not the one traced when the graph was stored
    shown = win.document.graph.graph["step"]
    assert shown == panel.node_steps[-1] and shown != panel.node_steps[0]
    assert win.scene.text_lines(win.scene.index["loss"])[1] == num(losses[shown])
    for step in (panel.node_steps[0], panel.node_steps[-1]):
        panel.choose_step(step)
        i = win.scene.index["loss"]
        assert win.scene.text_lines(i)[1] == num(losses[step])
        qtbot.waitUntil(lambda: win.inspector.identity.values.get("loss") == f"{num(losses[step])}  (step {step:,})",
                        timeout=5000)


def test_update_ratios_measured_every_few_steps_are_drawn_joined(win, tmp_path):
    """Unmeasured steps hold NaN: the curve keeps the measured points only, so sparse
    measurements draw a line instead of isolated, invisible points."""
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    path = tmp_path / "ratios.gvrun"
    with watch(model, path, every=0, optimizer=opt, update_ratio_every=3) as w:
        for _ in range(10):
            opt.zero_grad()
            loss = model(torch.randn(8, 4)).pow(2).mean()
            loss.backward()
            w.step(loss)
            opt.step()
    assert open_run(win, path)
    curves = win.run_panel.curves.curves
    ratio = curves[("update_ratio", 0)]
    assert ratio.xData.tolist() == [0, 3, 6, 9] and np.isfinite(ratio.yData).all()
    assert curves[("loss", 0)].xData.size == 10          # the other curves keep every step


def test_run_a_training_script_from_the_run_menu(win, tmp_path, qtbot):
    """Run ▸ Run a training script…: ``gradviz run`` in a child process (the UI thread does not wait), then
    the run opens with the loop's findings (tests/loop_cases/zero_grad_once.py: grad-not-cleared)."""
    import os
    import shutil

    panel = win.run_panel
    assert panel.script_run_action.text() == "Run a training script…"
    cases = Path(__file__).parent / "loop_cases"
    for name in ("zero_grad_once.py", "common.py"):
        shutil.copy(cases / name, tmp_path / name)
    env_path = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = str(Path(__file__).parent.parent) + (os.pathsep + env_path if env_path else "")
    try:
        t0 = time.perf_counter()
        assert panel.script_run.start(tmp_path / "zero_grad_once.py", [], steps=12)
        assert time.perf_counter() - t0 < 1.0                        # started, not waited for
        qtbot.waitUntil(lambda: win.document.run.get("run_file") == str(tmp_path / "zero_grad_once.gvrun"),
                        timeout=90_000)
    finally:
        os.environ["PYTHONPATH"] = env_path
    assert win.document.run["steps"] == 12
    assert any(f["code"] == "grad-not-cleared" for f in panel.findings), panel.findings
    # the loop's findings are the document's findings too: the Diagnosis dock shows them, with the line
    loop = win.document.findings["findings"]
    assert [f["code"] for f in loop] == ["grad-not-cleared"] and loop[0]["location"].endswith("zero_grad_once.py:18")
