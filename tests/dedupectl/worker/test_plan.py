"""The dedup decision from plain values, against a real store in a temp directory: no broker, no worker."""

from __future__ import annotations

import pytest

from dedupectl.messages import DeadLetterReason
from dedupectl.worker.plan import Records, Verdict, plan
from dedupectl.worker.routing import Routing
from store.codec import MAX_ID_BYTES, encode_ids
from store.dedup_store import DedupStore

NOW_MS = 1_700_000_000_000


def ajs(n: int) -> bytes:
    return f"ajs-{n:032x}".encode()


def records(*pairs: tuple[bytes | None, bytes | None], first_offset: int = 100, timestamp_ms: int = 5) -> Records:
    keys, values = [key for key, _ in pairs], [value for _, value in pairs]
    offsets = list(range(first_offset, first_offset + len(pairs)))
    return Records(keys=keys, values=values, offsets=offsets, timestamps_ms=[timestamp_ms] * len(pairs))


def event(n: int) -> tuple[bytes, bytes]:
    return ajs(n), b'{"messageId": "%s", "n": %d}' % (ajs(n), n)


@pytest.fixture
def store(tmp_path):
    with DedupStore.open(tmp_path / "store", topic="in", partition=3) as opened:
        yield opened


def decide(batch: Records, store, *, id_field: str = "messageId", **options):
    return plan(3, batch, store, value_format="json", id_field=id_field, now_ms=lambda: NOW_MS, **options)


def test_new_ids_are_published_in_input_order(store):
    decided = decide(records(event(1), event(2), event(3)), store)
    assert decided.ids == [ajs(1), ajs(2), ajs(3)]
    assert decided.positions == [0, 1, 2]
    assert decided.keys == encode_ids(decided.ids)
    assert decided.values == [event(n)[1] for n in (1, 2, 3)]
    assert decided.timestamps_ms == [5, 5, 5]
    assert (decided.consumed, decided.duplicates, decided.dead) == (3, 0, [])
    assert decided.partition == 3
    assert decided.next_input_offset == 103


def test_a_repeat_inside_the_batch_is_a_duplicate_and_the_first_is_published(store):
    first, again = event(1), (ajs(1), b'{"n": "the retry"}')
    decided = decide(records(first, event(2), again, event(2)), store)
    assert decided.ids == [ajs(1), ajs(2)]
    assert decided.values == [first[1], event(2)[1]]
    assert decided.verdicts() == [Verdict.PUBLISH, Verdict.PUBLISH, Verdict.DUPLICATE, Verdict.DUPLICATE]
    assert decided.duplicates == 2


def test_ids_the_store_holds_are_duplicates(store):
    store.record([ajs(1), ajs(3)], [1, 1])
    decided = decide(records(event(1), event(2), event(3), event(4)), store)
    assert decided.ids == [ajs(2), ajs(4)]
    assert decided.positions == [1, 3]
    assert decided.verdicts() == [Verdict.DUPLICATE, Verdict.PUBLISH, Verdict.DUPLICATE, Verdict.PUBLISH]


def test_ids_of_the_batch_committing_count_as_held(store):
    committing = frozenset(encode_ids([ajs(2)]))
    decided = decide(records(event(1), event(2)), store, seen=committing)
    assert decided.ids == [ajs(1)]
    assert decided.duplicates == 1


def test_unusable_records_go_to_the_dead_letter_topic_with_their_reason(store):
    batch = records(
        event(1),
        (None, b"not json"),
        (None, b"[1, 2]"),
        (None, b'{"n": 1}'),
        (None, b'{"messageId": "  "}'),
        (None, b'{"messageId": 7}'),
        (b"x" * 10_000, b"{}"),
        (None, None),
    )
    decided = decide(batch, store)
    reasons = {position: reason.reason for position, reason in decided.dead}
    assert reasons == {
        1: DeadLetterReason.UNPARSEABLE,
        2: DeadLetterReason.NOT_AN_OBJECT,
        3: DeadLetterReason.MISSING_ID,
        4: DeadLetterReason.EMPTY_ID,
        5: DeadLetterReason.INVALID_ID,
        6: DeadLetterReason.ID_TOO_LONG,
        7: DeadLetterReason.UNPARSEABLE,
    }
    assert decided.ids == [ajs(1)]
    assert decided.verdicts() == [Verdict.PUBLISH, *[Verdict.DEAD_LETTER] * 7]
    assert (decided.consumed, decided.duplicates) == (8, 0)


def test_an_id_from_the_value_when_the_record_has_no_key(store):
    decided = decide(records((None, b'{"messageId": "order-7"}'), (b"order-7", b"{}")), store)
    assert decided.ids == [b"order-7"]
    assert decided.duplicates == 1


def test_raw_values_take_the_id_from_the_key(store):
    batch = records((b"a", b"\xff raw"), (None, b"raw"), (b"a", b""))
    decided = plan(0, batch, store, value_format="raw", id_field="messageId")
    assert decided.ids == [b"a"]
    assert decided.verdicts() == [Verdict.PUBLISH, Verdict.DEAD_LETTER, Verdict.DUPLICATE]
    assert decided.dead[0][1].reason is DeadLetterReason.MISSING_ID


