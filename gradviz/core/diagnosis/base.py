"""What a check is: a name, the finding codes it may give, what it needs, and a function.

A check's ``run(ctx)`` reads the probe (one instrumented forward and backward) and the
findings of the checks before it, and returns its own findings. What it needs is declared,
so the runner (``registry.run_checks``) skips it when that is not there and the order of
the registry can be verified instead of encoded in an if-ladder:

- ``forward``: the forward ran and gave a scalar loss with a graph;
- ``forward-failed``: it did not (the loss checks explain why);
- ``backward``: backward ran without raising; ``backward-failed``: it raised;
- ``finite``: no ``nan``/``inf`` finding so far (reads those codes);
- ``healthy``: no error finding so far (reads every error code);
- ``gradcheck`` / ``steps``: the user asked for the numerical check / K training steps.

``values=False`` says the check reads only the structure of the graph and the forward's
records (no tensor values), so it can also run where values do not exist (the meta device).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from gradviz.core.diagnosis.findings import CODES, Finding

if TYPE_CHECKING:
    from gradviz.core.diagnosis.probe import Probe
    from gradviz.core.script.load import ModelScript

NEEDS = ("forward", "forward-failed", "backward", "backward-failed", "finite", "healthy", "gradcheck", "steps")


@dataclass
class CheckOptions:
    steps: int = 0
    gradcheck: bool = True
    gradcheck_budget: float = 1.5
    seed: int = 0
    values: bool = True                           # False: only checks with values=False run
    cancel: Callable[[], bool] | None = None

    def cancelled(self) -> bool:
        return self.cancel is not None and bool(self.cancel())


@dataclass
class Context:
    """What a check reads: the script, the probe, the options and the findings so far."""

    script: "ModelScript"
    probe: "Probe"
    options: CheckOptions
    findings: list[Finding] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)     # report fields a check fills (training, gradcheck)

    def has(self, *codes: str) -> bool:
        return any(f.code in codes for f in self.findings)

    def first(self, code: str) -> Finding | None:
        return next((f for f in self.findings if f.code == code), None)

    def met(self, need: str) -> bool:
        p = self.probe
        if need == "forward":
            return p.forward_ok
        if need == "forward-failed":
            return not p.forward_ok
        if need == "backward":
            return p.backward_ok
        if need == "backward-failed":
            return p.forward_ok and p.backward_error is not None
        if need == "finite":
            return not self.has("nan", "inf")
        if need == "healthy":
            return not any(f.severity == "error" for f in self.findings)
        if need == "gradcheck":
            return self.options.gradcheck
        if need == "steps":
            return self.options.steps > 0
        raise ValueError(f"unknown need {need!r}; known: {', '.join(NEEDS)}")


@dataclass(frozen=True)
class Check:
    """One step of the checklist (see the module docstring)."""

    name: str                                   # the step's name in progress and in ``check-incomplete``
    codes: tuple[str, ...]                      # finding codes it may give
    run: Callable[[Context], list[Finding]]
    needs: tuple[str, ...] = ()
    reads: tuple[str, ...] = ()                 # codes of earlier checks' findings it reads
    values: bool = True

    def __post_init__(self) -> None:
        unknown = [n for n in self.needs if n not in NEEDS] + [c for c in self.codes + self.reads if c not in CODES]
        if unknown:
            raise ValueError(f"check {self.name!r}: unknown need or code {unknown}")

    def all_reads(self) -> set[str]:
        """The codes whose findings decide whether (and how) this check runs."""
        out = set(self.reads)
        if "finite" in self.needs:
            out |= {"nan", "inf"}
        if "healthy" in self.needs:
            out |= {c for c, sev in CODES.items() if sev == "error"}
        return out
