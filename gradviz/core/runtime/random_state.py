"""torch's random generators are one per process: a trace, a detail replay or a gradient check
that seeds them on one thread changes the dropout masks and batches of a training run on
another, and a training step drawing between a replay's seed and its forward gives the replay
other numbers. So what seeds holds the generators from its seed to the end of its forward
(``seeded``: a trace's or replay's build and forward, each forward of a gradient check, a
check's training steps), every training step holds them too, and a trainer keeps a random
stream of its own (``OwnRandomState``): what ran between two of its steps does not change its
next one. The hold is per forward, not per job: a long gradient check lets training go on
between its forwards.

The trainer's stream is saved lazily: the generators belong to the last trainer that stepped
(``_owner``) until a ``seeded`` block takes them, which first saves that trainer's state; the
trainer's next step puts it back. A run nobody interrupts pays a lock per step, no copy.
No Qt here.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Iterator

import torch

_LOCK = threading.RLock()
_owner: "OwnRandomState | None" = None     # whose stream torch's generators hold now


def _take_over() -> None:
    """(Holding the lock) the generators are about to be seeded: their owner's stream is saved first."""
    global _owner
    if _owner is not None:
        _owner.keep()
        _owner = None


@contextmanager
def seeded(seed: int | None) -> Iterator[None]:
    """Seed torch's generators (None: leave them as they are) and hold them for the block: a build and
    forward run in it draw only their own numbers, and a training step on another thread waits."""
    with _LOCK:
        _take_over()
        if seed is not None:
            torch.manual_seed(seed)
        yield


def _cuda_ready() -> bool:
    return torch.cuda.is_available() and torch.cuda.is_initialized()


class OwnRandomState:
    """The generators' state of one trainer: made right after its seeded build, it owns them."""

    def __init__(self) -> None:
        global _owner
        with _LOCK:
            self.keep()
            _owner = self

    def keep(self) -> None:
        self.cpu = torch.get_rng_state()
        self.cuda = torch.cuda.get_rng_state_all() if _cuda_ready() else None

    def restore(self) -> None:
        torch.set_rng_state(self.cpu)
        if self.cuda is not None and _cuda_ready():
            torch.cuda.set_rng_state_all(self.cuda)

    @contextmanager
    def peeking(self, devices: list[int]) -> Iterator[None]:
        """Draw from this trainer's stream as its next step would, and leave the stream as it was
        (a probe of the paused model: the same dropout masks and batches, training unchanged)."""
        with _LOCK, torch.random.fork_rng(devices=devices):
            if _owner is not self:
                self.restore()
            yield

    @contextmanager
    def stepping(self) -> Iterator[None]:
        """One step drawing from this trainer's own stream, no other thread seeding meanwhile."""
        global _owner
        with _LOCK:
            if _owner is not self:
                _take_over()
                self.restore()
                _owner = self
            yield
