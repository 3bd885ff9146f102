"""A model with no script: a callable (``mypkg.models:build``) or a saved program, plus invented inputs and loss.

``gradviz export mypkg.models:build --input 1,3,224,224 --loss ce`` builds the model by calling
the callable with no arguments, and invents what a model script would define: deterministic
inputs of the given shapes (``batch(step)``, seeded by the step) and a loss. ``Invented`` holds
that recipe; ``gradviz.core.script.generated`` writes it as an ordinary model script, so the app, every
command and the API take the same path as for a hand-written script — and the user can copy the
file and put real data in. ``note`` says, in words, what was invented.

SHAPE is written ``1,3,224,224``; ``SHAPE:DTYPE`` picks the dtype (default float32);
integer dtypes (token ids) take ``SHAPE:DTYPE:HIGH`` for values in ``[0, HIGH)``, by default the
rows of the model's input embedding (``get_input_embeddings()``, else its first ``nn.Embedding``: so
every id is valid), else 2. ``--config KEY=VALUE,...`` builds a model class with a configuration class
(transformers' ``GPT2LMHeadModel``) from that class's defaults and these overrides, or is passed to any
other callable as keyword arguments (``construct``). The loss is ``sum`` (the
default: every output gets gradient 1), ``mean``, or ``ce[:CLASSES]`` (cross-entropy over the
last dimension against class indices invented in ``[0, CLASSES)``, by default all classes).
"""
from __future__ import annotations

import importlib
import inspect
import math
import re
import sys
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from gradviz.core.runtime.errors import ScriptError
from gradviz.core.runtime.formatting import byte_size
from gradviz.core.script.encoder_decoder import decoder_kwargs
from gradviz.core.script.meta import HEADROOM, available_bytes

__all__ = ["InputSpec", "LossSpec", "Invented", "is_callable_spec", "parse_input", "parse_loss", "parse_config",
           "construct", "input_embedding",
           "first_tensor", "needs_inputs"]

MAX_SIZE = 2 ** 40          # one dimension (torch's sizes are int64; beyond this no machine holds it)
MAX_ELEMENTS = 2 ** 62      # a tensor's elements, with room for torch's own int64 arithmetic
CALLABLE = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")
DTYPES = {"float": torch.float32, "float32": torch.float32, "float64": torch.float64, "double": torch.float64,
          "float16": torch.float16, "half": torch.float16, "bfloat16": torch.bfloat16,
          "long": torch.int64, "int64": torch.int64, "int": torch.int32, "int32": torch.int32,
          "bool": torch.bool}


def is_callable_spec(text: str) -> bool:
    """``package.module:callable`` (not a path: no slash, one colon)."""
    return bool(CALLABLE.fullmatch(text))


@dataclass(frozen=True)
class InputSpec:
    shape: tuple[int, ...]
    dtype: torch.dtype = torch.float32
    high: int | None = None          # integer inputs: values in [0, high); None = from the model

    @property
    def integer(self) -> bool:
        return not (self.dtype.is_floating_point or self.dtype == torch.bool)


def parse_input(text: str) -> InputSpec:
    """``1,3,224,224``, ``2,16:long`` or ``2,16:long:1000`` (a ValueError says what is wrong)."""
    shape_text, *rest = text.strip().split(":")
    sizes = re.split(r"\s*[,x×]\s*", shape_text.strip())
    if not all(d.isdigit() for d in sizes):
        raise ValueError(f"--input {text!r}: SHAPE is comma-separated sizes, e.g. 1,3,224,224")
    shape = tuple(int(d) for d in sizes)
    if any(d <= 0 for d in shape):
        raise ValueError(f"--input {text!r}: every size must be a positive integer")
    if any(d >= MAX_SIZE for d in shape) or math.prod(shape) >= MAX_ELEMENTS:
        raise ValueError(f"--input {text!r}: {math.prod(shape):.3g} elements, more than a tensor can hold "
                         f"(sizes below {MAX_SIZE:.3g}, at most {MAX_ELEMENTS:.3g} elements)")
    dtype = DTYPES.get(rest[0].lower()) if rest else torch.float32
    if dtype is None:
        raise ValueError(f"--input {text!r}: unknown dtype {rest[0]!r} (one of {', '.join(DTYPES)})")
    spec = InputSpec(shape, dtype)
    if len(rest) > 1:
        if not spec.integer or not rest[1].isdigit() or not 1 <= int(rest[1]) < MAX_ELEMENTS:
            raise ValueError(f"--input {text!r}: HIGH (values in [0, HIGH)) is a positive integer after an "
                             "integer dtype, e.g. 2,16:long:1000")
        spec = InputSpec(shape, dtype, int(rest[1]))
    if len(rest) > 2:
        raise ValueError(f"--input {text!r}: write SHAPE[:DTYPE[:HIGH]]")
    return spec


