"""Cut branches: the computations between a cut-off parameter and the call that cut it."""
from __future__ import annotations

import textwrap

import networkx as nx
import pytest

from gradviz.core.trace.cut_branches import add_cut_branches, cut_off_params
from gradviz.core.trace.tracer import trace
from tests.conftest import ROOT, SAMPLES, line_of

BUGS = SAMPLES / "bugs"
VIEWS = ROOT / "tests" / "scripts" / "views"


def _branches(path):
    g = trace(path)
    return g, {b["node"]: b for b in g.graph["cut_branches"]}


def _labels(g, nodes):
    return sorted(g.nodes[n]["label"] for n in nodes if g.nodes[n]["kind"] == "op")


def test_detach_sample_draws_the_encoder_up_to_the_detach():
    path = BUGS / "detach.py"
    g, cuts = _branches(path)
    (cut,) = cuts.values()
    node = g.nodes[cut["node"]]
    assert node["label"] == ".detach()" and node["cut_point"] and node["call"] == "detach"
    assert node["location"] == f"{path}:{line_of(path, '<-- the bug')}" and "features.detach()" in node["code"]
    assert node["note"] == f"detach.py:{line_of(path, '<-- the bug')}"
    assert cut["params"] == sorted(f"encoder.{i}.{w}" for i in (0, 2) for w in ("weight", "bias"))
    assert _labels(g, cut["nodes"]) == ["addmm", "addmm", "relu", "relu"]
    assert "input:0" in cut["nodes"] and g.nodes["input:0"]["shape"] == [32, 20]
    # where the main graph takes the detached value: the head's linear
    assert g.nodes[cut["consumer"]]["module"] == "head" and g.nodes[cut["consumer"]]["reachable"] is True
    # the branch ends at the cut: the last relu feeds it, nothing of the branch reaches the loss
    (last,) = g.predecessors(cut["node"])
    assert g.nodes[last]["label"] == "relu" and g.nodes[last]["module"] == "encoder.3"
    without_cut = g.subgraph([n for n in g if n != cut["node"]])
    assert not any(nx.has_path(without_cut, n, "loss") for n in cut["nodes"])
    assert nx.has_path(g, cut["node"], "loss")     # through the dashed edge to the consumer
    for n in cut["nodes"] + [cut["node"]]:
        attrs = g.nodes[n]
        assert attrs["reachable"] is False and attrs["grad_norm"] is None
    for u, v, attrs in g.edges(data=True):
        if u in cut["nodes"] or u == cut["node"]:
            assert attrs["dashed"] is True
        elif not g.nodes[u].get("cut_branch"):
            assert "dashed" not in attrs
    # the shapes flow on: the branch's linear layers have their outputs' shapes
    assert sorted(g.nodes[n]["shape"] for n in cut["nodes"] if g.nodes[n]["label"] == "addmm") == [[32, 16], [32, 32]]


def test_no_grad_block_is_the_cut():
    path = BUGS / "no_grad.py"
    g, cuts = _branches(path)
    (cut,) = cuts.values()
    assert g.nodes[cut["node"]]["label"] == "torch.no_grad()"
    assert g.nodes[cut["node"]]["location"].endswith(f":{line_of(path, '<-- the bug')}")
    assert cut["params"] == ["embed.0.bias", "embed.0.weight"]
    ops = [n for n in cut["nodes"] if g.nodes[n]["kind"] == "op"]
    assert _labels(g, ops) == ["gelu", "linear"] and all(g.nodes[n]["no_grad"] for n in ops)
    assert g.nodes[cut["consumer"]]["module"] == "body.0"


def test_numpy_round_trip_is_labelled_as_written():
    path = BUGS / "numpy_roundtrip.py"
    g, cuts = _branches(path)
    (cut,) = cuts.values()
    assert g.nodes[cut["node"]]["label"] == ".detach().cpu().numpy()"
    assert cut["params"] == ["backbone.0.bias", "backbone.0.weight"]


