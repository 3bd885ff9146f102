"""The bottom of render: what every drawing part uses and nothing of render's own below it.

Themes, fonts, box text and measured box sizes (style, metrics: per thread), Qt start-up (qtcompat),
the painting of far labels and fold boxes, frame shapes and which modules get a frame (frame_shapes,
frame_nesting: no Qt), k-d chunks and point look-ups (tiles), dense edge fans, paint counters.
Imports only the engine (gradviz.core) and Qt.
"""
