"""Finding the messageId: a header when one is named, else the key first, the JSON field (a name or a JSON
Pointer) as fallback, a dead-letter reason otherwise."""

import pytest

from dedupectl.messages import DeadLetter, DeadLetterReason, extract_id, extract_ids, id_field_problem

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


NESTED = b'{"context": {"messageId": "ajs-n"}}'


@pytest.mark.parametrize(
    ("value_format", "id_field", "id_header"),
    [("json", "/context/messageId", None), ("json", "messageId", "ce_id"), ("raw", "messageId", "ce_id")],
)
def test_a_batch_by_header_or_pointer_gets_the_same_answers_as_one_record_at_a_time(value_format, id_field, id_header):
    # the worker reads a batch, trace and the Spark jobs one record: both must find the same ids
    keys = [b"a", None, None, b"b", None, b"c", b"d", b"x" * 300]
    values = [NESTED, NESTED, EVENT, b"[1]", b'{"context": {"messageId": 7}}', None, b"{}", NESTED]
    headers = [
        [("ce_id", b"h-1")],
        [("ce_id", b"h-2"), ("ce_id", b"h-2")],
        None,
        [("ce_id", b"h-3")],
        [("ce_id", b" ")],
        [("ce_id", b"h-4")],
        [("ce_id", b"h-5"), ("ce_id", b"h-6")],
        [("ce_id", b"y" * 300)],
    ]
    ids, dead = extract_ids(keys, values, value_format, id_field, headers, id_header)
    expected_ids, expected_dead = [], []
    for index, (key, value, record_headers) in enumerate(zip(keys, values, headers, strict=True)):
        try:
            expected_ids.append(extract_id(key, value, value_format, id_field, record_headers, id_header))
        except DeadLetter as reason:
            expected_ids.append(None)
            expected_dead.append((index, reason.reason, reason.detail))
    assert ids == expected_ids
    assert [(index, reason.reason, reason.detail) for index, reason in dead] == expected_dead
    assert any(ids) and expected_dead


def test_id_field_problems_are_said_before_any_record_is_read():
    assert id_field_problem("messageId") is None
    assert id_field_problem("a~2") is None  # a plain name is taken as it is
    assert id_field_problem("/a~0b/c~1d/0") is None
    assert "empty" in id_field_problem("")
    assert "not a JSON Pointer" in id_field_problem("/a~")
