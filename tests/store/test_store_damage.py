"""Damaged store files: each kind of file a store keeps, with a byte flipped, cut short or deleted, is either
never read for an answer or refused in one line that names it and says restore or rebuild (exit 2), by the
writer, by a reader, by the read-only commands, and always by a whole check (``store.verify``, what a restore
runs); a damaged id filter is built anew, never used. No answer ever comes from the damaged bytes."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from mixed_ids import distinct_mixed_ids
from rocksdict import AccessType, Options, Rdict

from store import dedup_store, generations
from store.codec import encode_ids
from store.dedup_store import DedupStore
from store.errors import StoreCorruptError
from store.filter_keeper import FILTER_FILE
from store.id_filter import GROUPS
from store.verify import verify_store

COUNT = 12_000
GENERATION = 3_000
TOPIC = "events"
ASKED = (1, 2_500, 4_000, 7_777, COUNT - 1)  # one id in each generation, the newest's last
ROLES = ("ids-table", "times-table", "meta-table", "MANIFEST", "CURRENT", "sealed-arrays", "id-filter")
DAMAGES = ("flip", "truncate", "delete")


def _window() -> int:
    return int(GENERATION * (GROUPS - 1) / dedup_store.FILTER_SLACK)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, list[bytes], list[bytes]]:
    """A stopped worker's store: sealed generations in sealed arrays, a saved id filter, ids of every kind."""
    ids, unseen = distinct_mixed_ids(COUNT, 5), distinct_mixed_ids(300, 6)
    root = tmp_path_factory.mktemp("damage") / "data"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(dedup_store, "MIN_FILTER_WINDOW", 1)
        patch.setattr(generations, "MIN_GENERATION_IDS", 1)
        with DedupStore.open(root / f"{TOPIC}-0", topic=TOPIC, partition=0, window_ids=_window()) as store:
            for at in range(0, COUNT, 500):
                chunk = ids[at : at + 500]
                assert not any(store.contains_many(chunk))
                store.record(chunk, [1_000 + n for n in range(at, at + len(chunk))], output_offsets=range(at, at + 500))
            assert store.wait_for_seals(60)
            assert len(store.arrays_files()) >= 3
    return root, ids, unseen


def _tables(path: Path) -> dict[str, str]:
    """A table file of each family kind, by role."""
    families = {name: Options(raw_mode=True) for name in Rdict.list_cf(str(path))}
    db = Rdict(str(path), Options(raw_mode=True), column_families=families, access_type=AccessType.read_only(False))
    try:
        files = db.live_files()
    finally:
        db.close()
    roles: dict[str, str] = {}
    for file in sorted(files, key=lambda f: -f["size"]):
        key = file["start_key"]
        role = "times-table" if len(key) == 8 else "meta-table" if key[:1].isalpha() else "ids-table"
        roles.setdefault(role, file["name"].lstrip("/"))
    return roles


def _file_of(path: Path, role: str) -> Path:
    if role in ("ids-table", "times-table", "meta-table"):
        return path / _tables(path)[role]
    if role == "MANIFEST":
        return path / (path / "CURRENT").read_text().strip()
    if role == "sealed-arrays":
        return sorted(path.glob("*.arrays"))[0]
    return path / (FILTER_FILE if role == "id-filter" else role)


