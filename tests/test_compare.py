"""Compare two steps of a run, or two runs: ratios per parameter and node, what vanished or appeared."""
from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import gradviz
from gradviz.cli.main import main
from gradviz.core.record.compare import compare, parse_side, ratio_graph, structure_keys
from gradviz.core.record.reader import open_run
from gradviz.core.record.schema import RecordError


class Classifier(nn.Module):
    def __init__(self, detach: bool):
        super().__init__()
        self.detach = detach
        self.encoder = nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 16), nn.ReLU())
        self.head = nn.Linear(16, 3)

    def forward(self, x):
        f = self.encoder(x)
        return self.head(f.detach() if self.detach else f)


def record(path, *, detach=False, steps=12, every=5, nan_at=None):
    torch.manual_seed(0)
    model = Classifier(detach)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with gradviz.watch(model, path, every=every, optimizer=opt) as w:
        for s in range(steps):
            g = torch.Generator().manual_seed(s)
            x, y = torch.randn(32, 20, generator=g), torch.randint(3, (32,), generator=g)
            if s == nan_at:
                x[0, 0] = float("nan")
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            w.step(loss)
            opt.step()
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("runs")
    return {"before": record(d / "before.gvrun", detach=True), "after": record(d / "after.gvrun"),
            "nan": record(d / "nan.gvrun", steps=11, every=5, nan_at=10)}


def test_two_steps_of_one_run_match_by_id_and_use_the_recorded_norms(runs):
    path = runs["after"]
    c = compare(f"{path}@0", f"{path}@11")
    assert c.matched_by == "id" and (c.a.step, c.b.step) == (0, 11) and (c.a.node_step, c.b.node_step) == (0, 10)
    with open_run(path) as r:
        row0, row11 = r.step_row(0), r.step_row(11)
        _, nodes0 = r.node_norms(0)
        _, nodes10 = r.node_norms(10)
        for change in c.params:
            i = r.param_names.index(change.name)
            assert change.a == pytest.approx(row0["grad_norms"][i]) and change.b == pytest.approx(row11["grad_norms"][i])
            assert change.ratio == pytest.approx(row11["grad_norms"][i] / row0["grad_norms"][i])
    for change in c.nodes:
        if change.name.startswith("op:"):
            assert change.a == pytest.approx(nodes0[change.name]) and change.b == pytest.approx(nodes10[change.name])
    # sorted by the size of the change
    sizes = [abs(math.log10(ch.ratio)) for ch in c.params]
    assert sizes == sorted(sizes, reverse=True)
    assert c.a.loss == pytest.approx(float(row0["loss"]))


def test_before_and_after_a_fix(runs):
    c = compare(runs["before"], runs["after"])
    assert c.matched_by == "structure"           # the fix changed the graph
    encoder = [ch for ch in c.params if ch.name.startswith("encoder.")]
    assert [ch.change for ch in c.params[:4]] == ["appeared"] * 4 and len(encoder) == 4
    assert {ch.name for ch in c.params[:4]} == {ch.name for ch in encoder}
    head = next(ch for ch in c.params if ch.name == "head.weight")
    assert head.change in ("up", "down") and head.a > 0 and head.b > 0
    # the reverse direction: the encoder's gradients vanished
    back = compare(runs["after"], runs["before"])
    assert [ch.change for ch in back.params[:4]] == ["vanished"] * 4
    assert back.nodes[0].change == "vanished"


def test_nonfinite_ranks_first(runs):
    c = compare(f"{runs['nan']}@5", f"{runs['nan']}@10")
    assert c.params[0].change == "nonfinite" and math.isnan(c.params[0].b)
    assert c.nodes[0].change == "nonfinite"


def test_structure_keys_survive_a_change_elsewhere(runs):
    with open_run(runs["before"]) as ra, open_run(runs["after"]) as rb:
        ka, kb = structure_keys(ra.graph()), structure_keys(rb.graph())
    head_a = {k for k in ka.values() if k[1] == "head"}
    head_b = {k for k in kb.values() if k[1] == "head"}
    assert head_a == head_b and ("param", "head.weight") in ka.values()


def test_ratio_graph(runs):
    g = ratio_graph(compare(f"{runs['after']}@0", runs["after"]))
    attrs = g.nodes["param:head.weight"]
    assert attrs["norm_ratio"] == pytest.approx(attrs["grad_norm_b"] / attrs["grad_norm_a"])
    assert g.graph["compare"]["matched_by"] == "id"


def test_parse_side_and_errors(runs, tmp_path):
    assert parse_side("x.gvrun@12") == ("x.gvrun", 12)
    assert parse_side("x.gvrun@first") == ("x.gvrun", "first") and parse_side("x.gvrun@last") == ("x.gvrun", None)
    assert compare(f"{runs['after']}@first", f"{runs['after']}@last").a.step == 0
    assert parse_side(str(runs["after"])) == (str(runs["after"]), None)
    with pytest.raises(RecordError, match="not a step number"):
        parse_side("x.gvrun@latest")
    with pytest.raises(RecordError, match="no such run file"):
        compare(tmp_path / "none.gvrun", runs["after"])
    with pytest.raises(RecordError, match="no step at or before -1"):
        compare(f"{runs['after']}@-1", runs["after"])


def test_cli_text_json_and_errors(runs, capsys, tmp_path):
    assert main(["runs", "diff", str(runs["before"]), str(runs["after"]), "--top", "3"]) == 0
    out = capsys.readouterr().out
    assert "appeared  encoder." in out and "matched by module, op and order" in out
    assert main(["runs", "diff", f"{runs['after']}@0", str(runs["after"]), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["matched_by"] == "id" and data["a"]["step"] == 0 and data["b"]["step"] == 11
    assert {"name", "a", "b", "ratio", "change"} <= set(data["params"][0])
    assert main(["runs", "diff", str(tmp_path / "none.gvrun"), str(runs["after"])]) == 2
    assert "no such run file" in capsys.readouterr().err
    (tmp_path / "text.gvrun").write_text("hello")
    assert main(["runs", "diff", str(tmp_path / "text.gvrun"), str(runs["after"])]) == 2
    assert "not a gradviz run file" in capsys.readouterr().err
