"""trace under tensor parallelism (ColwiseParallel / RowwiseParallel on a 1-D mesh, 2 CPU processes, gloo):
placements per parameter, the DTensor boundaries as communication boxes, gradients equal to the unsharded model's."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from dist_harness import available, load_module, run_ranks

pytestmark = pytest.mark.skipif(not available(), reason="torch.distributed with gloo is needed")

SCRIPT = Path(__file__).parent / "scripts" / "tp_mlp.py"


def _worker(rank: int, world: int, tmp: Path) -> None:
    import gradviz
    from gradviz.core.export import to_node_link

    graph = gradviz.trace(SCRIPT)
    (tmp / f"graph{rank}.json").write_text(json.dumps(to_node_link(graph)))


@pytest.fixture(scope="module")
def graphs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tp_graph")
    run_ranks(_worker, tmp)
    return [json.loads((tmp / f"graph{r}.json").read_text()) for r in (0, 1)]


def test_placements_and_names(graphs):
    for rank, data in enumerate(graphs):
        nodes = {n["id"]: n for n in data["nodes"]}
        assert nodes["param:up.weight"]["shard"]["placements"] == ["Shard(0)"]          # column-wise
        assert nodes["param:up.weight"]["shard"]["local_shape"] == [8, 8]
        assert nodes["param:down.weight"]["shard"]["placements"] == ["Shard(1)"]        # row-wise
        assert nodes["param:down.bias"]["shard"]["placements"] == ["Replicate()"]
        assert nodes["param:down.weight"]["shape"] == [8, 16]
        assert "shard" not in nodes["param:head.weight"]                               # a plain parameter
        assert data["graph"]["sharding"]["rank"] == rank


def test_dtensor_boundaries_are_communication_boxes(graphs):
    data = graphs[0]
    comm = {n["id"]: n for n in data["nodes"] if n.get("comm")}
    kinds = sorted((n["comm"]["module"], n["comm"]["kind"]) for n in comm.values())
    assert ("up", "to DTensor") in kinds and ("down", "to DTensor") in kinds
    assert ("down", "redistribute") in kinds                     # the row-wise layer's partial sums all-reduced
    assert all(n["module_type"] == "DTensor communication" for n in comm.values())
    # the input side and the output side of a layer are separate boxes (one box would make a cycle)
    groups = {n["module"] for n in comm.values() if n["comm"]["module"] == "down"}
    assert len(groups) == 2 and all(g.startswith("down.[") for g in groups)
    users = [n for n in data["nodes"] if n["label"] == "addmm"]
    assert sorted(n["module"] for n in users) == ["down", "head", "up"]


def test_gradients_equal_the_unsharded_model(graphs):
    script = load_module(SCRIPT)
    model = script.unsharded()
    x, y = script.batch(0)                       # tensor parallelism: the same batch on every rank
    x.requires_grad_(True)
    out = model(x)
    loss = script.loss_fn(out, y)
    out.retain_grad()
    loss.backward()
    for data in graphs:
        nodes = {n["id"]: n for n in data["nodes"]}
        for name, p in model.named_parameters():
            assert nodes[f"param:{name}"]["grad_norm"] == pytest.approx(p.grad.norm().item(), rel=1e-5), name
        assert nodes["input:0"]["grad_norm"] == pytest.approx(x.grad.norm().item(), rel=1e-5)
        head = next(n for n in data["nodes"] if n["label"] == "addmm" and n["module"] == "head")
        assert head["grad_norm"] == pytest.approx(out.grad.norm().item(), rel=1e-5)
        with torch.no_grad():
            assert nodes["param:down.weight"]["value_norm"] == pytest.approx(model.down.weight.norm().item(), rel=1e-6)