@dataclass(frozen=True)
class LossSpec:
    kind: str = "sum"                # sum | mean | ce
    classes: int | None = None


def parse_loss(text: str | None) -> LossSpec:
    kind, _, classes = (text or "sum").strip().lower().partition(":")
    if kind not in ("sum", "mean", "ce") or (classes and (kind != "ce" or not classes.isdigit()
                                                         or not 1 <= int(classes) < MAX_SIZE)):
        raise ValueError(f"--loss {text!r}: use sum, mean or ce[:CLASSES] (CLASSES a positive integer)")
    return LossSpec(kind, int(classes) if classes else None)


def first_tensor(output: Any) -> torch.Tensor | None:
    """The tensor a loss is made of: the output itself, its ``.logits`` (Hugging Face), or the first
    floating-point tensor in a tuple, list or dict."""
    if isinstance(output, torch.Tensor):
        return output
    logits = getattr(output, "logits", None)
    if isinstance(logits, torch.Tensor):
        return logits
    values = output.values() if isinstance(output, dict) else output if isinstance(output, (tuple, list)) else ()
    for value in values:
        found = first_tensor(value)
        if found is not None and found.is_floating_point():
            return found
    return None


def _resolve(target: str) -> Any:
    module_name, _, attr = target.partition(":")
    try:
        obj = importlib.import_module(module_name)
    except ImportError as exc:
        raise ScriptError(f"cannot import {module_name!r} for {target}: {type(exc).__name__}: {exc} (is the package "
                          "installed, or its folder the current one?)", code="script-error") from None
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ScriptError(f"{module_name!r} has no {attr!r} ({target})", code="script-error") from None
    if not callable(obj):
        raise ScriptError(f"{target} is a {type(obj).__name__}, not a callable that builds a model")
    return obj


CONFIG_VALUE = (int, float, bool, str, type(None))


def parse_config(text: str | None) -> dict[str, Any]:
    """``--config n_layer=2,n_embd=32,act=gelu``: keyword arguments, each value an int, a float, true /
    false / none, or else a string (a ValueError says what is wrong). Data only: never evaluated."""
    out: dict[str, Any] = {}
    for item in filter(None, (part.strip() for part in (text or "").split(","))):
        key, eq, raw = item.partition("=")
        key = key.strip()
        if not eq or not key.isidentifier():
            raise ValueError(f"--config {text!r}: write KEY=VALUE pairs separated by commas, e.g. n_layer=2,n_embd=32")
        out[key] = _config_value(raw.strip())
    return out


def _config_value(raw: str) -> Any:
    low = raw.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return None
    for kind in (int, float):
        try:
            return kind(raw)
        except ValueError:
            pass
    return raw


def _config_class(obj: Any) -> type | None:
    """The configuration class a model class is built from (transformers' ``PreTrainedModel.config_class``)."""
    config_class = getattr(obj, "config_class", None)
    return config_class if isinstance(obj, type) and isinstance(config_class, type) else None


def _auto_config(obj: Any) -> Any:
    """For an auto class (``AutoModelForCausalLM``: ``from_config`` and no config class of its own), the
    package's ``AutoConfig`` (its ``for_model(model_type, **kwargs)`` builds a config without the hub)."""
    if not (isinstance(obj, type) and callable(getattr(obj, "from_config", None))):
        return None
    package = sys.modules.get(obj.__module__.partition(".")[0])
    auto = getattr(package, "AutoConfig", None)
    return auto if callable(getattr(auto, "for_model", None)) else None


