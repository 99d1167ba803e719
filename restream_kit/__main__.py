"""``python -m restream_kit`` is the ``restream`` command."""

import sys

from .cli import main

sys.exit(main())