def _damage(file: Path, damage: str) -> None:
    if damage == "delete":
        file.unlink()
    elif damage == "truncate":
        os.truncate(file, file.stat().st_size // 2)
    else:
        data = bytearray(file.read_bytes())
        # in a table, a byte of its first data block (from offset 0): bytes of its properties or padding go
        # unread, and so never make an answer
        data[16 if file.suffix == ".sst" else len(data) // 2] ^= 0xFF
        file.write_bytes(bytes(data))


def _damaged_copy(built, tmp_path: Path, role: str, damage: str) -> tuple[Path, Path]:
    root, _, _ = built
    data = tmp_path / "data"
    shutil.copytree(root, data)
    store = data / f"{TOPIC}-0"
    file = _file_of(store, role)
    _damage(file, damage)
    return store, file


def _refused(error: StoreCorruptError, file: Path) -> None:
    """The one line: it names the damaged file (or, for CURRENT and a lost MANIFEST, the store) and what to do."""
    line = str(error)
    assert "\n" not in line and "restore" in line and "rebuild" in line
    assert file.name in line or str(file.parent) in line, line


def _exact(store: DedupStore, ids: list[bytes], unseen: list[bytes]) -> None:
    assert store.state.next_seq == COUNT
    assert all(store.contains_many(ids))
    assert not any(store.contains_many(unseen))
    assert store.live_seqs(encode_ids([ids[n] for n in ASKED])) == list(ASKED)


@pytest.mark.parametrize("damage", DAMAGES)
@pytest.mark.parametrize("role", ROLES)
def test_a_damaged_file_is_refused_or_never_read(built, tmp_path, role, damage, monkeypatch, caplog):
    _, ids, unseen = built
    store_dir, file = _damaged_copy(built, tmp_path, role, damage)
    monkeypatch.setattr(dedup_store, "MIN_FILTER_WINDOW", 1)
    monkeypatch.setattr(generations, "MIN_GENERATION_IDS", 1)
    outcomes = []
    for open_store in (
        lambda: DedupStore.open_secondary(store_dir),
        lambda: DedupStore.open(store_dir, topic=TOPIC, partition=0, window_ids=_window()),
    ):
        try:
            with caplog.at_level(logging.WARNING), open_store() as store:
                _exact(store, ids, unseen)
                outcomes.append("exact")
        except StoreCorruptError as error:
            _refused(error, file)
            outcomes.append("refused")
    if role == "id-filter":  # derived from the store: built anew, the store answers as before
        assert outcomes == ["exact", "exact"]
        if damage != "delete":
            assert f"the saved id filter {store_dir / FILTER_FILE}" in caplog.text
            assert "built anew" in caplog.text
        return
    with pytest.raises(StoreCorruptError) as whole:
        verify_store(store_dir)
    _refused(whole.value, file)
    if damage != "flip" or role not in ("ids-table", "times-table"):
        # a file RocksDB opens whole at every open, or a side file the store checks at open: refused by all
        assert outcomes == ["refused", "refused"]


def _typed(ids: list[bytes]) -> list[int]:
    """Numbers near each of ASKED whose ids an operator can type (the store holds binary ids too)."""
    return [next(m for m in range(n, -1, -1) if ids[m].isascii() and ids[m].decode().isprintable()) for n in ASKED]


def _cli(data: Path, *args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "dedupectl.cli.app", *args, "-d", str(data), "-t", TOPIC, "--json"]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def _answers_exactly(result: subprocess.CompletedProcess, ids: list[bytes], command: str) -> None:
    found = json.loads(result.stdout)
    if command == "window":
        assert (found[0]["live_ids"], found[0]["newest_seq"]) == (COUNT, COUNT - 1)
    elif command == "lookup":
        asked = _typed(ids)
        assert [(row["id"], row["in_window"], row["seq"]) for row in found] == [
            (ids[n].decode(), True, n) for n in asked
        ]
    else:
        assert found[0]["live_ids"] == COUNT


@pytest.mark.parametrize("damage", DAMAGES)
@pytest.mark.parametrize("role", [role for role in ROLES if role != "id-filter"])
def test_read_only_commands_refuse_a_damaged_file_in_one_line_or_answer_exactly(built, tmp_path, role, damage):
    _, ids, _ = built
    store_dir, file = _damaged_copy(built, tmp_path, role, damage)
    refused = 0
    for command in ("window", "stats", "lookup"):
        extra = [ids[n].decode() for n in _typed(ids)] if command == "lookup" else []
        result = _cli(store_dir.parent, command, *extra)
        if result.returncode == 0:
            _answers_exactly(result, ids, command)
            continue
        refused += 1
        assert result.returncode == 2, result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and "is damaged" in lines[0] and "restore" in lines[0], result.stderr
        assert file.name in lines[0] or str(store_dir) in lines[0], lines[0]
        assert json.loads(result.stdout)["error"]["exit_code"] == 2
    if damage != "flip" or role not in ("ids-table", "times-table", "sealed-arrays"):
        assert refused == 3  # a file opened whole at every open; else only a command that reads it refuses


def test_a_healthy_store_passes_the_whole_check(built):
    root, _, _ = built
    with DedupStore.open_secondary(root / f"{TOPIC}-0") as store:
        in_arrays = sum(count for *_, count in store.arrays_files())
    check = verify_store(root / f"{TOPIC}-0")
    assert check.arrays_ids == in_arrays > 0
    assert check.keys > COUNT - in_arrays  # the families' ids, their batches and the metadata
