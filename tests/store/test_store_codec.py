"""The schema-3 byte layout: ids packed exactly (never hashed), sequence values and timestamps compact, batch
digests that tell batches apart."""

from __future__ import annotations

import random
import uuid

import pytest

from store.codec import (
    AJS_PREFIX,
    ENCODE_BLOCK,
    decode_id,
    decode_seq_value,
    encode_fixed_ids_end_to_end,
    encode_id,
    encode_ids,
    encode_seq_values,
)
from store.times_codec import (
    DIGEST_BYTES,
    DIGEST_CHUNK,
    batch_digests,
    batch_digests_joined,
    chunk_digest,
    decode_times,
    encode_times,
    times_at,
    times_count,
    times_digests,
    without_digests,
)


def _ajs(rng: random.Random) -> bytes:
    return f"ajs-{rng.getrandbits(128):032x}".encode()


def test_ajs_ids_pack_to_18_bytes_and_back_exactly():
    rng = random.Random(1)
    ids = [_ajs(rng) for _ in range(2_000)]
    keys = encode_ids(ids)
    assert keys == [encode_id(message_id) for message_id in ids]  # the bulk path agrees with the per-id one
    assert all(len(key) == 18 and key.startswith(AJS_PREFIX) for key in keys)
    assert [decode_id(key) for key in keys] == ids
    assert len(set(keys)) == len(ids)


@pytest.mark.parametrize(
    "message_id",
    [
        b"ajs-" + b"A" * 32,  # upper-case hex: not the packed form, stored raw
        b"ajs-" + b"0" * 31,  # too short
        b"ajs-" + b"0" * 33,  # too long
        b"ajs-" + b"g" * 32,  # not hex
        b"AJS-" + b"0" * 32,
        str(uuid.UUID(int=7)).encode(),
        str(uuid.UUID(int=7)).upper().encode(),
        "é-id".encode(),
        b"",
        b"\x00\xff",
    ],
)
def test_every_id_round_trips(message_id):
    assert decode_id(encode_id(message_id)) == message_id
    assert [decode_id(key) for key in encode_ids([message_id, message_id + b"x"])] == [message_id, message_id + b"x"]


def test_ids_that_differ_only_in_case_never_share_a_key():
    lower, upper = b"ajs-" + b"ab" * 16, b"ajs-" + b"AB" * 16
    assert encode_id(lower) != encode_id(upper)
    assert len(set(encode_ids([lower, upper]))) == 2


@pytest.mark.parametrize(
    "batch",
    [
        # concatenations that look like valid ajs ids but are not split at id boundaries
        [b"ajs-" + b"0" * 32 + b"ajs-" + b"0" * 28, b"0000"],
        [b"ajs-" + b"0" * 32 + b"\najs-" + b"0" * 27, b"0000"],
        [b"ajs-" + b"0" * 31 + b"\n", b"ajs-" + b"0" * 32],
        [b"ajs-" + b"0" * 32, b"ajs-" + b"0" * 31 + b"j"],
        [b"ajs-" + b"0" * 31, b"ajs-" + b"0" * 33],  # 72 bytes end to end, as two valid ids would be
        [b"ajs-" + b"0" * 32, b"ajs-" + b"0" * 31 + b"A"],  # uppercase would share the lowercase id's key
        [b"ajs-" + b"0" * 32, b"ajs-" + b"0" * 30 + b"\n0"],
        # joined as the bulk path joins them (two newlines between ids): 38 n - 2 bytes, newlines where expected
        [b"ajs-" + b"0" * 32 + b"\n\najs-" + b"0" * 32, b"", b"ajs-" + b"0" * 30],
        [b"ajs-" + b"0" * 32 + b"\n\n", b"ajs-" + b"0" * 30, b"ajs-" + b"0" * 32],
        [b"ajs-" + b"0" * 32, b"\n\n", b"ajs-" + b"0" * 28 + b"\n\najs-" + b"0" * 32],
        [b"ajs-" + b"0" * 31 + b"\n", b"\najs-" + b"0" * 31],
    ],
)
def test_the_bulk_path_never_splits_a_batch_wrongly(batch):
    assert encode_ids(batch) == [encode_id(message_id) for message_id in batch]
    assert [decode_id(key) for key in encode_ids(batch)] == batch


def test_ids_end_to_end_encode_as_the_id_list_does():
    ids = [f"ajs-{n:032x}".encode() for n in range(ENCODE_BLOCK + 3)]
    keys, end_to_end = encode_fixed_ids_end_to_end(b"".join(ids), 36)
    assert keys == encode_ids(ids) and end_to_end == b"".join(keys)
    ids[-1] = b"ajs-" + b"0" * 31 + b"A"  # one id not packable: the whole goes the general way
    assert encode_fixed_ids_end_to_end(b"".join(ids), 36) == (encode_ids(ids), None)
    uuids = [str(uuid.UUID(int=n)).encode() for n in range(5)]
    assert encode_fixed_ids_end_to_end(b"".join(uuids), 36) == (encode_ids(uuids), None)
    assert encode_fixed_ids_end_to_end(b"order:1order:2", 7) == (encode_ids([b"order:1", b"order:2"]), None)
    with pytest.raises(ValueError, match="not ids of 36 bytes"):
        encode_fixed_ids_end_to_end(b"".join(ids)[:-1], 36)


