"""Reading the writer's statistics dumps from its LOG while it writes them."""

from __future__ import annotations

from pathlib import Path

from store.rocks_log import last_stats_dump

_THREAD = "140647713445568"


def _dump(at: str, useful: int | None) -> str:
    text = (
        f"2026/11/28-21:45:{at} {_THREAD} [db/db_impl/db_impl.cc:1201] ------- DUMPING STATS -------\n"
        f"2026/11/28-21:45:{at} {_THREAD} [db/db_impl/db_impl.cc:1202] \n"
        "** DB Stats **\n"
        "Uptime(secs): 48.3 total, 1.0 interval\n"
        "\n"
    )
    if useful is not None:
        text += (
            f"2026/11/28-21:45:{at} {_THREAD} [db/db_impl/db_impl.cc:795] STATISTICS:\n"
            " rocksdb.block.cache.miss COUNT : 6949\n"
            f"rocksdb.bloom.filter.useful COUNT : {useful}\n"
        )
    return text


def test_a_dump_whose_counters_are_not_written_yet_gives_way_to_the_one_before(tmp_path: Path):
    (tmp_path / "LOG").write_text(_dump("42.910134", 7) + _dump("43.918815", None))
    dump = last_stats_dump(tmp_path)
    assert dump is not None and dump.time.endswith("42.910134")
    assert dump.counters["rocksdb.bloom.filter.useful"] == 7


def test_the_newest_complete_dump_is_read(tmp_path: Path):
    (tmp_path / "LOG").write_text(_dump("42.910134", 7) + _dump("43.918815", 9))
    dump = last_stats_dump(tmp_path)
    assert dump is not None and dump.counters["rocksdb.bloom.filter.useful"] == 9


def test_without_statistics_the_newest_dump_is_read(tmp_path: Path):
    (tmp_path / "LOG").write_text(_dump("42.910134", None) + _dump("43.918815", None))
    dump = last_stats_dump(tmp_path)
    assert dump is not None and dump.time.endswith("43.918815") and not dump.counters


def test_the_dump_before_may_be_in_the_rotated_log(tmp_path: Path):
    (tmp_path / "LOG.old.1700000000000000").write_text(_dump("42.910134", 7))
    (tmp_path / "LOG").write_text(_dump("43.918815", None))
    dump = last_stats_dump(tmp_path)
    assert dump is not None and dump.counters["rocksdb.bloom.filter.useful"] == 7
