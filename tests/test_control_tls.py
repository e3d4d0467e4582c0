"""TLS for the control APIs (docs/protocol.md, section 7, "TLS"): `ina switch` and `ina ps` with
`--tls-cert/--tls-key` serve https; clients with the CA (`ca_file=` or INA_CA_FILE) verify them;
clients that do not trust the certificate, or speak the other protocol, are refused with what to set
and counted (`control_tls_failed`); bad certificate files stop a server at start; a token-protected
API beyond loopback without TLS warns loudly."""

from __future__ import annotations

import argparse
import datetime
import ipaddress
import logging
import re
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from control_support import OPERATOR_TOKEN, raw, spec

from ina.control.auth import Access
from prometheus_client.parser import text_string_to_metric_families

from ina.cli import main
from ina.control.http import ControlClient, ControlError, ControlTlsError
from ina.control.tls import server_context
from ina.ps import cli as ps_cli
from ina.switch import SwitchConfig
from ina.switch import cli as switch_cli
from ina.switch.server import SwitchServer
from ina.transport.errors import TransportError
from ina.transport.udp_setup import Aggregator

x509 = pytest.importorskip("cryptography.x509", reason="making test certificates needs the 'cryptography' package (the 'test' extra)")
from cryptography.hazmat.primitives import hashes, serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402
from cryptography.x509.oid import NameOID  # noqa: E402

LOOPBACK = ("127.0.0.1", 0)


@dataclass(frozen=True)
class Pki:
    """A CA, a server certificate it signed for 127.0.0.1 (only), and a stranger CA with its key."""

    ca: str
    cert: str
    key: str
    other_ca: str
    other_key: str
    token: str

    def options(self, control: str = "127.0.0.1:0") -> list[str]:
        return ["--listen", "127.0.0.1:0", "--control", control, "--token-file", self.token, "--tls-cert", self.cert, "--tls-key", self.key]


def _private(path: Path, data: bytes) -> str:
    path.write_bytes(data)
    path.chmod(0o600)
    return str(path)


def _pem_key(key: ec.EllipticCurvePrivateKey, password: bytes | None = None) -> bytes:
    encryption = serialization.BestAvailableEncryption(password) if password else serialization.NoEncryption()
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)


