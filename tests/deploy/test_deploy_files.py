"""The shipped deployment files: the Kubernetes manifests valid against Kubernetes' own schemas (strict:
an unknown field fails), the systemd unit verified by systemd, the Containerfile linted (hadolint) and
built where a container builder can run; and what they pass to the worker is what `dedupectl run` takes:
every flag exists, the configuration and the Secret's variables resolve, the ports, volumes and grace
periods agree with each other."""

from __future__ import annotations

import copy
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import kubernetes_validate
import pytest
import typer.main
import yaml

from dedupectl.cli.app import app
from dedupectl.config import resolve_worker_config

ROOT = Path(__file__).resolve().parents[2]
KUBERNETES = ROOT / "deploy" / "kubernetes"
UNIT = ROOT / "deploy" / "systemd" / "dedupectl@.service"
CONTAINERFILE = ROOT / "Containerfile"
BASE_IMAGE = "docker.io/library/python:3.11-slim-bookworm"
HAS_SCHEMA = ("configmap", "secret", "service", "statefulset", "poddisruptionbudget")


def _manifest(name: str) -> dict:
    return yaml.safe_load((KUBERNETES / f"{name}.yaml").read_text())


def _run_args(args: list[str]) -> dict:
    """``dedupectl run``'s parsed parameters for ``args``: click refuses an option the command lacks."""
    command = typer.main.get_command(app).commands["run"]
    return command.make_context("run", list(args)).params


def _unit() -> dict[str, dict[str, list[str]]]:
    sections: dict[str, dict[str, list[str]]] = {}
    section = None
    for line in UNIT.read_text().splitlines():
        if line.startswith("[") and line.endswith("]"):
            section = sections.setdefault(line[1:-1], {})
        elif line.strip() and not line.startswith("#"):
            key, _, value = line.partition("=")
            section.setdefault(key, []).append(value)
    return sections


def _container() -> dict:
    return _manifest("statefulset")["spec"]["template"]["spec"]["containers"][0]


def _config(tmp_path: Path) -> Path:
    path = tmp_path / "dedupectl.toml"
    path.write_text(_manifest("configmap")["data"]["dedupectl.toml"])
    return path


# -- Kubernetes ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", HAS_SCHEMA)
def test_manifest_is_valid_kubernetes(name):
    version = kubernetes_validate.utils.latest_version()
    kubernetes_validate.validate(_manifest(name), version, strict=True)


def test_strict_validation_catches_a_misspelt_field():
    broken = copy.deepcopy(_manifest("statefulset"))
    spec = broken["spec"]["template"]["spec"]
    spec["terminationGracePeriod"] = spec.pop("terminationGracePeriodSeconds")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, kubernetes_validate.utils.latest_version(), strict=True)


def test_service_monitor_scrapes_the_workers_metrics_port():
    # kubernetes-validate has no schema for the Prometheus Operator's CRDs: a structural check instead
    monitor, service = _manifest("servicemonitor"), _manifest("service")
    assert (monitor["apiVersion"], monitor["kind"]) == ("monitoring.coreos.com/v1", "ServiceMonitor")
    assert set(monitor) == {"apiVersion", "kind", "metadata", "spec"}
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    (endpoint,) = monitor["spec"]["endpoints"]
    assert set(endpoint) <= {"port", "path", "interval", "scrapeTimeout"}
    assert endpoint["port"] in {port["name"] for port in service["spec"]["ports"]} and endpoint["path"] == "/metrics"


