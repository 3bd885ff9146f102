"""GraphScene provides everything its parts read of it (render/parts/scene_reads.py).

The parts take Protocols instead of GraphScene (so none imports the scene); nothing checks a
Protocol at run time, so this does: every attribute and method each Protocol names exists on a
scene that has drawn a graph (and on the node painter and overview it hands out).
"""
from __future__ import annotations

import inspect
import typing

import networkx as nx
import pytest

from gradviz.render.parts import scene_reads
from gradviz.render.primitives.qtcompat import ensure_app

PROTOCOLS = [obj for _, obj in inspect.getmembers(scene_reads, inspect.isclass)
             if obj.__module__ == scene_reads.__name__ and getattr(obj, "_is_protocol", False)]


def members(protocol: type) -> set[str]:
    """The names a Protocol declares, its bases' included: annotated attributes and methods."""
    names: set[str] = set()
    for cls in protocol.__mro__:
        if cls in (object, typing.Protocol, typing.Generic):
            continue
        names |= set(getattr(cls, "__annotations__", {}))
        names |= {n for n, v in vars(cls).items() if not n.startswith("_") and (callable(v) or isinstance(v, property))}
    return names


@pytest.fixture(scope="module")
def scene():
    ensure_app()
    from gradviz.render.primitives.style import layout_graph
    from gradviz.render.scene.scene import GraphScene

    g = nx.DiGraph()
    g.add_node("param:w", kind="param", label="w", shape=[3, 4], grad_norm=0.5, module="lin")
    g.add_node("op:0", kind="op", label="mm", grad_norm=0.2, module="lin")
    g.add_node("loss", kind="loss", label="loss", value=1.25)
    g.add_edges_from([("param:w", "op:0"), ("op:0", "loss")])
    sc = GraphScene()
    sc.set_graph(g, layout_graph(g))
    return sc


def test_every_protocol_is_found():
    assert {p.__name__ for p in PROTOCOLS} >= {"PaintState", "NodeTable", "NodeBuild", "EdgeBuild", "MarkHost",
                                               "OverviewHost", "Canvas"}


@pytest.mark.parametrize("protocol", [p for p in PROTOCOLS if p.__name__ not in ("Picture", "NodePaint")],
                         ids=lambda p: p.__name__)
def test_the_scene_has_every_member_its_parts_read(scene, protocol):
    missing = sorted(name for name in members(protocol) if not hasattr(scene, name))
    assert missing == [], f"GraphScene lacks {missing} of {protocol.__name__}"


def test_what_the_scene_hands_out_has_the_members_read_of_it(scene):
    """``painter_for`` gives a NodePaint; ``overview`` (a big graph's) is a Picture: their members too."""
    painter = scene.painter_for(0)
    assert all(hasattr(painter, name) for name in members(scene_reads.NodePaint))
    from gradviz.render.scene.overview import Overview

    assert all(name in vars(Overview(scene, scene.graph_rect(), 0.1)) for name in members(scene_reads.Picture))
