"""What an attribution figure shows, as plain numbers (no Qt): one ``Section`` per input.

Image inputs (N, C, H, W): the example's image and its attribution summed over the
channels, drawn over the image. Token ids (N, T): one bar per position, labelled with
the token id. Float sequences (N, T, F): one bar per position (summed over features).
Tabular inputs (N, F): one bar per feature, and when F is a square (an image flattened
by the script, e.g. 8×8 digits) the same values as an s×s map.

``example`` picks one example of the batch; ``None`` shows the whole batch: the mean of
``|attribution|`` per element (and the mean input), since signs cancel across examples.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from gradviz.core.attribution.attribute import AttributionResult, InputAttribution

MAX_BARS = 512        # longer sequences / feature vectors are pooled into this many bars


@dataclass
class Section:
    title: str
    kind: str                                  # image | bars | note
    signed: bool                               # diverging colours (IG, grad × input) or one-sided (saliency)
    bars: np.ndarray | None = None             # one value per position / feature
    labels: list[str] = field(default_factory=list)   # under each bar (token ids, feature numbers)
    image: np.ndarray | None = None            # (H, W) grey or (H, W, 3) in [0, 1]
    heat: np.ndarray | None = None             # (H, W) attribution map
    square: np.ndarray | None = None           # tabular features seen as an s x s map
    note: str = ""
    pooled: int = 1                            # bars: positions per bar when pooled
    unit: str = "feature"                      # bars: what one bar is (token, position, feature)

    def bar_text(self, i: int) -> str:
        """What bar ``i`` stands for, as its tooltip says it: 'position 5, token id 23: 1.34'."""
        value = f"{self.bars[i]:.4g}"
        if self.pooled > 1:
            plural = "features" if self.unit == "feature" else "positions"
            return f"{plural} {i * self.pooled}–{(i + 1) * self.pooled - 1} (summed): {value}"
        if self.unit == "token":
            return f"position {i}, token id {self.labels[i]}: {value}"
        return f"{self.unit} {i}: {value}"


def header(result: AttributionResult) -> tuple[str, str]:
    """Title and subtitle lines: method, target, completeness."""
    names = {"ig": "Integrated gradients", "saliency": "Saliency |∂f/∂x|", "grad-x-input": "Gradient × input"}
    title = f"{names.get(result.method, result.method)} · target: {result.target}"
    parts = [f"f(x) = {result.output:.5g}"]
    if result.method == "ig":
        parts.append(f"{result.steps} steps from baseline {result.baseline}")
    c = result.completeness
    if c is not None:
        verdict = "holds" if c.ok else "FAILS: raise --steps"
        parts.append(f"completeness: Σ attributions {c.attribution_sum:.5g} vs f(x) − f(x′) "
                     f"{c.output_delta:.5g} ({100 * c.rel_error:.2f} % off, {verdict})")
    return title, " · ".join(parts)


def n_examples(result: AttributionResult) -> int:
    for a in result.inputs:
        if a.attribution is not None and a.attribution.ndim >= 1:
            return int(a.attribution.shape[0])
    return 0


def sections(result: AttributionResult, example: int | None = 0) -> list[Section]:
    signed = result.method != "saliency"
    return [_section(a, example, signed) for a in result.inputs]


def _pick(a: np.ndarray, example: int | None, absolute: bool) -> np.ndarray:
    if a.ndim == 0:
        return a.reshape(1)
    if example is None:
        return np.abs(a).mean(axis=0) if absolute else a.mean(axis=0)
    return a[min(max(example, 0), a.shape[0] - 1)]


def _section(a: InputAttribution, example: int | None, signed: bool) -> Section:
    which = "all examples, mean |attribution|" if example is None else f"example {example}"
    title = f"input {a.index} · {a.kind} {list(a.shape)} {a.dtype}"
    if a.through:
        title += f" · through {a.through}"
    title += f" · {which}"
    if a.attribution is None:
        return Section(title, "note", signed, note=a.note or "no attribution")
    signed_here = signed and example is not None
    attr = _pick(a.attribution, example, absolute=example is None)
    values = _pick(a.values.astype(np.float64), example, absolute=False) if a.kind != "tokens" else None
    if a.kind == "image":
        return Section(title, "image", signed_here, image=_as_image(values), heat=attr.sum(axis=0))
    if a.kind == "tokens":
        bars = attr.reshape(-1) if attr.ndim <= 1 else attr.reshape(attr.shape[0], -1).sum(axis=1)
        ids = a.values[min(max(example or 0, 0), a.values.shape[0] - 1)].reshape(-1) if example is not None \
            and a.values.ndim >= 1 else None
        labels = [str(int(t)) for t in ids] if ids is not None and ids.size == bars.size else \
            [str(i) for i in range(bars.size)]
        with_ids = ids is not None and ids.size == bars.size      # whole batch: positions only
        return _bars(title, bars, labels, signed_here, "token" if with_ids else "position")
    if a.kind == "sequence":
        bars = attr.sum(axis=-1)
        return _bars(title, bars, [str(i) for i in range(bars.size)], signed_here, "position")
    bars = attr.reshape(-1)
    sec = _bars(title, bars, [str(i) for i in range(bars.size)], signed_here, "feature")
    side = int(round(math.sqrt(bars.size)))
    if bars.size >= 16 and side * side == bars.size:
        sec.square = bars.reshape(side, side)
        sec.image = values.reshape(side, side) if values is not None and values.size == bars.size else None
        if sec.image is not None:
            sec.image = _normalise(sec.image)
    return sec


def _bars(title: str, bars: np.ndarray, labels: list[str], signed: bool, unit: str) -> Section:
    pooled = 1
    if bars.size > MAX_BARS:
        pooled = math.ceil(bars.size / MAX_BARS)
        pad = (-bars.size) % pooled
        bars = np.concatenate([bars, np.zeros(pad)]).reshape(-1, pooled).sum(axis=1)
        labels = [str(i * pooled) for i in range(bars.size)]
        title += f" · {pooled} positions per bar"
    return Section(title, "bars", signed, bars=bars, labels=labels, pooled=pooled, unit=unit)


def _as_image(values: np.ndarray) -> np.ndarray:
    """(C, H, W) input -> (H, W) grey or (H, W, 3) colour in [0, 1]."""
    if values.ndim == 2:
        return _normalise(values)
    if values.shape[0] == 3:
        return _normalise(np.moveaxis(values, 0, -1))
    return _normalise(values.mean(axis=0))


def _normalise(x: np.ndarray) -> np.ndarray:
    lo, hi = float(np.nanmin(x)), float(np.nanmax(x))
    if not math.isfinite(lo) or not math.isfinite(hi) or hi <= lo:
        return np.zeros_like(x, dtype=np.float64)
    return (x - lo) / (hi - lo)


def diverging_rgb(values: np.ndarray, limit: float) -> np.ndarray:
    """Blue (negative) - white - red (positive), symmetric around 0; (..., 3) uint8."""
    t = np.clip(values / limit, -1.0, 1.0) if limit > 0 else np.zeros_like(values)
    pos, neg = np.clip(t, 0, 1)[..., None], np.clip(-t, 0, 1)[..., None]
    white = np.array([255.0, 255.0, 255.0])
    red, blue = np.array([202.0, 0.0, 32.0]), np.array([5.0, 113.0, 176.0])
    rgb = white + pos * (red - white) + neg * (blue - white)
    return rgb.round().astype(np.uint8)


def sequential_rgb(values: np.ndarray, limit: float) -> np.ndarray:
    """White to dark red for one-sided values (saliency, mean |attribution|); (..., 3) uint8."""
    t = np.clip(np.abs(values) / limit, 0.0, 1.0)[..., None] if limit > 0 else np.zeros(values.shape + (1,))
    white, red = np.array([255.0, 255.0, 255.0]), np.array([153.0, 0.0, 13.0])
    return (white + t * (red - white)).round().astype(np.uint8)


def color_limit(values: np.ndarray) -> float:
    """The colour scale's end: the 99th percentile of |values| (one outlier must not wash out the rest)."""
    finite = np.abs(values[np.isfinite(values)])
    if finite.size == 0:
        return 0.0
    lim = float(np.percentile(finite, 99))
    return lim if lim > 0 else float(finite.max())
