"""trace and check on sharded models (2 CPU processes, gloo), one spawn for all (processes cost more than
traces on a loaded 2-core machine).

FSDP2 (``tests/scripts/fsdp_mlp.py``): the user's names, global shapes with the local shard, the
reduce-scatter steps FSDP adds as labelled communication boxes, gradients equal to the unsharded model's.
Tensor parallelism (``ColwiseParallel`` / ``RowwiseParallel`` on a 1-D mesh, ``tests/scripts/tp_mlp.py``):
placements per parameter, the DTensor boundaries as communication boxes, gradients equal to the
unsharded model's. check: an FSDP2 branch forward never calls is named with why; the numerical
gradient check says it did not run; both models are otherwise clean.
"""
from __future__ import annotations

import json
from pathlib import Path

import networkx as nx
import pytest
import torch

from dist_harness import FSDP2_ON_CPU, FSDP2_SKIP, available, load_module, run_ranks

pytestmark = pytest.mark.skipif(not available(), reason="torch.distributed with gloo is needed")
needs_fsdp2 = pytest.mark.skipif(not FSDP2_ON_CPU, reason=FSDP2_SKIP)

SCRIPTS = Path(__file__).parent / "scripts"
SCRIPT = SCRIPTS / "fsdp_mlp.py"
TP_SCRIPT = SCRIPTS / "tp_mlp.py"


def _trace_fsdp(rank: int, tmp: Path) -> None:
    import gradviz
    from gradviz.core.output.export import to_node_link
    from gradviz.core.layout.grouping import collapse

    graph = gradviz.trace(SCRIPT)
    (tmp / f"graph{rank}.json").write_text(json.dumps(to_node_link(graph)))
    boxes = collapse(graph, expanded={"", "fc1", "fc2", "fc3"})
    opened = collapse(graph, expanded={"", "fc1", "fc2", "fc3", "fc2.[reduce-scatter]"})
    (tmp / f"views{rank}.json").write_text(json.dumps({
        "boxes": {n: {"label": a.get("label"), "members": a.get("members")} for n, a in boxes.nodes(data=True)},
        "opened": sorted(opened.nodes), "acyclic": nx.is_directed_acyclic_graph(boxes)}))

    # tensor mode, each rank its own data, as inside a training loop
    script = load_module(SCRIPT)
    model = script.model()
    x, y = script.batch(10 + rank)
    with gradviz.capture(model) as cap:
        loss = script.loss_fn(model(x), y)
    traced = gradviz.trace(loss, model=model, capture=cap)
    loss.backward()                                   # what FSDP itself makes of the gradients
    out = {}
    for name, p in model.named_parameters():
        out[name] = [traced.nodes[f"param:{name}"]["grad_norm"], p.grad.full_tensor().norm().item()]
    (tmp / f"tensor{rank}.json").write_text(json.dumps(out))


def _trace_tp(rank: int, tmp: Path) -> None:
    import gradviz
    from gradviz.core.output.export import to_node_link

    graph = gradviz.trace(TP_SCRIPT)
    (tmp / f"tp_graph{rank}.json").write_text(json.dumps(to_node_link(graph)))


def _check(rank: int, tmp: Path, scripts: list[Path]) -> None:
    from gradviz.core.diagnosis import check_report

    for script in scripts:
        report = check_report(str(script))
        (tmp / f"{script.stem}.report{rank}.json").write_text(json.dumps(report.to_dict()))


def _worker(rank: int, world: int, tmp: Path) -> None:
    if FSDP2_ON_CPU:
        _trace_fsdp(rank, tmp)
    _trace_tp(rank, tmp)
    _check(rank, tmp, ([tmp / "fsdp_unused.py", SCRIPT] if FSDP2_ON_CPU else []) + [TP_SCRIPT])


