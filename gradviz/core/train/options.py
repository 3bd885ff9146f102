"""The Trainer's settings (``TrainConfig``) and what is checked and turned into objects once: the
optimizers it can make, the learning-rate schedules, and the validation of a ``TrainConfig`` (a
``ValueError`` naming the bad setting, before any model is built)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

import torch
from torch import nn

from gradviz.core.stats.adaptive_clip import GRANULARITIES, AdaptiveClip

if TYPE_CHECKING:
    from gradviz.core.script.load import ModelScript

__all__ = ["TrainConfig", "OPTIMIZERS", "SCHEDULES", "DEFAULT_LR", "lr_factor", "make_optimizer", "check_config"]

OPTIMIZERS = ("sgd", "sgd-momentum", "adam", "adamw")
SCHEDULES = ("constant", "step", "cosine")
DEFAULT_LR = {"sgd": 0.01, "sgd-momentum": 0.01, "adam": 1e-3, "adamw": 1e-3}


@dataclass
class TrainConfig:
    """How to train. ``None`` for ``optimizer``/``lr`` means: what the script says."""

    device: str = "auto"                    # cpu | cuda | mps | auto (cuda, else mps, else cpu)
    optimizer: str | None = None            # None: the script's optimizer(); else one of OPTIMIZERS
    lr: float | None = None                 # None: the optimizer's own
    schedule: str = "constant"              # constant | step | cosine, applied per step
    step_size: int = 100                    # step schedule: multiply by gamma every step_size steps
    gamma: float = 0.5
    total_steps: int = 1000                 # cosine schedule: lr reaches min_lr_ratio * lr here
    min_lr_ratio: float = 0.0
    max_grad_norm: float | None = None      # None: no clipping
    adaptive_clip: float | None = None      # per-layer adaptive clipping factor (lambda); None: off
    adaptive_clip_eps: float = 1e-3         # ... the floor of ||W|| (keeps zero-initialised biases moving)
    adaptive_clip_granularity: str = "parameter"   # "parameter" (per tensor) or "unit" (per output row, NFNets)
    label_smoothing: float = 0.0            # epsilon for the script's cross-entropy; 0: off
    accumulation: int = 1                   # k micro-batches per step, loss divided by k
    zero_grad_every_step: bool = True
    amp: bool = False                       # CUDA only: autocast + GradScaler
    amp_dtype: str = "float16"
    node_sample_interval_s: float | None = 0.25   # sample per-node norms at most this often
    node_sample_every: int | None = None    # ... or every N steps (overrides the interval)
    seed: int | None = 0                    # torch.manual_seed before building the model
    track_updates: bool = True              # update-to-weight ratios (one copy of the weights)
    # measure the update ratios every N steps; None = auto: as often as keeps their cost under
    # update_cadence.UPDATE_BUDGET of the step time (every step unless the model is tiny); other steps -> NaN
    update_ratio_every: int | None = None
    momentum: float = 0.9                   # sgd-momentum
    weight_decay: float = 0.01              # adamw
    # filled in by the diagnosis engine: (trainer, step, loss_value, inputs, targets) -> str | None,
    # an explanation (node, file:line) appended to the non-finite loss error
    diagnose_nonfinite: Callable[..., str | None] | None = field(default=None, repr=False)


def check_config(cfg: TrainConfig) -> None:
    """Refuse a configuration the trainer cannot run (ValueError)."""
    if cfg.schedule not in SCHEDULES:
        raise ValueError(f"unknown schedule {cfg.schedule!r} (one of {', '.join(SCHEDULES)})")
    if cfg.optimizer is not None and cfg.optimizer not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {cfg.optimizer!r} (one of {', '.join(OPTIMIZERS)})")
    if cfg.accumulation < 1:
        raise ValueError("accumulation must be at least 1")
    if cfg.adaptive_clip is not None:
        AdaptiveClip(cfg.adaptive_clip, cfg.adaptive_clip_eps, cfg.adaptive_clip_granularity)
    elif cfg.adaptive_clip_granularity not in GRANULARITIES:
        raise ValueError(f"unknown adaptive clipping granularity {cfg.adaptive_clip_granularity!r}")
    if not 0.0 <= cfg.label_smoothing <= 1.0:
        raise ValueError(f"label smoothing must be in [0, 1], got {cfg.label_smoothing}")


def lr_factor(config: TrainConfig, step: int) -> float:
    """Multiplier of the base learning rate at ``step`` (0-based) for the config's schedule."""
    if config.schedule == "step":
        return config.gamma ** (step // max(1, config.step_size))
    if config.schedule == "cosine":
        t = min(step, config.total_steps) / max(1, config.total_steps)
        lo = config.min_lr_ratio
        return lo + (1 - lo) * 0.5 * (1 + math.cos(math.pi * t))
    return 1.0


def make_optimizer(cfg: TrainConfig, script: ModelScript, model: nn.Module) -> torch.optim.Optimizer:
    """The script's ``optimizer(params)`` (its lr replaced by ``cfg.lr`` when given), or one of
    ``OPTIMIZERS`` over the parameters that require grad."""
    params = [p for p in model.parameters() if p.requires_grad]
    kind = cfg.optimizer
    if kind is None:
        opt = script.make_optimizer(params)
        if cfg.lr is not None:
            for g in opt.param_groups:
                g["lr"] = cfg.lr
        return opt
    lr = DEFAULT_LR[kind] if cfg.lr is None else cfg.lr
    if kind == "sgd":
        return torch.optim.SGD(params, lr=lr)
    if kind == "sgd-momentum":
        return torch.optim.SGD(params, lr=lr, momentum=cfg.momentum)
    if kind == "adam":
        return torch.optim.Adam(params, lr=lr)
    return torch.optim.AdamW(params, lr=lr, weight_decay=cfg.weight_decay)
