"""Benchmarks of restream_kit, each a ratio against a baseline measured in the same run.

``python -m bench`` runs them all, ``python -m bench NAME [options]`` one of them; see
``bench/__main__.py`` for the list. Results go to ``bench/results/`` (not committed).
"""

__all__: list[str] = []
