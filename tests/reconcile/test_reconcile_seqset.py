"""The matched-sequence bitmap: exact membership and repeats, runs across chunk boundaries, flat memory."""

from __future__ import annotations

import random

from reconcile.seqset import CHUNK_BITS, CHUNK_BYTES, SeqBitmap


def test_add_reports_repeats_exactly():
    seen = SeqBitmap()
    assert seen.add(5) is False
    assert seen.add(5) is True
    assert 5 in seen and 4 not in seen and 6 not in seen
    assert seen.add_many([4, 5, 6, 6]) == [5, 6]


def test_runs_across_chunk_boundaries_report_only_the_overlap():
    seen = SeqBitmap()
    start = CHUNK_BITS - 3  # a run that straddles two chunks, with partial bytes at both ends
    assert seen.add_run(start, start + 10) == []
    assert all(seq in seen for seq in range(start, start + 10))
    assert start - 1 not in seen and start + 10 not in seen
    assert seen.add_run(start + 8, start + 20) == [start + 8, start + 9]
    assert seen.add_run(0, 1) == []


def test_runs_agree_with_a_plain_set():
    rng = random.Random(3)
    seen, reference = SeqBitmap(), set()
    for _ in range(300):
        start = rng.randrange(3 * CHUNK_BITS)
        stop = start + rng.randrange(1, 200)
        expected = sorted(reference.intersection(range(start, stop)))
        assert seen.add_run(start, stop) == expected
        reference.update(range(start, stop))
    assert all((seq in seen) == (seq in reference) for seq in range(4 * CHUNK_BITS))


def test_missing_runs_cover_every_absent_number_and_skip_full_chunks():
    seen = SeqBitmap()
    seen.add_run(0, 2 * CHUNK_BITS + 100)
    for seq in (17, CHUNK_BITS + 5):
        seen.add_many([seq])  # already present: no change
    absent = {2 * CHUNK_BITS + 100, 2 * CHUNK_BITS + 150}
    seen.add_run(2 * CHUNK_BITS + 101, 2 * CHUNK_BITS + 150)
    seen.add_run(2 * CHUNK_BITS + 151, 2 * CHUNK_BITS + 300)
    runs = list(seen.missing_runs(0, 2 * CHUNK_BITS + 300))
    covered = {seq for a, b in runs for seq in range(a, b)}
    assert absent <= covered
    assert all(a >= 2 * CHUNK_BITS for a, _ in runs)  # the two full chunks yield nothing
    assert list(SeqBitmap().missing_runs(10, 20)) == [(10, 20)]


def test_a_healthy_scan_holds_one_partial_chunk_whatever_its_length():
    seen = SeqBitmap()
    for start in range(0, 50 * CHUNK_BITS, 10_000):
        seen.add_run(start, start + 10_000)
    assert seen.allocated_bytes <= CHUNK_BYTES


def test_run_is_clear_agrees_with_a_plain_set():
    rng = random.Random(5)
    seen, reference = SeqBitmap(), set()
    seen.add_run(0, CHUNK_BITS)  # one full chunk (the shared marker)
    reference.update(range(CHUNK_BITS))
    for seq in rng.sample(range(CHUNK_BITS, 3 * CHUNK_BITS), 200):
        seen.add(seq)
        reference.add(seq)
    for _ in range(300):
        start = rng.randrange(4 * CHUNK_BITS)
        stop = start + rng.randrange(1, 2 * CHUNK_BITS)
        assert seen.run_is_clear(start, stop) == reference.isdisjoint(range(start, stop))
    assert seen.run_is_clear(5 * CHUNK_BITS, 6 * CHUNK_BITS)
