"""Authentication of control requests (docs/protocol.md, section 7, "Authentication").

Tokens come from a file or the environment, never from a command line (which other users of the
host can read in /proc). `Access` is what a control server knows: the operator token and the
operator policy's tenants; it turns an `Authorization: Bearer <token>` header into a `Principal`.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
import os
import stat
from collections.abc import Mapping
from pathlib import Path

from ina.control.policy import OPEN, OPERATOR, Policy, Principal

logger = logging.getLogger("ina.control")

TOKEN = "INA_TOKEN"
TOKEN_FILE = "INA_TOKEN_FILE"
TENANTS = "INA_TENANTS"
ALLOW_UNAUTHENTICATED = "INA_ALLOW_UNAUTHENTICATED"


def read_token_file(path: str | os.PathLike[str]) -> str:
    """The token in `path` (surrounding whitespace stripped); warns when others may read the file."""
    path = Path(path)
    try:
        token = path.read_text().strip()
        mode = path.stat().st_mode
    except OSError as error:
        raise ValueError(f"token file {path}: {error.strerror or error}") from None
    except UnicodeDecodeError:
        raise ValueError(f"token file {path}: not text") from None
    if not token:
        raise ValueError(f"token file {path} is empty")
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        logger.warning("token file %s is readable by other users: chmod 600 it", path)
    return token


def token_from_environment(environ: Mapping[str, str] = os.environ) -> str | None:
    """The token named by INA_TOKEN_FILE (a path), else INA_TOKEN, else None."""
    if environ.get(TOKEN_FILE):
        return read_token_file(environ[TOKEN_FILE])
    return environ.get(TOKEN) or None


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
    """Who may use a control API: the operator's token, the policy's tenants, or anyone (open).

    >>> access = Access(token="s3cret-operator-token")
    >>> access.authenticate("Bearer s3cret-operator-token").operator, access.authenticate("Bearer guess")
    (True, None)
    """

    def __init__(self, token: str | None = None, policy: Policy | None = None, allow_unauthenticated: bool = False) -> None:
        self._operator = None if token is None else _digest(token)
        self.policy = policy
        self.allow_unauthenticated = allow_unauthenticated

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] = os.environ) -> Access:
        """INA_TOKEN_FILE or INA_TOKEN (the operator token), INA_TENANTS (a policy file) and
        INA_ALLOW_UNAUTHENTICATED=1: what a server started without explicit settings uses."""
        tenants = environ.get(TENANTS) or None
        return cls(token_from_environment(environ), None if tenants is None else Policy(tenants),
                   environ.get(ALLOW_UNAUTHENTICATED, "") not in ("", "0"))  # fmt: skip

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
        if self._operator is not None and hmac.compare_digest(presented, self._operator):
            found = OPERATOR
        for tenant in self.policy.current() if self.policy is not None else ():
            if hmac.compare_digest(presented, _digest(tenant.token)) and found is None:
                found = Principal(tenant.name, False, tenant)
        return found

    def check_bind(self, host: str, option: str = "--control") -> None:
        """Refuse an open API on an address other than loopback, unless explicitly allowed."""
        if self.open and not self.allow_unauthenticated and not is_loopback(host):
            raise ValueError(
                f"{option} {host}: refusing to serve an unauthenticated control API beyond loopback; give the operator "
                f"a token ({TOKEN_FILE}=path or --token-file, or {TOKEN}) and/or tenants (--tenants or {TENANTS}), "
                f"or allow it explicitly with --allow-unauthenticated ({ALLOW_UNAUTHENTICATED}=1)"
            )
