"""What leaves the engine for eyes and files, before any Qt: node colours, diagnosis marks and the
graph's data files.

Owns: ``colors`` (the gradient-norm colour map), ``structure_colors`` (colours without values),
``marks`` (cut edges and badges from findings: what the window and ``export --check`` draw) and
``export`` (JSON node-link, GraphML, DOT writers).
May import: ``runtime``.
"""
