"""Views of restream_kit for notebooks and the README (plotly figures, widgets).

The notebook layer, the top of the stack. May import all of ``restream_kit`` (preferably its
public API), ipywidgets, plotly and anywidget; never ``pyspark`` (Spark is reached through
``restream_kit.replay``). Nothing in ``restream_kit`` imports this package at import time:
the magics import it when a cell runs.
"""

__all__: list[str] = []
