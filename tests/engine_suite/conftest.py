"""The shared engine suite: what every engine must do, checked against the serial engine.

The engine axis is the ``engine`` fixture (``tests/conftest.py``), parametrized over
``engine_matrix.ENGINE_PARAMS``, which comes from the engine registry
(``restream_kit.engines.engine_names``) plus the Spark engine's cluster placements. A test
that takes ``replay_on`` (or ``engine``) runs once per engine, with the engine in its id
(``test_x[serial]``, ``test_x[spark]``...); ``replay_on`` checks every engine's result against
the serial engine's. Known gaps are marked ``notyet`` with the exception they raise. The other
tests here check what the engines share (window expansion, the sample domains, the naive
interpreter the serial engine must equal).
"""
