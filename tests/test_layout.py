"""Properties of the layered layout engine (no Qt, no timing assertions)."""
from __future__ import annotations

import itertools
import shutil
from collections import defaultdict

import networkx as nx
import numpy as np
import pytest

from benchmarks.bench_layout import synthetic_gpt_graph
from gradviz.core.layout.graphviz_dot import layout_with_graphviz
from gradviz.core.layout.layered import layout
from gradviz.core.layout.types import Layout, LayoutOptions, node_size
from gradviz.core.layout.order import count_crossings

EPS = 1e-6


def check_layout(graph: nx.DiGraph, result: Layout, opts: LayoutOptions | None = None) -> None:
    """Invariants every layout must satisfy."""
    opts = opts or LayoutOptions()
    assert set(result.pos) == set(graph.nodes)
    assert set(result.size) == set(graph.nodes)
    assert set(result.layer) == set(graph.nodes)
    # no two boxes of a layer overlap (x intervals at least node_gap apart)
    by_layer = defaultdict(list)
    for v, layer in result.layer.items():
        by_layer[layer].append(v)
    for members in by_layer.values():
        members.sort(key=lambda v: result.pos[v][0])
        for a, b in zip(members, members[1:]):
            right_a = result.pos[a][0] + result.size[a][0] / 2
            left_b = result.pos[b][0] - result.size[b][0] / 2
            assert left_b - right_a >= opts.node_gap - EPS, (a, b)
    # boxes inside the bounding box
    for v, (x, y) in result.pos.items():
        w, h = result.size[v]
        assert x - w / 2 >= -EPS and x + w / 2 <= result.width + EPS
        assert y - h / 2 >= -EPS and y + h / 2 <= result.height + EPS
    # edges: one polyline per non-loop edge, from u's box to v's box
    expected = {(u, v) for u, v in graph.edges if u != v}
    assert set(result.edges) == expected
    for (u, v), pts in result.edges.items():
        (xu, yu), (xv, yv) = result.pos[u], result.pos[v]
        hu, hv = result.size[u][1], result.size[v][1]
        if result.layer[u] == result.layer[v]:   # a parameter's chain beside its op: level, side to side
            toward = 1 if xv > xu else -1
            assert pts == [pytest.approx((xu + toward * result.size[u][0] / 2, yu)),
                           pytest.approx((xv - toward * result.size[v][0] / 2, yv))]
            assert yu == yv
            continue
        if result.layer[u] < result.layer[v]:
            assert pts[0] == pytest.approx((xu, yu + hu / 2))
            assert pts[-1] == pytest.approx((xv, yv - hv / 2))
        else:  # a reversed back edge of a cycle
            assert pts[0] == pytest.approx((xu, yu - hu / 2))
            assert pts[-1] == pytest.approx((xv, yv + hv / 2))
        ys = [p[1] for p in pts]
        assert ys == sorted(ys) or ys == sorted(ys, reverse=True)


def layer_crossings(graph: nx.DiGraph, layer: dict, order: dict) -> int:
    """Brute-force crossings of edges between adjacent layers, given positions ``order``."""
    by_gap = defaultdict(list)
    for u, v in graph.edges:
        assert layer[v] == layer[u] + 1, "helper needs a proper layered graph"
        by_gap[layer[u]].append((order[u], order[v]))
    return sum(
        1
        for edges in by_gap.values()
        for (a1, b1), (a2, b2) in itertools.combinations(edges, 2)
        if (a1 - a2) * (b1 - b2) < 0
    )


def test_empty_and_single_node():
    empty = layout(nx.DiGraph())
    assert empty.pos == {} and empty.edges == {} and empty.width == 0 and empty.height == 0
    g = nx.DiGraph()
    g.add_node("x", label="loss")
    result = layout(g)
    check_layout(g, result)
    assert result.size["x"] == (max(56.0, 7 * 4 + 20.0), 28.0)
    assert result.layer["x"] == 0


def test_node_size_from_attributes_and_label():
    assert node_size("n", {"width": 100, "height": 40}) == (100.0, 40.0)
    assert node_size("n", {"label": "x" * 20}) == (160.0, 28.0)
    assert node_size(12345678901, {}) == (7 * 11 + 20.0, 28.0)  # str(node) when no label


def test_edges_point_down_and_params_sit_above_their_op():
    """Today's layout (no clusters): every parameter in the layer right above its first consumer."""
    g = synthetic_gpt_graph(2)
    opts = LayoutOptions(clusters=False)
    result = layout(g, opts)
    check_layout(g, result, opts)
    for u, v in g.edges:
        assert result.layer[u] < result.layer[v]
    for v, attrs in g.nodes(data=True):
        if attrs["kind"] == "param":
            succ_layers = [result.layer[s] for s in g.successors(v)]
            assert result.layer[v] == min(succ_layers) - 1
    # the loss is at the bottom, its box lowest
    loss = next(v for v, a in g.nodes(data=True) if a["kind"] == "loss")
    assert result.layer[loss] == max(result.layer.values())


