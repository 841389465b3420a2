"""A secured instance of the realstack servers for the tests: SASL_SSL Kafka and authenticated TLS Cassandra.

* :func:`make_ca`: a throwaway certificate authority (``openssl``), a server certificate for 127.0.0.1
  signed by it, and a Java keystore holding that certificate (``keytool``), for both servers.
* :class:`SecuredStack`: one realstack instance (its own ports and data directory) with

  - Kafka: its PLAINTEXT listener kept for the broker itself, plus a ``SASL_SSL`` listener (PLAIN,
    users ``admin``, ``trident``, ``stranger``, ``nodlwrite`` and ``noread``), the KRaft ``StandardAuthorizer`` with
    ``allow.everyone.if.no.acl.found=false`` and ``admin`` as super user;
  - Cassandra: ``PasswordAuthenticator``, ``CassandraAuthorizer`` and required client TLS, through an
    edited copy of its ``cassandra.yaml`` (``-Dcassandra.config``).

The grants of the product's principals are made by the tests (they are what docs/operations.md lists).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tests.realstack import RealStack, _free, find

KEYTOOL = shutil.which("keytool") or "/usr/lib/jvm/java-17-openjdk-amd64/bin/keytool"
STORE_PASSWORD = "store-secret"
KAFKA_USERS = {"admin": "admin-secret", "trident": "trident-secret", "stranger": "stranger-secret",
               "nodlwrite": "nodlwrite-secret", "noread": "noread-secret"}
CASSANDRA_SUPERUSER = ("cassandra", "cassandra")  # PasswordAuthenticator's default superuser


@dataclass(frozen=True)
class Authority:
    """The files of one throwaway CA: its certificate, and a server keystore signed by it."""

    ca_pem: Path
    keystore: Path


def _run(*cmd: str) -> None:
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=120)


def make_ca(folder: Path, name: str, *, server: bool = True) -> Authority:
    """A CA named ``name`` in ``folder`` and (with ``server``) a JKS keystore for 127.0.0.1 signed by it."""
    folder.mkdir(parents=True, exist_ok=True)
    ca_key, ca_pem = folder / f"{name}-ca.key", folder / f"{name}-ca.pem"
    _run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", f"/CN={name} test CA",
         "-keyout", str(ca_key), "-out", str(ca_pem))
    keystore = folder / f"{name}-server.jks"
    if server:
        key, csr, crt, p12 = (folder / f"{name}-server.{e}" for e in ("key", "csr", "pem", "p12"))
        ext = folder / f"{name}-server.ext"
        ext.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
        _run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1", "-keyout", str(key),
             "-out", str(csr))
        _run("openssl", "x509", "-req", "-in", str(csr), "-CA", str(ca_pem), "-CAkey", str(ca_key),
             "-CAcreateserial", "-days", "2", "-extfile", str(ext), "-out", str(crt))
        _run("openssl", "pkcs12", "-export", "-in", str(crt), "-inkey", str(key), "-certfile", str(ca_pem),
             "-name", "server", "-passout", f"pass:{STORE_PASSWORD}", "-out", str(p12))
        _run(KEYTOOL, "-importkeystore", "-srckeystore", str(p12), "-srcstoretype", "PKCS12",
             "-srcstorepass", STORE_PASSWORD, "-destkeystore", str(keystore), "-deststoretype", "JKS",
             "-deststorepass", STORE_PASSWORD, "-noprompt")
    return Authority(ca_pem, keystore)


def _free_port_near(start: int) -> int:
    for port in range(start, start + 500):
        if _free(port):
            return port
    raise RuntimeError("no free port for the SASL_SSL listener")


def kafka_properties(plain_port: int, controller_port: int, sasl_port: int, keystore: Path) -> str:
    """Broker properties appended by realstack's ``KAFKA_EXTRA_CONFIG`` hook (later keys win)."""
    users = " ".join(f'user_{u}="{p}"' for u, p in KAFKA_USERS.items())
    return "\n".join([
        (f"listeners=PLAINTEXT://127.0.0.1:{plain_port},CONTROLLER://127.0.0.1:{controller_port},"
        f"SASL_SSL://127.0.0.1:{sasl_port}"),
        f"advertised.listeners=PLAINTEXT://127.0.0.1:{plain_port},SASL_SSL://127.0.0.1:{sasl_port}",
        "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL",
        "sasl.enabled.mechanisms=PLAIN",
        ("listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule "
        f'required username="admin" password="{KAFKA_USERS["admin"]}" {users};'),
        f"ssl.keystore.location={keystore}",
        "ssl.keystore.type=JKS",
        f"ssl.keystore.password={STORE_PASSWORD}",
        f"ssl.key.password={STORE_PASSWORD}",
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "allow.everyone.if.no.acl.found=false",
        # the broker's own PLAINTEXT and CONTROLLER listeners (loopback, the broker and the fixture) are ANONYMOUS
        "super.users=User:admin;User:ANONYMOUS",
        "auto.create.topics.enable=false",
    ])


