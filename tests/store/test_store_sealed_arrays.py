"""Sealed arrays: exact answers for any 16-byte ids (random, sharing first halves, bunched in one corner of the
key space), files written whole or not at all, and damaged files refused."""

from __future__ import annotations

import os
import random

import numpy as np
import pytest

from store import sealed_arrays
from store.codec import AJS_PREFIX, TAG_UUID, encode_ids
from store.errors import StoreCorruptError
from store.sealed_arrays import BLOCK_BYTES, HEADER_BYTES, MAX_SEQ_SPAN, SealedArrays


def _written(tmp_path, bodies: list[bytes], first_seq: int = 1_000, prefix: bytes = AJS_PREFIX) -> SealedArrays:
    seqs = np.arange(first_seq, first_seq + len(bodies), dtype=np.int64)
    path = tmp_path / "arrays"
    sealed_arrays.write(path, prefix, b"".join(bodies), seqs, first_seq)
    return SealedArrays.open(path)


def _answers(arrays: SealedArrays, asked: list[bytes]) -> list[int]:
    return arrays.seqs_of(b"".join(asked)).tolist()


def _check(tmp_path, held: list[bytes], absent: list[bytes], first_seq: int = 1_000) -> None:
    arrays = _written(tmp_path, held, first_seq)
    expected = {body: first_seq + index for index, body in enumerate(held)}
    asked = held + absent
    random.Random(len(asked)).shuffle(asked)
    assert _answers(arrays, asked) == [expected.get(body, -1) for body in asked]


def test_random_ids_are_found_with_their_numbers_and_absent_ones_are_not(tmp_path):
    rng = random.Random(1)
    held = [rng.randbytes(16) for _ in range(50_000)]
    _check(tmp_path, held, [rng.randbytes(16) for _ in range(20_000)], first_seq=7 * 2**40)


def test_ids_sharing_their_first_half_are_told_apart_by_the_second(tmp_path):
    rng = random.Random(2)
    firsts = [rng.randbytes(8) for _ in range(300)]
    held = list({first + rng.randbytes(8) for first in firsts for _ in range(rng.randrange(1, 40))})
    absent = [first + rng.randbytes(8) for first in firsts for _ in range(5)]
    absent += [first + bytes(8) for first in firsts] + [first + b"\xff" * 8 for first in firsts]
    _check(tmp_path, held, [body for body in absent if body not in set(held)])


def test_ids_bunched_in_one_corner_of_the_key_space_are_found_exactly(tmp_path):
    rng = random.Random(3)
    # sequential ids, as a client counting up would make: all in one slice of the key space
    held = [(2**100 + index * 3).to_bytes(16, "big") for index in range(30_000)]
    held += [b"\xff" * 15 + bytes([value]) for value in range(0, 256, 2)]
    absent = [(2**100 + index * 3 + 1).to_bytes(16, "big") for index in range(0, 30_000, 7)]
    absent += [bytes(16), b"\xff" * 16, b"\xff" * 15 + b"\x01", rng.randbytes(16)]
    _check(tmp_path, held, absent)


def test_the_extremes_of_the_key_space_and_one_id_files(tmp_path):
    _check(tmp_path, [bytes(16), b"\xff" * 16], [bytes(15) + b"\x01", b"\xff" * 15 + b"\xfe"])
    _check(tmp_path, [b"\x80" + bytes(15)], [bytes(16), b"\xff" * 16, b"\x7f" + b"\xff" * 15])


def test_rows_say_where_held_ids_are_without_their_numbers(tmp_path):
    rng = random.Random(8)
    held = [rng.randbytes(16) for _ in range(3_000)]
    absent = [rng.randbytes(16) for _ in range(500)]
    arrays = _written(tmp_path, held)
    rows = arrays.rows_of(b"".join(held + absent)).tolist()
    assert rows[len(held) :] == [-1] * len(absent)
    assert rows[: len(held)] == [arrays.position(AJS_PREFIX + body) for body in held]
    assert sorted(rows[: len(held)]) == list(range(len(held)))


