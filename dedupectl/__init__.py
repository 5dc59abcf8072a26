"""dedupectl: exactly-once deduplication for Kafka."""


def __getattr__(name: str) -> str:
    # read from the installed metadata on first use (pyproject.toml is the one source): importlib.metadata
    # costs every command's start-up some 50 ms, and only --version and the metrics need it
    if name == "__version__":
        from importlib.metadata import version

        return version("dedupectl")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
