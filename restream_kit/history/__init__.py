"""A run's history: what each stage read of other stages' state, recorded while replaying.

``probes`` (the read sites a recording run watches), ``recorder`` (the recorder the serial
engine runs with ``history=True``, and the stored :class:`~.recorder.History`), ``identity``
(which stages of two versions of a program are the same). The reuse of a run
(``restream_kit.iterate.reuse``) decides from these what it can keep.

May import: the program model, the compiler, the runtime, I/O and the planner. Never the
engines (the serial engine records through this package), the API, the command line or the
notebook layer.
"""
