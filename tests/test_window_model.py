"""#27: a model-based test of the window. A seeded random walk of what a user does — open a
script, another one, one that fails; train k steps; step; start then pause; stop; select a
parameter, an op or a fold; fold and unfold — and after every action, every number each
panel shows (``app/window_report.report``: the Inspector, the module tree, the fold boxes'
sparklines, the training labels, the loss node, the export header, the status bar) is held
against torch at the step the view names, and that step must be the document's.

The oracle never asks the window: it replays the same training in its own ``Trainer``
(seeded: the same weights) and takes a fresh ``gradviz.trace(model=copy, step=S)`` of the
model after S updates — one hooked backward of step S's batch, the same definition of "step
S" as the trace of step 0 (``core/train/step_probe.py``).

``GRADVIZ_MODEL_SEQUENCES`` sequences (default 300, the issue's floor), within a guard of
``GRADVIZ_MODEL_SECONDS`` (default 400; a long sweep: more of both; ``GRADVIZ_MODEL_SEED`` picks
another walk); each walk starts
with an open, so a "sequence" is the actions on one document. A failure prints the seed and
the actions from the last open on, and then the shortest replay that still fails: each action
of that sequence (with the arguments it drew: the steps trained, the node selected) is left out
in turn and the rest replayed from its open; what still fails without it stays out (``shortest``,
within ``GRADVIZ_SHRINK_SECONDS``, default 240).
"""
from __future__ import annotations

import copy
import math
import os
import random
import time
from pathlib import Path

import pytest

from test_app_support import MLP, WAIT_MS, full, open_and_wait  # noqa: F401 (full: a fixture)

SEQUENCES = int(os.environ.get("GRADVIZ_MODEL_SEQUENCES", "300"))   # the "at least 300 sequences"
SECONDS = float(os.environ.get("GRADVIZ_MODEL_SECONDS", "400"))    # a guard (300 take ~150 s on a loaded 2-core machine)
SEED = int(os.environ.get("GRADVIZ_MODEL_SEED", "27"))
SHRINK_SECONDS = float(os.environ.get("GRADVIZ_SHRINK_SECONDS", "240"))
REL = 2e-3          # the panels print 4 significant digits

BLOCKS = '''\
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.act = nn.Tanh()

    def forward(self, x):
        return x + self.act(self.fc(x))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(4, 8)
        self.blocks = nn.Sequential(*[Block() for _ in range(4)])
        self.out = nn.Linear(8, 2)

    def forward(self, x):
        return self.out(self.blocks(self.inp(x)))


model = Net


def batch(step):
    g = torch.Generator().manual_seed(step)
    return torch.randn(16, 4, generator=g), torch.randint(0, 2, (16,), generator=g)


def loss_fn(out, y):
    return nn.functional.cross_entropy(out, y)


def optimizer(params):
    return torch.optim.SGD(params, lr=0.5)
'''
FAILING = "import torch\nmodel = lambda: torch.nn.Linear(2, 2)\ndef batch(step):\n    raise RuntimeError('no data')\n"


def record_run(path: Path, steps: int = 6) -> dict[int, dict]:
    """A run file of a small model (``watch``, node norms every 2 steps) and torch's own numbers
    of each step, taken in the loop: {step: {"param:<name>": p.grad.norm(), "loss": value}}."""
    import torch
    from torch import nn

    from gradviz.core.record import watch

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    seen: dict[int, dict] = {}
    with watch(model, path, every=2) as w:
        for k in range(steps):
            model.zero_grad()
            loss = model(torch.randn(8, 4)).pow(2).mean()
            loss.backward()
            seen[k] = {f"param:{n}": float(p.grad.norm()) for n, p in model.named_parameters()}
            seen[k]["loss"] = float(loss.detach())
            w.step(loss)
    return seen


class Oracle:
    """Torch's numbers of a script's model after S updates, from a replay of the same training."""

    def __init__(self) -> None:
        self.trainers: dict[str, object] = {}
        self.graphs: dict[tuple[str, int], object] = {}

    def graph(self, script: str, step: int):
        key = (script, step)
        if key not in self.graphs:
            import gradviz
            from gradviz.core.train.trainer import TrainConfig, Trainer

            t = self.trainers.get(script)
            if t is None or t.step_index > step:
                t = self.trainers[script] = Trainer(script, TrainConfig())
            while t.step_index < step:
                t.step()
            self.graphs[key] = gradviz.trace(script, model=copy.deepcopy(t.model), step=step)
        return self.graphs[key]


