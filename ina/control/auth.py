"""Authentication of control requests (docs/protocol.md, section 7, "Authentication").

`Access` is what a control server knows: the operator token, the operator policy's tenants, the
scrape token of a monitoring system, and the TLS context its API is served with; it turns an
`Authorization: Bearer <token>` header into a `Principal`, and checks at start that the address
it is served on suits it. Tokens come from files or the environment (`ina.control.credentials`).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
import os
import ssl
import sys
from collections.abc import Mapping

from ina.control.credentials import TOKEN, TOKEN_FILE, read_token_file, token_from_environment
from ina.control.policy import OPEN, OPERATOR, SCRAPER, Policy, Principal
from ina.control.tls import CA_FILE

logger = logging.getLogger("ina.control")

TENANTS = "INA_TENANTS"
SCRAPE_TOKEN_FILE = "INA_SCRAPE_TOKEN_FILE"
ALLOW_UNAUTHENTICATED = "INA_ALLOW_UNAUTHENTICATED"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _digest(token: str) -> bytes:
    """Equal-length values to compare in constant time, whatever the tokens' lengths."""
    return hashlib.sha256(token.encode()).digest()


class Access:
    """Who may use a control API (the operator's token, the policy's tenants, a metrics scraper's
    token, or anyone: open), and the TLS context it is served with (None: plain HTTP).

    >>> access = Access(token="s3cret-operator-token")
    >>> access.authenticate("Bearer s3cret-operator-token").operator, access.authenticate("Bearer guess")
    (True, None)
    """

    def __init__(self, token: str | None = None, policy: Policy | None = None, allow_unauthenticated: bool = False,
                 scrape_token: str | None = None, tls: ssl.SSLContext | None = None) -> None:  # fmt: skip
        if scrape_token is not None and token is None and policy is None:
            raise ValueError(f"a scrape token (--scrape-token-file or {SCRAPE_TOKEN_FILE}) guards nothing on an open control "
                             f"API: give the operator a token (--token-file or {TOKEN_FILE}) or tenants (--tenants) too")  # fmt: skip
        if scrape_token is not None and scrape_token == token:
            raise ValueError("the scrape token must differ from the operator's token: it may read metrics only")
        self._operator = None if token is None else _digest(token)
        self._scraper = None if scrape_token is None else _digest(scrape_token)
        self.policy = policy
        self.allow_unauthenticated = allow_unauthenticated
        self.tls = tls

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] = os.environ, tls: ssl.SSLContext | None = None) -> Access:
        """INA_TOKEN_FILE or INA_TOKEN (the operator token), INA_TENANTS (a policy file), INA_SCRAPE_TOKEN_FILE
        and INA_ALLOW_UNAUTHENTICATED=1: what a server started without explicit settings uses."""
        tenants, scrape = environ.get(TENANTS) or None, environ.get(SCRAPE_TOKEN_FILE) or None
        return cls(token_from_environment(environ), None if tenants is None else Policy(tenants),
                   environ.get(ALLOW_UNAUTHENTICATED, "") not in ("", "0"),
                   None if scrape is None else read_token_file(scrape, "scrape token file"), tls)  # fmt: skip

    @property
    def open(self) -> bool:
        """No token and no policy: every request is the operator's."""
        return self._operator is None and self.policy is None

    def authenticate(self, header: str | None) -> Principal | None:
        """The caller an Authorization header names, or None (401). Compares with every known token."""
        if self.open:
            return OPEN
        scheme, _, token = (header or "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None
        presented = _digest(token.strip())
        found: Principal | None = None
        for digest, principal in ((self._operator, OPERATOR), (self._scraper, SCRAPER)):
            if digest is not None and hmac.compare_digest(presented, digest) and found is None:
                found = principal
        for tenant in self.policy.current() if self.policy is not None else ():
            if hmac.compare_digest(presented, _digest(tenant.token)) and found is None:
                found = Principal(tenant.name, False, tenant)
        return found

    def check_bind(self, host: str, option: str = "--control") -> None:
        """Refuse an open API on an address other than loopback, unless explicitly allowed; warn loudly
        when one that takes tokens is served there without TLS."""
        if is_loopback(host):
            return
        if self.open and not self.allow_unauthenticated:
            raise ValueError(
                f"{option} {host}: refusing to serve an unauthenticated control API beyond loopback; give the operator "
                f"a token ({TOKEN_FILE}=path or --token-file, or {TOKEN}) and/or tenants (--tenants or {TENANTS}), "
                f"or allow it explicitly with --allow-unauthenticated ({ALLOW_UNAUTHENTICATED}=1)"
            )
        if not self.open and self.tls is None:
            _warn_loudly(f"{option} {host}: this control API takes bearer tokens over plain HTTP beyond loopback, so they "
                         f"cross the network in clear; serve it over TLS with --tls-cert FILE --tls-key FILE (and give "
                         f"its clients {CA_FILE})")  # fmt: skip


def _warn_loudly(message: str) -> None:
    """One line on stderr, and a WARNING for the logging handlers there are (without any, logging's
    last resort would print the line a second time)."""
    print(f"ina: warning: {message}", file=sys.stderr, flush=True)
    if logger.hasHandlers():
        logger.warning(message)
