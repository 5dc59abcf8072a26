"""Finding the messageId: the key first, the JSON field as fallback, a dead-letter reason otherwise."""

import pytest

from dedupectl.messages import DeadLetter, DeadLetterReason, extract_id, extract_ids

EVENT = b'{"messageId": "ajs-1", "type": "track"}'


def test_key_wins_over_the_json_field():
    assert extract_id(b"key-1", EVENT, "json", "messageId") == b"key-1"


def test_json_field_when_there_is_no_key():
    assert extract_id(None, EVENT, "json", "messageId") == b"ajs-1"
    assert extract_id(b"", EVENT, "json", "messageId") == b"ajs-1"
    assert extract_id(None, b'{"id": "x-9"}', "json", "id") == b"x-9"


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        (None, b'{"type": "track"}', DeadLetterReason.MISSING_ID),
        (None, b'{"messageId": null}', DeadLetterReason.MISSING_ID),
        (None, b'{"messageId": ""}', DeadLetterReason.EMPTY_ID),
        (None, b'{"messageId": "   "}', DeadLetterReason.EMPTY_ID),
        (None, b'{"messageId": 42}', DeadLetterReason.INVALID_ID),
        (b"k", b"{not json", DeadLetterReason.UNPARSEABLE),
        (b"k", b"\xff\xfe", DeadLetterReason.UNPARSEABLE),
        (b"k", None, DeadLetterReason.UNPARSEABLE),
        (b"k", b"[1, 2]", DeadLetterReason.NOT_AN_OBJECT),
        (b"k", b'{"a": 1} trailing', DeadLetterReason.UNPARSEABLE),
        (None, b'{"messageId": [1]}', DeadLetterReason.INVALID_ID),
        (None, b'{"messageId": {"nested": "x"}}', DeadLetterReason.INVALID_ID),
        (b"x" * 300, EVENT, DeadLetterReason.ID_TOO_LONG),
    ],
)
def test_unusable_records_name_their_reason(key, value, reason):
    with pytest.raises(DeadLetter) as caught:
        extract_id(key, value, "json", "messageId")
    assert caught.value.reason is reason
    assert caught.value.detail


def test_raw_format_reads_only_the_key():
    assert extract_id(b"k", b"\x00 not json", "raw", "messageId") == b"k"
    with pytest.raises(DeadLetter) as caught:
        extract_id(None, EVENT, "raw", "messageId")
    assert caught.value.reason is DeadLetterReason.MISSING_ID


def _one_by_one(keys, values, value_format="json"):
    ids, dead = [], []
    for index, (key, value) in enumerate(zip(keys, values, strict=True)):
        try:
            ids.append(extract_id(key, value, value_format, "messageId"))
        except DeadLetter as reason:
            ids.append(None)
            dead.append((index, reason.reason))
    return ids, dead


@pytest.mark.parametrize(
    ("keys", "values"),
    [
        ([b"a", b"b"], [EVENT, b"{}"]),  # the usual batch: all keyed, all objects
        ([None, b""], [EVENT, b'{"messageId": "ajs-2"}']),  # ids from the field
        ([b"a", b"b", None], [EVENT, b"[1]", b'{"messageId": 7}']),
        ([b"a", b"b"], [EVENT, b"\xff"]),
        ([b"a", b"b"], [None, EVENT]),
        ([b"x" * 300, b"b"], [EVENT, EVENT]),
        ([], []),
    ],
)
def test_a_batch_gets_the_same_answers_as_one_record_at_a_time(keys, values):
    ids, dead = extract_ids(keys, values, "json", "messageId")
    assert (ids, [(index, reason.reason) for index, reason in dead]) == _one_by_one(keys, values)


def test_a_raw_batch_needs_keys():
    ids, dead = extract_ids([b"a", None], [b"\x00", b"{}"], "raw", "messageId")
    assert ids == [b"a", None]
    assert [(index, reason.reason) for index, reason in dead] == [(1, DeadLetterReason.MISSING_ID)]