def _required(fn: Any) -> list[str]:
    """The parameters ``fn`` cannot be called without (empty when the signature cannot be read)."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return []
    return [p.name for p in sig.parameters.values() if p.default is p.empty
            and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]


def construct(target: str, config: dict[str, Any] | None = None) -> Any:
    """Call what ``target`` names to build the model.

    - a class with a configuration class (every transformers model: ``GPT2LMHeadModel.config_class`` is
      ``GPT2Config``) is built from that class's default configuration with ``config`` as overrides —
      locally, never from the hub;
    - an auto class (``AutoModel``) needs ``model_type`` in ``config`` (its ``AutoConfig.for_model``);
    - any other callable is called with ``config`` as keyword arguments; one that needs arguments it was
      not given is refused in one line saying how to give them (``--config`` or a factory of yours).
    """
    obj = _resolve(target)
    config = dict(config or {})
    hint = ("give them with --config KEY=VALUE,... (keyword arguments), or write a factory "
            "(def build(): return ...) and open mymodule:build")
    if _config_class(obj) is not None:
        cls = _config_class(obj)
        try:
            cfg = cls(**config)
        except (TypeError, ValueError) as exc:
            raise ScriptError(f"cannot build {cls.__name__}(**{config}) for {target}: {exc}") from None
        return _call(target, obj, cfg)
    auto = _auto_config(obj)
    if auto is not None:
        model_type = config.pop("model_type", None)
        if not isinstance(model_type, str):
            raise ScriptError(f"{target} picks its model class from a configuration: name the class itself "
                              "(e.g. transformers:GPT2LMHeadModel --config n_layer=2), or give --config "
                              "model_type=gpt2,... (gradviz never downloads from the hub)")
        try:
            cfg = auto.for_model(model_type, **config)
        except (TypeError, ValueError, KeyError) as exc:
            raise ScriptError(f"cannot build a {model_type!r} configuration for {target}: {exc}") from None
        return _call(target, obj.from_config, cfg)
    missing = [name for name in _required(obj) if name not in config]
    if missing:
        hub = " (from_pretrained reads a checkpoint from the hub or a folder; gradviz never downloads)" \
            if target.endswith("from_pretrained") else ""
        raise ScriptError(f"{target} needs argument(s) {', '.join(missing)}{hub}: {hint}")
    return _call(target, obj, **config)


def _call(target: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return fn(*args, **kwargs)
    except Exception as exc:
        from gradviz.core.script.load import error_from_exception

        error = error_from_exception(exc, f"building the model with {target} raised", "script-error")
        if isinstance(exc, TypeError) and "argument" in str(exc):
            hub = "from_pretrained reads a checkpoint from the hub or a folder, and gradviz never downloads: " \
                if "from_pretrained" in target else ""
            error = error.with_hint(hub + "give the arguments with --config KEY=VALUE,... (keyword arguments), or "
                                    "write a factory (def build(): return ...) and open mymodule:build")
        raise error from None


@dataclass
class Invented:
    """The recipe of a model without a script: where the model comes from, and the inputs and loss invented."""

    target: str | None = None                 # package.module:callable
    program: str | None = None                # a torch.export program (.pt2)
    inputs: list[InputSpec] = field(default_factory=list)
    loss: LossSpec = field(default_factory=LossSpec)
    weights: str | None = None                # a state_dict file loaded into the built model
    config: dict[str, Any] = field(default_factory=dict)   # --config: the config class's overrides / kwargs
    vocab: int | None = field(default=None, init=False)    # the input embedding of the last model built
    vocab_module: str | None = field(default=None, init=False)
    built: bool = field(default=False, init=False)          # a model was built: vocab is known
    _vocab_told: bool = field(default=False, init=False, repr=False)
    _decoder_told: bool = field(default=False, init=False, repr=False)
    stored: tuple | None = field(default=None, init=False)  # a program's own example inputs

    @property
    def source(self) -> str:
        return self.target or str(self.program)

    def to_json(self) -> dict:
        """The recipe as plain data (the generated script's JSON file; never code)."""
        return {"target": self.target, "program": self.program, "weights": self.weights, "config": self.config,
                "inputs": [{"shape": list(spec.shape), "dtype": str(spec.dtype).replace("torch.", ""),
                            "high": spec.high} for spec in self.inputs],
                "loss": {"kind": self.loss.kind, "classes": self.loss.classes}}

    @classmethod
    def from_json(cls, data: Any) -> Invented:
        """The recipe ``to_json`` wrote, every field checked (a ScriptError names the first bad one)."""
        def bad(what: str) -> ScriptError:
            return ScriptError(f"the generated script's recipe is damaged ({what}): open the model again to "
                               "have it written anew")
        if not isinstance(data, dict):
            raise bad("not an object")
        target, program, weights = data.get("target"), data.get("program"), data.get("weights")
        if target is not None and not (isinstance(target, str) and is_callable_spec(target)):
            raise bad("target")
        if (target is None) == (program is None) or not all(v is None or isinstance(v, str)
                                                               for v in (program, weights)):
            raise bad("program / weights")
        inputs = []
        for entry in data.get("inputs") or []:
            shape, dtype, high = (entry.get(k) for k in ("shape", "dtype", "high")) if isinstance(entry, dict) \
                else (None, None, None)
            if not (isinstance(shape, list) and shape and all(type(d) is int and 0 < d < MAX_SIZE for d in shape)
                    and dtype in DTYPES and (high is None or (type(high) is int and 0 < high < MAX_SIZE))):
                raise bad("inputs")
            inputs.append(InputSpec(tuple(shape), DTYPES[dtype], high))
        config = data.get("config") or {}
        if not (isinstance(config, dict) and all(isinstance(k, str) and k.isidentifier()
                                                 and isinstance(v, CONFIG_VALUE) for k, v in config.items())):
            raise bad("config")
        loss = data.get("loss") or {}
        kind, classes = loss.get("kind", "sum"), loss.get("classes")
        if kind not in ("sum", "mean", "ce") or not (classes is None or (type(classes) is int and classes > 0)):
            raise bad("loss")
        return cls(target=target, program=program, inputs=inputs, loss=LossSpec(kind, classes), weights=weights,
                   config=config)

    def build_model(self) -> nn.Module:
        if self.program is not None:
            from gradviz.core.script.checkpoints import load_program

            program = load_program(self.program)
            self.stored = stored_example_inputs(program)
            try:
                model = program.module()
            except Exception as exc:  # noqa: BLE001 - a program torch read but cannot make a module of
                raise ScriptError(f"cannot make a module of the torch.export program: {type(exc).__name__}: "
                                  f"{exc}", path=self.program) from None
            # module() makes train()/eval() raise: the program runs as it was exported (dropout and
            # batch norm in the mode of that moment) whatever the flag says. gradviz's trainer and checks
            # set the flag; let them (nn.Module's own train/eval, which change nothing in the graph).
            for name in ("train", "eval"):
                model.__dict__.pop(name, None)
            # a tied weight is lifted once and rebuilt as one Parameter per name over one storage: one
            # parameter again, as in the model that was exported (core/runtime/ties.py)
            from gradviz.core.runtime.ties import retie

            retie(model)
        else:
            model = construct(self.target, self.config)
            if not isinstance(model, nn.Module):
                raise ScriptError(f"{self.target}() returned a {type(model).__name__}, not a torch.nn.Module")
        if self.weights:
            from gradviz.core.script.checkpoints import load_weights

            load_weights(model, self.weights)
        self._find_vocab(model)
        return model

    def _find_vocab(self, model: nn.Module) -> None:
        """The range of invented token ids: the model's input embedding (``get_input_embeddings()``, which
        every transformers model has), else its first ``nn.Embedding`` in the order the model defines them;
        stated once on stderr (the note printed before the model existed could only say where it would come from)."""
        self.vocab, self.vocab_module = input_embedding(model)
        self.built = True
        guessed = [k for k, spec in enumerate(self.inputs) if spec.integer and spec.high is None]
        if guessed and not self._vocab_told:
            self._vocab_told = True
            where = f"the input embedding {self.vocab_module or '(the model)'}" if self.vocab else \
                "no nn.Embedding found"
            print(f"gradviz: {self.source}: " + ", ".join(f"input {k}" for k in guessed)
                  + f": token ids in [0, {self.vocab or 2}) ({where}; give SHAPE:long:HIGH for another range)",
                  file=sys.stderr)

    def batch(self, step: int) -> tuple[tuple[torch.Tensor, ...], Any]:
        if not self.inputs:
            if self.stored is not None:
                return tuple(t.clone() for t in self.stored), None
            raise needs_inputs(self.source)
        g = torch.Generator().manual_seed(step)
        return tuple(self._make(spec, g) for spec in self.inputs), None

    def _make(self, spec: InputSpec, g: torch.Generator) -> torch.Tensor:
        need = math.prod(spec.shape) * torch.empty((), dtype=spec.dtype).element_size()
        available = available_bytes()
        if available is not None and need > HEADROOM * available:
            dims = "×".join(map(str, spec.shape))
            raise ScriptError(f"the invented input {dims} ({str(spec.dtype).replace('torch.', '')}) needs "
                              f"{byte_size(need)} and this machine has {byte_size(available)} available: "
                              "give a smaller --input")
        if spec.dtype == torch.bool:
            return torch.rand(spec.shape, generator=g) < 0.5
        if spec.integer:
            high = spec.high or self.vocab or 2
            return torch.randint(0, high, spec.shape, generator=g, dtype=spec.dtype)
        return torch.randn(spec.shape, generator=g).to(spec.dtype)

    def compute_loss(self, model: nn.Module, inputs: tuple, targets: Any) -> torch.Tensor:
        """Forward on the invented inputs, then the invented loss; a failing forward names the inputs."""
        extra = decoder_kwargs(model, inputs) if self.program is None else {}
        if extra and not self._decoder_told:
            self._decoder_told = True
            print(f"gradviz: {self.source}: decoder_input_ids: input 0 again (an encoder-decoder model; give them "
                  "as an --input in their place in forward for others)", file=sys.stderr)
        try:
            output = model(*inputs, **extra)
        except Exception as exc:
            from gradviz.core.script.load import error_from_exception

            shown = describe_inputs(self) if self.inputs else "the program's stored example inputs"
            hint = f"with {shown}: are the --input shapes and dtypes the ones its forward takes?"
            if self.program:
                hint += " A torch.export program takes the shapes it was exported with, unless they were dynamic"
            raise error_from_exception(exc, f"the forward of {self.source} raised", "forward-error").with_hint(
                hint) from None
        return self.loss_fn(output, targets)

    def loss_fn(self, output: Any, targets: Any) -> torch.Tensor:
        out = first_tensor(output)
        if out is None:
            raise ScriptError(f"the output of {self.source} holds no floating-point tensor to make a loss of "
                              f"(got {type(output).__name__})")
        if self.loss.kind == "sum":
            return out.float().sum()
        if self.loss.kind == "mean":
            return out.float().mean()
        classes = self.loss.classes or out.shape[-1]
        if out.dim() < 2 or classes > out.shape[-1]:
            raise ScriptError(f"--loss ce needs an output of shape (..., classes); {self.source} gives "
                              f"{tuple(out.shape)}" + (f" (fewer than {classes} classes)" if out.dim() >= 2 else ""))
        g = torch.Generator().manual_seed(0)
        target = torch.randint(0, classes, out.shape[:-1], generator=g).to(out.device)
        return nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]).float(), target.reshape(-1))

    @property
    def note(self) -> str:
        """What gradviz invented, in words (the CLI prints it; the window shows it)."""
        weights = f"; weights from {self.weights}" if self.weights else ""
        if self.config:
            weights = f"; config {', '.join(f'{k}={v}' for k, v in self.config.items())}" + weights
        return f"{self.source}: {describe_inputs(self)}; loss {describe_loss(self.loss)}{weights}"


