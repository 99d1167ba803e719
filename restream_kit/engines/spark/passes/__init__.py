"""The pass path: one parallel Spark job per stage of the plan, over the whole log.

Read in this order: ``_plan`` (from the planner's Plan to passes), ``_driver`` (runs a replay's
passes and assembles the result), ``_jobs`` (one Spark job per pass), ``_sources`` (where a
pass's input comes from: one typed source each), ``_task`` (one pass in one Spark task); the
rest serve them: what the jobs share (``_setup``, ``_sql``, ``_machine``, ``_ranges``), the
log's arrangement (``_packing``, ``_local_arrangement``, ``_zipped``), what passes send each
other (``_rows``, ``_shipping``, ``_copies``, ``_lookups``, ``_emitted``) and checkpoints
(``_epochs``, ``_boundaries``, ``_start_shares``, ``_carry``)."""
