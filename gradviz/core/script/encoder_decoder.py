"""The decoder's token ids for an encoder-decoder model given only its encoder's (``decoder_kwargs``).

A transformers encoder-decoder model (``config.is_encoder_decoder``: T5, BART, Marian ...) runs its
decoder on ``decoder_input_ids`` (or ids made from labels); without them its forward raises ("You must
specify exactly one of input_ids or inputs_embeds", from the decoder). ``--input`` gives positional
inputs, and ``decoder_input_ids`` comes after ``attention_mask`` and others in ``forward``: when fewer
inputs are given than reach it, the decoder gets the first input's token ids again (already in the
input embedding's range, which the decoder shares), and the caller says so once.
"""
from __future__ import annotations

import inspect
from typing import Any

import torch
from torch import nn

__all__ = ["decoder_kwargs"]


def decoder_kwargs(model: nn.Module, inputs: tuple) -> dict[str, Any]:
    """``{"decoder_input_ids": inputs[0]}`` for an encoder-decoder model whose inputs stop before its
    decoder's ids; ``{}`` for any other model (nothing is added)."""
    if not inputs or not getattr(getattr(model, "config", None), "is_encoder_decoder", False):
        return {}
    try:
        names = list(inspect.signature(model.forward).parameters)
    except (TypeError, ValueError):           # a forward without a signature: pass what was given only
        return {}
    if "decoder_input_ids" not in names or names.index("decoder_input_ids") < len(inputs):
        return {}
    ids = inputs[0]
    if not isinstance(ids, torch.Tensor) or ids.is_floating_point() or ids.dtype == torch.bool:
        return {}
    return {"decoder_input_ids": ids}