def close(shown, want, what: str) -> None:
    if want is None or shown is None:
        assert shown == want or (want is None and shown is None), f"{what}: shows {shown}, torch says {want}"
        return
    if not math.isfinite(want):
        assert not math.isfinite(shown), f"{what}: shows {shown}, torch says {want}"
        return
    assert shown == pytest.approx(want, rel=REL, abs=1e-9), f"{what}: shows {shown}, torch says {want}"


class Walk:
    def __init__(self, qtbot, window, scripts: dict[str, Path], rng: random.Random) -> None:
        self.qtbot, self.w, self.scripts, self.rng = qtbot, window, scripts, rng
        self.oracle = Oracle()
        self.log: list[str] = []
        self.trail: list[tuple[str, object]] = []     # the sequence's actions with the arguments they drew
        self.arg: object = None                      # the argument the running action drew
        self.checks = 0
        self.run_oracle: dict[int, dict] = {}
        self.run_checks = 0

    # -- settling ------------------------------------------------------------------
    def settle(self) -> None:
        w, doc = self.w, self.w.document
        panel = w.training_panel

        def quiet() -> bool:
            if panel.state == "running" or w.status.is_busy() or not w.sync.settled():
                return False
            if doc.status == "loading" or w.selection.details.pending:
                return False          # (a traced node's details are being replayed)
            if panel.is_running():         # paused: its model measured, and that on screen
                at = panel.worker.step_index
                return (panel.state == "paused" and doc.model_step == at and doc.step == at
                        and doc.norms_source == "training")
            return True
        self.qtbot.waitUntil(quiet, timeout=WAIT_MS)
        self.qtbot.wait(10)

    # -- actions --------------------------------------------------------------------
    def open(self, name: str) -> None:
        self.w.open_script(self.scripts[name])
        self.qtbot.waitUntil(lambda: self.w.document.status in ("ready", "failed"), timeout=WAIT_MS)
        if self.w.document.kind == "run":
            self.qtbot.waitUntil(lambda: self.w.document.norms_source == "recorded", timeout=WAIT_MS)

    def choose_step(self, s=None) -> None:
        """A run file: another recorded step (the run panel's slider)."""
        if self.w.document.kind == "run" and self.w.run_panel.node_steps:
            s = self.arg = self.rng.choice(self.w.run_panel.node_steps) if s is None else s
            self.w.run_panel.choose_step(s)
            self.qtbot.waitUntil(lambda: self.w.document.norms_step == self.w.run_panel.current_step,
                                 timeout=WAIT_MS)

    def train(self, k=None) -> None:
        k = self.arg = self.rng.randint(1, 12) if k is None else k
        panel = self.w.training_panel
        if self.w.document.status == "ready" and self.w.document.kind == "script":
            target = (panel.worker.step_index if panel.is_running() else 0) + k
            panel.train_steps(k)
            self.qtbot.waitUntil(lambda: panel.worker.step_index == target and panel.state == "paused"
                                 and self.w.document.model_step == target, timeout=WAIT_MS)

    def step(self) -> None:
        if self.w.document.kind != "script" or self.w.document.status != "ready":
            self.w.training_panel.step()        # F10 on a run file or a failed script: refused, no crash
            self.w.hide_errors()
            assert not self.w.training_panel.is_running()
            return
        if self.w.document.status == "ready":
            before = self.w.training_panel.worker.step_index if self.w.training_panel.is_running() else 0
            self.w.training_panel.step()
            self.qtbot.waitUntil(lambda: self.w.training_panel.worker.step_index > before
                                 and self.w.training_panel.state == "paused", timeout=WAIT_MS)

    def start_pause(self) -> None:
        panel = self.w.training_panel
        if self.w.document.status != "ready" or self.w.document.kind != "script":
            return
        panel.start()
        self.qtbot.waitUntil(lambda: len(panel.history) >= 3, timeout=WAIT_MS)
        panel.pause()
        self.qtbot.waitUntil(lambda: panel.state == "paused", timeout=WAIT_MS)

    def stop(self) -> None:
        panel = self.w.training_panel
        if panel.is_running():
            panel.stop()
            self.qtbot.waitUntil(lambda: panel.state == "stopped", timeout=WAIT_MS)

    def select(self, kind: str, nid=None) -> None:
        doc = self.w.document
        if doc.view is None:
            return
        ids = [n for n, a in doc.view.nodes(data=True) if
               (kind == "param" and a.get("kind") == "param") or (kind == "op" and a.get("kind") == "op")
               or (kind == "fold" and a.get("fold")) or (kind == "group" and a.get("kind") == "group")]
        if nid is None and ids:
            nid = self.rng.choice(sorted(ids))
        self.arg = nid
        self.w.select_nodes([nid] if nid in ids else [])      # (a replay's node may be gone: none selected)

    def health_check(self) -> None:
        doc, panel = self.w.document, self.w.diagnosis_panels["diagnosis"]
        if doc.kind != "script" or doc.status != "ready" or self.w.training_panel.state == "running":
            return
        with self.qtbot.waitSignal(panel.checkFinished, timeout=WAIT_MS):
            panel.run_check()

    def export(self) -> None:
        """An SVG of the scene: its header names the step of its colours and loss, and they are
        torch's at that step (the picture is checked here, when it is made)."""
        import re

        from gradviz.render.export.formats import export_scene

        self.settle()
        doc = self.w.document
        if doc.view is None or doc.kind != "script" or doc.status != "ready":
            return
        path = self.tmp / f"export{self.checks}.svg"
        export_scene(self.w.scene, path)
        text = path.read_text(encoding="utf-8", errors="replace")
        step = doc.step
        found = re.search(r"(traced|training) step ([\d,]+)(?: · loss ([-\d.e+]+))?", text)
        assert found, "the export does not say which step its numbers are"
        assert int(found.group(2).replace(",", "")) == step, f"the export names {found.group(0)}, at step {step}"
        if found.group(3) is not None:
            close(float(found.group(3)), self.oracle.graph(str(doc.path), step).graph["loss"], "exported loss")

    def regroup(self, how: str) -> None:
        doc = self.w.document
        if doc.view is None:
            return
        if how == "fold":           # the blocks drawn as their repeats: one fold box
            expanded = {"", "blocks"} if "blocks" in doc.modules else set()
        elif how == "unfold":
            folds = [a for _, a in doc.view.nodes(data=True) if a.get("fold")]
            if not folds:
                return
            from gradviz.core.layout.folding import unfold_markers

            expanded = set(doc.expanded).union(*(unfold_markers(f, "all") for f in folds))
        else:
            expanded = doc.all_modules() | {""}
        if expanded == doc.expanded:
            return
        with self.qtbot.waitSignal(self.w.graphShown, timeout=WAIT_MS):
            self.w.set_expanded(expanded)

    # -- the check --------------------------------------------------------------------
    def check(self) -> None:
        from gradviz.app.window_report import report

        self.settle()
        w, doc = self.w, self.w.document
        r = report(w)
        self.checks += 1
        panel = r["training"]
        if doc.kind == "run":
            self.check_run(r)
            return
        if doc.status == "failed":
            assert r["modules"] == {} and r["folds"] == {} and r["inspector"]["node"] is None
            assert panel["history"] == 0 and panel["loss"] is None and "could not open" in r["title"]
            return
        assert r["title"] == doc.name
        step = r["step"]
        assert step is not None
        if doc.model_step is not None and w.training_panel.state != "running":
            assert step == doc.model_step, "the numbers are not of the step the model stands at"
        if doc.norms_source == "training":
            assert f"step {step:,}" in r["status_bar"]
            assert panel["steps_done"] == doc.model_step
        else:
            assert panel["history"] == 0 and panel["loss"] is None, "another document's training shows"
        oracle = self.oracle.graph(str(doc.path), step)
        # the inspector
        insp = r["inspector"]
        assert insp["step"] == step, f"the Inspector names step {insp['step']}, the document is at {step}"
        nid = insp["node"]
        if nid is None:
            close(insp.get("total_grad_norm"), oracle_total(oracle), "total grad norm")
        else:
            attrs = doc.view.nodes[nid]
            if attrs.get("kind") == "group":
                want = oracle_group(oracle, attrs)
                close(insp.get("grad_norm"), want, f"{nid} norm")
            elif nid in oracle:
                want = oracle.nodes[nid]
                close(insp.get("grad_norm"), want.get("grad_norm"), f"{nid} grad norm")
                if insp["state"] == "current" and want.get("grad_norm") is not None:
                    close(insp.get("grad_std"), want.get("grad_std"), f"{nid} grad std")
                    close(insp.get("grad_max"), want.get("grad_max"), f"{nid} grad max")
                if attrs.get("kind") == "param":
                    assert insp["state"] == "current", f"{nid}: a parameter's statistics not shown at step {step}"
                    close(insp.get("value_norm"), want.get("value_norm"), f"{nid} value norm")
        # the module tree
        modules = oracle.graph["modules"]
        for path, shown in r["modules"].items():
            key = "" if path == "(model)" else path
            assert shown["step"] == step
            if modules.get(key, {}).get("numel"):
                close(shown["grad_norm"], modules[key]["grad_norm"], f"module {path}")
        # the fold boxes and their sparklines
        for label, fold in r["folds"].items():
            assert fold["step"] == step
            repeats = doc.view.nodes[fold["id"]]["repeats"]
            want = [modules[p]["grad_norm"] for p in repeats]
            for i, (shown, value) in enumerate(zip(fold["repeat_norms"], want)):
                close(shown, value, f"{label} repeat {i}")
            close(fold["first"], want[0], f"{label} sparkline's first")
            close(fold["last"], want[-1], f"{label} sparkline's last")
        # the loss: training label, loss node, export header
        if doc.norms_source == "training":
            assert panel["loss_step"] == step and r["loss_node"]["step"] == step
            close(panel["loss"], oracle.graph["loss"], "training panel's loss")
            close(r["loss_node"]["loss"], oracle.graph["loss"], "loss node")
            assert f"training step {step:,}" in r["export_header"]
        else:
            assert "traced step 0" in r["export_header"] or "step 0" in r["export_header"]

    def check_run(self, r: dict) -> None:
        """A run file: every view names the recorded step, its numbers are the loop's own at that
        step, and nothing of a script's training shows."""
        doc = self.w.document
        step = r["step"]
        self.run_checks += 1
        assert doc.norms_source == "recorded" and step in self.run_oracle
        want = self.run_oracle[step]
        panel = r["training"]
        assert panel["history"] == 0 and panel["loss"] is None, "a script's training shows over a run file"
        insp = r["inspector"]
        assert insp["step"] == step, f"the Inspector names step {insp['step']}, the run is at {step}"
        if insp["node"] in want:
            close(insp.get("grad_norm"), want[insp["node"]], f"{insp['node']} grad norm")
        for path, shown in r["modules"].items():
            assert shown["step"] == step
            params = [v for k, v in want.items() if k.startswith("param:") and
                      (path == "(model)" or k[len("param:"):].startswith(path + "."))]
            if params:
                close(shown["grad_norm"], math.sqrt(sum(v * v for v in params)), f"module {path} (recorded)")
        assert f"step {step:,}" in r["status_bar"]

    def run(self, seconds: float, sequences_wanted: int) -> int:
        actions = self.actions()
        weights = [3, 3, 1, 1, 1, 5, 3, 2, 2, 4, 4, 3, 2, 1, 3, 2, 1, 1, 2]
        end = time.monotonic() + seconds
        sequences = 0
        while time.monotonic() < end:
            name, act = self.rng.choices(actions, weights)[0]
            if name.startswith("open") or not self.log:
                if sequences == sequences_wanted:
                    break
                sequences += 1
                self.log, self.trail = [], []
                if not name.startswith("open"):
                    name, act = "open A", (lambda a: self.open("A"))
            self.log.append(name)
            self.arg = None
            try:
                act(None)
                self.trail.append((name, self.arg))
                self.check()
            except BaseException as exc:
                if len(self.trail) < len(self.log):
                    self.trail.append((name, self.arg))
                sequence = list(self.trail)
                short = shortest(sequence, self.fails, SHRINK_SECONDS)
                raise AssertionError(f"seed {SEED}: after {' → '.join(self.log)}: {exc}\n"
                                     f"shortest replay that fails: {replay_text(short)}") from exc
        return sequences

    def actions(self) -> list[tuple[str, object]]:
        """(name, act(arg)): ``arg`` None draws one (kept in ``self.arg``), else replays it."""
        return [
            ("open A", lambda a: self.open("A")), ("open B", lambda a: self.open("B")),
            ("open failing", lambda a: self.open("failing")), ("open run file", lambda a: self.open("run")),
            ("choose a recorded step", self.choose_step),
            ("train 1-12", self.train), ("step", lambda a: self.step()),
            ("start, pause", lambda a: self.start_pause()), ("stop", lambda a: self.stop()),
            ("select param", lambda a: self.select("param", a)), ("select op", lambda a: self.select("op", a)),
            ("select fold", lambda a: self.select("fold", a)), ("select group", lambda a: self.select("group", a)),
            ("select none", lambda a: self.w.select_nodes([])),
            ("fold", lambda a: self.regroup("fold")), ("unfold", lambda a: self.regroup("unfold")),
            ("expand all", lambda a: self.regroup("expand")),
            ("health check", lambda a: self.health_check()), ("export", lambda a: self.export()),
        ]

    def fails(self, sequence: list[tuple[str, object]]) -> bool:
        """Replay ``sequence`` (it starts with an open: the window's state before it does not count)."""
        table = dict(self.actions())
        self.stop()
        try:
            for name, arg in sequence:
                self.arg = None
                table[name](arg)
                self.check()
        except BaseException:  # noqa: BLE001 - any failure of the replay is the failure sought
            return True
        return False