def test_a_record_without_a_timestamp_gets_the_time_it_was_planned(store):
    batch = Records(keys=[ajs(1), ajs(2)], values=[b"{}", b"{}"], offsets=[7, 8], timestamps_ms=[-1, 42])
    assert decide(batch, store).timestamps_ms == [NOW_MS, 42]


def test_the_furthest_offset_read_is_covered_even_out_of_order(store):
    batch = Records(keys=[ajs(1), ajs(2)], values=[b"{}", b"{}"], offsets=[20, 9], timestamps_ms=[1, 1])
    assert decide(batch, store).next_input_offset == 21


def test_a_batch_of_only_duplicates_and_dead_letters_publishes_nothing(store):
    store.record([ajs(1)], [1])
    decided = decide(records(event(1), (None, b"nope")), store)
    assert (decided.ids, decided.keys, decided.values, decided.timestamps_ms) == ([], [], [], [])
    assert decided.verdicts() == [Verdict.DUPLICATE, Verdict.DEAD_LETTER]
    assert decided.next_input_offset == 102


# -- where the id is: a header, a nested field (JSON Pointer), the key, a top-level field -------------------


def with_headers(batch: Records, *headers) -> Records:
    return Records(batch.keys, batch.values, batch.offsets, batch.timestamps_ms, headers=list(headers))


def test_an_id_header_wins_over_the_key_and_the_value(store):
    batch = with_headers(
        records((b"user-1", b'{"messageId": "m-1"}'), (b"user-1", b'{"messageId": "m-2"}'), (None, b"{}")),
        [("ce_id", b"e-1")],
        [("other", b"x"), ("ce_id", b"e-2")],
        [("ce_id", b"e-1")],
    )
    decided = decide(batch, store, id_header="ce_id")
    assert decided.ids == [b"e-1", b"e-2"]
    assert decided.verdicts() == [Verdict.PUBLISH, Verdict.PUBLISH, Verdict.DUPLICATE]


def test_a_record_without_a_usable_id_header_is_a_dead_letter_even_with_a_key(store):
    batch = with_headers(
        records(*[(ajs(n), b'{"messageId": "m"}') for n in range(7)]),
        [("ce_id", b"e-1")],
        None,  # no headers at all
        [("other", b"e-2")],
        [("ce_id", None)],
        [("ce_id", b"  ")],
        [("ce_id", b"x" * 10_000)],
        [("ce_id", b"a"), ("ce_id", b"b")],
    )
    decided = decide(batch, store, id_header="ce_id")
    reasons = {position: (reason.reason, reason.detail) for position, reason in decided.dead}
    assert reasons == {
        1: (DeadLetterReason.MISSING_ID, "no 'ce_id' header"),
        2: (DeadLetterReason.MISSING_ID, "no 'ce_id' header"),
        3: (DeadLetterReason.MISSING_ID, "no 'ce_id' header"),
        4: (DeadLetterReason.EMPTY_ID, "the 'ce_id' header is empty"),
        5: (DeadLetterReason.ID_TOO_LONG, f"messageId is 10000 bytes, over {MAX_ID_BYTES}"),
        6: (DeadLetterReason.INVALID_ID, "2 'ce_id' headers with different values"),
    }
    assert decided.ids == [b"e-1"]


def test_an_id_header_repeated_with_one_value_is_that_value(store):
    batch = with_headers(records((None, b"{}")), [("ce_id", b"e-1"), ("ce_id", b"e-1")])
    assert decide(batch, store, id_header="ce_id").ids == [b"e-1"]


def test_with_an_id_header_json_values_must_still_be_objects_and_raw_ones_are_not_read(store):
    batch = with_headers(records((None, b"[1]"), (None, b"\xff")), [("ce_id", b"e-1")], [("ce_id", b"e-2")])
    json_plan = decide(batch, store, id_header="ce_id")
    assert [reason.reason for _, reason in json_plan.dead] == [
        DeadLetterReason.NOT_AN_OBJECT,
        DeadLetterReason.UNPARSEABLE,
    ]
    raw_plan = plan(3, batch, store, value_format="raw", id_field="messageId", id_header="ce_id")
    assert raw_plan.ids == [b"e-1", b"e-2"]


def test_a_json_pointer_finds_a_nested_id_in_a_record_without_a_key(store):
    batch = records(
        (None, b'{"context": {"messageId": "m-1"}}'),
        (None, b'{"context": {"messageId": "m-1"}, "n": 2}'),
        (b"keyed", b'{"context": {"messageId": "m-9"}}'),  # the key is still the id of a keyed record
        (None, b'{"a/b": {"m~n": ["m-2"]}}'),
    )
    assert decide(batch, store, id_field="/context/messageId").ids == [b"m-1", b"keyed"]
    escaped = records((None, batch.values[3]))  # "~1" is "/", "~0" is "~", and a number indexes an array
    assert decide(escaped, store, id_field="/a~1b/m~0n/0").ids == [b"m-2"]


