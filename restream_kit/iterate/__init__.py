"""Iterating on a rule: sweeps over parameters, reusing a recorded run, explaining a row.

``sweeps`` (``rk.sweep``), ``reuse`` (``replay(..., reuse=...)``: re-run only what changed),
``cells`` (what the workbench keeps of a ``--sweep`` or ``--baseline`` cell),
``explain`` (``rk.explain``: the causal chain behind one output row), ``score``
(``rk.score``: precision, recall and time to detect against labels).

May import: everything below the API (model, compiler, runtime, I/O, planner, history, engines)
and ``restream_kit.api``, which imports this package lazily. Never the command line or the
notebook layer.
"""
