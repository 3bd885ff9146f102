"""Gradient norm at every node of one backward pass, for live colouring.

``NodeNormSampler.sample`` walks the loss's autograd graph, places the hooks of a
``hook_plan`` (about one per three nodes: see there), runs the backward you give it and
returns every node's incoming gradient norm. Each hook reduces a gradient to its norm
as it passes (a BLAS dot on the CPU, a 0-d tensor on a device, copied to the host once);
the gradient itself is not kept, and the hooks go inert when the backward returns. The
recorder (``watch``) uses the same ``hooked_backward`` with plans cached per structure.
Node ids are those of ``gradviz.core.trace.tracer`` (both use ``walk.node_ids_for``):
``op:<k>`` (k = place in ``walk()``'s node list), ``param:<name>``, ``input:<i>``,
``leaf:<k>``, and ``loss``.

To get the same ids as a trace of the same script, the float inputs must require
grad as ``trace`` makes them (``TraceOptions.input_grads``): see ``prepare_inputs``.

The sampler keeps no reference to the graph after ``sample`` returns.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import torch
from torch import nn

from gradviz.core.stats.shard_sum import local_squares, settled, shard_totals, whole_squares
from gradviz.core.stats.sharding import any_dtensor, is_dtensor, whole
from gradviz.core.stats.tensors import norm_values, tensor_stats
from gradviz.core.trace.walk import node_ids_for, root_ids, walk  # noqa: F401  (re-exported)

__all__ = ["NodeNormSampler", "HookPlan", "hook_plan", "node_ids_for", "root_ids", "prepare_inputs"]

_HOST_DTYPES = frozenset({torch.float32, torch.float64})
_TENSOR = torch.Tensor
_CPU = torch.device("cpu")
_numpy = torch.Tensor.numpy
_vdot = np.vdot
_MEMORY_ORDER: dict[tuple, tuple] = {}       # strides -> the axis order that walks memory forwards


def _host_sq(g: torch.Tensor) -> Any:
    """Squared L2 norm of a CPU float32/float64 gradient by BLAS on a numpy view (None
    otherwise: another device or dtype, sparse...).

    A norm ignores the order of the elements, so a transposed or permuted gradient (a third
    of a transformer's: ``t()``, attention heads) is read in its memory order instead of
    being copied; only a non-dense one (a slice) is copied by ``np.vdot``."""
    if not g.is_cpu or g.dtype not in _HOST_DTYPES:
        return None
    try:
        a = _numpy(g)
    except RuntimeError:                       # requires grad (create_graph), conj/neg bit
        try:
            a = _numpy(g.detach().resolve_conj().resolve_neg())
        except (RuntimeError, TypeError):
            return None
    except TypeError:                          # sparse and other layouts
        return None
    if g.is_contiguous():
        return _vdot(a, a)
    strides = a.strides
    order = _MEMORY_ORDER.get(strides)
    if order is None:
        if len(_MEMORY_ORDER) > 4096:
            _MEMORY_ORDER.clear()
        order = _MEMORY_ORDER[strides] = tuple(sorted(range(len(strides)), key=strides.__getitem__, reverse=True))
    t = a.transpose(order)
    return _vdot(t, t)


class HookPlan:
    """Where ``hooked_backward`` measures, for one graph structure (node indices only, so it
    holds no node and is reused by every step with the same structure).

    ``hooks``: ``(p, k, pairs)`` per hooked node ``p``: ``k`` = ``p`` when it measures its
    own incoming gradient (-1 when it is measured elsewhere), ``pairs`` = ``((j, c), ...)``:
    child ``c``'s incoming gradient is ``p``'s outgoing gradient ``j``.
    ``copies`` / ``sources``: nodes whose norm equals another's (see ``hook_plan``).
    """

    __slots__ = ("hooks", "n_nodes", "copies", "sources")

    def __init__(self, hooks: list[tuple[int, int, tuple]], n_nodes: int,
                 copies: Sequence[int] = (), sources: Sequence[int] = ()) -> None:
        self.hooks = hooks
        self.n_nodes = n_nodes
        self.copies = np.asarray(copies, dtype=np.intp)
        self.sources = np.asarray(sources, dtype=np.intp)


# backward nodes that only move their gradient around (a view, a transpose, a copy): what
# flows out of them has the norm of what flows in
_LAYOUT_NODES = frozenset({"View", "UnsafeView", "ReshapeAlias", "T", "Transpose", "Permute", "Squeeze",
                           "Unsqueeze", "Clone", "Alias", "Flatten", "Contiguous"})


def _moves_only(fn: Any) -> bool:
    """A layout node: its backward only rearranges the gradient (whatever the shapes)."""
    if hasattr(fn, "_forward_cls"):                      # a user's autograd.Function: anything goes
        return False
    name = fn.name()
    cut = name.rfind("Backward")
    return cut > 0 and name[:cut] in _LAYOUT_NODES


def hook_plan(nodes: Sequence[Any], edges: Sequence[tuple[Any, Any, int]], skip: Sequence[bool]) -> HookPlan:
    """Few hooks that give the norm of every node not skipped (see ``hooked_backward``).

    Two facts cut the work on a transformer from 479 hooked norms to about 270 norms and
    under 150 hooks:

    * a node consumed only by a view/transpose/clone node receives that node's incoming
      gradient, rearranged: same norm, copied after backward instead of measured. (Not
      through ``a + b``: whether it broadcasts depends on the shapes of a step, and a
      plan is reused for every step of the same structure);
    * a node with exactly one consuming edge is measured by its consumer's post hook
      (leaves-first greedy choice of consumers).
    """
    n = len(nodes)
    index = dict(zip(nodes, range(n)))
    uses = [0] * n
    consumer = [-1] * n
    for prod, cons, _ in edges:
        i = index[prod]
        uses[i] += 1
        consumer[i] = index[cons]
    # norms passed on through layout nodes; walk order visits a node's consumer first
    moves = [False] * n
    source = list(range(n))
    for i, fn in enumerate(nodes):
        c = consumer[i]
        if not skip[i] and uses[i] == 1 and moves[c] and not skip[c]:
            source[i] = source[c]
        moves[i] = _moves_only(fn)
    measure = [not skip[i] and source[i] == i for i in range(n)]
    covered = [False] * n
    chosen: dict[int, list] = {}
    for i in range(n - 1, -1, -1):
        if not measure[i] or covered[i]:
            continue
        p = consumer[i] if uses[i] == 1 else i
        entry = chosen.get(p)
        if entry is None:
            entry = chosen[p] = [p if (measure[p] and not covered[p]) else -1, []]
            covered[p] = True
        for j, (child, _) in enumerate(nodes[p].next_functions):
            c = index.get(child) if child is not None else None
            if c is not None and measure[c] and uses[c] == 1 and not covered[c]:
                entry[1].append((j, c))
                covered[c] = True
    copies = [i for i in range(n) if source[i] != i]
    return HookPlan([(p, k, tuple(pairs)) for p, (k, pairs) in chosen.items()], n,
                    copies, [source[i] for i in copies])


def _add_shards(values: np.ndarray, shards: list[tuple[int, Any, float]], missing: float) -> None:
    """Norms of nodes whose gradients were DTensors: the local squares of every such node summed over
    the shards in one all-reduce (every rank ran the same graph: the same list, in the same order),
    plus any plain outputs of the same node."""
    metas = [(i, g) for i, (_, g, _) in enumerate(shards) if g is not None]
    sq = np.array([v for _, _, v in shards], dtype=np.float64)
    if metas:
        idx = [i for i, _ in metas]
        sq[idx] = shard_totals([g for _, g in metas], torch.from_numpy(sq[idx])).cpu().numpy()
    totals: dict[int, float] = {}
    for (k, _, _), v in zip(shards, sq):
        totals[k] = totals.get(k, 0.0) + float(v)
    for k, v in totals.items():
        base = values[k]
        values[k] = math.sqrt(v + (base * base if base != missing and base == base else 0.0))


def _device_norm(g: torch.Tensor) -> torch.Tensor:
    """A 0-d float32 norm computed where the gradient lives (no host sync)."""
    g = norm_values(g)
    with torch.no_grad():
        if g.dtype is torch.float32:
            return torch.linalg.vector_norm(g)
        return torch.linalg.vector_norm(g, dtype=torch.float32)


def prepare_inputs(inputs: Sequence[Any]) -> tuple[Any, ...]:
    """Float input tensors as fresh leaves requiring grad (what ``trace`` does), so the
    graph, and so the node ids, match a trace of the same batch."""
    return tuple(t.detach().clone().requires_grad_(True)
                 if isinstance(t, torch.Tensor) and t.is_floating_point() else t for t in inputs)


class NodeNormSampler:
    """Per-node gradient norms of one backward pass.

    ``model`` (or ``named_parameters``) names the parameters. Use it only on the
    steps you sample: each hooked node costs a small kernel and a Python call.
    """

    def __init__(self, model: nn.Module | None = None,
                 named_parameters: Iterable[tuple[str, torch.Tensor]] | None = None) -> None:
        if named_parameters is None:
            named_parameters = model.named_parameters() if model is not None else ()
        self._params = list(named_parameters)
        self._param_names = {id(p): name for name, p in self._params}
        self.hook_calls = 0          # norms measured by hooks, over the sampler's life (tests use it)
        self.last_n_nodes = 0
        self.last_detail: tuple[str, dict | None] | None = None   # see ``sample(detail=...)``

    def hooked_backward(self, nodes: Sequence[Any], backward: Callable[[], Any],
                        skip: Sequence[bool] | None = None, missing: float = float("nan"),
                        plan: "HookPlan | None" = None) -> np.ndarray:
        """Run ``backward`` with norm hooks covering ``nodes`` (``walk()``'s list for the roots
        ``backward`` differentiates) but those where ``skip[k]`` is true.

        Returns float64 norms aligned with ``nodes``; ``missing`` (default NaN) where not
        measured, where the node never ran or where every incoming gradient was None. What
        ``sample`` runs, and what the recorder calls directly with its cached plans.

        ``plan`` (from ``hook_plan``, cacheable per graph structure) hooks about a third of
        the nodes: a node consumed by exactly one other node receives exactly the gradient
        its consumer produced for it, so the consumer's post hook (which sees its own
        incoming and outgoing gradients) measures both; a node consumed only by a view or
        transpose gets that node's norm. Without a plan: a prehook on every node.

        On the CPU a norm is one BLAS dot on a numpy view of the gradient (2-3x cheaper than
        a torch norm kernel); elsewhere a 0-d norm tensor, all stacked and copied to the host
        once. Hooks are not removed (that would cost as much again): they go inert when
        ``backward`` returns and die with the graph.
        """
        # over 60 lines: a hot path whose hooks are closures over this call's accumulators (host, dev, shards)
        n = len(nodes)
        host: list[Any] = [None] * n              # squared norms computed on the host (CPU grads)
        dev: dict[int, torch.Tensor] = {}         # norms computed on the device (0-d tensors)
        shards: list[tuple[int, Any, float]] = []  # DTensor gradients: (node, the DTensor, local squared norm)
        live = [True]

        def put_one(k: int, g: torch.Tensor) -> None:
            if type(g) is not _TENSOR and is_dtensor(g):      # tensor parallelism: summed over shards below
                g = settled(g)
                shards.append((k, g, float(local_squares([g], _CPU)[0])))
                return
            sq = _host_sq(g)
            if sq is None:
                dev[k] = _device_norm(g)
            else:
                host[k] = sq

        def put(k: int, grads: tuple) -> None:
            if len(grads) == 1:
                if grads[0] is not None:
                    put_one(k, grads[0])
                return
            gs = [g for g in grads if g is not None]         # a node with several outputs
            if any_dtensor(gs):
                for g in gs:
                    if is_dtensor(g):
                        put_one(k, g)
                    else:
                        shards.append((k, None, float(local_squares([g], _CPU)[0])))
                return
            if gs:
                sqs = [_host_sq(g) for g in gs]
                if None in sqs:
                    dev[k] = torch.linalg.vector_norm(torch.stack([_device_norm(g).to(gs[0].device) for g in gs]))
                else:
                    host[k] = sum(float(v) for v in sqs)

        def make_pre(k: int) -> Callable:
            def hook(grad_outputs):
                if live[0]:
                    put(k, grad_outputs)
            return hook

        def make_post(k: int, pairs: tuple) -> Callable:
            def hook(grad_inputs, grad_outputs):
                if not live[0]:
                    return
                if k >= 0:
                    put(k, grad_outputs)
                for j, c in pairs:
                    g = grad_inputs[j]
                    if g is not None:
                        put_one(c, g)
            return hook

        try:
            if plan is not None:
                for p, k, pairs in plan.hooks:
                    if pairs:
                        nodes[p].register_hook(make_post(k, pairs))
                    else:                            # a prehook: torch wraps fewer tensors for it
                        nodes[p].register_prehook(make_pre(k))
            elif skip is None:
                for k, fn in enumerate(nodes):
                    fn.register_prehook(make_pre(k))
            else:
                for k, fn in enumerate(nodes):
                    if not skip[k]:
                        fn.register_prehook(make_pre(k))
            backward()
        finally:
            live[0] = False
        values = np.full(n, missing)
        ran = [k for k, v in enumerate(host) if v is not None]
        if ran:
            values[ran] = np.sqrt(np.array([host[k] for k in ran], dtype=np.float64))
        if dev:
            keys = list(dev)
            parts = [dev[k] for k in keys]
            with torch.no_grad():
                try:
                    stacked = torch.stack(parts)
                except RuntimeError:                 # mixed devices / dtypes
                    stacked = torch.stack([t.to(parts[0].device, torch.float32) for t in parts])
            values[keys] = stacked.to("cpu", torch.float64).numpy()
        if shards:
            _add_shards(values, shards, missing)
        self.hook_calls += len(ran) + len(dev) + len(shards)
        if plan is not None and len(plan.copies):
            values[plan.copies] = values[plan.sources]
        return values

    def sample(self, roots: torch.Tensor | Sequence[torch.Tensor], backward: Callable[[], Any] | None = None,
               inputs: Sequence[Any] = (), *, unscale: torch.Tensor | float | None = None,
               params: bool = True, root_grad: float = 1.0, detail: str | None = None,
               id_roots: Sequence[Any] | None = None) -> dict[str, float | None]:
        """Run ``backward`` (default ``roots.backward()``) and return the gradient norm at every node.

        ``detail``: the id of one op/input node (e.g. the one selected in the window) whose
        full gradient statistics (``stats.tensor_stats``, histogram included) are kept in
        ``last_detail`` as ``(id, stats)``; None when that node did not run.

        ``inputs``: the batch's input tensors (their position gives ``input:<i>``).
        ``unscale``: divide the op/input/leaf norms by it (e.g. the GradScaler scale
        times 1/k for a loss divided by k), so they read as for an unscaled loss.
        ``params``: also report ``param:<name>`` as the norm of ``p.grad`` after
        backward (None when ``p.grad`` is None). ``root_grad``: what ``loss`` reports.
        ``id_roots``: autograd nodes of the graph whose subgraph is numbered (and measured)
        instead of the whole graph -- e.g. the ``nll_loss`` node of a label-smoothed
        cross-entropy, whose subgraph is the script's graph as a trace sees it; the nodes
        outside it get no id. Consumers are counted in the whole graph, so a node that
        also feeds the nodes outside is measured by its own hook.
        Returns ``{node_id: norm}``; a node whose hook never ran maps to None.
        """
        # over 60 lines: one sampled backward in order (number, hook, run, read parameters) over one node list
        roots = [roots] if isinstance(roots, torch.Tensor) else list(roots)
        input_names = {id(t): i for i, t in enumerate(inputs)
                       if isinstance(t, torch.Tensor) and t.requires_grad}
        nodes, edges = walk([r.grad_fn for r in roots])
        if id_roots is None:
            ids: list[str | None] = node_ids_for(nodes, self._param_names, input_names)
        else:
            numbered = walk(id_roots)[0]
            known = dict(zip(numbered, node_ids_for(numbered, self._param_names, input_names)))
            ids = [known.get(fn) for fn in nodes]
        self.last_n_nodes = len(nodes)
        self.last_detail = None
        # parameters: p.grad after backward (as trace); nodes outside id_roots' subgraph: not shown
        skip = [nid is None or nid.startswith("param:") for nid in ids]
        plan = hook_plan(nodes, edges, skip)
        del edges
        live = [True]
        if detail is not None and detail in ids:
            def keep_detail(grad_outputs):
                gs = [g for g in grad_outputs if g is not None]
                if live[0] and gs:
                    gs = whole(gs)                       # DTensors gathered (every rank samples the same node)
                    self.last_detail = (detail, tensor_stats(gs if unscale is None else [g / unscale for g in gs]))
            nodes[ids.index(detail)].register_prehook(keep_detail)

        def run() -> None:
            if backward is None:
                torch.autograd.backward(roots)
            else:
                backward()

        try:
            values = self.hooked_backward(nodes, run, skip, missing=-1.0, plan=plan)
        finally:
            live[0] = False
            del nodes
        if unscale is not None:
            measured = values >= 0
            values[measured] /= float(unscale)
        result: dict[str, float | None] = {nid: (None if v == -1.0 else v) for nid, v in zip(ids, values.tolist())
                                           if nid is not None}
        if params:
            present = [(f"param:{name}", p.grad) for name, p in self._params if p.grad is not None]
            for name, p in self._params:
                if p.grad is None:
                    result[f"param:{name}"] = None
            if present and any_dtensor(g for _, g in present):      # whole-tensor norms, one all-reduce
                whole_norms = np.sqrt(whole_squares([g for _, g in present])).tolist()
                result.update(zip([nid for nid, _ in present], whole_norms))
            elif present:
                with torch.no_grad():
                    norms = torch._foreach_norm([norm_values(g) for _, g in present])
                    host = torch.stack([t.to(norms[0].device, torch.float32) for t in norms]).cpu().tolist()
                result.update(zip([nid for nid, _ in present], host))
        for rid in root_ids(len(roots)):
            result[rid] = float(root_grad)
        return result
