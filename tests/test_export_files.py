"""Images people can open (PNG capped at 100 MP, or tiles), vector SVG/PDF, and exports
that leave nothing half-written behind: not on an error, not on Ctrl-C, and not after a
kill (the next export sweeps what a killed one left)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from gradviz.core.runtime.atomic import AtomicFiles, sweep_stale_parts
from gradviz.core.trace.tracer import trace
from test_app_support import MLP


@pytest.fixture(scope="module")
def scene(qapp):
    from gradviz.render.export.image_export import scene_for

    return scene_for(trace(MLP))


def options(**kw):
    from gradviz.render.export.formats import ImageOptions
    return ImageOptions(**kw)


def test_png_scale_keeps_a_400_megapixel_graph_under_100(qapp):
    from gradviz.render.export.image_export import MAX_PNG_PIXELS, MAX_PNG_SIDE, Page, png_scale

    # the 500-node T5 of the issue: 14,095 x 28,378 pixels at scale 2
    page = Page(14095 / 2, 28378 / 2, None, 0, None, None, [], False, False)
    s = png_scale(page, 2.0)
    w, h = page.width * s, page.height * s
    assert w * h <= MAX_PNG_PIXELS and w * h > 0.99 * MAX_PNG_PIXELS
    assert max(w, h) <= MAX_PNG_SIDE
    tall = Page(800, 120_000, None, 0, None, None, [], False, False)   # a 2,000-step unrolled RNN
    assert tall.height * png_scale(tall, 2.0) <= MAX_PNG_SIDE
    small = Page(800, 600, None, 0, None, None, [], False, False)
    assert png_scale(small, 2.0) == 2.0


def test_png_over_the_cap_is_scaled_down_and_says_so(scene, tmp_path):
    from PySide6.QtGui import QImage

    from gradviz.render.export.formats import export_scene

    result = export_scene(scene, tmp_path / "g.png", options(scale=2.0, max_pixels=150_000))
    w, h = result.pixels
    assert w * h <= 150_000 and result.scale < 2.0
    image = QImage(str(result.path))
    assert (image.width(), image.height()) == (w, h)
    assert "scaled to" in result.note and "0.15 MP" in result.note and "tiles" in result.note
    assert sorted(os.listdir(tmp_path)) == ["g.png"]


def test_tiles_keep_full_resolution(scene, tmp_path):
    from PySide6.QtGui import QImage

    from gradviz.render.export.formats import export_scene
    from gradviz.render.export.image_export import page_image, make_page, tile_path

    result = export_scene(scene, tmp_path / "g.png", options(scale=2.0, max_pixels=150_000, tiles=True,
                                                              tile_side=400))
    tiles = [p for p in result.files if p != result.path]
    assert len(tiles) > 4 and "tiles" in result.note
    assert sorted(os.listdir(tmp_path)) == sorted(p.name for p in result.files)
    page = make_page(scene)
    full = page_image(scene, page, 2.0)
    rows = 1 + max(int(p.stem.split(".r")[1].split("c")[0]) for p in tiles)
    cols = 1 + max(int(p.stem.split("c")[-1]) for p in tiles)
    widths = [QImage(str(tile_path(result.path, 0, c))).width() for c in range(cols)]
    heights = [QImage(str(tile_path(result.path, r, 0))).height() for r in range(rows)]
    assert (sum(widths), sum(heights)) == (full.width(), full.height())
    assert max(widths + heights) <= 400
    # a tile is the same pixels as that part of the full-scale picture
    tile = QImage(str(tile_path(result.path, 1, 0))).convertToFormat(full.format())
    crop = full.copy(0, 400, tile.width(), tile.height())
    same = sum(tile.pixel(x, y) == crop.pixel(x, y) for y in range(0, tile.height(), 3) for x in range(0, tile.width(), 3))
    assert same / ((tile.height() // 3 + 1) * (tile.width() // 3 + 1)) > 0.98


def test_svg_and_pdf_stay_vector(scene, tmp_path):
    from gradviz.render.export.formats import export_scene

    svg = export_scene(scene, tmp_path / "g.svg", options(max_pixels=1000)).path.read_text()
    assert "<image" not in svg and "fc1.weight" in svg and "mlp_digits.py" in svg
    pdf = export_scene(scene, tmp_path / "g.pdf", options(max_pixels=1000)).path.read_bytes()
    assert pdf[:5] == b"%PDF-" and b"/Subtype /Image" not in pdf


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, MemoryError])
def test_an_interrupted_export_leaves_nothing(scene, tmp_path, monkeypatch, interrupt):
    from gradviz.render.export import image_export
    from gradviz.render.export.formats import export_scene

    old = tmp_path / "g.png"
    old.write_bytes(b"the previous export")
    real = image_export.paint_page
    calls = []

    def paint(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:         # the overview and a tile are written, then Ctrl-C
            raise interrupt()
        return real(*args, **kwargs)

    monkeypatch.setattr(image_export, "paint_page", paint)
    with pytest.raises(interrupt):
        export_scene(scene, old, options(scale=2.0, max_pixels=150_000, tiles=True, tile_side=400))
    assert os.listdir(tmp_path) == ["g.png"] and old.read_bytes() == b"the previous export"
    for ext in (".svg", ".pdf"):
        calls.clear()
        calls.extend([1, 1])
        with pytest.raises(interrupt):
            export_scene(scene, tmp_path / f"g{ext}")
        assert os.listdir(tmp_path) == ["g.png"]


def test_a_killed_export_is_swept_by_the_next_one(tmp_path):
    from gradviz.render.export.formats import export_graph

    code = ("import os, signal, sys; from gradviz.core.runtime.atomic import AtomicFiles; "
            "f = AtomicFiles(); tmp = f.temp_for(sys.argv[1]); open(tmp, 'wb').write(b'half a png'); "
            "os.kill(os.getpid(), signal.SIGKILL)")
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "g.png")])
    assert proc.returncode == -signal.SIGKILL
    left = [n for n in os.listdir(tmp_path) if n.startswith(".g.png.")]
    assert len(left) == 1 and left[0].endswith(".part")
    mine = AtomicFiles().temp_for(tmp_path / "mine.json")   # a live writer's file (this process)
    export_graph(trace(MLP), tmp_path / "g.json")
    assert sorted(os.listdir(tmp_path)) == sorted(["g.json", os.path.basename(mine)])
    assert sweep_stale_parts(tmp_path) == []
