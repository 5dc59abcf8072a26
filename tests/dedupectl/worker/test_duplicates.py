"""The dropped copies and the headers naming their originals, from a plan against a real store in a temp
directory: a repeat held in the store, one of the batch committing, one of the same batch."""

from __future__ import annotations

from confluent_kafka import Message

from dedupectl.worker.duplicates import (
    EARLIER_BATCH,
    ORIGINAL_AGE_MS,
    ORIGINAL_INPUT_OFFSET,
    ORIGINAL_OUTPUT_OFFSET,
    ORIGINAL_WHERE,
    SAME_BATCH,
    SOURCE_OFFSET,
    EarlierBatch,
    dropped_copies,
)
from dedupectl.worker.plan import Records, plan
from store.codec import encode_ids
from store.dedup_store import DedupStore


def message(key: bytes, offset: int, timestamp_ms: int) -> Message:
    return Message(
        topic="in", partition=3, offset=offset, key=key, value=b"{}", headers=[("h", b"v")], timestamp=(1, timestamp_ms)
    )


def decide(messages: list[Message], store, seen=None):
    records = Records(
        keys=[m.key() for m in messages],
        values=[m.value() for m in messages],
        offsets=[m.offset() for m in messages],
        timestamps_ms=[m.timestamp()[1] for m in messages],
    )
    return plan(3, records, store, value_format="json", id_field="messageId", seen=seen)


def test_each_copy_names_its_original(tmp_path):
    with DedupStore.open(tmp_path / "store", topic="in", partition=3) as store:
        store.record([b"held"], [1_000], input_offset=10, output_offset=41, output_offsets=range(40, 41))
        committing = EarlierBatch(encode_ids([b"other", b"inflight"]), range(41, 43), [1_500, 1_600])
        messages = [
            message(b"held", 10, 2_000),
            message(b"new", 11, 2_100),
            message(b"inflight", 12, 2_200),
            message(b"new", 13, 2_300),
            message(b"held", 14, 2_400),
        ]
        decided = decide(messages, store, seen=frozenset(committing.keys))
        copies = dropped_copies(decided, messages, store, committing)

    assert [copy.message.offset() for copy in copies] == [10, 12, 13, 14]
    found = [dict(copy.headers) for copy in copies]
    assert all(headers["h"] == b"v" for headers in found)  # the record's own headers stay
    assert [headers[SOURCE_OFFSET] for headers in found] == [b"10", b"12", b"13", b"14"]
    assert [headers[ORIGINAL_WHERE].decode() for headers in found] == [
        EARLIER_BATCH,
        EARLIER_BATCH,
        SAME_BATCH,
        EARLIER_BATCH,
    ]
    assert [headers.get(ORIGINAL_OUTPUT_OFFSET) for headers in found] == [b"40", b"42", None, b"40"]
    assert found[2][ORIGINAL_INPUT_OFFSET] == b"11"
    assert [headers[ORIGINAL_AGE_MS] for headers in found] == [b"1000", b"600", b"200", b"1400"]


def test_an_original_aged_out_is_named_without_offset_or_age(tmp_path):
    class Forgetful:
        def live_seqs(self, keys):
            return [None] * len(keys)

        def contains_keys(self, keys):
            return [True] * len(keys)

        @property
        def ledger(self):
            return self  # what it recorded of each batch: nothing either

        def output_offsets(self, seqs):
            return []

        def timestamps(self, seqs):
            return []

    messages = [message(b"gone", 5, 100)]
    (copy,) = dropped_copies(decide(messages, Forgetful()), messages, Forgetful())
    headers = dict(copy.headers)
    assert headers[ORIGINAL_WHERE] == EARLIER_BATCH.encode()
    assert ORIGINAL_OUTPUT_OFFSET not in headers and ORIGINAL_AGE_MS not in headers


def test_a_batch_without_repeats_has_no_copies(tmp_path):
    with DedupStore.open(tmp_path / "store", topic="in", partition=3) as store:
        messages = [message(b"a", 1, 5), message(b"b", 2, 5)]
        assert dropped_copies(decide(messages, store), messages, store) == []
