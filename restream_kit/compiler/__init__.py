"""The compiler passes: from a loaded program to code the runtime can run.

``scopes`` (the one resolver of which name means which state inside a function),
``expand_windows`` (window declarations become plain handlers and state), ``compile`` (handlers
rewritten to work on plain dicts through a runtime), ``inline`` (the inlined event loop of the
serial engine), ``lower`` (handlers lowered to expressions the Spark engine runs as
columns, or a clear refusal) and ``columns`` (the one evaluator of lowered expressions as
polars columns, with Python's meaning: the prefix path's and the column re-run's).

May import: the program model (``restream_kit.model``). Never the runtime, I/O, the planner,
the engines or anything above them.
"""
