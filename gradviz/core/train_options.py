"""The Trainer's settings that are checked and turned into objects once: the optimizers it
can make, the learning-rate schedules, and the validation of a ``TrainConfig`` (a
``ValueError`` naming the bad setting, before any model is built)."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
from torch import nn

from gradviz.core.adaptive_clip import GRANULARITIES, AdaptiveClip

if TYPE_CHECKING:
    from gradviz.core.script import ModelScript
    from gradviz.core.trainer import TrainConfig

__all__ = ["OPTIMIZERS", "SCHEDULES", "DEFAULT_LR", "lr_factor", "make_optimizer", "check_config"]

OPTIMIZERS = ("sgd", "sgd-momentum", "adam", "adamw")
SCHEDULES = ("constant", "step", "cosine")
DEFAULT_LR = {"sgd": 0.01, "sgd-momentum": 0.01, "adam": 1e-3, "adamw": 1e-3}


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
