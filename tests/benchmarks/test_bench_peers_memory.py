"""The peer benchmark's memory per id: growth crest to crest, so a saw-tooth's phase is not taken for growth."""

from __future__ import annotations

from benchmarks.peers.probes import Sample, memory_per_id


def _samples(rss_of) -> list[Sample]:
    return [Sample(float(n), rss_of(n * 1000), n * 1000, 0) for n in range(10_001)]  # 0 to 10M ids


def test_a_steadily_growing_process_measures_its_growth():
    per_id, start, end = memory_per_id(_samples(lambda ids: 100_000_000 + 150 * ids), 1_000_000)
    assert (start, end) == (2_000_000, 10_000_000) and round(per_id, 6) == 150


def test_a_saw_tooth_counts_its_growth_not_its_teeth():
    # 4 B per id of growth under a 30 MB tooth every 700k ids; the sample at 1M ids sits 13 MB up its tooth
    # (that sample against the peak would read 5.8 B per id). Crests are within a stretch of its end: 10%.
    def saw_tooth(ids: int) -> int:
        return 200_000_000 + 4 * ids + 30_000_000 * (ids % 700_000) // 700_000

    per_id, _, _ = memory_per_id(_samples(saw_tooth), 1_000_000)
    assert 3.6 < per_id < 4.4


def test_no_span_no_figure():
    assert memory_per_id([], 1_000_000) == (None, 0, 0)
    assert memory_per_id(_samples(lambda ids: 1)[:50], 1_000_000)[0] is None