def shortest(sequence: list, fails, seconds: float) -> list:
    """The shortest sub-sequence found that still ``fails``: each action but the first (the open)
    left out in turn, last first; one whose absence still fails stays out. Bounded by ``seconds``
    (what is left then is returned as it is)."""
    end = time.monotonic() + seconds
    best = list(sequence)
    i = len(best) - 1
    while i >= 1 and time.monotonic() < end:
        candidate = best[:i] + best[i + 1:]
        if fails(candidate):
            best = candidate
        i -= 1
    return best


def replay_text(sequence: list) -> str:
    return " → ".join(name if arg is None else f"{name} ({arg})" for name, arg in sequence)


def test_shortest_keeps_only_what_the_failure_needs():
    """The shrinker on a known failure: it fails exactly when 'step' comes before 'select op'."""
    seq = [("open A", None), ("train 1-12", 3), ("step", None), ("select param", "p"), ("fold", None),
           ("select op", "op:7"), ("export", None)]
    calls = []

    def fails(s):
        calls.append(s)
        names = [n for n, _ in s]
        return "step" in names and "select op" in names and names.index("step") < names.index("select op")

    assert fails(seq)
    assert shortest(seq, fails, 60) == [("open A", None), ("step", None), ("select op", "op:7")]
    assert len(calls) == 1 + len(seq) - 1
    assert replay_text([("open A", None), ("train 1-12", 3)]) == "open A → train 1-12 (3)"
    assert shortest(seq, lambda s: True, 0) == seq           # no time: the sequence as it is


