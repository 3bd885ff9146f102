"""Structure-only tracing on the meta device: the same graph as a real trace, without values,
memory estimates that agree with what torch really saves, and the CLI's --meta / auto switch."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import gradviz
from gradviz.cli.main import main
from gradviz.core.script import meta as gmeta
from gradviz.core.script.load import load_script

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
STRUCTURE = ("kind", "op", "label", "shape", "dtype", "module", "module_type", "location", "code", "call",
             "custom", "reachable", "saved_bytes", "activation_bytes")


def saved_storage_bytes(script_path: Path) -> int:
    """The oracle: bytes of the distinct storages torch saves for backward (parameters left out),
    seen by a saved_tensors_hooks pack hook during a plain forward."""
    script = load_script(script_path)
    torch.manual_seed(0)
    model = script.new_model()
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}
    inputs, targets = script.get_batch(0)
    inputs = tuple(t.detach().clone().requires_grad_(True) if t.is_floating_point() else t for t in inputs)

    def pack(t):
        key = t.untyped_storage().data_ptr()
        if key not in weights:
            seen[key] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        script.compute_loss(model, inputs, targets)
    return sum(seen.values())


@pytest.mark.parametrize("sample", ["transformer", "cnn", "mlp_digits"])
def test_meta_graph_is_the_real_graph_without_values(sample):
    path = SAMPLES / f"{sample}.py"
    real = gradviz.trace(path)
    meta = gradviz.trace(path, meta=True)
    assert list(meta.nodes) == list(real.nodes)
    assert list(meta.edges) == list(real.edges)
    for nid, attrs in meta.nodes(data=True):
        for key in STRUCTURE:
            assert attrs.get(key) == real.nodes[nid].get(key), (nid, key)
        assert attrs["device"] in ("meta", "")
        assert all(attrs.get(k) is None for k in ("grad_norm", "grad_mean", "grad_hist"))
    assert meta.graph["meta"] is True and meta.graph["details"] == "none" and meta.graph["loss"] is None
    assert real.graph["meta"] is False
    # memory estimates agree between the meta trace and the real one, and with torch's own saving
    assert meta.graph["memory"] == real.graph["memory"]
    # torch's pack hooks do not see Python scalars wrapped as 0-d tensors (``x / 8.0`` saves 8.0):
    # gradviz counts their few bytes, the oracle cannot
    scalars = sum(1 for _, a in meta.nodes(data=True) for s in a["saved"] if s.get("shape") == [])
    assert 0 <= meta.graph["memory"]["activations"] - saved_storage_bytes(path) <= 8 * scalars
    for path_, info in meta.graph["modules"].items():
        assert info["activation_bytes"] == real.graph["modules"][path_]["activation_bytes"]
        assert info["param_bytes"] == real.graph["modules"][path_]["param_bytes"]


def test_memory_of_parameters_and_step():
    g = gradviz.trace(SAMPLES / "transformer.py", meta=True)
    model = load_script(SAMPLES / "transformer.py").new_model()
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    mem = g.graph["memory"]
    assert mem["params"] == params and mem["grads"] == params
    assert mem["step"] == mem["params"] + mem["grads"] + mem["buffers"] + mem["activations"]
    assert g.graph["modules"][""]["activation_bytes"] == mem["activations"]
    block = g.graph["modules"]["blocks.0"]
    assert block["param_bytes"] == sum(p.numel() * 4 for p in model.blocks[0].parameters())
    assert 0 < block["activation_bytes"] < mem["activations"]


def test_frozen_and_cut_parameters_on_meta():
    g = gradviz.trace(SAMPLES / "bugs" / "detach.py", meta=True)
    unreached = {a["param"] for _, a in g.nodes(data=True) if a["kind"] == "param" and not a["reachable"]}
    assert unreached == {"encoder.0.weight", "encoder.0.bias", "encoder.2.weight", "encoder.2.bias"}
    g = gradviz.trace(SAMPLES / "bugs" / "frozen.py", meta=True)
    frozen = {a["param"] for _, a in g.nodes(data=True) if a["kind"] == "param" and a["requires_grad"] is False}
    assert frozen == {"features.0.weight", "features.0.bias", "features.2.weight", "features.2.bias"}


def test_llama_70b_layer_on_meta(monkeypatch):
    """The 70B configuration's widths (two of its 80 layers, to keep the test short): each decoder
    layer has the real model's 855,654,400 parameters and nothing is allocated."""
    monkeypatch.setenv("GRADVIZ_LLAMA_LAYERS", "2")
    g = gradviz.trace(SAMPLES / "llama_70b.py", meta=True)
    mods = g.graph["modules"]
    assert mods["model.layers.0"]["type"] == "LlamaDecoderLayer"
    assert mods["model.layers.0"]["numel"] == mods["model.layers.1"]["numel"] == 855_654_400
    assert mods[""]["numel"] == 2 * 855_654_400 + 2 * 128_256 * 8192 + 8192
    assert g.graph["memory"]["params"] == 4 * mods[""]["numel"]
    logits = [a for _, a in g.nodes(data=True) if a["kind"] == "op" and a["shape"] == [1, 128, 128_256]]
    assert logits and all(a["device"] == "meta" for a in logits)
    assert g.graph["memory"]["activations"] > 0