def _certificate(name: str, key, issuer: str, issuer_key, ca: bool, ip: str | None = None) -> bytes:  # type: ignore[no-untyped-def]
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (x509.CertificateBuilder()
               .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
               .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
               .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
               .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()), critical=False))  # fmt: skip
    if ca:
        builder = builder.add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                                      data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
                                                      encipher_only=False, decipher_only=False), critical=True)  # fmt: skip
    if ip is not None:
        builder = builder.add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(ip))]), critical=False)
    return builder.sign(issuer_key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Pki:
    folder = tmp_path_factory.mktemp("pki")
    ca_key, key, other_key = (ec.generate_private_key(ec.SECP256R1()) for _ in range(3))
    return Pki(
        ca=_private(folder / "ca.pem", _certificate("ina test CA", ca_key, "ina test CA", ca_key, ca=True)),
        cert=_private(folder / "cert.pem", _certificate("switch", key, "ina test CA", ca_key, ca=False, ip="127.0.0.1")),
        key=_private(folder / "key.pem", _pem_key(key)),
        other_ca=_private(folder / "other-ca.pem", _certificate("another CA", other_key, "another CA", other_key, ca=True)),
        other_key=_private(folder / "other-key.pem", _pem_key(other_key)),
        token=_private(folder / "operator.token", OPERATOR_TOKEN.encode()),
    )


def build(cli, options: list[str]):  # type: ignore[no-untyped-def]
    """The server `ina switch` or `ina ps` would start with `options`."""
    return cli.build(cli.configure(argparse.ArgumentParser()).parse_args(options))


@pytest.fixture
def tls_switch(pki):
    server = build(switch_cli, pki.options())
    yield server
    server.close()


def tls_failed(server, expected: int) -> int:
    """The server's control_tls_failed, once it reaches `expected` (the server counts after the client gave up)."""
    deadline = time.monotonic() + 5
    while server.control.counters()["control_tls_failed"] < expected and time.monotonic() < deadline:
        time.sleep(0.02)
    return server.control.counters()["control_tls_failed"]


@pytest.mark.parametrize("cli", [switch_cli, ps_cli])
def test_a_client_with_the_ca_registers_and_lists_jobs_over_https(cli, pki, monkeypatch):
    server = build(cli, pki.options())
    try:
        client = ControlClient(*server.control_address, token=OPERATOR_TOKEN, ca_file=pki.ca)
        assert client.base.startswith("https://127.0.0.1:")
        client.register(spec(3))
        assert [job["job"] for job in client.jobs()] == [3]
        monkeypatch.setenv("INA_CA_FILE", pki.ca)  # what workers set
        assert ControlClient(*server.control_address, token=OPERATOR_TOKEN).counters()["control_tls_failed"] == 0
    finally:
        server.close()


def test_a_client_that_does_not_trust_the_certificate_is_refused_counted_and_logged_quietly(tls_switch, pki, caplog, capsys):
    host, port = tls_switch.control_address
    with caplog.at_level(logging.INFO, logger="ina.control"):
        for ca_file in (pki.other_ca, "system"):
            with pytest.raises(ControlTlsError, match=r"certificate is not trusted .*: set INA_CA_FILE .* to the CA file that signed it"):
                ControlClient(host, port, token=OPERATOR_TOKEN, ca_file=ca_file).jobs()
        with pytest.raises(ControlTlsError, match="certificate does not name localhost"):  # it names 127.0.0.1 only
            ControlClient("localhost", port, token=OPERATOR_TOKEN, ca_file=pki.ca).jobs()
        assert tls_failed(tls_switch, 3) == 3
    assert tls_switch.jobs() == []
    assert [r.levelname for r in caplog.records if "TLS handshake failed" in r.message] == ["INFO"] * 3
    assert "Traceback" not in capsys.readouterr().err


def test_plain_http_to_an_https_api_is_told_to_set_the_ca_file(tls_switch, monkeypatch):
    address = tls_switch.control_address
    with pytest.raises(ControlTlsError, match="speaks https only.*INA_CA_FILE") as refused:
        ControlClient(*address, token=OPERATOR_TOKEN, ca_file="").health()
    assert refused.value.status == 426
    assert raw(address, "GET", "/health")[0] == 426  # as curl http://... sees it
    monkeypatch.setenv("INA_TOKEN", OPERATOR_TOKEN)
    monkeypatch.delenv("INA_CA_FILE", raising=False)
    with pytest.raises(TransportError, match="switch control API at .* speaks https only.*INA_CA_FILE"):
        Aggregator.configure("switch", control="%s:%d" % address).describe()
    assert tls_failed(tls_switch, 3) == 3


def test_https_to_a_plain_api_is_told_to_unset_the_ca_file(pki, monkeypatch):
    with SwitchServer(SwitchConfig(pool=8, words=4), LOOPBACK, LOOPBACK, access=Access(OPERATOR_TOKEN)) as plain:
        host, port = plain.control_address
        with pytest.raises(ControlTlsError, match="TLS handshake failed .*serves plain http, unset INA_CA_FILE"):
            ControlClient(host, port, token=OPERATOR_TOKEN, ca_file=pki.ca).health()
        monkeypatch.setenv("INA_TOKEN", OPERATOR_TOKEN)
        monkeypatch.setenv("INA_CA_FILE", pki.ca)
        with pytest.raises(TransportError, match="unset INA_CA_FILE"):
            Aggregator.configure("switch", control=f"{host}:{port}").describe()
        assert tls_failed(plain, 2) == 2
        assert ControlClient(host, port, token=OPERATOR_TOKEN, ca_file="").health()["ok"]


def test_a_client_that_stalls_in_its_handshake_does_not_block_the_server(tls_switch, pki):
    tls_switch.control.read_timeout = 1.0
    client = ControlClient(*tls_switch.control_address, token=OPERATOR_TOKEN, ca_file=pki.ca)
    with socket.create_connection(tls_switch.control_address) as stalled:
        stalled.sendall(b"\x16\x03\x01\x02\x00")  # a TLS record header, and then nothing
        began = time.monotonic()
        assert client.health()["ok"]
        assert time.monotonic() - began < 0.9
        assert tls_failed(tls_switch, 1) == 1  # the stalled handshake timed out in its own thread


def test_a_bad_ca_file_stops_the_client_and_the_worker_at_once(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="the CA file .*missing.pem \\(INA_CA_FILE or ca_file=\\)"):
        ControlClient("127.0.0.1", 1, ca_file=str(tmp_path / "missing.pem"))
    monkeypatch.setenv("INA_CA_FILE", str(tmp_path / "missing.pem"))
    with pytest.raises(TransportError, match="INA_CA_FILE"):
        Aggregator.configure("switch")


@pytest.mark.parametrize("case, message", [
    ("missing cert", r"--tls-cert \S+missing.pem: No such file"),
    ("missing key", r"--tls-key \S+missing.pem: No such file"),
    ("another cert's key", r"--tls-key \S+other-key.pem is not the private key of --tls-cert"),
    ("a key as the cert", r"--tls-cert \S+key.pem: not a PEM certificate"),
    ("a cert as the key", r"--tls-key \S+cert.pem: not a PEM private key"),
    ("an encrypted key", r"--tls-key \S+encrypted.pem is encrypted"),
    ("no key", "--tls-cert and --tls-key go together"),
])  # fmt: skip
def test_bad_tls_files_stop_a_server_at_start_naming_the_option(pki, tmp_path, case, message):
    encrypted = _private(tmp_path / "encrypted.pem", _pem_key(ec.generate_private_key(ec.SECP256R1()), b"a passphrase"))
    cert, key = {"missing cert": (str(tmp_path / "missing.pem"), pki.key), "missing key": (pki.cert, str(tmp_path / "missing.pem")),
                 "another cert's key": (pki.cert, pki.other_key), "a key as the cert": (pki.key, pki.key),
                 "a cert as the key": (pki.cert, pki.cert), "an encrypted key": (pki.cert, encrypted), "no key": (pki.cert, None)}[case]  # fmt: skip
    with pytest.raises(ValueError, match=message):
        server_context(cert, key)


@pytest.mark.parametrize("command", [["switch"], ["switch", "--target", "bmv2"], ["switch", "--target", "tofino"], ["ps"]])
def test_the_clis_refuse_a_bad_key_before_serving(command, pki, capsys):
    options = pki.options()
    options[options.index("--tls-key") + 1] = pki.other_key
    assert main(command + options) == 2
    err = capsys.readouterr().err
    assert re.search(r"--tls-key \S+ is not the private key of --tls-cert", err) and "Traceback" not in err


def test_a_token_protected_api_beyond_loopback_without_tls_warns_loudly(pki, capsys, caplog):
    try:
        server = build(switch_cli, pki.options(control="0.0.0.0:0")[:-4])  # no --tls-cert, --tls-key
    except ValueError as error:
        pytest.skip(f"cannot bind 0.0.0.0 here: {error}")
    server.close()
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and "bearer tokens over plain HTTP beyond loopback" in lines[0] and "--tls-cert FILE --tls-key FILE" in lines[0]
    assert [r.levelname for r in caplog.records if "cross the network in clear" in r.message] == ["WARNING"]
    for quiet in (pki.options(control="0.0.0.0:0"), pki.options()[:-4]):  # with TLS; on loopback
        build(switch_cli, quiet).close()
    assert capsys.readouterr().err == ""


def test_the_cli_serves_https_and_says_so(pki):
    process = subprocess.Popen([sys.executable, "-m", "ina.switch", *pki.options()], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        banner = process.stdout.readline()
        match = re.search(r"control https://127\.0\.0\.1:(\d+),", banner)
        assert match, (banner, process.stderr.read() if process.poll() is not None else "")
        assert ControlClient("127.0.0.1", int(match[1]), token=OPERATOR_TOKEN, ca_file=pki.ca).health() == {"role": "switch", "ok": True}
        process.terminate()
        out, err = process.communicate(timeout=10)
    finally:
        process.kill()
    assert process.returncode == 0 and "stopped; counters" in out and "Traceback" not in err, err


def test_metrics_are_scraped_over_https_with_a_scrape_token_and_ina_top_reads_the_same_api(pki, tmp_path, capsys):
    scrape_token = _private(tmp_path / "scrape.token", b"scrape-token-0123456789")
    server = build(switch_cli, [*pki.options(), "--scrape-token-file", scrape_token])
    try:
        operator = ControlClient(*server.control_address, token=OPERATOR_TOKEN, ca_file=pki.ca)
        operator.register(spec(3))
        scraper = ControlClient(*server.control_address, token="scrape-token-0123456789", ca_file=pki.ca)
        families = {family.name: family for family in text_string_to_metric_families(scraper.metrics())}
        assert families["ina_switch_jobs"].samples[0].value == 1
        assert [s.labels["job"] for s in families["ina_switch_job_info"].samples] == ["3"]
        with pytest.raises(ControlError, match="403"):  # a scrape token reads /metrics and /health, nothing else
            scraper.jobs()
        with pytest.raises(ControlTlsError, match="not trusted"):
            ControlClient(*server.control_address, token="scrape-token-0123456789", ca_file=pki.other_ca).metrics()
        address = "%s:%d" % server.control_address
        assert main(["top", "--switch", address, "--ps", "", "--ca-file", pki.ca, "--iterations", "1"]) == 0
        assert "switch " + address + ": refused" in capsys.readouterr().out  # no token in this environment
    finally:
        server.close()
