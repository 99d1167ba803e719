"""Regenerate the golden plans: ``python tests/golden/regenerate.py``.

Each program of the catalogue (``examples/antispam.py``, the domain examples
``examples/{streamscope,adclicks,iot,flights}.py`` and ``examples/plans/*.py``) is planned
without a log, and its plan (``Plan.to_dict()`` without the data part) is written to
``tests/golden/plans/<name>.json``. A program the planner rejects is written as the line and
message of its error. ``tests/test_planner.py`` checks that the plans still match; after an
intended change, run this script and review the diff.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).resolve().parent / "plans"
DATA_KEYS = ("data", "hot_keys", "predicted_speedup")
#: The example programs of the domains (windows, joins of two streams, real data).
DOMAINS = ("streamscope", "adclicks", "iot", "flights")

sys.path.insert(0, str(ROOT))

from restream_kit.model.errors import ProgramError  # noqa: E402
from restream_kit.planner import plan  # noqa: E402


def catalogue() -> dict[str, Path]:
    """Every example program of the planner's catalogue, by name."""
    programs = {"antispam": ROOT / "examples" / "antispam.py"}
    for name in DOMAINS:
        programs[name] = ROOT / "examples" / f"{name}.py"
    for path in sorted((ROOT / "examples" / "plans").glob("*.py")):
        programs[path.stem] = path
    return programs


def golden_of(path: Path) -> dict:
    """What the golden file of one program holds."""
    try:
        result = plan(path)
    except ProgramError as exc:
        message = str(exc).split(": ", 1)[1] if exc.lineno else str(exc)
        return {"program": path.stem, "rejected": {"lineno": exc.lineno, "message": message}}
    out = result.to_dict()
    for key in DATA_KEYS:
        out.pop(key, None)
    return out


def main() -> None:
    GOLDEN.mkdir(parents=True, exist_ok=True)
    for name, path in catalogue().items():
        target = GOLDEN / f"{name}.json"
        target.write_text(json.dumps(golden_of(path), indent=2) + "\n")
        print(f"wrote {target.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