def test_size_estimate_and_its_message(monkeypatch):
    script = load_script(SAMPLES / "transformer.py")
    est = gmeta.estimate(script)
    model = script.new_model()
    assert est.params == sum(p.numel() * p.element_size() for p in model.parameters())
    assert est.fits
    monkeypatch.setattr(gmeta, "available_bytes", lambda device=None: est.params)   # room for weights only
    small = gmeta.estimate(script)
    assert not small.fits and "meta device" in small.message("transformer.py")
    assert all(p.is_meta for p in small.model.parameters())


def test_cli_export_meta_and_the_automatic_switch(tmp_path, monkeypatch, capsys):
    out = tmp_path / "g.json"
    assert main(["export", str(SAMPLES / "transformer.py"), "--meta", "-o", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["graph"]["meta"] is True and "structure only" in capsys.readouterr().out
    from gradviz.core.script import fit_guard

    grown = iter([0])    # resident memory: 0 when the build starts, 1 TB at the first big tensor
    monkeypatch.setattr(fit_guard, "resident_bytes", lambda: next(grown, 2**40))
    monkeypatch.setattr(fit_guard, "available_bytes", lambda device=None: 2**30)
    monkeypatch.setattr(fit_guard, "CHECK_BYTES", 1)
    monkeypatch.setattr(gmeta, "available_bytes", lambda device=None: 1000)
    assert main(["export", str(SAMPLES / "transformer.py"), "-o", str(out)]) == 0
    captured = capsys.readouterr()
    assert "tracing its structure on the meta device" in captured.err
    assert json.loads(out.read_text())["graph"]["meta"] is True
    assert main(["export", str(SAMPLES / "transformer.py"), "--no-meta", "-o", str(out)]) == 0
    assert json.loads(out.read_text())["graph"]["meta"] is False


def test_the_memory_guard_stops_a_build_that_outgrows_the_machine(monkeypatch):
    from gradviz.core.script import fit_guard
    from gradviz.core.runtime.interrupts import Stopped

    script = load_script(SAMPLES / "transformer.py")
    torch.manual_seed(0)
    want = script.new_model()
    got = fit_guard.build_within_memory(script, seed=0)          # fits: the very model a trace builds
    assert all(torch.equal(a, b) for a, b in zip(want.parameters(), got.parameters()))
    rss = fit_guard.resident_bytes()
    readings = iter([rss, rss + 2**20, rss + 2**31])   # the build's resident memory grows past the budget
    monkeypatch.setattr(fit_guard, "resident_bytes", lambda: next(readings, rss + 2**32))
    monkeypatch.setattr(fit_guard, "available_bytes", lambda device=None: 2**30)    # budget: 0.4 GiB
    monkeypatch.setattr(fit_guard, "CHECK_BYTES", 1)
    with pytest.raises(fit_guard.TooBig) as info:
        fit_guard.build_within_memory(script)
    assert isinstance(info.value, Stopped) and rss > 0


def test_a_guarded_model_traces_like_a_fresh_one():
    from gradviz.core.script import fit_guard

    path = SAMPLES / "transformer.py"
    script = load_script(path)
    model = fit_guard.build_within_memory(script, seed=0)
    a, b = gradviz.trace(script, model), gradviz.trace(path)
    assert a.graph["loss"] == b.graph["loss"]
    assert [x["grad_norm"] for _, x in a.nodes(data=True)] == [x["grad_norm"] for _, x in b.nodes(data=True)]


def test_cli_check_meta_runs_the_structural_checks(capsys):
    assert main(["check", str(SAMPLES / "bugs" / "detach.py"), "--meta", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    codes = [f["code"] for f in report["findings"]]
    assert codes == ["unreachable", "structure-only"]
    assert "numerical gradient check" in report["findings"][1]["message"]
    assert main(["check", str(SAMPLES / "mlp_digits.py"), "--meta", "--json"]) == 0
    assert [f["code"] for f in json.loads(capsys.readouterr().out)["findings"]] == ["structure-only"]


def test_check_meta_runs_the_registrys_structural_checks():
    """check --meta runs exactly the registry's checks that need no values (backward included: an
    in-place change is found on meta too) and names every other one as not run."""
    from gradviz.core.diagnosis.registry import CHECKS
    from gradviz.core.diagnosis.meta_check import structural_check

    assert [f.code for f in structural_check(SAMPLES / "bugs" / "inplace.py").findings] == \
        ["inplace", "structure-only"]
    report = structural_check(SAMPLES / "bugs" / "detach.py")
    assert [f.code for f in report.findings] == ["unreachable", "structure-only"]
    note = report.findings[-1]
    valued = [c.name for c in CHECKS if c.values and c.name != "training steps"]   # steps: not asked for
    assert note.data["skipped"] == report.skipped == valued
    assert note.data["structural"] == [c.name for c in CHECKS if not c.values]
    assert all(name in note.message for name in valued)
    frozen = structural_check(SAMPLES / "bugs" / "frozen.py")
    assert [f.code for f in frozen.findings] == ["frozen", "structure-only"]


def test_check_meta_reaches_what_reentrant_checkpointing_recomputes(monkeypatch):
    monkeypatch.setenv("GRADVIZ_CORPUS", "checkpoint-reentrant")
    from gradviz.core.diagnosis.meta_check import structural_check

    report = structural_check(ROOT / "tests" / "corpus" / "zoo.py")
    assert [f.code for f in report.findings] == ["structure-only"] and report.nodes > 5


def test_meta_says_when_the_script_reads_values(tmp_path):
    """A line that reads values (.item()) cannot run on meta: the message says so and what to do."""
    from gradviz.core.diagnosis.meta_check import structural_check
    from gradviz.core.runtime.errors import ScriptError

    report = structural_check(SAMPLES / "bugs" / "item_loss.py")
    assert [f.code for f in report.findings] == ["script-error"]
    assert gmeta.VALUES_HINT in report.findings[0].message
    with pytest.raises(ScriptError) as info:
        gradviz.trace(SAMPLES / "bugs" / "item_loss.py", meta=True)
    assert gmeta.VALUES_HINT in str(info.value) and "item_loss.py:" in str(info.value)


def test_meta_trace_allocates_no_weights():
    """A model with 4 GB of weights traced on meta grows the peak far less than that. Measured in a
    fresh process against a warm-up meta trace of a small model in the same process, which pays for
    what the first trace loads whatever the model (torch's meta kernels, the libraries of a CUDA build of
    torch: 0.5-1.1 GB depending on the torch), so the bound is on what the big model itself costs."""
    code = (
        "import resource, sys, types, torch, gradviz\n"
        "from pathlib import Path\n"
        "from torch import nn\n"
        "from gradviz.core.script.load import ModelScript\n"
        "def script(width, depth):\n"
        "    m = types.ModuleType('big')\n"
        "    m.model = lambda: nn.Sequential(*[nn.Linear(width, width) for _ in range(depth)])\n"
        "    m.batch = lambda step: (torch.randn(4, width), torch.randn(4, width))\n"
        "    m.loss_fn = lambda out, y: ((out - y) ** 2).mean()\n"
        "    return ModelScript(Path('big.py'), m)\n"
        "peak = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024\n"
        "gradviz.trace(script(64, 2), meta=True)\n"
        "base = peak()\n"
        "g = gradviz.trace(script(8192, 16), meta=True)\n"
        "print(peak() - base, base, g.graph['memory']['params'])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    grown_mb, base_mb, params = int(out[0]), int(out[1]), int(out[2])
    assert params == 16 * (8192 * 8192 + 8192) * 4
    assert grown_mb < params / 2**20 / 16, f"grew {grown_mb} MB over a warm meta trace ({base_mb} MB)"