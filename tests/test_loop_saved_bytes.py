"""``saved_bytes.SavedBytes``: the bytes autograd saves in a window and still holds, checked against torch's
own record of what a node saved (its ``_saved_*`` attributes); and that the window changes nothing the user's
loop sees: the same gradients, torch's in-place error, graphs freed, a user's own saved-tensor hooks kept."""
from __future__ import annotations

import gc
import weakref

import pytest
import torch
from torch import nn

from gradviz.core.loop.saved_bytes import SavedBytes, hooks_installed, size_text


def _saved_by_graph(root: torch.Tensor, params: set[int]) -> int:
    """Oracle: walk the graph, read each node's saved tensors as torch exposes them, distinct storages once
    (a view counts its own bytes; the largest view of a storage), the parameters' storages left out."""
    sizes: dict[int, int] = {}
    seen, stack = {}, [root.grad_fn]      # id -> node: the node kept alive, so its id is not reused
    while stack:                           # (torch 2.6 makes a new Python object per next_functions read)
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen[id(node)] = node
        for name in dir(node):
            if name.startswith("_saved_") and not name.startswith("_saved_raw"):
                value = getattr(node, name)
                for t in (value if isinstance(value, (tuple, list)) else (value,)):
                    key = t.untyped_storage().data_ptr() if isinstance(t, torch.Tensor) else None
                    if key is not None and key not in params:
                        sizes[key] = max(sizes.get(key, 0), t.numel() * t.element_size())
        stack.extend(n for n, _ in node.next_functions)
    return sum(sizes.values())


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 32), nn.Sigmoid(), nn.Linear(32, 1))


def test_live_bytes_match_what_the_graph_saved_and_backward_frees_them():
    model, data = _model(), torch.randn(64, 8)
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved = SavedBytes()
    assert saved.open(1)
    loss = model(data[8:24]).pow(2).mean()          # a view of the data set: its 16 rows, not all 64
    saved.close()
    expected = _saved_by_graph(loss, params)
    assert expected > 16 * 8 * 4 and saved.live() == expected and saved.live([1]) == expected
    assert saved.live([2]) == 0
    loss.backward()
    assert saved.live() == 0                          # backward freed the saved tensors


def test_same_gradients_and_torchs_inplace_error_under_the_window():
    model, x = _model(), torch.randn(16, 8)
    model(x).pow(2).mean().backward()
    plain = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    saved = SavedBytes()
    saved.open(1)
    model(x).pow(2).mean().backward()
    saved.close()
    assert all(torch.equal(a, p.grad) for a, p in zip(plain, model.parameters()))
    # sigmoid saves its output; writing it in place must still raise (torch's check is off under hooks)
    z = torch.randn(5, requires_grad=True)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y = torch.sigmoid(z)
        y.mul_(2)
        y.sum().backward()
    saved.open(2)
    try:
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            y = torch.sigmoid(z)
            y.mul_(2)
            y.sum().backward()
    finally:
        saved.close()


def test_a_graph_dropped_without_backward_is_freed():
    """A saved output held as itself would make a cycle through C++ the collector cannot free."""
    saved = SavedBytes()
    z = torch.randn(100, requires_grad=True)
    saved.open(1)
    y = torch.exp(z)                                  # exp saves its output
    metric = torch.softmax(y, 0).max()
    saved.close()
    ref = weakref.ref(y)
    assert saved.live() >= 2 * 100 * 4
    del y, metric
    gc.collect()
    assert ref() is None and saved.live() == 0


def test_a_users_own_hooks_are_left_in_charge():
    calls = []

    def pack(t):
        calls.append(t.shape)
        return t
    saved = SavedBytes()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        assert not saved.open(1)                      # theirs stay on top: nothing measured
        torch.exp(torch.randn(3, requires_grad=True))
    assert calls and saved.skipped == 1 and not saved.is_open
    # theirs pushed and popped inside our window: ours still closes cleanly
    assert saved.open(2)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        torch.exp(torch.randn(4, requires_grad=True))
    saved.close()
    assert not saved.is_open and not hooks_installed()


def test_size_text():
    assert size_text(512) == "512 B" and size_text(3 * 1024) == "3.0 KiB" and size_text(5.5 * 2**20) == "5.5 MiB"


def test_a_dropped_doctor_leaves_no_hooks_installed():
    """A watch dropped without close() mid-window: its doctor goes, and its saved-tensor pair with it."""
    from gradviz.core.loop.doctor import LoopDoctor
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    doctor = LoopDoctor(every=10)
    opt.zero_grad()
    model(torch.randn(4, 8)).sum().backward()
    opt.step()                                        # step 0 done: step 1's window opens
    assert hooks_installed()
    del doctor
    gc.collect()
    assert not hooks_installed()