def test_dot_data_and_item():
    path = VIEWS / "cut_data.py"
    g, cuts = _branches(path)
    (cut,) = cuts.values()
    assert g.nodes[cut["node"]]["label"] == ".data" and cut["params"] == ["scale"]
    assert g.nodes[cut["node"]]["location"].endswith(f":{line_of(path, 'LINE_DATA')}")
    assert list(g.predecessors(cut["node"])) == ["param:scale"]
    assert g.nodes[cut["consumer"]]["label"] == "mul"       # x * s in the main graph
    path = VIEWS / "cut_item.py"
    g, cuts = _branches(path)
    (cut,) = cuts.values()
    assert g.nodes[cut["node"]]["label"] == ".item()" and cut["consumer"] is None
    assert _labels(g, cut["nodes"]) == ["exp"] and cut["params"] == ["log_t"]


def test_argmax_cut_feeds_the_embedding():
    g, cuts = _branches(BUGS / "argmax.py")
    (cut,) = cuts.values()
    assert g.nodes[cut["node"]]["label"] == "argmax"
    assert g.nodes[cut["consumer"]]["label"] == "embedding"


def test_in_place_detach():
    # h.detach_() detaches the very tensor the head then uses: the branch ends at the detach_,
    # and the head's linear is the main graph's, not part of the branch
    path = VIEWS / "cut_inplace_detach.py"
    g, cuts = _branches(path)
    (cut,) = cuts.values()
    assert g.nodes[cut["node"]]["label"] == ".detach_()"
    assert g.nodes[cut["node"]]["location"].endswith(f":{line_of(path, 'LINE_CUT')}")
    assert cut["params"] == ["encoder.0.bias", "encoder.0.weight"]
    assert _labels(g, cut["nodes"]) == ["addmm", "relu"]
    assert g.nodes[cut["consumer"]]["module"] == "head" and g.nodes[cut["consumer"]]["reachable"] is True


def test_cut_values_written_in_place_into_another_tensor():
    # buf[:, :8] = h.detach() and memory.copy_(...) under no_grad: the head reads buf and memory,
    # so the dashed edge goes from each cut to the head's linear
    path = VIEWS / "cut_inplace_write.py"
    g, cuts = _branches(path)
    by_label = {g.nodes[n]["label"]: b for n, b in cuts.items()}
    assert set(by_label) == {".detach()", "torch.no_grad()"}
    detach, no_grad = by_label[".detach()"], by_label["torch.no_grad()"]
    assert g.nodes[detach["node"]]["location"].endswith(f":{line_of(path, 'LINE_SETITEM')}")
    assert g.nodes[no_grad["node"]]["location"].endswith(f":{line_of(path, 'LINE_NO_GRAD')}")
    assert detach["params"] == ["encoder.0.bias", "encoder.0.weight"]
    assert no_grad["params"] == ["summary.bias", "summary.weight"]
    assert _labels(g, detach["nodes"]) == ["addmm", "relu", "slice"]
    assert _labels(g, no_grad["nodes"]) == ["copy_", "linear"]
    for cut in (detach, no_grad):
        assert g.nodes[cut["consumer"]]["module"] == "head"


def test_two_cuts_in_one_forward():
    path = VIEWS / "cut_two.py"
    g, cuts = _branches(path)
    by_label = {g.nodes[n]["label"]: b for n, b in cuts.items()}
    assert set(by_label) == {".detach()", "torch.no_grad()"}
    assert by_label[".detach()"]["params"] == ["encoder.0.bias", "encoder.0.weight"]
    assert by_label["torch.no_grad()"]["params"] == ["adapter.bias", "adapter.weight"]
    assert _labels(g, by_label["torch.no_grad()"]["nodes"]) == ["linear", "mul"]
    # both results meet in `e + a` (no gradient) and go on into the head: the consumer of each
    assert by_label[".detach()"]["consumer"] == by_label["torch.no_grad()"]["consumer"]
    assert g.nodes[by_label[".detach()"]["consumer"]]["module"] == "head"
    assert g.nodes["input:0"]["reachable"] is False     # only the cut branches used the input


