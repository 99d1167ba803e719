"""Views of restream_kit for notebooks and the README (plotly figures, widgets)."""

__all__: list[str] = []
