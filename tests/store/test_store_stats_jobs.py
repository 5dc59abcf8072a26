"""``stats`` counts the generations that hold live ids as live data; ``compactions`` filters by family and kind."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dedupectl.cli.app import app
from store.aging import advance_cut
from store.dedup_store import DedupStore
from store.footprint import ids_files

runner = CliRunner()


def _json(*args: str) -> object:
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.fixture
def three_files(tmp_path: Path, short_generations) -> tuple[Path, list[int]]:
    """Three generations of 10,000 ids each, one file each; the cut is past the first, still on disk."""
    data_dir = tmp_path / "data"
    window = short_generations(10_000)
    with DedupStore.open(data_dir / "events-0", topic="events", partition=0, window_ids=window) as store:
        for first in range(0, 30_000, 10_000):
            store.record([f"order-{n:08d}".encode() for n in range(first, first + 10_000)], [1] * 10_000)
            store.flush()
        advance_cut(store, 10_000)
        assert store.wait_for_seals(30)
        sizes = [file.size for file in ids_files(store)]
    assert len(sizes) == 3
    return data_dir, sizes


def test_stats_live_data_of_ids_is_the_files_holding_live_ids(three_files):
    data_dir, sizes = three_files
    (stats,) = _json("stats", "-d", str(data_dir))
    ids = next(family for family in stats["families"] if family["family"] == "ids")
    assert ids["sst_bytes"] == sum(sizes)
    assert ids["live_data_bytes"] == sizes[1] + sizes[2]  # the first generation's ids are all below the cut


def test_compactions_filter_by_family_and_kind(three_files):
    data_dir, _ = three_files
    d = ["-d", str(data_dir), "-n", "100"]
    everything = _json("compactions", *d)
    assert {job["family"] for job in everything} > {"ids"}
    flushes = _json("compactions", *d, "-f", "ids", "-k", "flush")
    assert len(flushes) >= 3 and all(job["family"] == "ids" and job["kind"] == "flush" for job in flushes)
    assert _json("compactions", *d, "-k", "deletion") == []
    both = _json("compactions", *d, "-f", "times", "-f", "ids", "-k", "flush")
    assert {job["family"] for job in both} == {"ids", "times"}
