"""Turn what the user named (a callable, a saved program, a script with weights) into a model script.

Every part of gradviz — the app, its reload and recent files, the CLI commands, the API — opens
model scripts. Rather than a second path through all of them, ``model_source`` writes the
script a user would have written (``$GRADVIZ_CACHE/models/``, default ``~/.cache/gradviz``),
atomically, named after what it opens. It is an ordinary script: copy it (with the JSON file
beside it), put real data in ``batch``.

Nothing the user typed is ever code in it: the script's text is fixed (one of two templates, the
same for every model), and what it opens — paths, the callable's name, the inputs, the loss, the
note — is data in the JSON file of the same name beside it, read with ``json`` at import. A file
name with quotes, triple quotes, a newline or ``\\N`` is just a string there. The pair is named
after the SHA-256 of its content, and a pair found in the cache is used only when its bytes are
exactly the ones gradviz would write (otherwise it is written again): an edited cached script
never runs.

``model_source(text, inputs, loss, weights, config)`` returns ``(path, note)``: the script to open, and
what was invented (None when nothing was). A plain ``.py`` without ``--weights`` is returned as it
is. A weights file (``.pt``, ``.safetensors`` ...) raises a ScriptError that says what to open instead.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

from gradviz.core.runtime.atomic import AtomicFiles
from gradviz.core.runtime.cache import CacheError, cache_folder, cache_root
from gradviz.core.runtime.errors import ScriptError
from gradviz.core.script.checkpoints import PROGRAM_SUFFIXES, refusal
from gradviz.core.script.factory import Invented, is_callable_spec, needs_inputs, parse_config, parse_input, parse_loss

__all__ = ["model_source", "cache_dir", "RECIPE_TEMPLATE", "WEIGHTS_TEMPLATE"]

RECIPE_TEMPLATE = '''"""Model script written by gradviz for a model without a script of its own.

What it opens (a PACKAGE.MODULE:CALLABLE or a torch.export program), the inputs and the loss gradviz
invented are data in the JSON file beside this one (same name, .json). It is an ordinary gradviz model
script: copy both files and edit them (real data in batch, your loss).
"""
import json
import sys
from pathlib import Path

from gradviz.core.script.factory import Invented

_data = json.loads(Path(__file__).with_suffix(".json").read_text(encoding="utf-8"))
# where the command was given: importable as with `python -c`
sys.path[:0] = [p for p in _data["search"] if p not in sys.path]

recipe = Invented.from_json(_data["recipe"])
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

WEIGHTS_TEMPLATE = '''"""Model script written by gradviz: a script of yours with the weights of a checkpoint.

Which script and which weights file are data in the JSON file beside this one (same name, .json).
Everything comes from that script; only `model` differs: it loads the weights after building.
"""
import json
from pathlib import Path

from gradviz.core.script.checkpoints import load_weights
from gradviz.core.script.load import load_script

_data = json.loads(Path(__file__).with_suffix(".json").read_text(encoding="utf-8"))
_script = load_script(_data["script"])
globals().update({name: getattr(_script.module, name) for name in ("batch", "loss_fn", "optimizer",
                                                                  "compute_loss", "metrics")
                  if hasattr(_script.module, name)})
GRADVIZ_SOURCE = _data["script_name"]
GRADVIZ_NOTE = "nothing (the script's own batch and loss_fn); weights loaded from " + _data["weights"]


def model():
    built = _script.new_model()
    load_weights(built, _data["weights"])
    return built
'''


def cache_dir() -> Path:
    return cache_root() / "models"


def _write(stem: str, template: str, data: dict) -> Path:
    """The script (``template``) and its JSON (``data``) in the cache, named after their content; a pair
    already there is used only when its bytes are exactly these (else it is written again)."""
    text = json.dumps(data, indent=1, sort_keys=True, ensure_ascii=True) + "\n"
    digest = hashlib.sha256((template + "\0" + text).encode()).hexdigest()[:16]
    name = re.sub(r"[^A-Za-z0-9_]+", "_", stem).strip("_")[:60] or "model"
    try:
        folder = cache_folder("models")
    except CacheError as exc:
        raise ScriptError(f"cannot write the model script gradviz makes for this model: {exc}") from None
    script, recipe = folder / f"{name}_{digest}.py", folder / f"{name}_{digest}.json"
    if _holds(script, template) and _holds(recipe, text):
        return script
    try:
        with AtomicFiles() as files:
            Path(files.temp_for(recipe)).write_text(text, encoding="utf-8")
            Path(files.temp_for(script)).write_text(template, encoding="utf-8")
    except OSError as exc:
        raise ScriptError(f"cannot write the model script gradviz makes for this model in {folder}: "
                          f"{exc.strerror or exc}; set GRADVIZ_CACHE to a folder you can write") from None
    return script


def _holds(path: Path, text: str) -> bool:
    """``path`` is a regular file whose bytes are ``text``'s (not a link someone put there, not edited)."""
    try:
        return not path.is_symlink() and path.is_file() and path.read_bytes() == text.encode("utf-8")
    except OSError:
        return False


