"""Which module an op belongs to when the forward was not watched (``gradviz.trace(loss, model=model)``).

A loss computed before gradviz was called carries no record of the modules its forward passed through:
only the parameters name modules (``transformer.h.0.mlp.c_fc.weight``). An op that reads a parameter is in
that parameter's module. The others are placed by *when* forward created them: every autograd node carries
a sequence number (``node._sequence_nr()``, increasing in forward order on the thread that ran it), so each
module's parameter-reading ops bound an interval of forward time, its submodules' intervals nested inside.

- An op inside a module's interval is in the innermost module whose interval holds it: softmax between
  ``attn.c_attn`` and ``attn.c_proj`` is in ``attn``; the residual add between ``h.0.attn`` and
  ``h.0.ln_2`` is in ``h.0``.
- An op between two repeated blocks (siblings of one type with the same parameter shapes) that is
  computed from the earlier block's values alone, or from values that block read itself (the residual
  stream of ``x + f(x)``), is that block's last step: GPT-2's residual add at the end of ``h.0`` is in
  ``h.0``, as a watched forward (``gradviz.capture``) says. So consecutive blocks feed each other
  directly and fold (``core/layout/folding.py``). An op that mixes two children (parallel heads summed:
  the sum reads a head this one never read) stays in their parent, so the heads do not feed each other
  and do not fold. Between other children (``c_attn`` and ``c_proj``) ops stay in the parent.
- Repeats begin and end alike, so a run's two ends split each gap between a repeat's end and the next
  one's beginning: the ops the last repeat also ends with end each repeat; the rest begin the next
  one when the ops just before the first repeat are the same (BERT's layers begin with the query's
  reshape of the previous output; nn.Transformer's with attention's input transpose, which its first
  layer, reading the grad-free input, lacks, as with capture); the last repeat keeps no more than the
  gaps end with (after BERT's last layer comes the pooler's first step). A different first member of
  the run's type just before it (T5's first block owns the relative attention bias) ends as the
  repeats do, when the ops after it repeat that ending and come from it alone.
- After the whole model's interval nothing bounds the last child: the loss is not part of it. There an
  op joins the last block of a run only as the same step its previous sibling ended with (by op name),
  so the last block of a stack ends as the others do and the loss stays outside.
- An op reading a tied parameter (one tensor under several names, ``lm_head.weight`` *is*
  ``wte.weight``): the reads in forward order go to the names in the model's declaration order when
  there are as many of each, else to the module enclosing all the names.

What no graph can tell: an op the parent applies to each block's output (``tanh(layer(x))`` in a loop)
looks like the block's own last step, so without ``capture`` such blocks fold with it inside. Sequence
numbers count per thread: a forward split across threads (``nn.DataParallel``'s replicas) interleaves
them, and its placement is not to be trusted. A graph whose ops carry no sequence number falls back to
the nearest parameter-reading ops by edges.
"""
from __future__ import annotations

import bisect

import networkx as nx

__all__ = ["place_ops_by_parameters"]


def _common(a: str | None, b: str | None) -> str | None:
    """The innermost module enclosing both (None: no information on that side)."""
    if a is None:
        return b
    if b is None:
        return a
    out = []
    for x, y in zip(a.split("."), b.split(".")):
        if x != y:
            break
        out.append(x)
    return ".".join(out)


def _prefixes(path: str) -> list[str]:
    parts = path.split(".") if path else []
    return [".".join(parts[:k]) for k in range(1, len(parts) + 1)]


def _within(module: str, outer: str) -> bool:
    return outer == "" or module == outer or module.startswith(outer + ".")


def place_ops_by_parameters(g: nx.DiGraph, order: list[str], module_types: dict[str, str],
                            sequence: dict[str, int] | None = None,
                            ties: dict[str, list[str]] | None = None) -> None:
    """Give each op without a module one from the parameters (``order``: producers first; ``sequence``:
    op id -> its autograd node's sequence number; ``ties``: parameter name -> all names of that tensor)."""
    nodes = g.nodes
    own = _direct_owners(g, order, sequence or {}, ties or {})
    ops = [nid for nid in own if not nodes[nid].get("module")]
    if sequence and all(nid in sequence for nid in own):
        placed = _by_sequence(g, own, sequence, module_types)
    else:       # no forward order known: the nearest parameter-reading ops by edges
        up = _nearest(g, order, own, g.predecessors)
        down = _nearest(g, list(reversed(order)), own, g.successors)
        placed = {nid: own[nid] if own[nid] is not None else _common(up.get(nid), down.get(nid)) for nid in own}
    for nid in ops:
        found = placed.get(nid)
        if found:
            nodes[nid].update(module=found, module_type=module_types.get(found, ""))


