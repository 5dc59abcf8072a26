"""Configuration: one resolution order, typed values, unknown keys refused, secrets redacted."""

import re
from pathlib import Path

import pytest

from dedupectl.config import resolve_kafka_config, resolve_worker_config
from dedupectl.errors import ConfigError
from reconcile.kafka import REDACTED

BASE = {"bootstrap_servers": "b:9092", "input_topic": "in", "output_topic": "out"}


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "dedupectl.toml"
    path.write_text(text)
    return path


def test_flags_override_environment_override_file(tmp_path):
    config_file = write(
        tmp_path,
        'bootstrap_servers = "file:9092"\ninput_topic = "in"\noutput_topic = "out"\nbatch_max_messages = 10\n'
        'batch_max_ms = 7\n[kafka]\n"socket.keepalive.enable" = true\n',
    )
    env = {"DEDUPECTL_BATCH_MAX_MESSAGES": "20", "DEDUPECTL_KAFKA_CLIENT_RACK": "rack-1"}
    config = resolve_worker_config(config_file, env, {"batch_max_messages": 30, "bootstrap_servers": None})
    assert config.kafka.bootstrap_servers == "file:9092"
    assert config.batch_max_messages == 30
    assert config.batch_max_ms == 7
    assert config.kafka.settings == {"socket.keepalive.enable": "true", "client.rack": "rack-1"}
    assert config.dead_letter_topic == "in.dead-letter"
    assert config.group_id == "dedupectl.in"


def test_config_is_frozen():
    config = resolve_worker_config(env={}, flags=BASE)
    with pytest.raises(AttributeError):
        config.input_topic = "other"  # type: ignore[misc]


def test_transactional_id_is_stable_per_worker():
    first = resolve_worker_config(env={}, flags={**BASE, "worker_id": "w-1"})
    again = resolve_worker_config(env={}, flags={**BASE, "worker_id": "w-1"})
    other = resolve_worker_config(env={}, flags={**BASE, "worker_id": "w-2"})
    assert first.transactional_id == again.transactional_id != other.transactional_id


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('input_topc = "x"\n', "unknown config key 'input_topc'"),
        ("batch_max_ms = 'soon'\n", "batch_max_ms must be int"),
        ('[kafka]\n"isolation.level" = "read_uncommitted"\n', "isolation.level are set by dedupectl itself"),
        ("this is not toml", "is not valid TOML"),
    ],
)
def test_bad_files_are_refused_with_the_key_named(tmp_path, text, message):
    with pytest.raises(ConfigError, match=message):
        resolve_worker_config(write(tmp_path, text), {}, BASE)


def test_unknown_environment_variable_is_refused():
    with pytest.raises(ConfigError, match="DEDUPECTL_BATCH_MAX_MESAGES"):
        resolve_worker_config(env={"DEDUPECTL_BATCH_MAX_MESAGES": "1"}, flags=BASE)


def test_the_local_brokers_version_variables_are_not_worker_settings():
    # exported for `dedupectl dev` and the tests, inherited by every worker they start
    env = {"DEDUPECTL_DEV_KAFKA_VERSION": "3.9.1", "DEDUPECTL_TEST_KAFKA_VERSION": "3.9.1"}
    config = resolve_worker_config(env=env, flags=BASE)
    assert "version" not in config.kafka.client_settings()