def test_clustered_params_sit_beside_their_op():
    """The clustered layout: a parameter with one consumer in its module (through ops only it feeds,
    a weight's transpose) sits in its op's row, beside it (``stub_sides``); edges otherwise point down."""
    g = synthetic_gpt_graph(2)
    result = layout(g)
    check_layout(g, result)
    beside = 0
    for u, v in g.edges:
        assert result.layer[u] <= result.layer[v]
        if result.layer[u] == result.layer[v]:
            beside += 1
            assert g.nodes[u]["module"] == g.nodes[v]["module"]
    params = [v for v, a in g.nodes(data=True) if a["kind"] == "param"]
    for v in params:
        succ_layers = [result.layer[s] for s in g.successors(v)]
        assert result.layer[v] in (min(succ_layers), min(succ_layers) - 1)
    assert beside >= len(params) // 2
    # the loss is at the bottom, its box lowest
    loss = next(v for v, a in g.nodes(data=True) if a["kind"] == "loss")
    assert result.layer[loss] == max(result.layer.values())


def test_long_edges_bend_at_dummy_points_between_layers():
    g = nx.DiGraph([("a", "b"), ("b", "c"), ("c", "d"), ("a", "d")])
    result = layout(g)
    check_layout(g, result)
    assert result.n_dummies == 2
    assert len(result.edges[("a", "d")]) == 4  # start, two bends, end
    # nothing else in those layers: the long edge runs straight down
    xs = {round(x, 6) for x, _ in result.edges[("a", "d")]}
    assert len(xs) == 1


def test_a_weight_shared_by_every_step_of_an_unrolled_loop_adds_no_bend_points():
    """One source feeding each step of a 3,000-layer chain: its edges span up to 3,000 layers.
    With bend points that alone would be 4.5 million vertices; edges longer than ``max_span``
    are drawn straight instead."""
    steps = 1000
    g = nx.DiGraph()
    prev = "h0"
    for t in range(steps):
        a, b, c = f"mul{t}", f"add{t}", f"tanh{t}"
        g.add_edges_from([(prev, a), ("weight", a), (a, b), (b, c)])
        prev = c
    result = layout(g, LayoutOptions(max_span=16))
    check_layout(g, result)
    span = {t: result.layer[f"mul{t}"] - result.layer["weight"] for t in range(steps)}
    assert result.n_dummies == sum(d - 1 for d in span.values() if d - 1 <= 16)   # only the short ones bend
    assert all(len(result.edges[("weight", f"mul{t}")]) == 2 for t in range(steps) if span[t] - 1 > 16)
    short = layout(nx.DiGraph([("a", "b"), ("b", "c"), ("c", "d"), ("a", "d")]), LayoutOptions(max_span=1))
    assert short.n_dummies == 0 and len(short.edges[("a", "d")]) == 2


def test_deterministic_and_independent_of_object_hashes():
    g = synthetic_gpt_graph(3)
    first, second = layout(g), layout(g)
    assert first == second
    rebuilt = nx.DiGraph()
    rebuilt.add_nodes_from(g.nodes(data=True))
    rebuilt.add_edges_from(g.edges)
    assert layout(rebuilt) == first

    class Obj:  # hash/identity differ between builds; only insertion order matters
        def __init__(self, name):
            self.name = name

        def __repr__(self):
            return self.name

    def build():
        objs = {v: Obj(f"v{v}") for v in g.nodes}
        h = nx.DiGraph()
        h.add_nodes_from((objs[v], a) for v, a in g.nodes(data=True))
        h.add_edges_from((objs[u], objs[v]) for u, v in g.edges)
        return h, objs

    (h1, o1), (h2, o2) = build(), build()
    l1, l2 = layout(h1), layout(h2)
    assert all(l1.pos[o1[v]] == l2.pos[o2[v]] for v in g.nodes)


def test_crossing_reduction_beats_insertion_order():
    # two layers; bottom nodes inserted in the reverse of the order their parents need
    g = nx.DiGraph()
    top = [f"t{i}" for i in range(6)]
    bottom = [f"b{i}" for i in range(6)]
    g.add_nodes_from(top)
    g.add_nodes_from(bottom)
    g.add_edges_from((t, bottom[5 - i]) for i, t in enumerate(top))
    g.add_edges_from([("t0", "b4"), ("t5", "b1")])
    result = layout(g)
    check_layout(g, result)
    insertion = {v: i for i, v in enumerate(g.nodes)}
    by_x = {v: result.pos[v][0] for v in g.nodes}
    initial = layer_crossings(g, result.layer, insertion)
    final = layer_crossings(g, result.layer, by_x)
    assert initial > 0
    assert final <= initial
    assert final == 0  # this graph can be drawn without crossings


