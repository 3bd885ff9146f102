"""``LoopDoctor``: watches the user's training loop through public global hooks and keeps the loop findings.

What it hooks, and when (``every``: the steps it checks; the first three are always checked):

* every optimizer's step, through ``register_optimizer_step_pre_hook`` /
  ``_post_hook`` (process-wide: a GAN's two optimizers are both seen). The loop's *iteration* is the
  smallest step count over the optimizers seen, so a GAN's D and G steps are one iteration;
* every backward, as an owner of the backward tap (``record.tap`` calls ``sampled_backward``: the
  doctor never imports it) -- the loss is the root of each backward;
* on the iteration after one of the first checked ones (or once a carried graph is suspected), a global
  module forward pre-hook (``register_module_forward_pre_hook``) that looks at each module's inputs; in
  steady state the iteration after a checked one walks its own backward to the first tagged node instead
  (one walk of the graph costs less than a hook on every module call).

What it costs (#26, ``benchmarks/bench_run_overhead.py``): nothing but the two optimizer hooks on an
unchecked step of ``watch`` (a few attribute reads; the frozen-parameter scan is one read of
``requires_grad`` per parameter), and for ``gradviz run`` also the tap's fast path (count the backward,
keep its loss); the checks run on the checked step and the one after.

The mechanisms: ``grad-not-cleared`` -- after a checked step each parameter's ``.grad`` is kept as a
weak reference with its version counter; at the next iteration's first backward, the same tensor at
the same version was not zeroed (``zero_grad`` sets None or bumps the version), so the backward adds
to the last step's gradient; several backwards between two steps are accumulation on purpose
(the same backward line run several times; ``grad-accumulation`` when the loss is not scaled). ``graph-reused`` -- a checked backward tags its
nodes with the iteration (``graph_marks``); an input of a module, or a later backward, that reaches a
node of an earlier iteration carries that graph (before torch's "backward through the graph a second
time" error, which then confirms it). ``graph-kept-alive`` and
``memory-growing`` (``kept_graphs``): a token in the loss node's ``metadata`` of the steps 1, 2 and every
``every``-th + 1 dies with the node (tokens of earlier steps still alive are graphs kept by the loop), and on
those steps ``saved_bytes`` counts what autograd saves and still holds (the bytes the kept graphs hold;
rising at every such step: memory growing, on any device; CUDA's allocated bytes too where CUDA is in use).
``frozen-but-updated`` -- parameters with ``requires_grad=False`` that an optimizer holds with a
``.grad`` are copied before its step and compared after. ``not-in-optimizer``, ``lr-zero``: from the
optimizers' parameter groups. ``lr-schedule``: torch's own warning that ``lr_scheduler.step()`` came
before ``optimizer.step()`` (seen through ``warnings.showwarning``, chained).
"""
from __future__ import annotations

import logging
import sys
import traceback
import warnings
import weakref
from typing import Any, Callable

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

from gradviz.core.diagnosis.findings import Finding
from gradviz.core.loop import graph_marks
from gradviz.core.loop.advice import loop_finding, names as names_text
from gradviz.core.loop.kept_graphs import KeptGraphs
from gradviz.core.runtime.interrupts import where_user_code_is
from gradviz.core.runtime.locations import is_user_file

from gradviz.core.loop.weakly import weakly

log = logging.getLogger(__name__)

__all__ = ["LoopDoctor"]

ALWAYS_CHECKED = 3           # iterations 0, 1, 2: the bugs of the issue show from the first steps