def test_missing_file_and_missing_required_values(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        resolve_worker_config(tmp_path / "nope.toml", {}, BASE)
    with pytest.raises(ConfigError, match="bootstrap servers"):
        resolve_kafka_config(env={}, flags={})
    with pytest.raises(ConfigError, match="no output_topic"):
        resolve_worker_config(env={}, flags={"bootstrap_servers": "b", "input_topic": "in"})
    with pytest.raises(ConfigError, match="three different topics"):
        resolve_worker_config(env={}, flags={**BASE, "output_topic": "in"})
    with pytest.raises(ConfigError, match="pass --topic or set input_topic"):
        resolve_worker_config(env={}, flags={"bootstrap_servers": "b", "output_topic": "out"})


def test_a_bad_value_is_named_as_the_operator_gave_it(tmp_path):
    # a flag by its flag, a variable by its variable, the file by its key
    with pytest.raises(ConfigError, match=r"^--batch-max-messages must be positive"):
        resolve_worker_config(env={}, flags={**BASE, "batch_max_messages": 0})
    with pytest.raises(ConfigError, match=r"^DEDUPECTL_MAX_KEYS must be at least 1"):
        resolve_worker_config(env={"DEDUPECTL_MAX_KEYS": "0"}, flags=BASE)
    with pytest.raises(ConfigError, match=r"^snapshot_keep must be at least 1"):
        resolve_worker_config(write(tmp_path, "snapshot_every = '1h'\nsnapshot_keep = 0\n"), {}, BASE)


def test_secrets_never_appear_in_the_description(tmp_path):
    env = {"DEDUPECTL_KAFKA_SASL_PASSWORD": "hunter2", "DEDUPECTL_KAFKA_SASL_USERNAME": "svc"}
    config_file = write(tmp_path, '[kafka]\n"ssl.key.password" = "s3cret"\n"sasl.oauthbearer.client.secret" = "x1"\n')
    config = resolve_worker_config(config_file, env, BASE)
    described = repr(config.describe())
    assert "hunter2" not in described and "s3cret" not in described and "x1" not in described
    assert config.describe()["kafka"]["settings"]["sasl.password"] == REDACTED
    assert config.describe()["kafka"]["settings"]["sasl.username"] == "svc"
    # the real value still reaches the client
    assert config.kafka.client_settings()["sasl.password"] == "hunter2"


def test_the_stop_settings_from_every_source(tmp_path):
    defaults = resolve_worker_config(env={}, flags=BASE)
    assert defaults.stop_timeout == 60.0 and defaults.leave_group_on_stop is False
    env = {"DEDUPECTL_STOP_TIMEOUT": "45s", "DEDUPECTL_LEAVE_GROUP_ON_STOP": "true"}
    config = resolve_worker_config(env=env, flags=BASE)
    assert config.stop_timeout == 45.0 and config.leave_group_on_stop is True
    file_config = resolve_worker_config(
        write(tmp_path, "stop_timeout = '1m30s'\nleave_group_on_stop = false\n"), env, BASE
    )
    assert file_config.stop_timeout == 45.0 and file_config.leave_group_on_stop is True  # the environment wins
    assert resolve_worker_config(env={}, flags={**BASE, "leave_group_on_stop": True}).leave_group_on_stop


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"DEDUPECTL_LEAVE_GROUP_ON_STOP": "maybe"}, "leave_group_on_stop must be bool"),
        ({"DEDUPECTL_STOP_TIMEOUT": "0"}, "DEDUPECTL_STOP_TIMEOUT .0. must be longer"),
        ({"DEDUPECTL_STOP_TIMEOUT": "soon"}, "DEDUPECTL_STOP_TIMEOUT .soon. is not a duration"),
    ],
)
def test_bad_stop_settings_are_refused(env, message):
    with pytest.raises(ConfigError, match=message):
        resolve_worker_config(env=env, flags=BASE)


def test_where_the_id_is_from_every_source(tmp_path):
    defaults = resolve_worker_config(env={}, flags=BASE)
    assert (defaults.id_field, defaults.id_header) == ("messageId", None)
    from_file = resolve_worker_config(write(tmp_path, 'id_field = "/context/messageId"\n'), {}, BASE)
    assert from_file.id_field == "/context/messageId"
    from_env = resolve_worker_config(env={"DEDUPECTL_ID_HEADER": "ce_id"}, flags=BASE)
    assert from_env.id_header == "ce_id"
    assert resolve_worker_config(env={}, flags={**BASE, "id_field": "/a~0b/c~1d"}).id_field == "/a~0b/c~1d"


@pytest.mark.parametrize(
    ("env", "flags", "message"),
    [
        ({}, {"id_field": "/a~2"}, "--id-field '/a~2' is not a JSON Pointer: '~' must be followed by 0"),
        ({}, {"id_field": ""}, "--id-field is empty"),
        ({"DEDUPECTL_ID_HEADER": ""}, {}, "DEDUPECTL_ID_HEADER is empty"),
        ({"DEDUPECTL_ID_FIELD": "x"}, {"id_header": "h"}, "--id-header and DEDUPECTL_ID_FIELD are two places"),
    ],
)
def test_an_id_nowhere_or_in_two_places_is_refused(env, flags, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        resolve_worker_config(env=env, flags={**BASE, **flags})


def test_the_partition_check_from_every_source(tmp_path):
    defaults = resolve_worker_config(env={}, flags=BASE)
    assert (defaults.partitioner, defaults.misrouted) == ("auto", "publish")
    from_file = resolve_worker_config(write(tmp_path, 'partitioner = "murmur2"\nmisrouted = "dead-letter"\n'), {}, BASE)
    assert (from_file.partitioner, from_file.misrouted) == ("murmur2", "dead-letter")
    assert resolve_worker_config(env={"DEDUPECTL_PARTITIONER": "any"}, flags=BASE).partitioner == "any"


@pytest.mark.parametrize(
    ("env", "flags", "message"),
    [
        ({}, {"partitioner": "murmur3"}, "--partitioner must be one of auto, murmur2, crc32, any, got 'murmur3'"),
        (
            {"DEDUPECTL_MISROUTED": "drop"},
            {},
            "DEDUPECTL_MISROUTED must be one of publish, dead-letter, forward, got 'drop'",
        ),
        (
            {},
            {"misrouted": "forward"},
            "--misrouted forward needs partitioner murmur2 or crc32, got 'auto': pass --partitioner",
        ),
        (
            {},
            {"misrouted": "forward", "partitioner": "crc32", "observe": True},
            "--misrouted forward writes to the input topic; an observer writes nothing",
        ),
    ],
)
def test_an_unknown_partitioner_or_misrouted_action_is_refused(env, flags, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        resolve_worker_config(env=env, flags={**BASE, **flags})