def _direct_owners(g: nx.DiGraph, order: list[str], sequence: dict[str, int],
                   ties: dict[str, list[str]]) -> dict[str, str | None]:
    """Op id -> the module of the parameters it reads (None: it reads none)."""
    nodes = g.nodes
    own: dict[str, str | None] = {}
    for nid in order:
        if nodes[nid].get("kind") != "op":
            continue
        found = None
        for p in g.predecessors(nid):
            if nodes[p].get("kind") == "param" and nodes[p].get("param") not in ties:
                found = nodes[p]["module"] if found is None else _common(found, nodes[p]["module"])
        own[nid] = found
    for name, names in ties.items():
        pid = f"param:{name}"
        if pid not in g:
            continue
        readers = sorted((s for s in g.successors(pid) if s in own), key=lambda s: sequence.get(s, 0))
        modules = [n.rpartition(".")[0] for n in names]
        if len(readers) != len(modules) or not all(s in sequence for s in readers):
            enclosing = modules[0]
            for m in modules[1:]:
                enclosing = _common(enclosing, m)
            modules = [enclosing] * len(readers)
        for s, m in zip(readers, modules):
            own[s] = m if own[s] is None else _common(own[s], m)
    return own


class _Spans:
    """Each module's forward interval (first and last sequence number of its and its submodules'
    parameter-reading ops) and its children with one, in forward order."""

    def __init__(self, own: dict[str, str | None], sequence: dict[str, int]):
        self.lo: dict[str, int] = {}
        self.hi: dict[str, int] = {}
        for nid, module in own.items():
            if module is None:
                continue
            s = sequence[nid]
            parts = module.split(".") if module else []
            for k in range(len(parts) + 1):
                path = ".".join(parts[:k])
                if path not in self.lo or s < self.lo[path]:
                    self.lo[path] = s
                if path not in self.hi or s > self.hi[path]:
                    self.hi[path] = s
        self.children: dict[str, list[str]] = {}
        for path in self.lo:
            if path:
                self.children.setdefault(path.rpartition(".")[0] if "." in path else "", []).append(path)
        for kids in self.children.values():
            kids.sort(key=self.lo.__getitem__)
        self.starts = {p: [self.lo[k] for k in kids] for p, kids in self.children.items()}
        self.key: dict[str, tuple] = {}
        self.repeated: set[str] = set()
        self.types: dict[str, str] = {}

    def find_repeats(self, g: nx.DiGraph, module_types: dict[str, str]) -> None:
        """Siblings of one type with the same parameter names and shapes: blocks that repeat."""
        shapes: dict[str, list] = {}
        for _, attrs in g.nodes(data=True):
            if attrs.get("kind") != "param":
                continue
            name, shape = attrs.get("param", ""), tuple(attrs.get("shape") or ())
            for path in _prefixes(name.rpartition(".")[0]):
                if path in self.lo:
                    shapes.setdefault(path, []).append((name[len(path):], shape))
        count: dict[tuple, int] = {}
        for path in self.lo:
            if path:
                parent = path.rpartition(".")[0] if "." in path else ""
                self.key[path] = (parent, module_types.get(path, ""), tuple(sorted(shapes.get(path, []))))
                count[self.key[path]] = count.get(self.key[path], 0) + 1
        self.repeated = {p for p, k in self.key.items() if count[k] > 1}
        self.types = {p: k[1] for p, k in self.key.items()}

    def holds(self, path: str, s: int) -> bool:
        return self.lo[path] <= s <= self.hi[path]

    def child_holding(self, path: str, s: int) -> str | None:
        """The child of ``path`` whose interval holds ``s`` (the tightest, when reuse makes them overlap)."""
        kids = self.children.get(path, [])
        k = bisect.bisect_right(self.starts.get(path, []), s)
        if k and self.holds(kids[k - 1], s):
            return kids[k - 1]
        holding = [c for c in kids[:k] if self.holds(c, s)]
        return min(holding, key=lambda c: self.hi[c] - self.lo[c]) if holding else None

    def child_before(self, path: str, s: int) -> str | None:
        """The child of ``path`` that ended last before ``s``."""
        before = [c for c in self.children.get(path, []) if self.hi[c] < s]
        return max(before, key=self.hi.__getitem__) if before else None