def test_statefulset_runs_one_worker_per_pod_on_its_own_volume(tmp_path):
    statefulset = _manifest("statefulset")
    pod = statefulset["spec"]["template"]
    container = _container()
    params = _run_args(container["args"][1:])
    assert container["args"][0] == "run"

    # the pod's name is the worker id (StatefulSet names are stable: a restarted pod is the same worker)
    assert params["worker_id"] == "$(POD_NAME)"
    (pod_name,) = [env for env in container["env"] if env["name"] == "POD_NAME"]
    assert pod_name["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    # the data dir is the pod's own PersistentVolumeClaim
    (claim,) = statefulset["spec"]["volumeClaimTemplates"]
    mounts = {mount["name"]: mount["mountPath"] for mount in container["volumeMounts"]}
    assert mounts[claim["metadata"]["name"]] == str(params["data_dir"])
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    # the config file comes from the ConfigMap, the credentials from the Secret
    assert Path(params["config"]).parent == Path(mounts["config"])
    (config_volume,) = [v for v in pod["spec"]["volumes"] if v["name"] == "config"]
    assert config_volume["configMap"]["name"] == _manifest("configmap")["metadata"]["name"]
    assert Path(params["config"]).name in _manifest("configmap")["data"]
    assert container["envFrom"] == [{"secretRef": {"name": _manifest("secret")["metadata"]["name"]}}]

    # what the worker resolves from all of it, as in the pod (the Secret's variables are config fields)
    env = {**_manifest("secret")["stringData"], "POD_NAME": "dedupectl-0"}
    flags = {"worker_id": "dedupectl-0", "data_dir": params["data_dir"]}
    config = resolve_worker_config(_config(tmp_path), env=env, flags=flags)
    assert config.kafka.settings["sasl.password"] == env["DEDUPECTL_KAFKA_SASL_PASSWORD"]
    assert config.worker_id == "dedupectl-0" and str(config.data_dir) == "/var/lib/dedupectl"

    # probes, Service and container port are the metrics port the config serves
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    assert ports["metrics"] == config.metrics_port and config.metrics_host == "0.0.0.0"
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/metrics", "port": "metrics"}
    (service_port,) = _manifest("service")["spec"]["ports"]
    assert service_port["targetPort"] == "metrics"
    # the grace period outlasts a commit the broker may hold for up to the transaction timeout
    grace = pod["spec"]["terminationGracePeriodSeconds"]
    assert grace > config.transaction_timeout_ms / 1000
    # and the worker's own stop bound ends a longer stop before the kubelet's SIGKILL
    assert config.stop_timeout < grace
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True


def test_one_disruption_at_a_time_and_labels_that_select_the_workers():
    labels = _manifest("statefulset")["spec"]["template"]["metadata"]["labels"]
    budget = _manifest("poddisruptionbudget")["spec"]
    assert budget["maxUnavailable"] == 1 and budget["selector"]["matchLabels"].items() <= labels.items()
    assert _manifest("service")["spec"]["selector"].items() <= labels.items()
    assert _manifest("statefulset")["spec"]["serviceName"] == _manifest("service")["metadata"]["name"]


# -- systemd ---------------------------------------------------------------------------------------------


def test_systemd_unit_passes_real_options_and_agrees_with_kubernetes(tmp_path):
    service = _unit()["Service"]
    (exec_start,) = service["ExecStart"]
    binary, command, *args = shlex.split(exec_start.replace("%i", "dedup-0"))
    assert command == "run" and binary == "/opt/dedupectl/bin/dedupectl"  # the Containerfile's venv
    params = _run_args(args)
    assert params["worker_id"] == "dedup-0" and str(params["data_dir"]) == "/var/lib/dedupectl/dedup-0"
    assert _unit()["Unit"]["RequiresMountsFor"] == ["/var/lib/dedupectl/%i"]  # the data dir's own volume
    assert service["Restart"] == ["always"] and service["KillSignal"] == ["SIGTERM"]
    grace = _manifest("statefulset")["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert service["TimeoutStopSec"] == [str(grace)]
    assert any(not path.startswith("-") for path in service["EnvironmentFile"])  # the secrets file
    # the per-instance environment file's scale-in setting, as the unit's comment names it, is a real field
    env = {"DEDUPECTL_LEAVE_GROUP_ON_STOP": "true"}
    assert resolve_worker_config(_config(tmp_path), env=env, flags={"worker_id": "dedup-0"}).leave_group_on_stop
    assert "DEDUPECTL_LEAVE_GROUP_ON_STOP=true" in UNIT.read_text()


def test_systemd_unit_verifies(tmp_path):
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed (Debian's systemd package): the unit is not verified here")
    # verified as an instance, with the package's path replaced by this test's installed dedupectl
    installed = Path(sys.executable).parent / "dedupectl"
    unit = tmp_path / "dedupectl@dedup-0.service"
    unit.write_text(UNIT.read_text().replace("/opt/dedupectl/bin/dedupectl", str(installed)))
    result = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip() == "" and result.stdout.strip() == "", result.stderr  # not even a warning


# -- the image -------------------------------------------------------------------------------------------


def _instructions() -> list[tuple[str, str]]:
    text = CONTAINERFILE.read_text().replace("\\\n", " ")
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in lines]


def test_containerfile_lints_clean():
    hadolint = shutil.which("hadolint")
    if hadolint is None:
        pytest.skip("hadolint is not installed (the dev extras install it: pip install -e .[dev])")
    result = subprocess.run([hadolint, str(CONTAINERFILE)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stdout.strip() == "", result.stdout + result.stderr


def test_containerfile_installs_the_wheel_and_runs_the_worker_unprivileged():
    steps = _instructions()
    final = steps[max(i for i, (op, _) in enumerate(steps) if op == "FROM") :]
    assert dict(steps)["ARG"] == f"PYTHON_IMAGE={BASE_IMAGE}"  # a slim Python base
    # every package the wheel holds is copied into the build stage
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    copied = {value.split()[0] for op, value in steps if op == "COPY"}
    assert {name.rstrip("*") for name in packages["include"]} <= copied
    runs = " ".join(value for op, value in final if op == "RUN")
    assert "pip install --no-cache-dir /wheels/*.whl" in runs
    user = [value for op, value in final if op == "USER"]
    assert user and not user[-1].startswith(("0", "root"))
    assert [value for op, value in final if op == "VOLUME"] == ['["/var/lib/dedupectl"]']
    (cmd,) = [value for op, value in final if op == "CMD"]
    args = yaml.safe_load(cmd)
    assert args[0] == "run" and str(_run_args(args[1:])["data_dir"]) == "/var/lib/dedupectl"
    assert yaml.safe_load(dict(final)["ENTRYPOINT"]) == ["/opt/dedupectl/bin/dedupectl"]


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


def test_containerfile_builds():
    builder = shutil.which("podman") or shutil.which("buildah")
    if builder is None:
        pytest.skip("neither podman nor buildah is installed: the image is not built here (hadolint checks it)")
    name = Path(builder).name
    info = subprocess.run([builder, "info"], capture_output=True, text=True, timeout=120)
    if info.returncode != 0:
        pytest.skip(f"{name} is installed but cannot run on this machine: {_last_line(info.stderr)}")
    pull = subprocess.run([builder, "pull", BASE_IMAGE], capture_output=True, text=True, timeout=600)
    if pull.returncode != 0:
        pytest.skip(f"{name} cannot pull the base image {BASE_IMAGE} here: {_last_line(pull.stderr)}")
    build = [builder, "build"] if name == "podman" else [builder, "bud"]
    result = subprocess.run(
        [*build, "-f", str(CONTAINERFILE), "-t", "dedupectl-test:latest", str(ROOT)],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    if name != "podman":
        return  # buildah builds images; running one is podman's
    run = subprocess.run(
        [builder, "run", "--rm", "dedupectl-test:latest", "run", "--help"], capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0 and "--worker-id" in run.stdout, run.stderr
