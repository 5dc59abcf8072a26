"""Which partition stores an operator command works on: ``--data-dir``, ``--topic``, ``--partition``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from store.errors import ConfigError, DataDirError, StoreNotFoundError
from store.layout import list_store_dirs, store_path


@dataclass(frozen=True)
class StoreRef:
    topic: str
    partition: int
    path: Path


def _ranges(numbers: Sequence[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``"0-2, 5"``."""
    spans: list[str] = []
    for number in sorted(numbers):
        if spans and spans[-1].split("-")[-1] == str(number - 1):
            spans[-1] = f"{spans[-1].split('-')[0]}-{number}"
        else:
            spans.append(str(number))
    return ", ".join(spans)


def select_stores(data_dir: Path, topic: str | None = None, partitions: Sequence[int] | None = None) -> list[StoreRef]:
    """The stores to act on, or an error that says what is there instead."""
    data_dir = Path(data_dir)
    if not data_dir.exists():
        raise DataDirError(f"data directory {data_dir} does not exist", "pass the worker's --data-dir")
    if not data_dir.is_dir():
        raise DataDirError(f"{data_dir} is not a directory", "pass the worker's --data-dir")
    if (data_dir / "CURRENT").exists():
        raise DataDirError(
            f"{data_dir} is a store directory itself", f"pass its parent as --data-dir: --data-dir {data_dir.parent}"
        )
    found = [StoreRef(*entry) for entry in list_store_dirs(data_dir)]
    if not found:
        raise StoreNotFoundError(
            f"{data_dir} holds no dedup store", "pass the worker's --data-dir (stores are <topic>-<partition> folders)"
        )
    topics = sorted({ref.topic for ref in found})
    if topic is None:
        if len(topics) > 1:
            raise ConfigError(
                f"{data_dir} holds stores of several topics ({', '.join(topics)})", "pick one with --topic"
            )
        topic = topics[0]
    mine = [ref for ref in found if ref.topic == topic]
    if not mine:
        raise StoreNotFoundError(f"no store of topic {topic!r} in {data_dir}", f"topics there: {', '.join(topics)}")
    if not partitions:
        return mine
    by_partition = {ref.partition: ref for ref in mine}
    selected = []
    for partition in dict.fromkeys(partitions):
        if partition in by_partition:
            selected.append(by_partition[partition])
            continue
        path = store_path(data_dir, topic, partition)
        if path.exists():
            raise StoreNotFoundError(f"{path} is not a dedup store (no RocksDB database in it)")
        raise StoreNotFoundError(
            f"no store for partition {partition} of {topic!r} in {data_dir}",
            f"partitions there: {_ranges(list(by_partition))}",
        )
    return selected


def partitions_without_store(refs: Sequence[StoreRef], partition_count: int) -> list[int]:
    """Partitions ``0..partition_count-1`` of the stores' topic that have no store among ``refs``."""
    held = {ref.partition for ref in refs}
    return [partition for partition in range(partition_count) if partition not in held]
