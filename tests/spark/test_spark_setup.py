"""The project's Spark set-up without a JVM: which connector jars are kept, the cache, the configuration a
job starts with, the master check, what a submitted job is given, and what an audit compares."""

from __future__ import annotations

import json
import sys

import pytest

from dedupectl.errors import ConfigError, SparkError
from dedupectl.spark import jars
from dedupectl.spark.audit_sides import audit_sides
from dedupectl.spark.runner import describe_failure
from dedupectl.spark.session import (
    SparkSettings,
    check_master,
    executor_python,
    job_arguments,
    parse_conf,
    spark_conf_entries,
    submit_command,
)
from dedupectl.spark.sources import FileSource, TopicSource


@pytest.mark.parametrize(
    ("filename", "artifact"),
    [
        ("spark-sql-kafka-0-10_2.13-4.2.0.jar", "spark-sql-kafka-0-10_2.13"),
        ("kafka-clients-3.9.2.jar", "kafka-clients"),
        ("commons-pool2-2.13.1.jar", "commons-pool2"),
        ("zstd-jni-1.5.7-7.jar", "zstd-jni"),
        ("orc-core-2.3.0-shaded-protobuf.jar", "orc-core"),
        ("netty-tcnative-boringssl-static-2.0.76.Final-linux-x86_64.jar", "netty-tcnative-boringssl-static"),
    ],
)
def test_artifact_names(filename, artifact):
    assert jars._artifact(filename) == artifact


def test_jars_pyspark_bundles_are_dropped(tmp_path):
    bundled, copied = tmp_path / "pyspark-jars", tmp_path / "staging"
    bundled.mkdir()
    copied.mkdir()
    for name in ("scala-library-2.13.18.jar", "lz4-java-1.11.0.jar", "spark-tags_2.13-4.3.0.jar"):
        (bundled / name).touch()
    for name in ("scala-library-2.13.15.jar", "lz4-java-1.10.1.jar", "spark-tags_2.13-4.2.0.jar",
                 "kafka-clients-3.9.2.jar", "spark-sql-kafka-0-10_2.13-4.2.0.jar"):  # fmt: skip
        (copied / name).touch()
    jars._drop_bundled(copied, bundled)
    assert sorted(p.name for p in (copied / "jars").iterdir()) == [
        "kafka-clients-3.9.2.jar",
        "spark-sql-kafka-0-10_2.13-4.2.0.jar",
    ]


def test_the_cache_is_found_only_when_complete(tmp_path, monkeypatch):
    monkeypatch.setenv("DEDUPECTL_CACHE_DIR", str(tmp_path))
    install = jars.spark_install()
    assert install.scala == "2.13" and install.version.count(".") == 2
    folder = jars.connector_folder(install)
    assert folder == tmp_path / f"spark-kafka-{install.version}_{install.scala}"
    (folder / "jars").mkdir(parents=True)
    (folder / "jars" / "kafka-clients-3.9.2.jar").touch()
    assert jars.find_connector_jars(install) is None  # no connector jar, no record: an interrupted copy
    (folder / "jars" / "spark-sql-kafka-0-10_2.13-4.2.0.jar").touch()
    assert jars.find_connector_jars(install) is None
    record = {"connector_version": "4.2.0", "token_provider_version": "4.0.0"}
    (folder / "connector.json").write_text(json.dumps(record))
    found = jars.find_connector_jars(install)
    assert found is not None and len(found.jars) == 2
    assert found.fallback == (install.version != "4.2.0")


def test_the_installed_version_is_tried_first_then_the_poms_fallback():
    install = jars.SparkInstall(version="9.9.9", scala="2.13", jars_dir=jars.POM_PATH.parent)
    candidates = jars._candidates(install)
    assert candidates[0] == ("9.9.9", "9.9.9")
    assert candidates[1] == (
        jars.pom_property("dedupectl.fallback.spark.version"),
        jars.pom_property("dedupectl.fallback.token.provider.version"),
    )


def test_configuration_of_a_local_and_a_cluster_job(tmp_path):
    local = spark_conf_entries(
        SparkSettings("local[2]", {"spark.driver.memory": "4g", "spark.driver.extraJavaOptions": "-Dx=1"}),
        None,
        tmp_path / "log4j2.properties",
    )
    assert local["spark.master"] == "local[2]" and local["spark.ui.showConsoleProgress"] == "false"
    assert local["spark.driver.memory"] == "4g"  # the operator's --conf wins
    assert local["spark.pyspark.python"] == sys.executable  # executors import dedupectl from this interpreter
    assert local["spark.driver.extraJavaOptions"] == f"-Dlog4j2.configurationFile={tmp_path}/log4j2.properties -Dx=1"
    cluster = spark_conf_entries(SparkSettings("spark://master:7077"), None, None)
    assert cluster["spark.master"] == "spark://master:7077"
    assert cluster["spark.pyspark.python"] == sys.executable and "spark.ui.enabled" not in cluster
    assert "spark.pyspark.python" not in spark_conf_entries(SparkSettings("yarn"), None, None)  # executors elsewhere


