"""Gradient-norm colours: a perceptually uniform map on a log10 scale (pure numpy, no Qt).

The map is computed, not copied: a path through OKLab (a perceptually uniform colour
space) with lightness rising linearly from dark violet through blue and teal to
yellow, like viridis. Linear lightness means "brighter = larger gradient" reads the
same on light and dark backgrounds and in greyscale print. Special values get hues
the map never uses: magenta for NaN, red for ±Inf and neutral grey for "no gradient".
"""
from __future__ import annotations

import math
from typing import Iterable, Sequence

import numpy as np

RGB = tuple[int, int, int]

NAN_RGB: RGB = (236, 32, 196)      # magenta: the map has no pink
INF_RGB: RGB = (214, 22, 40)       # red
NO_GRAD_RGB: RGB = (160, 163, 168)  # neutral grey: no chroma, unlike every map entry

__all__ = ["CMAP", "NAN_RGB", "INF_RGB", "NO_GRAD_RGB", "LogColorScale", "auto_range", "colors_for",
           "text_color_for", "to_hex"]


def _oklab_to_srgb(lab: np.ndarray) -> np.ndarray:
    """OKLab (N, 3) -> sRGB in [0, 1] (unclipped), after Björn Ottosson's definition."""
    m1 = np.array([[1.0, 0.3963377774, 0.2158037573],
                   [1.0, -0.1055613458, -0.0638541728],
                   [1.0, -0.0894841775, -1.2914855480]])
    m2 = np.array([[4.0767416621, -3.3077115913, 0.2309699292],
                   [-1.2684380046, 2.6097574011, -0.3413193965],
                   [-0.0041960863, -0.7034186147, 1.7076147010]])
    lms = (lab @ m1.T) ** 3
    lin = lms @ m2.T
    lin = np.clip(lin, -1.0, 2.0)
    return np.where(lin <= 0.0031308, 12.92 * lin, 1.055 * np.abs(lin) ** (1 / 2.4) - 0.055)


def _build_cmap(n: int = 256) -> np.ndarray:
    """(n, 3) uint8. Lightness linear in t; hue turns violet -> blue -> teal -> green -> yellow;
    chroma is the requested one, reduced (bisection) until the colour fits in sRGB."""
    t = np.linspace(0.0, 1.0, n)
    lightness = 0.30 + 0.63 * t
    hue = np.radians(300.0 - 190.0 * t)
    chroma = 0.14 - 0.07 * np.sin(np.pi * t) ** 2 + 0.06 * t ** 3
    lo = np.zeros(n)
    hi = chroma.copy()
    for _ in range(24):  # largest chroma <= requested that stays inside the sRGB gamut
        mid = (lo + hi) / 2
        rgb = _oklab_to_srgb(np.stack([lightness, mid * np.cos(hue), mid * np.sin(hue)], axis=1))
        ok = np.all((rgb >= -1e-4) & (rgb <= 1 + 1e-4), axis=1)
        full = _oklab_to_srgb(np.stack([lightness, chroma * np.cos(hue), chroma * np.sin(hue)], axis=1))
        full_ok = np.all((full >= -1e-4) & (full <= 1 + 1e-4), axis=1)
        lo = np.where(ok, mid, lo)
        hi = np.where(ok, hi, mid)
        lo = np.where(full_ok, chroma, lo)
    rgb = _oklab_to_srgb(np.stack([lightness, lo * np.cos(hue), lo * np.sin(hue)], axis=1))
    return np.round(np.clip(rgb, 0, 1) * 255).astype(np.uint8)


CMAP: np.ndarray = _build_cmap()  # (256, 3) uint8, dark (small gradient) -> bright (large)
_SPECIAL = np.array([NAN_RGB, INF_RGB, NO_GRAD_RGB], dtype=np.uint8)


