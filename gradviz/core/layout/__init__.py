"""Which boxes a graph is drawn with, and where: grouping, folding and the layered layout.

Owns: ``grouping`` (``collapse``: module groups at a depth), ``folding`` (repeated blocks as one box),
``layered`` (the built-in Sugiyama layout) with ``order`` (crossing reduction) and ``coords`` (x
positions), ``types`` (``LayoutOptions``, ``Layout``, box sizes) and ``graphviz_dot`` (the optional
Graphviz engine giving the same ``Layout``).
May import: ``runtime`` and ``trace`` (the module table). Never Qt: box sizes come in as data.
"""
