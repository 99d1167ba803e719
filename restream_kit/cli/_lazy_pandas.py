"""pyarrow without pandas until something imports pandas: 0.35 s less of every command.

pyarrow looks for pandas the first time it converts Python values (``pa.array`` of a list,
a zoned timestamp's ``as_py``), to know whether they could be pandas objects, and imports it
when it is installed: about 0.35 CPU-s of a ``restream replay`` that never sees a
DataFrame (SPEC section 7; issue 32 measures whole processes). :func:`defer_pandas` hides
pandas from that first look, so that pyarrow takes it for absent, and then watches for its
import: when anything imports pandas later (a handler, Spark, ``score`` with a DataFrame),
pyarrow is told as soon as pandas has run, before the importer gets the module, and converts
pandas objects as usual from then on.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys

import pyarrow as pa

__all__ = ["defer_pandas"]

_PANDAS = "pandas"


class _Hide(importlib.abc.MetaPathFinder):
    """Makes ``import pandas`` fail, for pyarrow's first look only."""

    def find_spec(self, name, path=None, target=None):
        if name == _PANDAS:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


class _Watch(importlib.abc.MetaPathFinder):
    """Finds pandas as the other finders do, with a loader that tells pyarrow once it ran."""

    def find_spec(self, name, path=None, target=None):
        if name != _PANDAS:
            return None
        sys.meta_path.remove(self)  # once: the spec below comes from the other finders
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.loader is not None:
            spec.loader = _TellArrow(spec.loader)
        return spec


class _TellArrow(importlib.abc.Loader):
    """pandas' own loader, then pyarrow told that pandas is there."""

    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        # pandas sees its own loader, as if nothing stood between.
        module.__loader__ = module.__spec__.loader = self.loader
        self.loader.exec_module(module)
        # Asking pyarrow for a pandas object makes it look again, and find pandas now.
        pa.array([], pa.int64()).to_pandas()


def defer_pandas() -> None:
    """Let pyarrow run without pandas until pandas is imported (see the module doc).

    Does nothing when pandas is already imported, or when pyarrow looked for it before."""
    if _PANDAS in sys.modules or any(isinstance(f, _Watch) for f in sys.meta_path):
        return
    hide = _Hide()
    sys.meta_path.insert(0, hide)
    try:
        pa.array([0])  # pyarrow's first look for pandas: not found
    finally:
        sys.meta_path.remove(hide)
    if _PANDAS not in sys.modules:
        sys.meta_path.insert(0, _Watch())
