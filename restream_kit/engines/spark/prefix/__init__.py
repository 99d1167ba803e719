"""The prefix path: a program that lowers to column expressions runs its epochs in parallel,
joined by a prefix of their state deltas (``_driver``), one Spark job per round (``_jobs``),
each epoch evaluated as columns (``_columnar``) and committed as it goes (``_commits``)."""