def test_the_guide_is_kept_in_the_file_and_checked_with_it(tmp_path):
    rng = random.Random(11)
    held = [rng.randbytes(16) for _ in range(5_000)]
    arrays = _written(tmp_path, held)
    slices = 2**7  # 5,000 ids / 32 per slice, rounded down to a power of two
    data_bytes = 5_000 * 20 + (slices + 1) * 4
    table_bytes = -(-data_bytes // BLOCK_BYTES) * 4
    assert (tmp_path / "arrays").stat().st_size == HEADER_BYTES + data_bytes + table_bytes
    assert arrays.file_bytes == (tmp_path / "arrays").stat().st_size
    firsts = sorted(body[:1][0] >> 1 for body in held)  # each id's slice: its first 7 bits
    assert arrays.stored_guide.tolist() == [sum(s < bound for s in firsts) for bound in range(slices + 1)]
    data = bytearray((tmp_path / "arrays").read_bytes())
    data[-table_bytes - 3] ^= 0x01  # in the guide's last entry: the count
    (tmp_path / "arrays").write_bytes(bytes(data))
    damaged = SealedArrays.open(tmp_path / "arrays")
    with pytest.raises(StoreCorruptError, match="checksum"):
        damaged.verify()
    with pytest.raises(StoreCorruptError, match="checksum"):
        _answers(SealedArrays.open(tmp_path / "arrays"), held[:10])  # a first search reads the guide


def test_a_search_checks_the_blocks_it_reads_and_never_answers_from_a_damaged_one(tmp_path):
    rng = random.Random(12)
    held = sorted(rng.randbytes(16) for _ in range(20_000))  # in key order: row n is held[n]
    arrays = _written(tmp_path, held)
    assert not arrays.checked.any()  # an open reads the header and the block table only
    assert _answers(arrays, [held[0]]) == [1_000]
    assert 0 < arrays.checked.sum() <= 4  # the guide's, and the blocks of one slice and its number
    path = tmp_path / "arrays"
    data = bytearray(path.read_bytes())
    data[HEADER_BYTES + 16 * 15_000] ^= 0x04  # the first half of held[15,000]
    path.write_bytes(bytes(data))
    damaged = SealedArrays.open(path)
    assert _answers(damaged, held[:100]) == list(range(1_000, 1_100))  # blocks far from the damage: exact
    with pytest.raises(StoreCorruptError, match=r"block at byte \d+ fails its checksum.*rebuild"):
        _answers(damaged, [held[15_000]])
    with pytest.raises(StoreCorruptError, match="checksum"):
        list(SealedArrays.open(path).columns())  # a scan reads every block


def test_a_damaged_header_or_block_table_is_refused_at_open(tmp_path):
    rng = random.Random(13)
    _written(tmp_path, [rng.randbytes(16) for _ in range(1_000)])
    path = tmp_path / "arrays"
    whole = path.read_bytes()
    for at in (16, len(whole) - 2):  # the first number; a block's CRC
        data = bytearray(whole)
        data[at] ^= 0x01
        path.write_bytes(bytes(data))
        with pytest.raises(StoreCorruptError, match="header or block table"):
            SealedArrays.open(path)


def test_ids_in_key_order_or_not_make_the_same_file(tmp_path):
    rng = random.Random(9)
    bodies = [rng.randbytes(16) for _ in range(2_000)]
    numbered = list(enumerate(bodies))
    written = {}
    for name, order in (("shuffled", numbered), ("sorted", sorted(numbered, key=lambda pair: pair[1]))):
        path = tmp_path / name
        seqs = np.array([100 + number for number, _ in order])
        sealed_arrays.write(path, AJS_PREFIX, b"".join(body for _, body in order), seqs, 100)
        written[name] = path.read_bytes()
    assert written["shuffled"] == written["sorted"]


def test_a_file_of_another_layout_is_refused(tmp_path):
    path = tmp_path / "arrays"
    header = sealed_arrays._HEADER.pack(b"DDSARR02", 10, 50, 0, len(AJS_PREFIX), AJS_PREFIX)
    path.write_bytes(header + bytes(200))
    with pytest.raises(StoreCorruptError, match="does not start with this layout's header"):
        SealedArrays.open(path)


def test_an_empty_file_holds_nothing(tmp_path):
    arrays = _written(tmp_path, [])
    assert len(arrays) == 0
    assert _answers(arrays, [bytes(16), b"\xff" * 16]) == [-1, -1]
    assert list(arrays.items()) == []
    arrays.verify()


def test_items_give_every_key_packed_as_the_codec_packs_it_in_key_order(tmp_path):
    rng = random.Random(4)
    ids = [f"ajs-{rng.getrandbits(128):032x}".encode() for _ in range(5_000)]
    keys = encode_ids(ids)
    arrays = _written(tmp_path, [key[len(AJS_PREFIX) :] for key in keys])
    read = [pair for keys_read, seqs in arrays.items(chunk=777) for pair in zip(keys_read, seqs, strict=True)]
    numbered = {key: 1_000 + index for index, key in enumerate(keys)}
    assert read == sorted(numbered.items())


def test_a_file_keeps_its_prefix(tmp_path):
    arrays = _written(tmp_path, [bytes(16)], prefix=bytes([TAG_UUID]))
    assert arrays.prefix == bytes([TAG_UUID])
    assert next(arrays.items())[0] == [bytes([TAG_UUID]) + bytes(16)]


def test_bad_input_to_the_writer_is_refused(tmp_path):
    path = tmp_path / "arrays"
    body = bytes(16)
    with pytest.raises(ValueError, match="the same id twice"):
        sealed_arrays.write(path, AJS_PREFIX, body * 2, np.array([1, 2]), 0)
    with pytest.raises(ValueError, match="within 2"):
        sealed_arrays.write(path, AJS_PREFIX, body, np.array([MAX_SEQ_SPAN]), 0)
    with pytest.raises(ValueError, match="within 2"):
        sealed_arrays.write(path, AJS_PREFIX, body, np.array([4]), 5)
    with pytest.raises(ValueError, match="whole number"):
        sealed_arrays.write(path, AJS_PREFIX, body[:15], np.array([1]), 0)
    with pytest.raises(ValueError, match="1 ids and 2"):
        sealed_arrays.write(path, AJS_PREFIX, body, np.array([1, 2]), 0)
    assert list(tmp_path.iterdir()) == []


def test_a_write_replaces_the_file_whole_and_leaves_no_partial_file(tmp_path):
    rng = random.Random(5)
    first_ids = [rng.randbytes(16) for _ in range(100)]
    first = _written(tmp_path, first_ids)
    second = _written(tmp_path, [rng.randbytes(16) for _ in range(10)])
    assert len(second) == 10
    assert _answers(second, first_ids[:3]) == [-1, -1, -1]
    assert _answers(first, first_ids[:3]) == [1_000, 1_001, 1_002]  # a reader of the old file keeps it whole
    assert sorted(path.name for path in tmp_path.iterdir()) == ["arrays"]


def test_a_truncated_or_foreign_file_is_refused_with_what_to_do(tmp_path):
    rng = random.Random(6)
    _written(tmp_path, [rng.randbytes(16) for _ in range(100)])
    path = tmp_path / "arrays"
    os.truncate(path, HEADER_BYTES + 100 * 20 - 1)
    with pytest.raises(StoreCorruptError, match=r"holds 2047 bytes.*rebuild"):
        SealedArrays.open(path)
    header = bytearray(path.read_bytes()[:HEADER_BYTES])
    header[28] = 200  # the prefix's length
    path.write_bytes(bytes(header))
    with pytest.raises(StoreCorruptError, match="a prefix of 200 bytes"):
        SealedArrays.open(path)
    path.write_bytes(b"not arrays at all" * 10)
    with pytest.raises(StoreCorruptError, match="does not start with this layout's header"):
        SealedArrays.open(path)


def test_a_flipped_bit_is_found_by_verify(tmp_path):
    rng = random.Random(7)
    arrays = _written(tmp_path, [rng.randbytes(16) for _ in range(1_000)])
    arrays.verify()
    path = tmp_path / "arrays"
    data = bytearray(path.read_bytes())
    data[HEADER_BYTES + 12_345] ^= 0x10
    path.write_bytes(bytes(data))
    damaged = SealedArrays.open(path)
    with pytest.raises(StoreCorruptError, match="checksum"):
        damaged.verify()
