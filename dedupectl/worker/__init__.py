"""The dedup worker (``dedupectl run``): ``Worker`` is the one entry; the modules beside it own its parts."""

from dedupectl.worker.loop import Worker
from dedupectl.worker.signals import stop_on_signals
from dedupectl.worker.summary import RunSummary

__all__ = ["RunSummary", "Worker", "stop_on_signals"]
