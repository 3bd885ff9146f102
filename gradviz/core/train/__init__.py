"""gradviz's own training loop: the ``Trainer`` and what it is configured with.

Owns: ``trainer`` (zero_grad -> forward -> backward -> clip -> step -> schedule, with the step
statistics), ``options`` (``TrainConfig``, optimizers, schedules and their validation) and
``label_smoothing``.
May import: ``runtime``, ``stats``, ``script``, ``trace``.
"""
