"""The checkpoint's writer thread: commits in the order given, none after one that failed."""

from __future__ import annotations

import threading

import pytest

from restream_kit.io._commit_writer import CommitWriter


def test_commits_run_in_order_and_wait_returns_once_all_are_written():
    writer, done = CommitWriter(), []
    gate = threading.Event()
    writer.put(lambda: (gate.wait(5), done.append(0)))
    for i in range(1, 20):
        writer.put(lambda i=i: done.append(i))
    assert done == []  # the first is still being written: the caller went on
    gate.set()
    writer.wait()
    assert done == list(range(20))


def test_no_commit_is_written_after_one_that_failed_and_the_error_is_raised():
    writer, done = CommitWriter(), []

    def fail():
        raise OSError("disk full")

    writer.put(lambda: done.append(0))
    writer.put(fail)
    writer.put(lambda: done.append(2))  # (would leave a gap: epoch 1 missing)
    with pytest.raises(OSError, match="disk full"):
        writer.wait()
    assert done == [0]
    with pytest.raises(OSError, match="disk full"):
        writer.put(lambda: done.append(3))
    assert done == [0]
