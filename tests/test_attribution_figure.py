"""What the attribution figure shows per input kind (Qt-free sections), checked against the numbers:
image heatmaps, per-position bars, token-id bars, per-feature bars, the whole batch, pooling."""
from __future__ import annotations

import numpy as np
import pytest

from gradviz.core.attribution.attribute import AttributionResult, Completeness, InputAttribution, input_kind
from gradviz.core.attribution.figure import MAX_BARS, color_limit, diverging_rgb, header, sections


def _result(*entries, method="ig", completeness=None):
    return AttributionResult(method, "loss", list(entries), 1.0, completeness, 0.0, 8, "zeros")


def _entry(i, values, attr, integer=False):
    return InputAttribution(i, list(values.shape), "int64" if integer else "float32",
                            input_kind(values.shape, integer), attr, values)


def test_image_input_is_a_heatmap_over_the_image():
    rng = np.random.default_rng(0)
    x = rng.random((2, 3, 5, 7))
    a = rng.normal(size=(2, 3, 5, 7))
    (sec,) = sections(_result(_entry(0, x, a)), example=1)
    assert sec.kind == "image" and sec.signed
    np.testing.assert_allclose(sec.heat, a[1].sum(axis=0))           # summed over the channels
    assert sec.image.shape == (5, 7, 3)                               # the example's RGB picture
    np.testing.assert_allclose(sec.image, (np.moveaxis(x[1], 0, -1) - x[1].min()) / np.ptp(x[1]))
    (whole,) = sections(_result(_entry(0, x, a)), example=None)
    np.testing.assert_allclose(whole.heat, np.abs(a).mean(axis=0).sum(axis=0))
    assert not whole.signed and "mean |attribution|" in whole.title


def test_grey_image_keeps_its_one_channel():
    x = np.arange(2 * 1 * 4 * 4, dtype=float).reshape(2, 1, 4, 4)
    (sec,) = sections(_result(_entry(0, x, np.ones_like(x))), example=0)
    assert sec.image.shape == (4, 4) and sec.image.min() == 0 and sec.image.max() == 1


def test_token_ids_get_one_bar_per_position_labelled_with_the_id():
    ids = np.array([[5, 9, 2, 7], [1, 1, 3, 0]])
    a = np.array([[0.1, -0.4, 0.0, 2.0], [0.3, 0.2, 0.1, 0.0]])
    (sec,) = sections(_result(_entry(0, ids, a, integer=True)), example=0)
    assert sec.kind == "bars" and sec.labels == ["5", "9", "2", "7"]
    np.testing.assert_allclose(sec.bars, a[0])
    assert sec.bar_text(3) == "position 3, token id 7: 2"
    (sec,) = sections(_result(_entry(0, ids, a, integer=True)), example=1)
    assert sec.labels == ["1", "1", "3", "0"]
    (whole,) = sections(_result(_entry(0, ids, a, integer=True)), example=None)
    assert whole.bar_text(0) == f"position 0: {np.abs(a[:, 0]).mean():.4g}"        # no one id per position


def test_float_sequence_gets_one_bar_per_position():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(3, 6, 4))                  # (batch, time, features)
    a = rng.normal(size=(3, 6, 4))
    (sec,) = sections(_result(_entry(0, x, a)), example=2)
    assert sec.kind == "bars" and sec.labels == [str(t) for t in range(6)]
    np.testing.assert_allclose(sec.bars, a[2].sum(axis=-1))
    assert sec.bar_text(4) == f"position 4: {a[2, 4].sum():.4g}"


def test_tabular_input_gets_one_bar_per_feature_and_a_square_map_when_it_is_one():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(4, 5))
    a = rng.normal(size=(4, 5))
    (sec,) = sections(_result(_entry(0, x, a)), example=3)
    assert sec.kind == "bars" and sec.square is None
    np.testing.assert_allclose(sec.bars, a[3])
    assert sec.bar_text(2) == f"feature 2: {a[3, 2]:.4g}"
    x64, a64 = rng.random((2, 64)), rng.normal(size=(2, 64))     # 8x8 digits flattened by the script
    (sec,) = sections(_result(_entry(0, x64, a64)), example=0)
    np.testing.assert_allclose(sec.square, a64[0].reshape(8, 8))
    assert sec.image.shape == (8, 8)


def test_long_sequences_are_pooled_without_losing_the_total():
    ids = np.zeros((1, 3000), dtype=np.int64)
    a = np.linspace(-1, 1, 3000)[None]
    (sec,) = sections(_result(_entry(0, ids, a, integer=True)), example=0)
    assert sec.bars.size <= MAX_BARS and sec.pooled == 6
    assert sec.bars.sum() == pytest.approx(a.sum(), abs=1e-9)
    assert "6 positions per bar" in sec.title and sec.bar_text(1).startswith("positions 6–11 (summed): ")


def test_saliency_is_one_sided_and_an_unattributed_input_is_a_note():
    ids = np.array([[1, 2]])
    mask = _entry(1, np.ones((1, 2), dtype=np.int64), None, integer=True)
    mask.note = "an integer input that no embedding lookup takes: it cannot be attributed"
    secs = sections(_result(_entry(0, ids, np.array([[0.5, 0.25]]), integer=True), mask, method="saliency"))
    assert [s.kind for s in secs] == ["bars", "note"] and not secs[0].signed
    assert "cannot be attributed" in secs[1].note


def test_header_reports_completeness_and_its_verdict():
    ok = _result(completeness=Completeness(0.995, 1.0, 0.005))
    bad = _result(completeness=Completeness(0.9, 1.0, 0.1))
    assert "0.50 % off, holds" in header(ok)[1]
    assert "10.00 % off, FAILS" in header(bad)[1]


def test_colour_scale():
    values = np.concatenate([np.linspace(-1, 1, 999), [1000.0]])     # one outlier does not set the scale
    assert color_limit(values) < 2
    rgb = diverging_rgb(np.array([-1.0, 0.0, 1.0]), 1.0)
    assert tuple(rgb[1]) == (255, 255, 255) and rgb[0][2] > rgb[0][0] and rgb[2][0] > rgb[2][2]
