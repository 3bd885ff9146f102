"""Turn what the user named (a callable, a saved program, a script with weights) into a model script.

Every part of gradviz — the app, its reload and recent files, the CLI commands, the API — opens
model scripts. Rather than a second path through all of them, ``model_source`` writes the
script a user would have written (``$GRADVIZ_CACHE/models/``, default ``~/.cache/gradviz``),
atomically, named after what it opens, with a docstring saying what gradviz invented. It is an
ordinary script: copy it, put real data in ``batch``.

``model_source(text, inputs, loss, weights)`` returns ``(path, note)``: the script to open, and
what was invented (None when nothing was). A plain ``.py`` without ``--weights`` is returned as it
is. A weights file (``.pt``, ``.safetensors`` ...) raises a ScriptError that says what to open instead.
"""
from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

from gradviz.core.runtime.atomic import atomic_write
from gradviz.core.script.checkpoints import PROGRAM_SUFFIXES, refusal
from gradviz.core.script.factory import Invented, is_callable_spec, needs_inputs, parse_input, parse_loss
from gradviz.core.runtime.errors import ScriptError

__all__ = ["model_source", "cache_dir"]

TEMPLATE = '''"""Model script written by gradviz for {source!r}.

{note}

It is an ordinary gradviz model script: copy it and edit it (real data in batch, your loss).
"""
import sys

from gradviz.core.script.factory import Invented, InputSpec, LossSpec  # noqa: F401 - used in the recipe below

# where the command was given: importable as with `python -c`
sys.path[:0] = [p for p in {search!r} if p not in sys.path]

recipe = {recipe}
GRADVIZ_SOURCE = recipe.source     # what the user named: the window and the graph call the model this


def GRADVIZ_NOTE():  # noqa: N802 - what gradviz invented; once the model is built, with the token-id range
    return recipe.note


def model():
    return recipe.build_model()


def batch(step):
    return recipe.batch(step)


def loss_fn(output, targets):
    return recipe.loss_fn(output, targets)


def compute_loss(model, inputs, targets):
    return recipe.compute_loss(model, inputs, targets)
'''

WRAPPER = '''"""Model script written by gradviz: {script!r} with the weights of {weights!r}.

Everything comes from that script; only `model` differs: it loads the weights after building.
"""
from gradviz.core.script.checkpoints import load_weights
from gradviz.core.script.load import load_script

_script = load_script({script!r})
globals().update({{name: getattr(_script.module, name) for name in ("batch", "loss_fn", "optimizer",
                                                                   "compute_loss", "metrics")
                   if hasattr(_script.module, name)}})
GRADVIZ_SOURCE = {script_name!r}
GRADVIZ_NOTE = "nothing (the script's own batch and loss_fn); weights loaded from {weights}"


def model():
    built = _script.new_model()
    load_weights(built, {weights!r})
    return built
'''


def cache_dir() -> Path:
    base = os.environ.get("GRADVIZ_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "gradviz")
    return Path(base) / "models"


def _write(stem: str, text: str) -> Path:
    digest = hashlib.sha1(text.encode()).hexdigest()[:10]
    path = cache_dir() / f"{re.sub(r'[^A-Za-z0-9_]+', '_', stem).strip('_')[:60]}_{digest}.py"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))
    return path


def _recipe_code(made: Invented) -> str:
    inputs = ", ".join(f"InputSpec({spec.shape!r}, torch.{str(spec.dtype).replace('torch.', '')}, {spec.high!r})"
                       for spec in made.inputs)
    return (f"Invented(target={made.target!r}, program={made.program!r}, inputs=[{inputs}], "
            f"loss=LossSpec({made.loss.kind!r}, {made.loss.classes!r}), weights={made.weights!r})")


def model_source(text: str, inputs: list[str] | None = None, loss: str | None = None,
                 weights: str | None = None) -> tuple[str, str | None]:
    """The model script to open for ``text`` (a script, ``pkg.mod:callable`` or a ``.pt2``), and what was invented."""
    path = Path(text).expanduser()
    weights = str(Path(weights).expanduser().resolve()) if weights else None
    if path.suffix.lower() == ".py" or (path.exists() and path.suffix.lower() not in PROGRAM_SUFFIXES):
        if inputs or loss:
            raise ScriptError("--input and --loss are for a model without a script (PACKAGE.MODULE:CALLABLE or a "
                              ".pt2 program); a script defines batch and loss_fn itself", path=str(path))
        why = refusal(path)
        if why:
            raise ScriptError(why)
        if not weights:
            return text, None
        script = str(path.resolve())
        wrapper = WRAPPER.format(script=script, weights=weights, script_name=path.name)
        return str(_write(f"{path.stem}_weights", wrapper)), f"{path.name} with the weights of {weights}"
    try:
        specs = [parse_input(i) for i in inputs or []]
        loss_spec = parse_loss(loss)
    except ValueError as exc:
        raise ScriptError(str(exc)) from None
    if path.suffix.lower() in PROGRAM_SUFFIXES:
        if not path.is_file():
            raise ScriptError(f"no such program: {path}", path=str(path))
        made = Invented(program=str(path.resolve()), inputs=specs, loss=loss_spec, weights=weights)
    elif is_callable_spec(text):
        if not specs:   # only a program stores inputs: say so before anything is imported or built
            raise needs_inputs(text)
        made = Invented(target=text, inputs=specs, loss=loss_spec, weights=weights)
    else:
        raise ScriptError(f"{text}: no such file, and not PACKAGE.MODULE:CALLABLE (e.g. mypkg.models:build)")
    body = TEMPLATE.format(source=made.source, note=made.note, search=[os.getcwd()], recipe=_recipe_code(made))
    body = body.replace("import sys\n", "import sys\n\nimport torch\n", 1)
    stem = made.target.replace(":", "_") if made.target else Path(made.program).stem
    return str(_write(stem, body)), made.note
