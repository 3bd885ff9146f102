"""Structure-only tracing on PyTorch's ``meta`` device, and when to offer it.

A meta tensor has a shape, a dtype and a device but no storage: a model built under
``torch.device("meta")`` runs forward and backward in time proportional to its number
of operations, not its size. transformers' ``LlamaForCausalLM`` with the 70B
configuration (70.6 B parameters, ~280 GB of weights) runs a 1x128 forward and
backward that way in about a second and 0.4 GB. Everything structural survives: the
autograd graph, shapes, dtypes, module paths, source lines and what each node saves
for backward (so memory estimates); values, gradient norms and statistics do not.

``model_bytes(script)`` builds the model on the meta device to measure its
parameters without allocating them (``estimate``), so the CLI and the app can switch to
a structure-only trace instead of being killed by the out-of-memory killer (a real build
that outgrows the memory is stopped first: ``core/script/fit_guard.py``).
"""
from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass

import torch
from torch import nn

from gradviz.core.script.load import ModelScript, ScriptError

log = logging.getLogger(__name__)

NEEDED_PER_PARAM_BYTE = 2.0   # a training step holds the weights and their gradients at least
HEADROOM = 0.8                # of the available memory a trace may plan to use


def build_meta_model(script: ModelScript, strict: bool = False) -> nn.Module:
    """The script's model with every parameter and buffer on the meta device.

    Built under ``torch.device("meta")`` so nothing is allocated; a model the script
    built elsewhere anyway (a module instance, an explicit ``device=``) is moved there.
    A model whose construction needs values (an initialisation computed from data)
    cannot be built on meta: unless ``strict``, it is then built for real and moved.
    """
    try:
        with torch.device("meta"):
            model = script.new_model(allow_meta=True)
    except ScriptError:
        if strict:
            raise
        log.warning("%s: the model cannot be built on the meta device (its construction needs values); "
                    "building it in memory and moving it there", script.path.name, exc_info=True)
        model = script.new_model(allow_meta=True)
    if any(not t.is_meta for t in _tensors(model)):
        model = model.to("meta")
    return model


def _tensors(model: nn.Module):
    yield from model.parameters()
    yield from model.buffers()


@contextlib.contextmanager
def meta_forward(enabled: bool):
    """Factory calls inside forward (``torch.zeros(...)``, ``torch.arange(...)``) default to
    the meta device too, so they meet the model's meta tensors on the same device. A line of
    the script that reads values (``.item()``, ``.numpy()``, ``nonzero``) raises a ScriptError
    that says so (``needs_values_hint``)."""
    if not enabled:
        yield
        return
    with torch.device("meta"):
        try:
            yield
        except ScriptError as exc:
            exc.message = needs_values_hint(exc.message)
            raise


# what torch says when code reads the values a meta tensor does not have
_VALUE_ERRORS = ("on meta tensors", "out of meta tensor", "no data!", "data-dependent", "meta_nonzero")
VALUES_HINT = ("this line reads tensor values, which a structure-only trace on the meta device does not have; "
               "trace with values instead, without --meta")


def needs_values_hint(message: str) -> str:
    """``message`` with the reason a meta trace failed, when it failed for want of values."""
    if VALUES_HINT in message or not any(s in message for s in _VALUE_ERRORS):
        return message
    return f"{message} ({VALUES_HINT})"


@dataclass
class SizeEstimate:
    params: int          # bytes of the parameters
    buffers: int
    needed: int          # what a trace with values would hold at least (weights + gradients + buffers)
    available: int | None
    model: nn.Module | None = None   # the meta model measured (reused for a meta trace)

    @property
    def fits(self) -> bool:
        return self.available is None or self.needed <= HEADROOM * self.available

    def message(self, script_name: str) -> str:
        from gradviz.core.runtime.formatting import byte_size

        return (f"{script_name}'s model needs about {byte_size(self.needed)} for its weights and gradients "
                f"and this machine has {byte_size(self.available)} available: tracing its structure on the "
                "meta device instead (shapes, modules, memory estimates; no gradient values)")


def estimate(script: ModelScript, device: str | None = None) -> SizeEstimate | None:
    """Measure the script's model on the meta device; None when it cannot be built there
    (then the caller just traces as usual).

    Building it runs the script's ``model()`` under the meta device: a trace with values
    afterwards should load the script again (``load_script``) so no module-level state of
    the script (a cache filled while building) carries meta tensors into it.
    """
    try:
        model = build_meta_model(script, strict=True)
    except ScriptError:
        log.debug("the model cannot be built on the meta device; no size estimate", exc_info=True)
        return None
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    buffers = sum(b.numel() * b.element_size() for b in model.buffers())
    needed = int(NEEDED_PER_PARAM_BYTE * params + buffers)
    return SizeEstimate(params, buffers, needed, available_bytes(device), model)


def available_bytes(device: str | None = None) -> int | None:
    """Memory a trace may use on ``device`` (None: host RAM): MemAvailable on Linux."""
    if device and device.startswith("cuda") and torch.cuda.is_available():
        try:
            free, _ = torch.cuda.mem_get_info(torch.device(device))
            return int(free)
        except RuntimeError:
            log.debug("cannot read free GPU memory", exc_info=True)
            return None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None
