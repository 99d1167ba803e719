"""Views of restream_kit for notebooks and the README (plotly figures, widgets).

The notebook layer, the top of the stack. May import all of ``restream_kit`` (preferably its
public API), ipywidgets, plotly and anywidget; never ``pyspark`` (Spark is reached through
``restream_kit.replay``). Nothing in ``restream_kit`` imports this package at import time:
``%load_ext restream_kit`` calls ``restream_kit.load_ipython_extension``, which imports
``widgets.magics`` (the ``%%restream`` magics); the views are imported when a cell runs.
"""

__all__: list[str] = []