def sample_path(text: str) -> str:
    """``@NAME``: the path of the sample shipped with gradviz (a ScriptError names the samples there are)."""
    from gradviz.resources import sample, samples_dir

    found = sample(text[1:])
    if found is None:
        folder = samples_dir()
        names = sorted(str(p.relative_to(folder).with_suffix("")) for p in folder.rglob("*.py")
                       if not p.name.startswith("_")) if folder else []
        raise ScriptError(f"{text}: no such sample" + (f" (samples: {', '.join('@' + n for n in names[:12])}"
                                                       f"{', ...' if len(names) > 12 else ''})" if names else ""))
    return str(found)


def model_source(text: str, inputs: list[str] | None = None, loss: str | None = None,
                 weights: str | None = None, config: str | dict | None = None) -> tuple[str, str | None]:
    """The model script to open for ``text`` (a script, ``pkg.mod:callable``, a ``.pt2``, or ``@NAME``: a sample
    shipped with gradviz, e.g. ``@mlp_digits``, ``@bugs/detach``), and what was invented."""
    if text.startswith("@"):
        text = sample_path(text)
    path = Path(text).expanduser()
    weights = str(Path(weights).expanduser().resolve()) if weights else None
    if path.suffix.lower() == ".py" or (path.exists() and path.suffix.lower() not in PROGRAM_SUFFIXES):
        if inputs or loss or config:
            raise ScriptError("--input, --loss and --config are for a model without a script (PACKAGE.MODULE:CALLABLE or a "
                              ".pt2 program); a script defines batch and loss_fn itself", path=str(path))
        why = refusal(path)
        if why:
            raise ScriptError(why)
        if not weights:
            return text, None
        data = {"script": str(path.resolve()), "weights": weights, "script_name": path.name}
        return str(_write(f"{path.stem}_weights", WEIGHTS_TEMPLATE, data)), f"{path.name} with the weights of {weights}"
    try:
        specs = [parse_input(i) for i in inputs or []]
        loss_spec = parse_loss(loss)
        overrides = dict(config) if isinstance(config, dict) else parse_config(config)
    except ValueError as exc:
        raise ScriptError(str(exc)) from None
    if path.suffix.lower() in PROGRAM_SUFFIXES:
        if not path.is_file():
            raise ScriptError(f"no such program: {path}", path=str(path))
        if overrides:
            raise ScriptError("--config is for a model built by a callable; a .pt2 program is built already",
                              path=str(path))
        made = Invented(program=str(path.resolve()), inputs=specs, loss=loss_spec, weights=weights)
    elif is_callable_spec(text):
        if not specs:   # only a program stores inputs: say so before anything is imported or built
            raise needs_inputs(text)
        made = Invented(target=text, inputs=specs, loss=loss_spec, weights=weights, config=overrides)
    else:
        raise ScriptError(f"{text}: no such file, and not PACKAGE.MODULE:CALLABLE (e.g. mypkg.models:build)")
    stem = made.target.replace(":", "_") if made.target else Path(made.program).stem
    data = {"recipe": made.to_json(), "search": [os.getcwd()]}
    return str(_write(stem, RECIPE_TEMPLATE, data)), made.note
