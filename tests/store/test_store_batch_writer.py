"""The order a batch's ids go into the memtable in: every id once, in key order (by the first 8 bytes where
every key of the batch has them and one width)."""

from __future__ import annotations

import os

import pytest

from store.batch_writer import key_order
from store.codec import encode_ids


@pytest.mark.parametrize(
    "keys",
    [
        encode_ids([f"ajs-{os.urandom(16).hex()}".encode() for _ in range(5_000)]),  # the usual batch
        [os.urandom(16) for _ in range(1_000)],
        [os.urandom(length) for length in (3, 8, 20, 1, 12) * 40],  # mixed widths: sorted whole
        [b"\xff" * 7, b"\x00" * 7, b"\x7f" * 7],  # shorter than 8 bytes
        [b"only-one-key"],
    ],
)
def test_a_batch_is_put_in_key_order_each_key_once(keys):
    order = key_order(keys)
    assert sorted(order) == list(range(len(keys)))
    assert [keys[index] for index in order] == sorted(keys)


def test_keys_alike_in_their_first_8_bytes_keep_their_batch_order():
    keys = [b"samehead" + bytes([tail]) for tail in (9, 3, 7, 1)]
    assert key_order(keys) == [0, 1, 2, 3]
