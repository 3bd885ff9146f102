"""Record training done by a library's trainer: one callback added to an existing script.

- ``gradviz.integrations.huggingface.GradvizCallback(path, every=N)`` for ``transformers.Trainer``;
- ``gradviz.integrations.lightning.GradvizCallback(path, every=N)`` for ``pytorch_lightning.Trainer``
  (and ``lightning.pytorch``).

Each wraps ``gradviz.watch``: the run file holds what ``watch`` records (loss, gradient norms,
update ratios, node norms every N steps, each DDP rank its own file) and opens in
``gradviz runs show`` and the app. The trainer packages stay optional: ``import gradviz``
never imports them, and this package imports one only when its module is imported.
"""
