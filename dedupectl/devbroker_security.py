"""The local broker's secure mode: TLS material, SCRAM users and the settings of a secured single node.

A secure broker has two client listeners, both TLS with a CA made on the fly:

- ``SASL_SSL``: SCRAM-SHA-512 users (the broker's own ``admin`` is created when the storage is formatted;
  others with ``add_scram_user``);
- ``SSL`` with ``ssl.client.auth=required`` (mTLS): the principal is the client certificate's CN
  (``client_certificate`` signs one with the CA).

KRaft's ``StandardAuthorizer`` denies whatever no ACL allows (``allow.everyone.if.no.acl.found=false``);
``User:admin`` is the only super user: the broker speaks to itself (inter-broker, controller) as admin. The
files live in the broker's state dir::

    state_dir/tls/ca.pem, ca.key          the CA (clients trust ca.pem)
    state_dir/tls/broker.pem              the broker's certificate (SANs 127.0.0.1 and localhost)
    state_dir/tls/clients/<cn>.pem, .key  client certificates for mTLS
    state_dir/admin-password              the admin's SCRAM password (mode 0600)
    state_dir/admin.toml                  a dedupectl config file that connects as admin (mode 0600)
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from dedupectl.errors import LocalBrokerError

ADMIN_USER = "admin"
SCRAM_MECHANISM = "SCRAM-SHA-512"
SCRAM_ITERATIONS = 4096
CERT_DAYS = 825
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
_SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
_PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"


@dataclass(frozen=True)
class SecurePorts:
    sasl_ssl: int
    mtls: int


class DevSecurity:
    """The TLS and SASL material of one secure state dir, made on first use and kept across restarts."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = Path(state_dir)
        self.tls_dir = self.state_dir / "tls"

    @property
    def ca_path(self) -> Path:
        return self.tls_dir / "ca.pem"

    @property
    def admin_config_path(self) -> Path:
        return self.state_dir / "admin.toml"

    def ensure_material(self) -> None:
        """Make the CA, the broker's certificate and the admin's password once."""
        self.tls_dir.mkdir(parents=True, exist_ok=True)
        if not self.ca_path.is_file():
            ca_key, ca_cert = _new_ca()
            _write_private(self.tls_dir / "ca.key", _key_pem(ca_key))
            self.ca_path.write_bytes(_cert_pem(ca_cert))
        if not (self.tls_dir / "broker.pem").is_file():
            key, cert = _signed_cert("broker", *self._ca(), server=True)
            _write_private(self.tls_dir / "broker.key", _key_pem(key))
            (self.tls_dir / "broker.pem").write_bytes(_cert_pem(cert))
        password_path = self.state_dir / "admin-password"
        if not password_path.is_file():
            _write_private(password_path, secrets.token_urlsafe(18).encode())

    def admin_password(self) -> str:
        return (self.state_dir / "admin-password").read_text().strip()

    def client_certificate(self, common_name: str) -> tuple[Path, Path]:
        """A client certificate for mTLS (principal ``User:<common_name>``), signed by the CA: (cert, key)."""
        clients = self.tls_dir / "clients"
        clients.mkdir(parents=True, exist_ok=True)
        cert_path, key_path = clients / f"{common_name}.pem", clients / f"{common_name}.key"
        if not cert_path.is_file():
            key, cert = _signed_cert(common_name, *self._ca(), server=False)
            _write_private(key_path, _key_pem(key))
            cert_path.write_bytes(_cert_pem(cert))
        return cert_path, key_path

    def _ca(self):
        from cryptography import x509
        from cryptography.hazmat.primitives.serialization import load_pem_private_key

        key = load_pem_private_key((self.tls_dir / "ca.key").read_bytes(), password=None)
        return key, x509.load_pem_x509_certificate(self.ca_path.read_bytes())

    # broker side

    def broker_settings(self, ports: SecurePorts, controller_port: int, host: str) -> dict[str, str]:
        """server.properties entries of a secured node (listeners, TLS, SASL, the authorizer)."""
        password = self.admin_password()
        key_pem = (self.tls_dir / "broker.key").read_text()
        chain_pem = (self.tls_dir / "broker.pem").read_text()
        return {
            "listeners": f"SASL_SSL://{host}:{ports.sasl_ssl},SSL://{host}:{ports.mtls},"
            f"CONTROLLER://{host}:{controller_port}",
            "advertised.listeners": f"SASL_SSL://{host}:{ports.sasl_ssl},SSL://{host}:{ports.mtls}",
            "listener.security.protocol.map": "CONTROLLER:SASL_PLAINTEXT,SASL_SSL:SASL_SSL,SSL:SSL",
            "inter.broker.listener.name": "SASL_SSL",
            "sasl.mechanism.inter.broker.protocol": SCRAM_MECHANISM,
            "listener.name.sasl_ssl.sasl.enabled.mechanisms": SCRAM_MECHANISM,
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": _jaas(_SCRAM_MODULE, ADMIN_USER, password),
            # SCRAM users live in the metadata log, which the controller must read first: PLAIN (a static
            # user) authenticates the broker to its controller
            "sasl.mechanism.controller.protocol": "PLAIN",
            "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
            "listener.name.controller.plain.sasl.jaas.config": _jaas(
                _PLAIN_MODULE, ADMIN_USER, password, f'user_{ADMIN_USER}="{password}"'
            ),
            "listener.name.ssl.ssl.client.auth": "required",
            "ssl.principal.mapping.rules": "RULE:^CN=([^,]+)$/$1/,DEFAULT",
            # PEM inline: a PEM keystore file would need an encrypted key
            "ssl.keystore.type": "PEM",
            "ssl.keystore.key": _properties_escape(key_pem),
            "ssl.keystore.certificate.chain": _properties_escape(chain_pem),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.ca_path),
            "authorizer.class.name": AUTHORIZER,
            "allow.everyone.if.no.acl.found": "false",
            "super.users": f"User:{ADMIN_USER}",
        }

    def format_args(self) -> list[str]:
        """StorageTool arguments that create the admin's SCRAM credential with the cluster."""
        return ["--add-scram", f"{SCRAM_MECHANISM}=[name={ADMIN_USER},password={self.admin_password()}]"]

    # client side

    def sasl_settings(self, username: str, password: str) -> dict[str, str]:
        """librdkafka settings of a SCRAM user on the SASL_SSL listener."""
        return {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": SCRAM_MECHANISM,
            "sasl.username": username,
            "sasl.password": password,
            "ssl.ca.location": str(self.ca_path),
        }

    def admin_settings(self) -> dict[str, str]:
        return self.sasl_settings(ADMIN_USER, self.admin_password())

    def mtls_settings(self, common_name: str) -> dict[str, str]:
        """librdkafka settings of a client certificate on the mTLS listener."""
        cert, key = self.client_certificate(common_name)
        return {
            "security.protocol": "SSL",
            "ssl.ca.location": str(self.ca_path),
            "ssl.certificate.location": str(cert),
            "ssl.key.location": str(key),
        }

    def write_admin_config(self, bootstrap: str) -> Path:
        """A dedupectl config file (``-c`` / ``DEDUPECTL_CONFIG``) that connects as the admin."""
        lines = [f'bootstrap_servers = "{bootstrap}"', "", "[kafka]"]
        lines += [f'"{key}" = "{value}"' for key, value in self.admin_settings().items()]
        _write_private(self.admin_config_path, ("\n".join(lines) + "\n").encode())
        return self.admin_config_path


