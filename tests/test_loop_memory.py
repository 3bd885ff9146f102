"""``graph-kept-alive``'s bytes and ``memory-growing`` on CPU (the bytes saved for backward on the checked steps
and still held), through ``gradviz run`` on reproduced loops (tests/loop_cases/) and on healthy loops that keep
tensors for good reasons: neither finding there, and a user's own saved-tensor hooks stay in charge."""
from __future__ import annotations

import runpy
from pathlib import Path

import torch

from gradviz.cli.main import main
from gradviz.core.record.loading import summarize
from gradviz.core.record.reader import open_ranks

CASES = Path(__file__).parent / "loop_cases"
HEAD = ("import torch\nfrom torch import nn\ntorch.manual_seed(0)\n"
        "model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 4))\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.01)\n")


def _findings(tmp_path, monkeypatch, script: Path, fixed: bool = False) -> tuple[int, dict]:
    monkeypatch.setenv("FIXED", "1" if fixed else "0")
    out = tmp_path / f"{script.stem}{int(fixed)}.gvrun"
    status = main(["run", "-o", str(out), str(script)])
    return status, {f["code"]: f for f in summarize(open_ranks(out))["findings"]}


def test_metric_tensor_kept_says_the_bytes_and_that_they_grow(tmp_path, monkeypatch):
    status, found = _findings(tmp_path, monkeypatch, CASES / "metric_tensor_kept.py")
    assert status == 0
    kept, grow = found["graph-kept-alive"], found["memory-growing"]
    assert kept["data"]["saved_bytes"] > 0 and "of tensors saved for backward" in kept["message"]
    data = grow["data"]
    assert data["measure"] == "saved-tensors" and data["last"] > 2 * data["first"] > 0
    assert (data["first_step"], data["last_step"]) == (2, 41)          # the checked steps 2, 11, 21, 31, 41
    # each checked step's kept graph adds the same bytes: (last - first) / (6 - 2 graphs) per graph
    per_graph = (data["last"] - data["first"]) / 4
    assert per_graph > 0 and abs(data["first"] - 2 * per_graph) <= data["first"] / 2
    _, fixed = _findings(tmp_path, monkeypatch, CASES / "metric_tensor_kept.py", fixed=True)
    assert not {"graph-kept-alive", "memory-growing"} & set(fixed), fixed


def test_running_loss_graphs_hold_no_saved_tensors(tmp_path, monkeypatch):
    """total_loss += loss: every graph stays, but its backward freed what it saved; the finding says so."""
    _, found = _findings(tmp_path, monkeypatch, CASES / "running_loss_graph.py")
    kept = found["graph-kept-alive"]
    assert kept["data"]["saved_bytes"] == 0 and "holding no saved tensors" in kept["message"]
    assert "memory-growing" not in found


def test_healthy_loops_that_keep_tensors_get_no_memory_finding(tmp_path, monkeypatch):
    """Pre-made batches walked one by one (their storages outlive every step), the last step's graph kept by
    retain_graph=True, a metric computed with gradients and dropped: no graph grows."""
    script = tmp_path / "healthy_keeps.py"
    script.write_text(HEAD + (
        "batches = [(torch.randn(16, 8), torch.randint(0, 4, (16,))) for _ in range(64)]\n"
        "last = None\n"
        "for step in range(60):\n"
        "    x, y = batches[step]\n"
        "    opt.zero_grad()\n"
        "    out = model(x)\n"
        "    loss = nn.functional.cross_entropy(out, y)\n"
        "    loss.backward(retain_graph=True)\n"
        "    opt.step()\n"
        "    confidence = out.softmax(1).max(1).values.mean()\n"
        "    last = loss\n"))
    status, found = _findings(tmp_path, monkeypatch, script)
    assert status == 0 and not {"memory-growing", "graph-kept-alive"} & set(found), found


def test_a_users_saved_tensor_hooks_keep_working(tmp_path, monkeypatch):
    """torch.autograd.graph.save_on_cpu-like hooks around the whole loop: the doctor does not push its own
    over them (which would switch theirs off on the checked steps); every step's tensors still reach theirs."""
    marker = tmp_path / "packed.txt"
    script = tmp_path / "own_hooks.py"
    script.write_text(HEAD + (
        "packed = []\n"
        "def pack(t):\n"
        "    packed.append(1)\n"
        "    return t\n"
        "with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):\n"
        "    for step in range(30):\n"
        "        before = len(packed)\n"
        "        opt.zero_grad()\n"
        "        model(torch.randn(16, 8)).pow(2).mean().backward()\n"
        "        opt.step()\n"
        "        assert len(packed) > before, step\n"
        f"open({str(marker)!r}, 'w').write(str(len(packed)))\n"))
    status, found = _findings(tmp_path, monkeypatch, script)
    assert status == 0 and int(marker.read_text()) >= 30 * 3
    assert not {"memory-growing", "graph-kept-alive", "loop-exception"} & set(found), found


def test_kept_graphs_under_a_users_hooks_claim_no_bytes(tmp_path, monkeypatch):
    """running_loss's bug inside the user's own saved-tensor hooks: the graphs are found, their bytes not
    counted (gradviz did not measure), and the message does not say they hold none."""
    script = tmp_path / "kept_own_hooks.py"
    script.write_text(HEAD + (
        "total = 0\n"
        "with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):\n"
        "    for step in range(30):\n"
        "        opt.zero_grad()\n"
        "        loss = model(torch.randn(16, 8)).pow(2).mean()\n"
        "        loss.backward()\n"
        "        opt.step()\n"
        "        total += loss\n"))
    _, found = _findings(tmp_path, monkeypatch, script)
    kept = found["graph-kept-alive"]
    assert kept["data"]["saved_bytes"] is None and "holding" not in kept["message"]


def test_activation_checkpointing_under_the_count_is_healthy_and_exact(tmp_path, monkeypatch):
    """torch.utils.checkpoint pushes its own saved-tensor hooks inside the forward (above the doctor's) and
    recomputes in backward: the run is clean and the gradients are the ones a plain run gets."""
    script = tmp_path / "checkpointed.py"
    grads = tmp_path / "grads.pt"
    script.write_text(HEAD + (
        "from torch.utils.checkpoint import checkpoint\n"
        "g = torch.Generator().manual_seed(1)\n"
        "data = [torch.randn(16, 8, generator=g) for _ in range(30)]\n"
        "for x in data:\n"
        "    opt.zero_grad()\n"
        "    checkpoint(model, x, use_reentrant=False).pow(2).mean().backward()\n"
        "    opt.step()\n"
        f"torch.save([p.detach() for p in model.parameters()], {str(grads)!r})\n"))
    status, found = _findings(tmp_path, monkeypatch, script)
    assert status == 0 and not found, found
    recorded = torch.load(grads)
    unwatched = tmp_path / "unwatched.py"                  # the same script, run without gradviz
    unwatched.write_text(script.read_text().replace(str(grads), str(tmp_path / "plain.pt")))
    runpy.run_path(str(unwatched), run_name="__main__")
    plain = torch.load(tmp_path / "plain.pt")
    assert all(torch.equal(a, b) for a, b in zip(recorded, plain))
