"""The log lines a recovery ends with: an empty stretch reads the same at a store's start and after recovery."""

from __future__ import annotations

from dedupectl.worker.partitions import NOTHING_TO_READ
from dedupectl.worker.recovery import recovered_line
from reconcile.recovery import CatchUpResult


def test_nothing_read_is_said_in_words_not_as_an_empty_offset_range():
    for start in (-1, 0, 71_022):
        line = recovered_line(3, CatchUpResult(start_offset=start, end_offset=start, scanned=0, recorded=0))
        assert line == f"partition 3 recovered: {NOTHING_TO_READ} past what its store covers"
        assert "-1" not in line


def test_a_stretch_read_gives_its_offsets_and_counts():
    line = recovered_line(3, CatchUpResult(start_offset=74_997, end_offset=76_984, scanned=1_985, recorded=1_985))
    assert line == "partition 3 recovered: read output offsets 74997..76984 (1985 records), recorded 1985 missing ids"