def oracle_total(graph) -> float | None:
    return graph.graph["modules"].get("", {}).get("grad_norm")


def oracle_group(graph, attrs) -> float | None:
    modules = graph.graph["modules"]
    if attrs.get("fold"):
        known = [modules[p]["grad_norm"] for p in attrs["repeats"] if modules[p].get("grad_norm") is not None]
        return math.sqrt(math.fsum(v * v for v in known)) if known else None
    module = modules.get(attrs.get("module", ""), {})
    if module.get("numel"):
        return module.get("grad_norm")
    # a box without parameters: the largest gradient through it (the rule every grouping uses)
    through = [graph.nodes[m].get("grad_norm") for m in attrs.get("members", ()) if m in graph]
    finite = [v for v in through if v is not None and math.isfinite(v)]
    return max(finite) if finite else None


@pytest.mark.timeout(600)      # the walk has its own guard (SECONDS); pytest's 300 s would cut it first
def test_every_number_on_screen_is_torchs_at_the_step_it_names(qtbot, full, tmp_path):
    scripts = {"A": MLP, "B": tmp_path / "blocks.py", "failing": tmp_path / "failing.py"}
    scripts["B"].write_text(BLOCKS)
    scripts["failing"].write_text(FAILING)
    scripts["run"] = tmp_path / "small.gvrun"
    walk = Walk(qtbot, full, scripts, random.Random(SEED))
    walk.tmp = tmp_path
    walk.run_oracle = record_run(scripts["run"])
    began = time.monotonic()
    sequences = walk.run(SECONDS, SEQUENCES)
    took = time.monotonic() - began
    print(f"{sequences} sequences, {walk.checks} checks ({walk.run_checks} of a run file) in {took:.0f} s")
    assert sequences == SEQUENCES, f"only {sequences} of {SEQUENCES} sequences in the {SECONDS:.0f} s guard"
    assert walk.checks >= 3 * sequences
