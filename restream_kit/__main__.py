"""``python -m restream_kit`` is the ``restream`` command."""

import sys

from .cli.main import main

sys.exit(main())
