"""The command line: every command's --help has an example and the exit codes; the dispatcher only dispatches."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cassandra import AuthenticationFailed, Unauthorized
from cassandra.cluster import NoHostAvailable

from app.commands import COMMANDS
from states.cassandra.settings import Secret
from tests.commands.helpers import cli

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("argv", [[c] for c in COMMANDS if c != "topics"] + [["topics", "plan"], ["topics", "apply"]])
def test_help_shows_an_example_and_the_exit_codes(argv: list[str]) -> None:
    r = cli(*argv, "--help")
    assert r.code == 0
    assert f"example:\n  python -m app {' '.join(argv)}" in r.out
    for code in ("0  done", "1  failed", "2  bad config", "3  refused", "4  partly done"):
        assert code in r.out


def test_bad_arguments_exit_2_naming_them(tmp_path: Path) -> None:
    r = cli("query", "--config", "x.yaml")
    assert r.code == 2
    assert "--pipeline" in r.err
    r = cli("validate", "--config", str(tmp_path / "missing.yaml"))
    assert r.code == 2
    assert "cannot read config file" in r.err


def test_python_m_app_dispatches_in_a_fresh_process() -> None:
    out = subprocess.run([sys.executable, "-m", "app", "--help"], cwd=ROOT, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0
    assert all(c in out.stdout for c in COMMANDS)


REFUSED_PASSWORD = NoHostAvailable("Unable to connect to any servers", {"10.0.0.1:9042": AuthenticationFailed(
    "Provided username trident and/or password are incorrect")})
NO_GRANT = Unauthorized("User trident has no SELECT permission on <table ks.t>")
AWAY = NoHostAvailable("Unable to connect to any servers", {"10.0.0.1:9042": ConnectionRefusedError(111, "refused")})


@pytest.mark.parametrize(("error", "code", "line"), [
    (REFUSED_PASSWORD, 2, "status: authentication refused by Cassandra at 10.0.0.1:9042: Provided username trident"),
    (NO_GRANT, 2, "status: authorization refused by Cassandra: User trident has no SELECT permission"),
    (AWAY, 1, "status: cannot reach a server: NoHostAvailable: "),
])
def test_a_server_error_is_one_line_and_its_exit_code_never_a_traceback(
        monkeypatch: pytest.MonkeyPatch, error: Exception, code: int, line: str) -> None:
    from app.commands import status

    def refuse(args: Any) -> int:
        raise error

    monkeypatch.setattr(status, "main", refuse)
    r = cli("status", "--config", "missing.yaml")
    assert r.code == code
    assert r.err.startswith(line), r.err
    assert r.err.count("\n") == 1, r.err
    assert "Traceback" not in r.err, r.err


def test_a_bug_shows_its_traceback_with_debug(monkeypatch: pytest.MonkeyPatch) -> None:
    from app.commands import status

    def bug(args: Any) -> int:
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(status, "main", bug)
    with pytest.raises(ZeroDivisionError):
        cli("--debug", "status", "--config", "missing.yaml")
    r = cli("status", "--config", "missing.yaml")  # without --debug: one line naming the error
    assert r.code == 1
    assert "ZeroDivisionError: a bug" in r.err
    assert "Traceback" not in r.err


def test_the_drivers_log_of_a_failed_connection_has_no_traceback(caplog: pytest.LogCaptureFixture) -> None:
    import logging

    from app.service.access import fold_driver_tracebacks

    fold_driver_tracebacks()
    driver = logging.getLogger("cassandra.cluster")
    with caplog.at_level(logging.WARNING, logger="cassandra.cluster"):
        for error in (REFUSED_PASSWORD, AWAY):
            try:
                raise error
            except NoHostAvailable:
                driver.exception("Control connection failed to connect, shutting down Cluster:")
        try:
            raise ZeroDivisionError("a bug in a callback")  # noqa: TRY301  the fault being planted
        except ZeroDivisionError:
            driver.exception("callback failed")
    refused, away, bug = caplog.records
    assert "Provided username trident" in refused.getMessage()
    assert "refused" in away.getMessage()
    for record in (refused, away):
        assert record.exc_info is None
        assert "\n" not in record.getMessage()
        assert "Traceback" not in logging.Formatter().format(record)
    assert bug.exc_info is not None  # anything else keeps its traceback


def test_an_untrusted_cassandra_certificate_is_found_typed_by_a_handshake(tmp_path: Path) -> None:
    """The driver keeps only the text of a failed TLS handshake; asking again with the same TLS settings gets
    the typed error, named as a TLS refusal (a local TLS server whose certificate another CA signed)."""
    import shutil
    import socket
    import ssl
    import threading

    from app.failures.refusals import refusal
    from app.service.access import cassandra_tls_refusal
    from states.cassandra.settings import CassandraSettings, TlsSettings

    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make the test certificates")
    for name in ("server", "other"):
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                        f"/CN={name}", "-keyout", str(tmp_path / f"{name}.key"), "-out", str(tmp_path / f"{name}.pem")],
                       check=True, capture_output=True, timeout=60)
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(tmp_path / "server.pem", tmp_path / "server.key")
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve() -> None:
        conn, _ = listener.accept()
        try:
            server_ctx.wrap_socket(conn, server_side=True).close()
        except (ssl.SSLError, OSError):
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    settings = CassandraSettings(contact_points=("127.0.0.1",), port=port, username="trident", password=Secret("pw"),
                                 tls=TlsSettings(enabled=True, ca_file=str(tmp_path / "other.pem")))
    untrusted = cassandra_tls_refusal(settings)
    thread.join(10)
    listener.close()
    assert untrusted is not None
    found = refusal(untrusted, cassandra_role="trident")
    assert found is not None
    assert found.kind == "TLS"
    assert found.line.startswith(f"TLS refused by Cassandra at 127.0.0.1:{port} for role trident: ")
    assert "CERTIFICATE_VERIFY_FAILED" in found.line
    assert "cassandra.tls.ca_file" in found.line
    assert cassandra_tls_refusal(CassandraSettings(port=port)) is None  # TLS off: nothing to ask


def test_the_folded_log_is_decided_by_the_error_s_type(caplog: pytest.LogCaptureFixture) -> None:
    """A driver error is folded into its line whatever module defines its class; an error from a module whose
    name merely starts with ``cassandra`` keeps its traceback."""
    import logging

    from cassandra import DriverException

    from app.service.access import fold_driver_tracebacks

    class DriverSubclass(DriverException):  # the driver's type, defined in this module
        pass

    stranger: type[Exception] = type("Away", (Exception,), {"__module__": "cassandra_lookalike"})
    fold_driver_tracebacks()
    driver = logging.getLogger("cassandra.cluster")
    with caplog.at_level(logging.WARNING, logger="cassandra.cluster"):
        for error in (DriverSubclass("connection lost"), stranger("a bug in a callback")):
            try:
                raise error
            except (DriverException, stranger):
                driver.exception("failed")
    driver_line, stranger_line = caplog.records
    assert driver_line.exc_info is None
    assert "DriverSubclass: connection lost" in driver_line.getMessage()
    assert stranger_line.exc_info is not None