def test_count_crossings_matches_brute_force():
    rng = np.random.default_rng(0)
    for _ in range(20):
        n_layers, width = 4, int(rng.integers(1, 7))
        slot = np.repeat(np.arange(n_layers), width)
        rank = np.tile(rng.permutation(width), n_layers)
        for i in range(n_layers):
            rank[i * width:(i + 1) * width] = rng.permutation(width)
        up, low = [], []
        for i in range(n_layers - 1):
            for _ in range(int(rng.integers(0, 10))):
                up.append(i * width + int(rng.integers(width)))
                low.append((i + 1) * width + int(rng.integers(width)))
        up, low = np.array(up, dtype=np.int64), np.array(low, dtype=np.int64)
        brute = sum(
            1
            for e, f in itertools.combinations(range(len(up)), 2)
            if slot[up[e]] == slot[up[f]]
            and (rank[up[e]] - rank[up[f]]) * (rank[low[e]] - rank[low[f]]) < 0
        )
        assert count_crossings(slot, rank, up, low) == brute


def two_module_graph() -> nx.DiGraph:
    """Nodes of modules a and b interleaved in insertion order, edges crossing over."""
    g = nx.DiGraph()
    for layer in range(4):
        for i in range(6):
            g.add_node((layer, i), module="enc.a" if i % 2 == 0 else "enc.b", label=f"n{layer}{i}")
    for layer in range(3):
        for i in range(6):
            g.add_edge((layer, i), (layer + 1, (i + 3) % 6))
            g.add_edge((layer, i), (layer + 1, (i + 1) % 6))
    return g


def test_module_members_contiguous_in_each_layer():
    g = two_module_graph()
    result = layout(g)
    check_layout(g, result)
    by_layer = defaultdict(list)
    for v in g.nodes:
        by_layer[result.layer[v]].append(v)
    for members in by_layer.values():
        members.sort(key=lambda v: result.pos[v][0])
        runs = [m for m, _ in itertools.groupby(g.nodes[v]["module"] for v in members)]
        assert len(runs) == len(set(runs)), runs


def test_cycles_and_self_loops_do_not_crash():
    g = nx.DiGraph([("a", "b"), ("b", "c"), ("c", "a"), ("c", "d"), ("d", "d"), ("d", "b")])
    result = layout(g)
    check_layout(g, result)
    assert ("d", "d") not in result.edges
    layers = [result.layer[v] for v in "abcd"]
    assert len(set(layers)) > 1


def test_disconnected_components_side_by_side():
    g = synthetic_gpt_graph(1)
    g.add_node("unused.weight", kind="param", module="unused", label="unused.weight")
    g.add_edges_from([("x1", "y1"), ("x1", "z1")])
    result = layout(g)
    check_layout(g, result)

    def span(nodes):
        return (min(result.pos[v][0] - result.size[v][0] / 2 for v in nodes),
                max(result.pos[v][0] + result.size[v][0] / 2 for v in nodes))

    main = span([n for n in g.nodes if isinstance(n, int)])
    island = span(["unused.weight"])
    small = span(["x1", "y1", "z1"])
    spans = sorted([main, island, small])
    assert all(a[1] < b[0] for a, b in zip(spans, spans[1:]))
    assert main[0] == pytest.approx(0.0)  # the largest component comes first


def test_big_synthetic_graph_lays_out():
    g = synthetic_gpt_graph(40)
    assert g.number_of_nodes() > 2000
    result = layout(g)
    check_layout(g, result)
    assert result.n_dummies > 0
    # the same layer only for a parameter's chain beside its op (level edges, checked above)
    assert all(result.layer[u] < result.layer[v] or g.nodes[u]["module"] == g.nodes[v]["module"] for u, v in g.edges)
    assert all(result.layer[u] <= result.layer[v] for u, v in g.edges)


def test_options_are_respected():
    g = two_module_graph()
    opts = LayoutOptions(node_gap=40.0, layer_gap=100.0, sweeps=1, group_by_module=False)
    result = layout(g, opts)
    check_layout(g, result, opts)
    ys = sorted({round(y, 6) for _, y in result.pos.values()})
    assert all(b - a == pytest.approx(100.0 + 28.0) for a, b in zip(ys, ys[1:]))


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz not installed")
def test_graphviz_layout_same_type():
    g = synthetic_gpt_graph(1)
    result = layout_with_graphviz(g)
    assert set(result.pos) == set(g.nodes)
    assert set(result.edges) == set(g.edges)
    assert all(result.layer[u] < result.layer[v] for u, v in g.edges)


@pytest.mark.parametrize("seed", range(12))
def test_random_graphs_keep_invariants(seed):
    """Random graphs (every third one with cycles), with nested modules and islands."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 200))
    g = nx.DiGraph()
    g.add_nodes_from(range(n))
    for _ in range(int(rng.integers(0, 3 * n))):
        u, v = (int(a) for a in rng.integers(n, size=2))
        if seed % 3 == 0 or u < v:
            g.add_edge(u, v)
    for v in g.nodes:
        g.nodes[v]["module"] = f"m{v % 3}.s{v % 2}" if v % 5 else ""
    check_layout(g, layout(g))


def test_very_wide_layer():
    g = nx.DiGraph()
    for i in range(1500):
        g.add_edge("src", i)
        g.add_edge(i, "sink")
    check_layout(g, layout(g))
