"""Damaged store files, told as one line, and reads that end in that line instead of in a shorter answer.

RocksDB checks every block it reads against the checksum the block carries, and every file its MANIFEST names
against the size recorded there; what fails reaches Python as a plain ``Exception`` whose text is RocksDB's
status (``Corruption: block checksum mismatch: … in /data/events-0/000059.sst offset 201 size 196``).
``corruption_of`` turns such an error into a ``StoreCorruptError`` that names the file and says what to do.

A scan through rocksdict's ``items()`` stops at a damaged block as if the family ended there: a filter built,
sealed arrays written or a sequence view made from such a scan would silently lack ids. ``scan`` and
``check_ended`` read the iterator's status once it is no longer valid, so a read ends in the error instead.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rocksdict import Rdict, RdictIter, ReadOptions

from store.errors import StoreCorruptError

REMEDY = "restore the store from a snapshot (dedupectl snapshot restore) or rebuild it (dedupectl rebuild)"
_ROCKSDB_CORRUPTION = "Corruption:"
_PREFIXES = re.compile(r"^(?:(?:Corruption|IO error): )+")
_DETAIL = re.compile(r": stored = | in /|: /|: While |\. Expected |  The file ")
_FILE_IN_TEXT = re.compile(r"(/[^\s:]*?/(?:\d+\.(?:sst|log)|MANIFEST-\d+|CURRENT))")


def damaged(what: str, why: str) -> StoreCorruptError:
    """The one-line refusal for a damaged file of the store: ``what`` names it, ``why`` says what is wrong."""
    return StoreCorruptError(f"{what} is damaged ({why})", REMEDY)


def corruption_of(error: BaseException, store: Path | None = None) -> StoreCorruptError | None:
    """The operator's error for RocksDB's report of a damaged file in ``error`` or its causes (naming the file, or
    else ``store``); else None."""
    link: BaseException | None = error
    seen: set[int] = set()
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        if isinstance(link, StoreCorruptError):
            return link
        try:
            text = str(link)
        except Exception:  # an error that cannot say itself (pyspark's, once its gateway is gone) is not RocksDB's
            text = ""
        if text.startswith(_ROCKSDB_CORRUPTION):
            named = _FILE_IN_TEXT.search(text)
            what = f"store file {named.group(1)}" if named else f"store {store}" if store else "a store file"
            return damaged(what, _reason(text))
        link = link.__cause__ or link.__context__
    return None


def _reason(text: str) -> str:
    """What RocksDB says is wrong, without its prefixes, the file (named apart) and the checksums' values."""
    reason = _PREFIXES.sub("", text.splitlines()[0].strip())
    return _DETAIL.split(reason, maxsplit=1)[0].strip() or "RocksDB reports corruption"


@contextmanager
def translated() -> Iterator[None]:
    """Raise RocksDB's report of a damaged file as ``StoreCorruptError``; any other error unchanged."""
    try:
        yield
    except StoreCorruptError:
        raise
    except Exception as error:
        corrupt = corruption_of(error)
        if corrupt is None:
            raise
        raise corrupt from error


def check_ended(it: RdictIter) -> None:
    """Call once ``it`` is no longer valid: a damaged block ends it early, which only its status tells."""
    try:
        it.status()
    except Exception as error:
        del it  # the traceback keeps this frame: the iterator, and with it the database, must not stay open
        corrupt = corruption_of(error)
        if corrupt is None:
            raise
        raise corrupt from error


def scan(
    family: Rdict, from_key: bytes | None = None, read: ReadOptions | None = None
) -> Iterator[tuple[bytes, bytes]]:
    """``(key, value)`` of ``family`` in key order from ``from_key`` (within ``read``'s bounds), ending in a
    ``StoreCorruptError`` where a damaged block would otherwise end it early."""
    it = family.iter(read) if read is not None else family.iter()
    try:
        with translated():
            if from_key is None:
                it.seek_to_first()
            else:
                it.seek(from_key)
        while it.valid():
            yield it.key(), it.value()
            it.next()
        check_ended(it)
    finally:
        del it


def scan_chunks(
    family: Rdict, from_key: bytes, read: ReadOptions, size: int
) -> Iterator[tuple[list[bytes], list[bytes]]]:
    """``scan`` a chunk at a time, as ``(keys, values)`` of up to ``size`` entries: the loop of a whole-family
    read (a filter's build, a restart's read back), where a generator step per entry is most of the cost."""
    it = family.iter(read)
    try:
        with translated():
            it.seek(from_key)
        valid, key, value, step = it.valid, it.key, it.value, it.next
        while valid():
            keys: list[bytes] = []
            values: list[bytes] = []
            while len(keys) < size and valid():
                keys.append(key())
                values.append(value())
                step()
            yield keys, values
        check_ended(it)
    finally:
        del it, valid, key, value, step