def add_scram_user(admin_settings: Mapping[str, str], username: str, password: str, timeout_s: float = 15) -> None:
    """Create (or reset) a SCRAM-SHA-512 user through the AdminClient."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    admin = AdminClient(dict(admin_settings))
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, SCRAM_ITERATIONS)
    futures = admin.alter_user_scram_credentials(
        [UserScramCredentialUpsertion(username, info, password.encode())], request_timeout=timeout_s
    )
    try:
        for future in futures.values():
            future.result()
    except KafkaException as error:
        raise LocalBrokerError(f"could not create the SCRAM user {username!r}: {error.args[0].str()}") from error


# --- certificates -------------------------------------------------------------------------------------------


def _new_key():
    from cryptography.hazmat.primitives.asymmetric import ec

    return ec.generate_private_key(ec.SECP256R1())


def _new_ca():
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509.oid import NameOID

    key = _new_key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "dedupectl dev CA")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=CERT_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(cert_sign=True), critical=True)
        .sign(key, hashes.SHA256())
    )
    return key, cert


def _signed_cert(common_name: str, ca_key, ca_cert, *, server: bool):
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    key = _new_key()
    now = datetime.datetime.now(datetime.UTC)
    usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=CERT_DAYS))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(cert_sign=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage, ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
    )
    if server:
        names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return key, builder.sign(ca_key, hashes.SHA256())


def _key_usage(*, cert_sign: bool):
    from cryptography import x509

    return x509.KeyUsage(
        digital_signature=True, content_commitment=False, key_encipherment=not cert_sign, data_encipherment=False,
        key_agreement=False, key_cert_sign=cert_sign, crl_sign=cert_sign, encipher_only=False, decipher_only=False,
    )  # fmt: skip


def _key_pem(key) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _cert_pem(cert) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return cert.public_bytes(serialization.Encoding.PEM)


def _write_private(path: Path, data: bytes) -> None:
    """Write a secret readable by its owner only (created 0600, never briefly world-readable)."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "wb") as file:
        file.write(data)


def _jaas(module: str, username: str, password: str, *extra: str) -> str:
    return " ".join([f'{module} required username="{username}" password="{password}"', *extra]) + ";"


def _properties_escape(pem: str) -> str:
    """A multi-line PEM as one server.properties value (java.util.Properties reads ``\\n`` as a newline)."""
    return pem.strip().replace("\n", "\\n")
