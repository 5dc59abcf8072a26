"""The shipped deployment files: the Kubernetes manifests valid against Kubernetes' own schemas (strict:
an unknown field fails) and within the "restricted" Pod Security Standard, the systemd unit verified by
systemd and sandboxed below exposure 5 by its own rating, the Containerfile linted (hadolint) and built where
a container builder can run; and what they pass to the worker is what `dedupectl run` takes: every flag
exists, the configuration and the Secret's variables resolve, the ports, volumes, probes, memory and grace
periods agree with each other and with the worker."""

from __future__ import annotations

import copy
import math
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
import urllib.error
import urllib.request
from pathlib import Path

import kubernetes_validate
import pytest
import typer.main
import yaml

from dedupectl import __version__
from dedupectl.cli.app import app
from dedupectl.config import resolve_worker_config
from dedupectl.metrics import WorkerMetrics

ROOT = Path(__file__).resolve().parents[2]
KUBERNETES = ROOT / "deploy" / "kubernetes"
EXAMPLES = ROOT / "deploy" / "kubernetes-examples"
UNIT = ROOT / "deploy" / "systemd" / "dedupectl@.service"
CONTAINERFILE = ROOT / "Containerfile"
DEPLOYMENT_DOC = ROOT / "docs" / "reference" / "deployment-files.md"
BASE_IMAGE = "docker.io/library/python:3.11-slim-bookworm"
HAS_SCHEMA = ("configmap", "service", "statefulset", "poddisruptionbudget")


def _manifest(name: str) -> dict:
    return yaml.safe_load((KUBERNETES / f"{name}.yaml").read_text())


def _example_secret() -> dict:
    return yaml.safe_load((EXAMPLES / "secret.yaml").read_text())


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


def _pod() -> dict:
    return _manifest("statefulset")["spec"]["template"]


def _container() -> dict:
    return _pod()["spec"]["containers"][0]


def _config(tmp_path: Path) -> Path:
    path = tmp_path / "dedupectl.toml"
    path.write_text(_manifest("configmap")["data"]["dedupectl.toml"])
    return path


# -- Kubernetes ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", HAS_SCHEMA)
def test_manifest_is_valid_kubernetes(name):
    version = kubernetes_validate.utils.latest_version()
    kubernetes_validate.validate(_manifest(name), version, strict=True)


def test_example_secret_is_valid_kubernetes():
    kubernetes_validate.validate(_example_secret(), kubernetes_validate.utils.latest_version(), strict=True)


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
    assert container["envFrom"] == [{"secretRef": {"name": _example_secret()["metadata"]["name"]}}]

    # what the worker resolves from all of it, as in the pod (the Secret's variables are config fields)
    env = {**_example_secret()["stringData"], "POD_NAME": "dedupectl-0"}
    flags = {"worker_id": "dedupectl-0", "data_dir": params["data_dir"]}
    config = resolve_worker_config(_config(tmp_path), env=env, flags=flags)
    assert config.kafka.settings["sasl.password"] == env["DEDUPECTL_KAFKA_SASL_PASSWORD"]
    assert config.worker_id == "dedupectl-0" and str(config.data_dir) == "/var/lib/dedupectl"

    # probes, Service and container port are the metrics port the config serves
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    assert ports["metrics"] == config.metrics_port and config.metrics_host == "0.0.0.0"
    # the CA the config names is the file of the CA ConfigMap the pod mounts
    ca = Path(config.kafka.settings["ssl.ca.location"])
    (ca_volume,) = [v for v in pod["spec"]["volumes"] if v["name"] == "kafka-ca"]
    assert Path(mounts["kafka-ca"]) == ca.parent and ca_volume["configMap"]["name"] == "dedupectl-kafka-ca"
    assert "optional" not in ca_volume["configMap"]  # no CA, no start: never a connection that cannot verify
    (service_port,) = _manifest("service")["spec"]["ports"]
    assert service_port["targetPort"] == "metrics"
    # the grace period outlasts a commit the broker may hold for up to the transaction timeout
    grace = pod["spec"]["terminationGracePeriodSeconds"]
    assert grace > config.transaction_timeout_ms / 1000
    # and the worker's own stop bound ends a longer stop before the kubelet's SIGKILL
    assert config.stop_timeout < grace
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True


def test_no_credentials_in_the_applied_set():
    # `kubectl apply -f deploy/kubernetes/` must never overwrite the operator's Secret with a placeholder
    applied = sorted(KUBERNETES.rglob("*.y*ml")) + sorted(KUBERNETES.rglob("*.json"))
    kinds = [doc["kind"] for path in applied for doc in yaml.safe_load_all(path.read_text()) if doc]
    assert "Secret" not in kinds and len(kinds) == len(applied)
    text = "\n".join(path.read_text() for path in applied)
    assert not re.search(r"(?i)password\s*[:=]\s*\S", text)
    assert not EXAMPLES.is_relative_to(KUBERNETES)  # not even with `kubectl apply -R`
    # the example is what the StatefulSet reads, and what the deployment page tells the operator to create
    assert f"kubectl create secret generic {_example_secret()['metadata']['name']}" in DEPLOYMENT_DOC.read_text()