def test_the_driver_listens_on_loopback_for_a_cluster_on_loopback():
    assert "spark.driver.host" not in spark_conf_entries(SparkSettings("spark://master:7077"), None, None)
    assert "spark.driver.host" not in spark_conf_entries(SparkSettings("spark://127.0.0.1:1,10.9.9.9:2"), None, None)
    for master in ("spark://127.0.0.1:7077", "spark://localhost:7077", "spark://[::1]:7077"):
        conf = spark_conf_entries(SparkSettings(master), None, None)
        assert (conf["spark.driver.host"], conf["spark.driver.bindAddress"]) == ("127.0.0.1", "127.0.0.1"), master
    assert "spark.driver.host=127.0.0.1" in submit_command(SparkSettings("spark://127.0.0.1:7077"), None, ["audit"])
    # the operator's --conf of either wins, and the other is left to Spark (never a host the driver does not bind)
    chosen = SparkSettings("spark://127.0.0.1:7077", {"spark.driver.bindAddress": "0.0.0.0"})
    conf = spark_conf_entries(chosen, None, None)
    assert conf["spark.driver.bindAddress"] == "0.0.0.0" and "spark.driver.host" not in conf
    command = " ".join(submit_command(chosen, None, ["audit"]))
    assert "spark.driver.bindAddress=0.0.0.0" in command and "spark.driver.host" not in command


def test_the_executors_interpreter_is_the_operators_choice_first(monkeypatch):
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    assert executor_python(SparkSettings("local[2]")) == sys.executable
    assert executor_python(SparkSettings("k8s://https://k8s:443")) is None
    monkeypatch.setenv("PYSPARK_PYTHON", "/opt/py/bin/python3")
    assert executor_python(SparkSettings("yarn")) == "/opt/py/bin/python3"
    conf = {"spark.pyspark.python": "/srv/venv/bin/python"}
    assert executor_python(SparkSettings("spark://m:7077", conf)) == "/srv/venv/bin/python"


def test_master_urls():
    for master in ("local", "local[*]", "local[4]", "local[4,2]", "yarn", "k8s://https://k8s:443"):
        check_master(master)
    check_master("spark://a:7077,b:7077", probe=False)
    with pytest.raises(ConfigError, match="not a Spark master URL"):
        check_master("local[x]")
    with pytest.raises(ConfigError, match="is not host:port"):
        check_master("spark://nohost", probe=False)
    with pytest.raises(SparkError, match=r"cannot reach the Spark master spark://127\.0\.0\.1:1 .*refused"):
        check_master("spark://127.0.0.1:1")
    assert parse_conf(["a=b=c"]) == {"a": "b=c"}


def test_the_submitted_job_keeps_the_commands_own_arguments():
    argv = ["--debug", "audit", "-c", "d.toml", "--master", "yarn", "--window", "24h", "--print-submit"]
    assert job_arguments("audit", argv) == ["audit", "-c", "d.toml", "--window", "24h"]
    assert job_arguments("rebuild", ["rebuild", "-p", "3", "--master=spark://m:7077"]) == ["rebuild", "-p", "3"]
    argv = ["repartition", "build", "--partition-count", "8", "--master", "yarn", "--print-submit"]
    assert job_arguments("repartition build", argv) == ["repartition", "build", "--partition-count", "8"]


def test_audit_sides_from_files_topics_or_both(tmp_path):
    flags = {"bootstrap_servers": "broker:9092", "input_topic": "events", "output_topic": "events-deduped"}
    topics = audit_sides(None, flags, env={})
    assert (topics.input, topics.output) == (TopicSource("events"), TopicSource("events-deduped"))
    assert topics.kafka.bootstrap_servers == "broker:9092" and topics.value_format == "json"

    archive = str(tmp_path / "in.jsonl")
    one_side = audit_sides(None, {**flags, "input_topic": None}, input_files=archive, env={})
    assert (one_side.input, one_side.output) == (FileSource(archive), TopicSource("events-deduped"))
    assert one_side.kafka is not None, "the output is still read from Kafka"

    files_only = audit_sides(None, {"id_field": "eventId"}, input_files=archive, output_files=archive, env={})
    assert files_only.kafka is None and (files_only.value_format, files_only.id_field) == ("json", "eventId")
    with pytest.raises(ConfigError, match="--id-field '/a~' is not a JSON Pointer"):
        audit_sides(None, {"id_field": "/a~"}, input_files=archive, output_files=archive, env={})

    with pytest.raises(ConfigError, match="no output_topic given"):
        audit_sides(None, {**flags, "output_topic": None}, input_files=archive, env={})
    with pytest.raises(ConfigError, match="--files-format must be one of"):
        audit_sides(None, flags, input_files=archive, files_format="csv", env={})


@pytest.mark.parametrize(
    ("spark_text", "line"),
    [  # what Spark reported in real runs where the executors' interpreter was missing, failed, or lacked dedupectl
        (
            "Job aborted due to stage failure: Lost task 1.0 in stage 0.0 (TID 1) (127.0.0.1 executor 0): "
            'java.io.IOException: Cannot run program "/nowhere/bin/python": error=2, No such file or directory',
            'the executors\' Python did not start: Cannot run program "/nowhere/bin/python": error=2, No such file',
        ),
        (
            "org.apache.spark.SparkException: \nError from python worker:\n  exec format error\nPYTHONPATH was:\n  /x",
            "the executors' Python did not start: exec format error",
        ),
        (
            "An exception was thrown from the Python worker: Traceback (most recent call last):\n"
            '  File "/opt/spark/python/pyspark/worker.py", line 1, in main\n'
            "ModuleNotFoundError: No module named 'dedupectl'\n SQLSTATE: 38000",
            "the executors' Python cannot import what the job needs: No module named 'dedupectl'",
        ),
        (
            "An exception was thrown from the Python worker: Traceback (most recent call last):\n"
            "ValueError: bad value\n SQLSTATE: 38000",
            "Spark job failed: ValueError: bad value",
        ),
    ],
)
def test_an_executor_python_failure_is_named_in_one_line(spark_text, line, tmp_path):
    error = describe_failure(RuntimeError(spark_text), tmp_path / "job.log")
    assert str(error).startswith(line) and "\n" not in str(error)
    assert str(error).endswith(f"see the Spark log {tmp_path / 'job.log'}")
