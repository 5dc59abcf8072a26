"""Flush and compaction jobs of a store, read from its RocksDB LOG (``dedupectl compactions``).

RocksDB numbers jobs from 1 each time the database opens, and rotates the LOG on open, so a job is known by
its LOG file and number. Per job it writes an ``EVENT_LOG_v1`` JSON line when it starts and when it ends,
and readable lines such as ``[ids] [JOB 6] Compacting 4@0 + 1@1 files to L1``; FIFO file deletions (aging)
are a ``FIFO compaction: picking file N ... for deletion`` line and a ``table_file_deletion`` event.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from store import generations
from store.codec import CF_IDS, COLUMN_FAMILIES
from store.errors import ConfigError
from store.rocks_log import LogLine, log_files, read_lines

_EVENT = re.compile(r"EVENT_LOG_v1 (\{.*\})\s*$")
_JOB = re.compile(r"^\[(?P<cf>[^\]]+)\] \[JOB (?P<job>\d+)\] (?P<rest>.*)$")
_COMPACTING = re.compile(r"^Compacting (?P<inputs>.+?) files to L(?P<level>\d+)")
_INPUT = re.compile(r"(\d+)@(\d+)")
_FLUSH_TABLE = re.compile(r"^Level-0 flush table #(?P<file>\d+): (?P<bytes>\d+) bytes OK")
_FIFO_PICK = re.compile(r"^\[(?P<cf>[^\]]+)\] FIFO compaction: picking file (?P<file>\d+) with size (?P<size>\S+)")
_SIZE = re.compile(r"^(\d+(?:\.\d+)?)([KMGT]?B)$")
_SIZE_UNITS = {"B": 1, "KB": 1024, "MB": 1024**2, "GB": 1024**3, "TB": 1024**4}


@dataclass(frozen=True)
class Job:
    log: str  # LOG file the job is in
    job: int | None  # RocksDB's job number in that LOG (None for a FIFO deletion, which logs none)
    kind: str  # flush | compaction | deletion
    family: str | None = None
    reason: str | None = None
    started: str | None = None
    finished: str | None = None
    inputs: dict[str, int] = field(default_factory=dict)  # "L0" -> files read from L0
    input_files: tuple[int, ...] = ()
    output_level: int | None = None
    output_files: int | None = None
    bytes_in: int | None = None
    bytes_out: int | None = None
    keys_in: int | None = None
    keys_out: int | None = None
    seconds: float | None = None

    @property
    def keys_dropped(self) -> int | None:
        if self.keys_in is None or self.keys_out is None:
            return None
        return self.keys_in - self.keys_out

    @property
    def done(self) -> bool:
        return self.finished is not None


def _family(name: str | None) -> str | None:
    """A family as the commands name it: every generation's is ``ids``."""
    return CF_IDS if name is not None and generations.first_seq_of(name) is not None else name


def _size(text: str) -> int | None:
    match = _SIZE.match(text)
    return int(float(match[1]) * _SIZE_UNITS[match[2]]) if match else None


class JobParser:
    """Folds LOG lines into jobs, in order; feed it more lines to follow a live LOG."""

    def __init__(self) -> None:
        self.jobs: dict[tuple[str, int | None, int], Job] = {}
        self._deletion_serial = 0

    def _get(self, log: str, job: int, kind: str | None = None) -> Job:
        key = (log, job, 0)
        existing = self.jobs.get(key)
        if existing is None:
            existing = self.jobs[key] = Job(log=log, job=job, kind=kind or "compaction")
        elif kind is not None and existing.kind != kind:
            existing = self.jobs[key] = replace(existing, kind=kind)
        return existing

    def _put(self, job: Job) -> None:
        self.jobs[(job.log, job.job, 0)] = job

    def feed(self, line: LogLine) -> None:
        text = line.text
        event = _EVENT.search(text)
        if event:
            self._event(line, event.group(1))
            return
        fifo = _FIFO_PICK.match(text)
        if fifo:
            self._deletion_serial += 1
            key = (line.file, None, self._deletion_serial)
            self.jobs[key] = Job(
                log=line.file,
                job=None,
                kind="deletion",
                family=_family(fifo["cf"]),
                reason="aging (FIFO size limit)",
                started=line.time,
                finished=line.time,
                inputs={"L0": 1},
                input_files=(int(fifo["file"]),),
                output_files=0,
                bytes_in=_size(fifo["size"]),
                bytes_out=0,
                seconds=0.0,
            )
            return
        job_line = _JOB.match(text)
        if not job_line:
            return
        log, number, rest, family = line.file, int(job_line["job"]), job_line["rest"], _family(job_line["cf"])
        compacting = _COMPACTING.match(rest)
        if compacting:
            inputs = {f"L{level}": int(count) for count, level in _INPUT.findall(compacting["inputs"])}
            job = self._get(log, number, "compaction")
            self._put(replace(job, family=family, inputs=inputs, output_level=int(compacting["level"])))
        elif rest.startswith("Flushing memtable"):
            job = self._get(log, number, "flush")
            self._put(replace(job, family=family, started=job.started or line.time))
        else:
            table = _FLUSH_TABLE.match(rest)
            if table:
                job = self._get(log, number, "flush")
                self._put(replace(job, family=family, bytes_out=int(table["bytes"]), output_files=1, output_level=0))

    def _event(self, line: LogLine, payload: str) -> None:
        try:
            event = json.loads(payload)
        except ValueError:
            return
        name, number = event.get("event"), event.get("job")
        if number is None:
            return
        log = line.file
        if name == "flush_started":
            job = self._get(log, number, "flush")
            self._put(
                replace(
                    job,
                    started=line.time,
                    reason=event.get("flush_reason"),
                    keys_in=event.get("num_entries"),
                    bytes_in=event.get("total_data_size"),
                )
            )
        elif name == "flush_finished":
            job = self._get(log, number, "flush")
            seconds = None
            if job.started:
                seconds = _seconds_between(job.started, line.time)
            self._put(replace(job, finished=line.time, seconds=seconds))
        elif name == "table_file_creation":
            job = self._get(log, number)
            if job.kind == "flush":
                self._put(replace(job, family=job.family or _family(event.get("cf_name")), keys_out=_entries(event)))
        elif name == "compaction_started":
            job = self._get(log, number, "compaction")
            files = tuple(file for key, value in event.items() if key.startswith("files_L") for file in value)
            inputs = job.inputs or {
                key.removeprefix("files_"): len(value) for key, value in event.items() if key.startswith("files_L")
            }
            self._put(
                replace(
                    job,
                    started=line.time,
                    reason=event.get("compaction_reason"),
                    inputs=inputs,
                    input_files=files,
                    bytes_in=event.get("input_data_size"),
                )
            )
        elif name == "compaction_finished":
            job = self._get(log, number, "compaction")
            micros = event.get("compaction_time_micros")
            self._put(
                replace(
                    job,
                    finished=line.time,
                    output_level=event.get("output_level", job.output_level),
                    output_files=event.get("num_output_files"),
                    bytes_out=event.get("total_output_size"),
                    keys_in=event.get("num_input_records"),
                    keys_out=event.get("num_output_records"),
                    seconds=None if micros is None else micros / 1e6,
                )
            )

    def finished_jobs(self) -> list[Job]:
        """Jobs with something to show, in LOG order (a flush job of an empty memtable shows nothing)."""
        return [job for job in self.jobs.values() if job.started or job.finished]


