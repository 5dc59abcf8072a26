"""``dedupectl age`` and ``dedupectl compact`` on a stopped store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dedupectl.cli.app import app
from store.dedup_store import DedupStore
from store.footprint import ids_files

runner = CliRunner()
BASE_MS = 1_700_000_000_000


def _id(n: int) -> bytes:
    """An id of the kind sealed arrays do not take: the generations' ids stay in their SST files, which the
    commands here list."""
    return f"order-{n:08d}".encode()


@pytest.fixture
def data_dir(tmp_path: Path, short_generations) -> Path:
    """A stopped store of 30,000 ids in three generations of 10,000."""
    window = short_generations(10_000)
    with DedupStore.open(tmp_path / "data" / "events-0", topic="events", partition=0, window_ids=window) as store:
        assert store.generation_ids() == 10_000
        for first in range(0, 30_000, 1_000):
            numbers = range(first, first + 1_000)
            store.record([_id(n) for n in numbers], [BASE_MS + n for n in numbers])
            if (first + 1_000) % 10_000 == 0:
                store.flush()
    return tmp_path / "data"


def _json(*args: str):
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_age_keeps_the_newest_and_drops_whole_generations(data_dir: Path):
    (dry,) = _json("age", "-d", str(data_dir), "--max-keys", "15000", "--dry-run")
    assert (dry["ids_aged"], dry["live_ids_after"], dry["first_live_seq_after"]) == (15_000, 15_000, 15_000)
    assert dry["bytes_freed"] > 0  # the generation wholly below the cut
    (window,) = _json("window", "-d", str(data_dir))
    assert window["live_ids"] == 30_000  # a dry run changes nothing

    (aged,) = _json("age", "-d", str(data_dir), "--max-keys", "15000")
    assert (aged["ids_aged"], aged["live_ids_after"], aged["dry_run"]) == (15_000, 15_000, False)
    assert aged["bytes_freed"] == dry["bytes_freed"]
    rows = _json("sst", "-d", str(data_dir), "-f", "ids")
    assert [(row["first_seq"], row["last_seq"]) for row in rows] == [(10_000, 19_999), (20_000, 29_999)]
    found, gone = _json("lookup", "-d", str(data_dir), _id(15_000).decode(), _id(14_999).decode())
    assert found["in_window"] and found["seq"] == 15_000 and not gone["in_window"]


def test_compact_clears_what_aging_left(data_dir: Path):
    _json("age", "-d", str(data_dir), "--max-keys", "15000")
    (outcome,) = _json("compact", "-d", str(data_dir))
    # the range delete aging wrote in times is gone (RocksDB may have compacted it away already)
    assert outcome["tombstones_after"] == 0 and outcome["tombstones_before"] >= outcome["tombstones_after"]
    assert outcome["files_after"] <= outcome["files_before"]
    with DedupStore.open_existing(data_dir / "events-0") as store:
        assert [file.seq_range for file in ids_files(store)][-1][1] == 29_999
        assert store.contains_many([_id(14_999), _id(15_000), _id(29_999)]) == [False, True, True]
        assert store.ledger.timestamps([15_000, 29_999]) == [BASE_MS + 15_000, BASE_MS + 29_999]