def input_embedding(model: nn.Module) -> tuple[int | None, str | None]:
    """(rows, module name) of the embedding the model's token ids index: ``get_input_embeddings()`` when the
    model has it (transformers), else the first ``nn.Embedding`` the model defines; (None, None) without one."""
    names = {id(m): name for name, m in model.named_modules()}
    getter = getattr(model, "get_input_embeddings", None)
    if callable(getter):
        try:
            found = getter()
        except (NotImplementedError, AttributeError):
            found = None
        if isinstance(found, nn.Embedding):
            return found.num_embeddings, names.get(id(found), type(found).__name__)
    for name, m in model.named_modules():
        if isinstance(m, nn.Embedding):
            return m.num_embeddings, name
    return None, None


def needs_inputs(source: str) -> ScriptError:
    return ScriptError(f"{source} needs inputs: give --input SHAPE[:DTYPE] once per positional input of its forward "
                       "(e.g. --input 1,3,224,224)")


def stored_example_inputs(program: Any) -> tuple | None:
    """The positional example inputs a torch.export program was saved with (None: none stored)."""
    example = getattr(program, "example_inputs", None)
    if not example:
        return None
    args, kwargs = example
    if kwargs or not args or not all(isinstance(a, torch.Tensor) for a in args):
        return None
    return tuple(args)


def describe_inputs(made: Invented) -> str:
    if not made.inputs:
        return ("the program's stored example inputs (one batch; it runs as exported: dropout and batch norm "
                "in the mode they were in)") if made.program else "no inputs"
    parts = []
    for k, spec in enumerate(made.inputs):
        dims = "×".join(str(d) for d in spec.shape)
        dtype = str(spec.dtype).replace("torch.", "")
        if spec.dtype == torch.bool:
            how = "random"
        elif spec.integer:
            how = f"ids in [0, {spec.high})" if spec.high else _id_range(made)
        else:
            how = "~N(0,1)"
        parts.append(f"input {k} {dtype} {dims} {how}")
    return "invented " + ", ".join(parts) + " (seeded by the step)"


def _id_range(made: Invented) -> str:
    if made.vocab:
        return f"ids in [0, {made.vocab}) (the input embedding {made.vocab_module})"
    if made.built:
        return "ids in [0, 2) (no nn.Embedding in the model)"
    return "ids in [0, the input embedding's size, else 2)"


def describe_loss(loss: LossSpec) -> str:
    if loss.kind == "ce":
        return f"cross-entropy vs random classes in [0, {loss.classes or 'last dim'})"
    return f"{loss.kind}(output)"
