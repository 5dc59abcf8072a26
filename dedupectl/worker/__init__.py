"""The dedup worker (``dedupectl run``): ``Worker`` is the one entry; the modules beside it own its parts."""

from dedupectl.worker.loop import RunSummary, Worker, stop_on_signals

__all__ = ["RunSummary", "Worker", "stop_on_signals"]
