"""The graphics items a scene is made of, and their builders: node and edge batches (items, edges),
long straight edges and clipped overlay paths, module frames (frames, frame_bands), the node painter
and colours. They read the scene through the Protocols of scene_reads, never GraphScene itself.
Imports primitives (and the engine, Qt).
"""
