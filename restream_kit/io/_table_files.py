"""Output tables held as Parquet files, read when asked (see docs/scale.md, "Large output
tables").

A large table an engine wrote as one Parquet file in processing order (``_table_parts``) is
a :class:`TableFiles`: its rows and schema come from the footer; the rows are read when
asked (``to_arrow``, ``scan``, ``head``). :class:`Tables` is a result's mapping of them:
``tables[name]`` is an Arrow table as before, read from the file on access.
"""

from __future__ import annotations

import shutil
import weakref
from collections.abc import Iterator, MutableMapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

__all__ = ["TableFiles", "Tables", "write_table"]


class TableFiles:
    """One output table as a Parquet file in processing order, read when asked.

    ``num_rows`` and ``schema`` come from the file's footer. The file lives in a private
    directory of the kernel's scratch that goes when this object does (the catalog copies it
    when it records the run)."""

    def __init__(self, path: str | Path, directory: str | Path | None = None):
        self.path = str(path)
        self.num_rows = pq.read_metadata(self.path).num_rows
        self.schema = _as_built(pq.read_schema(self.path).remove_metadata())
        if directory is not None:
            weakref.finalize(self, shutil.rmtree, str(directory), True)

    @property
    def column_names(self) -> list[str]:
        return list(self.schema.names)

    def __len__(self) -> int:
        return self.num_rows

    def to_arrow(self) -> pa.Table:
        """Every row, as ``result.build_table`` would have built the table."""
        table = pq.read_table(self.path).replace_schema_metadata(None)
        return table if table.schema.equals(self.schema) else table.cast(self.schema)

    def head(self, n: int = 5) -> pa.Table:
        """The first ``n`` rows, reading no more row groups than they need."""
        batches, got = [], 0
        for batch in pq.ParquetFile(self.path).iter_batches(batch_size=max(n, 1)):
            batches.append(batch.slice(0, n - got))
            got += batches[-1].num_rows
            if got >= n:
                break
        head = pa.Table.from_batches(batches).replace_schema_metadata(None)
        return head.cast(self.schema)

    def scan(self) -> Any:
        """A polars ``LazyFrame`` over the file (nothing read until collected)."""
        import polars as pl

        return pl.scan_parquet(self.path)

    def __repr__(self) -> str:
        return f"<TableFiles {self.num_rows:,} rows · {self.path}>"


def _as_built(schema: pa.Schema) -> pa.Schema:
    """``schema`` as ``pa.array`` builds it: Parquet names a list's values ``element``,
    Arrow ``item``."""
    return pa.schema(
        [
            pa.field(f.name, pa.list_(f.type.value_type)) if pa.types.is_list(f.type) else f
            for f in schema
        ]
    )


class Tables(MutableMapping):
    """A result's output tables by name: Arrow tables, or :class:`TableFiles` read on access.

    ``tables[name]`` is always an Arrow table (read from its file when it has one);
    ``files(name)`` the :class:`TableFiles` (None for a table held in memory), ``rows(name)``
    its rows without reading them."""

    def __init__(self, tables: dict[str, Any] | None = None):
        self._tables: dict[str, Any] = dict(tables or {})

    def __getitem__(self, name: str) -> pa.Table:
        table = self._tables[name]
        return table.to_arrow() if isinstance(table, TableFiles) else table

    def __setitem__(self, name: str, table: Any) -> None:
        self._tables[name] = table

    def __delitem__(self, name: str) -> None:
        del self._tables[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._tables)

    def __len__(self) -> int:
        return len(self._tables)

    def __contains__(self, name: object) -> bool:  # (Mapping's would read the table)
        return name in self._tables

    def files(self, name: str) -> TableFiles | None:
        table = self._tables[name]
        return table if isinstance(table, TableFiles) else None

    def rows(self, name: str) -> int:
        return self._tables[name].num_rows

    def __repr__(self) -> str:
        shown = ", ".join(
            f"{n!r}: {'files' if isinstance(t, TableFiles) else 'table'} of {t.num_rows:,} rows"
            for n, t in self._tables.items()
        )
        return f"Tables({{{shown}}})"


def write_table(tables: Any, name: str, path: str | Path) -> None:
    """Table ``name`` of ``tables`` as Parquet file ``path``: a table held as a file is
    copied, never read into memory."""
    held = tables.files(name) if isinstance(tables, Tables) else None
    if held is not None:
        shutil.copyfile(held.path, path)
    else:
        pq.write_table(tables[name], path)
