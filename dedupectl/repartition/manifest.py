"""What a repartition build left for its cutover, in the data directory: ``<data_dir>/.<input topic>.repartition/``
holds one store per new partition (``<input topic>-<Q>``) and ``manifest.json``, this module's record.

The manifest names the layouts (old and new partition counts, the partitioner), the output offsets each old
partition was read to (the build's end, where the cutover's fold of the tails starts) and the phase:
``built`` (workers may still run on the old layout), ``cutting-over`` (the topics may have partitions added
and the stores be half swapped: no worker may start until the cutover is run again to its end).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from dedupectl.errors import RepartitionError

BUILT = "built"
CUTTING_OVER = "cutting-over"
MANIFEST = "manifest.json"


def staging_dir(data_dir: Path, input_topic: str) -> Path:
    """Hidden, and not of a store's name (``<topic>-<partition>``): the data directory's readers skip it."""
    return Path(data_dir) / f".{input_topic}.repartition"


@dataclass(frozen=True)
class Manifest:
    input_topic: str
    output_topic: str
    old_count: int
    new_count: int
    partitioner: str
    read_to: tuple[int, ...]  # per old partition: the output offset the build read to (exclusive)
    built_at_ms: int
    phase: str = BUILT
    steps: tuple[str, ...] = ()  # the cutover's steps done, so that a cutover run again goes on after them
    covered: tuple[int, ...] = ()  # per new partition: the output offset its store covers once folded

    def with_phase(self, phase: str) -> Manifest:
        return replace(self, phase=phase)

    def with_step(self, step: str, **fields: object) -> Manifest:
        return replace(self, steps=(*self.steps, step), **fields)

    def save(self, directory: Path) -> None:
        """Written whole then renamed: a reader sees the old record or the new one, never half of one."""
        partial = directory / f"{MANIFEST}.tmp"
        partial.write_text(json.dumps(asdict(self), indent=2))
        with open(partial, "rb") as handle:
            os.fsync(handle.fileno())
        partial.replace(directory / MANIFEST)

    @classmethod
    def load(cls, directory: Path) -> Manifest:
        path = directory / MANIFEST
        try:
            raw = json.loads(path.read_text())
            tuples = {name: tuple(raw.get(name, ())) for name in ("read_to", "steps", "covered")}
            return cls(**{**raw, **tuples})
        except FileNotFoundError:
            raise RepartitionError(
                f"no repartition build in {directory}", "run `dedupectl repartition build` first"
            ) from None
        except (OSError, ValueError, TypeError, KeyError) as error:
            raise RepartitionError(
                f"the repartition manifest {path} is unreadable ({error})",
                "delete the directory and run `dedupectl repartition build` again",
            ) from error


def cutover_under_way(data_dir: Path, input_topic: str) -> Manifest | None:
    """The manifest of a cutover begun and not finished in ``data_dir``, if there is one."""
    directory = staging_dir(data_dir, input_topic)
    if not (directory / MANIFEST).exists():
        return None
    manifest = Manifest.load(directory)
    return manifest if manifest.phase == CUTTING_OVER else None


def refuse_cutover_under_way(data_dir: Path, input_topic: str) -> None:
    """The worker's check at start: between a cutover's first step and its last, the stores and topics are of
    neither layout."""
    manifest = cutover_under_way(data_dir, input_topic)
    if manifest is not None:
        raise RepartitionError(
            f"a cutover of {input_topic!r} from {manifest.old_count} to {manifest.new_count} partitions is under way "
            f"in {data_dir} (done: {', '.join(manifest.steps) or 'nothing yet'})",
            "run `dedupectl repartition cutover` again to finish it, then start the workers",
        )