def _entries(event: dict) -> int | None:
    properties = event.get("table_properties") or {}
    return properties.get("num_entries")


def _seconds_between(start: str, end: str) -> float | None:
    try:
        return max(_clock(end) - _clock(start), 0.0)
    except ValueError:
        return None


def _clock(stamp: str) -> float:
    # "2026/11/22-01:02:26.491888": seconds since midnight are enough for a job's duration (a job across
    # midnight shows a negative span, clamped to 0).
    clock = stamp.split("-", 1)[1]
    hours, minutes, seconds = clock.split(":")
    return int(hours) * 3600 + int(minutes) * 60 + float(seconds)


JOB_KINDS = ("flush", "compaction", "deletion")


@dataclass(frozen=True)
class JobFilter:
    """Which jobs to show: of these families and kinds (empty: any)."""

    families: frozenset[str] = frozenset()
    kinds: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        unknown = sorted(self.kinds - set(JOB_KINDS))
        if unknown:
            raise ConfigError(f"unknown job kind {unknown[0]!r}", _choices(JOB_KINDS))
        unknown = sorted(self.families - set(COLUMN_FAMILIES))
        if unknown:
            raise ConfigError(f"unknown family {unknown[0]!r}", _choices(COLUMN_FAMILIES))

    def matches(self, job: Job) -> bool:
        return (not self.families or job.family in self.families) and (not self.kinds or job.kind in self.kinds)


ANY_JOB = JobFilter()


def _choices(names: Sequence[str]) -> str:
    return f"use {', '.join(names[:-1])} or {names[-1]}"


def read_jobs(store_dir: Path, last: int | None = None, only: JobFilter = ANY_JOB) -> list[Job]:
    """Flush, compaction and FIFO-deletion jobs in the store's LOG files that ``only`` matches, oldest first
    (the ``last`` ones)."""
    parser = JobParser()
    for path in log_files(store_dir):
        for line in read_lines(path)[0]:
            parser.feed(line)
    jobs = [job for job in parser.finished_jobs() if only.matches(job)]
    return jobs[-last:] if last else jobs


class LogFollower:
    """Reads what the writer appends to one store's LOG (from the end at creation), following rotations."""

    def __init__(self, store_dir: Path) -> None:
        self.path = Path(store_dir) / "LOG"
        stat = self.path.stat() if self.path.exists() else None
        self._inode = stat.st_ino if stat else None
        self._offset = stat.st_size if stat else 0
        self._parser = JobParser()
        self._announced: set[tuple] = set()

    def poll(self) -> list[Job]:
        """Jobs finished since the last poll."""
        if self.path.exists():
            inode = self.path.stat().st_ino
            if inode != self._inode:  # the writer reopened the store: a new LOG
                self._inode, self._offset, self._parser = inode, 0, JobParser()
        lines, self._offset = read_lines(self.path, self._offset)
        for line in lines:
            self._parser.feed(line)
        fresh = []
        for key, job in self._parser.jobs.items():
            if job.done and key not in self._announced:
                self._announced.add(key)
                fresh.append(job)
        return fresh


def follow_jobs(
    store_dirs: Sequence[Path],
    stop: Callable[[], bool],
    poll_seconds: float = 1.0,
    sleep: Callable[[float], None] = time.sleep,
    only: JobFilter = ANY_JOB,
) -> Iterator[tuple[int, Job]]:
    """Yield ``(index of the store dir, job)`` for each job ``only`` matches that finishes from now on, until
    ``stop()``."""
    followers = [LogFollower(path) for path in store_dirs]
    while not stop():
        quiet = True
        for index, follower in enumerate(followers):
            for job in follower.poll():
                quiet = False
                if only.matches(job):
                    yield index, job
        if quiet:
            sleep(poll_seconds)
