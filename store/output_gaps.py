"""The output gaps a store keeps in its metadata (``store.codec``, "Output gaps"): the one a worker refused the
partition for, and those operators accepted."""

from __future__ import annotations

from dataclasses import replace

from store.codec import (
    GAP_TRUNCATED,
    META_ACCEPTED_GAPS,
    META_REFUSED_GAP,
    META_STATE,
    AcceptedGap,
    OutputGap,
    StoreState,
    decode_accepted_gaps,
    decode_gap,
    encode_accepted_gaps,
    encode_gap,
    encode_state,
)
from store.database import Database
from store.errors import StoreCorruptError, StoreError


class OutputGaps:
    def __init__(self, database: Database):
        self._database = database
        self.refused: OutputGap | None = None
        self.accepted: tuple[AcceptedGap, ...] = ()
        self.load()

    def load(self) -> None:
        database = self._database
        refused, accepted = database.meta_value(META_REFUSED_GAP), database.meta_value(META_ACCEPTED_GAPS)
        try:
            self.refused = None if refused is None else decode_gap(refused)
            self.accepted = () if accepted is None else decode_accepted_gaps(accepted)
        except (ValueError, KeyError, TypeError) as error:
            raise StoreCorruptError(
                f"store {database.path} has unreadable output gaps in its metadata ({error})",
                "restore it from a snapshot or rebuild it from the output topic",
            ) from error

    @property
    def offsets_from_seq(self) -> int:
        """The first sequence number whose recorded output offset belongs to the output topic as it is now:
        below it, batches were published before the topic was recreated or truncated (an accepted gap)."""
        return max((entry.from_seq for entry in self.accepted if entry.gap.kind == GAP_TRUNCATED), default=0)

    def note_refused(self, gap: OutputGap) -> None:
        self._database.require_writable()
        self._database.put_meta({META_REFUSED_GAP: encode_gap(gap)})
        self.refused = gap

    def clear_refused(self) -> None:
        self._database.require_writable()
        if self.refused is not None:
            self._database.put_meta({META_REFUSED_GAP: None})
            self.refused = None

    def to_accept(self, state: StoreState) -> OutputGap:
        """The refused gap, if an operator can accept it now; else a StoreError that says why not."""
        gap, path = self.refused, self._database.path
        if gap is None:
            raise StoreError(
                f"store {path} holds no refused output gap: nothing to accept",
                "a worker notes one when it refuses the partition; see `dedupectl window`",
            )
        if state.output_offset != gap.covered:
            raise StoreError(
                f"store {path} covers output offset {state.output_offset} now, not {gap.covered} as when the "
                f"gap was found",
                "start the worker again: its recovery checks the output afresh",
            )
        return gap

    def accept(self, state: StoreState, reason: str, by: str, accepted_ms: int) -> tuple[AcceptedGap, StoreState]:
        """Accept the refused gap and move the covered output offset to the gap's ``low``, in one write, so
        recovery goes on from the first offset the output holds; returns the entry and the new state."""
        self._database.require_writable()
        gap = self.to_accept(state)
        accepted = AcceptedGap(gap=gap, from_seq=state.next_seq, accepted_ms=accepted_ms, reason=reason, by=by)
        gaps = (*self.accepted, accepted)
        new_state = replace(state, output_offset=gap.low)
        self._database.put_meta(
            {
                META_ACCEPTED_GAPS: encode_accepted_gaps(gaps),
                META_REFUSED_GAP: None,
                META_STATE: encode_state(new_state),
            }
        )
        self.refused, self.accepted = None, gaps
        return accepted, new_state
