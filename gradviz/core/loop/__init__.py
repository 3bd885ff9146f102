"""The training-loop doctor: bugs that live in the user's own loop, not in the model (no Qt here).

``doctor.LoopDoctor`` watches a running loop through public global hooks (the optimizers' step hooks,
the backward tap's call for each backward, a global module forward pre-hook on the steps it checks) and
keeps one finding per kind: ``grad-not-cleared`` / ``grad-accumulation``, ``graph-kept-alive``,
``graph-reused``, ``frozen-but-updated``, ``not-in-optimizer``, ``lr-zero``, ``lr-schedule``,
``memory-growing``, ``loop-exception``. ``kept_graphs``: the kept graphs and the memory they hold
(``saved_bytes``: what autograd saves on the checked steps); ``graph_marks``: tagging a step's autograd
nodes and finding an earlier step's among them; ``advice``: the findings' texts (the reference articles' advice); ``trend``: pure functions
over recorded steps (``loss-flat``). The recorder (``record``) stores the findings in the run file.
May import: diagnosis (the ``Finding``), stats, runtime; never record (it is above).
"""
