"""A TLS or SASL handshake the secured broker refuses is told from a broker that is down: one line naming the
setting to check, exit 77, at the first refusal (not after --broker-retry-for of retries), in the worker and
in every command that reads Kafka."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from secure_kafka import make_topics, new_user, run_env

from dedupectl.devbroker_security import DevSecurity

TIMEOUT_S = 60


def cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "dedupectl.cli.app", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)


def as_env(bootstrap: str, settings: dict[str, str]) -> dict[str, str]:
    # a long bound on each Kafka call: a refused handshake waited out like an outage would outlive TIMEOUT_S
    env = {"DEDUPECTL_BOOTSTRAP_SERVERS": bootstrap, "DEDUPECTL_TIMEOUT_S": "120"}
    return env | {"DEDUPECTL_KAFKA_" + key.upper().replace(".", "_"): value for key, value in settings.items()}


def faulty(broker, kind: str, tmp_path: Path) -> dict[str, str]:
    """The environment of a client whose handshake with the secured broker fails in the way ``kind`` says."""
    user = new_user(broker, f"hs-{uuid.uuid4().hex[:8]}")
    settings = user.settings()
    if kind == "sasl_plaintext":
        settings = {key: value for key, value in settings.items() if not key.startswith("ssl.")}
        settings["security.protocol"] = "SASL_PLAINTEXT"
    elif kind == "plaintext":
        settings = {}
    elif kind == "untrusted_ca":
        other = DevSecurity(tmp_path / "other-ca")
        other.ensure_material()
        settings["ssl.ca.location"] = str(other.ca_path)
    elif kind == "mechanism":
        settings["sasl.mechanism"] = "SCRAM-SHA-256"
    elif kind == "wrong_password":
        settings["sasl.password"] = f"not-{user.password}"
    elif kind == "mtls_without_certificate":
        return run_env(as_env(broker.status().mtls_bootstrap, {"security.protocol": "SSL", **_ca(broker)}))
    return run_env(as_env(broker.bootstrap_servers, settings))


def _ca(broker) -> dict[str, str]:
    return {"ssl.ca.location": str(broker.security.ca_path)}


SETTING = {
    "sasl_plaintext": "check security.protocol",
    "plaintext": "check security.protocol",
    "mtls_without_certificate": "check ssl.certificate.location",
    "untrusted_ca": "check ssl.ca.location",
    "mechanism": "check sasl.mechanism",
    "wrong_password": "check sasl.username and sasl.password",
}


def one_error_line(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 77, result.stderr
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert "refused this client's connection" in line, line
    assert "Traceback" not in result.stderr and "check the brokers and the network" not in result.stderr
    return line


@pytest.fixture(scope="module")
def topics(secure_kafka_broker):
    return make_topics(secure_kafka_broker, "handshake")


@pytest.mark.parametrize("kind", sorted(SETTING))
def test_the_worker_names_the_setting_of_a_refused_handshake(secure_kafka_broker, topics, tmp_path, kind):
    env = faulty(secure_kafka_broker, kind, tmp_path)
    result = cli(
        "run", "-i", topics.input, "-o", topics.output, "-d", str(tmp_path / "data"), "--worker-id", "w1",
        "--broker-retry-for", "5", "--exit-on-idle", "3", env=env,
    )  # fmt: skip
    line = one_error_line(result)
    assert SETTING[kind] in line, line
    if kind == "wrong_password":
        assert "Authentication failed" in line
        assert env["DEDUPECTL_KAFKA_SASL_PASSWORD"] not in result.stdout + result.stderr


def test_status_names_the_setting(secure_kafka_broker, topics, tmp_path):
    env = faulty(secure_kafka_broker, "plaintext", tmp_path)
    result = cli("status", "-t", topics.input, "-o", topics.output, env=env)
    assert SETTING["plaintext"] in one_error_line(result)


def test_reconcile_names_the_setting(secure_kafka_broker, topics, tmp_path):
    env = faulty(secure_kafka_broker, "untrusted_ca", tmp_path)
    result = cli("reconcile", "--all", "-i", topics.input, "-o", topics.output, "-d", str(tmp_path), env=env)
    assert SETTING["untrusted_ca"] in one_error_line(result)


def test_trace_names_the_setting(secure_kafka_broker, topics, tmp_path):
    env = faulty(secure_kafka_broker, "mtls_without_certificate", tmp_path)
    result = cli("trace", "some-id", "-t", topics.input, "-o", topics.output, "-d", str(tmp_path), env=env)
    assert SETTING["mtls_without_certificate"] in one_error_line(result)


def test_with_json_logs_the_error_is_one_more_json_object(secure_kafka_broker, topics, tmp_path):
    env = faulty(secure_kafka_broker, "wrong_password", tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "dedupectl.cli.app", "--log-format", "json", "run", "-i", topics.input,
         "-o", topics.output, "-d", str(tmp_path / "data"), "--broker-retry-for", "5", "--log-level", "info"],
        env=env, capture_output=True, text=True, timeout=TIMEOUT_S,
    )  # fmt: skip
    assert result.returncode == 77, result.stderr
    events = [json.loads(line) for line in result.stderr.splitlines()]  # every line an object, the last too
    last = events[-1]
    assert last["level"] == "ERROR" and last["logger"] == "dedupectl"
    assert last["message"].startswith("Kafka at ") and SETTING["wrong_password"] in last["message"]
    assert last["error"]["exit_code"] == 77 and last["error"]["kind"] == "AuthenticationError"