class LoopDoctor:
    def __init__(self, every: int = 10, on_change: Callable[[], Any] | None = None, keep_loss: bool = False) -> None:
        self.every = max(1, int(every or 10))
        # ``gradviz run`` takes each step's loss from here (``take_loss``); ``watch`` is given it by w.step
        self.keep_loss = keep_loss
        self.on_change = on_change
        self.closed = False
        self._found: dict[str, Finding] = {}
        self._opt_steps: dict[int, int] = {}          # id(optimizer) -> completed steps
        self._optimizers: dict[int, weakref.ref] = {}
        self._param_names: dict[int, str] = {}        # id(parameter) -> qualified name
        self._module_names: dict[int, str] = {}
        self._models: list[weakref.ref] = []
        self._backwards = 0                            # since the last optimizer step
        self._micro: list[int] = []                    # backwards per step (recent)
        self._scaled: list[bool] = []                  # each backward's loss scaled (div/mul) since the last step
        self._loss_sum: Any = None
        self._lines: list[str | None] = []             # the user's line of each backward of a checked step
        self._grad_snap: list[tuple[torch.Tensor, weakref.ref, int, int]] = []
        self._stale: dict[int, tuple] = {}           # id(parameter) -> its gradient not cleared (see _check_cleared)
        self._total_backwards = 0
        self._frozen_before: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self._frozen: dict[str, float] = {}
        self._lr_zero: dict[tuple[int, int], int] = {}
        self._kept = KeptGraphs(self.every, ALWAYS_CHECKED)   # graph-kept-alive, memory-growing
        self._reuse: dict[str, Any] | None = None      # the carried tensor, once seen
        self._reuse_candidate = False
        self._walked = False                           # this iteration's backward tagged its graph
        self._fwd_handle = None
        self._outside: list[weakref.ref] = []          # the models' parameters no optimizer holds (cached)
        self._outside_key: Any = None
        self._outside_checks = 0
        # torch's global hooks and warnings.showwarning hold the doctor weakly: a watch dropped without
        # close() takes its doctor with it, never leaving hooks that watch every later optimizer
        self._handles = [register_optimizer_step_pre_hook(weakly(self, "_pre")),
                         register_optimizer_step_post_hook(weakly(self, "_post"))]
        self._showwarning = warnings.showwarning
        self._shown_by = weakly(self, "_warning", fallback=self._showwarning)
        warnings.showwarning = self._shown_by

    # -- what the driver tells it --------------------------------------------
    def add_model(self, module: torch.nn.Module, prefix: str = "") -> None:
        """Name the parameters and modules of ``module`` (qualified, with ``prefix``)."""
        self._models.append(weakref.ref(module))
        for name, p in module.named_parameters():
            self._param_names.setdefault(id(p), prefix + name)
        for name, m in module.named_modules():
            self._module_names.setdefault(id(m), (prefix + name) or type(m).__name__)

    @property
    def backwards_seen(self) -> int:
        """How many backward passes the doctor saw (all steps, checked or not)."""
        return self._total_backwards

    @property
    def iteration(self) -> int:
        return min(self._opt_steps.values()) if self._opt_steps else 0

    @property
    def optimizers(self) -> list[torch.optim.Optimizer]:
        return [o for o in (r() for r in self._optimizers.values()) if o is not None]

    def wants(self, step: int) -> bool:
        """Whether the backwards of ``step`` are to be seen: a checked step, or the one after it (the
        gradients it must find cleared, the inputs that must not come from its graph)."""
        return self._due(step) or self._due(step - 1) or self._reuse_candidate

    def take_loss(self) -> Any:
        """The sum of the losses backpropagated since the last call (detached), or None."""
        loss, self._loss_sum = self._loss_sum, None
        return loss

    def findings(self) -> list[Finding]:
        out = dict(self._found)
        mem = self._kept.memory_finding()
        if mem is not None:
            out[mem.code] = mem
        return list(out.values())

    def record_exception(self, exc: BaseException) -> Finding:
        """The loop ended with ``exc``: a finding with the step and the user's line (innermost user frame)."""
        where = None
        for frame in reversed(traceback.extract_tb(exc.__traceback__)):
            if is_user_file(frame.filename):
                where = f"{frame.filename}:{frame.lineno}"
                break
        text = " ".join(str(exc).split())[:300]
        f = loop_finding("loop-exception", f"The loop raised {type(exc).__name__} at step {self.iteration}: {text}",
                         step=self.iteration, location=where, data={"exception": type(exc).__name__})
        self._add(f)
        return f

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for h in self._handles:
            h.remove()
        self._handles.clear()
        self._forward_hook(False)
        self._kept.close()
        if warnings.showwarning is self._shown_by:
            warnings.showwarning = self._showwarning

    # -- the backward tap's call ------------------------------------------------
    def sampled_backward(self, root: Any, run: Callable[[], None]) -> None:
        if self.closed or not isinstance(root, torch.Tensor) or root.grad_fn is None:
            run()
            return
        steps = self._opt_steps
        it = min(steps.values()) if steps else 0        # (self.iteration, inlined: every backward passes here)
        every = self.every
        if not (it < ALWAYS_CHECKED or it % every in (0, 1) or self._reuse_candidate or self._grad_snap
                or self._fwd_handle is not None):
            # an unchecked iteration (``gradviz run`` sees every backward, for the loss): count it and
            # keep the loss, nothing else -- the per-backward lists are read on checked steps only
            self._backwards += 1
            self._total_backwards += 1
            if self.keep_loss and root.numel() == 1:
                loss = root.detach()
                self._loss_sum = loss if self._loss_sum is None else self._loss_sum + loss
            run()
            return
        self._forward_hook(False)
        self._backwards += 1
        self._total_backwards += 1
        fn = root.grad_fn
        if self.keep_loss and root.numel() == 1:
            loss = root.detach()
            self._loss_sum = loss if self._loss_sum is None else self._loss_sum + loss
        self._scaled.append(type(fn).__name__.startswith(("DivBackward", "MulBackward")))
        if self._due(it):
            where = where_user_code_is(sys._getframe(1))
            self._lines.append(where[0] if where else None)
        if self._grad_snap:
            self._check_cleared(it)
        walk = None
        if self._due(it) or self._due(it - 1) or self._reuse_candidate:
            # the checked iteration tags its graph; the one after walks its own to the first tagged node,
            # so a graph carried from the checked step is found before its backward runs
            walk = graph_marks.tag_graph(fn, it)
            # the module inputs of the next forward are looked at (to name the carrier and its line)
            # only after the first iterations, or once a carried graph is suspected: a global forward
            # hook on every module of a steady-state step cost more than the rest of the doctor
            if walk.old:
                self._reused_in_backward(walk, it, crashed=False)
            self._walked = it < ALWAYS_CHECKED or self._reuse_candidate
        try:
            run()
        except BaseException:
            if walk is not None and walk.old:
                self._reused_in_backward(walk, it, crashed=True)
            raise
        kept = self._kept.on_backward(fn, it)
        if kept is not None:
            self._add(kept)

    # -- optimizer hooks ---------------------------------------------------------
    def _pre(self, optimizer: torch.optim.Optimizer, args: tuple, kwargs: dict) -> None:
        if self.closed:
            return
        key = id(optimizer)
        if key not in self._optimizers:
            self._optimizers[key] = weakref.ref(optimizer)
            self._opt_steps[key] = self._opt_steps.get(key, 0)
        step = self._opt_steps[key]
        self._check_lr(optimizer, step)
        if self._stale:
            self._confirm_not_cleared(optimizer)
        # every step, so that a frozen parameter is found the step it first moves: one attribute read per
        # parameter (a frozen one with a .grad is copied; none in a healthy loop)
        frozen = [p for group in optimizer.param_groups for p in group["params"]
                  if not p.requires_grad and p.grad is not None]
        for p in frozen:
            self._frozen_before[id(p)] = (p, p.detach().clone())
        if not self._due(step):
            return
        if step >= 1:
            self._check_not_in_optimizer(step)

    def _post(self, optimizer: torch.optim.Optimizer, args: tuple, kwargs: dict) -> None:
        if self.closed:
            return
        key = id(optimizer)
        step = self._opt_steps.get(key, 0)
        if self._frozen_before:
            self._check_frozen(step)
        self._opt_steps[key] = step + 1
        due = self._due(step)
        if due:
            for group in optimizer.param_groups:
                for p in group["params"]:
                    g = p.grad
                    if g is not None:
                        self._grad_snap.append((p, weakref.ref(g), g._version, key))
        self._kept.after_step(step, self.iteration, due)
        if self._backwards > 1 or self._scaled or self._lines:
            self._end_of_step(step)
        else:                              # one backward, nothing of a checked step kept: only the count resets
            self._backwards = 0
        if self._walked:
            self._walked = False
            self._forward_hook(True)       # the next forward: do module inputs come from this graph?

    def _end_of_step(self, step: int) -> None:
        micro, scaled, lines = self._backwards, self._scaled, self._lines
        self._backwards, self._scaled, self._lines = 0, [], []
        # micro-batches: the same backward line run several times (a GAN's D sums two different losses)
        if micro <= 1 or len(lines) != micro or len(set(lines)) != 1 or lines[0] is None:
            return
        self._micro.append(micro)
        if len(self._micro) >= 2 and "grad-accumulation" not in self._found and not any(scaled):
            self._add(loop_finding(
                "grad-accumulation", f"{micro} backwards accumulate into each optimizer step and the loss is not "
                "divided by their number", step=step, data={"micro_batches": micro}))

    # -- the checks -------------------------------------------------------------------
    def _due(self, step: int) -> bool:
        return step < ALWAYS_CHECKED or step % self.every == 0

    def _name(self, p: torch.Tensor, i: int = 0) -> str:
        return self._param_names.get(id(p)) or f"parameter #{i} ({'x'.join(map(str, p.shape)) or 'scalar'})"

    def _check_cleared(self, it: int) -> None:
        """The first backward after checked steps: gradients still the last step's (same tensor, same
        version) become candidates; the optimizer's next step confirms them (``_confirm_not_cleared``)."""
        snap, self._grad_snap = self._grad_snap, []
        where = None
        for p, ref, version, opt in snap:
            g = p.grad
            if g is not None and g is ref() and g._version == version:
                if where is None:         # the backward that adds to the stale gradients: the user's line
                    found = where_user_code_is(sys._getframe(1))
                    where = found[0] if found else ""
                self._stale[id(p)] = (p, ref, version, self._total_backwards - 1, opt, it, where or None)

    def _confirm_not_cleared(self, optimizer: torch.optim.Optimizer) -> None:
        """Before ``optimizer`` steps: a candidate of its still the same tensor, whose version rose by no
        more than the backwards since (each adds once; a ``zero_()`` would add one more), still holds the
        last step's gradient. (A GAN's G backward that adds to D's gradients, which D zeroes before its
        own next step, is cleared in time: not a finding.)"""
        key = id(optimizer)
        mine = [k for k, v in self._stale.items() if v[4] == key]
        kept = []
        for k in mine:
            p, ref, version, at, _, it, where = self._stale.pop(k)
            g = p.grad
            if g is not None and g is ref() and g._version - version <= self._total_backwards - at:
                kept.append((p, g, it, where))
        if not kept or "grad-not-cleared" in self._found:
            return
        nonzero = [p for p, g, _, _ in kept if bool(g.detach().ne(0).any())]
        if not nonzero:
            return
        params = [self._name(p, i) for i, p in enumerate(nonzero)]
        where = kept[0][3]
        self._add(loop_finding(
            "grad-not-cleared", f"Gradients are not cleared between optimizer steps: the backward after step "
            f"{kept[0][2] - 1} added to the last step's .grad of {len(params)} parameter(s) ({names_text(params)}), "
            "and the next step applied the sum", step=kept[0][2], params=params,
            location=where, data={"n_params": len(params)}))

    def _reused_in_backward(self, walk: graph_marks.Walk, it: int, crashed: bool) -> None:
        tag = min(t for _, _, t in walk.old)
        if not crashed and tag < 1 and self._reuse is None:
            self._reuse_candidate = True      # iteration 0: a second optimizer may not have stepped yet
            return
        consumer, old, _ = walk.old[0]
        carried = self._reuse or {"module": None, "location": None,
                                  "node": type(old).__name__, "consumer": type(consumer).__name__ if consumer else None}
        self._report_reuse(carried, it, tag, crashed)
        if self._reuse is None:
            self._reuse_candidate = True      # the next forward is looked at: which module's input carries it

    def _report_reuse(self, carried: dict, it: int, tag: int, crashed: bool) -> None:
        prev = self._found.get("graph-reused")
        if prev is not None and not crashed and (prev.data["carried"].get("module") or not carried.get("module")):
            return            # (found by a backward walk first: the forward hook's module and line replace it)
        what = (f"argument {carried.get('argument')} of `{carried['module']}`" if carried.get("module")
                else f"a tensor made by {carried.get('node')} (consumed by {carried.get('consumer')})")
        tail = (": torch then raised 'Trying to backward through the graph a second time'" if crashed else
                ", so every backward also runs through all earlier steps' graphs")
        self._add(loop_finding(
            "graph-reused", f"The backward of step {it} reaches the graph of step {tag} through {what}, carried "
            f"from the previous step without detach(){tail}", step=it, location=carried.get("location"),
            data={"carried": carried, "from_step": tag, "crashed": crashed}))

    def _forward_hook(self, on: bool) -> None:
        if on and self._fwd_handle is None and not self.closed:
            self._fwd_handle = torch.nn.modules.module.register_module_forward_pre_hook(self._forward_pre)
        elif not on and self._fwd_handle is not None:
            self._fwd_handle.remove()
            self._fwd_handle = None

    def _forward_pre(self, module: torch.nn.Module, args: tuple) -> None:
        if self._reuse is not None:
            return
        it = self.iteration
        for pos, a in enumerate(args, 1):
            for t in (a if isinstance(a, (tuple, list)) else (a,)):
                if isinstance(t, torch.Tensor):
                    tag = graph_marks.iteration_of(t)
                    if tag is not None and tag < it:
                        where = where_user_code_is(sys._getframe(1))
                        name = self._module_names.get(id(module)) or type(module).__name__
                        self._reuse = {"module": name, "argument": pos, "location": where[0] if where else None,
                                       "node": type(t.grad_fn).__name__, "from_step": tag}
                        self._reuse_candidate = True
                        if tag >= 1:
                            self._report_reuse(self._reuse, it, tag, crashed=False)
                        return

    def _check_frozen(self, step: int) -> None:
        before, self._frozen_before = self._frozen_before, {}
        moved = {}
        for i, (p, old) in enumerate(before.values()):
            with torch.no_grad():
                if not torch.equal(p, old):
                    denom = float(old.norm()) or 1.0
                    moved[self._name(p, i)] = float((p.detach() - old).norm()) / denom
        if not moved:
            return
        self._frozen.update(moved)
        params = sorted(self._frozen)
        prev = self._found.get("frozen-but-updated")
        first = prev.data["step"] if prev is not None else step
        self._add(loop_finding(
            "frozen-but-updated", f"{len(params)} parameter(s) with requires_grad=False still change at each "
            f"optimizer step ({names_text(params)}; update ratio {max(moved.values()):.3g} with no new gradient): "
            "the optimizer holds them with a stale .grad", step=first, params=params,
            data={"update_ratio": moved}))

    def _outside_optimizers(self) -> list[weakref.ref]:
        """The models' parameters that no optimizer holds, recomputed when an optimizer's parameters or the
        models change, and every 10th check (a module added to a model later): walking every parameter of
        every model on each checked step cost more than all the doctor's other checks together."""
        optimizers = self.optimizers
        key = (tuple((id(o), sum(len(g["params"]) for g in o.param_groups)) for o in optimizers), len(self._models))
        self._outside_checks += 1
        if key != self._outside_key or self._outside_checks % 10 == 0:
            held = {id(p) for o in optimizers for g in o.param_groups for p in g["params"]}
            self._outside = [weakref.ref(p) for ref in self._models if ref() is not None
                             for p in ref().parameters() if id(p) not in held]
            self._outside_key = key
        return self._outside

    def _check_not_in_optimizer(self, step: int) -> None:
        if "not-in-optimizer" in self._found:
            return
        missing = []
        for ref in self._outside_optimizers():
            p = ref()
            if p is not None and p.requires_grad and p.grad is not None:
                missing.append(self._name(p))
        if missing:
            self._add(loop_finding(
                "not-in-optimizer", f"{len(missing)} parameter(s) get gradients but no optimizer updates them "
                f"({names_text(missing)})", step=step, params=missing))

    def _check_lr(self, optimizer: torch.optim.Optimizer, step: int) -> None:
        for gi, group in enumerate(optimizer.param_groups):
            lr = group.get("lr")
            if type(lr) is float and lr != 0.0:    # the usual lr: no run of zeros (an absent key reads 0)
                if self._lr_zero:
                    self._lr_zero.pop((id(optimizer), gi), None)
                continue
            try:
                zero = float(lr) == 0.0
            except (TypeError, ValueError, RuntimeError):
                continue
            key = (id(optimizer), gi)
            run = self._lr_zero.get(key, 0) + 1 if zero else 0
            self._lr_zero[key] = run
            if run == 2 and "lr-zero" not in self._found:
                params = [self._name(p, i) for i, p in enumerate(group["params"])]
                self._add(loop_finding(
                    "lr-zero", f"The learning rate of {type(optimizer).__name__}'s param group {gi} is 0 at steps "
                    f"{step - 1}-{step}: its parameters do not move", step=step - 1, params=params))

    def _warning(self, message, category, filename, lineno, file=None, line=None) -> None:
        try:
            text = str(message)
            if (isinstance(category, type) and issubclass(category, UserWarning) and "lr_scheduler.step()" in text
                    and "before" in text and "lr-schedule" not in self._found and not self.closed):
                where = where_user_code_is(sys._getframe(1))
                self._add(loop_finding(
                    "lr-schedule", "lr_scheduler.step() was called before optimizer.step() (torch's own warning)",
                    step=self.iteration, location=where[0] if where else None))
        finally:
            self._showwarning(message, category, filename, lineno, file, line)

    def _add(self, finding: Finding) -> None:
        self._found[finding.code] = finding
        if self.on_change is not None:
            try:
                # (a WeakMethod: the watch that owns this doctor is not kept alive by it)
                call = self.on_change() if isinstance(self.on_change, weakref.WeakMethod) else self.on_change
                if call is not None:
                    call()
            except Exception:     # noqa: BLE001 - storing the finding must not break the user's loop
                log.warning("gradviz: storing a loop finding failed", exc_info=True)