def test_a_long_batch_is_packed_block_by_block_with_the_same_keys():
    ids = [f"ajs-{n:032x}".encode() for n in range(2 * ENCODE_BLOCK + 3)]
    ids[ENCODE_BLOCK + 1] = b"order:7"  # one block takes the per-id path, the others the bulk one
    assert encode_ids(ids) == [encode_id(message_id) for message_id in ids]


def test_uuids_pack_to_17_bytes():
    value = str(uuid.UUID(int=2**127 + 5)).encode()
    assert len(encode_id(value)) == 17 and decode_id(encode_id(value)) == value


@pytest.mark.parametrize(
    ("first", "count", "width"),
    [(0, 10, 1), (250, 10, 2), (65_530, 10, 3), (2**32 - 1, 2, 5), (2**40, 1, 6)],
)
def test_sequence_values_are_as_wide_as_the_batch_needs(first, count, width):
    values = encode_seq_values(first, count)
    assert {len(value) for value in values} == {width}
    assert [decode_seq_value(value) for value in values] == list(range(first, first + count))


@pytest.mark.parametrize(
    "stamps",
    [[1_700_000_000_000], [5, 3, 3, 10], [0, 40_000], [0, 2**31 + 1, 0], [1_700_000_000_000, 0]],
)
def test_timestamps_round_trip_with_any_delta(stamps):
    value = encode_times(stamps)
    assert decode_times(value) == stamps and times_count(value) == len(stamps)


def test_close_timestamps_cost_two_bytes_each():
    stamps = [1_700_000_000_000 + 3 * n for n in range(1_000)]
    assert len(encode_times(stamps)) == 9 + 2 * 999


def test_timestamps_are_read_by_index_without_decoding_the_batch():
    rng = random.Random(5)
    stamps = [rng.randrange(2**40) for _ in range(100)]
    value = encode_times(stamps)
    assert times_at(value, [0, 1, 57, 99]) == [stamps[0], stamps[1], stamps[57], stamps[99]]
    assert times_at(value, list(range(100))) == stamps


@pytest.mark.parametrize("count", [1, 4, DIGEST_CHUNK, DIGEST_CHUNK + 1, 3 * DIGEST_CHUNK + 7])
def test_digests_ride_along_without_changing_the_timestamps(count):
    rng = random.Random(count)
    stamps = [1_700_000_000_000 + rng.randrange(-5, 2**33) for _ in range(count)]
    keys = encode_ids([f"id-{n}".encode() for n in range(count)])
    digests = batch_digests(keys)
    assert len(digests) == -(-count // DIGEST_CHUNK) * DIGEST_BYTES
    assert digests[:DIGEST_BYTES] == chunk_digest(keys[:DIGEST_CHUNK])
    value = encode_times(stamps, digests)
    assert decode_times(value) == stamps and times_count(value) == count
    assert times_at(value, [0, count - 1]) == [stamps[0], stamps[-1]]
    assert times_digests(value) == digests and times_digests(encode_times(stamps)) is None
    assert without_digests(value) == encode_times(stamps)
    with pytest.raises(ValueError, match="digests of 16 bytes"):
        encode_times(stamps, digests + b"x")


def test_digests_of_keys_end_to_end_equal_those_of_the_key_list():
    keys = encode_ids([f"ajs-{n:032x}".encode() for n in range(2 * DIGEST_CHUNK + 7)])
    for count in (1, DIGEST_CHUNK, DIGEST_CHUNK + 1, len(keys)):
        assert batch_digests_joined(b"".join(keys[:count]), 18) == batch_digests(keys[:count])
    with pytest.raises(ValueError, match="not keys of 18 bytes"):
        batch_digests_joined(b"".join(keys)[:-1], 18)


def test_chunk_digests_tell_apart_order_content_and_how_keys_are_cut():
    rng = random.Random(9)
    keys = encode_ids([_ajs(rng) for _ in range(100)])
    digest = chunk_digest(keys)
    assert len(digest) == DIGEST_BYTES and chunk_digest(list(keys)) == digest
    assert chunk_digest(keys[::-1]) != digest
    assert chunk_digest(keys[:-1]) != digest
    assert chunk_digest([*keys[:-1], keys[0]]) != digest
    # the same bytes cut differently are different runs (raw ids have any length)
    assert chunk_digest([b"\x03ab", b"\x03c"]) != chunk_digest([b"\x03a", b"\x03bc"])
