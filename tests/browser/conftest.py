"""Fixtures of the in-browser tests (defined in ``lab.py``)."""

from .lab import browser_context, chromium, lab_page, lab_server  # noqa: F401