def cassandra_yaml(home: Path, data: Path, port: int, keystore: Path) -> str:
    """realstack's ``cassandra.yaml`` with the same instance settings its start.sh writes, plus password
    authentication, role-based authorization and required client TLS."""
    text = (home / "cassandra" / "conf" / "cassandra.yaml").read_text()
    storage = port - 2042
    subs = {
        r"^native_transport_port:.*": f"native_transport_port: {port}",
        r"^storage_port:.*": f"storage_port: {storage}",
        r"^ssl_storage_port:.*": f"ssl_storage_port: {storage + 1}",
        r"^listen_address:.*": "listen_address: 127.0.0.1",
        r"^rpc_address:.*": "rpc_address: 127.0.0.1",
        r"^( *)- seeds:.*": rf'\1- seeds: "127.0.0.1:{storage}"',
        r"^authenticator:.*": "authenticator: PasswordAuthenticator",
        r"^authorizer:.*": "authorizer: CassandraAuthorizer",
        r"^client_encryption_options:\n(?:[ #].*\n|\n)*?    enabled: false\n(?:[ #].*\n)*?    keystore: .*\n"
        r"    keystore_password: .*\n": (f"client_encryption_options:\n    enabled: true\n    optional: false\n"
                                       f"    keystore: {keystore}\n    keystore_password: {STORE_PASSWORD}\n"),
    }
    for pattern, repl in subs.items():
        text, n = re.subn(pattern, repl, text, count=1, flags=re.MULTILINE)
        if n != 1:
            raise RuntimeError(f"cassandra.yaml: no single match for {pattern!r}")
    c = data / "cassandra"
    return text + (f"\ndata_file_directories:\n    - {c}/data\ncommitlog_directory: {c}/commitlog\n"
                   f"saved_caches_directory: {c}/saved_caches\nhints_directory: {c}/hints\n"
                   f"cdc_raw_directory: {c}/cdc_raw\n")


class SecuredStack:
    """Kafka (SASL_SSL on :attr:`sasl_bootstrap`) and Cassandra (auth + TLS on :attr:`cassandra_port`), started
    together in a fresh data directory; :meth:`stop` stops and wipes them."""

    def __init__(self, work: Path) -> None:
        home = find()
        if home is None:
            raise FileNotFoundError("no realstack folder (set REALSTACK_DIR)")
        self.home, self.work = home, work
        self.ca = make_ca(work / "tls", "trusted")
        self.other_ca = make_ca(work / "tls", "untrusted", server=False)
        data = Path(tempfile.mkdtemp(prefix="realstack-secured-"))
        shutil.rmtree(data)  # start.sh creates and marks it, so stop --wipe may remove it whole
        probe = RealStack(home, data)
        ports = probe.ports
        self.sasl_port = _free_port_near(ports["KAFKA_PORT"] + 10)
        self.cassandra_port = ports["CASSANDRA_PORT"]
        yaml_path = work / "cassandra.yaml"
        yaml_path.write_text(cassandra_yaml(home, data, self.cassandra_port, self.ca.keystore))
        env = {
            "KAFKA_EXTRA_CONFIG": kafka_properties(ports["KAFKA_PORT"], ports["KAFKA_PORT"] + 1, self.sasl_port,
                                                   self.ca.keystore),
            "CASSANDRA_JVM_EXTRA_OPTS": f"-Dcassandra.config=file://{yaml_path} "
                                        "-Dcassandra.superuser_setup_delay_ms=0",
        }
        self.stack = RealStack(home, data, ports, extra_env=env)
        self.plain_bootstrap = f"127.0.0.1:{ports['KAFKA_PORT']}"
        self.sasl_bootstrap = f"127.0.0.1:{self.sasl_port}"

    def start(self) -> None:
        """Start Kafka, then Cassandra (start.sh picks each server's Java once per data directory, so not
        side by side); raises if either fails."""
        self.stack.start("kafka")
        self.stack.start("cassandra")

    def stop(self) -> None:
        self.stack.stop(wipe=True)

    def kafka_client(self, user: str = "admin", *, ca: Path | None = None) -> dict[str, str | int | float | bool]:
        """librdkafka settings of ``user`` on the SASL_SSL listener (trusting ``ca``, by default the right CA)."""
        return {"bootstrap.servers": self.sasl_bootstrap, "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
                "sasl.username": user, "sasl.password": KAFKA_USERS.get(user, "wrong"),
                "ssl.ca.location": str(ca or self.ca.ca_pem)}

    def kafka_tools_env(self) -> dict[str, str]:
        java = "/usr/lib/jvm/java-17-openjdk-amd64"
        return {**os.environ, "JAVA_HOME": java} if Path(java).is_dir() else dict(os.environ)

    def kafka_acls(self, *args: str) -> None:
        """``kafka-acls.sh --add ...`` over the broker's own PLAINTEXT listener (a super user there)."""
        subprocess.run([str(self.home / "kafka" / "bin" / "kafka-acls.sh"), "--bootstrap-server",
                        self.plain_bootstrap, "--add", *args], check=True, env=self.kafka_tools_env(),
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=120)
