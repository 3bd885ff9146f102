"""Qt drawing shared by the window and image export. Its rooms, from the bottom up (a room imports only
rooms below it; pyproject.toml's import-linter contract and tests/test_layers.py check it):

    primitives   themes, fonts and measured box sizes; the painting helpers the items share (far labels,
                 fold boxes, frame shapes and nesting, k-d chunks, dense fans, paint counters); Qt start-up
    parts        the scene's graphics items and their builders: node and edge batches, long edges, module
                 frames, the node painter and colours; what they read of the scene (scene_reads: Protocols)
    scene        GraphScene, which builds the parts, and what it adds over them: marks, the failing call's
                 note, the overview picture of a big graph; what it shows (header: ShownState)
    export       images and files of a scene: the export table (formats: loads no Qt), image export, SVG in
                 parts, the legend; the attribution figure
"""
