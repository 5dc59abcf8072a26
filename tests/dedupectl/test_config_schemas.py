"""Writer schemas in the configuration: --schema-file, --schema-registry and its settings from flags and the
config file's tables, checked at start; a bad combination is one line and exit 2 in every command that takes
them."""

from __future__ import annotations

import pytest
from test_cli_errors import assert_one_line_error, run_cli
from wire_values import write_avsc, write_descriptor_set

from dedupectl.config import resolve_worker_config
from dedupectl.errors import ConfigError

BASE = {"bootstrap_servers": "127.0.0.1:1", "input_topic": "events", "output_topic": "events-deduped"}


def test_schema_files_and_registry_settings_come_from_the_file_and_flags(tmp_path):
    avsc = write_avsc(tmp_path)
    config_file = tmp_path / "dedupectl.toml"
    config_file.write_text(
        'value_format = "avro"\nschema_registry_url = "http://sr:8081"\n'
        f'[schema_files]\n"7" = "{avsc}"\n'
        '[schema_registry]\n"basic.auth.user.info" = "key:secret"\ntimeout = 5\n'
    )
    flags = {**BASE, "schema_files": {8: str(avsc)}, "schema_registry_settings": {"timeout": "9"}}
    config = resolve_worker_config(config_file, env={}, flags=flags)
    source = config.schemas
    assert [(schema_id, name) for schema_id, name, _ in source.files] == [(7, str(avsc)), (8, str(avsc))]
    assert source.registry_url == "http://sr:8081"
    assert dict(source.registry_settings) == {"basic.auth.user.info": "key:secret", "timeout": "9"}
    assert source.retry_for == config.broker_retry_for
    described = config.describe()["schemas"]
    assert described["schema_registry_settings"]["basic.auth.user.info"] == "***"
    assert described["schema_files"] == {"7": str(avsc), "8": str(avsc)}


def test_json_and_raw_have_no_schema_source():
    assert resolve_worker_config(env={}, flags=BASE).schemas is None


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ('[schema_files]\nseven = "event.avsc"\n', "is not a schema id"),
        ('[schema_registry]\nurl = "http://sr"\n', "set by schema_registry_url"),
        ('schema_files = "event.avsc"\n', "must be a table"),
    ],
)
def test_bad_schema_tables_are_refused(tmp_path, table, message):
    config_file = tmp_path / "dedupectl.toml"
    config_file.write_text('value_format = "avro"\n' + table)
    with pytest.raises(ConfigError, match=message):
        resolve_worker_config(config_file, env={}, flags=BASE)


def test_bad_combinations_are_one_line_and_exit_2_in_each_command(tmp_path):
    avsc, descriptors = write_avsc(tmp_path), write_descriptor_set(tmp_path)
    broken = tmp_path / "broken.avsc"
    broken.write_text("{not json")
    common = ["-b", "127.0.0.1:1", "-t", "events", "-o", "events-deduped"]
    cases = [
        (["--value-format", "avro"], "needs writer schemas"),
        (["--value-format", "protobuf", "--schema-file", f"3={broken}"], "is not a Protobuf FileDescriptorSet"),
        (["--value-format", "avro", "--schema-file", f"3={broken}"], "is not an Avro schema"),
        (["--value-format", "avro", "--schema-file", f"3={descriptors}"], "is not an Avro schema"),
        (["--value-format", "avro", "--schema-file", f"x={avsc}"], "does not start with a schema id"),
        (["--schema-file", f"3={avsc}"], "value_format is 'json'"),
        (["--value-format", "avro", "--schema-registry-setting", "nokey"], "is not key=value"),
    ]
    for command in (["run"], ["trace", "some-id"], ["audit"], ["replay"]):
        for extra, fragment in cases:
            assert_one_line_error(run_cli(*command, *common, *extra, timeout=60), fragment)
