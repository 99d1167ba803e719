"""The program model: what a user writes, and nothing else.

``state`` declarations, ``@on`` handlers with ``emit`` and ``schedule`` (``program``), window
declarations (``windows``), durations, parameters (``params``), the values state may hold
(``values``, their codec) and the errors every layer raises (``errors``).

May import: the standard library only, and the compiler (``restream_kit.compiler``) from
``Program`` alone, lazily, because loading a program is compiling it (expand windows, check
the handlers). Never the runtime, I/O, the planner, the engines or anything above them.
"""
