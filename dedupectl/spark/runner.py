"""Running one job: checks first, then a session, then the job, with Spark's failures made one line.

A Spark failure arrives as a Java exception chain (Py4J) or a captured exception carrying a Python worker's
traceback; the operator gets the root cause's first line and the path of the run's Spark log. A
``DedupeError`` raised inside an executor (the replay's producer, for example) keeps its own message.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

from dedupectl.errors import AuthenticationError, DedupeError, PermissionDeniedError, SparkError
from dedupectl.spark.session import SparkSettings, preflight, spark_session
from reconcile.kafka import permission_denied

T = TypeVar("T")

# each layer defines its own errors (store, reconcile, snapshots, dedupectl): a traceback names the class's module
_DEDUPE_ERROR = re.compile(
    r"^(?:store|reconcile|snapshots|dedupectl)\.errors\.(?P<name>\w+): (?P<message>.+)$", re.MULTILINE
)
# errors of an executor that keep their class (and so their exit code) on the driver
_KEPT_ERRORS = {cls.__name__: cls for cls in (PermissionDeniedError, AuthenticationError)}
_DATA_LOSS = "Some data may have been lost"
# an executor whose Python worker never started (the interpreter missing or failing): what it printed
_WORKER_DID_NOT_START = re.compile(
    r"Error from python worker:\s*\n\s*(?P<line>\S[^\n]*)|(?P<program>Cannot run program \"[^\"]*\"[^\n]*)"
)
# the last line of a Python traceback carried in a Java message: ``SomeError: what``
_PYTHON_ERROR = re.compile(r"^(?P<name>[A-Z]\w*(?:Error|Exception)): (?P<message>.+)$", re.MULTILINE)
_EXECUTOR_PYTHON = "the interpreter spark.pyspark.python names, on every node (docs/spark-cluster.md)"
# the Java client's authorization failures, as Spark's Kafka source reports them
_DENIED = re.compile(
    r"(?P<kind>Topic|Group)AuthorizationException: Not authorized to access (?:topics|group): \[?(?P<name>[^\]\s]+)\]?"
)


@dataclass(frozen=True)
class JobRun(Generic[T]):
    result: T
    master: str
    log_file: Path | None


def run_job(
    settings: SparkSettings,
    job: Callable[[object], T],
    *,
    notify: Callable[[str], None] | None = None,
) -> JobRun[T]:
    """Preflight, start (or reuse) a session, run ``job(spark)``; every failure is a DedupeError."""
    jars = preflight(settings, notify)
    if notify:
        notify(f"starting Spark ({settings.master})")
    with spark_session(settings, jars) as (spark, info):
        try:
            result = job(spark)
        except DedupeError:
            raise
        except Exception as error:
            if not _is_spark_error(error):
                raise
            raise describe_failure(error, info.log_file) from error
    return JobRun(result=result, master=info.master, log_file=info.log_file)


def _is_spark_error(error: BaseException) -> bool:
    module = type(error).__module__
    return module.startswith(("py4j", "pyspark"))


def describe_failure(error: BaseException, log_file: Path | None) -> DedupeError:
    """The one line an operator needs from a failed Spark job."""
    hint = f"see the Spark log {log_file}" if log_file else "see the Spark driver's log"
    text = _root_cause(error)
    inner = list(_DEDUPE_ERROR.finditer(text))
    if inner:  # our own error, raised on an executor
        name, message = inner[-1]["name"], inner[-1]["message"].strip()
        return _KEPT_ERRORS.get(name, SparkError)(message)
    denied = _DENIED.search(text)
    if denied:  # Spark's Kafka source only reads
        resource, operation = ("topic", "Read") if denied["kind"] == "Topic" else ("group", "Read")
        return permission_denied(operation, resource, denied["name"], denied.group(0))
    did_not_start = _WORKER_DID_NOT_START.search(text)
    if did_not_start:
        return SparkError(
            f"the executors' Python did not start: {(did_not_start['line'] or did_not_start['program']).strip()[:300]}",
            f"install dedupectl in {_EXECUTOR_PYTHON}; {hint}",
        )
    python_errors = list(_PYTHON_ERROR.finditer(text))
    if python_errors and python_errors[-1]["name"] in ("ModuleNotFoundError", "ImportError"):
        return SparkError(
            f"the executors' Python cannot import what the job needs: {python_errors[-1]['message'].strip()[:300]}",
            f"install dedupectl with its dependencies in {_EXECUTOR_PYTHON}; {hint}",
        )
    if _DATA_LOSS in text:
        return SparkError(
            "records of the range were deleted (retention) while the job read them",
            "run it again: the range is resolved anew; or narrow --from to what the topic still holds",
        )
    first = next((line.strip() for line in text.splitlines() if line.strip()), type(error).__name__)
    if python_errors:  # the Python exception says more than the Java header that carried it
        first = f"{python_errors[-1]['name']}: {python_errors[-1]['message'].strip()}"
    return SparkError(f"Spark job failed: {first[:400]}", hint)


def _root_cause(error: BaseException) -> str:
    java = getattr(error, "java_exception", None)
    if java is not None:
        try:
            cause, seen = java, 0
            while cause.getCause() is not None and seen < 20:
                cause, seen = cause.getCause(), seen + 1
            text = str(cause.toString())
            # a Python worker's traceback, or why it did not start, travels inside the outer Java message
            full = str(java.toString())
            return full if _DEDUPE_ERROR.search(full) or _WORKER_DID_NOT_START.search(full) else text
        except Exception:  # the JVM is gone: fall back to the Python-side text
            pass
    text = str(error)
    return text.replace("An error occurred while calling", "calling", 1)
