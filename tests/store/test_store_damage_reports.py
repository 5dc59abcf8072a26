"""Telling RocksDB's report of a damaged file apart from other errors, along an error's causes."""

from __future__ import annotations

from store.damage import corruption_of
from store.errors import StoreCorruptError


class _Mute(Exception):
    def __str__(self) -> str:  # as pyspark's captured errors once the Spark gateway is gone
        raise AssertionError("cannot say itself")


def test_a_cause_that_cannot_say_itself_is_not_taken_for_damage():
    try:
        try:
            raise _Mute()
        except _Mute as mute:
            raise RuntimeError("the job failed") from mute
    except RuntimeError as error:
        assert corruption_of(error) is None


def test_rocksdb_corruption_among_the_causes_names_the_file():
    try:
        try:
            raise _Mute()
        except _Mute:
            raise RuntimeError("Corruption: block checksum mismatch in file /data/s/000123.sst offset 4") from None
    except RuntimeError as error:
        found = corruption_of(error)
    assert isinstance(found, StoreCorruptError)
    assert "000123.sst" in str(found)
