"""The partition check from plain keys: which keyed records are elsewhere than their partitioner puts them,
and which partitioner ``auto`` settles on. No broker: the keys' partitions are computed, not produced."""

from __future__ import annotations

import logging

import pytest

from dedupectl.config import PARTITIONER_CHOICES
from dedupectl.partitioner import PARTITIONERS, crc32_partition, murmur2_partition
from dedupectl.worker.routing import AUTO_SETTLE_RECORDS, RouteCheck

PARTITIONS = 6


def keys_in(partition: int, count: int, by=murmur2_partition, start: int = 0) -> list[bytes]:
    """``count`` keys that ``by`` puts in ``partition`` and the other partitioner does not (so they tell the two
    apart)."""
    other = crc32_partition if by is murmur2_partition else murmur2_partition
    found, n = [], start
    while len(found) < count:
        key = f"id-{n}".encode()
        if by(key, PARTITIONS) == partition and other(key, PARTITIONS) != partition:
            found.append(key)
        n += 1
    return found


def test_the_choices_are_the_partitioners_and_auto_and_any() -> None:
    assert set(PARTITIONER_CHOICES) == {"auto", "any", *PARTITIONERS}


def test_a_named_partitioner_finds_the_records_it_would_have_put_elsewhere() -> None:
    check = RouteCheck("murmur2", PARTITIONS)
    right, wrong = keys_in(2, 3), keys_in(4, 2)
    keys = [right[0], wrong[0], None, right[1], b"", wrong[1], right[2]]
    routing = check.check(2, keys)
    assert routing.positions == [1, 5]  # unkeyed records are not judged
    assert routing.expected == [4, 4]
    assert routing.partitioner == "murmur2"
    assert not check.check(2, right)
    assert not check.check(2, [None, b""])


def test_crc32_is_librdkafkas_default() -> None:
    check = RouteCheck("crc32", PARTITIONS)
    assert not check.check(1, keys_in(1, 5, by=crc32_partition))
    assert len(check.check(1, keys_in(1, 5, by=murmur2_partition))) == 5


def test_any_and_a_single_partition_check_nothing() -> None:
    assert not RouteCheck("any", PARTITIONS).active
    assert not RouteCheck("murmur2", 1).active
    assert not RouteCheck("any", PARTITIONS).check(0, keys_in(3, 5))


@pytest.mark.parametrize("by", [murmur2_partition, crc32_partition])
def test_auto_settles_on_the_partitioner_every_first_record_matches(by, caplog) -> None:
    name = "murmur2" if by is murmur2_partition else "crc32"
    check = RouteCheck("auto", PARTITIONS)
    caplog.set_level(logging.INFO, logger="dedupectl.worker")
    half = AUTO_SETTLE_RECORDS // 2
    assert not check.check(0, keys_in(0, half, by=by))
    assert check.settled is None  # not enough records yet
    assert not check.check(3, keys_in(3, AUTO_SETTLE_RECORDS - half, by=by))
    assert check.settled == name
    settled = [r.getMessage() for r in caplog.records if "partitioner:" in r.getMessage()]
    assert len(settled) == 1 and f"checked against {name}" in settled[0]
    # from then on the other partitioner's records are misrouted
    other = crc32_partition if by is murmur2_partition else murmur2_partition
    routing = check.check(5, keys_in(5, 4, by=other))
    assert len(routing) == 4 and routing.partitioner == name


def test_auto_keeps_watching_while_both_partitioners_match() -> None:
    check = RouteCheck("auto", PARTITIONS)
    both = []
    n = 0
    while len(both) < AUTO_SETTLE_RECORDS + 10:  # keys both partitioners put in partition 0
        key = f"both-{n}".encode()
        if murmur2_partition(key, PARTITIONS) == 0 == crc32_partition(key, PARTITIONS):
            both.append(key)
        n += 1
    assert not check.check(0, both)
    assert check.settled is None
    # the first records that tell them apart settle it at once: enough records agreed already
    assert not check.check(2, keys_in(2, 3, by=crc32_partition))
    assert check.settled == "crc32"


def test_auto_needs_enough_records_matching_one_partitioner_alone() -> None:
    check = RouteCheck("auto", PARTITIONS)
    assert not check.check(2, keys_in(2, 3, by=crc32_partition))
    assert check.settled is None  # crc32 alone matches every one, but only three so far
    assert not check.check(2, keys_in(2, AUTO_SETTLE_RECORDS, by=crc32_partition, start=10**6))
    assert check.settled == "crc32"


def test_auto_with_neither_matching_all_settles_on_the_majority_and_reports_the_rest() -> None:
    check = RouteCheck("auto", PARTITIONS)
    majority, minority = keys_in(1, 30), keys_in(1, 10, by=crc32_partition)
    routing = check.check(1, majority + minority)
    assert check.settled == "murmur2"
    assert routing.positions == list(range(30, 40))
    assert routing.expected == [murmur2_partition(key, PARTITIONS) for key in minority]
