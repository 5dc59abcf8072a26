"""The misrouted records' log lines: the first few of each partition one by one, then a count per partition at
most once a minute; the first unkeyed record of a partition once."""

from __future__ import annotations

import logging

from dedupectl.worker.routing import Routing
from dedupectl.worker.routing_log import LOGGED_PER_PARTITION, SUMMARY_EVERY_S, RoutingLog


def lines(caplog) -> list[str]:
    found = [record.getMessage() for record in caplog.records]
    caplog.clear()
    return found


def test_the_first_few_are_logged_with_both_partitions_then_counted(caplog) -> None:
    caplog.set_level(logging.WARNING, logger="dedupectl.worker")
    now = [0.0]
    routing_log = RoutingLog(clock=lambda: now[0])
    keys = [f"k-{n}".encode() for n in range(8)]
    routing = Routing(list(range(8)), [5] * 8, "murmur2")
    routing_log.note(2, routing, keys, list(range(100, 108)), unkeyed=0)
    logged = lines(caplog)
    assert len(logged) == LOGGED_PER_PARTITION
    assert logged[0].startswith(
        "partition 2 offset 100: key 'k-0' is in partition 2, but murmur2 puts it in partition 5"
    )
    routing_log.note(3, Routing([0], [1], "murmur2"), [b"x"], [7], unkeyed=0)
    assert len(lines(caplog)) == 1  # each partition has its own few
    routing_log.summarise_if_due()
    assert lines(caplog) == []  # not a minute yet
    now[0] = SUMMARY_EVERY_S
    routing_log.summarise_if_due()
    assert lines(caplog) == ["misrouted records in the last 60 s, not logged one by one: partition 2: 3"]
    now[0] = 2 * SUMMARY_EVERY_S
    routing_log.summarise_if_due()
    assert lines(caplog) == []  # nothing new to count


def test_the_first_unkeyed_record_of_a_partition_is_logged_once(caplog) -> None:
    caplog.set_level(logging.WARNING, logger="dedupectl.worker")
    routing_log = RoutingLog()
    nothing = Routing([], [])
    routing_log.note(1, nothing, [None], [0], unkeyed=1)
    routing_log.note(1, nothing, [None], [1], unkeyed=1)
    routing_log.note(4, nothing, [None], [0], unkeyed=1)
    logged = lines(caplog)
    assert len(logged) == 2 and logged[0].startswith("partition 1: records without a key")


def test_forwarded_records_are_logged_as_forwarded(caplog) -> None:
    caplog.set_level(logging.WARNING, logger="dedupectl.worker")
    RoutingLog(forwarding=True).note(1, Routing([0], [5], "crc32"), [b"k"], [9], unkeyed=0)
    assert lines(caplog) == [
        "partition 1 offset 9: key 'k' is in partition 1, but crc32 puts it in partition 5: forwarded there "
        "(--misrouted forward)"
    ]
