"""The Spark jobs: ``dedupectl audit``, ``replay`` and ``rebuild``.

- ``jars``: Spark's Kafka connector, resolved from Maven Central into the project's cache (``spark.jars``);
- ``session``: preflight checks, the SparkSession (quiet, logged to a file), ``spark-submit`` commands;
- ``runner``: one job from checks to result, Spark failures made one line; ``progress``: steps and tasks;
- ``sources``: Kafka ranges and archived files as one record schema; ``extract``: ids by the worker's rules;
- ``audit``, ``replay``, ``rebuild``: the jobs (``rebuild`` writes SST files through ``store.bulk_load``);
- ``audit_sides``: what an audit compares, topics of the worker's configuration or archived files;
- ``submit``: the entry point ``spark-submit`` runs.

pyspark is imported only here (and lazily by the CLI), so other commands start without it.
"""