def _by_sequence(g: nx.DiGraph, own: dict[str, str | None], sequence: dict[str, int],
                 module_types: dict[str, str]) -> dict[str, str | None]:
    """Op id -> module, from the forward intervals (see the module docstring)."""
    spans = _Spans(own, sequence)
    if "" not in spans.lo:
        return dict(own)
    spans.find_repeats(g, module_types)
    placed: dict[str, str | None] = {}
    start: dict[str, str] = {}            # op id -> the innermost module holding it (before any last step)
    tails: dict[str, list[str]] = {}      # module -> names of the ops placed in it after its interval ended
    tail_ops: dict[str, list[str]] = {}   # module -> those ops' ids (placed in it or below), in forward order
    nodes = g.nodes
    for nid in sorted(own, key=sequence.__getitem__):
        if own[nid] is not None:
            placed[nid] = own[nid]
            continue
        s = sequence[nid]
        inputs = [p for p in g.predecessors(nid) if p in own and placed.get(p) is not None]
        bounded = spans.holds("", s)
        module = ""
        while bounded:          # inside the innermost interval holding s
            inner = spans.child_holding(module, s)
            if inner is None:
                break
            module = inner
        # the last step of the child before: only into a repeated block (from the parent's view, inside)
        path = _last_step_path(g, placed, spans, module, s, inputs)
        op = nodes[nid].get("op", "")
        if bounded:
            ends = [i for i, m in enumerate(path) if m in spans.repeated]
        else:                   # after the model: only as the step the previous sibling ended with
            ends = [i for i, m in enumerate(path) if m in spans.repeated and _repeats_tail(spans, tails, m, op)]
        path = path[:ends[-1] + 1] if ends else []
        for m in path:
            tails.setdefault(m, []).append(op)
            tail_ops.setdefault(m, []).append(nid)
        start[nid] = module
        placed[nid] = path[-1] if path else module
    in_order = sorted(placed, key=sequence.__getitem__)
    numbers = [sequence[n] for n in in_order]
    for run in _runs(spans):
        _split_gaps(run, placed, start, tail_ops, (in_order, numbers), spans, g)
    return placed


def _runs(spans: _Spans) -> list[list[str]]:
    """Consecutive children of one parent that repeat (one type, one set of parameter shapes), in forward order."""
    out = []
    for kids in spans.children.values():
        run: list[str] = []
        for kid in [*kids, None]:
            if kid is not None and kid in spans.repeated and run and spans.key[run[-1]] == spans.key[kid]:
                run.append(kid)
                continue
            if len(run) > 1:
                out.append(run)
            run = [kid] if kid is not None and kid in spans.repeated else []
    return out


def _split_gaps(run: list[str], placed: dict, start: dict, tail_ops: dict, sequence: tuple, spans: _Spans,
                g: nx.DiGraph) -> None:
    """Between two repeats, which ops end the first and which begin the next: every repeat begins and ends
    alike. The ops the last repeat also ends with end each repeat (GPT-2's residual add: ``ln_f`` follows
    the last block as the next block follows the others); the rest of a gap begins the next repeat when
    the ops just before the first repeat are the same (BERT's layers begin with the query's reshape of
    the layer before's output; after the last layer comes the pooler's first step, not a reshape); and
    the last repeat keeps no more than the gaps end with."""
    def names(ops):
        return [g.nodes[n].get("op", "") for n in ops]

    gap = tail_ops.get(run[0], [])
    last = tail_ops.get(run[-1], [])
    ends = 0        # how many of the gap's ops the last repeat ends with too: those end a repeat
    while ends < len(gap) and ends < len(last) and names(gap[ends:ends + 1]) == names(last[ends:ends + 1]):
        ends += 1
    head = len(gap) - ends      # the rest begin the next repeat, if the first repeat begins so too
    for first in range(min(2, len(run) - 1)):   # else the second (nn.Transformer's first layer reads the grad-free
        if head and _split_heads(run[first:], head, gap, placed, tail_ops, sequence, spans, g, names):  # input)
            break
    for n in last[ends:]:           # after the last repeat, beyond how the others end: not its own
        placed[n] = start[n]
    if not head:
        _end_first_member(run, gap[:ends], placed, sequence, spans, g, names)


def _end_first_member(run: list[str], ending: list[str], placed: dict, sequence: tuple, spans: _Spans,
                      g: nx.DiGraph, names) -> None:
    """A different first member before the run (same type, other parameters: T5's first block owns the
    relative attention bias) ends as the repeats do: the ops after it that repeat the run's ending and
    come from it alone are its own, not loose in the parent (where they would keep the stack closed)."""
    parent = _parent(run[0])
    kids = spans.children.get(parent, [])
    i = kids.index(run[0])
    if not ending or i == 0 or spans.types.get(kids[i - 1]) != spans.types.get(run[0]):
        return
    first = kids[i - 1]
    in_order, numbers = sequence
    window = in_order[bisect.bisect_right(numbers, spans.hi[first]):bisect.bisect_left(numbers, spans.lo[run[0]])]
    ops = [n for n in window if placed[n] == parent][:len(ending)]
    if names(ops) != names(ending):
        return
    mine = set()
    for n in ops:
        if not all(_within(placed.get(p) or "", first) or p in mine for p in g.predecessors(n) if p in placed):
            return
        mine.add(n)
    for n in ops:
        placed[n] = first