def _as_array(norms: Iterable[float | None] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Float array (None -> NaN) and the mask of entries that were None ("no gradient")."""
    if isinstance(norms, np.ndarray) and norms.dtype != object:
        arr = norms.astype(float, copy=False).ravel()
        return arr, np.zeros(arr.shape, dtype=bool)
    seq = list(norms)
    missing = np.fromiter((v is None for v in seq), dtype=bool, count=len(seq))
    arr = np.array([np.nan if v is None else v for v in seq], dtype=float)
    return arr, missing


GAP_DECADES = 2.0             # a gap this wide below the median splits off a cluster of tiny norms


def auto_range(norms: Iterable[float | None] | np.ndarray) -> tuple[float, float]:
    """A robust (lo, hi): the 1st-99th percentile of finite positive norms, at least a decade wide.

    Outliers (one exploding layer) then clamp to the ends instead of squashing every
    other node into one colour. So does a small cluster of tiny norms cut off from the rest by
    a gap of ``GAP_DECADES`` or more (a transformer's attention key biases get a gradient that
    is zero up to rounding, ~1e-9): left in, it would stretch the scale over nine decades and
    paint the whole healthy graph in a few colours. With no usable norm the range is (1e-6, 1).
    """
    arr, _ = _as_array(norms)
    good = arr[np.isfinite(arr) & (arr > 0)]
    if good.size == 0:
        return 1e-6, 1.0
    if good.size >= 20:
        logs = np.sort(np.log10(good))
        gaps = np.diff(logs[: logs.size // 2 + 1])      # only below the median: never the majority
        if gaps.size and gaps.max() >= GAP_DECADES:
            good = 10.0 ** logs[int(np.argmax(gaps)) + 1:]
    lo, hi = (float(v) for v in np.percentile(good, [1, 99])) if good.size >= 20 else (
        float(good.min()), float(good.max()))
    if hi <= lo * 10:  # too narrow: widen symmetrically (in log space) to one decade
        mid = math.sqrt(lo * hi)
        lo, hi = mid / math.sqrt(10), mid * math.sqrt(10)
    return lo, hi


class LogColorScale:
    """Maps gradient norms to RGB on a clamped log10 scale between ``lo`` and ``hi``."""

    def __init__(self, lo: float = 1e-6, hi: float = 1.0, cmap: np.ndarray = CMAP) -> None:
        if not (math.isfinite(lo) and math.isfinite(hi)) or lo <= 0 or hi <= 0:
            raise ValueError(f"colour range must be finite and positive, got ({lo}, {hi})")
        if hi < lo:
            lo, hi = hi, lo
        if hi == lo:
            lo, hi = lo / 10, hi * 10
        self.lo, self.hi = float(lo), float(hi)
        self.cmap = cmap
        self._log_lo, self._log_hi = math.log10(self.lo), math.log10(self.hi)

    @classmethod
    def fit(cls, norms: Iterable[float | None] | np.ndarray) -> "LogColorScale":
        return cls(*auto_range(norms))

    def __repr__(self) -> str:
        return f"LogColorScale({self.lo:.3g}, {self.hi:.3g})"

    def positions(self, norms: Iterable[float | None] | np.ndarray) -> np.ndarray:
        """Place along the map in [0, 1]; NaN for NaN, Inf and missing norms. Zero -> 0."""
        arr, _ = _as_array(norms)
        with np.errstate(divide="ignore", invalid="ignore"):
            t = (np.log10(np.where(arr > 0, arr, self.lo)) - self._log_lo) / (self._log_hi - self._log_lo)
        t = np.clip(t, 0.0, 1.0)
        t[~np.isfinite(arr)] = np.nan
        return t

    def colors_for(self, norms: Iterable[float | None] | np.ndarray) -> np.ndarray:
        """(N, 3) uint8 colours, vectorised: one numpy pass for the whole graph."""
        arr, missing = _as_array(norms)
        t = self.positions(arr)
        idx = np.nan_to_num(t * (len(self.cmap) - 1), nan=0.0).round().astype(np.intp)
        out = self.cmap[idx]
        out[np.isnan(arr)] = _SPECIAL[0]
        out[np.isinf(arr)] = _SPECIAL[1]
        out[missing] = _SPECIAL[2]
        return out

    def color(self, norm: float | None) -> RGB:
        r, g, b = self.colors_for([norm])[0]
        return int(r), int(g), int(b)

    def ticks(self) -> list[tuple[float, float]]:
        """(value, position) at every power of ten inside the range (at least the two ends)."""
        first, last = math.ceil(self._log_lo - 1e-9), math.floor(self._log_hi + 1e-9)
        ticks = [(10.0 ** e, (e - self._log_lo) / (self._log_hi - self._log_lo)) for e in range(first, last + 1)]
        if len(ticks) > 7:  # keep the bar readable: every 2nd or 3rd decade
            step = math.ceil(len(ticks) / 6)
            ticks = ticks[::step]
        if len(ticks) < 2:
            ticks = [(self.lo, 0.0), (self.hi, 1.0)]
        return ticks


def colors_for(norms: Iterable[float | None] | np.ndarray, scale: LogColorScale | None = None) -> np.ndarray:
    """Colours for ``norms`` with ``scale`` (default: ``auto_range`` of the norms themselves)."""
    arr, missing = _as_array(norms)
    scale = scale or LogColorScale(*auto_range(arr[~missing]))
    return scale.colors_for([None if m else v for v, m in zip(arr.tolist(), missing.tolist())]
                            if missing.any() else arr)


def luminance(rgb: Sequence[int]) -> float:
    """WCAG relative luminance of an 8-bit sRGB colour."""
    def channel(c: float) -> float:
        c /= 255.0
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4
    r, g, b = (channel(float(c)) for c in rgb[:3])
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def text_color_for(rgb: Sequence[int]) -> RGB:
    """Near-black or white, whichever contrasts more with the fill ``rgb``."""
    lum = luminance(rgb)
    dark, light = (17, 24, 39), (255, 255, 255)
    # contrast ratio against each candidate: (L1 + 0.05) / (L2 + 0.05)
    return dark if (lum + 0.05) / (luminance(dark) + 0.05) >= 1.05 / (lum + 0.05) else light


def to_hex(rgb: Sequence[int]) -> str:
    return "#{:02x}{:02x}{:02x}".format(*(int(c) for c in rgb[:3]))
