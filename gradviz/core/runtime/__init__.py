"""The process gradviz runs in: the few things every other room leans on, and nothing else.

Owns: the errors gradviz raises on purpose (``errors``), atomic file writes (``atomic``), the cache folder
(``cache``), paths checked before use (``paths``), one-line messages (``messages``), which process does the
work when the user's code forks (``ownership``), what of the script is being called (``script_stage``), devices and
thread counts (``devices``, ``threads``), the one number formatter (``formatting``), whose code a stack
frame is (``locations``), interrupts and timeouts (``interrupts``), the collector held while starting
(``gc_pause``), the start-up clock, the version, and ``process_patches``: the one registry of every
change gradviz makes to the process (each with its fallback).
May import: only the standard library, torch and numpy. It is the bottom room.
"""