def test_output_never_used_ends_in_result_unused():
    g, cuts = _branches(VIEWS / "cut_unused_output.py")
    (cut,) = cuts.values()
    assert g.nodes[cut["node"]]["label"] == "result unused" and cut["consumer"] is None
    assert cut["params"] == ["aux.0.bias", "aux.0.weight"]
    # the branch starts from the main graph's tanh, which does reach the loss
    (root,) = [u for u in g.predecessors("cut-op:0") if not g.nodes[u].get("cut_branch") and
               g.nodes[u]["kind"] == "op"]
    assert g.nodes[root]["label"] == "tanh" and g.nodes[root]["reachable"] is True


@pytest.mark.parametrize("name", ["frozen.py", "unused_submodule.py"])
def test_nothing_to_draw(name):
    # frozen parameters are not cut off; a module never called has no computation to draw
    g = trace(BUGS / name)
    assert g.graph["cut_branches"] == []
    assert not any(a.get("cut_branch") for a in g.nodes.values())


def test_healthy_model_runs_no_extra_forward(tmp_path, monkeypatch):
    import gradviz.core.trace.cut_branches as cb

    calls = []
    monkeypatch.setattr(cb, "_run_tape", lambda *a, **k: calls.append(a))
    g = trace(SAMPLES / "mlp_digits.py")
    assert cut_off_params(g) == [] and add_cut_branches(g, SAMPLES / "mlp_digits.py") == [] and not calls


def test_cut_location_agrees_with_the_health_check():
    from gradviz.core.diagnosis.checklist import check

    for path in (BUGS / "detach.py", BUGS / "no_grad.py", BUGS / "numpy_roundtrip.py", BUGS / "argmax.py",
                 VIEWS / "cut_inplace_detach.py", VIEWS / "cut_data.py", VIEWS / "cut_item.py"):
        g, cuts = _branches(path)
        (cut,) = cuts.values()
        finding = next(f for f in check(str(path), gradcheck=False) if f.code == "unreachable")
        assert finding.location == g.nodes[cut["node"]]["location"], path.name
        assert sorted(finding.params) == cut["params"], path.name


def test_transformers_model_cut_by_detach(tmp_path):
    path = tmp_path / "frozen_by_detach.py"
    path.write_text(textwrap.dedent("""
        import torch
        from torch import nn
        from transformers import GPT2Config, GPT2Model

        class Probe(nn.Module):
            def __init__(self):
                super().__init__()
                self.gpt = GPT2Model(GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=40, n_positions=8,
                                                bos_token_id=0, eos_token_id=0))
                self.head = nn.Linear(16, 2)

            def forward(self, ids):
                hidden = self.gpt(ids).last_hidden_state
                return self.head(hidden.detach()[:, -1])  # LINE_CUT

        model = Probe

        def batch(step):
            g = torch.Generator().manual_seed(step)
            return torch.randint(0, 40, (2, 6), generator=g), torch.tensor([0, 1])

        def loss_fn(out, y):
            return torch.nn.functional.cross_entropy(out, y)
    """))
    g, cuts = _branches(path)
    (cut,) = cuts.values()
    assert g.nodes[cut["node"]]["location"].endswith(f":{line_of(path, 'LINE_CUT')}")
    gpt_params = sorted(n[len("param:"):] for n, a in g.nodes(data=True)
                        if a["kind"] == "param" and n.startswith("param:gpt."))
    assert cut["params"] == gpt_params and len(gpt_params) >= 14
    labels = _labels(g, cut["nodes"])
    assert "embedding" in labels and "native_layer_norm" in labels or "layer_norm" in labels
    assert g.nodes[cut["consumer"]]["module"] in ("", "head")
