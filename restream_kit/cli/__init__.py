"""The ``restream`` command line (``main``), its progress display and partial outputs.

May import: anything in ``restream_kit`` (the command line is the top of the core). Never the
notebook layer (``widgets``, ipywidgets, plotly).
"""

from __future__ import annotations

from .main import COMMANDS, build_parser, main

__all__ = ["main", "build_parser", "COMMANDS"]