@pytest.fixture(scope="module")
def traced(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("fsdp_trace")
    (tmp / "fsdp_unused.py").write_text(SCRIPT.read_text().replace("UNUSED = False", "UNUSED = True"))
    run_ranks(_worker, tmp)
    return tmp


def _reference(batches) -> dict[str, float]:
    """Per-parameter gradient norms of the unsharded model, one process, the whole batch."""
    script = load_module(SCRIPT)
    model = script.unsharded()
    x = torch.cat([b[0] for b in batches])
    y = torch.cat([b[1] for b in batches])
    script.loss_fn(model(x), y).backward()
    return {n: p.grad.norm().item() for n, p in model.named_parameters()}


@needs_fsdp2
def test_names_shapes_and_shards(traced):
    for rank in (0, 1):
        data = json.loads((traced / f"graph{rank}.json").read_text())
        nodes = {n["id"]: n for n in data["nodes"]}
        params = sorted(n for n in nodes if n.startswith("param:"))
        assert params == ["param:fc1.bias", "param:fc1.weight", "param:fc2.bias", "param:fc2.weight",
                          "param:fc3.bias", "param:fc3.weight"]
        assert not [n for n in nodes if n.startswith("leaf:")]          # no unnamed unsharded parameter
        fc3 = nodes["param:fc3.weight"]
        assert fc3["shape"] == [3, 32] and fc3["module"] == "fc3" and fc3["module_type"] == "Linear"
        assert fc3["shard"] == {"global_shape": [3, 32], "local_shape": [[2, 32], [1, 32]][rank], "mesh": [2],
                                "mesh_dims": None, "placements": ["Shard(0)"], "coordinate": [rank]}
        units = data["graph"]["sharding"]["fsdp_units"]
        assert [u["module"] for u in units] == ["fc1", "fc2", "fc3"]
        assert units[1]["params"] == ["fc2.weight", "fc2.bias"] and units[1]["reshard_after_forward"]
        assert data["graph"]["sharding"]["rank"] == rank and data["graph"]["sharding"]["world_size"] == 2


@needs_fsdp2
def test_user_ops_keep_names_modules_and_lines(traced):
    data = json.loads((traced / "graph0.json").read_text())
    lines = SCRIPT.read_text().splitlines()
    addmm = [n for n in data["nodes"] if n["label"] == "addmm"]
    assert sorted(n["module"] for n in addmm) == ["fc1", "fc2", "fc3"]
    for n in addmm:
        path, _, line = n["location"].rpartition(":")
        assert Path(path).name == SCRIPT.name
        assert f"self.{n['module']}(" in lines[int(line) - 1]


@needs_fsdp2
def test_reduce_scatter_steps_are_a_labelled_group(traced):
    data = json.loads((traced / "graph0.json").read_text())
    comm = [n for n in data["nodes"] if n.get("comm")]
    # one on each sharded module's inputs (trace makes the batch require grad: fc1's too)
    assert sorted(n["module"] for n in comm) == ["fc1.[reduce-scatter]", "fc2.[reduce-scatter]",
                                                  "fc3.[reduce-scatter]"]
    for n in comm:
        assert n["op"] == "RegisterPostBackwardFunctionBackward"
        assert n["label"] == "FSDP reduce-scatter" and n["module_type"] == "FSDP communication"
        owner = n["comm"]["module"]
        assert n["comm"]["kind"] == "reduce-scatter" and n["comm"]["params"] == [f"{owner}.weight", f"{owner}.bias"]
        assert "again before backward" in n["comm"]["all_gather"]
        # it passes gradients through: the same norm as the op of the module before it
        (pred,) = [e["source"] for e in data["edges"] if e["target"] == n["id"]]
        assert n["grad_norm"] == pytest.approx(next(m for m in data["nodes"] if m["id"] == pred)["grad_norm"])
    modules = data["graph"]["modules"]
    assert modules["fc2.[reduce-scatter]"]["type"] == "FSDP communication"
    assert modules["fc2.[reduce-scatter]"]["parent"] == "fc2" and modules["fc2.[reduce-scatter]"]["nodes"] == 1
    views = json.loads((traced / "views0.json").read_text())
    box = views["boxes"]["group:fc2.[reduce-scatter]"]
    assert box["label"] == "fc2.[reduce-scatter] (FSDP communication)" and len(box["members"]) == 1
    assert views["acyclic"]
    assert "group:fc2.[reduce-scatter]" not in views["opened"]           # opened: the node itself
    assert any(n in views["opened"] for n in box["members"])


@needs_fsdp2
def test_parameter_gradients_are_the_unsharded_models(traced):
    script = load_module(SCRIPT)
    reference = _reference([script.batch(0), script.batch(0)])          # script mode: batch(0) on both ranks
    for rank in (0, 1):
        nodes = {n["id"]: n for n in json.loads((traced / f"graph{rank}.json").read_text())["nodes"]}
        for name, expected in reference.items():
            assert nodes[f"param:{name}"]["grad_norm"] == pytest.approx(expected, rel=1e-5), (rank, name)


@needs_fsdp2
def test_tensor_mode_gives_the_reduced_gradient(traced):
    script = load_module(SCRIPT)
    reference = _reference([script.batch(10), script.batch(11)])       # each rank its own half
    for rank in (0, 1):
        seen = json.loads((traced / f"tensor{rank}.json").read_text())
        for name, (traced_norm, fsdp_norm) in seen.items():
            assert traced_norm == pytest.approx(fsdp_norm, rel=1e-5), (rank, name)
            assert traced_norm == pytest.approx(reference[name], rel=1e-5), (rank, name)


# -- tensor parallelism ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def tp_graphs(traced) -> list[dict]:
    return [json.loads((traced / f"tp_graph{r}.json").read_text()) for r in (0, 1)]


def test_tp_placements_and_names(tp_graphs):
    for rank, data in enumerate(tp_graphs):
        nodes = {n["id"]: n for n in data["nodes"]}
        assert nodes["param:up.weight"]["shard"]["placements"] == ["Shard(0)"]          # column-wise
        assert nodes["param:up.weight"]["shard"]["local_shape"] == [8, 8]
        assert nodes["param:down.weight"]["shard"]["placements"] == ["Shard(1)"]        # row-wise
        assert nodes["param:down.bias"]["shard"]["placements"] == ["Replicate()"]
        assert nodes["param:down.weight"]["shape"] == [8, 16]
        assert "shard" not in nodes["param:head.weight"]                               # a plain parameter
        assert data["graph"]["sharding"]["rank"] == rank


def test_tp_dtensor_boundaries_are_communication_boxes(tp_graphs):
    data = tp_graphs[0]
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


def test_tp_gradients_equal_the_unsharded_model(tp_graphs):
    script = load_module(TP_SCRIPT)
    model = script.unsharded()
    x, y = script.batch(0)                       # tensor parallelism: the same batch on every rank
    x.requires_grad_(True)
    out = model(x)
    loss = script.loss_fn(out, y)
    out.retain_grad()
    loss.backward()
    for data in tp_graphs:
        nodes = {n["id"]: n for n in data["nodes"]}
        for name, p in model.named_parameters():
            assert nodes[f"param:{name}"]["grad_norm"] == pytest.approx(p.grad.norm().item(), rel=1e-5), name
        assert nodes["input:0"]["grad_norm"] == pytest.approx(x.grad.norm().item(), rel=1e-5)
        head = next(n for n in data["nodes"] if n["label"] == "addmm" and n["module"] == "head")
        assert head["grad_norm"] == pytest.approx(out.grad.norm().item(), rel=1e-5)
        with torch.no_grad():
            assert nodes["param:down.weight"]["value_norm"] == pytest.approx(model.down.weight.norm().item(), rel=1e-6)


# -- check ----------------------------------------------------------------------------------

def _reports(tmp: Path, stem: str) -> list[dict]:
    return [json.loads((tmp / f"{stem}.report{r}.json").read_text()) for r in (0, 1)]


@needs_fsdp2
def test_fsdp_unused_branch_is_named(traced):
    script = traced / "fsdp_unused.py"
    for report in _reports(traced, "fsdp_unused"):
        by_code = {f["code"]: f for f in report["findings"]}
        unreachable = by_code["unreachable"]
        assert unreachable["params"] == ["branch.weight", "branch.bias"]
        assert unreachable["data"]["cause"] == "never-called"             # not "runs, output unused"
        assert "`branch` (Linear) is never called" in unreachable["message"]
        defined = 1 + next(i for i, line in enumerate(script.read_text().splitlines()) if "self.branch =" in line)
        assert unreachable["location"] == f"{script}:{defined}"              # where it is defined
        gradcheck = by_code["check-incomplete"]
        assert gradcheck["data"]["step"] == "numerical gradient check"
        assert "sharded model" in gradcheck["message"] and "unsharded, in one process" in gradcheck["message"]
        assert not report["complete"] and not report["ok"]
        assert set(by_code) == {"unreachable", "check-incomplete"}, report["findings"]


@pytest.mark.parametrize("stem", [pytest.param("fsdp_mlp", marks=needs_fsdp2), "tp_mlp"])
def test_fsdp_and_tensor_parallel_models_are_otherwise_clean(traced, stem):
    for report in _reports(traced, stem):
        assert [f["code"] for f in report["findings"]] == ["check-incomplete"], report["findings"]
        assert report["nodes"] > 10
