"""Ctrl-C anywhere in gradviz's store, and a bad loss: no recorded step is lost (issue #24, part B).

The interrupt is raised at every line gradviz's row store and commit execute (a trace function
counts the lines of ``record/rows.py``, ``record/writer.py``, ``record/recorder.py`` and
``stats/steps.py`` (the rows' conversion) and raises
``KeyboardInterrupt`` at the k-th, for every k): today an interrupt there lost the buffered steps.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import gradviz.core.record.recorder as recorder_module
import gradviz.core.record.rows as rows_module
import gradviz.core.record.writer as writer_module
import gradviz.core.stats.steps as steps_module
from gradviz.core.record import RecordError, open_run, watch

STORE_FILES = {m.__file__ for m in (recorder_module, rows_module, writer_module, steps_module)}
BUFFERED = 12                                # steps buffered before the interrupted commit


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))


def _step(model, w, i):
    model.zero_grad()
    loss = model(torch.randn(3, 4, generator=torch.Generator().manual_seed(i))).pow(2).mean()
    loss.backward()
    return w.step(loss)


class InterruptAt:
    """A trace function raising KeyboardInterrupt at the k-th line executed in the store files
    (k=None: count only)."""

    def __init__(self, k: int | None) -> None:
        self.k, self.lines = k, 0

    def __call__(self, frame, event, arg):
        return self._line if frame.f_code.co_filename in STORE_FILES else None

    def _line(self, frame, event, arg):
        if event == "line":
            self.lines += 1
            if self.lines == self.k:
                raise KeyboardInterrupt
        return self._line

    def run(self, fn) -> bool:
        """True when the interrupt came."""
        sys.settrace(self)
        try:
            fn()
        except KeyboardInterrupt:
            return True
        finally:
            sys.settrace(None)
        return False


def _interrupted_run(path: Path, k: int | None, where: str, model) -> tuple[bool, int]:
    """BUFFERED steps, then the step that commits them (where='step') or close() (where='close')
    interrupted at line k; then what the user's program does next: close() (the with block),
    and at exit the watch's finalizer. Returns (interrupted, lines counted)."""
    w = watch(model, path, every=0, commit_every=BUFFERED + 1, commit_seconds=1000)
    for i in range(BUFFERED):
        _step(model, w, i)
    trace = InterruptAt(k)
    if where == "step":
        model.zero_grad()
        model(torch.randn(3, 4)).pow(2).mean().backward()
        hit = trace.run(lambda: w.step(1.0))
        hit2 = InterruptAt(None).run(w.close)
    else:
        hit = trace.run(w.close)
    w._finalizer()                               # interpreter exit
    return hit, trace.lines


@pytest.mark.parametrize("where", ["step", "close"])
def test_an_interrupt_at_any_line_of_the_store_loses_no_step(tmp_path, where):
    model = _model()
    _, n_lines = _interrupted_run(tmp_path / "count.gvrun", None, where, model)
    assert n_lines > 40                          # the store really ran under the tracer
    stride = max(1, n_lines // 150)              # every line on a short path; at most 150 runs
    hits = 0
    for k in range(1, n_lines + 1, stride):
        path = tmp_path / f"k{k}.gvrun"
        hit, _ = _interrupted_run(path, k, where, model)
        hits += hit
        with open_run(path) as r:
            steps = r.steps()["step"].tolist()
        assert steps[:BUFFERED] == list(range(BUFFERED)), (k, steps)
        assert steps in (list(range(BUFFERED)), list(range(BUFFERED + 1))), (k, steps)
    assert hits >= len(range(1, n_lines + 1, stride)) - 1     # the interrupts did land


@pytest.mark.parametrize("bad, says", [
    ("oops", "got str"), ([1.0, 2.0], "got list"), (3 + 1j, "complex"),
    (torch.ones(2, 2), r"shape \(2, 2\)"), (torch.tensor(1 + 2j), "real"),
    (torch.empty(0), r"shape \(0,\)"), (torch.tensor(1.0, device="meta"), "meta"), (object(), "got object"),
])
def test_a_bad_loss_raises_at_that_step_and_loses_nothing(tmp_path, bad, says):
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    path = tmp_path / "loss.gvrun"
    with watch(model, path, every=2, optimizer=opt) as w:
        for i in range(5):
            _step(model, w, i)
            opt.step()
        with pytest.raises(TypeError, match=says):
            w.step(bad)
        assert w.n_steps == 5                    # nothing changed: the next good step is step 5
        _step(model, w, 5)
        opt.step()
    with open_run(path) as r:
        s = r.steps()
        assert s["step"].tolist() == list(range(6)) and np.isfinite(s["loss"]).all()


def test_numbers_of_every_kind_are_losses(tmp_path):
    model = _model()
    path = tmp_path / "ok.gvrun"
    good = [None, 1, 2.5, np.float32(0.5), np.array(3.0), np.array([4.0]), torch.tensor([5.0]),
            torch.tensor(6, dtype=torch.int64), True, 10 ** 400]
    with watch(model, path, every=0) as w:
        for i, loss in enumerate(good):
            model.zero_grad()
            model(torch.randn(3, 4)).sum().backward()
            w.step(loss)
    with open_run(path) as r:
        got = r.steps()["loss"].tolist()
    assert np.isnan(got[0]) and got[1:] == [1.0, 2.5, 0.5, 3.0, 4.0, 5.0, 6.0, 1.0, float("inf")]


def test_a_step_that_raises_records_nothing_and_the_watch_goes_on(tmp_path):
    """A RecordError from a failing commit is not the end: the watch is usable once it clears."""
    model = _model()
    path = tmp_path / "on.gvrun"
    w = watch(model, path, every=0, commit_every=1)
    _step(model, w, 0)
    w._writer.failure = RecordError("disk full while writing steps (injected)", path)   # as a failed commit leaves it
    _step(model, w, 1)                           # the retry commits (nothing failing any more): no raise
    assert w._writer.failure is None
    w.close()
    with open_run(path) as r:
        assert r.steps()["step"].tolist() == [0, 1]
