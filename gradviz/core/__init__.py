"""The engine: never imports Qt. Its rooms, from the bottom up (a room imports only rooms below it;
pyproject.toml's import-linter contracts and tests/test_layers.py check it):

    runtime                      the process: errors, atomic files, devices, formatting, patches
    native                       the optional C++ accelerator
    stats | script               numbers from tensors; the user's model
    trace                        forward capture, the grad_fn walk, the graph and its gradients
    layout | output              boxes and positions; colours, marks and data files
    diagnosis | train | attribution   the checklist; gradviz's trainer; input attribution
    loop                         the training-loop doctor: findings about the user's own loop
    record                       run files: watch() writes them, the reader and analysis read them
"""