def _split_heads(run: list[str], head: int, gap: list[str], placed: dict, tail_ops: dict, sequence: tuple,
                 spans: _Spans, g: nx.DiGraph, names) -> bool:
    """Give each repeat of ``run`` the last ``head`` ops of the gap before it, when the ops just before its
    first repeat are those too and each moved op feeds only the repeat it begins (q, k and v projections
    each reshape their own output: that is no beginning of the next one). Whether it was done."""
    prev_hi = max((spans.hi[k] for k in spans.children.get(_parent(run[0]), []) if spans.hi[k] < spans.lo[run[0]]),
                  default=-1)
    in_order, numbers = sequence        # the ops in forward order, and their sequence numbers
    window = in_order[bisect.bisect_right(numbers, prev_hi):bisect.bisect_left(numbers, spans.lo[run[0]])]
    before = [n for n in window if not _within(placed[n] or "", run[0])]
    if head > len(before) or names(gap[-head:]) != names(before[-head:]):
        return False
    moves = [(before[-head:], run[0])]
    for a, b in zip(run, run[1:]):
        ops = tail_ops.get(a, [])
        if len(ops) < head or names(ops[-head:]) != names(gap[-head:]):
            return False
        moves.append((ops[-head:], b))
    for ops, target in moves:
        moved = set(ops)
        for n in ops:
            if not all(q in moved or _within(placed.get(q) or "", target) for q in g.successors(n) if q in placed):
                return False
    for ops, target in moves:
        for n in ops:
            placed[n] = target
    for a in run[:-1]:
        tail_ops[a] = tail_ops[a][:-head]
    return True


def _parent(path: str) -> str:
    return path.rpartition(".")[0] if "." in path else ""


def _last_step_path(g: nx.DiGraph, placed: dict[str, str | None], spans: _Spans, module: str, s: int,
                    inputs: list[str]) -> list[str]:
    """The children, grandchildren, ... of ``module`` that ended before ``s`` and hold every input op:
    made in them, or a value they read themselves (the residual stream entering a block, ``x + f(x)``;
    a sum of two parallel heads reads the other head's value, which this one never read)."""
    path = []
    while inputs:
        before = spans.child_before(module, s)
        if before is None or not all(_within(placed[p], before) or _reads(g, placed, p, before) for p in inputs):
            break
        path.append(before)
        module = before
    return path


def _reads(g: nx.DiGraph, placed: dict[str, str | None], value: str, module: str) -> bool:
    """Whether an op placed in ``module`` (or below) reads ``value``'s output."""
    return any(placed.get(q) is not None and _within(placed[q], module) and placed[q] != "" for q in g.successors(value))


def _repeats_tail(spans: _Spans, tails: dict[str, list[str]], module: str, op: str) -> bool:
    """Whether ``op`` is the next step of ``module``'s tail as its previous sibling, a repeat of it, ended."""
    parent = module.rpartition(".")[0] if "." in module else ""
    kids = spans.children.get(parent, [])
    i = kids.index(module)
    if i == 0 or spans.key.get(kids[i - 1]) != spans.key.get(module):
        return False
    prev = kids[i - 1]
    done, theirs = tails.get(module, []), tails.get(prev, [])
    return len(done) < len(theirs) and theirs[len(done)] == op


def _nearest(g: nx.DiGraph, order: list[str], own: dict[str, str | None], before) -> dict[str, str | None]:
    """For each op (in ``order``), the module of the nearest op with one among those ``before`` it."""
    best: dict[str, tuple[int, str | None]] = {}
    for nid in order:
        if nid not in own:
            continue
        if own[nid] is not None:
            best[nid] = (0, own[nid])
            continue
        found: tuple[int, str | None] = (1 << 30, None)
        for p in before(nid):
            if p not in best:
                continue
            dist, module = best[p]
            if module is None:
                continue
            if dist + 1 < found[0]:
                found = (dist + 1, module)
            elif dist + 1 == found[0]:
                found = (found[0], _common(found[1], module))
        best[nid] = found
    return {nid: module for nid, (_, module) in best.items()}
