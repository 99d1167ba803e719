"""The pass path: one parallel Spark job per stage of the plan, over the whole log.

Read in this order: ``_plan`` (from the planner's Plan to passes), ``_driver`` (runs the passes
and assembles the result), ``_task`` (one pass in one Spark task); the rest serve them: the log's
arrangement (``_setup``, ``_local_arrangement``, ``_zipped``), what passes send each other
(``_rows``, ``_shipping``, ``_copies``, ``_lookups``, ``_emitted``) and checkpoints
(``_epochs``, ``_boundaries``, ``_start_shares``)."""
