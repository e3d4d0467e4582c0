"""TLS for the control APIs (docs/protocol.md, section 7, "TLS"), with the standard library's `ssl` only.

Bearer tokens are secrets: beyond loopback they should cross the network encrypted. A server loads
its certificate and key at start (`server_context`), failing with the option to fix; a client speaks
https when it has a CA bundle to verify the server with (`client_context`, INA_CA_FILE), hostname
checking on, so a certificate must name the host or address the clients connect to.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from pathlib import Path

from ina.control.credentials import check_private

CA_FILE = "INA_CA_FILE"
SYSTEM = "system"
"""INA_CA_FILE=system: verify against the default trust store (a publicly trusted certificate)."""


def server_context(cert: str | None, key: str | None) -> ssl.SSLContext | None:
    """The TLS context of `--tls-cert` and `--tls-key` (None when neither is given); ValueError names the option to fix."""
    if cert is None and key is None:
        return None
    if cert is None or key is None:
        raise ValueError("--tls-cert and --tls-key go together: give the certificate and its private key")
    try:
        pem = Path(cert).read_text(errors="replace")
    except OSError as error:
        raise ValueError(f"--tls-cert {cert}: {error.strerror or error}") from None
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cadata=pem)  # parses the certificates alone
    except (ssl.SSLError, ValueError) as error:
        raise ValueError(f"--tls-cert {cert}: not a PEM certificate ({_reason(error)})") from None
    check_private(key, "--tls-key")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(cert, key, password=_refuse_password(key))
    except OSError as error:  # ssl.SSLError included
        if getattr(error, "reason", None) == "KEY_VALUES_MISMATCH":
            raise ValueError(f"--tls-key {key} is not the private key of --tls-cert {cert}") from None
        if isinstance(error, ssl.SSLError):
            raise ValueError(f"--tls-key {key}: not a PEM private key ({_reason(error)})") from None
        raise ValueError(f"--tls-key {key}: {error.strerror or error}") from None
    return context


def client_context(ca_file: str) -> ssl.SSLContext | None:
    """How a client verifies servers: `ca_file` a PEM bundle of the CAs to trust, `system` the default
    trust store, "" none (plain http); ValueError names INA_CA_FILE."""
    if not ca_file:
        return None
    try:
        return ssl.create_default_context() if ca_file == SYSTEM else ssl.create_default_context(cafile=ca_file)
    except OSError as error:  # ssl.SSLError included: a file that holds no certificate
        raise ValueError(f"the CA file {ca_file} ({CA_FILE} or ca_file=): {_reason(error)}") from None


def _refuse_password(key: str) -> Callable[[], bytes]:
    """A password callback that refuses: a server starting unattended has no one to type it."""

    def refuse() -> bytes:
        raise ValueError(f"--tls-key {key} is encrypted; give an unencrypted key (readable by this user only, mode 0600)")

    return refuse


def _reason(error: Exception) -> str:
    return str(getattr(error, "reason", None) or getattr(error, "strerror", None) or error)