def test_the_secrets_user_is_the_principal_the_acls_name():
    user = _example_secret()["stringData"]["DEDUPECTL_KAFKA_SASL_USERNAME"]
    security = (ROOT / "docs" / "reference" / "security.md").read_text()
    assert f'P="--allow-principal User:{user}"' in security  # the worker's kafka-acls.sh lines
    assert f'principal="User:{user}"' in security  # and the AdminClient form of them


def test_image_is_this_releases_tag():
    # a fixed tag: a new release changes the pod template, so applying it rolls the pods one by one
    image = _container()["image"]
    name, _, tag = image.rpartition(":")
    assert "/" in name and tag == __version__ and tag != "latest"
    assert f"dedupectl:{__version__}" in DEPLOYMENT_DOC.read_text()


# The input partition count the shipped files are sized for (stated on the deployment page), and what the
# id filter takes per id of the bound (docs/store.md) and the worker beside its filters (docs/benchmarks.md:
# 235-240 MB peak RSS with 4 partitions on empty stores; rounded up for larger batches and more partitions).
PARTITIONS = 16
FILTER_BYTES_PER_ID = 2.4
BESIDE_FILTERS = 512 * 2**20


def _bytes(quantity: str) -> int:
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
    number, unit = re.fullmatch(r"(\d+)([KMGT]i)", quantity).groups()
    return int(number) * units[unit]


