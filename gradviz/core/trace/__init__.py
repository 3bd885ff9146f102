"""From a model and its loss to the traced graph: forward capture, the ``grad_fn`` walk, the networkx
graph and the gradients through it.

Owns: ``tracer`` (``trace``/``trace_run``, the entry points) and ``options`` (``TraceOptions``);
``capture`` (module and source line of every call, graph cuts), ``finite_watch`` (where NaN/inf are
born in forward), ``walk`` (the iterative walk and node facts), ``graph_build`` (nodes and edges),
``grad_fill`` (the backward hooks and ``grad_*`` attributes), ``cut_tape``/``cut_branches`` (the
computations cut off from the loss), ``partial_trace`` (the graph of a forward that raised),
``details`` (statistics on demand), ``memory``, ``modules`` (the module table), ``comm_nodes``
(FSDP/DTensor collectives) and ``nodenorms`` (per-node norms on sampled training steps).
May import: ``runtime``, ``stats``, ``script``.
"""
