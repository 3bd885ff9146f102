"""Numbers from tensors: exact statistics, gradient norms per step, and the sharded versions of both.

Owns: ``tensors`` (norm, mean, std, histograms in bounded chunks), ``steps`` (``StepStats``: one
step's gradient/weight/update norms), the norm strategies (``step_numbers`` the interface and what a
step measures, ``norm_strategies`` choosing one; ``norms_host``, ``norms_device``, ``norms_sharded``),
DTensor/FSDP2 as gradviz reads them (``sharding``, ``shard_sum``), adaptive clipping
(``adaptive_clip``, measured by ``StepStats``) and how often update ratios are measured
(``update_cadence``).
May import: ``runtime`` and the optional ``native`` accelerator. Never the user's script nor a graph.
A new norm strategy is a ``norms_<kind>.py`` here implementing ``step_numbers.NormStrategy``,
plus one branch in ``norm_strategies.make_strategy``.
"""