def test_memory_limit_holds_the_bound_of_every_partition_a_pod_may_hold(tmp_path):
    config = resolve_worker_config(_config(tmp_path), env={}, flags={"worker_id": "dedupectl-0"})
    replicas = _manifest("statefulset")["spec"]["replicas"]
    # a pod gone for longer than the session timeout leaves its partitions to the others
    most_held = math.ceil(PARTITIONS / (replicas - 1))
    resources = _container()["resources"]
    limit = _bytes(resources["limits"]["memory"])
    assert config.max_keys * FILTER_BYTES_PER_ID * most_held + BESIDE_FILTERS <= limit
    assert resources["requests"]["memory"] == resources["limits"]["memory"]  # filters are never reclaimed
    # and the volume holds every partition's store at the most a store takes on disk per id (docs/store.md)
    storage = _manifest("statefulset")["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]
    assert config.max_keys * 25 * PARTITIONS <= 0.5 * _bytes(storage["storage"])
    store_doc = (ROOT / "docs" / "store.md").read_text()
    assert "2.4 bytes per id of the bound" in store_doc and "at most 25 bytes per id" in store_doc
    doc = DEPLOYMENT_DOC.read_text()
    assert f"{PARTITIONS} input partitions" in doc and f"{config.max_keys:,}" in doc


def test_probes_ask_the_workers_loop_and_outlast_what_it_rides_out(tmp_path):
    container = _container()
    liveness, readiness = container["livenessProbe"], container["readinessProbe"]
    assert liveness["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert readiness["httpGet"] == {"path": "/readyz", "port": "metrics"}
    config = resolve_worker_config(_config(tmp_path), env={}, flags={"worker_id": "dedupectl-0"})
    # the shortest stall that restarts the pod: the endpoint's own limit, then every failure the probe allows
    stall = WorkerMetrics().stale_after_s + liveness["periodSeconds"] * (liveness["failureThreshold"] - 1)
    assert stall > config.broker_retry_for + config.transaction_timeout_ms / 1000
    # the paths are the worker's health checks, not its metrics (which answer any path)
    metrics = WorkerMetrics()
    port = metrics.serve(0, "127.0.0.1")
    for probe, expected in ((liveness, b"ok: "), (readiness, b"unhealthy: ")):
        request = urllib.request.Request(f"http://127.0.0.1:{port}{probe['httpGet']['path']}")
        try:
            body = urllib.request.urlopen(request, timeout=5).read()
        except urllib.error.HTTPError as error:
            body = error.read()
        assert body.startswith(expected), body


def test_workers_spread_over_nodes():
    spec = _pod()["spec"]
    (spread,) = spec["topologySpreadConstraints"]
    assert spread["topologyKey"] == "kubernetes.io/hostname" and spread["maxSkew"] == 1
    # a preference: with fewer nodes than workers they still all run
    assert spread["whenUnsatisfiable"] == "ScheduleAnyway"
    assert spread["labelSelector"]["matchLabels"].items() <= _pod()["metadata"]["labels"].items()


# -- the "restricted" Pod Security Standard ----------------------------------------------------------------
# kubernetes-validate checks schemas only, and no Python library checks a pod against the Pod Security
# Standards, so the restricted profile's controls are written out here, as Kubernetes documents them
# (https://kubernetes.io/docs/concepts/security/pod-security-standards/): the baseline's, then the
# restricted ones.

RESTRICTED_VOLUMES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}
SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
}
SELINUX_TYPES = {"container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
PROFILE_TYPES = {"RuntimeDefault", "Localhost"}


def restricted_violations(template: dict) -> list[str]:
    """What in a pod template the "restricted" Pod Security Standard forbids; empty when it admits it."""
    spec, found = template["spec"], []
    pod = spec.get("securityContext", {})
    containers = [*spec.get("initContainers", []), *spec.get("containers", []), *spec.get("ephemeralContainers", [])]
    # baseline: host namespaces, host paths and ports, privilege, /proc, sysctls, SELinux, AppArmor
    found += [f"{key}: true" for key in ("hostNetwork", "hostPID", "hostIPC") if spec.get(key)]
    found += [f"sysctl {s['name']}" for s in pod.get("sysctls", []) if s["name"] not in SAFE_SYSCTLS]
    for volume in spec.get("volumes", []):
        kinds = set(volume) - {"name"}
        found += [f"volume {volume['name']}: {kind}" for kind in sorted(kinds - RESTRICTED_VOLUMES)]
    for key, value in template.get("metadata", {}).get("annotations", {}).items():
        apparmor = key.startswith("container.apparmor.security.beta.kubernetes.io/")
        if apparmor and value != "runtime/default" and not value.startswith("localhost/"):
            found.append(f"AppArmor {value}")
    if pod.get("seccompProfile", {}).get("type", "RuntimeDefault") not in PROFILE_TYPES:
        found.append(f"pod seccompProfile {pod['seccompProfile']['type']}")
    if pod.get("runAsUser") == 0:
        found.append("pod runAsUser 0")
    for where in (pod, *(c.get("securityContext", {}) for c in containers)):
        selinux = where.get("seLinuxOptions", {})
        if selinux.get("type", "container_t") not in SELINUX_TYPES or {"user", "role"} & set(selinux):
            found.append(f"seLinuxOptions {selinux}")
        if where.get("windowsOptions", {}).get("hostProcess"):
            found.append("hostProcess")
        if where.get("appArmorProfile", {}).get("type", "RuntimeDefault") not in PROFILE_TYPES:
            found.append(f"appArmorProfile {where['appArmorProfile']['type']}")
    for container in containers:
        name, context = container["name"], container.get("securityContext", {})
        found += [f"{name}: hostPort {p['hostPort']}" for p in container.get("ports", []) if p.get("hostPort")]
        if context.get("privileged"):
            found.append(f"{name}: privileged")
        if context.get("procMount", "Default") != "Default":
            found.append(f"{name}: procMount {context['procMount']}")
        # restricted: no escalation, never root, a seccomp profile, every capability dropped
        if context.get("allowPrivilegeEscalation") is not False:
            found.append(f"{name}: allowPrivilegeEscalation not false")
        if context.get("runAsNonRoot", pod.get("runAsNonRoot")) is not True:
            found.append(f"{name}: runAsNonRoot not true")
        if context.get("runAsUser") == 0:
            found.append(f"{name}: runAsUser 0")
        if context.get("seccompProfile", pod.get("seccompProfile", {})).get("type") not in PROFILE_TYPES:
            found.append(f"{name}: no RuntimeDefault or Localhost seccompProfile")
        capabilities = context.get("capabilities", {})
        if "ALL" not in capabilities.get("drop", []):
            found.append(f"{name}: capabilities not dropping ALL")
        found += [f"{name}: adds {cap}" for cap in capabilities.get("add", []) if cap != "NET_BIND_SERVICE"]
    return found


def test_pod_is_admitted_by_the_restricted_pod_security_standard():
    assert restricted_violations(_pod()) == []
    spec = _pod()["spec"]
    assert spec["automountServiceAccountToken"] is False  # no API token in a pod that never calls the API
    # the root filesystem is read-only: what the worker writes is mounted writable
    assert _container()["securityContext"]["readOnlyRootFilesystem"] is True
    writable = {m["mountPath"] for m in _container()["volumeMounts"] if not m.get("readOnly")}
    assert writable == {"/var/lib/dedupectl", "/tmp"}
    (tmp,) = [v for v in spec["volumes"] if v["name"] == "tmp"]
    assert "emptyDir" in tmp


def _set(path: str, value):
    def change(template: dict) -> None:
        *parents, leaf = path.split(".")
        node = template
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node.setdefault(key, {})
        if value is None:
            node.pop(leaf, None)
        else:
            node[leaf] = value

    return change


C = "spec.containers.0"
BREAKS = {
    "hostNetwork": _set("spec.hostNetwork", True),
    "hostPID": _set("spec.hostPID", True),
    "hostIPC": _set("spec.hostIPC", True),
    "hostPath volume": lambda t: t["spec"]["volumes"].append({"name": "host", "hostPath": {"path": "/var"}}),
    "hostPort": _set(f"{C}.ports.0.hostPort", 9464),
    "privileged": _set(f"{C}.securityContext.privileged", True),
    "escalation allowed": _set(f"{C}.securityContext.allowPrivilegeEscalation", None),
    "root allowed in the container": _set(f"{C}.securityContext.runAsNonRoot", False),
    "root allowed in the pod": _set("spec.securityContext.runAsNonRoot", None),
    "uid 0": _set(f"{C}.securityContext.runAsUser", 0),
    "no seccomp": _set("spec.securityContext.seccompProfile", None),
    "unconfined seccomp": _set(f"{C}.securityContext.seccompProfile", {"type": "Unconfined"}),
    "capabilities kept": _set(f"{C}.securityContext.capabilities", None),
    "capability added": _set(f"{C}.securityContext.capabilities.add", ["SYS_ADMIN"]),
    "unmasked /proc": _set(f"{C}.securityContext.procMount", "Unmasked"),
    "unsafe sysctl": _set("spec.securityContext.sysctls", [{"name": "kernel.msgmax", "value": "1"}]),
    "SELinux type": _set("spec.securityContext.seLinuxOptions", {"type": "spc_t"}),
    "AppArmor unconfined": _set(f"{C}.securityContext.appArmorProfile", {"type": "Unconfined"}),
    "hostProcess": _set("spec.securityContext.windowsOptions", {"hostProcess": True}),
}


@pytest.mark.parametrize("name", sorted(BREAKS))
def test_restricted_check_catches(name):
    broken = copy.deepcopy(_pod())
    BREAKS[name](broken)
    assert restricted_violations(broken), f"{name} passed the restricted check"


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


def _exposure(analyze: str, unit: Path) -> tuple[float, str]:
    result = subprocess.run(
        [analyze, "security", "--offline=true", "--no-pager", str(unit)], capture_output=True, text=True, timeout=60
    )
    found = re.search(r"Overall exposure level for \S+: (\d+\.\d)", result.stdout)
    assert found, result.stdout + result.stderr
    return float(found.group(1)), result.stdout


def test_systemd_unit_is_sandboxed_below_exposure_5(tmp_path):
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed (Debian's systemd package): the sandbox is not rated here")
    unit = tmp_path / "dedupectl@dedup-0.service"
    unit.write_text(UNIT.read_text())
    exposure, report = _exposure(analyze, unit)
    assert exposure < 5, report  # systemd's own scale: 5 and up is "MEDIUM" or worse
    # the rating is the sandbox's: the same unit without it is rated exposed
    kept, sandbox = UNIT.read_text().split("# Sandbox:")
    bare = tmp_path / "bare" / "dedupectl@dedup-0.service"
    bare.parent.mkdir()
    bare.write_text(kept + sandbox[sandbox.index("[Install]") :])
    assert _exposure(analyze, bare)[0] >= 8, "the rating did not notice the sandbox gone"
    service = _unit()["Service"]
    assert service["ReadWritePaths"] == ["/var/lib/dedupectl/%i"] and service["ProtectSystem"] == ["strict"]
    assert service["CapabilityBoundingSet"] == [""] and service["SystemCallFilter"] == ["@system-service"]


def test_systemd_restarts_what_a_restart_can_fix():
    service = _unit()["Service"]
    (prevented,) = service["RestartPreventExitStatus"]
    codes = {int(code) for code in prevented.split()}
    # every code named is one `dedupectl run` documents, and the two a restart may fix are not among them:
    # 2 (it includes a broker unreachable beyond --broker-retry-for) and 70 (a bug: a crash is safe)
    run_doc = (ROOT / "docs" / "reference" / "run.md").read_text()
    documented = {int(code) for code in re.findall(r"^\| `(\d+)` \|", run_doc, flags=re.MULTILINE)}
    assert codes == {3, 74, 77} and codes <= documented and {2, 70} <= documented - codes
    for code in sorted(codes):
        assert f"`{code}`" in DEPLOYMENT_DOC.read_text().split("RestartPreventExitStatus")[1]


def test_systemd_documentation_is_a_file_the_install_creates():
    (documentation,) = _unit()["Unit"]["Documentation"]
    assert documentation.startswith("file://")
    installed = documentation.removeprefix("file://")
    doc = DEPLOYMENT_DOC.read_text()
    install = doc[doc.index("## systemd:") : doc.index("## Kubernetes:")]
    assert f"docs/reference/deployment-files.md {installed}" in install
    assert (ROOT / "docs" / "reference" / Path(installed).name).exists()


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
