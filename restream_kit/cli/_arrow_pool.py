"""Arrow's buffers in a ``restream`` process come from jemalloc, unless the user chose a pool.

pyarrow's default pool here is mimalloc, which hands freed memory back to the system soon
after it is freed, so a process that reads a few columns of millions of rows pays the kernel
to zero the same pages again and again: on the 2-core machine, a ``restream replay --reuse``
over 3M events spent 0.65 to 0.85 s of system time with mimalloc against 0.25 to 0.33 s with
jemalloc (1.2 CPU-s in all against 1.5 to 1.8), and a full replay the same either way
(``docs/iterate.md``). ``ARROW_DEFAULT_MEMORY_POOL`` set in the environment wins.
"""

from __future__ import annotations

import os

import pyarrow as pa

__all__ = ["use_jemalloc"]

#: pyarrow's own setting for the default pool: when set, the user's choice is kept.
SETTING = "ARROW_DEFAULT_MEMORY_POOL"


def use_jemalloc() -> str:
    """Make jemalloc Arrow's default pool in this process (see the module doc), unless
    ``ARROW_DEFAULT_MEMORY_POOL`` is set or pyarrow was built without it; return the pool's
    name. Buffers already allocated stay with the pool that made them."""
    if not os.environ.get(SETTING):
        try:
            pa.set_memory_pool(pa.jemalloc_memory_pool())
        except NotImplementedError:  # a pyarrow built without jemalloc: keep its default
            pass
    return pa.default_memory_pool().backend_name
