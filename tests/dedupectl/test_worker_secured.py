"""The worker on a secured broker (SASL_SSL, SCRAM-SHA-512, an authorizer that denies what no ACL allows):
exactly once with exactly the documented least-privilege ACLs, one line naming each missing ACL, the same
over mTLS, and the password nowhere in what the worker prints or writes."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
from secure_kafka import Topics, admin_env, admin_kafka, grant, make_topics, new_user, run_env, worker_acls

from dedupectl.verify import count_ids
from store.worker_status import status_path

RUN_TIMEOUT_S = 60  # a run that outlives this hangs: every run here ends within seconds or fails at once


def run_args(topics: Topics, group: str, data_dir: Path, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "dedupectl.cli.app", "run", "-i", topics.input, "-o", topics.output,
        "--group-id", group, "-d", str(data_dir), "--worker-id", "w1", "--exit-on-idle", "3",
        "--log-level", "info", *extra,
    ]  # fmt: skip


def run_worker(args: list[str], env: dict[str, str]) -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    result = subprocess.run(args, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    return result, time.monotonic() - started


def run_watching_status(args: list[str], env: dict[str, str], status_file: Path) -> tuple[str, str, str]:
    """Run the worker to its end, reading its status file while it runs: (stdout, stderr, status text)."""
    process = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    status_text = ""
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while process.poll() is None and time.monotonic() < deadline and not status_text:
        if status_file.is_file():
            status_text = status_file.read_text()
        time.sleep(0.05)
    stdout, stderr = process.communicate(timeout=RUN_TIMEOUT_S)
    assert process.returncode == 0, stderr
    return stdout, stderr, status_text


def assert_exactly_once(broker, topics: Topics, expected_ids: set[str]) -> None:
    counts = count_ids(admin_kafka(broker), topics.output)
    assert set(counts) == {message_id.encode() for message_id in expected_ids}, "lost or extra ids"
    assert Counter(counts.values()) == Counter({1: len(expected_ids)}), "an id published twice"


@pytest.mark.kafka_compat
def test_worker_is_exactly_once_with_the_least_privilege_acls(secure_kafka_broker, tmp_path):
    broker = secure_kafka_broker
    topics = make_topics(broker, "sec")
    group = f"group-{topics.input}"
    user = new_user(broker, f"worker-{topics.input}")
    grant(broker, user.principal, worker_acls(topics.input, topics.output, topics.dead_letter, group))
    first = [f"id-{n % 300}" for n in range(400)]  # 100 repeats
    topics.produce(broker, first, bad=3)
    env = run_env(user.env())

    stdout, stderr, status_text = run_watching_status(
        [*run_args(topics, group, tmp_path / "data"), "--json"], env, status_path(tmp_path / "data", "w1")
    )
    summary = json.loads(stdout)
    assert (summary["published"], summary["duplicates_dropped"], summary["dead_letters"]) == (300, 100, 3)
    assert status_text, "the worker wrote no status file while it ran"
    for text in (stdout, stderr, status_text):
        assert user.password not in text
    assert_exactly_once(broker, topics, set(first))

    # a lost store: recovery reads the whole output back (Read on it) and publishes only the new ids
    topics.produce(broker, first[:50] + [f"new-{n}" for n in range(40)])
    result, _ = run_worker([*run_args(topics, group, tmp_path / "fresh"), "--json"], env)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["published"] == 40
    assert user.password not in result.stdout + result.stderr
    assert_exactly_once(broker, topics, set(first) | {f"new-{n}" for n in range(40)})


@pytest.fixture(scope="module")
def published(secure_kafka_broker, tmp_path_factory) -> Topics:
    """Topics whose output already holds records, so a worker with an empty store must read it back."""
    broker = secure_kafka_broker
    topics = make_topics(broker, "denied")
    topics.produce(broker, [f"id-{n}" for n in range(50)], bad=1)
    data_dir = tmp_path_factory.mktemp("admin-worker")
    result, _ = run_worker(run_args(topics, f"group-admin-{topics.input}", data_dir), run_env(admin_env(broker)))
    assert result.returncode == 0, result.stderr
    return topics


MISSING = {  # index in worker_acls -> what the one line must name
    0: "Read on topic '{input}'",
    1: "Read on topic '{output}'",
    2: "Write on topic '{output}'",
    3: "Write on topic '{dead_letter}'",
    4: "Read on group '{group}'",
    5: "Write on transactional id 'dedupectl-{group}-w1'",
    6: "Describe on group 'dedupectl-scan'",
}


@pytest.mark.parametrize("missing", sorted(MISSING))
def test_a_missing_acl_is_one_line_naming_it(secure_kafka_broker, published, tmp_path, missing):
    broker, topics = secure_kafka_broker, published
    group = f"group-{uuid.uuid4().hex[:8]}"  # a new group reads the input from the start: recovery runs
    acls = worker_acls(topics.input, topics.output, topics.dead_letter, group)
    assert len(acls) == len(MISSING)
    user = new_user(broker, f"denied-{missing}-{uuid.uuid4().hex[:6]}")
    grant(broker, user.principal, [acl for index, acl in enumerate(acls) if index != missing])
    topics.produce(broker, [f"new-{uuid.uuid4().hex}"])  # one id to publish: a Write on the output to refuse

    result, seconds = run_worker(run_args(topics, group, tmp_path / "data"), run_env(user.env()))

    wanted = MISSING[missing].format(
        input=topics.input, output=topics.output, dead_letter=topics.dead_letter, group=group
    )
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert result.returncode == 77, result.stderr
    assert len(errors) == 1 and f"Kafka denied this client {wanted}" in errors[0], result.stderr
    if missing == 5:  # the hint gives the ACL the docs recommend: one prefix for every worker of the group
        assert f"Write on transactional ids prefixed 'dedupectl-{group}-' (a prefixed ACL)" in errors[0]
    assert "Traceback" not in result.stderr
    assert seconds < 30
    assert user.password not in result.stdout + result.stderr


@pytest.mark.kafka_compat
def test_worker_over_mtls_takes_its_principal_from_the_certificate(secure_kafka_broker, tmp_path):
    broker = secure_kafka_broker
    topics = make_topics(broker, "mtls")
    group = f"group-{topics.input}"
    common_name = f"mtls-{topics.input}"
    grant(broker, f"User:{common_name}", worker_acls(topics.input, topics.output, topics.dead_letter, group))
    ids = [f"id-{n % 80}" for n in range(100)]
    topics.produce(broker, ids)
    settings = broker.security.mtls_settings(common_name)
    env = {"DEDUPECTL_BOOTSTRAP_SERVERS": broker.status().mtls_bootstrap}
    env |= {"DEDUPECTL_KAFKA_" + key.upper().replace(".", "_"): value for key, value in settings.items()}

    result, _ = run_worker([*run_args(topics, group, tmp_path / "data"), "--json"], run_env(env))

    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["published"] == 80
    assert_exactly_once(broker, topics, set(ids))
    key_pem = Path(settings["ssl.key.location"]).read_text()
    body = "".join(key_pem.splitlines()[1:-1])
    assert body[:40] not in result.stdout + result.stderr


def test_another_certificate_is_denied(secure_kafka_broker, published, tmp_path):
    """A certificate of the same CA but another name has no ACL: the principal comes from the certificate."""
    broker, topics = secure_kafka_broker, published
    settings = broker.security.mtls_settings(f"stranger-{uuid.uuid4().hex[:6]}")
    env = {"DEDUPECTL_BOOTSTRAP_SERVERS": broker.status().mtls_bootstrap}
    env |= {"DEDUPECTL_KAFKA_" + key.upper().replace(".", "_"): value for key, value in settings.items()}
    result, _ = run_worker(run_args(topics, "group-stranger", tmp_path / "data"), run_env(env))
    assert result.returncode == 77, result.stderr
    assert f"Kafka denied this client Read on topic '{topics.input}'" in result.stderr


def test_a_wrong_password_is_one_line_at_once(secure_kafka_broker, published, tmp_path):
    """Refused credentials are not a broker outage: no retries for --broker-retry-for, one line, exit 77."""
    broker, topics = secure_kafka_broker, published
    user = new_user(broker, f"wrong-{uuid.uuid4().hex[:6]}")
    wrong = f"not-{user.password}"
    env = {**user.env(), "DEDUPECTL_KAFKA_SASL_PASSWORD": wrong}

    result, seconds = run_worker(run_args(topics, "group-wrong", tmp_path / "data"), run_env(env))

    assert result.returncode == 77, result.stderr
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert "refused this client's connection" in line and "Authentication failed" in line
    assert seconds < 30
    assert wrong not in result.stdout + result.stderr and user.password not in result.stdout + result.stderr
