"""``sometimes-unused``: parameters that get a gradient on some training steps and none on others.

LayerDrop (a layer skipped at random), routing (mixture of experts) and data-dependent branches
leave a different set of parameters out of each step's graph. One step looks healthy; over K
steps ``check`` records, after each backward, which trainable parameters got no gradient, and
which modules ran (forward pre-hooks, with the line that called each: the branch around that
call is what skips it). Under DistributedDataParallel such a model fails with "Expected to have
finished reduction in the prior iteration ... did not receive grad" unless
``find_unused_parameters=True``. The training run is seeded, so the same steps give the same result.
"""
from __future__ import annotations

import os
import sys
from torch import nn

from gradviz.core.diagnosis.findings import Finding
from gradviz.core.runtime.locations import locate


class StepWatch:
    """Which parameters got no gradient and which modules ran, step by step."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.step = 0
        self.missing: dict[str, list[int]] = {}       # parameter -> steps without gradient
        self.ran: dict[str, set[int]] = {}            # module path -> steps it ran
        self.called_at: dict[str, tuple[str, str]] = {}   # module path -> (user line, library line) of its call
        self.steps = 0
        self._handles = [m.register_forward_pre_hook(self._hook(path)) for path, m in model.named_modules() if path]

    def _hook(self, path: str):
        def pre(module, args):
            self.ran.setdefault(path, set()).add(self.step)
            if path not in self.called_at:
                where = locate(sys._getframe(1))
                self.called_at[path] = (where.user, where.library)
        return pre

    def begin(self, step: int) -> None:
        self.step = step

    def after_backward(self) -> None:
        for name, p in self.model.named_parameters():
            if p.requires_grad and p.grad is None:
                self.missing.setdefault(name, []).append(self.step)
        self.steps += 1

    def close(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()


def _short(location: str) -> str:
    path, _, line = location.rpartition(":")
    return f"{os.path.basename(path)}:{line}"


def _owner(param: str) -> str:
    return param.rpartition(".")[0]


def _group(names: list[str], steps: dict[str, list[int]]) -> dict[tuple[str, tuple[int, ...]], list[str]]:
    """Parameters by (module, steps without gradient)."""
    groups: dict[tuple[str, tuple[int, ...]], list[str]] = {}
    for n in names:
        groups.setdefault((_owner(n), tuple(steps[n])), []).append(n)
    return groups


def _outermost(paths: list[str]) -> list[str]:
    """Module paths without those inside another one of the list."""
    return [p for p in paths if not any(q != p and (p.startswith(q + ".") or q == "") for q in paths)]


def _skipped_module(watch: StepWatch, module: str, steps: tuple[int, ...]) -> str:
    """The outermost module holding ``module`` that did not run on exactly those steps ('' when it ran)."""
    parts = module.split(".")
    found = ""
    for k in range(len(parts), 0, -1):
        path = ".".join(parts[:k])
        ran = watch.ran.get(path, set())
        if ran and not (set(steps) & ran):
            found = path
    return found


def sometimes_unused_findings(watch: StepWatch) -> list[Finding]:
    if watch.steps < 2:
        return []
    some = [n for n, s in watch.missing.items() if 0 < len(s) < watch.steps]
    if not some:
        return []
    by_steps: dict[tuple[int, ...], list[str]] = {}
    for (module, steps), names in _group(some, watch.missing).items():
        by_steps.setdefault(steps, []).append(module)
    findings = []
    for steps, modules in sorted(by_steps.items()):
        params = sorted(n for n in some if tuple(watch.missing[n]) == steps)
        skipped = sorted({_skipped_module(watch, m, steps) for m in modules} - {""})
        shown = _outermost(skipped) or _outermost(sorted(set(modules)))
        call = next((watch.called_at[m] for m in shown if m in watch.called_at), ("", ""))
        when = ", ".join(str(s) for s in steps)
        how = (f"`{'`, `'.join(shown[:4])}` did not run on those steps" if skipped else
               f"`{'`, `'.join(shown[:4])}` ran, but its output did not reach the loss on those steps")
        msg = (f"{len(params)} parameter(s) ({', '.join(f'`{m}.*`' for m in shown[:4])}"
               f"{' ...' if len(shown) > 4 else ''}) got no gradient on step(s) {when} of {watch.steps} "
               f"(steps counted from 0), and a gradient on the others: {how}. That is layers skipped at random "
               "(LayerDrop), routing, or a data-dependent branch"
               + (f" around the call at {_short(call[1] or call[0])}" if call[0] or call[1] else "")
               + ". Under DistributedDataParallel this fails with \"Expected to have finished reduction in the prior "
               "iteration\" / \"did not receive grad\": pass find_unused_parameters=True to "
               "DistributedDataParallel, or switch the skipping off (e.g. layerdrop=0.0).")
        findings.append(Finding("sometimes-unused", "warning", msg, params=params, modules=shown,
                                location=call[0] or None,
                                data={"steps": list(steps), "of_steps": watch.steps, "skipped": bool(skipped),
                                      "library_location": call[1] or None, "stage": "training"}))
    return findings


# -- one step: a module skipped at random --------------------------------------

OTHER_DRAWS = (1, 2, 3, 4)


def modules_run_under_other_draws(probe, paths: set[str]) -> dict[str, tuple[str, str]]:
    """Which of ``paths`` run when the probe's forward is repeated with other random draws (same model, same
    batch, no gradient), with the line that calls each. A module that runs under another draw was skipped at
    random on the probe's step (LayerDrop), not left out of forward. The random state and the buffers
    (BatchNorm's running statistics) are restored afterwards: the probe's model is left as it was."""
    import torch
    modules = dict(probe.model.named_modules())
    ran: dict[str, tuple[str, str]] = {}
    handles = []

    def hook(path):
        def pre(module, args):
            if path not in ran:
                where = locate(sys._getframe(1))
                ran[path] = (where.user, where.library)
        return pre

    for p in paths:
        if p in modules:
            handles.append(modules[p].register_forward_pre_hook(hook(p)))
    saved = [(b, b.detach().clone()) for b in probe.model.buffers()]
    try:
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            for seed in OTHER_DRAWS:
                torch.manual_seed(seed)
                try:
                    probe.script.compute_loss(probe.model, probe.inputs, probe.targets)
                except Exception:   # noqa: BLE001 - a draw that fails says nothing about skipping: next draw
                    continue
                if set(paths) <= set(ran):
                    break
    finally:
        for h in handles:
            h.remove()
        with torch.no_grad():
            for live, value in saved:
                live.copy_(value)
    return ran


def skipped_at_random_finding(names: list[str], skipped: list[str], calls: dict[str, tuple[str, str]]) -> Finding:
    call = next((calls[m] for m in skipped if m in calls), ("", ""))
    where = f" (called at {_short(call[1] or call[0])})" if call[0] or call[1] else ""
    msg = (f"{len(names)} parameter(s) ({', '.join(f'`{m}.*`' for m in skipped[:4])}"
           f"{' ...' if len(skipped) > 4 else ''}) got no gradient on this step: "
           f"`{'`, `'.join(skipped[:4])}` did not run{where}, but runs when the same forward draws other random "
           "numbers: layers skipped at random (LayerDrop) or a random route. That is not a dead module, and "
           "`gradviz check --steps K` shows on which steps. Under DistributedDataParallel this fails with "
           "\"Expected to have finished reduction in the prior iteration\" / \"did not receive grad\": pass "
           "find_unused_parameters=True to DistributedDataParallel, or switch the skipping off (e.g. layerdrop=0.0).")
    return Finding("sometimes-unused", "warning", msg, params=sorted(names), modules=skipped,
                   location=call[0] or None,
                   data={"steps": [0], "of_steps": 1, "skipped": True, "random": True,
                         "library_location": call[1] or None, "stage": "forward"})
