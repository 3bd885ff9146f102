"""The one number formatter and the one shape formatter (gradviz.core.runtime.formatting), used by
the engine's messages, the graph boxes, the panels, the legend and the CLI. No Qt."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from gradviz.core.runtime.formatting import duration, json_safe, number, shape_text


@pytest.mark.parametrize("value, text", [
    (None, "—"), (True, "True"), (3, "3"), (np.int64(7), "7"), (2.357142, "2.357"), (0.012345, "0.01235"),
    (123456.0, "1.235e+05"), (float("nan"), "NaN"), (float("inf"), "Inf"), (-float("inf"), "-Inf"),
    (np.float32(0.5), "0.5"), ("text", "text"),
])
def test_number_default(value, text):
    assert number(value) == text


@pytest.mark.parametrize("value, text", [
    (0.012345, "0.01235"), (0.0003616, "3.62e-4"), (3.324, "3.324"), (36864.0, "3.69e4"), (-123456.0, "-1.23e5"),
    (2.5e-7, "2.5e-7"), (0.0, "0"), (1e-5, "1e-5"), (10000.0, "1e4"), (0.01, "0.01"), (100.0, "100"),
])
def test_number_compact_fits_eight_characters_and_says_the_value(value, text):
    assert number(value, compact=True) == text
    assert len(text) <= 8
    assert abs(float(text) - value) <= 0.005 * abs(value)


def test_number_grouped_and_none_text():
    assert number(11617, grouped=True) == "11,617"
    assert number(12.0, grouped=True) == "12"
    assert number(float("nan"), grouped=True) == "NaN"
    assert number(None, none="-") == "-" and number(None, none="none") == "none"


def test_shape_styles():
    assert shape_text([64, 128]) == "64×128"
    assert shape_text((64, 128), style="tuple") == "(64, 128)"
    assert shape_text([]) == "scalar" == shape_text([], style="tuple")
    assert shape_text(None) == "" and shape_text(None, style="tuple", none="—") == "—"
    assert shape_text("?", style="tuple") == "?" and shape_text("?") == ""


def test_duration_and_json_safe():
    assert duration(0.042) == "42 ms" and duration(3.5) == "3.50 s" and duration(None) == "—"
    assert json_safe({"a": (1, float("nan")), 2: np.float32(1.5)}) == {"a": [1, "nan"], "2": 1.5}


def test_every_place_uses_the_one_formatter():
    """Panels, messages and the legend agree with ``number`` (no private copies left)."""
    from gradviz.app.formatting import count, num, shape, short_num
    from gradviz.core.diagnosis.findings import fmt_num

    for x in (0.0003616, 2.357, 36864.0, float("nan"), None):
        assert num(x) == number(x)
        assert short_num(x) == number(x, compact=True)
    assert fmt_num(3.6e-4) == number(3.6e-4, compact=True) and fmt_num(None) == "none"
    assert count(11617) == "11,617" and shape([2, 3]) == "(2, 3)"
    from gradviz.render.export.legend import tick_text
    assert [tick_text(v) for v in (1e-5, 0.01, 1.0, 1e4)] == ["1e-5", "0.01", "1", "1e4"]


def test_formatting_and_the_export_table_load_no_qt():
    code = ("import sys, gradviz.core.runtime.formatting, gradviz.core.output.export, gradviz.render.export.formats; "
            "assert not [m for m in sys.modules if m.startswith('PySide6')], 'Qt loaded'")
    subprocess.run([sys.executable, "-c", code], check=True)