def test_a_nested_id_that_is_absent_or_not_a_usable_string_is_a_dead_letter(store):
    batch = records(
        (None, b'{"context": {}}'),
        (None, b'{"context": "m-1"}'),  # a string where an object should be
        (None, b'{"messageId": "top-level is not nested"}'),
        (None, b'{"context": {"messageId": 7}}'),
        (None, b'{"context": {"messageId": {"id": "m-1"}}}'),
        (None, b'{"context": {"messageId": " "}}'),
        (None, b'{"context": {"messageId": null}}'),
    )
    decided = decide(batch, store, id_field="/context/messageId")
    reasons = {position: (reason.reason, reason.detail) for position, reason in decided.dead}
    missing = (DeadLetterReason.MISSING_ID, "no record key and no '/context/messageId' field")
    assert reasons == {
        0: missing,
        1: missing,
        2: missing,
        3: (DeadLetterReason.INVALID_ID, "'/context/messageId' is a JSON number, not a string"),
        4: (DeadLetterReason.INVALID_ID, "'/context/messageId' is a JSON object, not a string"),
        5: (DeadLetterReason.EMPTY_ID, "'/context/messageId' is empty"),
        6: missing,
    }


def test_a_plain_name_is_a_top_level_field_even_with_a_slash_inside(store):
    batch = records((None, b'{"a/b": "m-1", "a": {"b": "m-2"}}'))
    assert decide(batch, store, id_field="a/b").ids == [b"m-1"]
    assert decide(batch, store, id_field="/a/b").ids == [b"m-2"]


def test_misrouted_records_are_counted_and_published_as_usual(store):
    routing = Routing(positions=[1], expected=[5], partitioner="murmur2")
    decided = decide(records(event(1), event(2), event(3)), store, routing=routing)
    assert decided.ids == [ajs(1), ajs(2), ajs(3)]
    assert (decided.misrouted, decided.dead) == (1, [])


def test_with_dead_letter_misrouted_records_go_to_the_dead_letter_topic_instead(store):
    routing = Routing(positions=[1, 3], expected=[5, 0], partitioner="crc32")
    batch = records(event(1), event(2), (b"", b"not json"), event(4), event(2))
    decided = decide(batch, store, routing=routing, misrouted_dead=True)
    assert decided.ids == [ajs(1), ajs(2)]  # the later copy of 2, in its partition, is published
    assert decided.positions == [0, 4]
    assert [(position, reason.reason) for position, reason in decided.dead] == [
        (1, DeadLetterReason.MISROUTED),
        (2, DeadLetterReason.UNPARSEABLE),
        (3, DeadLetterReason.MISROUTED),
    ]
    assert decided.dead[0][1].detail == "in partition 3, but crc32 puts its key in partition 5"
    publish, dead = Verdict.PUBLISH, Verdict.DEAD_LETTER
    assert decided.verdicts() == [publish, dead, dead, dead, publish]
    assert (decided.misrouted, decided.duplicates) == (2, 0)


def test_with_forward_misrouted_records_go_to_their_partition_and_a_dead_one_stays_dead(store):
    routing = Routing(positions=[1, 2, 3], expected=[5, 6, 0], partitioner="crc32")
    batch = records(event(1), event(2), (b"k", b"not json"), event(4), event(2))
    decided = decide(batch, store, routing=routing, misrouted_forward=True)
    assert decided.ids == [ajs(1), ajs(2)]  # the copy of 2 at position 4 is not judged misrouted: published
    assert decided.forward == [(1, 5), (3, 0)]
    assert [(position, reason.reason) for position, reason in decided.dead] == [(2, DeadLetterReason.UNPARSEABLE)]
    publish, forward = Verdict.PUBLISH, Verdict.FORWARD
    assert decided.verdicts() == [publish, forward, Verdict.DEAD_LETTER, forward, publish]
    assert (decided.misrouted, decided.duplicates) == (3, 0)


def test_a_misrouted_record_already_dead_keeps_its_own_reason(store):
    routing = Routing(positions=[0], expected=[1], partitioner="murmur2")
    decided = decide(records((b"k", b"[1]")), store, routing=routing, misrouted_dead=True)
    assert [reason.reason for _, reason in decided.dead] == [DeadLetterReason.NOT_AN_OBJECT]
    assert decided.misrouted == 1


def test_records_without_a_key_whose_id_is_in_the_value_are_counted_as_unkeyed(store):
    unkeyed = (None, b'{"messageId": "m-1"}')
    batch = records(event(1), unkeyed, (None, b'{"n": 1}'), (b"", b'{"messageId": "m-2"}'))
    assert decide(batch, store, count_unkeyed=True).unkeyed == 2  # the one without any id is a dead letter
    assert decide(batch, store).unkeyed == 0  # not counted with the check off (--partitioner any)
