"""What a replay reads and writes: logs, epochs, results, progress, checkpoints, the catalog.

``log`` (the event log and its canonical form), ``epochs`` (how a log is cut), ``result``
(result tables and metrics), ``progress`` (the events observers receive), ``emits`` (output
schemas), ``samples`` (the sample logs and programs shipped in the package), ``checkpoint``
(epoch state on disk), ``catalog`` (recorded runs) and ``compare`` (the diff of two results).

May import: the program model, the compiler and the runtime (``model``, ``compiler``,
``runtime``). Never the planner, the engines, the API, the command line or the notebook layer.
"""
