"""Input attribution: integrated gradients, saliency and gradient x input, and their figure data.

Owns: ``attribute`` (the methods and their completeness check), ``paths`` (baselines and the
integration path) and ``figure`` (what a picture of an attribution shows, as plain data).
May import: ``runtime``, ``script``.
"""
